// test_sim_engine.cpp: the serving engine on hand-made cases (timings, preemption by
// recompute and swap, prefix caching, rejection), determinism, the memory-ledger invariant
// at every step, the PagedAttention waste trend, and the block tables handed to kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "sim/alloc/block_table.h"
#include "sim/cost/gpu_spec.h"
#include "sim/cost/roofline.h"
#include "sim/engine/engine.h"
#include "sim/workload/workload.h"
#include "tests/common/test_env.h"

namespace kvlab::sim {
namespace {

Request req(int64_t id, double t, int32_t prompt, int32_t output, int32_t group = 0,
            int32_t shared = 0) {
  Request r;
  r.id = id;
  r.arrival_s = t;
  r.prompt_tokens = prompt;
  r.output_tokens = output;
  r.prefix_group = group;
  r.shared_prefix_tokens = shared;
  return r;
}

EngineConfig small_config(int64_t blocks, int32_t bs) {
  EngineConfig c;
  c.num_blocks = blocks;
  c.block_size = bs;
  c.watermark = 0;
  c.audit_every_step = true;
  return c;
}

// One second per step: times count steps.
std::shared_ptr<const StepTimeModel> unit_steps() {
  return std::make_shared<LinearStepTime>(1.0, 0.0, 0.0);
}

void expect_ledger_sums(const SimResult& r, int64_t capacity_slots) {
  for (size_t i = 0; i < r.ledger.size(); ++i) {
    const int64_t sum = r.ledger.token_slots[i] + r.ledger.slack_slots[i] +
                        r.ledger.reserved_slots[i] + r.ledger.cached_slots[i] +
                        r.ledger.free_slots[i];
    ASSERT_EQ(sum, capacity_slots) << "ledger row " << i;
  }
}

TEST(SimEngine, SingleRequestTimelineByHand) {
  Engine e(small_config(8, 4), unit_steps());
  const SimResult r = e.run({req(7, 0.0, 5, 3)});
  // Step 0 prefills 5 tokens and samples token 1; steps 1 and 2 decode one token each.
  ASSERT_EQ(r.summary.num_steps, 3);
  EXPECT_EQ(r.steps.num_tokens, (std::vector<int64_t>{5, 1, 1}));
  EXPECT_EQ(r.steps.num_prefill_seqs, (std::vector<int32_t>{1, 0, 0}));
  EXPECT_EQ(r.steps.decode_context_tokens, (std::vector<int64_t>{0, 6, 7}));
  EXPECT_EQ(r.requests.ttft_s[0], 1.0);
  EXPECT_EQ(r.requests.finish_s[0], 3.0);
  EXPECT_EQ(r.requests.tpot_s[0], 1.0);
  EXPECT_EQ(r.requests.status[0], static_cast<int32_t>(RequestStatus::kFinished));
  // Ledger after each step: 5 tokens in 2 blocks (3 slack), then 6 (2 slack), then all free.
  EXPECT_EQ(r.ledger.token_slots, (std::vector<int64_t>{5, 6, 0}));
  EXPECT_EQ(r.ledger.slack_slots, (std::vector<int64_t>{3, 2, 0}));
  EXPECT_EQ(r.ledger.free_slots, (std::vector<int64_t>{24, 24, 32}));
  EXPECT_EQ(r.summary.computed_tokens, 7);  // P + O - 1
  expect_ledger_sums(r, 32);
}

TEST(SimEngine, ChunkedPrefillUnderTokenBudget) {
  EngineConfig c = small_config(16, 4);
  c.max_num_batched_tokens = 4;
  Engine e(c, unit_steps());
  const SimResult r = e.run({req(0, 0.0, 10, 2)});
  EXPECT_EQ(r.steps.num_tokens, (std::vector<int64_t>{4, 4, 2, 1}));
  EXPECT_EQ(r.requests.ttft_s[0], 3.0);
  EXPECT_EQ(r.requests.finish_s[0], 4.0);

  c.chunked_prefill = false;  // a 10-token prompt can never fit a 4-token budget: rejected
  Engine e2(c, unit_steps());
  const SimResult r2 = e2.run({req(0, 0.0, 10, 2), req(1, 0.0, 3, 2)});
  EXPECT_EQ(r2.requests.status[0], static_cast<int32_t>(RequestStatus::kRejected));
  EXPECT_EQ(r2.requests.status[1], static_cast<int32_t>(RequestStatus::kFinished));
  EXPECT_EQ(r2.summary.num_rejected, 1);
}

// Two requests, 4 blocks of 4 tokens, each needs 3 blocks by the end (4 + 9 - 1 = 12 tokens).
// At step 5 both need a third block; B (admitted last) is preempted.
TEST(SimEngine, RecomputePreemptionByHand) {
  Engine e(small_config(4, 4), unit_steps());
  const SimResult r = e.run({req(0, 0.0, 4, 9), req(1, 0.0, 4, 9)});
  EXPECT_EQ(r.summary.num_steps, 13);
  EXPECT_EQ(r.steps.num_preempted[5], 1);
  EXPECT_EQ(r.requests.num_preemptions, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(r.requests.discarded_tokens, (std::vector<int64_t>{0, 8}));
  EXPECT_EQ(r.requests.ttft_s, (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(r.requests.finish_s, (std::vector<double>{9.0, 13.0}));
  // B recomputes its 8 discarded tokens plus the one it still had to compute (9 in step 9).
  EXPECT_EQ(r.steps.num_tokens[9], 9);
  EXPECT_EQ(r.summary.computed_tokens, 12 + 12 + 8);
  expect_ledger_sums(r, 16);
}

TEST(SimEngine, SwapPreemptionByHand) {
  EngineConfig c = small_config(4, 4);
  c.preemption = PreemptionMode::kSwap;
  c.swap_blocks = 8;
  c.block_bytes.raw_kv = 1000;  // 1000 bytes per block over a 1000 B/s link: 1 s per block
  Engine e(c, std::make_shared<LinearStepTime>(1.0, 0.0, 0.0, 1000.0));
  const SimResult r = e.run({req(0, 0.0, 4, 9), req(1, 0.0, 4, 9)});
  EXPECT_EQ(r.summary.num_steps, 13);
  EXPECT_EQ(r.steps.swap_out_blocks[5], 2);
  EXPECT_EQ(r.steps.swap_in_blocks[9], 2);
  EXPECT_EQ(r.steps.duration_s[5], 3.0);  // 1 + 2 blocks out
  EXPECT_EQ(r.steps.duration_s[9], 3.0);  // 1 + 2 blocks in
  EXPECT_EQ(r.steps.num_tokens[9], 1);    // nothing to recompute
  EXPECT_EQ(r.requests.num_swaps, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(r.requests.num_preemptions, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(r.requests.finish_s, (std::vector<double>{11.0, 17.0}));
  EXPECT_EQ(r.summary.computed_tokens, 24);
  EXPECT_EQ(r.summary.swap_out_blocks, 2);
  EXPECT_EQ(r.summary.swap_in_blocks, 2);

  // Swap space too small for the victim's 2 blocks: recompute instead, counted.
  c.swap_blocks = 1;
  Engine e2(c, std::make_shared<LinearStepTime>(1.0, 0.0, 0.0, 1000.0));
  const SimResult r2 = e2.run({req(0, 0.0, 4, 9), req(1, 0.0, 4, 9)});
  EXPECT_EQ(r2.summary.num_swap_fallbacks, 1);
  EXPECT_EQ(r2.requests.num_preemptions, (std::vector<int32_t>{0, 1}));
}

TEST(SimEngine, FullSequenceReservationNeverPreempts) {
  EngineConfig c = small_config(4, 4);
  c.reserve = ReservePolicy::kFullSequence;
  Engine e(c, unit_steps());
  const SimResult r = e.run({req(0, 0.0, 4, 9), req(1, 0.0, 4, 9)});
  // A reserves 3 blocks at admission; B must wait for them: it starts after A finishes.
  EXPECT_EQ(r.summary.num_preemptions, 0);
  EXPECT_EQ(r.requests.first_scheduled_s, (std::vector<double>{0.0, 9.0}));
  // After step 0 A holds 4 tokens in block 0 and reserves 2 empty blocks.
  EXPECT_EQ(r.ledger.token_slots[0], 4);
  EXPECT_EQ(r.ledger.reserved_slots[0], 8);
  EXPECT_EQ(r.ledger.slack_slots[0], 0);
  EXPECT_EQ(r.ledger.free_slots[0], 4);
  expect_ledger_sums(r, 16);
}

TEST(SimEngine, PrefixCachingSharesAndCachesBlocks) {
  EngineConfig c = small_config(16, 4);
  c.prefix_caching = true;
  Engine e(c, unit_steps());
  // A: 8 shared + 2 own tokens. B arrives while A runs: hits A's 2 shared blocks (used,
  // ref 2). C arrives after both finished: hits the 2 cached blocks.
  const SimResult r =
      e.run({req(0, 0.0, 10, 4, 1, 8), req(1, 1.5, 10, 2, 1, 8), req(2, 20.0, 11, 1, 1, 8)});
  EXPECT_EQ(r.requests.prefix_hit_tokens, (std::vector<int64_t>{0, 8, 8}));
  // B admitted at step 2 (t = 2): prefills only its 2 own tokens.
  EXPECT_EQ(r.steps.num_tokens[2], 1 + 2);
  // Shared blocks are counted once physically, once per sharer logically.
  EXPECT_EQ(r.ledger.token_slots[2], (8 + 4) + 2);  // A: 8 shared + 4 own; B: 2 own
  EXPECT_EQ(r.ledger.logical_tokens[2], 12 + 10);
  // A and B finish in step 3: the two shared blocks and A's own full block stay cached
  // (evictable); the partial tail blocks are freed.
  EXPECT_EQ(r.steps.num_running[3], 0);
  EXPECT_EQ(r.ledger.cached_slots[3], 12);
  EXPECT_EQ(r.ledger.free_slots[3], 64 - 12);
  EXPECT_EQ(r.summary.prefix_hit_tokens, 16);
  EXPECT_EQ(r.summary.computed_tokens, 13 + 3 + 3);  // B and C compute P + O - 1 - 8 each
  expect_ledger_sums(r, 64);

  // Without prefix caching nothing is shared.
  c.prefix_caching = false;
  Engine e2(c, unit_steps());
  const SimResult r2 =
      e2.run({req(0, 0.0, 10, 4, 1, 8), req(1, 1.5, 10, 2, 1, 8), req(2, 20.0, 11, 1, 1, 8)});
  EXPECT_EQ(r2.summary.prefix_hit_tokens, 0);
  EXPECT_EQ(r2.summary.computed_tokens, 13 + 11 + 11);
}

// A prompt whose every block is cached still computes its last token (the model needs that
// token's logits), and with it the last block: hits stop one block short.
TEST(SimEngine, PrefixCacheAlwaysLeavesTheLastPromptTokenToCompute) {
  EngineConfig c = small_config(16, 4);
  c.prefix_caching = true;
  Engine e(c, unit_steps());
  // A and B: the same 8-token prompt, all of it shared (2 full blocks); B arrives after A
  // finished, so both blocks are cached, but B may reuse only the first.
  const SimResult r = e.run({req(0, 0.0, 8, 2, 1, 8), req(1, 10.0, 8, 2, 1, 8)});
  EXPECT_EQ(r.requests.prefix_hit_tokens, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(r.summary.computed_tokens, (8 + 2 - 1) + (8 + 2 - 1 - 4));
  expect_ledger_sums(r, 64);
}

TEST(SimEngine, PrefixCacheEvictsLeastRecentlyReleasedWhenFull) {
  EngineConfig c = small_config(4, 4);
  c.prefix_caching = true;
  Engine e(c, unit_steps());
  // A (group 1) leaves 2 cached blocks; B (group 2, no hits) needs all 4 blocks: both cached
  // blocks are evicted; C (group 1) then finds nothing.
  const SimResult r =
      e.run({req(0, 0.0, 9, 1, 1, 8), req(1, 5.0, 16, 1, 2, 16), req(2, 10.0, 9, 1, 1, 8)});
  // B's 4 blocks: the 2 free ones, then A's 2 cached ones (evicted). C's 3 blocks: 3 of B's
  // 4 cached ones.
  EXPECT_EQ(r.summary.num_evictions, 2 + 3);
  EXPECT_EQ(r.requests.prefix_hit_tokens, (std::vector<int64_t>{0, 0, 0}));
  expect_ledger_sums(r, 16);
}

TEST(SimEngine, AdmissionRespectsWatermarkAndRejectsImpossibleRequests) {
  EngineConfig c = small_config(10, 4);
  c.watermark = 0.2;  // 2 blocks kept free at admission
  Engine e(c, unit_steps());
  // 33 tokens need 9 blocks > 10 - 2: rejected at arrival. Two 12-token prompts need 3
  // blocks each: the second admission would leave 10 - 3 - 3 = 4 >= 2 free: both run.
  const SimResult r =
      e.run({req(0, 0.0, 30, 4), req(1, 0.0, 12, 1), req(2, 0.0, 12, 1), req(3, 0.0, 12, 1)});
  EXPECT_EQ(r.requests.status[0], static_cast<int32_t>(RequestStatus::kRejected));
  // The third 12-token prompt would leave 1 < 2 free blocks: it waits one step.
  EXPECT_TRUE(std::isnan(r.requests.first_scheduled_s[0]));
  EXPECT_EQ(r.requests.first_scheduled_s[1], 0.0);
  EXPECT_EQ(r.requests.first_scheduled_s[2], 0.0);
  EXPECT_EQ(r.requests.first_scheduled_s[3], 1.0);
  EXPECT_EQ(r.summary.num_rejected, 1);
  EXPECT_EQ(r.summary.num_finished, 3);
}

TEST(SimEngine, MaxNumSeqsCapsTheBatch) {
  EngineConfig c = small_config(64, 4);
  c.max_num_seqs = 2;
  Engine e(c, unit_steps());
  const SimResult r = e.run({req(0, 0.0, 4, 3), req(1, 0.0, 4, 3), req(2, 0.0, 4, 3)});
  for (int32_t n : r.steps.num_running) EXPECT_LE(n, 2);
  EXPECT_EQ(r.requests.first_scheduled_s[2], 3.0);  // after the first two finish at t = 3
}

// Ledger invariant at every step (checked by the engine itself and recomputed here) under a
// stressy seeded workload: tight memory, preemption, prefix sharing, chunked prefill.
TEST(SimEngine, LedgerInvariantEveryStepUnderStress) {
  for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    for (bool caching : {false, true}) {
      WorkloadSpec w;
      w.seed = test::seed_for("sim_engine_stress");
      w.num_requests = 300;
      w.arrival.kind = ArrivalKind::kBursty;
      w.arrival.rate = 50;
      w.arrival.burstiness = 0.3;
      w.prompt = LengthDist::zipf(0.8, 1, 300);
      w.output = LengthDist::lognormal(40, 1.0, 1, 400);
      w.num_prefix_groups = 3;
      w.shared_prefix_tokens = 37;
      SCOPED_TRACE("seed " + std::to_string(w.seed) + " mode " + to_string(mode) + " caching " +
                   std::to_string(caching));
      EngineConfig c = small_config(97, 7);  // awkward sizes
      c.max_num_seqs = 23;
      c.max_num_batched_tokens = 61;
      c.watermark = 0.03;
      c.preemption = mode;
      c.swap_blocks = 40;
      c.prefix_caching = caching;
      c.block_bytes.raw_kv = 4096;
      Engine e(c, std::make_shared<LinearStepTime>(1e-3, 1e-5, 1e-7, 1e9));
      const SimResult r = e.run(generate_workload(w));
      EXPECT_EQ(r.summary.num_finished + r.summary.num_rejected, w.num_requests);
      EXPECT_GT(r.summary.num_preemptions + r.summary.num_swaps, 0)
          << "the case must exercise preemption";
      if (caching) EXPECT_GT(r.summary.prefix_hit_tokens, 0);
      expect_ledger_sums(r, 97 * 7);
      EXPECT_EQ(r.ledger.size(), static_cast<size_t>(r.summary.num_steps));
      // Everything is released at the end.
      EXPECT_EQ(r.ledger.token_slots.back() + r.ledger.slack_slots.back() +
                    r.ledger.reserved_slots.back(),
                0);
    }
  }
}

TEST(SimEngine, SameSeedSameTrace) {
  WorkloadSpec w;
  w.seed = test::seed_for("sim_engine_determinism");
  SCOPED_TRACE("seed " + std::to_string(w.seed));
  w.num_requests = 200;
  w.arrival.rate = 20;
  w.prompt = LengthDist::uniform(1, 500);
  w.output = LengthDist::zipf(1.1, 1, 300);
  EngineConfig c = small_config(200, 16);
  c.audit_every_step = false;
  c.prefix_caching = true;
  auto timer = std::make_shared<LinearStepTime>(2e-3, 1e-5, 1e-8);
  const SimResult a = Engine(c, timer).run(generate_workload(w));
  const SimResult b = Engine(c, timer).run(generate_workload(w));
  EXPECT_EQ(a.steps.time_s, b.steps.time_s);
  EXPECT_EQ(a.steps.num_tokens, b.steps.num_tokens);
  EXPECT_EQ(a.steps.num_preempted, b.steps.num_preempted);
  EXPECT_EQ(a.ledger.token_slots, b.ledger.token_slots);
  EXPECT_EQ(a.ledger.cached_slots, b.ledger.cached_slots);
  EXPECT_EQ(a.requests.finish_s, b.requests.finish_s);
  // A different seed gives a different trace.
  w.seed += 1;
  const SimResult d = Engine(c, timer).run(generate_workload(w));
  EXPECT_NE(a.steps.num_tokens, d.steps.num_tokens);
}

// PagedAttention's internal fragmentation: with lengths covering every residue modulo the
// block size once, the last blocks waste exactly 0 + 1 + ... + (block - 1) slots, i.e.
// (block - 1) / 2 per sequence.
TEST(SimEngine, WastePerSequenceIsHalfABlockMinusHalf) {
  for (int32_t bs : {1, 2, 7, 8, 16, 32, 64}) {
    std::vector<Request> rs;
    for (int32_t k = 1; k <= bs; ++k) rs.push_back(req(k, 0.0, 3 * bs + k, 2));
    EngineConfig c = small_config(static_cast<int64_t>(bs) * 5 + 8, bs);
    c.max_num_batched_tokens = 1 << 20;
    Engine e(c, unit_steps());
    const SimResult r = e.run(rs);
    // Row 0: every request has prefilled and holds its prompt.
    ASSERT_EQ(r.steps.num_running[0], bs);
    EXPECT_EQ(r.ledger.slack_slots[0], static_cast<int64_t>(bs) * (bs - 1) / 2) << "block " << bs;
    EXPECT_EQ(2 * r.ledger.slack_slots[0], static_cast<int64_t>(bs) * (bs - 1)) << "block " << bs;
  }
}

TEST(SimEngine, WasteGrowsWithBlockSizeOnRandomLengths) {
  WorkloadSpec w;
  w.seed = test::seed_for("sim_engine_waste");
  SCOPED_TRACE("seed " + std::to_string(w.seed));
  w.num_requests = 400;
  w.arrival.kind = ArrivalKind::kAllAtOnce;
  w.prompt = LengthDist::uniform(100, 2000);
  w.output = LengthDist::uniform(50, 500);
  double prev = -1;
  for (int32_t bs : {1, 8, 16, 32, 64, 128}) {
    EngineConfig c = small_config(1 << 16, bs);
    c.num_blocks = (1 << 20) / bs;
    c.audit_every_step = false;
    Engine e(c, unit_steps());
    const SimResult r = e.run(generate_workload(w));
    const double waste = r.summary.ledger.mean_slack_per_seq;
    if (bs == 1) EXPECT_EQ(waste, 0.0);
    EXPECT_GT(waste, prev) << "block " << bs;
    prev = waste;
  }
}

TEST(SimEngine, BatchBlockTableAndSlotMappingForRealRuns) {
  EngineConfig c = small_config(32, 4);
  Engine e(c, nullptr);  // measured durations only
  e.reset({req(0, 0.0, 6, 3), req(1, 0.0, 3, 2)});
  ASSERT_TRUE(e.schedule());
  std::vector<int32_t> table, lens;
  std::vector<int64_t> slots;
  e.batch_block_table(4, &table, &lens);
  e.batch_slot_mapping(&slots);
  // Request 0 gets blocks 0, 1 (6 tokens), request 1 block 2 (3 tokens).
  EXPECT_EQ(table, (std::vector<int32_t>{0, 1, -1, -1, 2, -1, -1, -1}));
  EXPECT_EQ(lens, (std::vector<int32_t>{6, 3}));
  EXPECT_EQ(slots, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 8, 9, 10}));
  e.complete(0.25);  // a measured step
  EXPECT_EQ(e.now(), 0.25);
  ASSERT_TRUE(e.schedule());
  e.batch_slot_mapping(&slots);
  EXPECT_EQ(slots, (std::vector<int64_t>{6, 11}));  // token 6 of request 0, token 3 of request 1
  EXPECT_THROW(e.schedule(), InvalidArgument);      // not completed yet
  EXPECT_THROW(e.complete(-1), InvalidArgument);    // no step-time model
  e.complete(0.25);
  EXPECT_THROW(e.batch_slot_mapping(&slots), InvalidArgument);  // nothing scheduled
}

TEST(SimEngine, RooflineClockAndLedgerBytes) {
  const GpuSpec h100 = gpu_spec("H100");
  const ModelStack m = model_preset("llama3.1-8b");
  CostModel cm(h100, m, KvFormat::kFP8E4M3PerToken);
  EngineConfig c = small_config(64, 16);
  c.block_bytes = kv_footprint(m, 16, KvFormat::kFP8E4M3PerToken).block;
  Engine e(c, std::make_shared<RooflineStepTime>(cm));
  const SimResult r = e.run({req(0, 0.0, 20, 3)});
  // Step 0 prefills 20 tokens (causal pairs 20 x 21 / 2), steps 1 and 2 decode at 21 and 22.
  StepShape p;
  p.num_prefill_seqs = 1;
  p.prefill_tokens = 20;
  p.prefill_attn_pairs = 210;
  p.prefill_context_tokens = 20;
  p.num_sampled = 1;
  StepShape d;
  d.num_decode_seqs = 1;
  d.decode_context_tokens = 21;
  d.num_sampled = 1;
  EXPECT_EQ(r.steps.duration_s[0], cm.step(p).total_s);
  EXPECT_EQ(r.steps.duration_s[1], cm.step(d).total_s);
  EXPECT_EQ(r.steps.attention_s[1], cm.step(d).attention_s);
  EXPECT_EQ(r.requests.ttft_s[0], cm.step(p).total_s);
  // Ledger bytes: capacity and the split of a number of slots (FP8 data + FP32 token scales).
  const LedgerSummary& l = r.summary.ledger;
  EXPECT_EQ(l.capacity_bytes, 64 * c.block_bytes.total());
  EXPECT_EQ(l.block_bytes.scales, c.block_bytes.scales);
  EXPECT_GT(l.block_bytes.scales, 0);
  const BlockBytes b = l.bytes_of_slots(16);
  EXPECT_EQ(b.raw_kv, c.block_bytes.raw_kv);
  EXPECT_EQ(b.scales, c.block_bytes.scales);
}

TEST(SimEngine, MaxStepsStopsExplicitly) {
  EngineConfig c = small_config(16, 4);
  c.max_steps = 2;
  Engine e(c, unit_steps());
  const SimResult r = e.run({req(0, 0.0, 4, 10), req(1, 50.0, 4, 1)});
  EXPECT_EQ(r.summary.num_steps, 2);
  EXPECT_TRUE(r.summary.truncated);
  EXPECT_EQ(r.summary.num_unfinished, 2);
  EXPECT_EQ(r.requests.status[0], static_cast<int32_t>(RequestStatus::kUnfinished));
  EXPECT_TRUE(std::isnan(r.requests.finish_s[0]));
  EXPECT_EQ(r.requests.ttft_s[0], 1.0);
  c.max_steps = 0;
  const SimResult full = Engine(c, unit_steps()).run({req(0, 0.0, 4, 10), req(1, 50.0, 4, 1)});
  EXPECT_FALSE(full.summary.truncated);
  EXPECT_EQ(full.requests.finish_s, (std::vector<double>{10.0, 51.0}));  // idle until t = 50
}

TEST(SimEngine, BadConfigurationsAreClearErrors) {
  EngineConfig c = small_config(0, 16);
  EXPECT_THROW(Engine(c, unit_steps()), InvalidArgument);  // budget below one block
  c = small_config(8, 0);
  EXPECT_THROW(Engine(c, unit_steps()), InvalidArgument);
  c = small_config(8, 16);
  c.watermark = 1.0;
  EXPECT_THROW(Engine(c, unit_steps()), InvalidArgument);
  c.watermark = -0.1;
  EXPECT_THROW(Engine(c, unit_steps()), InvalidArgument);
  c = small_config(8, 16);
  c.preemption = PreemptionMode::kSwap;
  c.swap_blocks = 0;
  EXPECT_THROW(Engine(c, unit_steps()), InvalidArgument);
  c = small_config(8, 16);
  c.max_num_batched_tokens = 0;
  EXPECT_THROW(Engine(c, unit_steps()), InvalidArgument);
  EXPECT_THROW(LinearStepTime(-1.0, 0.0, 0.0), InvalidArgument);
  Engine e(small_config(8, 16), unit_steps());
  EXPECT_THROW(e.run({req(0, 1.0, 4, 4), req(1, 0.5, 4, 4)}), InvalidArgument);  // unsorted
  EXPECT_THROW(e.run({req(0, 0.0, 0, 4)}), InvalidArgument);                     // empty prompt
  EXPECT_THROW(e.run({req(0, 0.0, 4, 4), req(0, 0.0, 4, 4)}), InvalidArgument);  // duplicate id
  EXPECT_THROW(parse_preemption_mode("evict"), InvalidArgument);
  EXPECT_THROW(parse_reserve_policy("greedy"), InvalidArgument);
}

}  // namespace
}  // namespace kvlab::sim
