// test_tolerance_teeth.cpp: every row of the tolerance table catches a planted error.
//
// A bound that nothing can fail is no test. For each row, a realistic bug is planted in the
// computation the row judges (through the reference code wherever it can express the bug)
// and the row must reject the result:
//   decode (same cache), LSE, cross-checks:  the output cast truncating instead of rounding,
//                                            the softmax scale applied twice, the last token
//                                            of each sequence dropped, a wrong page read past
//                                            the first block boundary
//   online-softmax merge:                    a merge that forgets to rescale one partial
//   decode vs the original data:             an encoder one mantissa bit short (error twice
//                                            as large: what rounding toward zero does), FP4
//                                            nibbles swapped, a pool scale applied twice
//   round trip:                              the same one-bit-short encoder; truncation for
//                                            bf16 / fp16; one ulp off for the lossless rows
//   exact rows (quant bytes, append):        one differing byte
//   compressor:                              the window start off by one token
//   decode-step logits (every format, every  another weight seed, a RoPE base of 500, one
//   depth row):                              layer left out
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "reference/attention/attention.h"
#include "reference/attention/paged_case.h"
#include "reference/dsv4/compressor.h"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "reference/quant/schemes.h"
#include "reference/synth/synth.h"
#include "reference/step/decode_step.h"
#include "tests/common/paged_fixtures.h"
#include "tests/common/test_env.h"

namespace kvlab {
namespace {

bool rejects(const std::vector<float>& out, const std::vector<float>& ref, const Tolerance& t) {
  ErrorStats s;
  return !check(out, ref, t, &s);
}

float round_toward_zero(double x, DType d) {
  const float r = ref::round_to_dtype(x, d);
  if (std::fabs(double(r)) <= std::fabs(x) || d == DType::kF32) return r;
  // one code toward zero (bf16 and fp16 codes are sign-magnitude)
  const uint16_t code = ref::round_to_16bit_code(x, d);
  const uint16_t down = static_cast<uint16_t>(code - 1);
  return d == DType::kBF16 ? bf16_bits_to_float(down) : fp16_bits_to_float(down);
}

// Exact (float64) decode of a case, with optional planted changes to its arguments.
struct Decoded {
  std::vector<double> o, lse;
};
Decoded decode_exact(ref::PagedCase& c, float sm_scale_factor = 1.0f,
                     const std::vector<int32_t>* lens = nullptr,
                     const std::vector<int32_t>* table = nullptr) {
  DecodeArgs a = c.decode_args(nullptr, nullptr);
  a.sm_scale = c.sm_scale * sm_scale_factor;
  if (lens) a.seq_lens = lens->data();
  if (table) a.block_table = table->data();
  Decoded d;
  d.o.resize(static_cast<size_t>(c.o_elements()));
  d.lse.resize(static_cast<size_t>(c.lse_elements()));
  ref::decode_attention_exact(a, d.o.data(), d.lse.data());
  return d;
}

std::vector<float> rounded(const std::vector<double>& x, DType d, bool truncate = false) {
  std::vector<float> o(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    o[i] = truncate ? round_toward_zero(x[i], d) : ref::round_to_dtype(x[i], d);
  return o;
}

// The planted decode bugs, each as exact outputs of the buggy computation.
struct DecodeBugs {
  Decoded good, scale_twice, dropped_token, wrong_page;
};
DecodeBugs decode_bugs(ref::PagedCase& c) {
  DecodeBugs b;
  b.good = decode_exact(c);
  b.scale_twice = decode_exact(c, c.sm_scale);
  std::vector<int32_t> lens = c.seq_lens;
  for (auto& l : lens) l = l > 0 ? l - 1 : 0;
  b.dropped_token = decode_exact(c, 1.0f, &lens);
  // Past the first block boundary, read the first page of the next sequence instead.
  std::vector<int32_t> table = c.block_table;
  const int n = c.num_seqs(), w = c.max_blocks_per_seq;
  for (int s = 0; s < n; ++s)
    if ((c.seq_lens[s] + c.spec.block_size - 1) / c.spec.block_size >= 2)
      table[static_cast<size_t>(s) * w + 1] = c.block_table[static_cast<size_t>((s + 1) % n) * w];
  b.wrong_page = decode_exact(c, 1.0f, nullptr, &table);
  return b;
}

ref::PagedCase small_case(const char* name, KvFormat f, DType qd) {
  ref::PagedCaseSpec s = test::seeded_spec(name, KvLayout::kNHD, f, qd);
  s.seq_lens = {1, 2, 7, 17, 33, 100, 600};
  return ref::make_paged_case(s);
}

TEST(ToleranceTeeth, DecodeRowsRejectPlantedDecodeBugs) {
  for (DType qd : {DType::kBF16, DType::kF16}) {
    ref::PagedCase c = small_case("teeth.decode", KvFormat::kBF16, qd);
    const DecodeBugs b = decode_bugs(c);
    const std::vector<float> ref_o = rounded(b.good.o, qd),
                             ref_lse = rounded(b.good.lse, DType::kF32);
    // The GPU rows: the same cache, the output rounded to the Q dtype.
    // (the prefill rows bound the same per-row computation: a prefill's last query row is
    // this decode)
    std::vector<Tolerance> same_cache = {tolerance(Op::kDecodeAttention, KvFormat::kBF16, qd),
                                         tolerance(Op::kPrefillAttention, KvFormat::kBF16, qd)};
    for (KvFormat lossless : {KvFormat::kBF16, KvFormat::kFP16})
      if (lossless == KvFormat::kFP16 || qd == DType::kBF16)
        same_cache.push_back(tolerance(Op::kDecodeAttentionVsBf16, lossless, qd));
    for (const Tolerance& t : same_cache) {
      SCOPED_TRACE(std::string(to_string(qd)) + ": " + t.why);
      EXPECT_FALSE(rejects(ref_o, ref_o, t));
      // A truncating bf16 cast fails the NMSE bound. The f16 rows admit 1-ulp disagreements on
      // up to half the elements (their reason), which a truncating f16 cast stays inside: the
      // GPU measurement decides whether they can come down.
      if (qd == DType::kBF16)
        EXPECT_TRUE(rejects(rounded(b.good.o, qd, /*truncate=*/true), ref_o, t))
            << "truncating cast";
      EXPECT_TRUE(rejects(rounded(b.scale_twice.o, qd), ref_o, t)) << "sm_scale twice";
      EXPECT_TRUE(rejects(rounded(b.dropped_token.o, qd), ref_o, t)) << "last token dropped";
      EXPECT_TRUE(rejects(rounded(b.wrong_page.o, qd), ref_o, t)) << "wrong page";
    }
    const Tolerance lse = tolerance(Op::kDecodeLse, KvFormat::kBF16, qd);
    EXPECT_TRUE(rejects(rounded(b.scale_twice.lse, DType::kF32), ref_lse, lse)) << "lse scale";
    EXPECT_TRUE(rejects(rounded(b.dropped_token.lse, DType::kF32), ref_lse, lse)) << "lse token";
    EXPECT_TRUE(rejects(rounded(b.wrong_page.lse, DType::kF32), ref_lse, lse)) << "lse page";
    // Reference cross-checks: two float64 computations rounded to f32 / the Q dtype.
    for (DType d : {DType::kF32, qd}) {
      const Tolerance t = tolerance(Op::kReferenceCrossCheck, KvFormat::kBF16, d);
      const std::vector<float> r = rounded(b.good.o, d);
      EXPECT_TRUE(rejects(rounded(b.dropped_token.o, d), r, t)) << "cross-check " << to_string(d);
      EXPECT_TRUE(rejects(rounded(b.wrong_page.o, d), r, t)) << "cross-check " << to_string(d);
    }
  }
}

TEST(ToleranceTeeth, MergeRowRejectsAMergeWithoutRescale) {
  std::mt19937_64 g(test::seed_for("teeth.merge"));
  std::normal_distribution<double> nd;
  const int n = 300, dim = 64;
  std::vector<double> z(n), v(static_cast<size_t>(n) * dim);
  for (auto& x : z) x = 4 * nd(g);
  for (auto& x : v) x = nd(g);
  // two halves, each a (max, sum, acc) partial
  auto partial = [&](int b, int e, double* m, double* l, std::vector<double>* acc) {
    *m = -INFINITY;
    for (int j = b; j < e; ++j) *m = std::max(*m, z[j]);
    *l = 0;
    acc->assign(dim, 0.0);
    for (int j = b; j < e; ++j) {
      const double p = std::exp(z[j] - *m);
      *l += p;
      for (int i = 0; i < dim; ++i) (*acc)[i] += p * v[static_cast<size_t>(j) * dim + i];
    }
  };
  double m1, l1, m2, l2;
  std::vector<double> a1, a2;
  partial(0, n / 2, &m1, &l1, &a1);
  partial(n / 2, n, &m2, &l2, &a2);
  const double m = std::max(m1, m2), f1 = std::exp(m1 - m), f2 = std::exp(m2 - m);
  std::vector<float> good(dim), bad(dim);
  for (int i = 0; i < dim; ++i) {
    good[i] = static_cast<float>((a1[i] * f1 + a2[i] * f2) / (l1 * f1 + l2 * f2));
    bad[i] = static_cast<float>((a1[i] + a2[i]) / (l1 + l2));  // partials not rescaled
  }
  ASSERT_NE(m1, m2);
  EXPECT_TRUE(rejects(bad, good, tolerance(Op::kOnlineSoftmaxMerge, KvFormat::kBF16, DType::kF32)));
}

// V's FP4 nibbles swapped in every byte of the pool (the pair order of E2M1 packing).
void swap_v_nibbles(ref::PagedCase* c) {
  for (auto& b : c->v_pool) b = static_cast<uint8_t>((b >> 4) | (b << 4));
}

// An E2M1 encoder that saturates at 4 instead of 6: every V code of magnitude 6 (0x7) is
// stored as 4 (0x6). Only the largest elements of a block change: for MXFP4 (floor scales:
// few blocks reach code 7) the NMSE barely moves and the elementwise bound has to catch it;
// NVFP4 maps every block's amax to 6, so there the NMSE fires too.
void saturate_v_at_4(ref::PagedCase* c) {
  for (auto& b : c->v_pool)
    for (int shift : {0, 4})
      if (((b >> shift) & 0x7) == 0x7) b = static_cast<uint8_t>(b & ~(0x1 << shift));
}

TEST(ToleranceTeeth, VsOriginalRowsRejectPlantedEncoderBugs) {
  for (KvFormat f : all_kv_formats())
    for (DType qd : {DType::kBF16, DType::kF16}) {
      const Tolerance t = tolerance(Op::kDecodeAttentionVsBf16, f, qd);
      const bool lossless = (f == KvFormat::kBF16 && qd == DType::kBF16) || f == KvFormat::kFP16;
      if (lossless) continue;  // the same-cache bound: DecodeRowsRejectPlantedDecodeBugs
      SCOPED_TRACE(to_string(f) + "/" + to_string(qd));
      ref::PagedCase c = small_case("teeth.vs_original", f, qd);
      const std::vector<float> cache = ref::reference_decode(c).o;
      const std::vector<float> orig = ref::reference_decode_original(c).o;
      EXPECT_FALSE(rejects(cache, orig, t)) << "the correct cache must pass";
      // An encoder one mantissa bit short: every quantization error twice as large.
      std::vector<float> doubled(cache.size());
      for (size_t i = 0; i < cache.size(); ++i) doubled[i] = orig[i] + 2 * (cache[i] - orig[i]);
      EXPECT_TRUE(rejects(doubled, orig, t)) << "quantization error doubled";
      if (kv_format_bits(f) == 4) {
        ref::PagedCase s = c;
        swap_v_nibbles(&s);
        EXPECT_TRUE(rejects(ref::reference_decode(s).o, orig, t)) << "nibbles swapped";
        ref::PagedCase sat = c;
        saturate_v_at_4(&sat);
        ErrorStats st;
        EXPECT_FALSE(check(ref::reference_decode(sat).o, orig, t, &st)) << "E2M1 saturating at 4";
        if (f == KvFormat::kMXFP4)
          EXPECT_GT(st.violations, 0)
              << "the elementwise bound itself must fire: " << to_string(st);
      }
      if (kv_format_has_pool_scale(f)) {
        ref::PagedCase s = c;
        s.v_scale = c.v_scale * c.v_scale;  // the pool scale applied twice
        EXPECT_TRUE(rejects(ref::reference_decode(s).o, orig, t)) << "v scale applied twice";
      }
    }
}

// The round-trip rows on the data the tests feed (unit-scale Gaussian for per-tensor scales,
// K-cache-like data otherwise): an encoder one mantissa bit short fails the tensor or a row.
TEST(ToleranceTeeth, RoundTripRowsRejectAnEncoderOneBitShort) {
  const std::vector<std::pair<std::string, KvFormat>> presets = {
      {"fp8_e4m3_per_tensor", KvFormat::kFP8E4M3},
      {"fp8_e5m2_per_tensor", KvFormat::kFP8E5M2},
      {"fp8_e4m3_per_token", KvFormat::kFP8E4M3PerToken},
      {"nvfp4", KvFormat::kNVFP4},
      {"mxfp4", KvFormat::kMXFP4},
      {"mxfp4_hadamard", KvFormat::kMXFP4}};
  const int64_t tokens = 512;
  const int32_t heads = 2, cols = 128;
  for (const auto& [name, f] : presets) {
    const Tolerance t = tolerance(Op::kQuantRoundTrip, f, DType::kF32);
    const ref::QuantScheme s = ref::make_scheme(name);
    const bool per_tensor = name.find("per_tensor") != std::string::npos;
    const std::vector<float> x = ref::synth_kv(ref::synth_preset(
        per_tensor ? "gaussian" : "kcache", tokens, heads, cols, test::seed_for(name.c_str())));
    const std::vector<float> y = s.roundtrip(x.data(), tokens * heads, cols);
    std::vector<float> bad(y.size());
    for (size_t i = 0; i < y.size(); ++i) bad[i] = x[i] + 2 * (y[i] - x[i]);
    auto any_fails = [&](const std::vector<float>& out) {
      ErrorStats st;
      if (!check(out.data(), x.data(), out.size(), t, &st)) return true;
      for (int64_t r = 0; r < tokens * heads; ++r)
        if (!check(out.data() + r * cols, x.data() + r * cols, cols, t, &st)) return true;
      return false;
    };
    EXPECT_FALSE(any_fails(y)) << name << ": the correct round trip must pass";
    EXPECT_TRUE(any_fails(bad)) << name << ": a one-bit-short encoder must fail";
  }
  // bf16 / fp16 from f32: truncation instead of rounding fails the elementwise bound.
  std::mt19937_64 g(test::seed_for("teeth.rt16"));
  std::normal_distribution<float> nd;
  std::vector<double> x(4096);
  for (auto& v : x) v = nd(g);
  for (DType d : {DType::kBF16, DType::kF16}) {
    const KvFormat f = d == DType::kBF16 ? KvFormat::kBF16 : KvFormat::kFP16;
    const std::vector<float> in(x.begin(), x.end());
    EXPECT_FALSE(rejects(rounded(x, d), in, tolerance(Op::kQuantRoundTrip, f, DType::kF32)));
    EXPECT_TRUE(rejects(rounded(x, d, true), in, tolerance(Op::kQuantRoundTrip, f, DType::kF32)))
        << to_string(d) << " truncation";
    // lossless rows: one ulp off anywhere fails
    std::vector<float> same = rounded(x, d), off = same;
    const uint16_t code = static_cast<uint16_t>(ref::round_to_16bit_code(x[17], d) + 1);
    off[17] = d == DType::kBF16 ? bf16_bits_to_float(code) : fp16_bits_to_float(code);
    ASSERT_NE(off[17], same[17]);
    EXPECT_TRUE(rejects(off, same, tolerance(Op::kQuantRoundTrip, f, d))) << to_string(d);
  }
}

TEST(ToleranceTeeth, ExactRowsRejectOneDifferingByte) {
  std::vector<float> a(1000), b;
  std::iota(a.begin(), a.end(), 0.0f);
  b = a;
  b[999] = 998.0f;
  for (Op op : {Op::kQuantBytes, Op::kAppend})
    for (KvFormat f : all_kv_formats()) EXPECT_TRUE(rejects(b, a, tolerance(op, f, DType::kF32)));
}

TEST(ToleranceTeeth, CompressorRowsRejectAWindowOffByOne) {
  std::mt19937_64 g(test::seed_for("teeth.compressor"));
  std::normal_distribution<float> nd;
  for (const auto& [ratio, overlap] : std::vector<std::pair<int, bool>>{{4, true}, {128, false}}) {
    const int dim = 64, width = (overlap ? 2 : 1) * dim, tokens = 4 * ratio + 1;
    std::vector<float> kv(static_cast<size_t>(tokens) * width), gate(kv.size());
    for (auto& v : kv) v = nd(g);
    for (auto& v : gate) v = nd(g);
    const int entries = (tokens - 1) / ratio;
    std::vector<float> good(static_cast<size_t>(entries) * dim), bad(good.size());
    ref::dsv4_compress_oneshot(kv.data(), gate.data(), nullptr, tokens - 1, ratio, dim, overlap,
                               good.data());
    // the window starts one token late
    ref::dsv4_compress_oneshot(kv.data() + width, gate.data() + width, nullptr, tokens - 1, ratio,
                               dim, overlap, bad.data());
    for (KvFormat f : {KvFormat::kBF16, KvFormat::kFP16})
      EXPECT_TRUE(rejects(bad, good, tolerance(Op::kCompressor, f, DType::kF32)))
          << "ratio " << ratio;
  }
}

// Every decode-step row (each format, each depth) rejects a wrong model at nearly every step:
// the tiny preset (2 layers) against another weight seed, a RoPE base of 500 (invisible at
// position 0, so from position 1 on) and the same model with one layer left out.
TEST(ToleranceTeeth, StepLogitRowsRejectAWrongModel) {
  const DecoderConfig good = decoder_preset("tiny");
  DecoderConfig seed = good, rope = good, short_model = good;
  seed.seed = good.seed + 1;
  rope.rope_theta = 500.0f;
  short_model.layers = good.layers - 1;
  for (KvFormat f : all_kv_formats()) {
    ref::StepCacheOptions co;
    co.format = f;
    co.k_scale = co.v_scale = 0.02f;
    const int batch = 2, steps = 12;
    std::vector<std::vector<float>> want;
    {
      ref::DecoderRef a(good, co, batch, steps);
      std::vector<int32_t> table(static_cast<size_t>(batch) * a.blocks_per_seq());
      std::iota(table.begin(), table.end(), 0);
      a.start(batch, table);
      std::mt19937_64 rng(test::seed_for("teeth.step"));
      for (int s = 0; s < steps; ++s) {
        std::vector<int32_t> tok(batch);
        for (auto& x : tok) x = static_cast<int32_t>(rng() % good.vocab);
        a.step(tok);
        want.push_back(a.logits());
      }
    }
    for (const DecoderConfig* wrong : {&seed, &rope, &short_model}) {
      ref::DecoderRef b(*wrong, co, batch, steps);
      std::vector<int32_t> table(static_cast<size_t>(batch) * b.blocks_per_seq());
      std::iota(table.begin(), table.end(), 0);
      b.start(batch, table);
      std::mt19937_64 rng(test::seed_for("teeth.step"));
      std::vector<std::vector<float>> got;
      for (int s = 0; s < steps; ++s) {
        std::vector<int32_t> tok(batch);
        for (auto& x : tok) x = static_cast<int32_t>(rng() % good.vocab);
        b.step(tok);
        got.push_back(b.logits());
      }
      for (const ToleranceRow& r : tolerance_rows()) {
        if (r.op != Op::kDecodeStepLogits || r.format != static_cast<int>(f)) continue;
        int rejected = 0;
        for (int s = 0; s < steps; ++s) rejected += rejects(got[s], want[s], r.tol);
        std::printf("%-12s layers %2d-%-2d %-18s rejected at %d of %d steps\n",
                    to_string(f).c_str(), r.min_layers, r.max_layers,
                    wrong == &seed   ? "other weight seed"
                    : wrong == &rope ? "rope base 500"
                                     : "a layer left out",
                    rejected, steps);
        const int need = wrong == &rope ? steps / 2 : steps;
        EXPECT_GE(rejected, need) << to_string(f) << " layers " << r.min_layers << "-"
                                  << r.max_layers << ": "
                                  << (wrong == &seed   ? "other weight seed"
                                      : wrong == &rope ? "rope base 500"
                                                       : "a layer left out");
      }
    }
  }
}

}  // namespace
}  // namespace kvlab
