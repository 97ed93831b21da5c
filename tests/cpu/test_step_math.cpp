// test_step_math.cpp: the decoder config and the host/device step math (weights, RoPE,
// sampling primitives) that the CPU reference and the GPU step share.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "reference/core/error.h"
#include "reference/step/decode_step.h"
#include "reference/step/decoder_config.h"
#include "reference/step/step_math.h"
#include "tests/common/test_env.h"

namespace kvlab {
namespace {

TEST(StepConfig, PresetsValidateAndCount) {
  for (const auto& n : decoder_preset_names()) {
    const DecoderConfig c = decoder_preset(n);
    EXPECT_NO_THROW(validate(c)) << n;
    EXPECT_EQ(c.name, n);
  }
  // Llama-3-8B's shape has 8,030,261,248 parameters (embedding and LM head untied).
  const DecoderConfig l = decoder_preset("llama3-8b");
  EXPECT_EQ(parameter_count(l), 8030261248LL);
  EXPECT_EQ(parameter_count(l) - step_weight_elements(l), int64_t{128256} * 4096);
  EXPECT_EQ(to_string(l), "llama3-8b L32 H4096 q32/kv8x128 F14336 V128256");
  const auto shapes = linear_shapes(l);
  ASSERT_EQ(shapes.size(), 5u);
  EXPECT_EQ(shapes[0].n, 6144);   // qkv: (32 + 2 * 8) * 128
  EXPECT_EQ(shapes[2].n, 28672);  // gate_up
  EXPECT_EQ(shapes[3].k, 14336);  // down
  EXPECT_EQ(shapes[4].count, 1);  // one LM head
  EXPECT_STREQ(to_string(Linear::kGateUp), "gate_up");
}

TEST(StepConfig, RejectsBadConfigsWithReasons) {
  EXPECT_THROW(decoder_preset("gpt5"), InvalidArgument);
  try {
    decoder_preset("gpt5");
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("llama3-8b"), std::string::npos) << e.what();
  }
  DecoderConfig c = decoder_preset("tiny");
  c.q_heads = 3;  // not a multiple of kv_heads 2
  EXPECT_THROW(validate(c), InvalidArgument);
  c = decoder_preset("tiny");
  c.head_dim = 63;
  EXPECT_THROW(validate(c), InvalidArgument);
  c = decoder_preset("tiny");
  c.layers = 0;
  EXPECT_THROW(validate(c), InvalidArgument);
  c = decoder_preset("tiny");
  c.rms_eps = 0;
  EXPECT_THROW(validate(c), InvalidArgument);
}

TEST(StepConfig, ByteAndFlopAccounting) {
  // y[4, 6] = x[4, 5] W^T: weights 2*30, x 2*20, y 4*24 bytes; 2*4*6*5 FLOPs
  EXPECT_DOUBLE_EQ(gemm_bytes(4, 6, 5, 4), 60.0 + 40.0 + 96.0);
  EXPECT_DOUBLE_EQ(gemm_flops(4, 6, 5), 240.0);
  const DecoderConfig l = decoder_preset("llama3-8b");
  // BF16: 2 (K, V) * 32 layers * 8 heads * 128 dims * 2 bytes = 131072 bytes per token
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(l, KvFormat::kBF16), 131072.0);
  // FP8 per token: half the data + one FP32 scale per (layer, K/V, head)
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(l, KvFormat::kFP8E4M3PerToken), 65536.0 + 2 * 32 * 8 * 4);
  // NVFP4: a quarter of the data + one byte per 16 elements
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(l, KvFormat::kNVFP4), 32768.0 + 2 * 32 * 8 * 8);
}

TEST(StepMath, SyntheticWeightsAreDeterministicBoundedAndStreamed) {
  const uint64_t seed = test::seed_for("weights");
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const DecoderConfig c = decoder_preset("tiny");
  const auto a = ref::synthetic_tensor(c, step::WeightTensor::kWqkv, 1, 4096);
  const auto b = ref::synthetic_tensor(c, step::WeightTensor::kWqkv, 1, 4096);
  EXPECT_EQ(a, b);
  const auto other_layer = ref::synthetic_tensor(c, step::WeightTensor::kWqkv, 0, 4096);
  EXPECT_NE(a, other_layer);
  const float bound = ref::synthetic_init(step::WeightTensor::kWqkv, c).first;
  double sum = 0, sq = 0;
  for (uint16_t w : a) {
    const float v = bf16_bits_to_float(w);
    ASSERT_LE(std::fabs(v), bound * 1.004f);  // BF16 rounding of a value within the bound
    sum += v;
    sq += double(v) * v;
  }
  // U(-a, a): mean 0, variance a^2 / 3 (4096 samples: 5 standard errors)
  const double n = a.size(), var = sq / n - (sum / n) * (sum / n),
               expect = double(bound) * bound / 3;
  EXPECT_LT(std::fabs(sum / n), 5 * std::sqrt(expect / n));
  EXPECT_NEAR(var, expect, 5 * expect * std::sqrt(0.8 / n));
  // norm gains: 1 +- 0.25
  for (uint16_t w : ref::synthetic_tensor(c, step::WeightTensor::kAttnNorm, 0, c.hidden)) {
    EXPECT_GE(bf16_bits_to_float(w), 0.74f);
    EXPECT_LE(bf16_bits_to_float(w), 1.26f);
  }
  // different seeds give different weights
  DecoderConfig c2 = c;
  c2.seed = seed;
  EXPECT_NE(ref::synthetic_tensor(c2, step::WeightTensor::kWqkv, 1, 64),
            ref::synthetic_tensor(c, step::WeightTensor::kWqkv, 1, 64));
}

TEST(StepMath, UniformGrids) {
  std::mt19937_64 rng(test::seed_for("uniform"));
  for (int i = 0; i < 100000; ++i) {
    const uint64_t h = rng();
    const float u = step::uniform_pm1(h);
    ASSERT_GE(u, -1.0f);
    ASSERT_LT(u, 1.0f);
    const float z = step::uniform01(h);
    ASSERT_GE(z, 0.0f);
    ASSERT_LT(z, 1.0f);
  }
  EXPECT_EQ(step::uniform_pm1(0), -1.0f);
  EXPECT_EQ(step::uniform_pm1(~uint64_t{0}), 1.0f - 1.0f / 8388608.0f);
}

TEST(StepMath, RopeTableAndRotation) {
  const DecoderConfig c = decoder_preset("tiny");
  const auto t = ref::rope_table(c, 5);
  ASSERT_EQ(t.size(), 5u * 32 * 2);
  // position 0: identity rotation
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(t[2 * i], 1.0f);
    EXPECT_EQ(t[2 * i + 1], 0.0f);
  }
  // position 3, pair 1: angle 3 * theta^(-2/64)
  const double a = 3.0 * std::pow(10000.0, -2.0 / 64);
  EXPECT_EQ(t[(3 * 32 + 1) * 2], static_cast<float>(std::cos(a)));
  EXPECT_EQ(t[(3 * 32 + 1) * 2 + 1], static_cast<float>(std::sin(a)));
  // a rotation preserves the pair's norm up to rounding and rotates by the angle
  float y0, y1;
  step::rope_rotate(1.0f, 0.0f, 0.0f, 1.0f, &y0, &y1);  // 90 degrees
  EXPECT_EQ(y0, 0.0f);
  EXPECT_EQ(y1, 1.0f);
  EXPECT_THROW(ref::rope_table(c, 0), InvalidArgument);
}

TEST(StepMath, OrderKeysAreMonotoneAndPutNaNLast) {
  std::vector<float> v = {-INFINITY, -3.5f, -1e-30f, -0.0f, 0.0f, 1e-30f, 2.0f, 3.4e38f, INFINITY};
  for (size_t i = 0; i + 1 < v.size(); ++i)
    EXPECT_LT(step::float_order_key(v[i]), step::float_order_key(v[i + 1]))
        << v[i] << " vs " << v[i + 1];
  EXPECT_LT(step::float_order_key(NAN), step::float_order_key(-INFINITY));
  EXPECT_LT(step::float_order_key(-NAN), step::float_order_key(-INFINITY));
  // ties: the lower token id ranks first; the token survives the round trip
  EXPECT_GT(step::token_order_key(1.0f, 3), step::token_order_key(1.0f, 7));
  EXPECT_GT(step::token_order_key(1.5f, 7), step::token_order_key(1.0f, 3));
  EXPECT_EQ(step::token_of_key(step::token_order_key(-2.0f, 123456)), 123456u);
}

TEST(StepMath, DetExpIsAccurateOnItsDomain) {
  double worst = 0;
  for (int i = 0; i < 200000; ++i) {  // (-87, 0]; at and below -87 det_exp returns 0
    const float x = -87.0f * i / 200000.0f;
    const double e = std::exp(static_cast<double>(x));
    const double got = step::det_exp(x);
    const double rel = std::fabs(got - e) / e;
    worst = std::max(worst, rel / step::det_exp_error_bound(x));
  }
  EXPECT_LE(worst, 1.0);
  EXPECT_EQ(step::det_exp(0.0f), 1.0f);
  EXPECT_EQ(step::det_exp(-87.0f), 0.0f);
  EXPECT_EQ(step::det_exp(-100.0f), 0.0f);
  EXPECT_EQ(step::det_exp(NAN), 0.0f);
}

TEST(StepMath, SampleSortedFollowsTheSoftmax) {
  // three candidates, logits 2, 1, 0 at temperature 1: p = softmax
  const float vals[3] = {2.0f, 1.0f, 0.0f};
  const double z = std::exp(2.0) + std::exp(1.0) + 1.0;
  const double p0 = std::exp(2.0) / z, p1 = std::exp(1.0) / z;
  EXPECT_EQ(step::sample_sorted(vals, 3, 1.0f, 0.0f), 0);
  EXPECT_EQ(step::sample_sorted(vals, 3, 1.0f, static_cast<float>(p0) - 1e-4f), 0);
  EXPECT_EQ(step::sample_sorted(vals, 3, 1.0f, static_cast<float>(p0) + 1e-4f), 1);
  EXPECT_EQ(step::sample_sorted(vals, 3, 1.0f, static_cast<float>(p0 + p1) + 1e-4f), 2);
  EXPECT_EQ(step::sample_sorted(vals, 3, 1.0f, 0.99999994f), 2);
  EXPECT_EQ(step::sample_sorted(vals, 1, 1.0f, 0.9f), 0);  // k = 1 is greedy
  // frequencies over many draws match p within 5 standard errors
  const uint64_t seed = test::seed_for("draws");
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  int counts[3] = {0, 0, 0};
  const int n = 200000;
  for (int i = 0; i < n; ++i)
    ++counts[step::sample_sorted(vals, 3, 1.0f, step::sampling_uniform(seed, i, 7))];
  const double p[3] = {p0, p1, 1.0 / z};
  for (int j = 0; j < 3; ++j)
    EXPECT_NEAR(counts[j] / double(n), p[j], 5 * std::sqrt(p[j] * (1 - p[j]) / n)) << j;
}

TEST(StepSampling, GreedyAndTopKOnTheReference) {
  std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, NAN, 2.9f};
  EXPECT_EQ(ref::greedy_token(logits.data(), 6), 1);  // tie 1 vs 3: lower id
  // top-1 is greedy for any draw
  for (int pos = 0; pos < 50; ++pos)
    EXPECT_EQ(ref::top_k_token(logits.data(), 6, 1, 1.0f, 9, 0, pos), 1);
  // top-3 picks among {1, 3, 5} only (p ~ 0.35, 0.35, 0.31 at temperature 1)
  std::map<int, int> seen;
  for (int pos = 0; pos < 400; ++pos)
    seen[ref::top_k_token(logits.data(), 6, 3, 1.0f, 11, 2, pos)]++;
  for (const auto& [tok, n] : seen)
    EXPECT_TRUE(tok == 1 || tok == 3 || tok == 5) << tok << " x" << n;
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_THROW(ref::top_k_token(logits.data(), 6, 0, 1.0f, 0, 0, 0), InvalidArgument);
  EXPECT_THROW(ref::top_k_token(logits.data(), 6, 7, 1.0f, 0, 0, 0), InvalidArgument);
  EXPECT_THROW(ref::top_k_token(logits.data(), 6, 2, 0.0f, 0, 0, 0), InvalidArgument);
  std::vector<float> all_nan(4, NAN);
  const int32_t t = ref::greedy_token(all_nan.data(), 4);
  EXPECT_TRUE(t >= 0 && t < 4);
}

}  // namespace
}  // namespace kvlab
