// test_step_sequence.cpp: the real-model paths of the CPU reference decode step
// (reference/step/decode_step.h): a weight source, teacher forcing (forward_sequence), per-layer
// and scheme-coded KV storage; and the model file's block dequantization
// (experiments/model/model_file.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "experiments/model/model_file.h"
#include "reference/core/error.h"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "reference/step/decode_step.h"

namespace kvlab {
namespace {

std::vector<int32_t> iota_table(int n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), 0);
  return t;
}

std::vector<int32_t> tokens_of(int n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

ref::StepCacheOptions cache_of(KvFormat f) {
  ref::StepCacheOptions o;
  o.format = f;
  o.block_size = 16;
  o.k_scale = o.v_scale = 0.02f;  // unit-scale synthetic K/V over the FP8/FP4 range
  return o;
}

// Logits of `n` tokens fed one decode step at a time: [n, vocab].
std::vector<float> by_steps(const DecoderConfig& c, const ref::StepCacheOptions& o,
                            const std::vector<int32_t>& toks) {
  ref::DecoderRef r(c, o, 1, static_cast<int>(toks.size()));
  r.start(1, iota_table(r.blocks_per_seq()));
  std::vector<float> all;
  for (int32_t t : toks) {
    r.step({t});
    all.insert(all.end(), r.logits().begin(), r.logits().end());
  }
  return all;
}

// The same tokens through forward_sequence in chunks of `chunk`.
std::vector<float> by_sequence(const DecoderConfig& c, const ref::StepCacheOptions& o,
                               const std::vector<int32_t>& toks, int chunk) {
  ref::DecoderRef r(c, o, 1, static_cast<int>(toks.size()));
  r.start(1, iota_table(r.blocks_per_seq()));
  std::vector<float> all;
  for (size_t p = 0; p < toks.size(); p += chunk) {
    const size_t e = std::min(toks.size(), p + chunk);
    r.forward_sequence(std::vector<int32_t>(toks.begin() + p, toks.begin() + e));
    all.insert(all.end(), r.logits().begin(), r.logits().end());
  }
  return all;
}

TEST(StepSequence, TeacherForcingEqualsDecodeSteps) {
  const DecoderConfig c = decoder_preset("tiny");
  const std::vector<int32_t> toks = tokens_of(37, c.vocab, 11);  // chunks of 16 + 16 + 5
  for (KvFormat f : {KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kFP8E4M3PerToken,
                     KvFormat::kNVFP4, KvFormat::kMXFP4}) {
    const auto a = by_steps(c, cache_of(f), toks);
    const auto b = by_sequence(c, cache_of(f), toks, 16);
    ASSERT_EQ(a.size(), b.size());
    ErrorStats es;
    const Tolerance tol = tolerance(Op::kDecodeStepLogits, f, DType::kF32, c.layers);
    EXPECT_TRUE(check(b.data(), a.data(), a.size(), tol, &es))
        << to_string(f) << ": " << to_string(es);
    // and the same K/V pages: a prefill is the decode steps' cache, not just close logits
    ref::DecoderRef r1(c, cache_of(f), 1, 37), r2(c, cache_of(f), 1, 37);
    r1.start(1, iota_table(r1.blocks_per_seq()));
    r2.start(1, iota_table(r2.blocks_per_seq()));
    for (int32_t t : toks) r1.step({t});
    r2.forward_sequence(toks);
    int differ = 0;
    for (int l = 0; l < c.layers; ++l) {
      const KvCacheView v1 = r1.cache_view(l), v2 = r2.cache_view(l);
      for (int64_t i = 0; i < v1.geom.bytes(); ++i)
        differ += static_cast<uint8_t*>(v1.k)[i] != static_cast<uint8_t*>(v2.k)[i];
    }
    // GEMM row chunks may round K differently in the last bit; the pages must still agree
    // almost everywhere (a wrong position or slot would differ everywhere)
    EXPECT_LT(differ, c.layers * 37 * c.kv_dim() / 20) << to_string(f);
  }
}

TEST(StepSequence, ChunkingDoesNotChangeTheResult) {
  const DecoderConfig c = decoder_preset("tiny");
  const std::vector<int32_t> toks = tokens_of(40, c.vocab, 5);
  const auto a = by_sequence(c, cache_of(KvFormat::kNVFP4), toks, 40);
  const auto b = by_sequence(c, cache_of(KvFormat::kNVFP4), toks, 7);
  ErrorStats es;
  EXPECT_TRUE(check(b.data(), a.data(), a.size(),
                    tolerance(Op::kDecodeStepLogits, KvFormat::kNVFP4, DType::kF32, c.layers), &es))
      << to_string(es);
}

TEST(StepSequence, GivenWeightsEqualTheSyntheticConstructor) {
  const DecoderConfig c = decoder_preset("tiny");
  const std::vector<int32_t> toks = tokens_of(9, c.vocab, 2);
  ref::DecoderRef a(c, cache_of(KvFormat::kBF16), 1, 9);
  ref::DecoderRef b(c, synthetic_weights(c), cache_of(KvFormat::kBF16), 1, 9);
  a.start(1, iota_table(a.blocks_per_seq()));
  b.start(1, iota_table(b.blocks_per_seq()));
  a.forward_sequence(toks);
  b.forward_sequence(toks);
  EXPECT_EQ(a.logits(), b.logits());
  // tied LM head: the embedding serves as the LM head
  DecoderWeights w = synthetic_weights(c);
  DecoderWeights tied = w;
  tied.lm_head.clear();
  w.lm_head = w.embedding;
  ref::DecoderRef d1(c, w, cache_of(KvFormat::kBF16), 1, 9),
      d2(c, tied, cache_of(KvFormat::kBF16), 1, 9);
  d1.start(1, iota_table(d1.blocks_per_seq()));
  d2.start(1, iota_table(d2.blocks_per_seq()));
  d1.forward_sequence(toks);
  d2.forward_sequence(toks);
  EXPECT_EQ(d1.logits(), d2.logits());
  EXPECT_NE(d1.logits(), a.logits());
}

TEST(StepSequence, SchemeCodedEqualsPagedForTheSameFormat) {
  // The schemes that are paged formats store the same values bit for bit: logits identical.
  const DecoderConfig c = decoder_preset("tiny");
  const std::vector<int32_t> toks = tokens_of(21, c.vocab, 3);
  const std::vector<std::pair<std::string, KvFormat>> pairs = {
      {"bf16", KvFormat::kBF16},
      {"fp8_e4m3_per_tensor", KvFormat::kFP8E4M3},
      {"fp8_e5m2_per_tensor", KvFormat::kFP8E5M2},
      {"fp8_e4m3_per_token", KvFormat::kFP8E4M3PerToken},
      {"nvfp4", KvFormat::kNVFP4},
      {"mxfp4", KvFormat::kMXFP4}};
  for (const auto& [preset, fmt] : pairs) {
    ref::StepCacheOptions schemes = cache_of(fmt);
    auto s = std::make_shared<const ref::QuantScheme>(ref::make_scheme(preset));
    for (int l = 0; l < c.layers; ++l) {
      ref::LayerKvSpec ls;
      ls.k_scheme = ls.v_scheme = s;
      ls.k_scale = ls.v_scale = 0.02f;
      schemes.layers.push_back(ls);
    }
    const auto paged = by_sequence(c, cache_of(fmt), toks, 8);
    const auto coded = by_sequence(c, schemes, toks, 8);
    EXPECT_EQ(paged, coded) << preset;
    // and the decode step takes the scheme path too (dense attention), within tolerance
    const auto stepped = by_steps(c, schemes, toks);
    ErrorStats es;
    EXPECT_TRUE(check(stepped.data(), paged.data(), paged.size(),
                      tolerance(Op::kDecodeStepLogits, fmt, DType::kF32, c.layers), &es))
        << preset << ": " << to_string(es);
  }
}

TEST(StepSequence, PerLayerFormatsAndKDifferentFromV) {
  const DecoderConfig c = decoder_preset("tiny");
  const std::vector<int32_t> toks = tokens_of(17, c.vocab, 4);
  const auto bf16 = by_sequence(c, cache_of(KvFormat::kBF16), toks, 17);
  const auto fp4 = by_sequence(c, cache_of(KvFormat::kMXFP4), toks, 17);
  ref::StepCacheOptions mixed = cache_of(KvFormat::kMXFP4);
  mixed.layers.resize(c.layers);
  mixed.layers[0].format = KvFormat::kBF16;  // layer 0 kept in BF16
  mixed.layers[1].format = KvFormat::kMXFP4;
  const auto part = by_sequence(c, mixed, toks, 17);
  EXPECT_NE(part, fp4);
  EXPECT_NE(part, bf16);
  // K in mxfp4, V in bf16 (scheme-coded) differs from both
  ref::StepCacheOptions kv = cache_of(KvFormat::kBF16);
  for (int l = 0; l < c.layers; ++l) {
    ref::LayerKvSpec s;
    s.k_scheme = std::make_shared<const ref::QuantScheme>(ref::make_scheme("mxfp4"));
    s.v_scheme = std::make_shared<const ref::QuantScheme>(ref::make_scheme("bf16"));
    kv.layers.push_back(s);
  }
  const auto konly = by_sequence(c, kv, toks, 17);
  EXPECT_NE(konly, fp4);
  EXPECT_NE(konly, bf16);
}

TEST(StepSequence, ObserverSeesPreAndPostRopeKeys) {
  const DecoderConfig c = decoder_preset("tiny");
  const std::vector<int32_t> toks = tokens_of(5, c.vocab, 8);
  ref::DecoderRef r(c, cache_of(KvFormat::kBF16), 1, 5);
  r.start(1, iota_table(r.blocks_per_seq()));
  int calls = 0;
  double diff_pos0 = -1, diff_pos4 = 0;
  r.forward_sequence(toks, [&](int, int pos0, int rows, const float* kp, const float* k,
                               const float* v, const uint16_t* q) {
    ++calls;
    EXPECT_EQ(pos0, 0);
    EXPECT_EQ(rows, 5);
    ASSERT_NE(v, nullptr);
    ASSERT_NE(q, nullptr);
    diff_pos0 = 0;
    for (int i = 0; i < c.kv_dim(); ++i) diff_pos0 += std::fabs(kp[i] - k[i]);
    for (int i = 0; i < c.kv_dim(); ++i)
      diff_pos4 += std::fabs(kp[4 * c.kv_dim() + i] - k[4 * c.kv_dim() + i]);
  });
  EXPECT_EQ(calls, c.layers);
  EXPECT_EQ(diff_pos0, 0.0);  // RoPE at position 0 is the identity
  EXPECT_GT(diff_pos4, 0.0);
}

TEST(StepSequence, RejectsBadInput) {
  const DecoderConfig c = decoder_preset("tiny");
  DecoderWeights w = synthetic_weights(c);
  w.layers[1].wo.pop_back();
  EXPECT_THROW(ref::DecoderRef(c, w, cache_of(KvFormat::kBF16), 1, 4), InvalidArgument);
  ref::StepCacheOptions o = cache_of(KvFormat::kBF16);
  o.layers.resize(1);  // tiny has 2 layers
  EXPECT_THROW(ref::DecoderRef(c, o, 1, 4), InvalidArgument);
  ref::StepCacheOptions half = cache_of(KvFormat::kBF16);
  half.layers.resize(c.layers);
  half.layers[0].k_scheme = std::make_shared<const ref::QuantScheme>(ref::make_scheme("mxfp4"));
  EXPECT_THROW(ref::DecoderRef(c, half, 1, 4), InvalidArgument);  // K scheme without V
  ref::DecoderRef r(c, cache_of(KvFormat::kBF16), 1, 4);
  r.start(1, iota_table(r.blocks_per_seq()));
  EXPECT_THROW(r.forward_sequence({1, 2, 3, 4, 5}), InvalidArgument);  // beyond max_context
  EXPECT_THROW(r.forward_sequence({c.vocab}), InvalidArgument);
}

// ------------------------------------------------------------------ model file blocks
uint16_t fp16(float x) {
  return float_to_fp16_bits(x, Saturation::kSatFinite);
}

TEST(ModelFileBlocks, DequantizeAsGgufPyDoes) {
  // q8_0: d = 0.5, q_j = j - 16 -> (j - 16) * 0.5
  std::vector<uint8_t> b8(34);
  const uint16_t d = fp16(0.5f);
  std::memcpy(b8.data(), &d, 2);
  for (int j = 0; j < 32; ++j) b8[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  std::vector<uint16_t> out(32);
  exp::dequantize_blocks_bf16("q8_0", b8.data(), 32, out.data());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(bf16_bits_to_float(out[j]), (j - 16) * 0.5f) << j;
  // q4_1: d = 0.25, m = -1; q_j = j % 16 (low nibbles: j < 16, high: j >= 16)
  std::vector<uint8_t> b41(20);
  const uint16_t d4 = fp16(0.25f), m4 = fp16(-1.0f);
  std::memcpy(b41.data(), &d4, 2);
  std::memcpy(b41.data() + 2, &m4, 2);
  for (int j = 0; j < 16; ++j) b41[4 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  exp::dequantize_blocks_bf16("q4_1", b41.data(), 32, out.data());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(bf16_bits_to_float(out[j]), 0.25f * j - 1.0f) << j;
    EXPECT_EQ(bf16_bits_to_float(out[16 + j]), 0.25f * (15 - j) - 1.0f) << j;
  }
  // q4_0: value = d * (q - 8)
  std::vector<uint8_t> b40(18);
  std::memcpy(b40.data(), &d, 2);
  for (int j = 0; j < 16; ++j) b40[2 + j] = static_cast<uint8_t>(j | (j << 4));
  exp::dequantize_blocks_bf16("q4_0", b40.data(), 32, out.data());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(bf16_bits_to_float(out[j]), 0.5f * ((j % 16) - 8)) << j;
  // values beyond BF16's 8 bits round to nearest even: 1 + 2^-8 (q4_1 d = 2^-8, m = 1, q = 1)
  const uint16_t dd = fp16(1.0f / 256), one = fp16(1.0f);
  std::memcpy(b41.data(), &dd, 2);
  std::memcpy(b41.data() + 2, &one, 2);
  for (int j = 0; j < 16; ++j) b41[4 + j] = 0x31;  // q = 1 (low), 3 (high)
  exp::dequantize_blocks_bf16("q4_1", b41.data(), 32, out.data());
  EXPECT_EQ(bf16_bits_to_float(out[0]), 1.0f);               // 1 + 2^-8: tie, to even
  EXPECT_EQ(bf16_bits_to_float(out[16]), 1.0f + 1.0f / 64);  // 1 + 3 * 2^-8 -> 1 + 2^-6
  EXPECT_THROW(exp::dequantize_blocks_bf16("q5_k", b41.data(), 32, out.data()), InvalidArgument);
}

TEST(ModelFileBlocks, MissingOrForeignFilesAreBadInput) {
  EXPECT_THROW(exp::read_model_file("/nonexistent/model.h5"), InvalidArgument);
  EXPECT_THROW(exp::check_model_file("/nonexistent/model.h5"), InvalidArgument);
}

}  // namespace
}  // namespace kvlab
