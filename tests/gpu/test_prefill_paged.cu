// test_prefill_paged.cu: every GPU paged-prefill version against ref::paged_prefill_attention.
//
// Cases come from reference/attention/prefill_case.h (seeded, printed): permuted pages in an
// over-provisioned pool, table columns past the end holding an out-of-range sentinel, NaN in
// every unused slot, awkward chunk sizes (0, 1, block +- 1, several query tiles, the whole
// prompt) after awkward prefixes (0, 1, block +- 1, thousands). Outputs are NaN-prefilled
// inside guard regions; O is checked through the tolerance table's prefill_attention entry
// and LSE through decode_lse, against the reference over the same cache.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu/attention/prefill.h"
#include "reference/attention/attention.h"
#include "reference/attention/prefill_case.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "tests/common/paged_fixtures.h"
#include "tests/common/tolerance_check.h"
#include "tests/gpu/gpu_test_util.cuh"

namespace kvlab::test {
namespace {

struct PrefillConfig {
  KvLayout layout;
  KvFormat format;
  int head_dim, block_size, qo_heads, kv_heads;
  std::vector<int32_t> prefix, q_lens;  // per sequence: cached tokens before the chunk, chunk
};

ref::PagedPrefillCaseSpec spec_for(const PrefillConfig& c, const char* name) {
  ref::PagedPrefillCaseSpec s;
  const DType qd = c.format == KvFormat::kFP16 ? DType::kF16 : DType::kBF16;
  s.cache = seeded_spec(name, c.layout, c.format, qd);
  s.cache.head_dim = c.head_dim;
  s.cache.block_size = c.block_size;
  s.cache.num_qo_heads = c.qo_heads;
  s.cache.num_kv_heads = c.kv_heads;
  s.cache.keep_original = false;
  s.cache.seq_lens.clear();
  for (size_t i = 0; i < c.q_lens.size(); ++i)
    s.cache.seq_lens.push_back(c.prefix[i] + c.q_lens[i]);
  s.q_lens = c.q_lens;
  return s;
}

struct DevicePrefill {
  DeviceCase cache;
  thrust::device_vector<uint16_t> q;
  thrust::device_vector<int32_t> q_start;
  explicit DevicePrefill(const ref::PagedPrefillCase& c)
      : cache(c.cache), q(to_device(c.q)), q_start(to_device(c.q_start)) {}
  PagedPrefillArgs args(ref::PagedPrefillCase& c, void* o, float* lse) {
    PagedPrefillArgs a = c.args(o, lse);
    const DecodeArgs d = cache.decode_args(c.cache, nullptr, nullptr);
    a.q = raw(q);
    a.kv = d.kv;
    a.block_table = d.block_table;
    a.seq_lens = d.seq_lens;
    a.q_start = raw(q_start);
    return a;
  }
};

// Runs `version` on the case and checks O and LSE; false when unsupported.
bool run_and_check(ref::PagedPrefillCase& c, int version) {
  DevicePrefill d(c);
  GuardedBuffer o_host(static_cast<size_t>(c.o_elements()), c.cache.spec.q_dtype);
  GuardedBuffer lse_host(static_cast<size_t>(c.lse_elements()), DType::kF32);
  DeviceGuarded o_dev(o_host), lse_dev(lse_host);
  const PagedPrefillArgs a = d.args(c, o_dev.data(), static_cast<float*>(lse_dev.data()));
  const std::string ctx = gpu::prefill_version(version).name + " | " + c.describe();
  const std::string why = gpu::prefill_unsupported_reason(a, version);
  if (!why.empty()) {
    std::printf("[unsupported] %s: %s\n", ctx.c_str(), why.c_str());
    return false;
  }
  gpu::validate_prefill_tables(a, nullptr);
  gpu::prefill_attention(a, version, nullptr);
  KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
  o_dev.fetch(o_host);
  lse_dev.fetch(lse_host);
  EXPECT_EQ(o_host.guard_damage() + lse_host.guard_damage(), "") << ctx;

  GuardedBuffer o_ref(static_cast<size_t>(c.o_elements()), c.cache.spec.q_dtype);
  std::vector<float> lse_ref(static_cast<size_t>(c.lse_elements()), NAN);
  ref::paged_prefill_attention(c.args(o_ref.data(), lse_ref.data()));
  const DType qd = c.cache.spec.q_dtype;
  const std::vector<float> o = ref::to_float(o_host.data(), qd, o_host.elements());
  const std::vector<float> r = ref::to_float(o_ref.data(), qd, o_ref.elements());
  const std::vector<float> lse = ref::to_float(lse_host.data(), DType::kF32, lse_host.elements());
  EXPECT_TRUE(within_tolerance(o, r, Op::kPrefillAttention, c.cache.geom.format, qd, ctx));
  EXPECT_TRUE(within_tolerance(lse, lse_ref, Op::kDecodeLse, c.cache.geom.format, DType::kF32,
                               ctx + " lse"));
  return true;
}

std::vector<PrefillConfig> curated() {
  std::vector<PrefillConfig> v;
  // llama3-8b's attention shape (GQA 4, d128, block 16): a whole prompt of several tiles,
  // chunks after prefixes (awkward sizes), a one-token chunk, an empty chunk.
  v.push_back({KvLayout::kNHD,
               KvFormat::kBF16,
               128,
               16,
               32,
               8,
               {0, 512, 15, 17, 1000, 3, 0},
               {300, 64, 1, 33, 17, 0, 16}});
  v.push_back({KvLayout::kHND, KvFormat::kBF16, 128, 16, 32, 8, {0, 2053}, {97, 129}});
  // fp16, the other head dims, odd groups (3: 64 % 3 != 0 leaves padding rows), MHA, MQA,
  // block sizes 1 and 17 and 128.
  v.push_back({KvLayout::kNHD, KvFormat::kFP16, 64, 1, 6, 2, {0, 5, 40}, {31, 7, 65}});
  v.push_back({KvLayout::kHND, KvFormat::kFP16, 256, 17, 8, 8, {0, 16, 300}, {18, 33, 40}});
  v.push_back({KvLayout::kNHD, KvFormat::kBF16, 256, 128, 16, 1, {127, 0}, {2, 257}});
  v.push_back({KvLayout::kHND, KvFormat::kBF16, 64, 8, 64, 1, {9, 0}, {3, 20}});  // group 64
  v.push_back({KvLayout::kNHD, KvFormat::kBF16, 128, 32, 16, 2, {3001, 0}, {1, 1}});
  return v;
}

TEST(PrefillRegistry, VersionsInIdOrderWithNames) {
  const auto& v = gpu::prefill_versions();
  ASSERT_GE(v.size(), 1u);
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(v[i].id, static_cast<int>(i));
    EXPECT_EQ(v[i].name.rfind("prefill_paged_v" + std::to_string(i) + "_", 0), 0u) << v[i].name;
    EXPECT_FALSE(v[i].summary.empty());
  }
  EXPECT_THROW(gpu::prefill_version(99), InvalidArgument);
}

TEST(PrefillPaged, CuratedCasesAgainstTheReference) {
  KVLAB_SKIP_WITHOUT_GPU();
  int k = 0;
  for (const PrefillConfig& cfg : curated()) {
    const std::string name = "prefill.curated." + std::to_string(k++);
    ref::PagedPrefillCase c = ref::make_paged_prefill_case(spec_for(cfg, name.c_str()));
    for (const auto& info : gpu::prefill_versions())
      EXPECT_TRUE(run_and_check(c, info.id)) << "every curated case is supported";
  }
}

TEST(PrefillPaged, LargeLogitsAndLongRowsStayWithinTolerance) {
  KVLAB_SKIP_WITHOUT_GPU();
  PrefillConfig cfg{KvLayout::kNHD, KvFormat::kBF16, 128, 16, 32, 8, {4000}, {200}};
  ref::PagedPrefillCaseSpec s = spec_for(cfg, "prefill.sharp");
  s.q_scale = 8.0;  // sharp softmax rows: the max tracking and rescaling matter
  s.cache.k_mean = 0.5;
  ref::PagedPrefillCase c = ref::make_paged_prefill_case(s);
  for (const auto& info : gpu::prefill_versions()) EXPECT_TRUE(run_and_check(c, info.id));
}

TEST(PrefillPaged, UnsupportedConfigurationsSayWhy) {
  KVLAB_SKIP_WITHOUT_GPU();
  for (auto [layout, format, q] : {std::tuple{KvLayout::kNHD, KvFormat::kFP8E4M3, DType::kBF16},
                                   std::tuple{KvLayout::kSplitX, KvFormat::kBF16, DType::kBF16},
                                   std::tuple{KvLayout::kNHD, KvFormat::kBF16, DType::kF16}}) {
    PrefillConfig cfg{layout, format, 128, 16, 8, 2, {3}, {5}};
    ref::PagedPrefillCaseSpec s = spec_for(cfg, "prefill.unsupported");
    s.cache.q_dtype = q;
    ref::PagedPrefillCase c = ref::make_paged_prefill_case(s);
    DevicePrefill d(c);
    thrust::device_vector<uint16_t> o(static_cast<size_t>(c.o_elements()));
    const PagedPrefillArgs a = d.args(c, raw(o), nullptr);
    const std::string why = gpu::prefill_unsupported_reason(a, 0);
    EXPECT_FALSE(why.empty());
    EXPECT_THROW(gpu::prefill_attention(a, 0, nullptr), Unsupported) << why;
  }
}

TEST(PrefillPaged, BadArgumentsAndTablesAreRejected) {
  KVLAB_SKIP_WITHOUT_GPU();
  PrefillConfig cfg{KvLayout::kNHD, KvFormat::kBF16, 128, 16, 8, 2, {3, 0}, {5, 9}};
  ref::PagedPrefillCase c = ref::make_paged_prefill_case(spec_for(cfg, "prefill.bad"));
  DevicePrefill d(c);
  thrust::device_vector<uint16_t> o(static_cast<size_t>(c.o_elements()));
  PagedPrefillArgs a = d.args(c, raw(o), nullptr);
  {
    PagedPrefillArgs b = a;
    b.q = nullptr;
    EXPECT_THROW(gpu::prefill_attention(b, 0, nullptr), InvalidArgument);
  }
  {
    PagedPrefillArgs b = a;
    b.sm_scale = NAN;
    EXPECT_THROW(gpu::prefill_attention(b, 0, nullptr), InvalidArgument);
  }
  {
    PagedPrefillArgs b = a;
    b.max_q_len = b.seq_len_bound() + 1;
    EXPECT_THROW(gpu::prefill_attention(b, 0, nullptr), InvalidArgument);
  }
  {
    // A table entry a sequence reads, out of range: caught by the table check.
    std::vector<int32_t> table = c.cache.block_table;
    table[0] = static_cast<int32_t>(c.cache.geom.num_blocks) + 5;
    thrust::device_vector<int32_t> dt = to_device(table);
    PagedPrefillArgs b = a;
    b.block_table = raw(dt);
    EXPECT_THROW(gpu::validate_prefill_tables(b, nullptr), InvalidArgument);
  }
  EXPECT_THROW(gpu::prefill_attention(a, 42, nullptr), InvalidArgument);
}

}  // namespace
}  // namespace kvlab::test
