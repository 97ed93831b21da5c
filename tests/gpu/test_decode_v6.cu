// test_decode_v6.cu: what v6_stream_k_decode adds beyond the registry-wide suites of
// test_decode.cu and test_decode_v4.cu (which run v6 on every curated, small, edge and plan
// case): the stream-K partition on the device (one long sequence cut over many blocks; many
// short sequences, so a block walks many items; fewer tiles than blocks; skewed lengths),
// the pipeline running across items and query tiles, empty and invalid lengths beside valid
// ones, an out-of-range page that must poison exactly its sequence's rows, and the merge of
// items shared by blocks. Every case also runs v5 as the same kernel's compute at the
// classic split plan (a disagreement localizes a failure to the scheduling or the copies).
// The first test, SmokeEveryFormat, is what the GPU stage runs first: one small case per
// format and layout.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu/attention/decode.h"
#include "gpu/attention/decode_auto.h"
#include "gpu/attention/decode_plan.h"
#include "reference/attention/paged_case.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "tests/common/paged_fixtures.h"
#include "tests/common/tolerance_check.h"
#include "tests/gpu/gpu_test_util.cuh"

namespace kvlab::test {
namespace {

constexpr int kV6 = 6;

void expect_matches(ref::PagedCase& c, int version, const std::string& what,
                    const gpu::DecodeTuning& tuning = gpu::DecodeTuning{}) {
  DeviceCase d(c);
  const ref::DecodeOutputs tight = ref::reference_decode(c);
  const GpuDecodeRun r = run_gpu_decode(c, d, version, nullptr, tuning);
  const std::string ctx = gpu::decode_version(version).name + " " + what + " | " + c.describe();
  expect_run_matches(r, tight, c, ctx);
}

TEST(DecodeV6, RegistryHasTheStreamKVersion) {
  EXPECT_EQ(gpu::decode_version(kV6).name, "v6_stream_k_decode");
}

TEST(DecodeV6, SmokeEveryFormat) {
  KVLAB_SKIP_WITHOUT_GPU();
  for (KvFormat f : all_kv_formats())
    for (KvLayout l : all_kv_layouts()) {
      ref::PagedCaseSpec s = seeded_spec(("decode.v6.smoke." + to_string(f)).c_str(), l, f);
      s.num_qo_heads = 8;
      s.num_kv_heads = 2;
      s.head_dim = 64;
      s.seq_lens = {1, 0, 37, 300};
      ref::PagedCase c = ref::make_paged_case(s);
      expect_matches(c, kV6, "smoke");
    }
}

TEST(DecodeV6, OneLongSequenceOverManyBlocks) {
  KVLAB_SKIP_WITHOUT_GPU();
  for (KvFormat f : {KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kNVFP4}) {
    ref::PagedCaseSpec s =
        seeded_spec(("decode.v6.long." + to_string(f)).c_str(), KvLayout::kHND, f);
    s.num_qo_heads = 32;
    s.num_kv_heads = 8;
    s.seq_lens = {20011};  // a prime: the last tile is partial
    ref::PagedCase c = ref::make_paged_case(s);
    expect_matches(c, kV6, "batch 1");
    for (int splits : {1, 3, 40}) {
      gpu::DecodeTuning tu;
      tu.num_splits = splits;
      expect_matches(c, kV6, "batch 1, " + std::to_string(splits) + " blocks per item", tu);
    }
  }
}

TEST(DecodeV6, ManyShortSequencesMakeManySegmentsPerBlock) {
  KVLAB_SKIP_WITHOUT_GPU();
  // 500 sequences of 0..40 tokens (0-3 tiles) over few blocks: each block walks dozens of
  // items; zero-length ones have no tiles and must still get zero rows.
  ref::PagedCaseSpec s = seeded_spec("decode.v6.short", KvLayout::kNHD, KvFormat::kFP8E4M3PerToken);
  s.num_qo_heads = 16;
  s.num_kv_heads = 4;
  s.head_dim = 64;
  s.seq_lens.assign(500, 0);
  for (int i = 0; i < 500; ++i) s.seq_lens[i] = (i * 7919) % 41;
  ref::PagedCase c = ref::make_paged_case(s);
  gpu::DecodeTuning few;
  few.num_splits = 1;  // blocks = items x 1, capped at the resident slots
  expect_matches(c, kV6, "500 short", few);
  gpu::DecodeTuning tiny;
  tiny.min_tiles_per_block = 64;  // few blocks, long ranges
  expect_matches(c, kV6, "500 short, 64 tiles per block", tiny);
}

TEST(DecodeV6, FewerTilesThanBlocks) {
  KVLAB_SKIP_WITHOUT_GPU();
  // 3 tiles of work, 1000 requested blocks per item (capped at the slots): most blocks have
  // an empty range; the item's parts are the blocks with one tile each.
  ref::PagedCaseSpec s = seeded_spec("decode.v6.w_lt_c", KvLayout::kHND, KvFormat::kBF16);
  s.num_qo_heads = 4;
  s.num_kv_heads = 1;
  s.seq_lens = {40};
  ref::PagedCase c = ref::make_paged_case(s);
  gpu::DecodeTuning tu;
  tu.num_splits = 1000;
  expect_matches(c, kV6, "3 tiles, many blocks", tu);
  tu.min_tiles_per_block = 1;
  tu.num_splits = 0;
  expect_matches(c, kV6, "3 tiles, 1 tile per block", tu);
}

TEST(DecodeV6, SkewedBatchWithQueryTilesAndF16) {
  KVLAB_SKIP_WITHOUT_GPU();
  // Group 12 (2 query tiles, the second partial), skewed lengths, an f16 Q (bf16 operands
  // split Q into hi + lo), head_dim 256 and 128.
  for (int d : {128, 256}) {
    for (KvFormat f : {KvFormat::kBF16, KvFormat::kMXFP4, KvFormat::kFP8E5M2}) {
      ref::PagedCaseSpec s = seeded_spec(("decode.v6.skew." + to_string(f)).c_str(),
                                         KvLayout::kSplitX, f, DType::kF16);
      s.head_dim = d;
      s.num_qo_heads = 24;
      s.num_kv_heads = 2;
      s.block_size = 32;
      s.seq_lens = {3001, 1, 17, 0, 513, 2048, 95};
      ref::PagedCase c = ref::make_paged_case(s);
      expect_matches(c, kV6, "skewed d" + std::to_string(d));
      expect_matches(c, 5, "skewed d" + std::to_string(d));
    }
  }
}

TEST(DecodeV6, BadLengthsAndPagesGiveNaNRowsOfTheirSequenceOnly) {
  KVLAB_SKIP_WITHOUT_GPU();
  ref::PagedCaseSpec s = seeded_spec("decode.v6.bad", KvLayout::kNHD, KvFormat::kBF16);
  s.num_qo_heads = 8;
  s.num_kv_heads = 2;
  s.seq_lens = {700, 300, 1200, 50};
  ref::PagedCase c = ref::make_paged_case(s);
  const ref::DecodeOutputs tight = ref::reference_decode(c);
  DeviceCase d(c);
  // Sequence 1: a length above the bound; sequence 2: an out-of-range page in its middle.
  std::vector<int32_t> lens = c.seq_lens, table = c.block_table;
  lens[1] = c.max_seq_len + 1;
  table[2 * c.max_blocks_per_seq + 40] = static_cast<int32_t>(c.geom.num_blocks + 5);
  d.seq_lens = to_device(lens);
  d.block_table = to_device(table);
  for (int splits : {0, 1, 7}) {
    gpu::DecodeTuning tu;
    tu.num_splits = splits;
    GuardedBuffer o_host(static_cast<size_t>(c.o_elements()), c.spec.q_dtype);
    GuardedBuffer l_host(static_cast<size_t>(c.lse_elements()), DType::kF32);
    DeviceGuarded o_dev(o_host), l_dev(l_host);
    const DecodeArgs a = d.decode_args(c, o_dev.data(), static_cast<float*>(l_dev.data()));
    const size_t ws = gpu::decode_workspace_bytes(a, kV6, tu);
    thrust::device_vector<uint8_t> w(ws, 0xFF);
    gpu::decode_attention(a, kV6, tu, raw(w), ws, nullptr);
    KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
    o_dev.fetch(o_host);
    l_dev.fetch(l_host);
    EXPECT_EQ(o_host.guard_damage() + l_host.guard_damage(), "");
    const std::vector<float> o = ref::to_float(o_host.data(), c.spec.q_dtype, o_host.elements());
    const std::vector<float> l = ref::to_float(l_host.data(), DType::kF32, l_host.elements());
    const int rows = s.num_qo_heads, dim = s.head_dim;
    for (int q = 0; q < 4; ++q) {
      const auto ob = o.begin() + static_cast<size_t>(q) * rows * dim;
      const auto lb = l.begin() + static_cast<size_t>(q) * rows;
      const std::string ctx = "splits " + std::to_string(splits) + " seq " + std::to_string(q);
      if (q == 1 || q == 2) {
        for (auto it = ob; it != ob + rows * dim; ++it) ASSERT_TRUE(std::isnan(*it)) << ctx;
        for (auto it = lb; it != lb + rows; ++it) ASSERT_TRUE(std::isnan(*it)) << ctx;
      } else {
        const std::vector<float> got(ob, ob + rows * dim),
            want(tight.o.begin() + (ob - o.begin()),
                 tight.o.begin() + (ob - o.begin()) + rows * dim);
        EXPECT_TRUE(
            within_tolerance(got, want, Op::kDecodeAttention, c.geom.format, c.spec.q_dtype, ctx));
      }
    }
  }
}

TEST(DecodeV6, AutoPicksASupportedVersion) {
  KVLAB_SKIP_WITHOUT_GPU();
  for (KvFormat f : {KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kNVFP4, KvFormat::kMXFP4}) {
    ref::PagedCaseSpec s =
        seeded_spec(("decode.v6.auto." + to_string(f)).c_str(), KvLayout::kNHD, f);
    s.num_qo_heads = 32;
    s.num_kv_heads = 8;
    s.seq_lens = {4096, 4096};
    ref::PagedCase c = ref::make_paged_case(s);
    DeviceCase d(c);
    thrust::device_vector<uint16_t> o(c.o_elements());
    const gpu::DecodeChoice ch = gpu::choose_decode(d.decode_args(c, raw(o), nullptr));
    std::printf("auto %s: %s (splits %d): %s\n", to_string(f).c_str(),
                gpu::decode_version(ch.version).name.c_str(), ch.tuning.num_splits,
                ch.basis.c_str());
    EXPECT_FALSE(ch.basis.empty());
    expect_matches(c, ch.version, "auto's pick", ch.tuning);
  }
}

}  // namespace
}  // namespace kvlab::test
