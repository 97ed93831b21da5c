// test_sim_serving.cpp: the serving loop of real runs (sim/serve) with fake executors, and
// the serving step-time model (sim/cost/serving_step_model.h).
//
//  - Step batches: decode rows first, the engine's slots / block tables / lengths regrouped
//    without loss, sampled rows exactly where the engine samples.
//  - One allocator: a fake executor that keeps a host "KV cache" of (token, position) per slot
//    and checks, every step, that every sequence's pages hold exactly its token history
//    (through recompute preemption and prefix-cache hits), and that a recomputed request is
//    fed the tokens it generated before.
//  - Two clocks: an executor whose step times follow a known model is predicted exactly by
//    the simulator with that model (same decisions, bitwise equal TTFT/TPOT); a slower clock
//    diverges only where the arrivals seen differ (compare_decisions explains it), and an
//    all-at-once workload takes identical decisions whatever the clock.
//  - The step model: records generated from a known model are fitted back exactly; bad
//    records are rejected; a fitted model predicts a run driven by its ground truth exactly.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <numeric>
#include <map>
#include <memory>
#include <set>

#include "reference/core/error.h"
#include "sim/alloc/block_table.h"
#include "sim/cost/serving_step_model.h"
#include "sim/engine/engine.h"
#include "sim/serve/serving_run.h"
#include "sim/serve/step_batch.h"
#include "sim/serve/synthetic_step.h"
#include "sim/workload/workload.h"

namespace kvlab::sim {
namespace {

EngineConfig config(int64_t blocks, int32_t bs, int64_t budget = 64, bool prefix = false) {
  EngineConfig c;
  c.num_blocks = blocks;
  c.block_size = bs;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = 16;
  c.watermark = 0;
  c.prefix_caching = prefix;
  c.audit_every_step = true;
  return c;
}

std::vector<Request> poisson(int64_t n, double rate, int64_t pmax, int64_t omax, uint64_t seed,
                             int32_t groups = 0, int32_t shared = 0) {
  WorkloadSpec w;
  w.seed = seed;
  w.num_requests = n;
  w.arrival.kind = ArrivalKind::kPoisson;
  w.arrival.rate = rate;
  w.prompt = LengthDist::uniform(1, pmax);
  w.output = LengthDist::uniform(1, omax);
  w.num_prefix_groups = groups;
  w.shared_prefix_tokens = shared;
  return generate_workload(w);
}

// Step time: base + per token + per attended key (deterministic in the shape).
std::shared_ptr<const StepTimeModel> linear_model(double scale = 1.0) {
  return std::make_shared<LinearStepTime>(scale * 5e-3, scale * 2e-5, scale * 1e-8);
}

// A fake GPU: checks every batch against a host copy of the KV cache it maintains, samples
// tokens as a deterministic function of (request, position), reports the model's time.
class CheckingExecutor : public StepExecutor {
 public:
  CheckingExecutor(const std::vector<Request>& reqs, const EngineConfig& cfg,
                   std::shared_ptr<const StepTimeModel> model, int32_t max_blocks)
      : reqs_(reqs),
        cfg_(cfg),
        model_(std::move(model)),
        max_blocks_(max_blocks),
        prompts_(reqs, 1000) {}

  StepTiming execute(const StepBatch& b, std::vector<int32_t>* sampled) override {
    ++steps;
    const int32_t bs = cfg_.block_size;
    EXPECT_EQ(static_cast<int32_t>(b.q_start.size()), b.num_seqs() + 1);
    EXPECT_EQ(b.q_start.back(), b.num_rows());
    for (int32_t s = 0; s < b.num_seqs(); ++s) {
      const int32_t n = b.q_start[s + 1] - b.q_start[s];
      EXPECT_EQ(s < b.num_decode, n == 1) << "decode rows come first";
      const int32_t r = b.seq_request[static_cast<size_t>(s)];
      // The rows: consecutive positions ending at seq_len - 1, slots in the sequence's pages.
      for (int32_t i = 0; i < n; ++i) {
        const int32_t row = b.q_start[s] + i;
        const int32_t pos = b.positions[static_cast<size_t>(row)];
        EXPECT_EQ(pos, b.seq_lens[static_cast<size_t>(s)] - n + i);
        const int32_t page = b.block_table[static_cast<size_t>(s) * max_blocks_ + pos / bs];
        EXPECT_EQ(b.slots[static_cast<size_t>(row)], slot_of(page, pos % bs, bs));
        // A recomputed token is the one it was before (prompt content or generated).
        const auto key = std::make_pair(r, pos);
        const auto it = fed_.find(key);
        if (it != fed_.end()) {
          EXPECT_EQ(it->second, b.tokens[static_cast<size_t>(row)])
              << "request " << r << " pos " << pos;
          if (it->second == b.tokens[static_cast<size_t>(row)]) ++replayed;
        }
        fed_[key] = b.tokens[static_cast<size_t>(row)];
        kv_[b.slots[static_cast<size_t>(row)]] = {b.tokens[static_cast<size_t>(row)], pos};
      }
    }
    // Attention reads: every position < seq_len of every sequence holds its own token.
    for (int32_t s = 0; s < b.num_seqs(); ++s) {
      const int32_t r = b.seq_request[static_cast<size_t>(s)];
      for (int32_t pos = 0; pos < b.seq_lens[static_cast<size_t>(s)]; ++pos) {
        const int32_t page = b.block_table[static_cast<size_t>(s) * max_blocks_ + pos / bs];
        const auto it = kv_.find(slot_of(page, pos % bs, bs));
        EXPECT_NE(it, kv_.end()) << "request " << r << " reads an unwritten slot at " << pos;
        if (it == kv_.end()) continue;
        EXPECT_EQ(it->second.second, pos);
        // Prompt content is a function of the request (shared prefixes: of its group); a
        // generated token is what this request was fed at that position.
        const int32_t want = pos < reqs_[static_cast<size_t>(r)].prompt_tokens
                                 ? prompts_.token(r, pos)
                                 : fed_.at({r, pos});
        EXPECT_EQ(it->second.first, want) << "request " << r << " position " << pos;
      }
    }
    sampled->clear();
    for (size_t k = 0; k < b.sample_rows.size(); ++k) {
      const int32_t row = b.sample_rows[k];
      const int32_t s = b.sample_seqs[k];
      EXPECT_EQ(row, b.q_start[s + 1] - 1) << "a sequence samples at its last row";
      sampled->push_back((b.seq_request[static_cast<size_t>(s)] * 7919 +
                          b.positions[static_cast<size_t>(row)] * 31) %
                         vocab());
    }
    return StepTiming{model_->step_cost(b.shape).total_s, -1};
  }
  int32_t vocab() const override { return 1000; }
  int32_t max_blocks_per_seq() const override { return max_blocks_; }

  int64_t steps = 0, replayed = 0;

 private:
  const std::vector<Request>& reqs_;
  EngineConfig cfg_;
  std::shared_ptr<const StepTimeModel> model_;
  int32_t max_blocks_;
  std::map<std::pair<int32_t, int32_t>, int32_t> fed_;  // (request, position) -> token
  std::map<int64_t, std::pair<int32_t, int32_t>> kv_;   // slot -> (token, position)
  TokenHistory prompts_;                                // prompt tokens only
};

ServingRunOptions exact_clock() {
  ServingRunOptions o;
  o.include_host_time = false;
  return o;
}

TEST(SimServing, TokenHistorySharesPrefixContentOnly) {
  std::vector<Request> r = poisson(4, 10, 64, 8, 1, 1, 32);
  for (auto& q : r) q.prompt_tokens = std::max(q.prompt_tokens, 40);
  TokenHistory h(r, 50000);
  for (int64_t p = 0; p < 32; ++p) EXPECT_EQ(h.token(0, p), h.token(1, p)) << p;
  int differ = 0;
  for (int64_t p = 32; p < 40; ++p) differ += h.token(0, p) != h.token(1, p);
  EXPECT_GT(differ, 4);
  EXPECT_EQ(h.known(2), r[2].prompt_tokens);
  h.append_generated(2, 17);
  EXPECT_EQ(h.token(2, r[2].prompt_tokens), 17);
  EXPECT_THROW(h.token(2, r[2].prompt_tokens + 1), InvalidArgument);
  EXPECT_THROW(h.append_generated(2, 50000), InvalidArgument);
}

TEST(SimServing, StepBatchRegroupsTheEngineStepWithoutLoss) {
  Engine e(config(64, 4, 12), nullptr);
  Request a{0, 0.0, 9, 4, 0, 0}, b{1, 0.0, 2, 3, 0, 0}, c{2, 0.0, 20, 2, 0, 0};
  const std::vector<Request> reqs = {a, b, c};
  e.reset(reqs);
  TokenHistory h(reqs, 100);
  ASSERT_TRUE(e.schedule());  // a: 9 tokens, b: 2 tokens, c: the first 1 token of its prompt
  StepBatch sb;
  build_step_batch(e, h, 8, &sb);
  ASSERT_EQ(sb.num_seqs(), 3);
  EXPECT_EQ(sb.num_decode, 1);  // c's one-token chunk runs as a decode row
  EXPECT_EQ(sb.seq_request, (std::vector<int32_t>{2, 0, 1}));
  EXPECT_EQ(sb.q_start, (std::vector<int32_t>{0, 1, 10, 12}));
  EXPECT_EQ(sb.seq_lens, (std::vector<int32_t>{1, 9, 2}));
  EXPECT_EQ(sb.sample_rows, (std::vector<int32_t>{9, 11}));  // a and b finish their prompts
  EXPECT_EQ(sb.sample_seqs, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(sb.max_q_len, 9);
  EXPECT_EQ(sb.shape.num_sampled, 2);
  std::vector<int64_t> slots;
  e.batch_slot_mapping(&slots);
  EXPECT_EQ(std::multiset<int64_t>(slots.begin(), slots.end()),
            std::multiset<int64_t>(sb.slots.begin(), sb.slots.end()));
  for (int32_t s = 0; s < sb.num_seqs(); ++s) {
    const auto& blocks = e.request_blocks(sb.seq_request[static_cast<size_t>(s)]);
    for (size_t j = 0; j < blocks.size(); ++j)
      EXPECT_EQ(sb.block_table[static_cast<size_t>(s) * 8 + j], blocks[j]);
  }
  EXPECT_THROW(build_step_batch(e, h, 2, &sb), InvalidArgument);  // a needs 3 blocks
}

TEST(SimServing, OneAllocatorCachesStayConsistentThroughPreemptionAndPrefixHits) {
  for (bool prefix : {false, true}) {
    const std::vector<Request> reqs = poisson(60, 40, 48, 40, 7, prefix ? 2 : 0, prefix ? 16 : 0);
    EngineConfig cfg = config(24, 4, 32, prefix);  // 96 slots: preemption is certain
    CheckingExecutor ex(reqs, cfg, linear_model(), 32);
    const ServingRun run = run_serving(cfg, reqs, &ex, nullptr, exact_clock());
    EXPECT_EQ(run.result.summary.num_finished, 60 - run.result.summary.num_rejected);
    EXPECT_GT(run.result.summary.num_finished, 50);
    EXPECT_GT(run.result.summary.num_preemptions, 0);
    EXPECT_GT(ex.replayed, 0) << "recomputed tokens were fed again";
    if (prefix) EXPECT_GT(run.result.summary.prefix_hit_tokens, 0);
    EXPECT_EQ(ex.steps, run.result.summary.num_steps);
    for (size_t r = 0; r < reqs.size(); ++r)
      if (run.result.requests.status[r] == static_cast<int32_t>(RequestStatus::kFinished))
        EXPECT_EQ(static_cast<int32_t>(run.generated[r].size()), reqs[r].output_tokens);
  }
}

TEST(SimServing, KnownStepTimesArePredictedExactly) {
  const std::vector<Request> reqs = poisson(80, 25, 64, 48, 11);
  EngineConfig cfg = config(40, 8, 48);
  CheckingExecutor ex(reqs, cfg, linear_model(), 16);
  const ServingRun real = run_serving(cfg, reqs, &ex, nullptr, exact_clock());
  const ServingRun pred = run_serving(cfg, reqs, nullptr, linear_model());
  const DecisionComparison c = compare_decisions(real, pred, reqs);
  EXPECT_TRUE(c.identical()) << c.explanation;
  EXPECT_EQ(c.identical_steps, real.result.summary.num_steps);
  EXPECT_GT(real.result.summary.num_preemptions, 0);
  EXPECT_EQ(real.result.summary.num_preemptions, pred.result.summary.num_preemptions);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(real.result.requests.ttft_s[i], pred.result.requests.ttft_s[i]) << i;
    if (!std::isnan(real.result.requests.tpot_s[i]))
      EXPECT_EQ(real.result.requests.tpot_s[i], pred.result.requests.tpot_s[i]) << i;
  }
  EXPECT_EQ(real.result.summary.output_tokens_per_s, pred.result.summary.output_tokens_per_s);
}

TEST(SimServing, ADifferentClockDivergesOnlyThroughArrivals) {
  const std::vector<Request> reqs = poisson(80, 25, 64, 48, 12);
  EngineConfig cfg = config(40, 8, 48);
  CheckingExecutor slow(reqs, cfg, linear_model(1.3), 16);
  const ServingRun real = run_serving(cfg, reqs, &slow, nullptr, exact_clock());
  const ServingRun pred = run_serving(cfg, reqs, nullptr, linear_model());
  const DecisionComparison c = compare_decisions(real, pred, reqs);
  ASSERT_FALSE(c.identical());
  EXPECT_TRUE(c.explained()) << c.explanation;
  EXPECT_NE(c.arrived_a, c.arrived_b);
  EXPECT_GT(c.clock_a, c.clock_b);

  // All requests at t = 0: the decisions cannot depend on the clock.
  std::vector<Request> batch = reqs;
  for (auto& q : batch) q.arrival_s = 0;
  const ServingRun r2 = run_serving(cfg, batch, &slow, nullptr, exact_clock());
  const ServingRun p2 = run_serving(cfg, batch, nullptr, linear_model());
  EXPECT_TRUE(compare_decisions(r2, p2, batch).identical());
  EXPECT_GT(r2.result.summary.num_preemptions, 0);
  // A replay of the measured durations reproduces the measured decisions exactly.
  const ServingRun again = run_serving(cfg, reqs, &slow, nullptr, exact_clock());
  EXPECT_TRUE(compare_decisions(real, again, reqs).identical());
}

TEST(SimServing, ARealClockIncludesTheHostWork) {
  const std::vector<Request> reqs = poisson(10, 100, 16, 8, 3);
  EngineConfig cfg = config(64, 8, 64);
  // An executor that spends (spins) 100 us per step and reports what it measured.
  class Spinning : public StepExecutor {
   public:
    StepTiming execute(const StepBatch& b, std::vector<int32_t>* sampled) override {
      const auto t0 = std::chrono::steady_clock::now();
      double s = 0;
      while ((s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()) <
             1e-4) {
      }
      sampled->assign(b.sample_rows.size(), 3);
      return StepTiming{s, -1};
    }
    int32_t vocab() const override { return 10; }
    int32_t max_blocks_per_seq() const override { return 8; }
  } ex;
  const ServingRun run = run_serving(cfg, reqs, &ex, nullptr);  // wall clock
  ASSERT_FALSE(run.duration_s.empty());
  for (size_t k = 0; k < run.duration_s.size(); ++k) {
    EXPECT_GE(run.duration_s[k], run.exec_wall_s[k] + run.host_s[k]);
    EXPECT_GE(run.exec_wall_s[k], 1e-4);
    EXPECT_GE(run.host_s[k], 0.0);
  }
  EXPECT_DOUBLE_EQ(run.result.summary.busy_time_s,
                   std::accumulate(run.duration_s.begin(), run.duration_s.end(), 0.0));
  EXPECT_THROW(run_serving(cfg, reqs, nullptr, nullptr), InvalidArgument);
  EngineConfig thin = cfg;
  thin.trace_every = 2;
  EXPECT_THROW(run_serving(thin, reqs, nullptr, linear_model()), InvalidArgument);
}

TEST(SimServing, ReplayOfMeasuredDurationsReproducesTheRun) {
  const std::vector<Request> reqs = poisson(50, 30, 64, 32, 21);
  EngineConfig cfg = config(30, 8, 40);
  CheckingExecutor ex(reqs, cfg, linear_model(1.17), 16);
  const ServingRun real = run_serving(cfg, reqs, &ex, nullptr, exact_clock());
  ReplayExecutor replay(real.duration_s, 16);
  const ServingRun again = run_serving(cfg, reqs, &replay, nullptr, exact_clock());
  EXPECT_TRUE(compare_decisions(real, again, reqs).identical());
  EXPECT_EQ(real.result.summary.mean_ttft_s, again.result.summary.mean_ttft_s);
  ReplayExecutor short_replay(std::vector<double>(3, 0.01), 16);
  EXPECT_THROW(run_serving(cfg, reqs, &short_replay, nullptr, exact_clock()), InvalidArgument);
}

TEST(SimServing, ScaledWorkloadsKeepTheirShape) {
  WorkloadSpec w;
  w.seed = 3;
  w.num_requests = 5;
  w.prompt = LengthDist::lognormal(600, 0.9, 8, 16000);
  w.output = LengthDist::uniform(16, 256);
  w.num_prefix_groups = 2;
  w.shared_prefix_tokens = 1024;
  const WorkloadSpec s = scale_lengths(w, 0.125);
  EXPECT_EQ(s.prompt.median, 75);
  EXPECT_EQ(s.prompt.min, 1);
  EXPECT_EQ(s.prompt.max, 2000);
  EXPECT_EQ(s.prompt.sigma, 0.9);
  EXPECT_EQ(s.output.min, 2);
  EXPECT_EQ(s.output.max, 32);
  EXPECT_EQ(s.shared_prefix_tokens, 128);
  EXPECT_NO_THROW(s.validate());
  EXPECT_THROW(scale_lengths(w, 0), InvalidArgument);
  EXPECT_THROW(scale_lengths(w, NAN), InvalidArgument);
  w.prompt = LengthDist::fixed(100);
  EXPECT_EQ(scale_lengths(w, 0.5).prompt.value, 50);
}

TEST(SimServing, SyntheticStepsCarryTheEnginesShape) {
  SyntheticStep s;
  s.decode_seqs = 2;
  s.decode_context = 5;
  s.prefill_seqs = 1;
  s.prefill_tokens = 4;
  s.prefill_context = 3;
  s.prefill_samples = false;
  EXPECT_EQ(synthetic_step_blocks(s, 4), 2 * 2 + 2);
  const StepBatch b = synthetic_step_batch(s, 4, 10, 3, 100);
  EXPECT_EQ(b.num_decode, 2);
  EXPECT_EQ(b.q_start, (std::vector<int32_t>{0, 1, 2, 6}));
  EXPECT_EQ(b.seq_lens, (std::vector<int32_t>{6, 6, 7}));
  EXPECT_EQ(b.positions, (std::vector<int32_t>{5, 5, 3, 4, 5, 6}));
  EXPECT_EQ(b.sample_rows, (std::vector<int32_t>{0, 1}));  // the chunk does not end its prompt
  EXPECT_EQ(b.block_table, (std::vector<int32_t>{0, 1, -1, 2, 3, -1, 4, 5, -1}));
  EXPECT_EQ(b.slots[0], slot_of(1, 1, 4));
  EXPECT_EQ(b.slots[5], slot_of(5, 2, 4));
  // The engine's accounting (engine.cpp add_to_batch) of the same sequences.
  EXPECT_EQ(b.shape.num_decode_seqs, 2);
  EXPECT_EQ(b.shape.decode_context_tokens, 12);
  EXPECT_EQ(b.shape.num_prefill_seqs, 1);
  EXPECT_EQ(b.shape.prefill_tokens, 4);
  EXPECT_EQ(b.shape.prefill_attn_pairs, 4.0 * 3 + 0.5 * 4 * 5);
  EXPECT_EQ(b.shape.prefill_context_tokens, 7);
  EXPECT_EQ(b.shape.num_sampled, 2);
  EXPECT_EQ(b.max_q_len, 4);
  EXPECT_THROW(synthetic_step_batch(s, 4, 5, 3, 100), InvalidArgument);   // pool too small
  EXPECT_THROW(synthetic_step_batch(s, 4, 10, 1, 100), InvalidArgument);  // table too narrow
  s.prefill_tokens = 1;
  EXPECT_THROW(s.validate(), InvalidArgument);
}

// ---------------------------------------------------------------- the step model
ServingStepModelConfig model_config() {
  ServingStepModelConfig c;
  c.graph_buckets = default_graph_buckets(32);
  return c;
}

// Ground truth: GEMM linear in rows, attention and rest linear in their features.
StepPartsRecord truth_record(const StepShape& s, bool graph, const ServingStepModelConfig& c) {
  StepPartsRecord r;
  r.shape = s;
  r.graph = graph;
  r.rows = graph ? graph_bucket(c.graph_buckets, s.num_decode_seqs) : s.total_tokens();
  r.lm_rows = graph ? r.rows : s.num_sampled;
  r.gemm_s = 6e-3 + 4e-6 * static_cast<double>(r.rows);
  r.lm_head_s = r.lm_rows > 0 ? 5e-4 + 2e-6 * static_cast<double>(r.lm_rows) : 0.0;
  r.decode_attn_s =
      s.num_decode_seqs > 0 ? 2e-4 + 1e-6 * s.num_decode_seqs + 3e-9 * s.decode_context_tokens : 0;
  r.prefill_attn_s = s.prefill_tokens > 0
                         ? 3e-5 * s.num_prefill_seqs + 2e-7 * s.prefill_tokens +
                               5e-11 * s.prefill_attn_pairs + 1e-9 * s.prefill_context_tokens
                         : 0;
  const double rest = graph ? 3e-4 + 1e-6 * r.rows
                            : 9e-4 + 2e-6 * r.rows + 1e-6 * r.lm_rows +
                                  3e-6 * (s.num_decode_seqs + s.num_prefill_seqs);
  r.total_s = r.gemm_s + r.lm_head_s + r.decode_attn_s + r.prefill_attn_s + rest;
  return r;
}

StepShape shape(int64_t nd, int64_t ctx, int64_t np, int64_t chunk, int64_t prefix, bool final) {
  StepShape s;
  s.num_decode_seqs = nd;
  s.decode_context_tokens = nd * ctx;
  s.num_prefill_seqs = np;
  s.prefill_tokens = np * chunk;
  s.prefill_attn_pairs = np * (static_cast<double>(chunk) * prefix + 0.5 * chunk * (chunk + 1.0));
  s.prefill_context_tokens = np * (prefix + chunk);
  s.num_sampled = nd + (final ? np : 0);
  return s;
}

std::vector<StepPartsRecord> truth_records(const ServingStepModelConfig& c) {
  std::vector<StepPartsRecord> v;
  for (int64_t b : {1, 2, 3, 4, 8, 12, 16, 24, 32})
    for (int64_t ctx : {64, 512, 2048})
      v.push_back(truth_record(shape(b, ctx, 0, 0, 0, false), true, c));
  for (int64_t chunk : {16, 64, 128, 256})
    for (int64_t prefix : {0, 300, 1500})
      for (int64_t nd : {0, 4, 16})
        v.push_back(truth_record(shape(nd, 700, 1, chunk, prefix, prefix > 0), false, c));
  v.push_back(truth_record(shape(0, 0, 2, 100, 50, true), false, c));
  v.push_back(truth_record(shape(5, 100, 0, 0, 0, false), false, c));  // eager decode-only
  return v;
}

TEST(SimServing, StepModelRecoversAKnownModel) {
  const ServingStepModelConfig c = model_config();
  const std::vector<StepPartsRecord> recs = truth_records(c);
  const ServingStepFit fit = fit_serving_step_model(recs, c);
  EXPECT_LT(fit.max_abs_rel_error, 1e-9) << fit.model.describe();
  EXPECT_LT(fit.median_abs_rel_error_loo, 1e-3);  // linear truth: interpolation is exact inside
  EXPECT_NEAR(fit.model.decode[2], 3e-9, 1e-15);
  EXPECT_NEAR(fit.model.prefill[2], 5e-11, 1e-16);
  EXPECT_EQ(fit.num_graph, 27);
  // Unseen shapes inside the measured ranges are predicted exactly.
  for (const StepShape& s : {shape(7, 900, 0, 0, 0, false), shape(3, 400, 1, 200, 800, true)}) {
    const StepPartsRecord t = truth_record(s, s.prefill_tokens == 0, c);
    EXPECT_NEAR(fit.model.step_cost(s).total_s, t.total_s, 1e-9 * t.total_s);
  }
}

TEST(SimServing, StepModelPredictsARunOfItsGroundTruth) {
  const ServingStepModelConfig c = model_config();
  const ServingStepFit fit = fit_serving_step_model(truth_records(c), c);
  // An executor whose step time is the ground truth of the step the engine scheduled.
  class TruthExecutor : public StepExecutor {
   public:
    explicit TruthExecutor(ServingStepModelConfig c) : c_(std::move(c)) {}
    StepTiming execute(const StepBatch& b, std::vector<int32_t>* sampled) override {
      sampled->assign(b.sample_rows.size(), 1);
      const bool graph = b.shape.prefill_tokens == 0;
      return StepTiming{truth_record(b.shape, graph, c_).total_s, -1};
    }
    int32_t vocab() const override { return 100; }
    int32_t max_blocks_per_seq() const override { return 64; }

   private:
    ServingStepModelConfig c_;
  } ex(c);
  const std::vector<Request> reqs = poisson(60, 30, 200, 40, 5);
  EngineConfig cfg = config(200, 16, 256);
  cfg.max_num_seqs = 32;
  const ServingRun real = run_serving(cfg, reqs, &ex, nullptr, exact_clock());
  auto model = std::make_shared<ServingStepModel>(fit.model);
  const ServingRun pred = run_serving(cfg, reqs, nullptr, model);
  const DecisionComparison cmp = compare_decisions(real, pred, reqs);
  EXPECT_TRUE(cmp.identical()) << cmp.explanation;
  EXPECT_NEAR(real.result.summary.mean_tpot_s, pred.result.summary.mean_tpot_s,
              1e-9 * real.result.summary.mean_tpot_s);
}

TEST(SimServing, StepModelRejectsBadRecords) {
  const ServingStepModelConfig c = model_config();
  std::vector<StepPartsRecord> recs = truth_records(c);
  auto expect_bad = [&](auto mutate) {
    std::vector<StepPartsRecord> r = recs;
    mutate(r);
    EXPECT_THROW(fit_serving_step_model(r, c), InvalidArgument);
  };
  expect_bad([](auto& r) { r[0].total_s = NAN; });
  expect_bad([](auto& r) { r[0].rows += 1; });            // not the bucket
  expect_bad([](auto& r) { r[30].decode_attn_s = -1; });  // negative part
  expect_bad([](auto& r) { r[0].decode_attn_s = 0; });    // decode rows without attention time
  expect_bad([](auto& r) {
    r.erase(std::remove_if(r.begin(), r.end(), [](const StepPartsRecord& x) { return x.graph; }),
            r.end());
  });
  expect_bad([](auto& r) {
    r.erase(std::remove_if(r.begin(), r.end(),
                           [](const StepPartsRecord& x) { return x.shape.prefill_tokens > 0; }),
            r.end());
  });
  EXPECT_THROW(fit_serving_step_model({}, c), InvalidArgument);
  EXPECT_THROW(graph_bucket(c.graph_buckets, 33), InvalidArgument);
  EXPECT_EQ(default_graph_buckets(20), (std::vector<int32_t>{1, 2, 4, 8, 16, 20}));
}

}  // namespace
}  // namespace kvlab::sim
