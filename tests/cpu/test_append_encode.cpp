// test_append_encode.cpp: the append kernel's division-free element encoders
// (gpu/quant/append_encode.h, host build of the same functions the kernel runs) against the
// definition, quantize_element(x, s, f, kSatFinite, kEncoder) = encode(RN(x / s)):
//   - every bf16 value (65536 bit patterns) under ~150 scales / divisors: seeded log-uniform
//     ones over 2^-60..2^60, powers of two, all-ones mantissas, the bench's and the GPU
//     tests' pool scales, subnormal and zero divisors;
//   - seeded random FP32 values, and FP32 values within +-8 ulps of every rounding boundary
//     (s x FP8 midpoints, div x the E2M1 midpoints), where rounding is decided: every
//     accepted FP8 code and every E2M1 code must be the definition's;
//   - FP8 quotients below 2^-30 (the signed-zero region), signed zeros, subnormal inputs;
//   - the packed-bf16 E2M1 path (3-compare binary search, two elements per compare) on
//     every bf16 value in every nibble position, and around every rounding boundary.
// The FP8 encoder (reciprocal + two FMA corrections) may decline only NaN / Inf, quotients
// >= 2^100 and scales outside [2^-70, 2^125] (the kernel then takes the exact path): the
// tests require zero declines on every ordinary quotient, boundaries included.
#include <gtest/gtest.h>

#include <algorithm>
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
  std::vector<float> s = {0.05f,
                          0x1p-70f,
                          0x1p125f,
                          6.0f / 448.0f,
                          1.0f / 448.0f,
                          0.0173f,
                          0.0111f,
                          0.0021f,
                          0.0009f,
                          1.0f,
                          0.5f,
                          0x1p-20f,
                          0x1p20f,
                          bits_f(0x3FFFFFFFu),
                          bits_f(0x3F7FFFFFu),
                          bits_f(0x3C7FFFFFu),
                          bits_f(0x3F800001u),
                          3.0f,
                          1.5f};
  for (int i = 0; i < 120; ++i) s.push_back(static_cast<float>(std::exp2(e(rng))));
  return s;
}

// FP8 with a pool scale: the encoder's accepted codes (the pair x, -x: both bytes of one
// cvt) are the definition's.
void check_fp8(float x, float s, ElemFormat ef, const ae::Fp8Recip& rc, int64_t* accepted,
               int64_t* declined) {
  const bool e5 = ef == ElemFormat::kFP8E5M2;
  bool ok = rc.ok;
  const uint32_t c = ae::fp8x2_code_recip(x, -x, s, rc.y, e5, ok);
  if (!ok) {
    ++*declined;
    return;
  }
  ++*accepted;
  const uint32_t want = quantize_element(x, s, ef, Saturation::kSatFinite, ElementClamp::kEncoder) |
                        (static_cast<uint32_t>(quantize_element(-x, s, ef, Saturation::kSatFinite,
                                                                ElementClamp::kEncoder))
                         << 8);
  if (c != want) {
    ADD_FAILURE() << "fp8 " << (e5 ? "e5m2" : "e4m3") << " x=" << x << " (0x" << std::hex
                  << fmt_detail::f32_bits(x) << ") s=" << s << " (0x" << fmt_detail::f32_bits(s)
                  << "): got 0x" << c << " (x | -x << 8), want 0x" << want << std::dec;
  }
}

TEST(AppendEncode, Fp8EncoderMatchesDefinitionOnEveryBf16) {
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
        // Ordinary quotients (finite, well inside FP32's range) must take the cheap path.
        const double q = std::fabs(static_cast<double>(x) / s);
        if (std::isfinite(x) && q < 0x1p99) ++ord, ord_dec += dec - d0;
      }
  }
  std::printf(
      "fp8 encoder on bf16: %lld accepted, %lld declined; ordinary quotients: %lld, %lld "
      "declined\n",
      static_cast<long long>(acc), static_cast<long long>(dec), static_cast<long long>(ord),
      static_cast<long long>(ord_dec));
  EXPECT_EQ(ord_dec, 0);
}

TEST(AppendEncode, Fp8EncoderAtRoundingBoundaries) {
  const uint64_t seed = seed_for("append_encode.fp8.boundaries");
  std::printf("[seed] append_encode.fp8.boundaries = %llu\n",
              static_cast<unsigned long long>(seed));
  int64_t acc = 0, dec = 0;
  for (float s : scales(seed)) {
    const ae::Fp8Recip rc = ae::fp8_recip(s);
    for (ElemFormat ef : {ElemFormat::kFP8E4M3, ElemFormat::kFP8E5M2}) {
      const bool e5 = ef == ElemFormat::kFP8E5M2;
      // Every positive code's value and the midpoint to the next one, scaled by s.
      for (uint32_t c = 0; c < (e5 ? 0x7Bu : 0x7Eu); ++c) {
        const double v0 =
            e5 ? e5m2_to_float(static_cast<uint8_t>(c)) : e4m3_to_float(static_cast<uint8_t>(c));
        const double v1 = e5 ? e5m2_to_float(static_cast<uint8_t>(c + 1))
                             : e4m3_to_float(static_cast<uint8_t>(c + 1));
        for (double m : {v0, 0.5 * (v0 + v1)}) {
          const float centre = static_cast<float>(m * s);
          if (!std::isfinite(centre)) continue;
          float lo = centre, hi = centre;
          for (int k = 0; k < 8; ++k)
            lo = std::nextafter(lo, -INFINITY), hi = std::nextafter(hi, INFINITY);
          if (!std::isfinite(hi)) continue;
          for (float x = lo; x <= hi; x = std::nextafter(x, INFINITY)) {
            check_fp8(x, s, ef, rc, &acc, &dec);
            check_fp8(-x, s, ef, rc, &acc, &dec);
          }
        }
      }
    }
  }
  std::printf("fp8 encoder at boundaries: %lld accepted, %lld declined\n",
              static_cast<long long>(acc), static_cast<long long>(dec));
  EXPECT_GT(acc, 0);
  EXPECT_EQ(dec, 0);  // the boundaries need no exact path (the quotient is RN(x / s) itself)
}

TEST(AppendEncode, Fp8EncoderOnRandomFloats) {
  const uint64_t seed = seed_for("append_encode.fp8.random");
  std::printf("[seed] append_encode.fp8.random = %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  int64_t acc = 0, dec = 0;
  for (float s : scales(seed)) {
    const ae::Fp8Recip rc = ae::fp8_recip(s);
    std::uniform_real_distribution<double> e(std::log2(s) - 30.0, std::log2(s) + 12.0);
    for (int i = 0; i < 4000; ++i) {
      const float x = static_cast<float>((rng() & 1 ? -1.0 : 1.0) * std::exp2(e(rng)));
      if (!std::isfinite(x)) continue;  // s = 2^125: x = s * 2^12 overflows FP32
      check_fp8(x, s, ElemFormat::kFP8E4M3, rc, &acc, &dec);
      check_fp8(x, s, ElemFormat::kFP8E5M2, rc, &acc, &dec);
    }
  }
  EXPECT_EQ(dec, 0) << "ordinary quotients never need the exact path";
}

// Quotients below 2^-30 (only the signed zero matters), signed zeros, subnormal inputs,
// and the smallest accepted scale: every accepted code is the definition's, and zeros keep
// their sign (x = -0 gives the negative-zero code).
TEST(AppendEncode, Fp8TinyQuotientsAndSignedZeros) {
  const uint64_t seed = seed_for("append_encode.fp8.tiny");
  std::printf("[seed] append_encode.fp8.tiny = %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  int64_t acc = 0, dec = 0;
  std::vector<float> xs = {0.0f,      -0.0f,     bits_f(1u), bits_f(0x80000001u),
                           0x1p-126f, 0x1p-100f, 0x1p-60f,   0x1p-31f,
                           0x1p-30f};
  for (int i = 0; i < 2000; ++i)
    xs.push_back(bits_f(static_cast<uint32_t>(rng()) & 0x8FFFFFFFu));  // |x| < 2^-31
  for (float s : {0.05f, 0x1p-70f, bits_f(0x1CFFFFFFu), 1.0f, 0x1p40f, 0x1p125f, 3.0f})
    for (ElemFormat ef : {ElemFormat::kFP8E4M3, ElemFormat::kFP8E5M2})
      for (float x : xs) {
        check_fp8(x, s, ef, ae::fp8_recip(s), &acc, &dec);
        check_fp8(x * 0x1p40f, s, ef, ae::fp8_recip(s), &acc,
                  &dec);  // quotients around 2^-30 at small s
      }
  EXPECT_EQ(dec, 0);
  bool ok = true;
  const ae::Fp8Recip rc = ae::fp8_recip(0.05f);
  EXPECT_EQ(ae::fp8x2_code_recip(-0.0f, 0.0f, 0.05f, rc.y, false, ok), 0x0080u);
  EXPECT_TRUE(ok);
}

// Scales a bracket must decline (the kernel then uses the definition itself).
TEST(AppendEncode, Fp8RecipDeclinesUnusableScales) {
  for (float s : {0.0f, -0.0f, 0x1p-127f, 0x1p-71f, 0x1.fffffep-71f, 0x1.000002p125f, 0x1p127f,
                  std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    EXPECT_FALSE(ae::fp8_recip(s).ok) << s;
  for (float s : {-0.25f, 0x1p-70f, 0x1p125f, 0.05f}) EXPECT_TRUE(ae::fp8_recip(s).ok) << s;
}

// amax16 = amax_accumulate folded from 0, bit for bit: seeded rows with zeros of both
// signs, subnormals, Inf, NaNs of any payload and sign, in every position.
TEST(AppendEncode, Amax16MatchesAmaxAccumulate) {
  const uint64_t seed = seed_for("append_encode.amax16");
  std::printf("[seed] append_encode.amax16 = %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  const float specials[] = {0.0f,
                            -0.0f,
                            bits_f(1u),
                            bits_f(0x807FFFFFu),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            bits_f(0x7FC00000u),
                            bits_f(0xFFC00001u),
                            bits_f(0x7F800001u),
                            0x1.fffffep127f};
  for (int t = 0; t < 200000; ++t) {
    float x[16];
    for (float& v : x) {
      const uint64_t r = rng();
      v = (r & 7) == 0 ? specials[(r >> 3) % 10] : bits_f(static_cast<uint32_t>(r >> 32));
      if ((r & 0x30) != 0 && (r & 7) != 0 && scale_detail::is_nan(v))
        v = 1.5f;  // NaNs mostly from the specials
    }
    float want = 0.0f;
    for (float v : x) want = amax_accumulate(want, v);
    const float got = ae::amax16(x);
    ASSERT_EQ(fmt_detail::f32_bits(got), fmt_detail::f32_bits(want)) << "row " << t;
  }
}

// The division-free scale rules against scale_rules.h, bit for bit: every bf16 amax (and
// seeded random FP32 ones) for the per-token FP8 scale, and x the pool scales (incl. the
// bench's 0.05 and the GPU tests' ones) for NVFP4's block code and divisor. Declines only
// where allowed: NaN / Inf / huge (>= 2^99 after the division) amax, pool scales outside
// [2^-70, 2^125].
TEST(AppendEncode, ScaleRulesWithoutDivisionMatchReference) {
  const uint64_t seed = seed_for("append_encode.scales_fast");
  std::printf("[seed] append_encode.scales_fast = %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::vector<float> amaxes = all_bf16_values();
  for (int i = 0; i < 200000; ++i) amaxes.push_back(bits_f(static_cast<uint32_t>(rng())));
  int64_t declined = 0;
  for (float a : amaxes) {
    bool ok = true;
    const float s = ae::fp8_token_scale_fast(a, ok);
    if (!ok) {
      ++declined;
      EXPECT_TRUE(!std::isfinite(a) || std::fabs(a) / 448.0 >= 0x1p99)
          << a;  // NaN / Inf or huge amax
      continue;
    }
    ASSERT_EQ(fmt_detail::f32_bits(s), fmt_detail::f32_bits(kv_fp8_token_scale(a))) << "amax " << a;
  }
  std::printf("fp8 token scale: %lld declined (NaN / Inf / huge amax)\n",
              static_cast<long long>(declined));
  std::vector<float> ts = scales(seed);
  for (float t : {0.05f, 0.0021f, 0.0009f, 1e-33f, 0x1p-70f, 0x1p125f, 1.0f}) ts.push_back(t);
  int64_t checked = 0;
  for (float t : ts) {
    const ae::Fp8Recip rt = ae::fp8_recip(t);
    for (size_t i = 0; i < amaxes.size(); i += (t == 0.05f ? 1 : 7)) {
      const float a = amaxes[i];
      bool ok = true;
      const KvBlockScale got = ae::nvfp4_block_scale_fast(a, t, rt, ok);
      if (!ok) {
        EXPECT_TRUE(!std::isfinite(a) || !rt.ok || std::fabs(a / 6.0) >= 0x1p99 ||
                    std::fabs(a / 6.0 / t) >= 0x1p99)
            << a << " " << t;
        continue;
      }
      ++checked;
      const KvBlockScale want = kv_fp4_block_scale(true, a, t);
      ASSERT_EQ(got.code, want.code) << "amax " << a << " t " << t;
      ASSERT_EQ(fmt_detail::f32_bits(got.div), fmt_detail::f32_bits(want.div))
          << "amax " << a << " t " << t;
    }
  }
  EXPECT_GT(checked, 1000000);
}

// u32div against the hardware division: small and large divisors, n at 0, the top, and
// multiples of d +- 1, plus seeded random pairs.
TEST(AppendEncode, U32DivMatchesDivision) {
  const uint64_t seed = seed_for("append_encode.u32div");
  std::printf("[seed] append_encode.u32div = %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> ds = {
      1,     2,     3,           5,           6,           7,           8,          15,  16,
      17,    24,    32,          64,          127,         128,         255,        641, 65535,
      65536, 65537, 0x7FFFFFFFu, 0x80000000u, 0x80000001u, 0xFFFFFFFEu, 0xFFFFFFFFu};
  for (int i = 0; i < 200; ++i)
    ds.push_back(static_cast<uint32_t>(rng() >> (32 + rng() % 32)) | 1u);
  for (uint32_t d : ds) {
    const ae::U32Div v = ae::u32div_make(d);
    std::vector<uint32_t> ns = {0u, 1u, d - 1, d, d + 1, 0xFFFFFFFFu, 0xFFFFFFFEu, 0x80000000u};
    for (uint32_t k = 1; k < 64; ++k) {
      const uint64_t m = static_cast<uint64_t>(d) * (rng() % (0xFFFFFFFFull / d + 1));
      for (int64_t e = -1; e <= 1; ++e)
        if (m + e <= 0xFFFFFFFFull) ns.push_back(static_cast<uint32_t>(m + e));
    }
    for (int i = 0; i < 2000; ++i) ns.push_back(static_cast<uint32_t>(rng()));
    for (uint32_t n : ns) ASSERT_EQ(ae::u32div(n, v), n / d) << n << " / " << d;
  }
}

// ------------------------------------------------------------------ E2M1 thresholds
void check_e2m1(float x, float div, const ae::E2m1Thresholds& th) {
  const uint32_t got = ae::e2m1_code(x, th);
  const uint32_t want = quantize_element(x, div, ElemFormat::kFP4E2M1, Saturation::kSatFinite,
                                         ElementClamp::kEncoder) &
                        0xFu;
  if (got != want)
    ADD_FAILURE() << "e2m1 x=" << x << " (0x" << std::hex << fmt_detail::f32_bits(x)
                  << ") div=" << div << " (0x" << fmt_detail::f32_bits(div) << "): got 0x" << got
                  << ", want 0x" << want << std::dec;
}

std::vector<float> divisors(uint64_t seed) {
  std::vector<float> d = scales(seed);
  // NVFP4 divisors (e4m3 code x tensor scale), MXFP4 ones (2^e, 2^-127 subnormal), zero,
  // subnormals.
  for (uint32_t c = 1; c < 0x7F; c += 3)
    d.push_back(e4m3_to_float(static_cast<uint8_t>(c)) * 0.0021f);
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
      if (std::isfinite(x))
        check_e2m1(x, div, th);  // the kernel's groups hold finite x unless div is NaN
  }
}

TEST(AppendEncode, E2m1ThresholdsAtRoundingBoundaries) {
  const uint64_t seed = seed_for("append_encode.e2m1.boundaries");
  std::printf("[seed] append_encode.e2m1.boundaries = %llu\n",
              static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (float div : divisors(seed)) {
    if (!(div > 0.0f)) continue;
    const ae::E2m1Thresholds th = ae::e2m1_thresholds(div);
    const double pts[] = {0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0,
                          2.5,  3.0, 3.5,  4.0, 5.0,  6.0, 7.0};
    for (double m : pts) {
      const float centre = static_cast<float>(m * div);
      if (!std::isfinite(centre) || std::fabs(centre) >= 0x1p127f) continue;
      float lo = centre, hi = centre;
      for (int k = 0; k < 8; ++k)
        lo = std::nextafter(lo, -INFINITY), hi = std::nextafter(hi, INFINITY);
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
  for (float x : {0.0f, -0.0f, 1.0f, -3.0f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    check_e2m1(x, std::numeric_limits<float>::quiet_NaN(), th);
  EXPECT_FALSE(ae::e2m1_thresholds(-1.0f).ok);
  EXPECT_FALSE(ae::e2m1_thresholds(std::numeric_limits<float>::infinity()).ok);
}

// ------------------------------------------------------------------ E2M1 codes of packed bf16
// e2m1_codes_bf16x8 (3-compare binary search on bf16 pairs, the kernel's path from bf16
// input) against the definition, nibble by nibble, on every bf16 value under every divisor
// the path accepts (e2m1_bf16_path_ok), each value in every position of the 8-element word
// (the nibble interleave), with both signs.
uint32_t bf16_bits(float x) {
  return fmt_detail::f32_bits(x) >> 16;
}

// Checks the 8 bf16 bit patterns h[0..7] under div; returns the number of elements checked.
int64_t check_e2m1_bf16x8(const uint16_t (&h)[8], float div, const ae::E2m1Bf16Thresholds& tb) {
  uint32_t w[4];
  for (int j = 0; j < 4; ++j)
    w[j] = static_cast<uint32_t>(h[2 * j]) | (static_cast<uint32_t>(h[2 * j + 1]) << 16);
  const uint32_t got = ae::e2m1_codes_bf16x8(w, tb);
  for (int i = 0; i < 8; ++i) {
    const float x = bits_f(static_cast<uint32_t>(h[i]) << 16);
    const uint32_t want = quantize_element(x, div, ElemFormat::kFP4E2M1, Saturation::kSatFinite,
                                           ElementClamp::kEncoder) &
                          0xFu;
    const uint32_t g = (got >> (4 * i)) & 0xFu;
    if (g != want) {
      ADD_FAILURE() << "e2m1 bf16x8 element " << i << " x=" << x << " (bf16 0x" << std::hex << h[i]
                    << ") div=" << div << " (0x" << fmt_detail::f32_bits(div) << "): got 0x" << g
                    << ", want 0x" << want << std::dec;
      return 8;
    }
  }
  return 8;
}

TEST(AppendEncode, E2m1Bf16PairsMatchDefinitionOnEveryBf16) {
  const uint64_t seed = seed_for("append_encode.e2m1.bf16x8");
  std::printf("[seed] append_encode.e2m1.bf16x8 = %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  int64_t checked = 0, divs = 0;
  for (float div : divisors(seed)) {
    if (!ae::e2m1_bf16_path_ok(div)) continue;  // the kernel takes e2m1_code there (tested above)
    ++divs;
    const ae::E2m1Bf16Thresholds tb = ae::e2m1_bf16_thresholds(ae::e2m1_thresholds(div));
    // Every finite bf16 pattern; element i of each word takes pattern b + i * 8191 (mod 2^16)
    // so that every pattern visits every position across the sweep, with random neighbours.
    for (uint32_t b = 0; b < 65536; ++b) {
      uint16_t h[8];
      for (int i = 0; i < 8; ++i) {
        uint16_t v = static_cast<uint16_t>(b + static_cast<uint32_t>(i) * 8191u);
        if ((v & 0x7F80u) == 0x7F80u)
          v = static_cast<uint16_t>(rng() & 0x7F7Fu);  // NaN / Inf: a finite one
        h[i] = v;
      }
      checked += check_e2m1_bf16x8(h, div, tb);
    }
  }
  std::printf("e2m1 bf16x8: %lld divisors, %lld elements checked\n", static_cast<long long>(divs),
              static_cast<long long>(checked));
  EXPECT_GT(divs, 100);
}

// bf16 values within +-8 bf16 ulps of every E2M1 rounding boundary (div x the midpoints and
// the representable points), and divisors that put a boundary exactly on a bf16 value
// (div = x / m for bf16 x: ties) and 1-2 ulps beside it.
TEST(AppendEncode, E2m1Bf16PairsAtRoundingBoundaries) {
  const uint64_t seed = seed_for("append_encode.e2m1.bf16x8.boundaries");
  std::printf("[seed] append_encode.e2m1.bf16x8.boundaries = %llu\n",
              static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  const double pts[] = {0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0,
                        2.5,  3.0, 3.5,  4.0, 5.0,  6.0, 7.0};
  std::vector<float> divs;
  for (float d : divisors(seed)) divs.push_back(d);
  for (int i = 0; i < 40; ++i) {
    const float x =
        bits_f((static_cast<uint32_t>(rng() % 0x7E00u) + 0x0100u) << 16);  // a normal positive bf16
    for (double m : pts) {
      float d = static_cast<float>(static_cast<double>(x) / m);
      divs.push_back(d);
      for (int k = 0; k < 2; ++k) divs.push_back(d = std::nextafter(d, INFINITY));
      d = static_cast<float>(static_cast<double>(x) / m);
      for (int k = 0; k < 2; ++k) divs.push_back(d = std::nextafter(d, 0.0f));
    }
  }
  int64_t checked = 0;
  for (float div : divs) {
    if (!ae::e2m1_bf16_path_ok(div)) continue;
    const ae::E2m1Bf16Thresholds tb = ae::e2m1_bf16_thresholds(ae::e2m1_thresholds(div));
    for (double m : pts) {
      const float centre = static_cast<float>(m * div);
      if (!std::isfinite(centre) || centre >= 0x1p127f) continue;
      const int32_t c = static_cast<int32_t>(bf16_bits(centre));
      uint16_t h[8];
      int n = 0;
      for (int32_t v = std::max(c - 8, 0); v <= std::min(c + 9, 0x7F7F); ++v) {
        for (uint16_t sgn : {uint16_t{0}, uint16_t{0x8000}}) {
          h[n++] = static_cast<uint16_t>(v | sgn);
          if (n == 8) checked += check_e2m1_bf16x8(h, div, tb), n = 0;
        }
      }
      if (n > 0) {
        for (; n < 8; ++n) h[n] = h[0];
        checked += check_e2m1_bf16x8(h, div, tb);
      }
    }
  }
  std::printf("e2m1 bf16x8 boundaries: %zu divisors, %lld elements checked\n", divs.size(),
              static_cast<long long>(checked));
}

TEST(AppendEncode, E2m1Bf16PathDeclinesUnusableDivisors) {
  EXPECT_FALSE(ae::e2m1_bf16_path_ok(0.0f));
  EXPECT_FALSE(ae::e2m1_bf16_path_ok(0x1p-100f));
  EXPECT_FALSE(ae::e2m1_bf16_path_ok(0x1p126f));
  EXPECT_FALSE(ae::e2m1_bf16_path_ok(std::numeric_limits<float>::quiet_NaN()));
  EXPECT_FALSE(ae::e2m1_bf16_path_ok(std::numeric_limits<float>::infinity()));
  EXPECT_TRUE(ae::e2m1_bf16_path_ok(0x1p-99f));
  EXPECT_TRUE(ae::e2m1_bf16_path_ok(0x1p125f));
}

}  // namespace
}  // namespace kvlab::test
