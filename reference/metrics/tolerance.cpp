// tolerance.cpp: THE tolerance table, one row per (operation, storage format, dtype), each
// with the reason for its numbers. No test body carries a tolerance literal.
//
// Unit roundoffs used below (u = half an ulp, relative): bf16 2^-8, fp16 2^-11, f32 2^-24,
// FP8 E4M3 2^-4, FP8 E5M2 2^-3, FP4 E2M1 2^-2. One ulp relative to the value is at most 2u.
// "Unit-scale data" means what paged_case.h and the synthetic generators produce: Gaussian
// entries with standard deviation 1 (|v| <= 8 in practice), dequantized caches included
// (pool scales map the data's amax onto the format's range).
#include "reference/metrics/tolerance.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "reference/core/error.h"
#include "reference/layout/layout_names.h"

namespace kvlab {
namespace {

constexpr double p2(int e) {
  double r = 1;
  for (int i = 0; i < (e < 0 ? -e : e); ++i) r = e < 0 ? r / 2 : r * 2;
  return r;
}
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kAny = -1;

struct Row {
  Op op;
  int format;  // KvFormat value or kAny
  int dtype;   // DType value or kAny
  Tolerance tol;
};

constexpr int F(KvFormat f) {
  return static_cast<int>(f);
}
constexpr int T(DType d) {
  return static_cast<int>(d);
}

// ---- shared reasons ------------------------------------------------------------------------
const char* kWhyGpuBf16 =
    "fp32 kernel vs float64 reference over the SAME dequantized cache, both rounded to bf16: "
    "pre-rounding values differ by the fp32 error E, so outputs differ by <= 1 bf16 ulp "
    "(<= 2^-7 |ref|) + E; atol 2^-12 bounds E: >= 16x the rms fp32 accumulation error "
    "sqrt(n) u max|v| for n <= 2^15 keys, |v| <= 8, and the worst case n u max|v| for n <= 2^10, "
    "|v| <= 4. nmse 2^-18: 1-ulp disagreements on up to ~1/8 of the elements (all of them "
    "would give ~2^-15); a correct fp32 kernel measured <= 2e-11 (it disagrees on a tiny "
    "fraction), truncating instead of RNE gives ~1e-5 and fails.";
const char* kWhyGpuF16 =
    "fp32 kernel vs float64 reference over the SAME dequantized cache, both rounded to fp16: "
    "<= 1 fp16 ulp (<= 2^-10 |ref|) + the fp32 error E <= 2^-12 (see the bf16 entry); nmse "
    "2^-22: 1-ulp disagreements on up to ~1/2 of the elements (fp16's ulp is 8x finer than "
    "bf16's, so the fp32 error flips more roundings); a correct fp32 kernel measured <= 4e-10.";
const char* kWhyFp32Arith =
    "fp32 arithmetic vs the float64 truth, unrounded f32 output: atol 2^-12 bounds the fp32 "
    "summation/rescale error (see decode_attention bf16); rtol 2^-20 (16 f32 ulps) covers the "
    "output's own rounding and exp/log rounding on large values; nmse 2^-30 is ~16x the rms "
    "error 2^-17 of n <= 2^15 fp32 accumulations.";
const char* kWhyLse =
    "lse = max + log(l) in fp32 vs float64: logits carry the fp32 dot-product error, worst "
    "D u sum|q_i k_i| <= 2^-16 relative for head_dim <= 256 (rtol, also covers extreme logits "
    "like -1e13 where only relative error is meaningful); log(l) adds <= n u (atol 2^-12 as for "
    "the outputs). Keyed by the query dtype; the LSE itself is always f32.";
const char* kWhyCrossF32 =
    "two float64 references of the same math (different summation order: error ~1e-16 rel), "
    "each rounded once to f32: <= 2 f32 half-ulps = 2^-23, rtol 2^-22 for margin; atol 2^-30 "
    "covers float64 cancellation on near-zero outputs; nmse = rtol^2.";
const char* kWhyCrossBf16 =
    "two float64 references of the same math, one rounded to bf16 (RNE: <= 2^-8 relative), "
    "the other to f32 (<= 2^-24): rtol 2^-8 + 2^-22; atol 2^-30 for float64 cancellation; "
    "nmse = rtol^2 (every element within rtol bounds the energy ratio).";
const char* kWhyCrossF16 =
    "two float64 references of the same math, one rounded to fp16 (RNE: <= 2^-11 relative, "
    "<= 2^-25 absolute in the subnormal range), the other to f32: rtol 2^-11 + 2^-22, atol "
    "2^-25 + 2^-30; nmse = rtol^2.";
const char* kWhyExact =
    "byte-exact by contract: both sides call the same KVLAB_HD encode functions with the same "
    "scale rule, so every stored byte (and every dequantized value) must match.";
const char* kWhyCompF32 =
    "fp32 softmax-weighted pooling of <= 128 rows vs the reference: worst case n u max|x| = "
    "2^7 2^-24 2 = 2^-16 absolute for unit-scale data (atol), 2^-16 relative for larger data "
    "(rtol); nmse = (2^-16)^2.";
const char* kWhyCompBf16 =
    "compressed entries rounded to bf16 on both sides: <= 1 bf16 ulp (2^-7 relative) + the fp32 "
    "pooling error 2^-16 (see the f32 entry); nmse 2^-18 as for decode.";
const char* kWhyCompF16 =
    "compressed entries rounded to fp16 on both sides: <= 1 fp16 ulp (2^-10 relative) + the fp32 "
    "pooling error 2^-16; nmse 2^-22 as for decode.";

// Quantized cache vs the original data: SANITY bounds, recorded by sweeps, not accuracy
// claims. With u the element format's unit roundoff, the decode output's relative L2 error
// measured on unit-scale Gaussian data (8 q / 2 kv heads, head_dim 128, lengths 1..3001,
// 3 seeds; amax-derived scales) was about u/2: bf16 storage of fp16 activations 0.0019,
// e4m3 (per tensor and per token) 0.028-0.030, e5m2 0.052-0.063, nvfp4 0.10-0.11, mxfp4
// 0.12-0.13, with max |error| <= 3.3 u. The bounds |out - ref| <= 8 u + u |ref| and
// NMSE <= u^2 sit 4x or more above that and catch a broken dequantization (wrong scale,
// nibble order, layout) by orders of magnitude.
const char* kWhyVsOrigBf16 =
    "sanity bound (fp16 activations stored as bf16, u = 2^-8): measured rel_l2 ~0.0019, max "
    "|err| ~2u; bound 8u + u|ref|, nmse <= u^2.";
const char* kWhyVsOrigE4M3 =
    "sanity bound (FP8 E4M3, u = 2^-4): measured rel_l2 0.028-0.030, max |err| <= 2u; bound "
    "8u + u|ref|, nmse <= u^2.";
const char* kWhyVsOrigE5M2 =
    "sanity bound (FP8 E5M2, u = 2^-3): measured rel_l2 0.052-0.063, max |err| <= 2u; bound "
    "8u + u|ref|, nmse <= u^2.";
const char* kWhyVsOrigFp4 =
    "sanity bound (FP4 E2M1 with block scales, u = 2^-2): measured rel_l2 0.10-0.13, max |err| "
    "<= 3.3u; bound 8u + u|ref|, nmse <= u^2.";

// Full decode step (reference/step/decode_step.h vs gpu/runtime/decode_step_executor.h): logits in
// f32.
const char* kWhyStepLogits =
    "full decode step logits (f32), GPU vs the CPU reference or two GPU variants, teacher-forced "
    "on the same tokens. Both round the same fp32 quantities to bf16 activations and to the "
    "cache format, but their fp32 values differ by accumulation order (~sqrt(K) 2^-24 "
    "relative); where that straddles a rounding boundary one activation or cache code differs "
    "by a step of its format (bf16 2^-8 |x|, FP8 2^-4..2^-3, FP4 2^-2), and the later layers "
    "carry the perturbation to the logits, more of them the deeper the model. Such flips are "
    "rare but unavoidable, so the bound is empirical, for decoders up to the 32-layer, "
    "4096-wide llama3-8b shape; logits have unit scale by construction (std ~1, |logit| < 6), "
    "so it is absolute (rtol 0). Measured: (a) float- vs double-accumulating CPU references, "
    "tiny and small presets (2-3 layers), 32 weight seeds, batch 8, 24 steps: worst |dlogit| "
    "0.024 (bf16), 0.023 (fp16), 0.053 (e4m3), 0.049 (e4m3 per token), 0.099 (e5m2), 0.21 "
    "(nvfp4), 0.15 (mxfp4), worst NMSE 1.5e-5, 1.7e-5, 4.8e-5, 4.9e-5, 7.6e-5, 3.7e-4, 3.8e-4; "
    "(b) on the H100, the eager unfused vs fused step of the llama3-8b shape (other cuBLAS "
    "kernels for the split and the concatenated GEMMs), bf16 cache, batch 1-64, context "
    "256-2048, 16M logits: worst |dlogit| 0.077, rms 0.013, NMSE 1.1e-4..1.8e-4. The 32 layers "
    "raise the rms difference 3.3x over the 2-3-layer presets; the quantized formats' deep "
    "bounds scale their shallow rms by the same factor (the same H100 comparison at context "
    "2048, batch 1-64, then measured 0.065 / NMSE 1.7e-4 for e4m3 per token and 0.073 / "
    "1.7e-4 for nvfp4: the activations' flips dominate). Bounds: 16-bit atol 2^-3 (9.6 rms, "
    "1.6x the worst of 16M Gaussian-tailed samples), nmse 2^-10 (5.4x); e4m3 atol 2^-2, nmse "
    "2^-9; e5m2 atol 2^-1, nmse 2^-8; fp4 atol 1, nmse 2^-6 (1.8-2.9x the extrapolated worst "
    "|dlogit| of 65M logits, 3.7-4.8x the extrapolated NMSE). Greedy tokens are decided where the "
    "top-2 margin exceeds 2 atol; the fp4 bound is too loose to decide any on these "
    "vocabularies. A wrong model fails it: another weight seed at every step, a RoPE base of "
    "500 at every position from 2 on (test_step_reference).";

// ---- the table -------------------------------------------------------------------------------
const Row kRows[] = {
    // GPU decode vs the reference over the same (dequantized) cache: every format reads the
    // same floats through kv_access.h, so the bound does not depend on the format.
    {Op::kDecodeAttention, kAny, T(DType::kBF16), {p2(-12), p2(-7), p2(-18), false, kWhyGpuBf16}},
    {Op::kDecodeAttention, kAny, T(DType::kF16), {p2(-12), p2(-10), p2(-22), false, kWhyGpuF16}},

    {Op::kDecodeLse, kAny, kAny, {p2(-12), p2(-16), p2(-30), false, kWhyLse}},

    {Op::kPrefillAttention, kAny, T(DType::kBF16), {p2(-12), p2(-7), p2(-18), false, kWhyGpuBf16}},
    {Op::kPrefillAttention, kAny, T(DType::kF16), {p2(-12), p2(-10), p2(-22), false, kWhyGpuF16}},
    {Op::kPrefillAttention,
     kAny,
     T(DType::kF32),
     {p2(-12), p2(-20), p2(-30), false, kWhyFp32Arith}},

    {Op::kOnlineSoftmaxMerge,
     kAny,
     T(DType::kF32),
     {p2(-12), p2(-20), p2(-30), false, kWhyFp32Arith}},

    {Op::kReferenceCrossCheck,
     kAny,
     T(DType::kF32),
     {p2(-30), p2(-22), p2(-44), false, kWhyCrossF32}},
    {Op::kReferenceCrossCheck,
     kAny,
     T(DType::kBF16),
     {p2(-30), p2(-8) + p2(-22), (p2(-8) + p2(-22)) * (p2(-8) + p2(-22)), false, kWhyCrossBf16}},
    {Op::kReferenceCrossCheck,
     kAny,
     T(DType::kF16),
     {p2(-25) + p2(-30), p2(-11) + p2(-22), (p2(-11) + p2(-22)) * (p2(-11) + p2(-22)), false,
      kWhyCrossF16}},

    // Quantized-cache decode vs the reference over the ORIGINAL data (activation dtype). Only
    // the lossless storage combinations are tight; the rest are sanity bounds, recorded by
    // sweeps rather than asserted as accuracy claims.
    {Op::kDecodeAttentionVsBf16,
     F(KvFormat::kBF16),
     T(DType::kBF16),
     {p2(-12), p2(-7), p2(-18), false,
      "lossless: bf16 activations stored as bf16 are the original data, so this is the "
      "same-cache bound of decode_attention bf16."}},
    {Op::kDecodeAttentionVsBf16,
     F(KvFormat::kFP16),
     T(DType::kF16),
     {p2(-12), p2(-10), p2(-22), false,
      "lossless: fp16 activations stored as fp16 are the original data, so this is the "
      "same-cache bound of decode_attention f16."}},
    {Op::kDecodeAttentionVsBf16,
     F(KvFormat::kFP16),
     T(DType::kBF16),
     {p2(-12), p2(-7), p2(-18), false,
      "bf16 activations are exact in fp16 except below 2^-14 (fp16 subnormals: <= 2^-25 absolute, "
      "covered by atol) and beyond 65504 (never for unit-scale data): the same-cache bf16 bound."}},
    {Op::kDecodeAttentionVsBf16,
     F(KvFormat::kBF16),
     T(DType::kF16),
     {p2(-5), p2(-8), p2(-16), false, kWhyVsOrigBf16}},
    {Op::kDecodeAttentionVsBf16,
     F(KvFormat::kFP8E4M3),
     kAny,
     {p2(-1), p2(-4), p2(-8), false, kWhyVsOrigE4M3}},
    {Op::kDecodeAttentionVsBf16,
     F(KvFormat::kFP8E4M3PerToken),
     kAny,
     {p2(-1), p2(-4), p2(-8), false, kWhyVsOrigE4M3}},
    {Op::kDecodeAttentionVsBf16,
     F(KvFormat::kFP8E5M2),
     kAny,
     {1, p2(-3), p2(-6), false, kWhyVsOrigE5M2}},
    {Op::kDecodeAttentionVsBf16,
     F(KvFormat::kNVFP4),
     kAny,
     {2, p2(-2), p2(-4), false, kWhyVsOrigFp4}},
    {Op::kDecodeAttentionVsBf16,
     F(KvFormat::kMXFP4),
     kAny,
     {2, p2(-2), p2(-4), false, kWhyVsOrigFp4}},

    // Quantize -> dequantize round trip vs the input (elementwise bound, and nmse = the
    // per-token relative-L2 bound squared: the whole-tensor NMSE is a weighted mean of the
    // per-token ones, so one bound serves both).
    {Op::kQuantRoundTrip,
     F(KvFormat::kBF16),
     T(DType::kBF16),
     {0, 0, 0, false, "bf16 input stored as bf16 is exact."}},
    {Op::kQuantRoundTrip,
     F(KvFormat::kBF16),
     kAny,
     {p2(-134), p2(-8), p2(-16), false,
      "RNE to bf16: <= 2^-8 relative (u), <= 2^-134 absolute (half the smallest bf16 subnormal); "
      "per-token relative L2 <= u."}},
    {Op::kQuantRoundTrip,
     F(KvFormat::kFP16),
     T(DType::kF16),
     {0, 0, 0, false, "fp16 input stored as fp16 is exact."}},
    {Op::kQuantRoundTrip,
     F(KvFormat::kFP16),
     kAny,
     {p2(-25), p2(-11), p2(-22), false,
      "RNE to fp16 (inputs within +-65504): <= 2^-11 relative, <= 2^-25 absolute in the subnormal "
      "range; per-token relative L2 <= 2^-11 for tokens of unit-scale norm."}},
    {Op::kQuantRoundTrip,
     F(KvFormat::kFP8E4M3),
     kAny,
     {kInf, 0, p2(-8) + p2(-16), false,
      "E4M3 after scaling amax onto 448: normal values err <= 2^-4 relative; subnormal ones <= "
      "2^-10 s absolute with s = amax/448, which adds < 2^-16 to the NMSE for head_dim <= 1024. "
      "The elementwise bound scales with each group's scale, so it is not asserted here "
      "(refquant's tests check it per element); NMSE <= 2^-8 + 2^-16."}},
    {Op::kQuantRoundTrip,
     F(KvFormat::kFP8E4M3PerToken),
     kAny,
     {kInf, 0, p2(-8) + p2(-16), false,
      "per-token E4M3: as fp8_e4m3 with s = token amax / 448; NMSE <= 2^-8 + 2^-16 "
      "per token; elementwise bound scale-dependent (checked by refquant's tests)."}},
    {Op::kQuantRoundTrip,
     F(KvFormat::kFP8E5M2),
     kAny,
     {kInf, 0, p2(-6) + p2(-16), false,
      "E5M2 after scaling amax onto 57344: normal values err <= 2^-3 relative (2 mantissa "
      "bits); subnormal contribution < 2^-16; NMSE <= 2^-6 + 2^-16."}},
    {Op::kQuantRoundTrip,
     F(KvFormat::kNVFP4),
     kAny,
     {kInf, 0, 0.1, false,
      "NVFP4: E2M1 normal values err <= 2^-2 relative (2^-4 of the energy); values below one "
      "scale step s err <= s/4 on <= 16 elements against a block amax >= 5.6 s (E4M3-rounded "
      "scale), adding <= 1/31: NMSE <= 2^-4 + 1/31 < 0.1."}},
    {Op::kQuantRoundTrip,
     F(KvFormat::kMXFP4),
     kAny,
     {kInf, 0, 0.1875, false,
      "MXFP4, OCP floor scale (amax/s in [4, 8), values above 6 s clamp: <= 25% relative, within "
      "the 2^-2 bound): 2^-4 of the energy; values below one step s err <= s/4 on <= 32 "
      "elements against amax >= 4 s adds <= 1/8: NMSE <= 0.1875. An orthonormal Hadamard "
      "rotation preserves norms, so the bound holds with it."}},

    {Op::kDecodeStepLogits,
     F(KvFormat::kBF16),
     T(DType::kF32),
     {p2(-3), 0, p2(-10), false, kWhyStepLogits}},
    {Op::kDecodeStepLogits,
     F(KvFormat::kFP16),
     T(DType::kF32),
     {p2(-3), 0, p2(-10), false, kWhyStepLogits}},
    {Op::kDecodeStepLogits,
     F(KvFormat::kFP8E4M3),
     T(DType::kF32),
     {p2(-2), 0, p2(-9), false, kWhyStepLogits}},
    {Op::kDecodeStepLogits,
     F(KvFormat::kFP8E4M3PerToken),
     T(DType::kF32),
     {p2(-2), 0, p2(-9), false, kWhyStepLogits}},
    {Op::kDecodeStepLogits,
     F(KvFormat::kFP8E5M2),
     T(DType::kF32),
     {p2(-1), 0, p2(-8), false, kWhyStepLogits}},
    {Op::kDecodeStepLogits,
     F(KvFormat::kNVFP4),
     T(DType::kF32),
     {1, 0, p2(-6), false, kWhyStepLogits}},
    {Op::kDecodeStepLogits,
     F(KvFormat::kMXFP4),
     T(DType::kF32),
     {1, 0, p2(-6), false, kWhyStepLogits}},

    {Op::kQuantBytes, kAny, kAny, {0, 0, 0, false, kWhyExact}},
    {Op::kAppend, kAny, kAny, {0, 0, 0, false, kWhyExact}},

    {Op::kCompressor,
     F(KvFormat::kBF16),
     T(DType::kF32),
     {p2(-16), p2(-16), p2(-32), false, kWhyCompF32}},
    {Op::kCompressor,
     F(KvFormat::kFP16),
     T(DType::kF32),
     {p2(-16), p2(-16), p2(-32), false, kWhyCompF32}},
    {Op::kCompressor,
     F(KvFormat::kBF16),
     T(DType::kBF16),
     {p2(-16), p2(-7), p2(-18), false, kWhyCompBf16}},
    {Op::kCompressor,
     F(KvFormat::kFP16),
     T(DType::kBF16),
     {p2(-16), p2(-7), p2(-18), false, kWhyCompBf16}},
    {Op::kCompressor,
     F(KvFormat::kBF16),
     T(DType::kF16),
     {p2(-16), p2(-10), p2(-22), false, kWhyCompF16}},
    {Op::kCompressor,
     F(KvFormat::kFP16),
     T(DType::kF16),
     {p2(-16), p2(-10), p2(-22), false, kWhyCompF16}},
};

// Why a combination without a row has none (the Unsupported message).
std::string missing_reason(Op op, KvFormat, DType dtype) {
  switch (op) {
    case Op::kDecodeAttention:
    case Op::kDecodeAttentionVsBf16:
      if (dtype == DType::kF32) return "decode outputs are bf16 or f16 (DecodeArgs::q_dtype)";
      break;
    case Op::kOnlineSoftmaxMerge:
      return "merged softmax states are fp32; outputs rounded to bf16/f16 are checked under "
             "decode_attention";
    case Op::kCompressor:
      return "the compressor's float/16-bit output is compared before quantization (storage "
             "formats bf16/fp16 only); quantized entries are compared byte-exactly under "
             "quant_bytes";
    case Op::kDecodeStepLogits:
      if (dtype != DType::kF32) return "decode-step logits are f32 (the LM head's GEMM output)";
      break;
    default:
      break;
  }
  return "no entry in the table";
}

}  // namespace

const std::vector<Op>& all_ops() {
  static const std::vector<Op> v{Op::kDecodeAttention,    Op::kDecodeAttentionVsBf16,
                                 Op::kDecodeLse,          Op::kPrefillAttention,
                                 Op::kOnlineSoftmaxMerge, Op::kQuantRoundTrip,
                                 Op::kQuantBytes,         Op::kAppend,
                                 Op::kCompressor,         Op::kDecodeStepLogits,
                                 Op::kReferenceCrossCheck};
  return v;
}

std::string to_string(Op op) {
  switch (op) {
    case Op::kDecodeAttention:
      return "decode_attention";
    case Op::kDecodeAttentionVsBf16:
      return "decode_attention_vs_original";
    case Op::kDecodeLse:
      return "decode_lse";
    case Op::kPrefillAttention:
      return "prefill_attention";
    case Op::kOnlineSoftmaxMerge:
      return "online_softmax_merge";
    case Op::kQuantRoundTrip:
      return "quant_round_trip";
    case Op::kQuantBytes:
      return "quant_bytes";
    case Op::kAppend:
      return "append";
    case Op::kCompressor:
      return "compressor";
    case Op::kDecodeStepLogits:
      return "decode_step_logits";
    case Op::kReferenceCrossCheck:
      return "reference_cross_check";
  }
  return "op(" + std::to_string(static_cast<int>(op)) + ")";
}

Tolerance tolerance(Op op, KvFormat format, DType out_dtype) {
  const int f = static_cast<int>(format), d = static_cast<int>(out_dtype);
  KVLAB_REQUIRE(f >= 0 && f < kNumKvFormats, "tolerance: invalid KvFormat value " << f);
  KVLAB_REQUIRE(d >= 0 && d <= 2,
                "tolerance: invalid DType value " << d << " (allowed: f32, bf16, f16)");
  for (const Row& r : kRows)
    if (r.op == op && (r.format == kAny || r.format == f) && (r.dtype == kAny || r.dtype == d))
      return r.tol;
  throw Unsupported("no tolerance for (" + to_string(op) + ", " + to_string(format) + ", " +
                    to_string(out_dtype) + "): " + missing_reason(op, format, out_dtype));
}

bool check(const float* out, const float* ref, size_t n, const Tolerance& tol, ErrorStats* s_out,
           DType ulp_dtype) {
  ErrorStats local;
  ErrorStats& s = s_out ? *s_out : local;
  s = compare(out, ref, n, ulp_dtype);
  s.violations = 0;
  s.worst_index = -1;
  double worst = -1;
  for (size_t i = 0; i < n; ++i) {
    const float o = out[i], r = ref[i];
    double ratio;
    if (!std::isfinite(o) || !std::isfinite(r)) {
      const bool match = (std::isnan(o) && std::isnan(r)) ||
                         (std::isinf(o) && std::isinf(r) && std::signbit(o) == std::signbit(r));
      if (match || tol.allow_nonfinite) continue;
      ratio = kInf;  // a non-finite mismatch ranks worst
      ++s.violations;
    } else {
      const double d = std::fabs(static_cast<double>(o) - r);
      const double bound = tol.atol + tol.rtol * std::fabs(static_cast<double>(r));
      ratio = d == 0 ? 0 : (bound == 0 ? kInf : d / bound);
      if (ratio > 1) ++s.violations;
    }
    if (ratio > worst) {
      worst = ratio;
      s.worst_index = static_cast<int64_t>(i);
    }
  }
  return explain_failure(s, tol).empty();
}

bool check(const std::vector<float>& out, const std::vector<float>& ref, const Tolerance& tol,
           ErrorStats* s, DType ulp_dtype) {
  KVLAB_REQUIRE(out.size() == ref.size(), "check: out has " << out.size()
                                                            << " elements but ref has "
                                                            << ref.size() << " (they must match)");
  return check(out.data(), ref.data(), out.size(), tol, s, ulp_dtype);
}

std::string explain_failure(const ErrorStats& s, const Tolerance& tol) {
  std::ostringstream os;
  if (s.violations > 0)
    os << s.violations << " of " << s.count << " elements exceed atol " << tol.atol << " + rtol "
       << tol.rtol << " * |ref| (worst index " << s.worst_index << ")";
  // nmse = +inf means ||ref|| = 0 with a non-zero difference: the elementwise bound decides.
  if (std::isfinite(s.nmse) && s.nmse > tol.nmse_max)
    os << (os.tellp() > 0 ? "; " : "") << "nmse " << s.nmse << " > " << tol.nmse_max;
  if (!tol.allow_nonfinite && s.mismatched_nonfinite > 0)
    os << (os.tellp() > 0 ? "; " : "") << s.mismatched_nonfinite
       << " non-finite mismatches (nan out/ref " << s.nan_out << "/" << s.nan_ref
       << ", inf out/ref " << s.inf_out << "/" << s.inf_ref << ")";
  return os.str();
}

}  // namespace kvlab
