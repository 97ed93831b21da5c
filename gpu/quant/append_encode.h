// append_encode.h: the cheap element encoders of the append kernel's vector path
// (gpu/quant/append.cu), host/device so that the CPU tests (tests/cpu/test_append_encode.cpp)
// can check them against kvlab::quantize_element exhaustively. Each one returns exactly
// quantize_element(x, s, f, Saturation::kSatFinite, ElementClamp::kEncoder) = encode(RN(x / s)),
// without the per-element IEEE division the definition prescribes (TUNING.md, P9):
//
// FP8 (E4M3 / E5M2, satfinite), any FP32 scale s with 2^-70 <= |s| <= 2^125:
//   y = RN(1/s) once per scale; per element q0 = RN(x*y) (within ~2 ulps of x/s), then two
//   correction steps r = RN(x - q*s), q = RN(q + r*y) (one FMA each). The first leaves q
//   within ulp/2 + 2^-22 ulp of x/s (its error before rounding is r*(y - 1/s) with
//   |r| <= 2 ulp(q)|s| and |y - 1/s| <= 2^-24|1/s|, plus r's own rounding, 2^-24 r*y), i.e.
//   faithful; from a faithful q, r is exact, and with y = RN(1/s) the second
//   step gives RN(x/s) exactly (Markstein's theorem: Muller et al., Handbook of
//   Floating-Point Arithmetic, division with an FMA). Its hypotheses: no underflow in r
//   (r is a multiple of ulp(q) ulp(s) >= 2^-53 2^-93 when |q| >= 2^-30 and |s| >= 2^-70)
//   and none in r*y, no overflow (|q0| < 2^100). The code of RN(x/s) is then the hardware's
//   satfinite conversion (one cvt per pair). Below |q0| < 2^-30 the quotient and every q
//   are far under half the smallest FP8 subnormal (2^-17): the code is the signed zero of
//   x/s, whose sign q0 carries (RN keeps the sign of x*y), so q takes q0's sign bit (this
//   also keeps -0 for x = -0, which the FMA sum +0 + -0 would lose). |q0| >= 2^100, NaN or
//   Inf: the caller takes the exact path (the definition itself). No boundary case is left
//   to a fallback: an earlier bracket [q0(1-2^-21), q0(1+2^-21)] declined ~1 % of bf16
//   inputs at the bench scale 0.05 (x/s near 25 * 2^k), i.e. nearly every warp (TUNING.md).
//
// FP4 E2M1 (always saturating), any divisor div >= 0 (NVFP4: e4m3 x tensor scale; MXFP4: 2^e):
//   code(RN(z)) for z = |x| / div steps up exactly where RN(z) passes an E2M1 rounding
//   boundary (ties to the even code): code >= 1 iff RN(z) > 0.25, >= 2 iff RN(z) >= 0.75,
//   >= 3 iff > 1.25, >= 4 iff >= 1.75, >= 5 iff > 2.5, >= 6 iff >= 3.5, 7 iff > 5. RN(z) > c
//   iff z > c + ulp(c)/2 and RN(z) >= c iff z > c - ulp-(c)/2 (the FP32 midpoints m_k below:
//   z is never a midpoint, since a 24-bit |x| cannot equal div times an odd 25-bit
//   significand), i.e. iff |x| > div * m_k, and for a float |x| that is iff |x| > T_k =
//   RD(div * m_k) (the product is exact in FP64, then rounded down once). So the code is the
//   number of thresholds below |x|: 7 compares per element, 7 roundings per scale group,
//   no division, exact for every finite x. div == 0 (x * 0: signed zeros) takes T_k = +Inf;
//   a NaN div (NaN/Inf in the group) gives code 7 for every element, as float_to_e2m1(NaN).
#pragma once

#include <cmath>
#include <cstdint>

#include "reference/core/hostdevice.h"
#include "reference/formats/formats.h"
#include "reference/quant/scale_rules.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#endif

namespace kvlab::gpu::append_encode {

// ------------------------------------------------------------------ FP8 via a reciprocal
constexpr float kFp8QMax = 0x1p100f;
constexpr float kFp8SMin = 0x1p-70f, kFp8SMax = 0x1p125f;

// RN(1/s), valid (ok) when 2^-70 <= |s| <= 2^125; otherwise the exact path is taken.
struct Fp8Recip {
  float y;
  bool ok;
};
KVLAB_HD Fp8Recip fp8_recip(float s) {
  const float a = scale_detail::abs_bits(s);
  const bool ok = a >= kFp8SMin && a <= kFp8SMax;  // false for NaN
#if defined(__CUDA_ARCH__)
  return {ok ? __frcp_rn(s) : 0.0f, ok};
#else
  return {ok ? 1.0f / s : 0.0f, ok};
#endif
}

KVLAB_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// RN(x / s) for y = fp8_recip(s).y (see the header; below 2^-30 only its sign and its being
// tiny are exact, which is all the FP8 code needs). Clears `ok` when the caller must take
// the exact path instead (|x / s| >= ~2^100, NaN, Inf).
KVLAB_HD float fp8_quotient(float x, float s, float y, bool& ok) {
  const float q0 = scale_detail::mul_rn(x, y);
  ok = ok && scale_detail::abs_bits(q0) < kFp8QMax;  // false for NaN
  float q = fma_rn(fma_rn(-q0, s, x), y, q0);
  q = fma_rn(fma_rn(-q, s, x), y, q);
  return fmt_detail::bits_f32((fmt_detail::f32_bits(q) & 0x7FFFFFFFu) |
                              (fmt_detail::f32_bits(q0) & 0x80000000u));
}

// The E4M3 value of a code other than 0x7F / 0xFF (NaN), exact; on the device by the
// hardware's e4m3 -> f16 conversion.
KVLAB_HD float e4m3_finite_to_float(uint8_t c) {
#if defined(__CUDA_ARCH__)
  return __half2float(
      __half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), __NV_E4M3)));
#else
  return e4m3_to_float(c);
#endif
}

// The satfinite codes of a (low byte) and b (high byte) for finite a, b (NaN / Inf take
// the caller's exact path). On the device one hardware cvt (RNE, satfinite: formats.h's
// kSatFinite encoder for finite values).
KVLAB_HD uint32_t fp8x2_satfinite(float a, float b, bool e5m2) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE,
                                                        e5m2 ? __NV_E5M2 : __NV_E4M3)) &
         0xFFFFu;
#else
  const Saturation s = Saturation::kSatFinite;
  return e5m2 ? (static_cast<uint32_t>(float_to_e5m2(a, s)) |
                 (static_cast<uint32_t>(float_to_e5m2(b, s)) << 8))
              : (static_cast<uint32_t>(float_to_e4m3(a, s)) |
                 (static_cast<uint32_t>(float_to_e4m3(b, s)) << 8));
#endif
}

// The codes of x0 / s (low byte) and x1 / s (high byte); clears `ok` when the pair must
// take the exact path (then the returned bits are meaningless).
KVLAB_HD uint32_t fp8x2_code_recip(float x0, float x1, float s, float y, bool e5m2, bool& ok) {
  const float q0 = fp8_quotient(x0, s, y, ok), q1 = fp8_quotient(x1, s, y, ok);
  return fp8x2_satfinite(q0, q1, e5m2);
}

// ------------------------------------------------------------------ scales without division
// The KV formats' scale rules (scale_rules.h) divide by constants (448, 6) and by the pool
// scale t; fp8_quotient is RN of those quotients whenever they are >= 2^-30, which the
// amax floor (1e-4) guarantees for a / 448 and a / 6. Each function clears `ok` where the
// caller must use the scale_rules.h function itself (NaN / Inf amax, huge quotients).
constexpr float kRecip448 = 1.0f / 448.0f;  // RN(1/448), folded at compile time
constexpr float kRecip6 = 1.0f / 6.0f;      // RN(1/6)

// kv_fp8_token_scale(amax): RN(max(amax, 1e-4) / 448).
KVLAB_HD float fp8_token_scale_fast(float amax, bool& ok) {
  return fp8_quotient(scale_detail::floor_max(amax, kDefaultAmaxFloor), 448.0f, kRecip448, ok);
}

// kv_fp4_block_scale(true, amax, t) (NVFP4): code = e4m3_satfinite(RN(RN(max(amax, 1e-4) / 6)
// / t)), div = RN(e4m3(code) * t); rt = fp8_recip(t). The quotient by t may be below 2^-30
// (only its tininess is then exact): its code is 0 either way.
KVLAB_HD KvBlockScale nvfp4_block_scale_fast(float amax, float t, const Fp8Recip& rt, bool& ok) {
  ok = ok && rt.ok;
  const float per_block =
      fp8_quotient(scale_detail::floor_max(amax, kDefaultAmaxFloor), 6.0f, kRecip6, ok);
  const float q = fp8_quotient(per_block, t, rt.y, ok);
  const uint8_t code = static_cast<uint8_t>(fp8x2_satfinite(q, 0.0f, false) & 0xFFu);
  return {code, scale_detail::mul_rn(e4m3_finite_to_float(code), t)};
}

// ------------------------------------------------------------------ 32-bit division
// n / d for a divisor fixed per launch (Granlund-Montgomery, round-up multiplier): with
// l = ceil(log2 d), m = floor(2^32 (2^l - d) / d) + 1, t = mulhi(m, n):
// n / d = (t + ((n - t) >> min(l, 1))) >> max(l - 1, 0) for every 32-bit n and d >= 1.
// Five integer instructions instead of the ~20 of a general 32-bit division.
struct U32Div {
  uint32_t m, s1, s2;
};
inline U32Div u32div_make(uint32_t d) {  // host; d >= 1
  uint32_t l = 0;
  while (l < 32 && (uint64_t{1} << l) < d) ++l;
  const uint64_t m = ((uint64_t{1} << 32) * ((uint64_t{1} << l) - d)) / d + 1;
  return {static_cast<uint32_t>(m), l < 1 ? l : 1u, l > 1 ? l - 1 : 0u};
}
KVLAB_HD uint32_t u32div(uint32_t n, const U32Div& v) {
#if defined(__CUDA_ARCH__)
  const uint32_t t = __umulhi(v.m, n);
#else
  const uint32_t t = static_cast<uint32_t>((static_cast<uint64_t>(v.m) * n) >> 32);
#endif
  return (t + ((n - t) >> v.s1)) >> v.s2;
}

// ------------------------------------------------------------------ amax of 16 elements
// amax_accumulate folded from 0 over x[0..15], bit for bit: |x| as integers (the order of
// non-negative floats, NaN above +Inf), then the canonical NaN if any element was NaN.
// One LOP + one integer max per element instead of two NaN tests, a compare and a select.
KVLAB_HD float amax16(const float (&x)[16]) {
  uint32_t m = 0;
  for (int i = 0; i < 16; ++i) {  // unrolled by nvcc (constant trip count)
    const uint32_t a = fmt_detail::f32_bits(x[i]) & 0x7FFFFFFFu;
    m = a > m ? a : m;
  }
  return m > 0x7F800000u ? scale_detail::nan_f32() : fmt_detail::bits_f32(m);
}

// ------------------------------------------------------------------ FP4 E2M1 thresholds
// The FP32 midpoints m_k (25 significant bits: exact in FP64) of the 7 rounding boundaries.
KVLAB_HD constexpr double e2m1_mid(int k) {
  return k == 0   ? 0.25 + 0x1p-26
         : k == 1 ? 0.75 - 0x1p-25
         : k == 2 ? 1.25 + 0x1p-24
         : k == 3 ? 1.75 - 0x1p-24
         : k == 4 ? 2.5 + 0x1p-23
         : k == 5 ? 3.5 - 0x1p-23
                  : 5.0 + 0x1p-22;
}

// RD(div * m) for div >= 0 finite and m = e2m1_mid(k) (the FP64 product is exact).
KVLAB_HD float mul_rd_mid(float div, double m) {
  const double p = static_cast<double>(div) * m;
#if defined(__CUDA_ARCH__)
  return __double2float_rd(p);
#else
  float f = static_cast<float>(p);  // RN (may overflow to +Inf)
  if (static_cast<double>(f) > p) f = std::nextafter(f, -INFINITY);
  return f;
#endif
}

struct E2m1Thresholds {
  float t[7];
  uint32_t nan_codes;  // 0x7 when div is NaN (every code is float_to_e2m1(NaN) = 7), else 0
  bool ok;             // false: div < 0 or infinite: the caller takes the exact path
};

// m_k = e2m1_mid_hi(k) + e2m1_mid_lo(k): a value of <= 3 bits and a power of two.
KVLAB_HD constexpr float e2m1_mid_hi(int k) {
  return k == 0   ? 0.25f
         : k == 1 ? 0.75f
         : k == 2 ? 1.25f
         : k == 3 ? 1.75f
         : k == 4 ? 2.5f
         : k == 5 ? 3.5f
                  : 5.0f;
}
KVLAB_HD constexpr float e2m1_mid_lo(int k) {
  return k == 0   ? 0x1p-26f
         : k == 1 ? -0x1p-25f
         : k == 2 ? 0x1p-24f
         : k == 3 ? -0x1p-24f
         : k == 4 ? 0x1p-23f
         : k == 5 ? -0x1p-23f
                  : 0x1p-22f;
}

KVLAB_HD E2m1Thresholds e2m1_thresholds(float div) {
  E2m1Thresholds th{};
  th.nan_codes = scale_detail::is_nan(div) ? 0x7u : 0u;
  th.ok = th.nan_codes != 0 || (div >= 0.0f && div <= 0x1.fffffep127f);
  const bool zero = !(div > 0.0f);  // 0 (x * 0 = signed zero) or NaN (codes replaced)
#if defined(__CUDA_ARCH__)
  // On the device without FP64: div * m_k = div * hi_k + div * lo_k, the second product
  // exact (a power of two, div >= 2^-99 keeps it normal), and one FMA rounding down gives
  // RD of the exact sum, the same real number as the FP64 product (F2F.F64 conversions run
  // at 1/8 of the FP32 rate on sm_90).
  if (div >= 0x1p-99f && div <= 0x1p125f) {
#pragma unroll
    for (int k = 0; k < 7; ++k) th.t[k] = __fmaf_rd(div, e2m1_mid_hi(k), div * e2m1_mid_lo(k));
    return th;
  }
#endif
  for (int k = 0; k < 7; ++k) th.t[k] = zero ? INFINITY : mul_rd_mid(div, e2m1_mid(k));
  return th;
}

// The E2M1 code (low nibble) of x / div, div the thresholds' divisor.
KVLAB_HD uint32_t e2m1_code(float x, const E2m1Thresholds& th) {
  const float a = scale_detail::abs_bits(x);
  uint32_t c = 0;
  for (int k = 0; k < 7; ++k) c += a > th.t[k] ? 1u : 0u;
  return th.nan_codes ? th.nan_codes : (c | ((fmt_detail::f32_bits(x) >> 28) & 0x8u));
}

// ------------------------------------------------------------------ E2M1 codes of packed bf16
// The kernel's FP4 path from bf16 input keeps the input packed (two bf16 per 32-bit word)
// and compares two elements per instruction. For a bf16 |x| and a positive threshold T_k,
// |x| > T_k iff |x| > RD_bf16(T_k) (no bf16 lies strictly between RD_bf16(T_k) and T_k),
// and RD_bf16 of a positive finite float is its upper 16 bits: one byte permute gives the
// threshold in both halves. The code c = #{k : |x| > T_k} (e2m1_code) is found by a binary
// search instead of 7 compares: the T_k increase with k, so c >= 4 iff |x| > T_3, then
// c >= 4b2 + 2 iff |x| > T_{4b2+1}, then c >= 4b2 + 2b1 + 1 iff |x| > T_{4b2+2b1}: three
// compares per pair (HSET2 masks: 0xFFFF per true half), the thresholds picked bitwise with
// the masks (4 selects), the mask bits and the sign (bit 15 of each half) ORed into place.
// Requires every T_k normal (div >= 2^-99: the device's bf16 compares may flush a subnormal
// |x| to zero, which is below every normal threshold, as |x| itself is) and finite (div <=
// 2^125), div not NaN: the caller checks and takes e2m1_code otherwise.

// Both halves = the upper 16 bits of x (RD to bf16 for a positive finite float x).
KVLAB_HD uint32_t bf16x2_rd_broadcast(float x) {
  const uint32_t b = fmt_detail::f32_bits(x);
#if defined(__CUDA_ARCH__)
  return __byte_perm(b, 0u, 0x3232);
#else
  return (b & 0xFFFF0000u) | (b >> 16);
#endif
}

// 0xFFFF in each half where a > b (bf16 halves; a, b non-NaN).
KVLAB_HD uint32_t bf16x2_gt_mask(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __hgt2_mask(*reinterpret_cast<const __nv_bfloat162*>(&a),
                     *reinterpret_cast<const __nv_bfloat162*>(&b));
#else
  const bool lo = fmt_detail::bits_f32(a << 16) > fmt_detail::bits_f32(b << 16);
  const bool hi = fmt_detail::bits_f32(a & 0xFFFF0000u) > fmt_detail::bits_f32(b & 0xFFFF0000u);
  return (lo ? 0x0000FFFFu : 0u) | (hi ? 0xFFFF0000u : 0u);
#endif
}

// The 7 thresholds of th (th.t[k], k = 0..6) as bf16 pairs.
struct E2m1Bf16Thresholds {
  uint32_t t[7];
};
KVLAB_HD E2m1Bf16Thresholds e2m1_bf16_thresholds(const E2m1Thresholds& th) {
  E2m1Bf16Thresholds b{};
  for (int k = 0; k < 7; ++k) b.t[k] = bf16x2_rd_broadcast(th.t[k]);
  return b;
}

// Whether e2m1_codes_bf16x8 applies to the thresholds of divisor div (see above).
KVLAB_HD bool e2m1_bf16_path_ok(float div) {
  return div >= 0x1p-99f && div <= 0x1p125f;
}

// m ? a : b, bitwise (one LOP3).
KVLAB_HD uint32_t sel_bits(uint32_t m, uint32_t a, uint32_t b) {
  return (m & a) | (~m & b);
}

// The E2M1 codes of the 8 bf16 in w[0..3] (element 2j in the low half of w[j], 2j+1 in the
// high half): element i in nibble i of the result, e2m1_code(x_i, th) for each.
KVLAB_HD uint32_t e2m1_codes_bf16x8(const uint32_t (&w)[4], const E2m1Bf16Thresholds& b) {
  // Pair j's two codes go to bits [4j, 4j+4) and [16+4j, 20+4j): nibbles e0 e2 e4 e6 e1 e3 e5 e7.
  uint32_t out = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int j = 0; j < 4; ++j) {
    const uint32_t a = w[j] & 0x7FFF7FFFu;
    const uint32_t m2 = bf16x2_gt_mask(a, b.t[3]);
    const uint32_t m1 = bf16x2_gt_mask(a, sel_bits(m2, b.t[5], b.t[1]));
    const uint32_t m0 =
        bf16x2_gt_mask(a, sel_bits(m1, sel_bits(m2, b.t[6], b.t[2]), sel_bits(m2, b.t[4], b.t[0])));
    const int s = 4 * j;
    out |= (m2 & (0x00040004u << s)) | (m1 & (0x00020002u << s)) | (m0 & (0x00010001u << s)) |
           ((w[j] >> (12 - s)) & (0x00080008u << s));
  }
  // Interleave the halves: swap bytes 1 and 2 (e0 e2 e1 e3 e4 e6 e5 e7), then nibbles 1 and 2
  // of each 16 bits (e0 e1 e2 e3 e4 e5 e6 e7).
#if defined(__CUDA_ARCH__)
  out = __byte_perm(out, 0u, 0x3120);
#else
  out = (out & 0xFF0000FFu) | ((out >> 8) & 0x0000FF00u) | ((out << 8) & 0x00FF0000u);
#endif
  const uint32_t t = (out ^ (out >> 4)) & 0x00F000F0u;
  return out ^ t ^ (t << 4);
}

}  // namespace kvlab::gpu::append_encode
