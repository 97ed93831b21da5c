// test_decode.cu: every GPU decode version against kvlab::ref::decode_attention.
//
// Cases come from reference/attention/paged_case.h (seeded, printed): permuted pages in an
// over-provisioned pool, table columns past the end holding an out-of-range sentinel, NaN in
// every unused slot (FP4: NaN block scales), awkward lengths (0, 1, 2, block +- 1, primes,
// 3001). Outputs are NaN-prefilled inside guard regions. Checks go through the tolerance
// table: O and LSE against the reference over the same dequantized cache (tight), O against
// the reference over the original activations (loose sanity bound, printed).
//
// The default suite runs a curated sample of the cross product (DecodeCurated: every
// format x layout pair, every block size with every layout, every head_dim with every
// layout, GQA groups 1/2/3/4/8 and MQA, bf16 and fp16 Q/O). The full cross product is
// ExhaustiveDecode.*, which runs only with KVLAB_GPU_EXHAUSTIVE=1 (CI never needs it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "gpu/attention/decode.h"
#include "reference/attention/paged_case.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "tests/common/decode_cases.h"
#include "tests/common/paged_fixtures.h"
#include "tests/common/tolerance_check.h"
#include "tests/gpu/gpu_test_util.cuh"

namespace kvlab::test {
namespace {

// The cases (tests/common/decode_cases.h: the CPU measurement tool builds the same ones).
std::string label(const DecodeConfig& c) {
  return decode_case_label(c);
}
ref::PagedCaseSpec spec_for(const DecodeConfig& c, const std::string& name) {
  return decode_case_spec(c, name);
}

struct Checked {
  ErrorStats tight, orig;
};

// Runs one version over a built case and checks it; returns false when unsupported. A
// version with a declared scope (DecodeVersionInfo::in_scope) must decline a case outside it
// (checked here; then true without a run) and handle every case inside it.
bool check_version(ref::PagedCase& c, DeviceCase& d, int version, const ref::DecodeOutputs& tight,
                   const ref::DecodeOutputs* orig, Checked* out = nullptr) {
  const std::string ctx = gpu::decode_version(version).name + " | " + c.describe();
  if (!gpu::decode_version_in_scope(version, c.geom)) {
    const std::string why =
        gpu::decode_unsupported_reason(d.decode_args(c, nullptr, nullptr), version);
    EXPECT_FALSE(why.empty()) << ctx << ": outside the version's scope but not declined";
    return !why.empty();
  }
  const GpuDecodeRun r = run_gpu_decode(c, d, version);
  if (!r.supported) {
    std::printf("[unsupported] %s: %s\n", ctx.c_str(), r.reason.c_str());
    return false;
  }
  EXPECT_EQ(r.guard_damage, "") << ctx;
  Checked ck;
  EXPECT_TRUE(within_tolerance(r.o, tight.o, Op::kDecodeAttention, c.geom.format, c.spec.q_dtype,
                               ctx, &ck.tight));
  EXPECT_TRUE(
      within_tolerance(r.lse, tight.lse, Op::kDecodeLse, c.geom.format, c.spec.q_dtype, ctx));
  if (orig) {
    EXPECT_TRUE(within_tolerance(r.o, orig->o, Op::kDecodeAttentionVsBf16, c.geom.format,
                                 c.spec.q_dtype, ctx, &ck.orig));
    std::printf("[vs-original] %-32s %-12s max_abs=%.3e rel_l2=%.3e\n",
                gpu::decode_version(version).name.c_str(), to_string(c.geom.format).c_str(),
                ck.orig.max_abs, ck.orig.rel_l2);
  }
  if (out) *out = ck;
  return true;
}

// ------------------------------------------------------------------ registry
TEST(DecodeRegistry, VersionsInIdOrderWithNames) {
  const auto& v = gpu::decode_versions();
  ASSERT_EQ(v.size(), 17u);
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(v[i].id, static_cast<int>(i));
    EXPECT_EQ(v[i].name.rfind("v" + std::to_string(i) + "_", 0), 0u) << v[i].name;
    EXPECT_FALSE(v[i].summary.empty());
    EXPECT_EQ(gpu::decode_version(v[i].id).name, v[i].name);
  }
  EXPECT_THROW(gpu::decode_version(17), InvalidArgument);
}

// ------------------------------------------------------------------ curated cross product
class DecodeCurated : public ::testing::TestWithParam<DecodeConfig> {};

TEST_P(DecodeCurated, EveryVersionMatchesReference) {
  KVLAB_SKIP_WITHOUT_GPU();
  const DecodeConfig cfg = GetParam();
  ref::PagedCase c = ref::make_paged_case(spec_for(cfg, "decode.curated." + label(cfg)));
  ASSERT_TRUE(c.spec.shuffle_pages && c.spec.poison_unused && c.spec.extra_blocks > 0 &&
              c.spec.extra_table_columns > 0)
      << "the curated cases must exercise permuted, over-provisioned tables and poisoned slots";
  DeviceCase d(c);
  const ref::DecodeOutputs tight = ref::reference_decode(c);
  const ref::DecodeOutputs orig = ref::reference_decode_original(c);
  for (const auto& v : gpu::decode_versions()) {
    // Every curated configuration is inside every version's design (lengths <= 3001).
    EXPECT_TRUE(check_version(c, d, v.id, tight, &orig)) << v.name << " declined " << c.describe();
  }
}

INSTANTIATE_TEST_SUITE_P(Curated, DecodeCurated, ::testing::ValuesIn(curated_decode_configs()),
                         [](const ::testing::TestParamInfo<DecodeConfig>& i) {
                           return label(i.param);
                         });

// ------------------------------------------------------------------ small cases
// Every format x layout with short lengths (the reduced set compute-sanitizer runs):
// block 16 with head_dim 64 (v3 splits the 600-token sequence), block 1 with head_dim 128.
class DecodeSmall : public ::testing::TestWithParam<std::tuple<KvFormat, KvLayout>> {};

TEST_P(DecodeSmall, EveryVersionMatchesReference) {
  KVLAB_SKIP_WITHOUT_GPU();
  const auto [f, l] = GetParam();
  for (const ref::PagedCaseSpec& s : small_decode_specs(f, l)) {
    ref::PagedCase c = ref::make_paged_case(s);
    DeviceCase dc(c);
    const ref::DecodeOutputs tight = ref::reference_decode(c);
    const ref::DecodeOutputs orig = ref::reference_decode_original(c);
    for (const auto& v : gpu::decode_versions())
      EXPECT_TRUE(check_version(c, dc, v.id, tight, &orig)) << v.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Small, DecodeSmall,
                         ::testing::Combine(::testing::ValuesIn(all_kv_formats()),
                                            ::testing::ValuesIn(all_kv_layouts())),
                         [](const ::testing::TestParamInfo<std::tuple<KvFormat, KvLayout>>& i) {
                           return to_string(std::get<0>(i.param)) + "_" +
                                  to_string(std::get<1>(i.param));
                         });

// ------------------------------------------------------------------ edge cases
TEST(DecodeEdge, ExtremelyNegativeLogits) {
  KVLAB_SKIP_WITHOUT_GPU();
  for (KvFormat f : {KvFormat::kBF16, KvFormat::kFP8E4M3PerToken}) {
    ref::PagedCaseSpec s = seeded_spec("decode.extreme_logits", KvLayout::kHND, f);
    s.seq_lens = {1, 5, 300, 1500};
    // Q = 1e4 * (-1 + N(0,1)), K = 1 + N(0,1): logits around -1e5 with a spread of ~1e4,
    // so exp(z) underflows everywhere unless the max is subtracted first.
    s.q_scale = 1e4;
    s.q_mean = -1.0;
    s.k_mean = 1.0;
    ref::PagedCase c = ref::make_paged_case(s);
    DeviceCase d(c);
    const ref::DecodeOutputs tight = ref::reference_decode(c);
    double min_lse = 0;
    for (float x : tight.lse) min_lse = std::min<double>(min_lse, x);
    ASSERT_LT(min_lse, -1e4) << "the case must produce extremely negative logits";
    for (const auto& v : gpu::decode_versions())
      EXPECT_TRUE(check_version(c, d, v.id, tight, nullptr)) << v.name;
  }
}

TEST(DecodeEdge, LongContextSplitsAndSingleSplit) {
  KVLAB_SKIP_WITHOUT_GPU();
  // Batch 1 x 40000 tokens: v2 uses 79 partitions, v3 splits the sequence over the GPU.
  ref::PagedCaseSpec s = seeded_spec("decode.long", KvLayout::kNHD, KvFormat::kFP8E4M3);
  s.seq_lens = {40000};
  s.num_qo_heads = 32;
  s.num_kv_heads = 8;
  ref::PagedCase c = ref::make_paged_case(s);
  DeviceCase d(c);
  const ref::DecodeOutputs tight = ref::reference_decode(c);
  // Every version either runs and matches the reference, or declines for the one reason its
  // design allows: v0 and v1 keep a whole sequence's scores in shared memory. The split-KV
  // versions (v2 onwards) must run.
  int ran = 0, out_of_scope = 0;
  for (const auto& v : gpu::decode_versions()) {
    const std::string why =
        gpu::decode_unsupported_reason(d.decode_args(c, nullptr, nullptr), v.id);
    if (!gpu::decode_version_in_scope(v.id, c.geom)) {
      EXPECT_FALSE(why.empty()) << v.name << " runs outside its declared scope";
      ++out_of_scope;
      continue;
    }
    if (!why.empty()) {
      EXPECT_LT(v.id, 2) << v.name << " declined the 40000-token sequence: " << why;
      EXPECT_NE(why.find("shared memory"), std::string::npos) << v.name << ": " << why;
      continue;
    }
    EXPECT_TRUE(check_version(c, d, v.id, tight, nullptr)) << v.name;
    ++ran;
  }
  EXPECT_GE(ran, static_cast<int>(gpu::decode_versions().size()) - 2 - out_of_scope);
  const GpuDecodeRun r3 = run_gpu_decode(c, d, 3);
  EXPECT_GT(r3.workspace_bytes, 0u) << "v3 should split a single long sequence";
  const GpuDecodeRun r4 = run_gpu_decode(c, d, 4);
  EXPECT_GT(r4.workspace_bytes, 0u) << "v4 should split a single long sequence";

  // Many heads and sequences: v3 runs without splits (one launch, no workspace).
  ref::PagedCaseSpec m =
      seeded_spec("decode.many_heads", KvLayout::kHND, KvFormat::kBF16, DType::kF16);
  m.seq_lens = std::vector<int32_t>(40, 0);
  for (int i = 0; i < 40; ++i) m.seq_lens[i] = (i * 97) % 700;
  m.num_qo_heads = 32;
  m.num_kv_heads = 32;
  m.head_dim = 64;
  ref::PagedCase cm = ref::make_paged_case(m);
  DeviceCase dm(cm);
  const ref::DecodeOutputs tm = ref::reference_decode(cm);
  const GpuDecodeRun rm = run_gpu_decode(cm, dm, 3);
  EXPECT_EQ(rm.workspace_bytes, 0u);
  const GpuDecodeRun rm4 = run_gpu_decode(cm, dm, 4);  // 40 x 32 items fill the GPU: no split
  EXPECT_EQ(rm4.workspace_bytes, 0u);
  for (const auto& v : gpu::decode_versions())
    EXPECT_TRUE(check_version(cm, dm, v.id, tm, nullptr)) << v.name;
}

TEST(DecodeEdge, SequenceBoundBeyondSharedMemoryIsReported) {
  KVLAB_SKIP_WITHOUT_GPU();
  ref::PagedCaseSpec s = seeded_spec("decode.bound", KvLayout::kNHD, KvFormat::kBF16);
  s.seq_lens = {3};
  s.extra_table_columns = 8000;  // table of ~8000 pages x 16 = 128k tokens
  ref::PagedCase c = ref::make_paged_case(s);
  c.max_seq_len = 0;  // bound = max_blocks_per_seq * block_size
  DeviceCase d(c);
  EXPECT_NE(run_gpu_decode(c, d, 0).reason.find("shared memory"), std::string::npos);
  EXPECT_NE(run_gpu_decode(c, d, 1).reason.find("shared memory"), std::string::npos);
  const ref::DecodeOutputs tight = ref::reference_decode(c);
  EXPECT_TRUE(check_version(c, d, 2, tight, nullptr));
  EXPECT_TRUE(check_version(c, d, 3, tight, nullptr));
  EXPECT_TRUE(check_version(c, d, 4, tight, nullptr));
  EXPECT_TRUE(check_version(c, d, 5, tight, nullptr));
  EXPECT_TRUE(check_version(c, d, 6, tight, nullptr));  // fewer tiles than blocks (W < C)
}

TEST(DecodeEdge, EmptyBatchIsANoOp) {
  KVLAB_SKIP_WITHOUT_GPU();
  ref::PagedCaseSpec s = seeded_spec("decode.empty_batch", KvLayout::kNHD, KvFormat::kBF16);
  s.seq_lens = {4};
  ref::PagedCase c = ref::make_paged_case(s);
  DeviceCase d(c);
  DecodeArgs a = d.decode_args(c, nullptr, nullptr);
  a.num_seqs = 0;
  a.q = nullptr;
  for (const auto& v : gpu::decode_versions()) {
    EXPECT_EQ(gpu::decode_workspace_bytes(a, v.id), 0u);
    if (!gpu::decode_version_in_scope(v.id, a.kv.geom)) continue;  // declines (Unsupported)
    EXPECT_NO_THROW(gpu::decode_attention(a, v.id, nullptr, 0, nullptr)) << v.name;
  }
}

TEST(DecodeEdge, RepeatedRunsAreBitwiseIdentical) {
  KVLAB_SKIP_WITHOUT_GPU();
  ref::PagedCaseSpec s = seeded_spec("decode.determinism", KvLayout::kSplitX, KvFormat::kNVFP4);
  s.seq_lens = ref::awkward_seq_lens(16, 3001);
  ref::PagedCase c = ref::make_paged_case(s);
  DeviceCase d(c);
  for (const auto& v : gpu::decode_versions()) {
    if (!gpu::decode_version_in_scope(v.id, c.geom)) continue;
    expect_same_bits(run_gpu_decode(c, d, v.id), run_gpu_decode(c, d, v.id),
                     std::string(v.name) + " against its own second call (determinism)");
  }
}

TEST(DecodeEdge, CudaGraphReplayMatchesDirectLaunch) {
  KVLAB_SKIP_WITHOUT_GPU();
  ref::PagedCaseSpec s = seeded_spec("decode.graph", KvLayout::kNHD, KvFormat::kFP8E4M3);
  s.seq_lens = {700, 1, 0, 513};
  ref::PagedCase c = ref::make_paged_case(s);
  DeviceCase d(c);
  for (const auto& v : gpu::decode_versions()) {
    if (!gpu::decode_version_in_scope(v.id, c.geom)) continue;
    thrust::device_vector<uint16_t> o1(c.o_elements()), o2(c.o_elements());
    thrust::device_vector<float> l1(c.lse_elements()), l2(c.lse_elements());
    DecodeArgs a1 = d.decode_args(c, raw(o1), raw(l1));
    DecodeArgs a2 = d.decode_args(c, raw(o2), raw(l2));
    const size_t ws = gpu::decode_workspace_bytes(a1, v.id);
    thrust::device_vector<uint8_t> w(ws);
    cudaStream_t st;
    KVLAB_CUDA_CHECK(cudaStreamCreate(&st));
    gpu::decode_attention(a1, v.id, raw(w), ws, st);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    KVLAB_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    gpu::decode_attention(a2, v.id, raw(w), ws, st);
    KVLAB_CUDA_CHECK(cudaStreamEndCapture(st, &g));
    KVLAB_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 3; ++i) KVLAB_CUDA_CHECK(cudaGraphLaunch(ge, st));
    KVLAB_CUDA_CHECK(cudaStreamSynchronize(st));
    EXPECT_EQ(to_host(o1), to_host(o2)) << v.name;
    EXPECT_EQ(to_host(l1), to_host(l2)) << v.name;
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaStreamDestroy(st);
  }
}

// A pool above 2^31 elements: the case's pages are copied to page indices whose element
// offsets exceed 2^31 (byte offsets beyond 4 GiB), the table is shifted accordingly.
TEST(DecodeEdge, PoolAbove2e31ElementsUses64BitOffsets) {
  KVLAB_SKIP_WITHOUT_GPU();
  for (KvLayout layout : {KvLayout::kNHD, KvLayout::kSplitX}) {
    ref::PagedCaseSpec s = seeded_spec("decode.big_pool", layout, KvFormat::kBF16);
    s.seq_lens = {1, 300, 77};
    ref::PagedCase c = ref::make_paged_case(s);
    const PageGeometry g = c.geom;
    const int64_t per_block = g.elements_per_block();
    const int64_t shift =
        ((int64_t{1} << 31) + per_block - 1) / per_block;  // first page past 2^31 elements
    PageGeometry big = g;
    big.num_blocks = g.num_blocks + shift;
    ASSERT_GT(big.elements(), int64_t{1} << 31);
    size_t free_b = 0, total_b = 0;
    KVLAB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if (static_cast<size_t>(2 * big.bytes()) + (size_t{1} << 30) > free_b)
      GTEST_SKIP() << "needs " << 2 * big.bytes() << " bytes";
    thrust::device_vector<uint8_t> kbig(big.bytes()), vbig(big.bytes());
    const size_t page_bytes = static_cast<size_t>(g.bytes_per_block());
    KVLAB_CUDA_CHECK(cudaMemcpy(raw(kbig) + shift * page_bytes, c.k_pool.data(), c.k_pool.size(),
                                cudaMemcpyHostToDevice));
    KVLAB_CUDA_CHECK(cudaMemcpy(raw(vbig) + shift * page_bytes, c.v_pool.data(), c.v_pool.size(),
                                cudaMemcpyHostToDevice));
    std::vector<int32_t> table = c.block_table;
    for (int32_t& e : table)
      if (e != ref::kTableSentinel) e += static_cast<int32_t>(shift);
    DeviceCase d(c);
    d.block_table = to_device(table);
    const ref::DecodeOutputs tight = ref::reference_decode(c);
    for (const auto& v : gpu::decode_versions()) {
      if (!gpu::decode_version_in_scope(v.id, big)) continue;
      GuardedBuffer o_host(static_cast<size_t>(c.o_elements()), c.spec.q_dtype);
      GuardedBuffer l_host(static_cast<size_t>(c.lse_elements()), DType::kF32);
      DeviceGuarded o_dev(o_host), l_dev(l_host);
      DecodeArgs a = d.decode_args(c, o_dev.data(), static_cast<float*>(l_dev.data()));
      a.kv.geom = big;
      a.kv.k = raw(kbig);
      a.kv.v = raw(vbig);
      gpu::validate_decode_tables(a, nullptr);
      const size_t ws = gpu::decode_workspace_bytes(a, v.id);
      thrust::device_vector<uint8_t> w(ws, 0xFF);
      gpu::decode_attention(a, v.id, raw(w), ws, nullptr);
      KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
      o_dev.fetch(o_host);
      l_dev.fetch(l_host);
      const std::string ctx = v.name + " big pool | " + c.describe();
      EXPECT_EQ(o_host.guard_damage() + l_host.guard_damage(), "") << ctx;
      EXPECT_TRUE(within_tolerance(ref::to_float(o_host.data(), c.spec.q_dtype, o_host.elements()),
                                   tight.o, Op::kDecodeAttention, g.format, c.spec.q_dtype, ctx));
    }
  }
}

// ------------------------------------------------------------------ bad input
struct BadInputCase {
  ref::PagedCase c;
  DeviceCase d;
  thrust::device_vector<uint16_t> o;
  thrust::device_vector<float> lse;
  BadInputCase() : c(make()), d(c), o(c.o_elements()), lse(c.lse_elements()) {}
  static ref::PagedCase make() {
    ref::PagedCaseSpec s =
        seeded_spec("decode.bad_input", KvLayout::kNHD, KvFormat::kFP8E4M3PerToken);
    s.seq_lens = {5, 40};
    return ref::make_paged_case(s);
  }
  DecodeArgs args() { return d.decode_args(c, raw(o), raw(lse)); }
};

template <class E>
void expect_throw_containing(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an exception containing '" << needle << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(DecodeBadInput, ArgumentsAreValidatedWithClearErrors) {
  KVLAB_SKIP_WITHOUT_GPU();
  BadInputCase b;
  for (const auto& v : gpu::decode_versions()) {
    const int id = v.id;
    auto run = [&](DecodeArgs a) {
      const size_t ws = 1 << 24;
      thrust::device_vector<uint8_t> w(ws);
      gpu::decode_attention(a, id, raw(w), ws, nullptr);
    };
    {
      DecodeArgs a = b.args();
      a.q = nullptr;
      expect_throw_containing<InvalidArgument>([&] { run(a); }, "q is null");
    }
    {
      DecodeArgs a = b.args();
      a.kv.k_scales = nullptr;
      expect_throw_containing<InvalidArgument>([&] { run(a); }, "k_scales");
    }
    {
      DecodeArgs a = b.args();
      a.block_table = nullptr;
      expect_throw_containing<InvalidArgument>([&] { run(a); }, "block_table");
    }
    {
      DecodeArgs a = b.args();
      a.num_qo_heads = 7;
      expect_throw_containing<InvalidArgument>([&] { run(a); }, "multiple of num_kv_heads");
    }
    {
      DecodeArgs a = b.args();
      a.max_seq_len = a.max_blocks_per_seq * a.kv.geom.block_size + 1;
      expect_throw_containing<InvalidArgument>([&] { run(a); }, "max_seq_len");
    }
    {
      DecodeArgs a = b.args();
      a.sm_scale = NAN;
      expect_throw_containing<InvalidArgument>([&] { run(a); }, "sm_scale");
    }
    {
      DecodeArgs a = b.args();
      a.kv.geom.head_dim = 96;
      a.kv.geom.num_blocks = 1;
      expect_throw_containing<Unsupported>([&] { run(a); }, "unsupported head_dim 96");
      EXPECT_NE(gpu::decode_unsupported_reason(a, id).find("unsupported head_dim 96"),
                std::string::npos);
    }
    {
      DecodeArgs a = b.args();
      a.q_dtype = DType::kF32;
      expect_throw_containing<Unsupported>([&] { run(a); }, "bf16 or f16");
    }
    {
      DecodeArgs a = b.args();
      a.o = static_cast<char*>(a.o) + 2;
      expect_throw_containing<InvalidArgument>([&] { run(a); }, "aligned");
    }
    {
      DecodeArgs a = b.args();
      a.kv.geom.format = static_cast<KvFormat>(42);
      expect_throw_containing<InvalidArgument>([&] { run(a); }, "format");
    }
    {
      DecodeArgs a = b.args();
      const size_t need = gpu::decode_workspace_bytes(a, id);
      if (need > 0) {
        thrust::device_vector<uint8_t> w(need);
        expect_throw_containing<InvalidArgument>(
            [&] { gpu::decode_attention(a, id, raw(w), need - 1, nullptr); }, "workspace");
      }
    }
  }
  int unknown = 0;  // one past the newest registered version
  for (const auto& v : gpu::decode_versions()) unknown = std::max(unknown, v.id + 1);
  expect_throw_containing<InvalidArgument>(
      [&] { gpu::decode_attention(b.args(), unknown, nullptr, 0, nullptr); },
      "unknown decode version " + std::to_string(unknown));
}

TEST(DecodeBadInput, TablesAreCheckedOnTheDeviceAndNeverReadOutOfRange) {
  KVLAB_SKIP_WITHOUT_GPU();
  BadInputCase b;
  EXPECT_NO_THROW(gpu::validate_decode_tables(b.args(), nullptr));
  // Entry 1 of sequence 1 (used: length 40 needs 3 pages of 16) out of range.
  std::vector<int32_t> table = b.c.block_table;
  table[1 * b.c.max_blocks_per_seq + 1] = static_cast<int32_t>(b.c.geom.num_blocks);
  b.d.block_table = to_device(table);
  expect_throw_containing<InvalidArgument>([&] { gpu::validate_decode_tables(b.args(), nullptr); },
                                           "block_table[1][1]");
  // The kernels never read it: they report NaN for that sequence (and only that one).
  for (const auto& v : gpu::decode_versions()) {
    if (!gpu::decode_version_in_scope(v.id, b.c.geom)) continue;
    const GpuDecodeRun r = run_gpu_decode(b.c, b.d, v.id);
    ASSERT_TRUE(r.supported);
    const size_t per_seq = static_cast<size_t>(b.c.spec.num_qo_heads) * b.c.spec.head_dim;
    for (size_t i = 0; i < per_seq; ++i)
      ASSERT_FALSE(std::isnan(r.o[i])) << v.name << " sequence 0 element " << i;
    for (size_t i = per_seq; i < 2 * per_seq; ++i)
      ASSERT_TRUE(std::isnan(r.o[i])) << v.name << " sequence 1 element " << i;
    EXPECT_EQ(r.guard_damage, "");
  }
  // A length beyond the bound.
  b.d.block_table = to_device(b.c.block_table);
  std::vector<int32_t> lens = b.c.seq_lens;
  lens[0] = b.c.max_seq_len + 1;
  b.d.seq_lens = to_device(lens);
  expect_throw_containing<InvalidArgument>([&] { gpu::validate_decode_tables(b.args(), nullptr); },
                                           "seq_lens[0]");
  for (const auto& v : gpu::decode_versions()) {
    if (!gpu::decode_version_in_scope(v.id, b.c.geom)) continue;
    const GpuDecodeRun r = run_gpu_decode(b.c, b.d, v.id);
    ASSERT_TRUE(r.supported);
    EXPECT_TRUE(std::isnan(r.o[0]) && std::isnan(r.lse[0])) << v.name;
  }
}

// ------------------------------------------------------------------ the report table
// version x format: max abs error and relative L2 against the reference over the same
// dequantized cache (tight) and over the original activations (loose). Printed for the
// closing note; also asserted through the tolerance table like every other case.
TEST(DecodeReport, ErrorTableVersionByFormat) {
  KVLAB_SKIP_WITHOUT_GPU();
  std::printf("\n%-32s %-12s %12s %12s %12s %12s\n", "version", "format", "max_abs", "rel_l2",
              "orig_max_abs", "orig_rel_l2");
  for (KvFormat f : all_kv_formats()) {
    ref::PagedCase c = ref::make_paged_case(report_decode_spec(f));
    DeviceCase d(c);
    const ref::DecodeOutputs tight = ref::reference_decode(c);
    const ref::DecodeOutputs orig = ref::reference_decode_original(c);
    for (const auto& v : gpu::decode_versions()) {
      Checked ck;
      if (!gpu::decode_version_in_scope(v.id, c.geom)) continue;
      if (!check_version(c, d, v.id, tight, &orig, &ck)) continue;
      std::printf("%-32s %-12s %12.3e %12.3e %12.3e %12.3e\n", v.name.c_str(), to_string(f).c_str(),
                  ck.tight.max_abs, ck.tight.rel_l2, ck.orig.max_abs, ck.orig.rel_l2);
    }
  }
}

// ------------------------------------------------------------------ exhaustive (opt-in)
bool exhaustive_enabled() {
  const char* e = std::getenv("KVLAB_GPU_EXHAUSTIVE");
  return e && std::string(e) == "1";
}

class ExhaustiveDecode : public ::testing::TestWithParam<std::tuple<KvFormat, KvLayout, int>> {};

TEST_P(ExhaustiveDecode, AllBlockSizesGroupsAndDtypes) {
  KVLAB_SKIP_WITHOUT_GPU();
  if (!exhaustive_enabled())
    GTEST_SKIP() << "set KVLAB_GPU_EXHAUSTIVE=1 to run the full cross product";
  const auto [f, l, d] = GetParam();
  const int groups[][2] = {{4, 4}, {4, 2}, {6, 2}, {8, 2}, {16, 2}, {8, 1}};
  for (int bs : {1, 8, 16, 32, 64, 128, 256})
    for (const auto& g : groups)
      for (DType dt : {DType::kBF16, DType::kF16}) {
        const DecodeConfig cfg{l, f, dt, d, bs, g[0], g[1], 1100};
        ref::PagedCase c = ref::make_paged_case(spec_for(cfg, "decode.exhaustive." + label(cfg)));
        DeviceCase dc(c);
        const ref::DecodeOutputs tight = ref::reference_decode(c);
        for (const auto& v : gpu::decode_versions())
          EXPECT_TRUE(check_version(c, dc, v.id, tight, nullptr)) << v.name;
      }
}

INSTANTIATE_TEST_SUITE_P(
    All, ExhaustiveDecode,
    ::testing::Combine(::testing::ValuesIn(all_kv_formats()), ::testing::ValuesIn(all_kv_layouts()),
                       ::testing::Values(64, 128, 256)),
    [](const ::testing::TestParamInfo<std::tuple<KvFormat, KvLayout, int>>& i) {
      return to_string(std::get<0>(i.param)) + "_" + to_string(std::get<1>(i.param)) + "_d" +
             std::to_string(std::get<2>(i.param));
    });

}  // namespace
}  // namespace kvlab::test
