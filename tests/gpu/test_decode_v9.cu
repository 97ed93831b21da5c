// test_decode_v9.cu: v9_mma_decode_bulk_rows (one bulk copy per K and V row of a 16-token
// tile, into v4's padded rows) beyond the registry-wide suites: it runs and matches the reference on every
// geometry of its scope (bf16 / fp16 HND, block_size a multiple of 16, every compiled
// head_dim, GQA 1-16, sequence ends inside and at the edges of tiles and pages), declines
// everything outside it with a reason, gives v5's and v8's bits for the same split (the same
// 16-token tiles and mma sequence, another copy path), and turns a bad table entry into NaN for that
// sequence only. Cases: seeded, permuted over-provisioned tables, NaN in unused slots
// (reference/attention/paged_case.h); outputs guarded and NaN-prefilled (run_gpu_decode).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/attention/decode.h"
#include "reference/attention/paged_case.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "tests/common/paged_fixtures.h"
#include "tests/common/tolerance_check.h"
#include "tests/gpu/gpu_test_util.cuh"

namespace kvlab::test {
namespace {

constexpr int kV9 = 9;
constexpr int kV8 = 8;
constexpr int kV5 = 5;

// Sequence lengths around tile (16) and page edges, an empty one, and a long one.
std::vector<int32_t> edge_lengths(int block_size) {
  return {0, 1, 15, 16, 17, block_size - 1, block_size, block_size + 1, 63, 64, 65, 600, 2049};
}

void expect_v9_matches(ref::PagedCase& c, const std::string& what,
                       const gpu::DecodeTuning& tu = gpu::DecodeTuning{}) {
  DeviceCase d(c);
  const ref::DecodeOutputs tight = ref::reference_decode(c);
  const std::string ctx = "v9 " + what + " | " + c.describe();
  ASSERT_TRUE(gpu::decode_version_in_scope(kV9, c.geom)) << ctx;
  const GpuDecodeRun r = run_gpu_decode(c, d, kV9, nullptr, tu);
  ASSERT_TRUE(r.supported) << ctx << ": " << r.reason;
  EXPECT_EQ(r.guard_damage, "") << ctx;
  EXPECT_TRUE(
      within_tolerance(r.o, tight.o, Op::kDecodeAttention, c.geom.format, c.spec.q_dtype, ctx));
  EXPECT_TRUE(
      within_tolerance(r.lse, tight.lse, Op::kDecodeLse, c.geom.format, c.spec.q_dtype, ctx));
}

TEST(DecodeV9, EveryGeometryOfItsScopeMatchesTheReference) {
  KVLAB_SKIP_WITHOUT_GPU();
  const int groups[][2] = {{8, 8}, {8, 2}, {32, 8}, {16, 1}};  // GQA 1, 4, 4, 16 (2 query tiles)
  int i = 0;
  for (KvFormat f : {KvFormat::kBF16, KvFormat::kFP16})
    for (int d : {64, 128, 256})
      for (int bs : {16, 32, 128}) {
        const auto& g = groups[i++ % 4];
        const DType qd = (i % 2) ? DType::kF16 : DType::kBF16;
        ref::PagedCaseSpec s = seeded_spec(("decode.v9." + to_string(f)).c_str(), KvLayout::kHND,
                                           f, qd);
        s.head_dim = d;
        s.block_size = bs;
        s.num_qo_heads = g[0];
        s.num_kv_heads = g[1];
        s.seq_lens = edge_lengths(bs);
        ref::PagedCase c = ref::make_paged_case(s);
        ASSERT_TRUE(c.spec.poison_unused) << "unused slots must hold NaN (V rows past the end)";
        expect_v9_matches(c, "d" + std::to_string(d) + " b" + std::to_string(bs));
      }
}

TEST(DecodeV9, ForcedSplitsAndPlanKnobsMatchTheReferenceAndV5V8Bitwise) {
  KVLAB_SKIP_WITHOUT_GPU();
  ref::PagedCaseSpec s = seeded_spec("decode.v9.splits", KvLayout::kHND, KvFormat::kBF16);
  s.num_qo_heads = 32;
  s.num_kv_heads = 8;
  s.block_size = 16;
  s.seq_lens = {3001, 1, 0, 700, 33, 1024};
  ref::PagedCase c = ref::make_paged_case(s);
  DeviceCase d(c);
  for (int splits : {1, 2, 5, 47}) {
    gpu::DecodeTuning tu;
    tu.num_splits = splits;
    expect_v9_matches(c, "splits " + std::to_string(splits), tu);
    // The same split, the same 16-token tiles and warps, the same mma sequence: v5's and
    // v8's bits.
    const GpuDecodeRun r9 = run_gpu_decode(c, d, kV9, nullptr, tu);
    for (int other : {kV5, kV8}) {
      const GpuDecodeRun ro = run_gpu_decode(c, d, other, nullptr, tu);
      ASSERT_TRUE(r9.supported && ro.supported) << r9.reason << ro.reason;
      ASSERT_EQ(r9.o.size(), ro.o.size());
      EXPECT_EQ(0, std::memcmp(r9.o.data(), ro.o.data(), r9.o.size() * sizeof(float)))
          << "splits " << splits << ": v9 and v" << other << " differ";
      EXPECT_EQ(0, std::memcmp(r9.lse.data(), ro.lse.data(), r9.lse.size() * sizeof(float)))
          << "splits " << splits << ": v9 and v" << other;
    }
  }
  for (bool pdl : {true, false}) {
    gpu::DecodeTuning tu;
    tu.pdl = pdl;
    tu.fill_waves = 4;
    expect_v9_matches(c, pdl ? "fill 4 pdl" : "fill 4 no-pdl", tu);
  }
}

TEST(DecodeV9, DeclinesEverythingOutsideItsScope) {
  KVLAB_SKIP_WITHOUT_GPU();
  struct Out {
    KvLayout l;
    KvFormat f;
    int bs;
    const char* why;
  };
  const Out outs[] = {{KvLayout::kNHD, KvFormat::kBF16, 16, "HND"},
                      {KvLayout::kSplitX, KvFormat::kFP16, 16, "HND"},
                      {KvLayout::kHND, KvFormat::kFP8E4M3, 16, "16-bit"},
                      {KvLayout::kHND, KvFormat::kNVFP4, 32, "16-bit"},
                      {KvLayout::kHND, KvFormat::kBF16, 8, "multiple of 16"},
                      {KvLayout::kHND, KvFormat::kBF16, 1, "multiple of 16"}};
  for (const Out& o : outs) {
    ref::PagedCaseSpec s = seeded_spec("decode.v9.out", o.l, o.f);
    s.block_size = o.bs;
    s.seq_lens = {40, 3};
    ref::PagedCase c = ref::make_paged_case(s);
    DeviceCase d(c);
    EXPECT_FALSE(gpu::decode_version_in_scope(kV9, c.geom)) << c.describe();
    const std::string why = gpu::decode_unsupported_reason(d.decode_args(c, nullptr, nullptr), kV9);
    EXPECT_NE(why.find(o.why), std::string::npos) << c.describe() << ": " << why;
    EXPECT_NE(why.find("v9_mma_decode_bulk_rows"), std::string::npos) << why;
    thrust::device_vector<uint16_t> out(c.o_elements());
    EXPECT_THROW(gpu::decode_attention(d.decode_args(c, raw(out), nullptr), kV9, nullptr, 0, nullptr),
                 Unsupported)
        << c.describe();
  }
}

TEST(DecodeV9, BadTableEntryGivesNaNForThatSequenceOnly) {
  KVLAB_SKIP_WITHOUT_GPU();
  ref::PagedCaseSpec s = seeded_spec("decode.v9.bad_table", KvLayout::kHND, KvFormat::kBF16);
  s.seq_lens = {40, 40, 300};
  ref::PagedCase c = ref::make_paged_case(s);
  DeviceCase d(c);
  std::vector<int32_t> table = c.block_table;
  table[1 * c.max_blocks_per_seq + 2] = static_cast<int32_t>(c.geom.num_blocks);  // the 3rd page
  d.block_table = to_device(table);
  const GpuDecodeRun r = run_gpu_decode(c, d, kV9);
  ASSERT_TRUE(r.supported) << r.reason;
  EXPECT_EQ(r.guard_damage, "");
  const size_t per_seq = static_cast<size_t>(c.spec.num_qo_heads) * c.spec.head_dim;
  for (size_t i = 0; i < per_seq; ++i) ASSERT_FALSE(std::isnan(r.o[i])) << "seq 0 element " << i;
  for (size_t i = per_seq; i < 2 * per_seq; ++i)
    ASSERT_TRUE(std::isnan(r.o[i])) << "seq 1 element " << i;
  for (size_t i = 2 * per_seq; i < 3 * per_seq; ++i)
    ASSERT_FALSE(std::isnan(r.o[i])) << "seq 2 element " << i;
}

}  // namespace
}  // namespace kvlab::test
