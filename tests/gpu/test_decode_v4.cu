// test_decode_v4.cu: what the tensor-core decode versions (v4+) add beyond the registry-wide
// suites of test_decode.cu (which already run v4 on every curated, small and edge case):
// query tiles (groups above 8, MQA), the split-KV plan (no split when the grid is full, a
// split for a single sequence, the per-block byte cap on long sequences of a skewed batch),
// plan knobs (gpu::DecodeTuning, decode_plan.h) that must not change the function computed,
// forced split counts, and the operand
// flavours at head_dim 256 with an f16 Q (bf16 hi + lo split of Q).
// Cases: reference/attention/paged_case.h (seeded, printed; permuted over-provisioned
// tables, NaN in unused slots); outputs guarded and NaN-prefilled (run_gpu_decode).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gpu/attention/decode.h"
#include "gpu/attention/decode_plan.h"
#include "reference/attention/paged_case.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "tests/common/paged_fixtures.h"
#include "tests/common/tolerance_check.h"
#include "tests/gpu/gpu_test_util.cuh"

namespace kvlab::test {
namespace {

// Every tensor-core version (v4 and later) of the registry.
std::vector<int> mma_versions() {
  std::vector<int> v;
  for (const auto& i : gpu::decode_versions())
    if (i.id >= 4) v.push_back(i.id);
  return v;
}

// v11 merges an item's splits inside a thread-block cluster: it splits without a workspace,
// and declines a forced split above the largest resident cluster (its own suite,
// DecodeV11/, tests both).
bool merges_in_cluster(int version) {
  return gpu::decode_version(version).name == "v11_mma_decode_cluster_merge";
}

// Runs `version` on `c` and checks O and LSE against the reference over the same cache.
void expect_matches(ref::PagedCase& c, int version, const std::string& what,
                    const gpu::DecodeTuning& tuning = gpu::DecodeTuning{}) {
  DeviceCase d(c);
  const ref::DecodeOutputs tight = ref::reference_decode(c);
  const GpuDecodeRun r = run_gpu_decode(c, d, version, nullptr, tuning);
  if (!gpu::decode_version_in_scope(version, c.geom)) {  // a scoped version must decline
    EXPECT_FALSE(r.supported) << gpu::decode_version(version).name << " ran outside its scope";
    return;
  }
  const std::string ctx = gpu::decode_version(version).name + " " + what + " | " + c.describe();
  expect_run_matches(r, tight, c, ctx);
}

TEST(DecodeV4, GroupsAboveEightUseQueryTiles) {
  KVLAB_SKIP_WITHOUT_GPU();
  // group 16 (2 query tiles), 12 (a partial second tile), MQA with 32 heads (4 tiles).
  const int heads[][2] = {{32, 2}, {24, 2}, {32, 1}};
  for (KvFormat f : {KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kFP8E4M3PerToken,
                     KvFormat::kNVFP4, KvFormat::kMXFP4}) {
    for (const auto& h : heads) {
      ref::PagedCaseSpec s =
          seeded_spec(("decode.v4.qtiles." + to_string(f)).c_str(), KvLayout::kHND, f);
      s.num_qo_heads = h[0];
      s.num_kv_heads = h[1];
      s.seq_lens = {1, 700, 33, 0, 257};
      ref::PagedCase c = ref::make_paged_case(s);
      for (int v : mma_versions()) expect_matches(c, v, "group " + std::to_string(h[0] / h[1]));
    }
  }
}

TEST(DecodeV4, PlanSplitsOnlyWhenTheGridIsNotFull) {
  KVLAB_SKIP_WITHOUT_GPU();
  // One sequence of 5000 tokens and 8 KV heads: 8 blocks cannot fill the GPU -> splits.
  ref::PagedCaseSpec one = seeded_spec("decode.v4.plan.one", KvLayout::kNHD, KvFormat::kBF16);
  one.num_qo_heads = 32;
  one.num_kv_heads = 8;
  one.seq_lens = {5000};
  ref::PagedCase c1 = ref::make_paged_case(one);
  DeviceCase d1(c1);
  // 600 sequences x 4 KV heads = 2400 blocks: more than a wave on any GPU -> one launch.
  ref::PagedCaseSpec many = seeded_spec("decode.v4.plan.many", KvLayout::kNHD, KvFormat::kBF16);
  many.num_qo_heads = 16;
  many.num_kv_heads = 4;
  many.head_dim = 64;
  many.seq_lens = std::vector<int32_t>(600, 0);
  for (int i = 0; i < 600; ++i) many.seq_lens[i] = 1 + (i * 37) % 300;
  ref::PagedCase cm = ref::make_paged_case(many);
  DeviceCase dm(cm);
  thrust::device_vector<uint16_t> o1(c1.o_elements()), om(cm.o_elements());
  for (int v : mma_versions()) {
    expect_matches(c1, v, "batch 1");
    expect_matches(cm, v, "batch 600");
    if (!gpu::decode_version_in_scope(v, c1.geom) || merges_in_cluster(v)) continue;
    EXPECT_GT(gpu::decode_workspace_bytes(d1.decode_args(c1, raw(o1), nullptr), v), 0u)
        << "version " << v;
    // v4, v5: no split (no workspace) when the grid is full; v6's persistent grid always
    // keeps partial-result slots and merge counters.
    if (v <= 5)
      EXPECT_EQ(gpu::decode_workspace_bytes(dm.decode_args(cm, raw(om), nullptr), v), 0u)
          << "version " << v;
  }
}

TEST(DecodeV4, LongSequencesOfASkewedBatchAreCappedAndMerged) {
  KVLAB_SKIP_WITHOUT_GPU();
  // 300 sequences x 2 KV heads fill the grid (no split for filling), but the longest ones
  // exceed the per-block byte cap, set low here: 256 KiB = 1024 fp8 d128 tokens of one KV
  // head, so they split while the short ones stay whole.
  gpu::DecodeTuning tu;
  tu.max_chunk_bytes = 256 << 10;
  ref::PagedCaseSpec s = seeded_spec("decode.v4.skew", KvLayout::kNHD, KvFormat::kFP8E4M3);
  s.num_qo_heads = 8;
  s.num_kv_heads = 2;
  s.seq_lens = std::vector<int32_t>(300, 0);
  for (int i = 0; i < 300; ++i)
    s.seq_lens[i] = (i % 37 == 0) ? 4000 + 131 * (i / 37) : 1 + (i * 53) % 400;
  ref::PagedCase c = ref::make_paged_case(s);
  DeviceCase d(c);
  thrust::device_vector<uint16_t> o(c.o_elements());
  for (int v : mma_versions()) {
    if (!gpu::decode_version_in_scope(v, c.geom)) continue;
    if (!merges_in_cluster(v))
      EXPECT_GT(gpu::decode_workspace_bytes(d.decode_args(c, raw(o), nullptr), v, tu), 0u)
          << "the cap must split (v4, v5) / the persistent grid must share items (v6+)";
    expect_matches(c, v, "skewed, capped", tu);
  }
}

TEST(DecodeV4, PlanKnobsDoNotChangeTheResult) {
  KVLAB_SKIP_WITHOUT_GPU();
  ref::PagedCaseSpec s =
      seeded_spec("decode.v4.knobs", KvLayout::kHND, KvFormat::kBF16, DType::kF16);
  s.num_qo_heads = 16;
  s.num_kv_heads = 4;
  s.seq_lens = {3001, 17, 1500};
  ref::PagedCase c = ref::make_paged_case(s);
  for (int waves : {1, 2, 8})
    for (bool pdl : {true, false}) {
      gpu::DecodeTuning tu;
      tu.fill_waves = waves;
      tu.pdl = pdl;
      for (int v : mma_versions())
        expect_matches(c, v, "fill_waves " + std::to_string(waves) + (pdl ? " pdl" : " no-pdl"),
                       tu);
    }
}

TEST(DecodeV4, ForcedSplitCountsDoNotChangeTheResult) {
  KVLAB_SKIP_WITHOUT_GPU();
  // Forced split counts (v4, v5: splits per item; v6: persistent blocks per item) from one
  // to more than the tiles of the shortest sequences, and v6's fewest tiles per block.
  ref::PagedCaseSpec s = seeded_spec("decode.v4.forced", KvLayout::kNHD, KvFormat::kFP8E4M3);
  s.num_qo_heads = 8;
  s.num_kv_heads = 2;
  s.seq_lens = {2500, 1, 0, 700, 33};
  ref::PagedCase c = ref::make_paged_case(s);
  for (int splits : {1, 2, 5, 64, 1000}) {
    gpu::DecodeTuning tu;
    tu.num_splits = splits;
    for (int v : mma_versions()) {
      if (merges_in_cluster(v) && splits > 16) {  // above any cluster: declined, with the reason
        DeviceCase d(c);
        const GpuDecodeRun r = run_gpu_decode(c, d, v, nullptr, tu);
        EXPECT_FALSE(r.supported) << "splits " << splits;
        EXPECT_NE(r.reason.find("thread-block cluster"), std::string::npos) << r.reason;
        continue;
      }
      expect_matches(c, v, "splits " + std::to_string(splits), tu);
    }
  }
  for (int min_tiles : {1, 3, 1000}) {
    gpu::DecodeTuning tu;
    tu.min_tiles_per_block = min_tiles;
    for (int v : mma_versions()) expect_matches(c, v, "min tiles " + std::to_string(min_tiles), tu);
  }
}

TEST(DecodeV4, BadTuningIsAnInvalidArgument) {
  KVLAB_SKIP_WITHOUT_GPU();
  ref::PagedCaseSpec s = seeded_spec("decode.v4.bad_tuning", KvLayout::kNHD, KvFormat::kBF16);
  s.seq_lens = {40};
  ref::PagedCase c = ref::make_paged_case(s);
  DeviceCase d(c);
  thrust::device_vector<uint16_t> o(c.o_elements());
  const DecodeArgs a = d.decode_args(c, raw(o), nullptr);
  gpu::DecodeTuning tu;
  tu.num_splits = -1;
  for (int v : mma_versions())
    EXPECT_THROW(gpu::decode_attention(a, v, tu, nullptr, 0, nullptr), InvalidArgument) << v;
  tu = gpu::DecodeTuning{};
  tu.min_wave_efficiency = 2.0;
  EXPECT_THROW(gpu::decode_workspace_bytes(a, 4, tu), InvalidArgument);
}

TEST(DecodeV4, HeadDim256EveryFormatWithF16Queries) {
  KVLAB_SKIP_WITHOUT_GPU();
  for (KvFormat f : all_kv_formats()) {
    for (KvLayout l : {KvLayout::kNHD, KvLayout::kSplitX}) {
      ref::PagedCaseSpec s =
          seeded_spec(("decode.v4.d256." + to_string(f)).c_str(), l, f, DType::kF16);
      s.head_dim = 256;
      s.num_qo_heads = 8;
      s.num_kv_heads = 2;
      s.block_size = 32;
      s.seq_lens = {31, 33, 0, 600};
      ref::PagedCase c = ref::make_paged_case(s);
      for (int v : mma_versions()) expect_matches(c, v, "d256 f16 Q");
    }
  }
}

}  // namespace
}  // namespace kvlab::test
