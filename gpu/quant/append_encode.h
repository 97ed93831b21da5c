// append_encode.h: the cheap element encoders of the append kernel's vector path
// (gpu/quant/append.cu), host/device so that the CPU tests (tests/cpu/test_append_encode.cpp)
// can check them against kvlab::quantize_element exhaustively. Each one returns exactly
// quantize_element(x, s, f, Saturation::kSatFinite, ElementClamp::kEncoder) = encode(RN(x / s)),
// without the per-element IEEE division the definition prescribes (TUNING.md, P9):
//
// FP8 (E4M3 / E5M2, satfinite), any FP32 scale s with s and 1/s normal:
//   y = RN(1/s) once per scale; per element q0 = RN(x*y), lo = RN(q0*(1-2^-21)),
//   hi = RN(q0*(1+2^-21)), codes of lo and hi in one hardware conversion. With s, 1/s and
//   q0 normal, |RN(x/s) - q0| <= (2^-23 + 2^-24 + 2^-47)|q0| < 2^-21|q0| - ulp(q0)/2, so
//   RN(x/s) lies in [lo, hi] (or [hi, lo]); the encoder is monotone, so equal codes of lo and
//   hi ARE the code of RN(x/s). For |q0| < 2^-100 every one of x/s, lo, hi is below half the
//   smallest FP8 subnormal with the sign of x/s: the codes are that signed zero. Unequal codes
//   (x/s within 2^-21 of a rounding boundary: ~2^-16 of random inputs), |q0| >= 2^100, NaN
//   or Inf: the caller takes the exact path (the definition itself).
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
#include <cuda_fp8.h>
#endif

namespace kvlab::gpu::append_encode {

// ------------------------------------------------------------------ FP8 via a reciprocal
constexpr float kFp8Lo = 1.0f - 0x1p-21f;  // exact
constexpr float kFp8Hi = 1.0f + 0x1p-21f;  // exact
constexpr float kFp8QMax = 0x1p100f;

// RN(1/s), valid (ok) when s and 1/s are normal; otherwise the exact path is taken.
struct Fp8Recip {
  float y;
  bool ok;
};
KVLAB_HD Fp8Recip fp8_recip(float s) {
  const float a = scale_detail::abs_bits(s);
  const bool ok = a >= 0x1p-125f && a <= 0x1p125f;  // false for NaN
#if defined(__CUDA_ARCH__)
  return {ok ? __frcp_rn(s) : 0.0f, ok};
#else
  return {ok ? 1.0f / s : 0.0f, ok};
#endif
}

// The satfinite codes of a (low byte) and b (high byte); any input (the caller discards
// the result of a non-finite one).
KVLAB_HD uint32_t fp8x2_satfinite(float a, float b, bool e5m2) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3)) &
         0xFFFFu;
#else
  const Saturation s = Saturation::kSatFinite;
  return e5m2 ? (static_cast<uint32_t>(float_to_e5m2(a, s)) | (static_cast<uint32_t>(float_to_e5m2(b, s)) << 8))
              : (static_cast<uint32_t>(float_to_e4m3(a, s)) | (static_cast<uint32_t>(float_to_e4m3(b, s)) << 8));
#endif
}

// The code of x / s (y = RN(1/s) from fp8_recip). Accumulates into `miss` a nonzero low
// byte and clears `ok` when this element must take the exact path instead.
KVLAB_HD uint32_t fp8_code_recip(float x, float y, bool e5m2, uint32_t& miss, bool& ok) {
  const float q0 = scale_detail::mul_rn(x, y);
  const float lo = scale_detail::mul_rn(q0, kFp8Lo), hi = scale_detail::mul_rn(q0, kFp8Hi);
  ok = ok && scale_detail::abs_bits(q0) < kFp8QMax;  // false for NaN
  const uint32_t c = fp8x2_satfinite(lo, hi, e5m2);
  miss |= c ^ (c >> 8);  // low byte nonzero: the two codes differ
  return c & 0xFFu;
}

// ------------------------------------------------------------------ FP4 E2M1 thresholds
// The FP32 midpoints m_k (25 significant bits: exact in FP64) of the 7 rounding boundaries.
KVLAB_HD constexpr double e2m1_mid(int k) {
  return k == 0 ? 0.25 + 0x1p-26 : k == 1 ? 0.75 - 0x1p-25 : k == 2 ? 1.25 + 0x1p-24 : k == 3 ? 1.75 - 0x1p-24
       : k == 4 ? 2.5 + 0x1p-23 : k == 5 ? 3.5 - 0x1p-23 : 5.0 + 0x1p-22;
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

KVLAB_HD E2m1Thresholds e2m1_thresholds(float div) {
  E2m1Thresholds th{};
  th.nan_codes = scale_detail::is_nan(div) ? 0x7u : 0u;
  th.ok = th.nan_codes != 0 || (div >= 0.0f && div <= 0x1.fffffep127f);
  const bool zero = !(div > 0.0f);  // 0 (x * 0 = signed zero) or NaN (codes replaced)
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

}  // namespace kvlab::gpu::append_encode
