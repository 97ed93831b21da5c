// test_append_encode.cpp: the append kernel's division-free element encoders
// (gpu/quant/append_encode.h, host build of the same functions the kernel runs) against the
// definition, quantize_element(x, s, f, kSatFinite, kEncoder) = encode(RN(x / s)):
//   - every bf16 value (65536 bit patterns) under ~150 scales / divisors: seeded log-uniform
//     ones over 2^-60..2^60, powers of two, all-ones mantissas, the bench's and the GPU
//     tests' pool scales, subnormal and zero divisors;
//   - seeded random FP32 values, and FP32 values within +-8 ulps of every rounding boundary
//     (s x FP8 midpoints, div x the E2M1 midpoints), where the bracket/threshold logic is
//     decided: every accepted FP8 code and every E2M1 code must be the definition's.
// The FP8 bracket may decline (the kernel then takes the exact path): the test counts the
// declines and requires them to be rare on random data and present at the boundaries.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gpu/quant/append_encode.h"
#include "reference/formats/formats.h"
#include "reference/quant/scale_rules.h"
#include "tests/common/test_env.h"

namespace kvlab::test {
namespace {

namespace ae = gpu::append_encode;

float bits_f(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<float> all_bf16_values() {
  std::vector<float> v;
  for (uint32_t b = 0; b < 65536; ++b) v.push_back(bits_f(b << 16));
  return v;
}

std::vector<float> scales(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> e(-60.0, 60.0);
  std::vector<float> s = {6.0f / 448.0f, 1.0f / 448.0f, 0.0173f, 0.0111f, 0.0021f, 0.0009f, 1.0f, 0.5f, 0x1p-20f, 0x1p20f,
                          bits_f(0x3FFFFFFFu), bits_f(0x3F7FFFFFu), bits_f(0x3C7FFFFFu), bits_f(0x3F800001u), 3.0f, 1.5f};
  for (int i = 0; i < 120; ++i) s.push_back(static_cast<float>(std::exp2(e(rng))));
  return s;
}

// FP8 with a pool scale: the bracket's accepted codes are the definition's.
void check_fp8(float x, float s, ElemFormat ef, const ae::Fp8Recip& rc, int64_t* accepted, int64_t* declined) {
  const bool e5 = ef == ElemFormat::kFP8E5M2;
  uint32_t miss = 0;
  bool ok = rc.ok;
  const uint32_t c = ae::fp8_code_recip(x, rc.y, e5, miss, ok);
  if (!ok || (miss & 0xFFu) != 0) {
    ++*declined;
    return;
  }
  ++*accepted;
  const uint32_t want = quantize_element(x, s, ef, Saturation::kSatFinite, ElementClamp::kEncoder);
  if (c != want) {
    ADD_FAILURE() << "fp8 " << (e5 ? "e5m2" : "e4m3") << " x=" << x << " (0x" << std::hex << fmt_detail::f32_bits(x)
                  << ") s=" << s << " (0x" << fmt_detail::f32_bits(s) << "): got 0x" << c << ", want 0x" << want << std::dec;
  }
}

TEST(AppendEncode, Fp8BracketMatchesDefinitionOnEveryBf16) {
  const uint64_t seed = seed_for("append_encode.fp8.scales");
  std::printf("[seed] append_encode.fp8.scales = %llu\n", static_cast<unsigned long long>(seed));
  const std::vector<float> xs = all_bf16_values();
  int64_t acc = 0, dec = 0, ord = 0, ord_dec = 0;
  for (float s : scales(seed)) {
    const ae::Fp8Recip rc = ae::fp8_recip(s);
    ASSERT_TRUE(rc.ok) << s;
    for (ElemFormat ef : {ElemFormat::kFP8E4M3, ElemFormat::kFP8E5M2})
      for (float x : xs) {
        const int64_t d0 = dec;
        check_fp8(x, s, ef, rc, &acc, &dec);
        // Ordinary quotients (finite, well inside FP32's range) must take the cheap path
        // unless they sit next to a rounding boundary.
        const double q = std::fabs(static_cast<double>(x) / s);
        if (std::isfinite(x) && q < 0x1p90) ++ord, ord_dec += dec - d0;
      }
  }
  std::printf("fp8 bracket on bf16: %lld accepted, %lld declined; ordinary quotients: %lld, %lld declined\n",
              static_cast<long long>(acc), static_cast<long long>(dec), static_cast<long long>(ord),
              static_cast<long long>(ord_dec));
  EXPECT_LT(ord_dec, ord / 1000);
}

TEST(AppendEncode, Fp8BracketAtRoundingBoundaries) {
  const uint64_t seed = seed_for("append_encode.fp8.boundaries");
  std::printf("[seed] append_encode.fp8.boundaries = %llu\n", static_cast<unsigned long long>(seed));
  int64_t acc = 0, dec = 0;
  for (float s : scales(seed)) {
    const ae::Fp8Recip rc = ae::fp8_recip(s);
    for (ElemFormat ef : {ElemFormat::kFP8E4M3, ElemFormat::kFP8E5M2}) {
      const bool e5 = ef == ElemFormat::kFP8E5M2;
      // Every positive code's value and the midpoint to the next one, scaled by s.
      for (uint32_t c = 0; c < (e5 ? 0x7Bu : 0x7Eu); ++c) {
        const double v0 = e5 ? e5m2_to_float(static_cast<uint8_t>(c)) : e4m3_to_float(static_cast<uint8_t>(c));
        const double v1 = e5 ? e5m2_to_float(static_cast<uint8_t>(c + 1)) : e4m3_to_float(static_cast<uint8_t>(c + 1));
        for (double m : {v0, 0.5 * (v0 + v1)}) {
          const float centre = static_cast<float>(m * s);
          if (!std::isfinite(centre)) continue;
          float lo = centre, hi = centre;
          for (int k = 0; k < 8; ++k) lo = std::nextafter(lo, -INFINITY), hi = std::nextafter(hi, INFINITY);
          if (!std::isfinite(hi)) continue;
          for (float x = lo; x <= hi; x = std::nextafter(x, INFINITY)) {
            check_fp8(x, s, ef, rc, &acc, &dec);
            check_fp8(-x, s, ef, rc, &acc, &dec);
          }
        }
      }
    }
  }
  std::printf("fp8 bracket at boundaries: %lld accepted, %lld declined\n", static_cast<long long>(acc),
              static_cast<long long>(dec));
  EXPECT_GT(dec, 0);  // the boundaries are where the exact path is needed
}

TEST(AppendEncode, Fp8BracketOnRandomFloats) {
  const uint64_t seed = seed_for("append_encode.fp8.random");
  std::printf("[seed] append_encode.fp8.random = %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  int64_t acc = 0, dec = 0;
  for (float s : scales(seed)) {
    const ae::Fp8Recip rc = ae::fp8_recip(s);
    std::uniform_real_distribution<double> e(std::log2(s) - 30.0, std::log2(s) + 12.0);
    for (int i = 0; i < 4000; ++i) {
      const float x = static_cast<float>((rng() & 1 ? -1.0 : 1.0) * std::exp2(e(rng)));
      check_fp8(x, s, ElemFormat::kFP8E4M3, rc, &acc, &dec);
      check_fp8(x, s, ElemFormat::kFP8E5M2, rc, &acc, &dec);
    }
  }
  EXPECT_LT(dec, acc / 1000) << "random data should almost never need the exact path";
}

// Scales a bracket must decline (the kernel then uses the definition itself).
TEST(AppendEncode, Fp8RecipDeclinesUnusableScales) {
  for (float s : {0.0f, -0.0f, 0x1p-127f, 0x1p127f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    EXPECT_FALSE(ae::fp8_recip(s).ok) << s;
  EXPECT_TRUE(ae::fp8_recip(-0.25f).ok);
}

// ------------------------------------------------------------------ E2M1 thresholds
void check_e2m1(float x, float div, const ae::E2m1Thresholds& th) {
  const uint32_t got = ae::e2m1_code(x, th);
  const uint32_t want = quantize_element(x, div, ElemFormat::kFP4E2M1, Saturation::kSatFinite, ElementClamp::kEncoder) & 0xFu;
  if (got != want)
    ADD_FAILURE() << "e2m1 x=" << x << " (0x" << std::hex << fmt_detail::f32_bits(x) << ") div=" << div << " (0x"
                  << fmt_detail::f32_bits(div) << "): got 0x" << got << ", want 0x" << want << std::dec;
}

std::vector<float> divisors(uint64_t seed) {
  std::vector<float> d = scales(seed);
  // NVFP4 divisors (e4m3 code x tensor scale), MXFP4 ones (2^e, 2^-127 subnormal), zero, subnormals.
  for (uint32_t c = 1; c < 0x7F; c += 3) d.push_back(e4m3_to_float(static_cast<uint8_t>(c)) * 0.0021f);
  for (int e = -127; e <= 127; e += 11) d.push_back(pow2_scale_value(e));
  d.push_back(pow2_scale_value(kPow2MinExp));
  d.push_back(0.0f);
  d.push_back(-0.0f);
  d.push_back(0x1p-140f);
  d.push_back(bits_f(0x00000001u));
  d.push_back(0x1p126f);
  return d;
}

TEST(AppendEncode, E2m1ThresholdsMatchDefinitionOnEveryBf16) {
  const uint64_t seed = seed_for("append_encode.e2m1.divisors");
  std::printf("[seed] append_encode.e2m1.divisors = %llu\n", static_cast<unsigned long long>(seed));
  const std::vector<float> xs = all_bf16_values();
  for (float div : divisors(seed)) {
    const ae::E2m1Thresholds th = ae::e2m1_thresholds(div);
    ASSERT_TRUE(th.ok) << div;
    for (float x : xs)
      if (std::isfinite(x)) check_e2m1(x, div, th);  // the kernel's groups hold finite x unless div is NaN
  }
}

TEST(AppendEncode, E2m1ThresholdsAtRoundingBoundaries) {
  const uint64_t seed = seed_for("append_encode.e2m1.boundaries");
  std::printf("[seed] append_encode.e2m1.boundaries = %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (float div : divisors(seed)) {
    if (!(div > 0.0f)) continue;
    const ae::E2m1Thresholds th = ae::e2m1_thresholds(div);
    const double pts[] = {0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0};
    for (double m : pts) {
      const float centre = static_cast<float>(m * div);
      if (!std::isfinite(centre) || std::fabs(centre) >= 0x1p127f) continue;
      float lo = centre, hi = centre;
      for (int k = 0; k < 8; ++k) lo = std::nextafter(lo, -INFINITY), hi = std::nextafter(hi, INFINITY);
      for (float x = lo; x <= hi; x = std::nextafter(x, INFINITY)) {
        check_e2m1(x, div, th);
        check_e2m1(-x, div, th);
      }
    }
    std::uniform_real_distribution<double> e(std::log2(div) - 30.0, std::log2(div) + 6.0);
    for (int i = 0; i < 2000; ++i) {
      const float x = static_cast<float>((rng() & 1 ? -1.0 : 1.0) * std::exp2(e(rng)));
      if (std::isfinite(x)) check_e2m1(x, div, th);
    }
  }
}

TEST(AppendEncode, E2m1NanDivisorGivesCode7AndBadDivisorsDecline) {
  const ae::E2m1Thresholds th = ae::e2m1_thresholds(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(th.ok);
  for (float x : {0.0f, -0.0f, 1.0f, -3.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    check_e2m1(x, std::numeric_limits<float>::quiet_NaN(), th);
  EXPECT_FALSE(ae::e2m1_thresholds(-1.0f).ok);
  EXPECT_FALSE(ae::e2m1_thresholds(std::numeric_limits<float>::infinity()).ok);
}

}  // namespace
}  // namespace kvlab::test
