// test_formats.cpp: formats.h against an independent model (test_formats_oracle.h) on
// every code, every midpoint between neighbours and midpoint ± 1 float ulp, subnormals,
// overflow in both saturation modes, NaN/Inf and signed zero; UE8M0 and the exponent
// helpers. The exhaustive sweep over all 2^32 float patterns is tests/slow.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "tests/common/test_env.h"
#include "tests/cpu/test_formats_oracle.h"

namespace kvlab::test {
namespace {

constexpr Saturation kModes[] = {Saturation::kSatFinite, Saturation::kNonSaturating};
const FormatModel* const kModels[] = {&kE4M3Model, &kE5M2Model, &kE2M1Model, &kFP16Model,
                                      &kBF16Model};

const char* mode_name(Saturation s) {
  return s == Saturation::kSatFinite ? "satfinite" : "nonsat";
}

bool same_value(double want, float got) {
  if (std::isnan(want)) return std::isnan(got);
  return want == static_cast<double>(got) && std::signbit(want) == std::signbit(got);
}

TEST(Formats, DecodeEveryCode) {
  for (const FormatModel* m : kModels) {
    const uint32_t n = 1u << m->bits;
    int64_t nan_codes = 0;
    for (uint32_t c = 0; c < n; ++c) {
      const double want = m->decode(c);
      const float got = decode_under_test(*m, c);
      ASSERT_TRUE(same_value(want, got))
          << m->name << " code 0x" << std::hex << c << ": want " << want << " got " << got;
      nan_codes += std::isnan(want);
    }
    // the NaN code counts of the format facts (DESIGN.md)
    const int64_t want_nans = m == &kE4M3Model   ? 2
                              : m == &kE5M2Model ? 6
                              : m == &kE2M1Model ? 0
                                                 : (2 * ((1 << m->man_bits) - 1));
    EXPECT_EQ(nan_codes, want_nans) << m->name;
  }
  // the facts of DESIGN.md's table, spelled out
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e5m2_to_float(0x7B), 57344.0f);
  EXPECT_TRUE(std::isinf(e5m2_to_float(0x7C)));
  EXPECT_EQ(fp16_bits_to_float(0x7BFF), 65504.0f);
  const float e2m1_vals[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (uint32_t c = 0; c < 8; ++c) {
    EXPECT_EQ(e2m1_to_float(static_cast<uint8_t>(c)), e2m1_vals[c]);
    EXPECT_EQ(e2m1_to_float(static_cast<uint8_t>(c | 8)), -e2m1_vals[c]);
  }
}

TEST(Formats, EncodeEveryRepresentableValue) {
  for (const FormatModel* m : kModels)
    for (Saturation sat : kModes) {
      if (m == &kE2M1Model && sat == Saturation::kNonSaturating) continue;  // E2M1 ignores the mode
      for (uint32_t c = 0; c < (1u << m->bits); ++c) {
        const double v = m->decode(c);
        if (std::isnan(v)) continue;
        const float f = static_cast<float>(v);
        uint32_t want = c;
        if (std::isinf(v) && sat == Saturation::kSatFinite)
          want = (c & m->sign_bit()) | m->max_code;
        ASSERT_EQ(encode_under_test(*m, f, sat), want)
            << m->name << " " << mode_name(sat) << " value " << v;
      }
    }
}

// Every midpoint between neighbours (including max and the overflow step above it) and the
// floats one ulp either side, both signs, both modes, against the oracle.
TEST(Formats, EveryMidpointAndNeighbours) {
  for (const FormatModel* m : kModels) {
    const EncodeOracle oracle(*m);
    const std::vector<double>& t = oracle.table();
    int64_t checked = 0;
    for (size_t k = 0; k + 1 < t.size(); ++k) {
      const double mid = (t[k] + t[k + 1]) / 2;
      const float fm = static_cast<float>(mid);
      ASSERT_EQ(static_cast<double>(fm), mid) << m->name << ": midpoint not a float";
      const float probes[3] = {std::nextafter(fm, 0.0f), fm,
                               std::nextafter(fm, std::numeric_limits<float>::infinity())};
      for (float p : probes)
        for (float x : {p, -p})
          for (Saturation sat : kModes) {
            const uint32_t want = oracle.encode(x, sat), got = encode_under_test(*m, x, sat);
            ASSERT_EQ(got, want) << m->name << " " << mode_name(sat) << " x=" << x
                                 << " (between codes " << k << " and " << k + 1 << ")";
            ++checked;
          }
      // the midpoint itself goes to the even neighbour
      const uint32_t tie = oracle.encode(fm, Saturation::kSatFinite) & (m->sign_bit() - 1);
      if (k + 1 <= m->max_code) EXPECT_EQ(tie % 2, 0u) << m->name << " tie at " << mid;
    }
    EXPECT_EQ(checked, static_cast<int64_t>(t.size() - 1) * 12) << m->name;
  }
}

TEST(Formats, TiesToEvenHandCases) {
  constexpr auto S = Saturation::kSatFinite;
  constexpr auto N = Saturation::kNonSaturating;
  // E4M3: 1 + 1/16 is the tie between 1 (0x38) and 1.125 (0x39): even 0x38
  EXPECT_EQ(float_to_e4m3(1.0625f, S), 0x38);
  EXPECT_EQ(float_to_e4m3(1.1875f, S), 0x3A);  // tie between 0x39 and 0x3A
  // 464 = tie between 448 (0x7E, even) and the overflow step 480: stays 448 in both modes
  EXPECT_EQ(float_to_e4m3(464.0f, N), 0x7E);
  EXPECT_EQ(float_to_e4m3(std::nextafter(464.0f, 1e9f), N), 0x7F);
  EXPECT_EQ(float_to_e4m3(std::nextafter(464.0f, 1e9f), S), 0x7E);
  EXPECT_EQ(float_to_e4m3(-1e9f, N), 0xFF);
  // E5M2: 61440 = tie between 57344 (0x7B, odd) and 65536 (even): overflows
  EXPECT_EQ(float_to_e5m2(61440.0f, N), 0x7C);
  EXPECT_EQ(float_to_e5m2(61440.0f, S), 0x7B);
  EXPECT_EQ(float_to_e5m2(std::nextafter(61440.0f, 0.0f), N), 0x7B);
  // FP16: 65520 overflows to Inf; BF16: the tie above max finite too
  EXPECT_EQ(float_to_fp16_bits(65520.0f, N), 0x7C00);
  EXPECT_EQ(float_to_fp16_bits(65520.0f, S), 0x7BFF);
  EXPECT_EQ(float_to_bf16_bits(bits_float(0x7F7F8000u), N), 0x7F80);
  EXPECT_EQ(float_to_bf16_bits(bits_float(0x7F7F8000u), S), 0x7F7F);
  EXPECT_EQ(float_to_bf16_bits(bits_float(0x7F7F7FFFu), N), 0x7F7F);
  // BF16 ties: 0x3F808000 between 0x3F80 (even) and 0x3F81; 0x3F818000 -> 0x3F82
  EXPECT_EQ(float_to_bf16_bits(bits_float(0x3F808000u), N), 0x3F80);
  EXPECT_EQ(float_to_bf16_bits(bits_float(0x3F818000u), N), 0x3F82);
  // E2M1 (DESIGN.md): 0.75 -> 1, 2.5 -> 2, 5 -> 4; 0.25 -> 0; 1.25 -> 1; 1.75 -> 2; 3.5 -> 4
  EXPECT_EQ(float_to_e2m1(0.75f), 0x2);
  EXPECT_EQ(float_to_e2m1(2.5f), 0x4);
  EXPECT_EQ(float_to_e2m1(5.0f), 0x6);
  EXPECT_EQ(float_to_e2m1(0.25f), 0x0);
  EXPECT_EQ(float_to_e2m1(1.25f), 0x2);
  EXPECT_EQ(float_to_e2m1(1.75f), 0x4);
  EXPECT_EQ(float_to_e2m1(3.5f), 0x6);
  EXPECT_EQ(float_to_e2m1(-5.0f), 0xE);
  EXPECT_EQ(float_to_e2m1(7.0f), 0x7);
}

TEST(Formats, Subnormals) {
  constexpr auto S = Saturation::kSatFinite;
  // E4M3: min subnormal 2^-9; half of it ties to 0; 0.75 of it rounds up
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -9), S), 0x01);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10), S), 0x00);
  EXPECT_EQ(float_to_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f), S), 0x01);
  EXPECT_EQ(float_to_e4m3(-std::ldexp(3.0f, -11), S), 0x81);
  EXPECT_EQ(float_to_e4m3(std::ldexp(7.0f, -9), S), 0x07);    // largest subnormal
  EXPECT_EQ(float_to_e4m3(std::ldexp(15.0f, -10), S), 0x08);  // rounds up into min normal
  EXPECT_EQ(float_to_e5m2(std::ldexp(1.0f, -16), S), 0x01);
  EXPECT_EQ(float_to_e5m2(std::ldexp(1.0f, -17), S), 0x00);
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(1.0f, -24), S), 0x0001);
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(3.0f, -25), S), 0x0002);  // tie 1.5 ulp -> even 2
  EXPECT_EQ(float_to_e2m1(0.5f), 0x1);                              // E2M1's only subnormal
  // float32 subnormals: zero in every narrow format, kept (RNE) by BF16
  for (uint32_t u : {0x00000001u, 0x00400000u, 0x007FFFFFu}) {
    const float x = bits_float(u);
    EXPECT_EQ(float_to_e4m3(x, S), 0x00);
    EXPECT_EQ(float_to_e4m3(-x, S), 0x80);
    EXPECT_EQ(float_to_e5m2(x, S), 0x00);
    EXPECT_EQ(float_to_fp16_bits(x, S), 0x0000);
    EXPECT_EQ(float_to_e2m1(x), 0x0);
  }
  EXPECT_EQ(float_to_bf16_bits(bits_float(0x00008000u), S), 0x0000);  // tie -> even 0
  EXPECT_EQ(float_to_bf16_bits(bits_float(0x00018000u), S), 0x0002);  // tie -> even 2
  EXPECT_EQ(float_to_bf16_bits(bits_float(0x00010001u), S), 0x0001);
  EXPECT_EQ(float_to_bf16_bits(bits_float(0x807FFFFFu), S), 0x8080);  // rounds up into min normal
  EXPECT_EQ(bf16_bits_to_float(0x0001), bits_float(0x00010000u));
}

TEST(Formats, OverflowNaNInfSignedZero) {
  constexpr auto S = Saturation::kSatFinite;
  constexpr auto N = Saturation::kNonSaturating;
  const float inf = std::numeric_limits<float>::infinity();
  const float big = std::numeric_limits<float>::max();
  // overflow
  EXPECT_EQ(float_to_e4m3(big, S), 0x7E);
  EXPECT_EQ(float_to_e4m3(-big, S), 0xFE);
  EXPECT_EQ(float_to_e4m3(big, N), 0x7F);
  EXPECT_EQ(float_to_e4m3(-big, N), 0xFF);
  EXPECT_EQ(float_to_e5m2(-big, N), 0xFC);
  EXPECT_EQ(float_to_fp16_bits(-big, N), 0xFC00);
  EXPECT_EQ(float_to_bf16_bits(big, N), 0x7F80);  // FLT_MAX rounds up out of BF16
  EXPECT_EQ(float_to_bf16_bits(big, S), 0x7F7F);
  EXPECT_EQ(float_to_e2m1(-big), 0xF);
  // Inf
  EXPECT_EQ(float_to_e4m3(inf, S), 0x7E);
  EXPECT_EQ(float_to_e4m3(-inf, N), 0xFF);
  EXPECT_EQ(float_to_e5m2(inf, N), 0x7C);
  EXPECT_EQ(float_to_e5m2(-inf, S), 0xFB);
  EXPECT_EQ(float_to_fp16_bits(inf, N), 0x7C00);
  EXPECT_EQ(float_to_fp16_bits(-inf, S), 0xFBFF);
  EXPECT_EQ(float_to_bf16_bits(-inf, N), 0xFF80);
  EXPECT_EQ(float_to_bf16_bits(inf, S), 0x7F7F);
  EXPECT_EQ(float_to_e2m1(inf), 0x7);
  // NaN (any payload, either sign) -> the canonical positive NaN
  for (uint32_t u : {0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu, 0xFFC00000u, 0x7FBFFFFFu})
    for (Saturation sat : kModes) {
      const float x = bits_float(u);
      EXPECT_EQ(float_to_e4m3(x, sat), 0x7F);
      EXPECT_EQ(float_to_e5m2(x, sat), 0x7F);
      EXPECT_EQ(float_to_fp16_bits(x, sat), 0x7FFF);
      EXPECT_EQ(float_to_bf16_bits(x, sat), 0x7FFF);
      EXPECT_EQ(float_to_e2m1(x), 0x7);
    }
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xFF)));
  EXPECT_TRUE(std::signbit(e4m3_to_float(0xFF)));
  EXPECT_TRUE(std::isnan(e5m2_to_float(0x7D)));
  EXPECT_TRUE(std::isnan(fp16_bits_to_float(0x7C01)));
  // signed zero
  for (Saturation sat : kModes) {
    EXPECT_EQ(float_to_e4m3(-0.0f, sat), 0x80);
    EXPECT_EQ(float_to_e5m2(-0.0f, sat), 0x80);
    EXPECT_EQ(float_to_fp16_bits(-0.0f, sat), 0x8000);
    EXPECT_EQ(float_to_bf16_bits(-0.0f, sat), 0x8000);
    EXPECT_EQ(float_to_e4m3(0.0f, sat), 0x00);
  }
  EXPECT_EQ(float_to_e2m1(-0.0f), 0x8);
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)));
  EXPECT_TRUE(std::signbit(e2m1_to_float(0x8)));
  EXPECT_TRUE(std::signbit(fp16_bits_to_float(0x8000)));
  EXPECT_EQ(e4m3_to_float(0x80), 0.0f);
}

// Random floats across the whole range (sampled; tests/slow checks all of them).
TEST(Formats, RandomFloatsAgainstOracle) {
  const uint64_t seed = seed_for("formats.random");
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (const FormatModel* m : kModels) {
    const EncodeOracle oracle(*m);
    for (int i = 0; i < 200000; ++i) {
      const uint32_t u = static_cast<uint32_t>(rng());
      // half the draws near the format's range, half anywhere
      const float x = (i % 2) ? bits_float(u)
                              : std::ldexp(bits_float((u & 0x807FFFFFu) | 0x3F800000u),
                                           static_cast<int>(u >> 24) % 40 - 24);
      for (Saturation sat : kModes)
        ASSERT_EQ(encode_under_test(*m, x, sat), oracle.encode(x, sat))
            << m->name << " " << mode_name(sat) << " bits 0x" << std::hex << float_bits(x);
    }
  }
}

TEST(Formats, Fp4Packing) {
  EXPECT_EQ(pack_fp4x2(0x1, 0xE), 0xE1);
  EXPECT_EQ(fp4_lo(0xE1), 0x1);
  EXPECT_EQ(fp4_hi(0xE1), 0xE);
  EXPECT_EQ(pack_fp4x2(0xFF, 0x10), 0x0F);  // only the low nibbles are used
  for (uint32_t a = 0; a < 16; ++a)
    for (uint32_t b = 0; b < 16; ++b) {
      const uint8_t p = pack_fp4x2(static_cast<uint8_t>(a), static_cast<uint8_t>(b));
      EXPECT_EQ(fp4_lo(p), a);
      EXPECT_EQ(fp4_hi(p), b);
    }
}

// The GPU NVFP4 loaders' dequantization: every code in every pair position, under random
// neighbours, becomes its value x 2^-14 as a half (sign of zero included), and the loader's
// product with every finite E4M3 block scale x 2^7 is a half exactly (so the f16x2 multiply
// rounds nothing) equal to the value x scale x 2^-7.
TEST(Formats, E2m1PairsIntoHalves) {
  std::mt19937 rng(20261127u);
  const float kDown = std::ldexp(1.0f, -kE2M1HalfShift);
  for (int i = 0; i < 4; ++i)
    for (uint32_t a = 0; a < 16; ++a)
      for (uint32_t b = 0; b < 16; ++b)
        for (int rep = 0; rep < 34; ++rep) {
          const uint32_t filler = rep == 0 ? 0u : rep == 1 ? 0xFFFFFFFFu : rng();
          const uint32_t keep = ~((0xFu << (4 * i)) | (0xFu << (4 * i + 16)));
          const uint32_t w = (filler & keep) | (a << (4 * i)) | (b << (4 * i + 16));
          const uint32_t h = e2m1_pair_to_fp16x2_scaled(w, i);
          const uint32_t codes[2] = {a, b};
          for (int half = 0; half < 2; ++half) {
            const uint16_t bits = static_cast<uint16_t>(h >> (16 * half));
            const float want = e2m1_to_float(static_cast<uint8_t>(codes[half])) * kDown;
            ASSERT_TRUE(same_value(want, fp16_bits_to_float(bits)))
                << "pair " << i << " codes 0x" << std::hex << a << ", 0x" << b << " word 0x" << w
                << " half " << half << ": got bits 0x" << bits;
          }
        }
  const int kUp = 7;  // the loader's scale factor: 448 x 2^7 = 57344 is a half
  int products = 0;
  for (uint32_t c = 0; c < 16; ++c)
    for (uint32_t sc = 0; sc < 256; ++sc) {
      const float scale = e4m3_to_float(static_cast<uint8_t>(sc));
      if (std::isnan(scale)) continue;
      const float x =  // code c as nibble 0: the low half of pair 0
          fp16_bits_to_float(static_cast<uint16_t>(e2m1_pair_to_fp16x2_scaled(c, 0) & 0xFFFFu));
      const float y = scale * std::ldexp(1.0f, kUp);
      ASSERT_EQ(fp16_bits_to_float(float_to_fp16_bits(y, Saturation::kNonSaturating)), y) << sc;
      const float prod = x * y;  // exact in float: <= 2 + 4 significant bits
      ASSERT_EQ(fp16_bits_to_float(float_to_fp16_bits(prod, Saturation::kNonSaturating)), prod)
          << "code 0x" << std::hex << c << " scale 0x" << sc;
      ASSERT_EQ(prod, e2m1_to_float(static_cast<uint8_t>(c)) * scale *
                          std::ldexp(1.0f, kUp - kE2M1HalfShift));
      ++products;
    }
  EXPECT_EQ(products, 16 * 254);
}

TEST(Formats, Ue8m0) {
  for (uint32_t c = 0; c < 255; ++c) {
    const float v = ue8m0_to_float(static_cast<uint8_t>(c));
    ASSERT_EQ(static_cast<double>(v), std::ldexp(1.0, static_cast<int>(c) - 127)) << "code " << c;
  }
  EXPECT_TRUE(std::isnan(ue8m0_to_float(0xFF)));
  EXPECT_EQ(ue8m0_from_exponent(0), 127);
  EXPECT_EQ(ue8m0_from_exponent(-127), 0);
  EXPECT_EQ(ue8m0_from_exponent(127), 254);
  EXPECT_EQ(ue8m0_from_exponent(-200), 0);  // documented clamp to the ends
  EXPECT_EQ(ue8m0_from_exponent(300), 254);
}

TEST(Formats, ExponentHelpers) {
  for (int e = -149; e <= 127; ++e) {
    const float p = exp2i(e);
    ASSERT_EQ(static_cast<double>(p), std::ldexp(1.0, e)) << e;
    EXPECT_EQ(floor_log2(p), e);
    EXPECT_EQ(ceil_log2(p), e);
    EXPECT_EQ(floor_log2(-p), e);
    // (the float neighbours of 2^-149 and 2^-148 are powers of two themselves)
    if (e < 127 && e > -149) {
      const float above = std::nextafter(p, std::numeric_limits<float>::infinity());
      EXPECT_EQ(floor_log2(above), e) << e;
      EXPECT_EQ(ceil_log2(above), e + 1) << e;
    }
    if (e > -148) {
      const float below = std::nextafter(p, 0.0f);
      EXPECT_EQ(floor_log2(below), e - 1) << e;
      EXPECT_EQ(ceil_log2(below), e) << e;
    }
  }
  EXPECT_EQ(floor_log2(std::numeric_limits<float>::max()), 127);
  EXPECT_EQ(ceil_log2(std::numeric_limits<float>::max()), 128);
  EXPECT_EQ(floor_log2(bits_float(0x00000003u)), -148);
  EXPECT_EQ(ceil_log2(bits_float(0x00000003u)), -147);
}

}  // namespace
}  // namespace kvlab::test
