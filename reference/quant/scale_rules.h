// scale_rules.h: the scale computations of every kvlab quantizer (host/device).
//
// Every quantizer — the reference schemes (schemes.h), the reference append (append.h)
// and the GPU append/quantize kernels — computes its scales and element codes by calling
// these functions, so a GPU quantizer is byte-exact to the reference by construction.
// Exponents come from float bits (formats.h floor_log2 / ceil_log2 / exp2i), never from
// float casts or log2f; divisions are IEEE round-to-nearest (on the device __fdiv_rn, so
// that --use_fast_math cannot change a byte).
//
// Vocabulary. A group of elements (a token, a 16/32/64-element block, a whole tensor)
// shares one scale s. The stored value of element x is code = encode(x / s); its real value
// is decode(code) * s (an "inverse scale": s multiplies on read).
//
//   amax        max |x| over the group (amax_accumulate), NaN-propagating: a NaN element
//               gives amax = NaN and an infinite one amax = +Inf; either gives the group a
//               NaN (or Inf) scale, so the whole group decodes to NaN. Non-finite input is
//               never hidden — FP4 has no NaN code, so the scale must carry it (formats.h).
//   amax floor  a lower bound applied either to the amax before the scale is derived
//               (AmaxFloorAt::kAmax, DeepSeek's act_quant: max(amax, 1e-4)) or to the
//               derived FP32 scale (AmaxFloorAt::kScale, vLLM's min scaling factor:
//               max(amax / max_finite, floor)). The floor is applied with a NaN-propagating
//               max: a NaN amax stays NaN.
//
// Scale rules (m = max finite of the element format: 448 E4M3, 57344 E5M2, 6 E2M1):
//   exact FP32     s = RN(a / m)                                  (a = amax after the floor)
//   ceil pow2      s = 2^ceil_log2(RN(a / m))  (DeepSeek UE8M0: the smallest power of two
//                  s >= 2^-127 with a / s <= m). A normal quotient RN(a/m) never rounds down
//                  onto a power of two below a/m for these m (tests/slow checks every float);
//                  a zero or subnormal one (amax floor below m * 2^-126) has lost bits, so the
//                  choice between 2^-127 and 2^-126 is then made exactly: 2^-127 iff
//                  a <= m * 2^-127 (and a kScale floor <= 2^-127). Requires m >= 2.
//   OCP MX floor   s = 2^(floor_log2(a) - emax_elem)   (OCP MX v1.0 §6.3; emax_elem = 8 for
//                  E4M3, 15 for E5M2, 2 for E2M1). a / s can exceed m: elements saturate.
//   E4M3-rounded   NVFP4: the block scale is stored as an E4M3 code of RN(RN(a / 6) / t),
//                  t the FP32 tensor scale, satfinite; the element divisor is the FP32
//                  product e4m3_to_float(code) * t (product first, as kv_access.h reads it).
// Power-of-two exponents are clamped into the UE8M0 range [-127, 127] on the low side only
// (a scale at 2^-127 still covers a group whose a/m is smaller); a zero amax (floor 0)
// takes exponent -127; a non-finite amax gives the NaN scale (UE8M0 0xFF, FP32 NaN).
//
// Element quantization (quantize_element): y = x / s (IEEE RN; for s == 0, y = x * 0, i.e.
// ±0 for finite x and NaN for NaN/Inf, since only zeros can be in a group whose scale is
// 0), then the clamp placement, then the encoder with its Saturation mode:
//   ElementClamp::kEncoder         no clamp: the encoder's Saturation decides overflow
//   ElementClamp::kClampThenEncode y is clamped to [-m, m] first (±Inf too; NaN stays NaN,
//                                  unlike fminf/fmaxf which would turn it into ±m); after
//                                  that the Saturation mode only matters for NaN.
#pragma once

#include <cstdint>

#include "reference/core/hostdevice.h"
#include "reference/formats/formats.h"

namespace kvlab {

// Element formats a block-scaled quantizer encodes to.
enum class ElemFormat : int32_t { kFP8E4M3 = 0, kFP8E5M2 = 1, kFP4E2M1 = 2, kBF16 = 3, kFP16 = 4 };

enum class AmaxFloorAt : int32_t { kAmax = 0, kScale = 1 };
enum class ElementClamp : int32_t { kEncoder = 0, kClampThenEncode = 1 };

// The amax floor of every dynamic scale that kvlab::ref::append_kv computes (per-token
// FP8, NVFP4 and MXFP4 blocks), applied on the amax (AmaxFloorAt::kAmax): DeepSeek's
// act_quant constant. Tokens whose amax is below it get the scale of amax = 1e-4.
constexpr float kDefaultAmaxFloor = 1e-4f;

// Max finite value of an element format (what the scale maps the amax to).
KVLAB_HD float elem_max_finite(ElemFormat f) {
  switch (f) {
    case ElemFormat::kFP8E4M3:
      return kE4M3Max;
    case ElemFormat::kFP8E5M2:
      return kE5M2Max;
    case ElemFormat::kFP4E2M1:
      return kE2M1Max;
    case ElemFormat::kBF16:
      return fmt_detail::bits_f32(0x7F7F0000u);
    case ElemFormat::kFP16:
      return kFP16Max;
  }
  return 0.0f;
}

// emax_elem of the OCP MX spec: the exponent of the largest power of two <= max finite.
KVLAB_HD int elem_emax(ElemFormat f) {
  switch (f) {
    case ElemFormat::kFP8E4M3:
      return 8;  // 448 = 1.75 * 2^8
    case ElemFormat::kFP8E5M2:
      return 15;  // 57344 = 1.75 * 2^15
    case ElemFormat::kFP4E2M1:
      return 2;  // 6 = 1.5 * 2^2
    case ElemFormat::kBF16:
      return 127;
    case ElemFormat::kFP16:
      return 15;  // 65504 = 1.999 * 2^15
  }
  return 0;
}

KVLAB_HD int elem_bits(ElemFormat f) {
  switch (f) {
    case ElemFormat::kFP8E4M3:
    case ElemFormat::kFP8E5M2:
      return 8;
    case ElemFormat::kFP4E2M1:
      return 4;
    case ElemFormat::kBF16:
    case ElemFormat::kFP16:
      return 16;
  }
  return 0;
}

namespace scale_detail {

KVLAB_HD bool is_nan(float x) {
  return (fmt_detail::f32_bits(x) & 0x7FFFFFFFu) > 0x7F800000u;
}
KVLAB_HD bool is_finite(float x) {
  return (fmt_detail::f32_bits(x) & 0x7F800000u) != 0x7F800000u;
}
KVLAB_HD float abs_bits(float x) {
  return fmt_detail::bits_f32(fmt_detail::f32_bits(x) & 0x7FFFFFFFu);
}
KVLAB_HD float nan_f32() {
  return fmt_detail::bits_f32(0x7FC00000u);
}

// a / b rounded to nearest even, on the device too (fast-math would approximate `/`).
KVLAB_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
KVLAB_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);  // never contracted into an FMA
#else
  return a * b;
#endif
}

// max(a, floor) that keeps a NaN `a` (the floor is a finite non-negative number).
KVLAB_HD float floor_max(float a, float floor) {
  return (is_nan(a) || a >= floor) ? a : floor;
}

}  // namespace scale_detail

// amax reduction step: returns max(acc, |x|), or the canonical NaN if either is NaN.
// Start from acc = 0. This max is associative and commutative (NaN absorbs), so any
// reduction order (warp shuffles) gives the same bits. Not fmaxf: that ignores NaN.
KVLAB_HD float amax_accumulate(float acc, float x) {
  if (scale_detail::is_nan(acc) || scale_detail::is_nan(x)) return scale_detail::nan_f32();
  const float a = scale_detail::abs_bits(x);
  return a > acc ? a : acc;
}

// ------------------------------------------------------------------ FP32 scales
// Exact FP32 rule: s = RN(max(amax, floor) / max_finite)          (floor_at == kAmax)
//                  s = max(RN(amax / max_finite), floor)          (floor_at == kScale)
// A NaN amax gives the canonical NaN (0x7FC00000) on host and device alike (the device
// division would otherwise return 0x7FFFFFFF), so stored scales are byte-identical.
KVLAB_HD float fp32_scale_exact(float amax, float max_finite, float floor, AmaxFloorAt floor_at) {
  const float s = floor_at == AmaxFloorAt::kAmax
                      ? scale_detail::div_rn(scale_detail::floor_max(amax, floor), max_finite)
                      : scale_detail::floor_max(scale_detail::div_rn(amax, max_finite), floor);
  return scale_detail::is_nan(s) ? scale_detail::nan_f32() : s;
}

// The FP8 per-token / per-tensor scale of the DSV4 substrate and vLLM: exact FP32 amax / 448 (E4M3)
// or amax / 57344 (E5M2) with the given floor.
KVLAB_HD float fp8_scale_from_amax(float amax, ElemFormat f, float floor, AmaxFloorAt floor_at) {
  return fp32_scale_exact(amax, elem_max_finite(f), floor, floor_at);
}

// ------------------------------------------------------------------ power-of-two scales
// The exponent e of a power-of-two scale 2^e, or kPow2NaN for a non-finite amax.
constexpr int kPow2NaN = 1000;
constexpr int kPow2MinExp = -127;  // UE8M0 code 0
constexpr int kPow2MaxExp = 127;   // UE8M0 code 254

// DeepSeek ceil rule: e = ceil_log2(RN(a / max_finite)), a = amax after the floor (a
// kScale floor applies to RN(amax / max_finite) before the ceil).
KVLAB_HD int pow2_exp_ceil(float amax, float max_finite, float floor, AmaxFloorAt floor_at) {
  const float s = fp32_scale_exact(amax, max_finite, floor, floor_at);
  if (!scale_detail::is_finite(s)) return kPow2NaN;
  if (s >= exp2i(-126)) return ceil_log2(s);  // a normal quotient: exact enough (see above)
  // Zero or subnormal quotient: decide between 2^-127 and 2^-126 exactly. m * 2^-127 is
  // exact for m >= 2 (a normal float, the product only shifts the exponent).
  const float a = floor_at == AmaxFloorAt::kAmax ? scale_detail::floor_max(amax, floor) : amax;
  const bool fits = a <= scale_detail::mul_rn(max_finite, exp2i(kPow2MinExp)) &&
                    (floor_at == AmaxFloorAt::kAmax || floor <= exp2i(kPow2MinExp));
  return fits ? kPow2MinExp : kPow2MinExp + 1;
}

// OCP MX floor rule: e = floor_log2(a) - emax_elem, a = amax after the floor. A kScale
// floor bounds the resulting scale instead: e = max(e, ceil_log2(floor)) (the smallest
// power of two >= floor).
KVLAB_HD int pow2_exp_ocp_floor(float amax, int emax_elem, float floor, AmaxFloorAt floor_at) {
  const float a = floor_at == AmaxFloorAt::kAmax ? scale_detail::floor_max(amax, floor) : amax;
  if (!scale_detail::is_finite(a)) return kPow2NaN;
  int e = a == 0.0f ? kPow2MinExp : floor_log2(a) - emax_elem;
  if (floor_at == AmaxFloorAt::kScale && floor > 0.0f) {
    const int ef = ceil_log2(floor);
    if (e < ef) e = ef;
  }
  return e < kPow2MinExp ? kPow2MinExp : e;
}

// UE8M0 code of a power-of-two exponent from the two functions above (0xFF for kPow2NaN).
KVLAB_HD uint8_t ue8m0_code_from_exp(int e) {
  if (e == kPow2NaN) return kUE8M0NaN;
  return static_cast<uint8_t>(e + 127);  // e in [-127, 127] by construction
}
// FP32 value of the same scale.
KVLAB_HD float pow2_scale_value(int e) {
  if (e == kPow2NaN) return scale_detail::nan_f32();
  return e == kPow2MinExp ? ue8m0_to_float(0) : exp2i(e);
}

// ------------------------------------------------------------------ NVFP4 (E4M3-rounded)
// FP32 tensor scale of NVFP4's two-level scaling: t = RN(max(amax_tensor, floor) / (6 * 448)),
// so that the largest block scale RN(amax_block / 6) / t lands at most at E4M3's 448.
constexpr float kNVFP4TensorDivisor = kE2M1Max * kE4M3Max;  // 2688, exact

KVLAB_HD float nvfp4_tensor_scale(float amax_tensor, float floor, AmaxFloorAt floor_at) {
  return fp32_scale_exact(amax_tensor, kNVFP4TensorDivisor, floor, floor_at);
}

// E4M3 code of a block scale over elements with max finite m_elem (NVFP4: 6):
// e4m3(RN(RN(a / m_elem) / t)), satfinite; a = block amax after the floor (a kScale floor
// bounds RN(a / m_elem)). A NaN or infinite amax gives the NaN code 0x7F (satfinite would
// otherwise turn +Inf into 448 and hide it). A block scale that rounds to 0 gives code 0:
// the block then decodes to zeros.
KVLAB_HD uint8_t e4m3_block_scale_code(float amax_block, float m_elem, float tensor_scale,
                                       float floor, AmaxFloorAt floor_at) {
  const float per_block = fp32_scale_exact(amax_block, m_elem, floor, floor_at);
  const float q = scale_detail::div_rn(per_block, tensor_scale);
  if (!scale_detail::is_finite(q)) return kE4M3NaN;
  return float_to_e4m3(q, Saturation::kSatFinite);
}
KVLAB_HD uint8_t nvfp4_block_scale_code(float amax_block, float tensor_scale, float floor,
                                        AmaxFloorAt floor_at) {
  return e4m3_block_scale_code(amax_block, kE2M1Max, tensor_scale, floor, floor_at);
}

// The divisor of an NVFP4 element: e4m3_to_float(code) * t in FP32 (kv_access.h order).
KVLAB_HD float nvfp4_element_scale(uint8_t block_code, float tensor_scale) {
  return scale_detail::mul_rn(e4m3_to_float(block_code), tensor_scale);
}

// ------------------------------------------------------------------ elements
// Encode one element of an ElemFormat (FP4: the code in the low nibble).
KVLAB_HD uint16_t encode_elem(float y, ElemFormat f, Saturation sat) {
  switch (f) {
    case ElemFormat::kFP8E4M3:
      return float_to_e4m3(y, sat);
    case ElemFormat::kFP8E5M2:
      return float_to_e5m2(y, sat);
    case ElemFormat::kFP4E2M1:
      return float_to_e2m1(y);
    case ElemFormat::kBF16:
      return float_to_bf16_bits(y, sat);
    case ElemFormat::kFP16:
      return float_to_fp16_bits(y, sat);
  }
  return 0;
}

KVLAB_HD float decode_elem(uint16_t code, ElemFormat f) {
  switch (f) {
    case ElemFormat::kFP8E4M3:
      return e4m3_to_float(static_cast<uint8_t>(code));
    case ElemFormat::kFP8E5M2:
      return e5m2_to_float(static_cast<uint8_t>(code));
    case ElemFormat::kFP4E2M1:
      return e2m1_to_float(static_cast<uint8_t>(code));
    case ElemFormat::kBF16:
      return bf16_bits_to_float(code);
    case ElemFormat::kFP16:
      return fp16_bits_to_float(code);
  }
  return 0.0f;
}

// y = x / s (x * 0 when s == 0), clamped to [-max, max] when asked (NaN kept).
KVLAB_HD float scale_for_encode(float x, float s, ElemFormat f, ElementClamp clamp) {
  float y = s == 0.0f ? scale_detail::mul_rn(x, 0.0f) : scale_detail::div_rn(x, s);
  if (clamp == ElementClamp::kClampThenEncode) {
    const float m = elem_max_finite(f);
    if (y > m) y = m;
    if (y < -m) y = -m;
  }
  return y;
}

// The code of element x under scale s: encode(clamp(x / s)).
KVLAB_HD uint16_t quantize_element(float x, float s, ElemFormat f, Saturation sat,
                                   ElementClamp clamp) {
  return encode_elem(scale_for_encode(x, s, f, clamp), f, sat);
}

// Its real value: decode(code) * s.
KVLAB_HD float dequantize_element(uint16_t code, float s, ElemFormat f) {
  return scale_detail::mul_rn(decode_elem(code, f), s);
}

// ------------------------------------------------------------------ KV-cache formats
// The scale rules of the paged KV formats (kvlab::ref::append_kv, reference/quant/append.h)
// in one place: the reference append, the GPU append kernels and the decode step's fused
// RoPE + append all call these, so they are byte-exact to each other by construction.

// kFP8E4M3PerToken: the FP32 inverse scale of one (token, head) row from its amax.
KVLAB_HD float kv_fp8_token_scale(float amax) {
  return fp8_scale_from_amax(amax, ElemFormat::kFP8E4M3, kDefaultAmaxFloor, AmaxFloorAt::kAmax);
}

// kNVFP4 (E4M3 code, the pool scale as tensor scale) / kMXFP4 (UE8M0 code, OCP floor rule):
// one scale group's stored code and the divisor its elements are encoded with.
struct KvBlockScale {
  uint8_t code;
  float div;
};
KVLAB_HD KvBlockScale kv_fp4_block_scale(bool nvfp4, float amax, float pool_scale) {
  if (nvfp4) {
    const uint8_t c =
        nvfp4_block_scale_code(amax, pool_scale, kDefaultAmaxFloor, AmaxFloorAt::kAmax);
    return {c, nvfp4_element_scale(c, pool_scale)};
  }
  const int e = pow2_exp_ocp_floor(amax, elem_emax(ElemFormat::kFP4E2M1), kDefaultAmaxFloor,
                                   AmaxFloorAt::kAmax);
  return {ue8m0_code_from_exp(e), pow2_scale_value(e)};
}

}  // namespace kvlab
