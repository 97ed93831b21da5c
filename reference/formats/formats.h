// formats.h: bit-exact encode/decode of the number formats kvlab stores KV data in.
//
// Host and device (KVLAB_HD): the reference, the GPU kernels and the tests all convert
// through these functions, so a GPU quantizer that uses them is byte-exact to the
// reference by construction, and one that uses hardware conversions is tested against them.
//
// | format    | layout     | bias | max finite        | specials                               |
// |-----------|------------|------|-------------------|----------------------------------------|
// | FP8 E4M3  | s.eeee.mmm | 7    | 448   (0x7E)      | no Inf; NaN = 0x7F / 0xFF ("fn")       |
// | FP8 E5M2  | s.eeeee.mm | 15   | 57344 (0x7B)      | Inf = 0x7C; NaN = 0x7D..0x7F (+sign)   |
// | FP4 E2M1  | s.ee.m     | 1    | 6     (0x7)       | none; ±{0,.5,1,1.5,2,3,4,6}            |
// | FP16      | IEEE half  | 15   | 65504 (0x7BFF)    | Inf = 0x7C00; NaN exp=31, mant!=0      |
// | BF16      | top half of an IEEE float             | Inf = 0x7F80; NaN exp=255, mant!=0     |
// | UE8M0     | eeeeeeee   | 127  | 2^127 (0xFE)      | no sign, no zero; 0xFF = NaN           |
//
// Encoding is round-to-nearest-even (RNE) with an explicit Saturation mode:
//   kSatFinite      values beyond max finite (after rounding) and ±Inf become ±max finite
//                   (PTX `.satfinite`, the OCP "saturating" cast);
//   kNonSaturating  they become ±Inf where the format has Inf (E5M2, FP16, BF16) and NaN
//                   where it has none (E4M3: 0x7F|sign) — the OCP non-saturating cast.
// NaN inputs encode to the positive canonical NaN (0x7F, 0x7F, 0x7FFF, 0x7FFF for E4M3,
// E5M2, FP16, BF16), as the CUDA conversion intrinsics do. E2M1 has neither Inf nor NaN:
// it always saturates, and NaN encodes to +6 (0x7); block-scaled schemes carry NaN in their
// scale instead (UE8M0 0xFF).
//
// Float32 subnormal inputs are honoured by BF16 (which shares float's exponent range) and
// round to zero in every narrower format (they are far below half its smallest subnormal).
// FP4 codes live in the low 4 bits of a uint8_t; packing two per byte (first element in the
// low nibble) is pack_fp4x2().
#pragma once

#include <cstdint>
#include <cstring>

#include "reference/core/hostdevice.h"

namespace kvlab {

enum class Saturation : uint8_t { kSatFinite = 0, kNonSaturating = 1 };

namespace fmt_detail {

KVLAB_HD uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
#endif
}

KVLAB_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
#endif
}

// RNE of the finite, non-zero float32 magnitude `a` (bits without sign) to a minifloat
// with kExpBits/kManBits/kBias and IEEE-style subnormals. Returns the magnitude code,
// unbounded above: callers compare it with the format's max finite code for overflow.
template <int kExpBits, int kManBits, int kBias>
KVLAB_HD uint32_t round_magnitude(uint32_t a) {
  const int biased = static_cast<int>(a >> 23);
  if (biased == 0) return 0;  // float32 subnormal: below half the target's min subnormal
  const int e = biased - 127;
  const uint32_t sig = (1u << 23) | (a & 0x7FFFFFu);  // value = sig * 2^(e-23)
  constexpr int kEmin = 1 - kBias;                    // exponent of the min normal
  int shift = 23 - kManBits;
  if (e < kEmin) shift += kEmin - e;  // subnormal: fewer mantissa bits
  if (shift >= 25) return 0;          // < half the min subnormal
  const uint32_t q0 = sig >> shift;
  const uint32_t rem = sig & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  const uint32_t q = q0 + ((rem > half || (rem == half && (q0 & 1u))) ? 1u : 0u);
  if (e < kEmin) return q;  // q == 1<<kManBits rounds up into the min normal: same code
  // A carry out of the mantissa (q == 2<<kManBits) bumps the exponent field by itself.
  return (static_cast<uint32_t>(e + kBias) << kManBits) + q - (1u << kManBits);
}

// Decode a minifloat magnitude code (no sign, no specials) to float32, exactly.
template <int kExpBits, int kManBits, int kBias>
KVLAB_HD float decode_magnitude(uint32_t m) {
  const uint32_t ef = m >> kManBits;
  const uint32_t mf = m & ((1u << kManBits) - 1u);
  if (ef == 0) {
    // subnormal: mf * 2^(1 - bias - manbits); exact in float32 for every format here
    float v = static_cast<float>(mf);
    int p = 1 - kBias - kManBits;  // negative
    // multiply by an exact power of two built from its exponent bits
    return v * bits_f32(static_cast<uint32_t>(p + 127) << 23);
  }
  const uint32_t fe = ef - kBias + 127;
  return bits_f32((fe << 23) | (mf << (23 - kManBits)));
}

}  // namespace fmt_detail

// ------------------------------------------------------------------ FP8 E4M3 ("fn")
constexpr float kE4M3Max = 448.0f;
constexpr uint8_t kE4M3MaxCode = 0x7E;
constexpr uint8_t kE4M3NaN = 0x7F;

KVLAB_HD uint8_t float_to_e4m3(float x, Saturation sat) {
  const uint32_t u = fmt_detail::f32_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kE4M3NaN;
  if (a == 0x7F800000u) return sign | (sat == Saturation::kSatFinite ? kE4M3MaxCode : kE4M3NaN);
  uint32_t m = fmt_detail::round_magnitude<4, 3, 7>(a);
  if (m > kE4M3MaxCode) m = (sat == Saturation::kSatFinite) ? kE4M3MaxCode : kE4M3NaN;
  return sign | static_cast<uint8_t>(m);
}

KVLAB_HD float e4m3_to_float(uint8_t c) {
  const uint32_t m = c & 0x7Fu;
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  if (m == 0x7Fu) return fmt_detail::bits_f32(sign | 0x7FC00000u);
  return fmt_detail::bits_f32(fmt_detail::f32_bits(fmt_detail::decode_magnitude<4, 3, 7>(m)) |
                              sign);
}

// ------------------------------------------------------------------ FP8 E5M2
constexpr float kE5M2Max = 57344.0f;
constexpr uint8_t kE5M2MaxCode = 0x7B;
constexpr uint8_t kE5M2Inf = 0x7C;
constexpr uint8_t kE5M2NaN = 0x7F;

KVLAB_HD uint8_t float_to_e5m2(float x, Saturation sat) {
  const uint32_t u = fmt_detail::f32_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kE5M2NaN;
  if (a == 0x7F800000u) return sign | (sat == Saturation::kSatFinite ? kE5M2MaxCode : kE5M2Inf);
  uint32_t m = fmt_detail::round_magnitude<5, 2, 15>(a);
  if (m > kE5M2MaxCode) m = (sat == Saturation::kSatFinite) ? kE5M2MaxCode : kE5M2Inf;
  return sign | static_cast<uint8_t>(m);
}

KVLAB_HD float e5m2_to_float(uint8_t c) {
  const uint32_t m = c & 0x7Fu;
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  if (m == kE5M2Inf) return fmt_detail::bits_f32(sign | 0x7F800000u);
  if (m > kE5M2Inf) return fmt_detail::bits_f32(sign | 0x7FC00000u);
  return fmt_detail::bits_f32(fmt_detail::f32_bits(fmt_detail::decode_magnitude<5, 2, 15>(m)) |
                              sign);
}

// ------------------------------------------------------------------ FP4 E2M1
constexpr float kE2M1Max = 6.0f;
constexpr uint8_t kE2M1MaxCode = 0x7;

// Always saturating (E2M1 has no Inf/NaN); NaN -> +6. Returns the code in the low nibble.
KVLAB_HD uint8_t float_to_e2m1(float x) {
  const uint32_t u = fmt_detail::f32_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 28) & 0x8u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kE2M1MaxCode;
  if (a == 0x7F800000u) return sign | kE2M1MaxCode;
  uint32_t m = fmt_detail::round_magnitude<2, 1, 1>(a);
  if (m > kE2M1MaxCode) m = kE2M1MaxCode;
  return sign | static_cast<uint8_t>(m);
}

KVLAB_HD float e2m1_to_float(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x8u) << 28;
  return fmt_detail::bits_f32(
      fmt_detail::f32_bits(fmt_detail::decode_magnitude<2, 1, 1>(c & 0x7u)) | sign);
}

// Two FP4 codes in one byte: `first` (lower index) in bits 0..3, `second` in bits 4..7.
KVLAB_HD uint8_t pack_fp4x2(uint8_t first, uint8_t second) {
  return static_cast<uint8_t>((first & 0xFu) | ((second & 0xFu) << 4));
}
KVLAB_HD uint8_t fp4_lo(uint8_t byte) {
  return byte & 0xFu;
}
KVLAB_HD uint8_t fp4_hi(uint8_t byte) {
  return byte >> 4;
}

// ------------------------------------------------------------------ FP16 (IEEE binary16)
constexpr float kFP16Max = 65504.0f;

KVLAB_HD uint16_t float_to_fp16_bits(float x, Saturation sat) {
  const uint32_t u = fmt_detail::f32_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7FFF;
  if (a == 0x7F800000u) return sign | (sat == Saturation::kSatFinite ? 0x7BFF : 0x7C00);
  uint32_t m = fmt_detail::round_magnitude<5, 10, 15>(a);
  if (m > 0x7BFFu) m = (sat == Saturation::kSatFinite) ? 0x7BFFu : 0x7C00u;
  return sign | static_cast<uint16_t>(m);
}

KVLAB_HD float fp16_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t m = h & 0x7FFFu;
  if (m == 0x7C00u) return fmt_detail::bits_f32(sign | 0x7F800000u);
  if (m > 0x7C00u) return fmt_detail::bits_f32(sign | 0x7FC00000u | ((m & 0x3FFu) << 13));
  return fmt_detail::bits_f32(fmt_detail::f32_bits(fmt_detail::decode_magnitude<5, 10, 15>(m)) |
                              sign);
}

// Two FP4 E2M1 codes -> one f16x2 word (low half, high half) of their values times 2^-14,
// by moving bits alone: a code's exponent and mantissa bits (0..2) become the half's two
// low exponent bits and its top mantissa bit (bits 9..11), its sign bit 15. E2M1's
// subnormal 0.5 lands on the half subnormal 2^-15 and its normals 2^(e-1)(1+m/2) on
// 2^(e-15)(1+m/2): every value is scaled by exactly 2^-kE2M1HalfShift. The codes are
// nibbles i and i + 4 of w (i = 0..3; nibble j = bits 4j..4j+3), the pairs that a word of
// eight codes gives cheaply (the GPU NVFP4 loaders' dequantization).
//
// A code's sign sits 3 bits above its exponent-mantissa bits and must land 6 above them, so
// a word is first rearranged, once for the even and once for the odd nibbles, such that one
// shift and one mask then place each pair:
//   even = w's bits 0-2 of every byte, and w << 3 elsewhere: code 2k's sign lands 6 above
//          its bits (positions 6, 14, 22, 30); pair 0 is even << 9, pair 2 even << 1;
//   odd  = w >> 3 at bits 1-3 of every byte, and w elsewhere: code 2k+1's bits move down to
//          1-3 of its byte, 6 below its sign in place (7, 15, 23, 31); pair 1 is odd << 8,
//          pair 3 odd itself.
// The other bits of even / odd are garbage that the shift moves off the mask 0x8E008E00.
// Per word of 8 codes: 2 shifts and 2 selects, then <= 1 shift and 1 mask per pair (11
// instructions where a shift and a mask for sign and magnitude each took 16). When the
// loaders decode several pairs of one word, the compiler computes even / odd once.
//
// On the device the select is one lop3 in inline PTX: written in C++, the compiler pushes
// each pair's mask into the select and recomputes even / odd per pair (three instructions
// per pair instead of two).
constexpr int kE2M1HalfShift = 14;
KVLAB_HD uint32_t select_bits(uint32_t mask, uint32_t a, uint32_t b) {  // (a & mask) | (b & ~mask)
#ifdef __CUDA_ARCH__
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xE4;" : "=r"(r) : "r"(a), "r"(b), "r"(mask));
  return r;
#else
  return (a & mask) | (b & ~mask);
#endif
}
KVLAB_HD uint32_t e2m1_pair_to_fp16x2_scaled(uint32_t w, int i) {
  constexpr uint32_t kLow3 = 0x07070707u, kMid3 = 0x0E0E0E0Eu, kHalfBits = 0x8E008E00u;
  if (i % 2 == 0) {
    const uint32_t even = select_bits(kLow3, w, w << 3);
    return (i == 0 ? even << 9 : even << 1) & kHalfBits;
  }
  const uint32_t odd = select_bits(kMid3, w >> 3, w);
  return (i == 1 ? odd << 8 : odd) & kHalfBits;
}

// ------------------------------------------------------------------ BF16
KVLAB_HD uint16_t float_to_bf16_bits(float x, Saturation sat) {
  const uint32_t u = fmt_detail::f32_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7FFF;
  if (a == 0x7F800000u) return sign | (sat == Saturation::kSatFinite ? 0x7F7F : 0x7F80);
  const uint32_t r = u + 0x7FFFu + ((u >> 16) & 1u);  // RNE on the low 16 bits
  uint16_t h = static_cast<uint16_t>(r >> 16);
  if ((h & 0x7FFFu) == 0x7F80u && sat == Saturation::kSatFinite) h = sign | 0x7F7F;
  return h;
}

KVLAB_HD float bf16_bits_to_float(uint16_t h) {
  return fmt_detail::bits_f32(static_cast<uint32_t>(h) << 16);
}

// ------------------------------------------------------------------ UE8M0 (scales)
constexpr uint8_t kUE8M0NaN = 0xFF;

// 2^(c-127); c = 0 is 2^-127 (a float32 subnormal, built from its bits); 0xFF is NaN.
KVLAB_HD float ue8m0_to_float(uint8_t c) {
  if (c == kUE8M0NaN) return fmt_detail::bits_f32(0x7FC00000u);
  if (c == 0) return fmt_detail::bits_f32(0x00400000u);
  return fmt_detail::bits_f32(static_cast<uint32_t>(c) << 23);
}

// UE8M0 code of 2^e, e in [-127, 127]; out-of-range exponents clamp to the ends.
KVLAB_HD uint8_t ue8m0_from_exponent(int e) {
  int c = e + 127;
  if (c < 0) c = 0;
  if (c > 254) c = 254;
  return static_cast<uint8_t>(c);
}

// floor(log2(|x|)) and ceil(log2(|x|)) of a finite non-zero float, from its exponent bits
// (never through a float cast or log2f: those round). Float32 subnormals are handled.
KVLAB_HD int floor_log2(float x) {
  const uint32_t a = fmt_detail::f32_bits(x) & 0x7FFFFFFFu;
  const int biased = static_cast<int>(a >> 23);
  if (biased != 0) return biased - 127;
  // subnormal: value = mant * 2^-149; find the highest set bit
  int hb = 22;
  while (hb > 0 && !((a >> hb) & 1u)) --hb;
  return hb - 149;
}
KVLAB_HD int ceil_log2(float x) {
  const uint32_t a = fmt_detail::f32_bits(x) & 0x7FFFFFFFu;
  const int fl = floor_log2(x);
  const int biased = static_cast<int>(a >> 23);
  const bool pow2 = biased != 0 ? (a & 0x7FFFFFu) == 0 : (a & (a - 1u)) == 0;
  return pow2 ? fl : fl + 1;
}

// Exact 2^e as float32 for e in [-149, 127] (subnormals included).
KVLAB_HD float exp2i(int e) {
  if (e >= -126) return fmt_detail::bits_f32(static_cast<uint32_t>(e + 127) << 23);
  return fmt_detail::bits_f32(1u << (e + 149));
}

}  // namespace kvlab
