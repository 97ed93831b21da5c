// test_sim_plan.cpp: model stacks, KV footprints and the capacity planner on hand-computed
// stacks, and their errors.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "reference/core/error.h"
#include "sim/core/text.h"
#include "sim/cost/gpu_spec.h"
#include "sim/dsv4/dsv4_model_stack.h"
#include "sim/dsv4/schema.h"
#include "sim/model/model_stack.h"
#include "sim/plan/capacity.h"
#include "sim/plan/dsv4_capacity.h"

namespace kvlab::sim {
namespace {

void expect_error_contains(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an InvalidArgument containing '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(SimModel, PresetsAndParameterCounts) {
  const ModelStack m = model_preset("llama3.1-8b");
  EXPECT_EQ(m.group_size(), 4);
  // Embeddings and LM head 2 x 128256 x 4096; per layer attention 2 x 4096^2 + 2 x 4096 x 1024,
  // MLP 3 x 4096 x 14336, two norms; final norm. Llama 3.1 8B has 8.03 B parameters.
  const int64_t layer = 2 * 4096LL * 4096 + 2 * 4096LL * 1024 + 3 * 4096LL * 14336 + 2 * 4096;
  EXPECT_EQ(m.num_params(), 2 * 128256LL * 4096 + 32 * layer + 4096);
  EXPECT_EQ(m.num_params(), 8030261248LL);
  EXPECT_EQ(m.weight_bytes(), 2 * 8030261248LL);
  for (const auto& n : model_preset_names()) EXPECT_NO_THROW(model_preset(n));
  expect_error_contains([] { model_preset("gpt-5"); },
                        "unknown model preset 'gpt-5' (allowed: llama3.1-8b");
  ModelStack bad = m;
  bad.num_kv_heads = 3;
  expect_error_contains([&] { bad.validate(); },
                        "num_qo_heads 32 must be a positive multiple of num_kv_heads 3");
  bad = m;
  bad.cache = {{16, CacheKind::kFull, 1, 0}, {8, CacheKind::kCompressed, 4, 0}};
  expect_error_contains([&] { bad.validate(); }, "cache groups cover 24 layers, the model has 32");
}

TEST(SimModel, FootprintPerFormatByHand) {
  const ModelStack m = model_preset("llama3.1-8b");
  // K + V, 32 layers, 16 tokens, 8 heads x 128 dims.
  const int64_t elems = 2LL * 32 * 16 * 8 * 128;
  KvFootprint f = kv_footprint(m, 16, KvFormat::kBF16);
  EXPECT_EQ(f.block.raw_kv, elems * 2);
  EXPECT_EQ(f.block.raw_kv, 2097152);
  EXPECT_EQ(f.block.scales, 0);
  EXPECT_EQ(f.bytes_per_token(), 131072.0);
  f = kv_footprint(m, 16, KvFormat::kFP8E4M3PerToken);
  EXPECT_EQ(f.block.raw_kv, elems);
  EXPECT_EQ(f.block.scales, 2LL * 32 * 16 * 8 * 4);  // one FP32 per (token, head) per pool
  f = kv_footprint(m, 16, KvFormat::kNVFP4);
  EXPECT_EQ(f.block.raw_kv, elems / 2);
  EXPECT_EQ(f.block.scales, elems / 16);  // one E4M3 byte per 16 elements
  f = kv_footprint(m, 16, KvFormat::kMXFP4);
  EXPECT_EQ(f.block.scales, elems / 32);
  EXPECT_EQ(kv_footprint(m, 16, KvFormat::kFP8E4M3).block.scales, 0);  // pool scale only
}

ModelStack mixed_stack() {
  ModelStack m = model_preset("llama3.1-8b");
  m.name = "mixed";
  m.cache = {{16, CacheKind::kFull, 1, 0},
             {12, CacheKind::kCompressed, 4, 0},
             {4, CacheKind::kSlidingWindow, 1, 128}};
  return m;
}

TEST(SimPlan, PlainStackByHand) {
  CapacityQuery q;
  q.model = model_preset("llama3.1-8b");
  q.kv_budget_bytes = 10 * kGiB;
  q.block_size = 16;
  q.format = KvFormat::kBF16;
  q.context_tokens = 4096;
  CapacityResult r = plan_capacity(q);
  EXPECT_EQ(r.num_blocks, 5120);  // 10 GiB / 2 MiB
  EXPECT_EQ(r.max_tokens, 81920);
  EXPECT_EQ(r.blocks_per_seq, 256);
  EXPECT_EQ(r.max_seqs, 20);
  EXPECT_EQ(r.bytes_per_token, 131072.0);
  EXPECT_EQ(r.slack_fraction, 0.0);
  EXPECT_EQ(r.used_bytes, 10 * kGiB);
  // One token more per sequence costs a whole block: 257 blocks, 19 sequences.
  q.context_tokens = 4097;
  r = plan_capacity(q);
  EXPECT_EQ(r.blocks_per_seq, 257);
  EXPECT_EQ(r.max_seqs, 19);
  EXPECT_EQ(r.slack_fraction, 15.0 / (257 * 16));
  // FP8 per-token: 1 MiB of data + 32 KiB of scales per block.
  q.context_tokens = 4096;
  q.format = KvFormat::kFP8E4M3PerToken;
  r = plan_capacity(q);
  EXPECT_EQ(r.footprint.block.total(), 1048576 + 32768);
  EXPECT_EQ(r.num_blocks, 10 * kGiB / (1048576 + 32768));
  EXPECT_EQ(r.max_seqs, r.num_blocks / 256);
  // max_num_seqs caps the answer.
  q.format = KvFormat::kBF16;
  q.max_num_seqs = 8;
  EXPECT_EQ(plan_capacity(q).max_seqs, 8);
}

TEST(SimPlan, CompressedAndSlidingWindowStackByHand) {
  CapacityQuery q;
  q.model = mixed_stack();
  q.kv_budget_bytes = kGiB;
  q.block_size = 16;
  q.format = KvFormat::kBF16;
  q.context_tokens = 1024;
  const CapacityResult r = plan_capacity(q);
  const int64_t tok = 2 * 8 * 128 * 2;                 // K + V bytes of one token of one layer
  EXPECT_EQ(r.footprint.block.raw_kv, 16 * 16 * tok);  // 16 full layers
  EXPECT_EQ(r.footprint.block.compressed_kv, 12 * 4 * tok);  // 12 layers, 16 / 4 entries
  EXPECT_EQ(r.footprint.per_request_bytes, 4 * 128 * tok);   // 4 SWA layers, 128-token ring
  // 64 blocks + one ring per sequence: floor(1 GiB / (64 x 1245184 + 2097152)) = 13 rings;
  // the rest is floor((1 GiB - 13 rings) / 1245184) = 840 blocks.
  EXPECT_EQ(r.footprint.block.total(), 1245184);
  EXPECT_EQ(r.state_slots, 13);
  EXPECT_EQ(r.num_blocks, 840);
  EXPECT_EQ(r.max_seqs, 13);
  EXPECT_EQ(r.used_bytes, 840 * 1245184 + 13 * 2097152);
}

TEST(SimPlan, BadInputsAreClearErrors) {
  CapacityQuery q;
  q.model = model_preset("llama3.1-8b");
  q.kv_budget_bytes = 2097151;  // one byte below one BF16 block of 16 tokens
  q.block_size = 16;
  q.context_tokens = 100;
  expect_error_contains([&] { plan_capacity(q); },
                        "KV budget 2097151 bytes is below one block (2097152 bytes)");
  q.kv_budget_bytes = kGiB;
  q.context_tokens = 0;
  expect_error_contains([&] { plan_capacity(q); }, "context_tokens 0 must be >= 1");
  q.context_tokens = 100;
  q.kv_budget_bytes = -5;
  expect_error_contains([&] { plan_capacity(q); }, "KV budget -5 bytes is negative");
  q.kv_budget_bytes = kGiB;
  q.model = mixed_stack();
  q.block_size = 18;  // not a multiple of the compression ratio 4
  expect_error_contains([&] { plan_capacity(q); },
                        "block_size 18 is not a multiple of compression ratio 4");
  q.block_size = 0;
  expect_error_contains([&] { plan_capacity(q); }, "block_size 0 must be >= 1");
  q.block_size = 16;
  q.max_num_seqs = 1000;  // 1000 rings of 2 MiB exceed 1 GiB
  expect_error_contains([&] { plan_capacity(q); }, "per-request state for 1000 sequences");
}

TEST(SimPlan, KvBudgetOnGpu) {
  const GpuSpec h100 = gpu_spec("H100");
  const ModelStack m = model_preset("llama3.1-8b");
  // 80 GiB x 0.9 - 16.06 GB of BF16 weights - 4 GiB of activations.
  EXPECT_EQ(kv_budget_on_gpu(h100, m, 0.9, 4 * kGiB), 77309411328LL - 16060522496LL - 4 * kGiB);
  expect_error_contains([&] { kv_budget_on_gpu(h100, model_preset("llama3.1-70b"), 0.9, 0); },
                        "leaves nothing for the KV cache");
  expect_error_contains([&] { kv_budget_on_gpu(h100, m, 1.5, 0); },
                        "gpu_memory_utilization 1.5 must be in (0, 1]");
}

// test-tiny (data/models): swa, csa, hca, csa, hca; entries 128 FP8 + 32 BF16 dims; seed-004
// variant: entry 128 + 64 + 4 = 196 B; block_tokens 16 -> CSA 4 entries + 4 NVFP4 keys of
// 64 + 8 B, HCA 1 entry. Bytes per block 2 x (4 x 196 + 4 x 72) + 2 x 196 = 2536. State per
// slot: SWA rings 5 x (16 x (196 + 4) + 4) = 16020; CSA streams 2 x 4 x 12 x (160 + 128)
// = 27648 each, HCA 2 x 4 x 16 x 160 = 20480 each -> 112276 B.
TEST(SimPlan, Dsv4TinyStackByHand) {
  const Dsv4ModelStack st = load_dsv4_model_stack(find_data_file("models/test_tiny.ini"));
  Dsv4CacheConfig cfg;
  cfg.block_tokens = 16;
  const Dsv4CacheSchema schema = build_dsv4_schema(st, cfg);
  const KvFootprint f = dsv4_footprint(schema);
  EXPECT_EQ(f.block.compressed_kv, 2 * (4 * 192 + 4 * 64) + 2 * 192);
  EXPECT_EQ(f.block.scales, 2 * (4 * 4 + 4 * 8) + 2 * 4);
  EXPECT_EQ(f.block.total(), 2536);
  EXPECT_EQ(f.per_request_bytes, 112276);
  EXPECT_EQ(f.block_size, 16);
  // Context 100: CSA needs ceil(floor(100/4)/4) = 7 blocks, HCA floor(100/16) = 6.
  // n requests cost n x 112276 (state) + 28 n (block table) + 256 x 91 (arena alignment)
  // + 7 n blocks: 7 requests leave 75 blocks of 2536 B in 1e6 bytes, 8 leave 30 < 56.
  const Dsv4Capacity c = plan_dsv4_capacity(schema, 1000000, 100);
  EXPECT_EQ(c.blocks_per_seq, 7);
  EXPECT_EQ(c.max_seqs, 7);
  EXPECT_EQ(c.budget.max_requests, 7);
  EXPECT_EQ(c.budget.num_blocks, 75);
  EXPECT_EQ(c.max_tokens(), 75 * 16);
  EXPECT_DOUBLE_EQ(c.bytes_per_token, (7 * 2536 + 112276) / 100.0);
  expect_error_contains([&] { plan_dsv4_capacity(schema, 100000, 100); },
                        "too small for one request");
  expect_error_contains([&] { plan_dsv4_capacity(schema, 1000000, 0); },
                        "context_tokens 0 must be >= 1");
}

// V4-Flash-like: 21 CSA + 20 HCA layers with 448 FP8 + 64 BF16 dims per entry, 128-token
// blocks: CSA 32 entries + 32 keys, HCA 1 entry. The BF16 dense baseline stores 43 x 512
// dims x 2 B = 44032 B per token.
TEST(SimPlan, Dsv4FlashLikeBlockSplitAndBaseline) {
  const Dsv4ModelStack st = load_dsv4_model_stack(find_data_file("models/v4_flash_like.ini"));
  Dsv4CacheConfig cfg;
  const KvFootprint seed = dsv4_footprint(build_dsv4_schema(st, cfg));
  EXPECT_EQ(seed.block.compressed_kv, 21 * (32 * 576 + 32 * 64) + 20 * 576);
  EXPECT_EQ(seed.block.scales,
            21 * (32 * 4 + 32 * 8) + 20 * 4);  // FP32 per entry; E4M3 per 16 key dims
  cfg.variant = Dsv4Variant::public_v4();
  const KvFootprint pub = dsv4_footprint(build_dsv4_schema(st, cfg));
  EXPECT_EQ(pub.block.compressed_kv, seed.block.compressed_kv);
  EXPECT_EQ(pub.block.scales,
            21 * (32 * 8 + 32 * 4) + 20 * 8);  // 7 UE8M0 + pad; UE8M0 per 32 key dims
  const ModelStack base = dsv4_bf16_dense_baseline(st);
  EXPECT_EQ(kv_footprint(base, 16, KvFormat::kBF16).bytes_per_token(), 44032.0);
}

}  // namespace
}  // namespace kvlab::sim
