// test_quant_scale_rules.cpp: scale_rules.h on hand-computed cases and on its invariants
// (power-of-two scales cover the amax and are minimal; OCP floor brackets the amax).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "reference/quant/scale_rules.h"
#include "tests/common/test_env.h"

namespace kvlab {
namespace {

constexpr auto kA = AmaxFloorAt::kAmax;
constexpr auto kS = AmaxFloorAt::kScale;
constexpr auto kSat = Saturation::kSatFinite;
constexpr auto kNonSat = Saturation::kNonSaturating;
constexpr auto kEnc = ElementClamp::kEncoder;
constexpr auto kClamp = ElementClamp::kClampThenEncode;

float nanf() {
  return std::numeric_limits<float>::quiet_NaN();
}
float inff() {
  return std::numeric_limits<float>::infinity();
}
uint32_t bits(float x) {
  return fmt_detail::f32_bits(x);
}

TEST(ScaleRules, AmaxPropagatesNaNIgnoresSign) {
  EXPECT_EQ(amax_accumulate(0.0f, -3.0f), 3.0f);
  EXPECT_TRUE(std::isnan(amax_accumulate(3.0f, nanf())));
  EXPECT_TRUE(std::isnan(amax_accumulate(nanf(), 3.0f)));
  EXPECT_TRUE(std::isnan(amax_accumulate(nanf(), inff())));
  EXPECT_EQ(amax_accumulate(0.0f, -0.0f), 0.0f);
  EXPECT_EQ(amax_accumulate(2.0f, -inff()), inff());
  EXPECT_EQ(amax_accumulate(5.0f, 4.0f), 5.0f);
}

TEST(ScaleRules, AmaxOrderIndependent) {
  const uint64_t seed = test::seed_for("scale_rules.amax_order");
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> v(1001);
  for (auto& x : v) x = nd(rng);
  for (int trial = 0; trial < 40; ++trial) {
    if (trial == 20) {  // second half: with NaNs, which absorb in any order
      v[17] = nanf();
      v[500] = -nanf();
    }
    float ref = 0.0f;
    for (float x : v) ref = amax_accumulate(ref, x);
    EXPECT_EQ(std::isnan(ref), trial >= 20);
    std::shuffle(v.begin(), v.end(), rng);
    // pairwise tree reduction, as a warp would do it
    std::vector<float> level;
    for (float x : v) level.push_back(amax_accumulate(0.0f, x));
    while (level.size() > 1) {
      std::vector<float> next;
      for (size_t i = 0; i + 1 < level.size(); i += 2)
        next.push_back(amax_accumulate(level[i], level[i + 1]));
      if (level.size() % 2) next.push_back(level.back());
      level.swap(next);
    }
    EXPECT_EQ(bits(level[0]), bits(ref)) << "trial " << trial;
  }
}

TEST(ScaleRules, Fp32ExactHandComputed) {
  EXPECT_EQ(fp8_scale_from_amax(448.0f, ElemFormat::kFP8E4M3, 1e-4f, kA), 1.0f);
  EXPECT_EQ(fp8_scale_from_amax(896.0f, ElemFormat::kFP8E4M3, 1e-4f, kA), 2.0f);
  EXPECT_EQ(fp8_scale_from_amax(57344.0f, ElemFormat::kFP8E5M2, 1e-4f, kA), 1.0f);
  // 1/448 rounded once to float
  EXPECT_EQ(fp8_scale_from_amax(1.0f, ElemFormat::kFP8E4M3, 0.0f, kA),
            static_cast<float>(1.0 / 448.0));
  // 3 / 448 = 0.0066964285714..., RN to float: the double quotient rounded once (3/448 is
  // not a tie, so double rounding cannot bite)
  EXPECT_EQ(fp8_scale_from_amax(3.0f, ElemFormat::kFP8E4M3, 0.0f, kA),
            static_cast<float>(3.0 / 448.0));
  // floor on the amax: amax below 1e-4 uses 1e-4
  EXPECT_EQ(fp8_scale_from_amax(0.0f, ElemFormat::kFP8E4M3, 1e-4f, kA), 1e-4f / 448.0f);
  EXPECT_EQ(fp8_scale_from_amax(1e-5f, ElemFormat::kFP8E4M3, 1e-4f, kA), 1e-4f / 448.0f);
  EXPECT_EQ(fp8_scale_from_amax(2e-4f, ElemFormat::kFP8E4M3, 1e-4f, kA), 2e-4f / 448.0f);
  // floor on the scale: max(amax/448, floor)
  EXPECT_EQ(fp8_scale_from_amax(1e-5f, ElemFormat::kFP8E4M3, 1e-6f, kS), 1e-6f);
  EXPECT_EQ(fp8_scale_from_amax(448.0f, ElemFormat::kFP8E4M3, 1e-6f, kS), 1.0f);
  // floor 0 and amax 0: scale 0 (quantize_element then maps zeros to zero codes)
  EXPECT_EQ(fp8_scale_from_amax(0.0f, ElemFormat::kFP8E4M3, 0.0f, kA), 0.0f);
  // non-finite amax is kept visible
  EXPECT_TRUE(std::isnan(fp8_scale_from_amax(nanf(), ElemFormat::kFP8E4M3, 1e-4f, kA)));
  EXPECT_TRUE(std::isnan(fp8_scale_from_amax(nanf(), ElemFormat::kFP8E4M3, 1e-4f, kS)));
  EXPECT_EQ(fp8_scale_from_amax(inff(), ElemFormat::kFP8E4M3, 1e-4f, kA), inff());
}

TEST(ScaleRules, CeilPow2HandComputed) {
  const float m4 = kE4M3Max, m2 = kE2M1Max;
  EXPECT_EQ(pow2_exp_ceil(448.0f, m4, 0.0f, kA), 0);
  EXPECT_EQ(pow2_exp_ceil(449.0f, m4, 0.0f, kA), 1);
  EXPECT_EQ(pow2_exp_ceil(300.0f, m4, 0.0f, kA), 0);
  EXPECT_EQ(pow2_exp_ceil(224.0f, m4, 0.0f, kA), -1);
  EXPECT_EQ(pow2_exp_ceil(225.0f, m4, 0.0f, kA), 0);
  EXPECT_EQ(pow2_exp_ceil(6.0f, m2, 0.0f, kA), 0);
  EXPECT_EQ(pow2_exp_ceil(7.0f, m2, 0.0f, kA), 1);
  EXPECT_EQ(pow2_exp_ceil(3.0f, m2, 0.0f, kA), -1);
  // DeepSeek's 1e-4 amax floor: 1e-4 / 448 = 2.23e-7 -> 2^-22 (2.38e-7)
  EXPECT_EQ(pow2_exp_ceil(0.0f, m4, 1e-4f, kA), -22);
  // zero amax without floor: the smallest UE8M0 scale; NaN and Inf: the NaN scale
  EXPECT_EQ(pow2_exp_ceil(0.0f, m4, 0.0f, kA), kPow2MinExp);
  EXPECT_EQ(pow2_exp_ceil(nanf(), m4, 1e-4f, kA), kPow2NaN);
  EXPECT_EQ(pow2_exp_ceil(inff(), m4, 1e-4f, kA), kPow2NaN);
  // float32-subnormal amax: exponent clamped up to -127 (still covering)
  EXPECT_EQ(pow2_exp_ceil(1e-40f, m4, 0.0f, kA), kPow2MinExp);
  // a subnormal quotient that rounds down onto 2^-127 although a/m is just above it (found
  // by the exhaustive sweep): 2^-126 is the covering scale
  const float just_above = std::nextafter(6.0f * std::ldexp(1.0f, -127), 1.0f);  // 0x01400001
  EXPECT_EQ(fmt_detail::f32_bits(just_above), 0x01400001u);
  EXPECT_EQ(fmt_detail::f32_bits(just_above / 6.0f), fmt_detail::f32_bits(std::ldexp(1.0f, -127)));
  EXPECT_EQ(pow2_exp_ceil(just_above, m2, 0.0f, kA), -126);
  EXPECT_EQ(pow2_exp_ceil(6.0f * std::ldexp(1.0f, -127), m2, 0.0f, kA), -127);
  EXPECT_EQ(pow2_exp_ceil(0.0f, m2, std::ldexp(1.0f, -126), kS),
            -126);  // a kScale floor above 2^-127
  EXPECT_EQ(pow2_exp_ceil(0.0f, m2, std::ldexp(1.0f, -127), kS), -127);
  // largest float: FLT_MAX / 448 < 2^120 -> 2^120
  EXPECT_EQ(pow2_exp_ceil(std::numeric_limits<float>::max(), m4, 0.0f, kA), 120);
  EXPECT_EQ(ue8m0_code_from_exp(0), 127);
  EXPECT_EQ(ue8m0_code_from_exp(-127), 0);
  EXPECT_EQ(ue8m0_code_from_exp(127), 254);
  EXPECT_EQ(ue8m0_code_from_exp(kPow2NaN), 0xFF);
  EXPECT_EQ(pow2_scale_value(-127), ue8m0_to_float(0));
  EXPECT_EQ(pow2_scale_value(-22), std::ldexp(1.0f, -22));
  EXPECT_TRUE(std::isnan(pow2_scale_value(kPow2NaN)));
}

TEST(ScaleRules, OcpFloorHandComputed) {
  const int e2 = elem_emax(ElemFormat::kFP4E2M1), e4 = elem_emax(ElemFormat::kFP8E4M3);
  EXPECT_EQ(e2, 2);
  EXPECT_EQ(e4, 8);
  EXPECT_EQ(elem_emax(ElemFormat::kFP8E5M2), 15);
  EXPECT_EQ(pow2_exp_ocp_floor(6.0f, e2, 0.0f, kA), 0);
  EXPECT_EQ(pow2_exp_ocp_floor(7.9f, e2, 0.0f, kA), 0);  // 7.9 / 1 saturates to 6
  EXPECT_EQ(pow2_exp_ocp_floor(8.0f, e2, 0.0f, kA), 1);
  EXPECT_EQ(pow2_exp_ocp_floor(1.0f, e2, 0.0f, kA), -2);
  EXPECT_EQ(pow2_exp_ocp_floor(0.75f, e2, 0.0f, kA), -3);
  EXPECT_EQ(pow2_exp_ocp_floor(448.0f, e4, 0.0f, kA), 0);
  EXPECT_EQ(pow2_exp_ocp_floor(511.0f, e4, 0.0f, kA), 0);
  EXPECT_EQ(pow2_exp_ocp_floor(512.0f, e4, 0.0f, kA), 1);
  // floor 1e-4 on the amax: floor_log2(1e-4) = -14
  EXPECT_EQ(pow2_exp_ocp_floor(0.0f, e2, 1e-4f, kA), -16);
  EXPECT_EQ(pow2_exp_ocp_floor(0.0f, e2, 0.0f, kA), kPow2MinExp);
  EXPECT_EQ(pow2_exp_ocp_floor(1e-40f, e2, 0.0f, kA), kPow2MinExp);  // -135 clamped up
  // floor on the scale: the scale is at least the smallest power of two >= floor
  EXPECT_EQ(pow2_exp_ocp_floor(1.0f, e2, 0.25f, kS), -2);
  EXPECT_EQ(pow2_exp_ocp_floor(0.5f, e2, 0.25f, kS), -2);
  EXPECT_EQ(pow2_exp_ocp_floor(0.5f, e2, 0.3f, kS), -1);
  EXPECT_EQ(pow2_exp_ocp_floor(nanf(), e2, 1e-4f, kA), kPow2NaN);
  EXPECT_EQ(pow2_exp_ocp_floor(inff(), e2, 1e-4f, kA), kPow2NaN);
  // FLT_MAX: floor_log2 = 127 -> 125 for E2M1
  EXPECT_EQ(pow2_exp_ocp_floor(std::numeric_limits<float>::max(), e2, 0.0f, kA), 125);
}

// For sampled positive floats a: the ceil rule's 2^e is the smallest power of two with
// a / 2^e <= m (exact arithmetic in long double); the OCP rule brackets a in
// [2^(e+emax), 2^(e+emax+1)). tests/slow covers every float.
TEST(ScaleRules, Pow2InvariantsSampled) {
  const ElemFormat fmts[] = {ElemFormat::kFP8E4M3, ElemFormat::kFP8E5M2, ElemFormat::kFP4E2M1};
  int64_t checked = 0;
  for (uint32_t u = 1; u < 0x7F800000u; u += 4099) {
    const float a = fmt_detail::bits_f32(u);
    for (ElemFormat f : fmts) {
      const long double m = elem_max_finite(f);
      const int e = pow2_exp_ceil(a, elem_max_finite(f), 0.0f, kA);
      ASSERT_NE(e, kPow2NaN);
      ASSERT_LE(static_cast<long double>(a), m * std::ldexp(1.0L, e)) << "ceil covers a=" << a;
      if (e > kPow2MinExp)
        ASSERT_GT(static_cast<long double>(a), m * std::ldexp(1.0L, e - 1))
            << "ceil minimal a=" << a;
      const int o = pow2_exp_ocp_floor(a, elem_emax(f), 0.0f, kA);
      if (o > kPow2MinExp) {
        ASSERT_LE(std::ldexp(1.0L, o + elem_emax(f)), static_cast<long double>(a));
        ASSERT_LT(static_cast<long double>(a), std::ldexp(1.0L, o + elem_emax(f) + 1));
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000000);
}

TEST(ScaleRules, Nvfp4BlockScaleHandComputed) {
  EXPECT_EQ(kNVFP4TensorDivisor, 2688.0f);
  EXPECT_EQ(nvfp4_tensor_scale(2688.0f, 0.0f, kA), 1.0f);
  EXPECT_EQ(nvfp4_block_scale_code(6.0f, 1.0f, 0.0f, kA), 0x38);     // 1.0
  EXPECT_EQ(nvfp4_block_scale_code(6.0f, 0.5f, 0.0f, kA), 0x40);     // 2.0
  EXPECT_EQ(nvfp4_block_scale_code(2688.0f, 1.0f, 0.0f, kA), 0x7E);  // 448
  EXPECT_EQ(nvfp4_block_scale_code(3000.0f, 1.0f, 0.0f, kA), 0x7E);  // 500 saturates
  EXPECT_EQ(nvfp4_block_scale_code(0.0f, 1.0f, 0.0f, kA), 0x00);     // zero block
  // 1e-4/6 = 1.67e-5 is below half E4M3's min subnormal (2^-10): code 0
  EXPECT_EQ(nvfp4_block_scale_code(0.0f, 1.0f, 1e-4f, kA), 0x00);
  EXPECT_EQ(nvfp4_block_scale_code(nanf(), 1.0f, 0.0f, kA), kE4M3NaN);
  EXPECT_EQ(nvfp4_block_scale_code(inff(), 1.0f, 0.0f, kA), kE4M3NaN);
  // 6.6 / 6 = 1.1 -> E4M3 RNE: 1.125 (0x39) is nearer than 1.0
  EXPECT_EQ(nvfp4_block_scale_code(6.6f, 1.0f, 0.0f, kA), 0x39);
  EXPECT_EQ(nvfp4_element_scale(0x38, 0.5f), 0.5f);
  EXPECT_EQ(nvfp4_element_scale(0x39, 2.0f), 2.25f);
  EXPECT_EQ(nvfp4_element_scale(0x00, 2.0f), 0.0f);
}

TEST(ScaleRules, QuantizeElementHandComputed) {
  const auto E4 = ElemFormat::kFP8E4M3, E5 = ElemFormat::kFP8E5M2, F4 = ElemFormat::kFP4E2M1;
  EXPECT_EQ(quantize_element(1.0f, 1.0f, E4, kSat, kEnc), 0x38);
  EXPECT_EQ(quantize_element(2.0f, 2.0f, E4, kSat, kEnc), 0x38);
  EXPECT_EQ(quantize_element(-448.0f, 1.0f, E4, kSat, kEnc), 0xFE);
  EXPECT_EQ(quantize_element(500.0f, 1.0f, E4, kSat, kEnc), 0x7E);
  EXPECT_EQ(quantize_element(500.0f, 1.0f, E4, kNonSat, kEnc), 0x7F);
  EXPECT_EQ(quantize_element(500.0f, 1.0f, E4, kNonSat, kClamp), 0x7E);
  EXPECT_EQ(quantize_element(-inff(), 1.0f, E4, kNonSat, kClamp), 0xFE);
  EXPECT_EQ(quantize_element(nanf(), 1.0f, E4, kSat, kClamp), 0x7F);  // NaN survives the clamp
  EXPECT_EQ(quantize_element(1e6f, 1.0f, E5, kNonSat, kEnc), 0x7C);   // E5M2 Inf
  EXPECT_EQ(quantize_element(1e6f, 1.0f, E5, kSat, kEnc), 0x7B);
  // scale 0: zeros keep their sign, NaN stays NaN
  EXPECT_EQ(quantize_element(0.0f, 0.0f, E4, kSat, kEnc), 0x00);
  EXPECT_EQ(quantize_element(-0.0f, 0.0f, E4, kSat, kEnc), 0x80);
  EXPECT_EQ(quantize_element(nanf(), 0.0f, E4, kSat, kEnc), 0x7F);
  // E2M1 ties to the even code: 0.75 -> 1, 2.5 -> 2, 5 -> 4; saturation to 6
  EXPECT_EQ(quantize_element(0.75f, 1.0f, F4, kSat, kEnc), 0x2);
  EXPECT_EQ(quantize_element(2.5f, 1.0f, F4, kSat, kEnc), 0x4);
  EXPECT_EQ(quantize_element(5.0f, 1.0f, F4, kSat, kEnc), 0x6);
  EXPECT_EQ(quantize_element(-7.0f, 1.0f, F4, kSat, kEnc), 0xF);
  EXPECT_EQ(quantize_element(10.0f, 2.0f, F4, kSat, kEnc), 0x6);  // 10/2 = 5 -> 4
  // the division is IEEE: x / 3 rounded once, then encoded
  const float x = 1.0f, s = 3.0f;
  EXPECT_EQ(quantize_element(x, s, E4, kSat, kEnc),
            float_to_e4m3(static_cast<float>(1.0 / 3.0), kSat));
  EXPECT_EQ(dequantize_element(0x38, 0.25f, E4), 0.25f);
  EXPECT_EQ(dequantize_element(0x7, 0.5f, F4), 3.0f);
  EXPECT_TRUE(std::isnan(dequantize_element(0x7, nanf(), F4)));
}

TEST(ScaleRules, ElemFormatFacts) {
  EXPECT_EQ(elem_max_finite(ElemFormat::kFP8E4M3), 448.0f);
  EXPECT_EQ(elem_max_finite(ElemFormat::kFP8E5M2), 57344.0f);
  EXPECT_EQ(elem_max_finite(ElemFormat::kFP4E2M1), 6.0f);
  EXPECT_EQ(elem_max_finite(ElemFormat::kFP16), 65504.0f);
  EXPECT_EQ(elem_max_finite(ElemFormat::kBF16), bf16_bits_to_float(0x7F7F));
  EXPECT_EQ(elem_bits(ElemFormat::kFP4E2M1), 4);
  EXPECT_EQ(elem_bits(ElemFormat::kFP8E5M2), 8);
  EXPECT_EQ(elem_bits(ElemFormat::kBF16), 16);
  for (uint32_t c = 0; c < 256; ++c) {
    const float v = decode_elem(static_cast<uint16_t>(c), ElemFormat::kFP8E4M3);
    if (!std::isnan(v)) EXPECT_EQ(encode_elem(v, ElemFormat::kFP8E4M3, kSat), c) << "code " << c;
  }
}

}  // namespace
}  // namespace kvlab
