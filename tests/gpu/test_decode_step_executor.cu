// test_decode_step_executor.cu: the full GPU decode step (every variant) against the CPU reference.
//
// Teacher forcing keeps the GPU and the reference on the same token sequence (a random
// prompt, then the reference's greedy choices), so every step's logits are compared under
// tolerance(Op::kDecodeStepLogits, format, f32). The greedy token must then be identical
// wherever the reference's top-2 margin exceeds the two tokens' elementwise bounds (a flip
// there would need an error the logits check has already excluded). Variants must agree:
// a CUDA-graph replay is bitwise the eager fused step when the batch fills its bucket.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "gpu/core/device_info.h"
#include "gpu/runtime/decode_step_executor.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "reference/step/decode_step.h"
#include "tests/common/test_env.h"

namespace kvlab {
namespace {

#define REQUIRE_GPU()                                               \
  do {                                                              \
    if (!gpu::device_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

struct Case {
  const char* preset;
  KvFormat format;
  KvLayout layout;
  int block_size;
  int batch;
  int max_batch;
};

std::string name(const Case& c) {
  return std::string(c.preset) + "/" + to_string(c.format) + "/" + to_string(c.layout) + "/bs" +
         std::to_string(c.block_size) + "/batch" + std::to_string(c.batch);
}

ref::StepCacheOptions cache_of(const gpu::ExecutorOptions& o) {
  ref::StepCacheOptions c;
  c.format = o.kv_format;
  c.layout = o.kv_layout;
  c.block_size = o.block_size;
  c.k_scale = o.k_scale;
  c.v_scale = o.v_scale;
  return c;
}

// Index of the largest and second largest logit of a row (ties: lower id first).
std::pair<int, int> top2(const float* row, int vocab) {
  int a = ref::greedy_token(row, vocab), b = -1;
  for (int i = 0; i < vocab; ++i)
    if (i != a && (b < 0 || row[i] > row[b])) b = i;
  return {a, b};
}

struct RunStats {
  int steps = 0, rows = 0, decisive = 0, same_token = 0;
  double max_abs = 0;
};

// Teacher-forced generation: `prompt` random steps, then the reference's greedy tokens.
// Returns the GPU logits of every step (for cross-variant comparisons).
std::vector<std::vector<float>> run_against_reference(gpu::DecodeStepExecutor& e,
                                                      ref::DecoderRef& r, const Case& cs,
                                                      gpu::StepVariant v, int steps, int prompt,
                                                      RunStats* st) {
  const DecoderConfig& c = e.config();
  const Tolerance tol = tolerance(Op::kDecodeStepLogits, cs.format, DType::kF32, c.layers);
  e.start(cs.batch);
  r.start(cs.batch, e.block_table());
  const uint64_t seed = test::seed_for("step-prompt");
  std::mt19937_64 rng(seed);
  std::vector<int32_t> tok(cs.batch);
  for (auto& t : tok) t = static_cast<int32_t>(rng() % c.vocab);
  std::vector<std::vector<float>> all;
  for (int s = 0; s < steps; ++s) {
    e.step(tok, v, gpu::Sampling{});
    const std::vector<int32_t> want = r.step(tok);
    const std::vector<float> got = e.logits();
    const std::vector<int32_t> gtok = e.sampled_tokens();
    ErrorStats es;
    const bool ok = check(got.data(), r.logits().data(), got.size(), tol, &es);
    EXPECT_TRUE(ok) << name(cs) << " " << to_string(v) << " step " << s << " prompt seed " << seed
                    << ": " << to_string(es);
    st->max_abs = std::max(st->max_abs, es.max_abs);
    for (int b = 0; b < cs.batch; ++b) {
      const float* rr = r.logits().data() + size_t(b) * c.vocab;
      const auto [t1, t2] = top2(rr, c.vocab);
      const double margin = double(rr[t1]) - rr[t2];
      const double bound = 2 * tol.atol + tol.rtol * (std::fabs(rr[t1]) + std::fabs(rr[t2]));
      ++st->rows;
      st->same_token += gtok[b] == want[b];
      if (margin > bound) {
        ++st->decisive;
        EXPECT_EQ(gtok[b], want[b]) << name(cs) << " " << to_string(v) << " step " << s << " row "
                                    << b << " margin " << margin << " > bound " << bound;
      }
    }
    ++st->steps;
    all.push_back(got);
    if (s + 1 < prompt) {
      for (auto& t : tok) t = static_cast<int32_t>(rng() % c.vocab);
    } else {
      tok = want;
    }
  }
  return all;
}

TEST(StepEngine, EveryVariantMatchesTheReference) {
  REQUIRE_GPU();
  const std::vector<Case> cases = {
      {"tiny", KvFormat::kBF16, KvLayout::kNHD, 16, 4, 4},
      {"tiny", KvFormat::kBF16, KvLayout::kHND, 7, 3, 4},  // padding rows in the graph bucket
      {"small", KvFormat::kBF16, KvLayout::kSplitX, 16, 2, 2},
      {"small", KvFormat::kFP8E4M3PerToken, KvLayout::kNHD, 16, 5, 8},
      {"tiny", KvFormat::kFP8E4M3, KvLayout::kHND, 32, 2, 2},
      {"tiny", KvFormat::kNVFP4, KvLayout::kNHD, 16, 2, 2},
  };
  const int steps = 24, prompt = 6;
  for (const Case& cs : cases) {
    const DecoderConfig c = decoder_preset(cs.preset);
    gpu::ExecutorOptions o;
    o.kv_format = cs.format;
    o.kv_layout = cs.layout;
    o.block_size = cs.block_size;
    o.max_batch = cs.max_batch;
    o.max_context = steps;
    o.k_scale = 0.02f;  // pool scales: unit-scale K/V over the FP8/FP4 range
    o.v_scale = 0.02f;
    // Every case is inside the executor's design: an Unsupported here is a failure.
    std::unique_ptr<gpu::DecodeStepExecutor> e;
    try {
      e = std::make_unique<gpu::DecodeStepExecutor>(c, o);
    } catch (const Unsupported& u) {
      ADD_FAILURE() << name(cs) << " declined: " << u.what();
      continue;
    }
    ref::DecoderRef r(c, cache_of(o), o.max_batch, o.max_context);
    std::map<gpu::StepVariant, std::vector<std::vector<float>>> logits;
    for (gpu::StepVariant v : gpu::all_step_variants()) {
      RunStats st;
      logits[v] = run_against_reference(*e, r, cs, v, steps, prompt, &st);
      std::printf(
          "%s %-13s attn v%d: %d steps x %d rows, max |dlogit| %.3g, decisive %d, same token %d\n",
          name(cs).c_str(), to_string(v), e->attn_version(), st.steps, cs.batch, st.max_abs,
          st.decisive, st.same_token);
      // the bound must leave tokens to check: many for 16-bit caches (2 atol = 0.25 vs top-2
      // gaps of ~0.25 on average), some for FP8 (0.5); the FP4 bound (2) decides none
      const int need =
          kv_format_bits(cs.format) == 16 ? st.rows / 8 : (kv_format_bits(cs.format) == 8 ? 1 : 0);
      EXPECT_GE(st.decisive, need) << "the bound decides too few tokens to test anything";
    }
    // A graph replays the eager kernels: bitwise equal when the batch fills its bucket.
    if (e->bucket_for(cs.batch) == cs.batch) {
      EXPECT_EQ(logits[gpu::StepVariant::kGraphFused], logits[gpu::StepVariant::kEagerFused])
          << name(cs);
      EXPECT_EQ(logits[gpu::StepVariant::kGraphUnfused], logits[gpu::StepVariant::kEagerUnfused])
          << name(cs);
    }
    EXPECT_GE(e->graphs_captured(), 2);
  }
}

// The llama3-8b shape itself (32 layers, 4096 wide, vocabulary 128256) against the CPU
// reference on a short context: 2 sequences, 4 teacher-forced steps from an empty cache, the
// eager unfused and the fused graph step. The reference holds the 8B weights as floats (32 GB
// of host memory) and takes seconds per step; the GPU's step shares no kernel with it.
TEST(StepEngine, Llama3_8bMatchesTheReferenceOnAShortContext) {
  REQUIRE_GPU();
  const Case cs{"llama3-8b", KvFormat::kBF16, KvLayout::kNHD, 16, 2, 2};
  const DecoderConfig c = decoder_preset(cs.preset);
  gpu::ExecutorOptions o;
  o.kv_format = cs.format;
  o.kv_layout = cs.layout;
  o.block_size = cs.block_size;
  o.max_batch = cs.max_batch;
  o.max_context = 4;
  gpu::DecodeStepExecutor e(c, o);
  ref::DecoderRef r(c, cache_of(o), o.max_batch, o.max_context);
  for (gpu::StepVariant v : {gpu::StepVariant::kEagerUnfused, gpu::StepVariant::kGraphFused}) {
    RunStats st;
    run_against_reference(e, r, cs, v, o.max_context, 2, &st);
    std::printf("%s %-13s attn v%d: %d steps x %d rows, max |dlogit| %.3g, decisive %d, same %d\n",
                name(cs).c_str(), to_string(v), e.attn_version(), st.steps, cs.batch, st.max_abs,
                st.decisive, st.same_token);
    EXPECT_EQ(st.steps, o.max_context);
    EXPECT_GT(st.max_abs, 0.0) << "identical logits: the comparison did not happen";
  }
}

TEST(StepEngine, FreeRunningGreedyGenerationMatchesTheReference) {
  // The GPU feeds back its own greedy tokens, the reference its own. A row may only diverge
  // at a step whose reference top-2 margin is within the logit bound (a near-tie): there the
  // two may legitimately pick different tokens, and the row stops being compared. Anywhere
  // else the tokens must be identical.
  REQUIRE_GPU();
  const DecoderConfig c = decoder_preset("small");
  gpu::ExecutorOptions o;
  o.max_batch = 4;
  o.max_context = 48;
  gpu::DecodeStepExecutor e(c, o);
  ref::DecoderRef r(c, cache_of(o), o.max_batch, o.max_context);
  const Tolerance tol = tolerance(Op::kDecodeStepLogits, o.kv_format, DType::kF32, c.layers);
  e.start(4);
  r.start(4, e.block_table());
  std::vector<int32_t> tok = {11, 222, 3333, 4098};
  std::vector<bool> live(4, true);
  int identical = 0, near_ties = 0;
  e.step(tok, gpu::StepVariant::kGraphFused, gpu::Sampling{});
  for (int s = 0; s < 40; ++s) {
    const std::vector<int32_t> want = r.step(tok);
    const std::vector<int32_t> gtok = e.sampled_tokens();
    for (int b = 0; b < 4; ++b) {
      if (!live[b]) continue;
      const float* rr = r.logits().data() + size_t(b) * c.vocab;
      const auto [t1, t2] = top2(rr, c.vocab);
      const bool decisive = double(rr[t1]) - rr[t2] >
                            2 * tol.atol + tol.rtol * (std::fabs(rr[t1]) + std::fabs(rr[t2]));
      near_ties += decisive ? 0 : 1;
      if (gtok[b] == want[b]) {
        ++identical;
        continue;
      }
      ASSERT_FALSE(decisive) << "row " << b << " step " << s << ": GPU token " << gtok[b]
                             << ", reference " << want[b] << " at a margin beyond the logit bound";
      live[b] = false;
      std::printf("row %d: diverged at a near-tie at step %d\n", b, s);
    }
    tok = want;
    e.step(gpu::StepVariant::kGraphFused, gpu::Sampling{});  // feeds back its own tokens
  }
  std::printf("free-running: %d (row, step) tokens identical, %d near-ties passed\n", identical,
              near_ties);
  EXPECT_GT(identical, 80);
}

TEST(StepEngine, TopKSamplingMatchesTheReferenceSamplerOnTheSameLogits) {
  REQUIRE_GPU();
  const DecoderConfig c = decoder_preset("tiny");
  gpu::ExecutorOptions o;
  o.max_batch = 4;
  o.max_context = 16;
  gpu::DecodeStepExecutor e(c, o);
  e.start(3);
  gpu::Sampling smp;
  smp.top_k = 40;
  smp.temperature = 0.8f;
  smp.seed = test::seed_for("topk-engine");
  for (gpu::StepVariant v : {gpu::StepVariant::kEagerFused, gpu::StepVariant::kGraphFused}) {
    e.start(3);
    for (int s = 0; s < 6; ++s) {
      if (s == 0)
        e.step({1, 2, 3}, v, smp);
      else
        e.step(v, smp);
      const auto lg = e.logits();
      const auto got = e.sampled_tokens();
      for (int b = 0; b < 3; ++b)
        EXPECT_EQ(got[b], ref::top_k_token(lg.data() + size_t(b) * c.vocab, c.vocab, smp.top_k,
                                           smp.temperature, smp.seed, b, s))
            << to_string(v) << " step " << s << " row " << b;
    }
  }
}

TEST(StepEngine, SyntheticContextAndTimingPath) {
  REQUIRE_GPU();
  const DecoderConfig c = decoder_preset("tiny");
  gpu::ExecutorOptions o;
  o.max_batch = 8;
  o.max_context = 80;
  o.kv_layout = KvLayout::kHND;
  gpu::DecodeStepExecutor e(c, o);
  e.start(5);
  e.fill_synthetic_context(60, 42);
  EXPECT_EQ(e.positions(), std::vector<int32_t>(5, 60));
  for (gpu::StepVariant v : gpu::all_step_variants()) {
    e.rewind(60);
    const double ms = e.time_steps(v, gpu::Sampling{}, 3);
    EXPECT_GT(ms, 0.0) << to_string(v);
    for (float x : e.logits()) ASSERT_TRUE(std::isfinite(x)) << to_string(v);
  }
  EXPECT_EQ(e.positions(), std::vector<int32_t>(5, 63));
  for (Linear l : {Linear::kQkv, Linear::kLmHead}) {
    e.prepare_linear(l, 8);
    e.enqueue_linear(l, 8, 1);
    e.synchronize();
  }
  EXPECT_THROW(e.enqueue_linear(Linear::kO, 9, 0), InvalidArgument);
  const int best = e.autotune_attention(2);
  EXPECT_EQ(best, e.attn_version());
  // a new shape keeps the weights: the same tokens give the same logits as a fresh engine
  e.reconfigure(2, 20);
  EXPECT_EQ(e.batch(), 0);
  e.start(2);
  e.step({7, 9}, gpu::StepVariant::kEagerFused, {});
  gpu::ExecutorOptions o2 = o;
  o2.max_batch = 2;
  o2.max_context = 20;
  gpu::DecodeStepExecutor fresh(c, o2);
  fresh.start(2);
  fresh.step({7, 9}, gpu::StepVariant::kEagerFused, {});
  EXPECT_EQ(e.logits(), fresh.logits());
}

TEST(StepEngine, RejectsBadInput) {
  REQUIRE_GPU();
  const DecoderConfig c = decoder_preset("tiny");
  gpu::ExecutorOptions o;
  o.max_batch = 2;
  o.max_context = 3;
  gpu::DecodeStepExecutor e(c, o);
  EXPECT_THROW(e.step({1, 2}, gpu::StepVariant::kEagerFused, {}), InvalidArgument);  // not started
  EXPECT_THROW(e.start(3), InvalidArgument);
  e.start(2);
  EXPECT_THROW(e.step({1}, gpu::StepVariant::kEagerFused, {}), InvalidArgument);
  EXPECT_THROW(e.step({1, c.vocab}, gpu::StepVariant::kEagerFused, {}), InvalidArgument);
  gpu::Sampling bad;
  bad.top_k = c.vocab + 1;
  EXPECT_THROW(e.step({1, 2}, gpu::StepVariant::kEagerFused, bad), InvalidArgument);
  bad.top_k = 5;
  bad.temperature = -1.0f;
  EXPECT_THROW(e.step({1, 2}, gpu::StepVariant::kEagerFused, bad), InvalidArgument);
  for (int s = 0; s < 3; ++s) e.step({1, 2}, gpu::StepVariant::kGraphFused, {});
  EXPECT_THROW(e.step({1, 2}, gpu::StepVariant::kGraphFused, {}), InvalidArgument);  // context full
  EXPECT_THROW(e.rewind(4), InvalidArgument);
  EXPECT_THROW(e.fill_synthetic_context(3, 0), InvalidArgument);
  EXPECT_THROW(gpu::parse_step_variant("graph"), InvalidArgument);
  gpu::ExecutorOptions huge = o;
  huge.max_batch = 0;
  EXPECT_THROW(gpu::DecodeStepExecutor(c, huge), InvalidArgument);
  huge = o;
  huge.graph_buckets = {4};
  EXPECT_THROW(gpu::DecodeStepExecutor(c, huge), InvalidArgument);
  huge = o;
  huge.max_batch = 65535;
  huge.max_context = 1 << 24;  // 2^36 blocks: beyond int32 block ids
  EXPECT_THROW(gpu::DecodeStepExecutor(c, huge), InvalidArgument);
  huge.max_context = 1 << 16;  // 4.4 TB of KV cache: beyond any device's memory
  EXPECT_THROW(gpu::DecodeStepExecutor(c, huge), Unsupported);
}

}  // namespace
}  // namespace kvlab
