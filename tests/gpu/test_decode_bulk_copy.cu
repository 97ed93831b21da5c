// test_decode_bulk_copy.cu: the bulk-copy family of the tensor-core decode
// (gpu/attention/mma_bulk_decode.cuh) beyond the registry-wide suites, one parameterised
// suite over its members:
//   v8_mma_decode_bulk_page     one bulk copy per K and V page run of a 16-token tile
//   v9_mma_decode_bulk_rows     one bulk copy per K and V row, into v4's padded rows
//   v10_mma_decode_tma_swizzle  one TMA tensor copy per K and V tile, 128-byte swizzled
//   v11_mma_decode_cluster_merge  v10's copies, the KV splits of an item merged inside one
//                               thread-block cluster (distributed shared memory, one launch)
//   v12_mma_decode_last_block_merge  v10's copies, the KV splits of an item merged by its
//                               last block to finish (an arrival count per item, one launch)
//   v13_mma_decode_eight_warps  v10's copies in blocks of 8 warps (16-bit rows at head_dim
//                               <= 128); its warps hold other tiles than v10's, so no peer
//                               shares its bits
//   v14_mma_decode_page_heads   v10's copies and tile compute, a block per (sequence, 8 KV
//                               heads, split): a producer warp copies a tile of all 8 heads,
//                               a consumer warp per head (no NVFP4; 16-bit at head_dim <= 128);
//                               no peer shares its bits
//   v15_mma_decode_stream_k     v10's copies and block body on a persistent stream-K grid
//                               (equal ranges of the items' tiles, items shared by blocks merged
//                               in a second kernel; no NVFP4); no peer shares its bits
//   v16_mma_decode_shared_tiles v10's copies and block body, the KV splits of an item sharing
//                               its tiles (static ones, then claims from a word per item); at
//                               more than one split no peer shares its bits, nor its own calls
// Each member runs and matches the reference on every geometry of its scope (bf16 / fp16
// HND -- v10 also NHD --, block_size a multiple of 16, every compiled head_dim, GQA 1-16,
// sequence ends inside and at the edges of tiles and pages; v10 also fp8_e4m3 and nvfp4 at
// head_dim 128 and 256, with v5's bits at forced splits -- nvfp4 at head_dim 128 runs 32-token
// tiles, whose bits v11 shares and v5 does not), declines everything outside it with a
// reason, gives the bits of the versions with the same tiles and mma sequence for the same
// split (v5's in every layout; v9 and v10 also v8's in HND; v11 also v10's in every layout:
// its cluster merge replays v4's merge kernel's arithmetic in the kernel's order), and turns
// a bad table entry into NaN for that sequence only. v11 also: forced splits 2, 3, 5, 8, 16
// over lengths that leave most blocks of a cluster without tokens (1, 17, 63, 1000, 2500,
// 4096), GQA 1 / 4 / 8, HND and NHD, bad table entries at forced splits, and forced splits
// above the cluster limit declined with the reason. v12 also: the same forced splits and 47
// (more splits than one merge batch), the bits of v10, and one workspace reused across calls
// whatever it holds in between (0xFF, its own reset words, random bytes, words of another
// launch's tag), every arrival word reset after each call.
// Cases: seeded (per version), permuted over-provisioned tables, NaN in unused slots
// (reference/attention/paged_case.h: the rows a tile reads past the sequence's end, which
// v10's full 16-row box copies too); outputs guarded and NaN-prefilled (run_gpu_decode).
// Test names: DecodeV<N>/BulkCopyDecode.<test>/v<N>.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gpu/attention/decode.h"
#include "gpu/attention/split_arrival.h"
#include "reference/attention/paged_case.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "tests/common/paged_fixtures.h"
#include "tests/common/tolerance_check.h"
#include "tests/gpu/gpu_test_util.cuh"

namespace kvlab::test {
namespace {

// Sequence lengths around tile (16) and page edges, an empty one, and a long one.
std::vector<int32_t> edge_lengths(int block_size) {
  return {0, 1, 15, 16, 17, block_size - 1, block_size, block_size + 1, 63, 64, 65, 600, 2049};
}

struct BulkMember {
  int id;
  const char* name;                // the registry name, which every unsupported reason carries
  std::vector<int> bitwise_peers;  // versions with the same tiles and mma sequence (HND)
  bool fp8;  // copies FP8 E4M3 (pool scale) and NVFP4 rows at head_dim >= 128 too
  std::vector<KvLayout> layouts;   // the layouts it copies
  std::vector<int> other_peers = {5};  // the same bits in the other layouts (and FP8)
  int max_splits = 0;  // > 0: the splits of an item merge in one cluster of at most this many
  // The same bits on NVFP4 at head_dim 128, where the family's warp tiles are 32 tokens (v5's
  // are 16: another online-softmax blocking, other bits).
  std::vector<int> nvfp4_peers = {};
  bool last_block = false;  // the splits of an item merge in its last block (an arrival count)
  int max_16bit_head_dim = 256;  // 16-bit rows of larger head_dims are declined (shared memory)
  bool nvfp4 = true;  // with fp8: NVFP4 rows at head_dim >= 128 too (false: declined as a format)
  bool stream_k = false;  // a persistent stream-K grid (num_splits: blocks per SM)
  bool shared_tiles = false;  // the splits of an item share its tiles (a claim word per item)
};

// gtest prints a parameter by its registry name.
void PrintTo(const BulkMember& m, std::ostream* os) { *os << m.name; }

class BulkCopyDecode : public ::testing::TestWithParam<BulkMember> {
 protected:
  int id() const { return GetParam().id; }
  std::string tag() const { return "v" + std::to_string(id()); }

  void expect_matches(ref::PagedCase& c, const std::string& what,
                      const gpu::DecodeTuning& tu = gpu::DecodeTuning{}) {
    DeviceCase d(c);
    const ref::DecodeOutputs tight = ref::reference_decode(c);
    const std::string ctx = tag() + " " + what + " | " + c.describe();
    ASSERT_TRUE(gpu::decode_version_in_scope(id(), c.geom)) << ctx;
    const GpuDecodeRun r = run_gpu_decode(c, d, id(), nullptr, tu);
    expect_run_matches(r, tight, c, ctx);
  }

  // Every geometry of the scope in formats `fs` at head_dims `dims` (block 16 / 32 / 128, GQA
  // 1-16, sequence ends inside and at the edges of tiles and pages, NaN in unused slots).
  void expect_geometries(std::initializer_list<KvFormat> fs, std::initializer_list<int> dims,
                         KvLayout layout) {
    const int groups[][2] = {{8, 8}, {8, 2}, {32, 8}, {16, 1}};  // GQA 1, 4, 4, 16 (2 q tiles)
    int i = 0;
    for (KvFormat f : fs)
      for (int d : dims) {
        if (kv_format_bits(f) == 16 && d > GetParam().max_16bit_head_dim) continue;  // declined
        for (int bs : {16, 32, 128}) {
          const auto& g = groups[i++ % 4];
          const DType qd = (i % 2) ? DType::kF16 : DType::kBF16;
          ref::PagedCaseSpec s = seeded_spec(
              ("decode." + tag() + "." + to_string(f) + "." + to_string(layout)).c_str(),
              layout, f, qd);
          s.head_dim = d;
          s.block_size = bs;
          s.num_qo_heads = g[0];
          s.num_kv_heads = g[1];
          s.seq_lens = edge_lengths(bs);
          ref::PagedCase c = ref::make_paged_case(s);
          ASSERT_TRUE(c.spec.poison_unused) << "unused slots must hold NaN (rows past the end)";
          expect_matches(c, to_string(layout) + " " + to_string(f) + " d" + std::to_string(d) +
                                " b" + std::to_string(bs));
        }
      }
  }

  // A skewed batch in format f at forced splits 1, 2, 5, 47: the reference, and for the same
  // split the bits of `peers` (the same 16-token tiles and warps, the same mma sequence over
  // the same values: another copy path, another shared-memory geometry).
  void expect_forced_splits(KvFormat f, const std::string& seed, const std::vector<int>& peers,
                            ref::PagedCase* keep = nullptr, KvLayout layout = KvLayout::kHND) {
    ref::PagedCaseSpec s = seeded_spec(
        ("decode." + tag() + "." + seed + "." + to_string(layout)).c_str(), layout, f);
    s.num_qo_heads = 32;
    s.num_kv_heads = 8;
    s.block_size = 16;
    s.seq_lens = {3001, 1, 0, 700, 33, 1024};
    ref::PagedCase c = ref::make_paged_case(s);
    DeviceCase d(c);
    for (int splits : {1, 2, 5, 47}) {
      gpu::DecodeTuning tu;
      tu.num_splits = splits;
      if (GetParam().max_splits > 0 && splits > GetParam().max_splits) {
        // 47 splits of the 3001-token sequence cannot merge in one cluster.
        const std::string why = gpu::decode_unsupported_reason(d.decode_args(c, nullptr, nullptr),
                                                               id(), tu);
        EXPECT_NE(why.find("thread-block cluster"), std::string::npos) << splits << ": " << why;
        EXPECT_NE(why.find("forced num_splits " + std::to_string(splits)), std::string::npos)
            << why;
        continue;
      }
      expect_matches(c, to_string(layout) + " " + to_string(f) + " splits " +
                            std::to_string(splits), tu);
      const GpuDecodeRun r = run_gpu_decode(c, d, id(), nullptr, tu);
      for (int other : peers) {
        expect_same_bits(r, run_gpu_decode(c, d, other, nullptr, tu),
                         to_string(layout) + " " + to_string(f) + " splits " +
                             std::to_string(splits) + ": " + tag() + " and v" +
                             std::to_string(other));
      }
    }
    if (keep) *keep = c;
  }

  // A format the member copies at head_dim >= 128 only (FP8 E4M3, NVFP4): every geometry of
  // the scope against the reference, then the peers' bits at forced splits (head_dim 128), in
  // every layout.
  void expect_narrow_format(KvFormat f, const std::string& seed, const std::vector<int>& peers) {
    if (!GetParam().fp8) GTEST_SKIP() << tag() << " copies 16-bit rows only (declines: below)";
    for (KvLayout l : GetParam().layouts) {
      expect_geometries({f}, {128, 256}, l);
      expect_forced_splits(f, seed, peers, nullptr, l);
    }
  }

  // A table entry past the pool in sequence 1: NaN there, the others untouched.
  void expect_bad_table_gives_nan(KvLayout layout,
                                  const gpu::DecodeTuning& tu = gpu::DecodeTuning{});

  // The workspace of the versions that keep a word per item (v12's arrival counts, v16's tile
  // claims) across calls, in every layout: one buffer reused by calls at forced splits 2, 5, 47,
  // the plan, 2 and 5 (the words at other offsets each time), with what it holds in between
  // changed: nothing (what the last call left), 0xFF, random bytes, and in its last words, words
  // of another launch's tag counting count(splits, rng) (a killed launch's, or a stale tag's).
  // Batch: lengths 3001, 1, 0, 700, 33, 1024, 32 query / 8 KV heads (GQA 4: one word per
  // (sequence, KV head)), bf16, seed decode.vN.<seed>.<layout>. check(c, d, ws, tu, what, r) runs
  // the version on ws into r and checks its outputs; after every call that split, each word must
  // be reset (0).
  template <class Count, class Check>
  void expect_reused_workspace(const std::string& seed, uint64_t rng_seed, Count&& count,
                               Check&& check);

  // The cases of the split-batch tests (stream-K ranges, shared tiles): in every layout, bf16 and
  // (where copied) fp8_e4m3 and nvfp4, GQA 1 / 4 / 8 in turn, page 16 or 32, f16 or bf16 Q, a
  // batch whose short sequences leave most parts of an item without tokens (lengths 1, 17, 63, 0)
  // beside long ones (1000, 2500, the bound 4096); seeds decode.vN.<seed>.<i>.
  struct SplitBatchCase {
    KvLayout layout;
    KvFormat format;
    int gqa;
    ref::PagedCase c;
  };
  std::vector<SplitBatchCase> split_batch_cases(const std::string& seed) {
    const int groups[][2] = {{8, 8}, {32, 8}, {16, 2}};  // GQA 1, 4, 8
    std::vector<KvFormat> fs = {KvFormat::kBF16};
    if (GetParam().fp8) fs.push_back(KvFormat::kFP8E4M3);
    if (GetParam().fp8 && GetParam().nvfp4) fs.push_back(KvFormat::kNVFP4);
    std::vector<SplitBatchCase> cases;
    int i = 0;
    for (KvLayout l : GetParam().layouts)
      for (KvFormat f : fs) {
        const auto& g = groups[i++ % 3];
        ref::PagedCaseSpec s = seeded_spec(
            ("decode." + tag() + "." + seed + "." + std::to_string(i)).c_str(), l, f,
            (i % 2) ? DType::kF16 : DType::kBF16);
        s.num_qo_heads = g[0];
        s.num_kv_heads = g[1];
        s.block_size = i % 3 == 0 ? 32 : 16;
        s.seq_lens = {1, 17, 1000, 4096, 0, 63, 2500};
        cases.push_back({l, f, g[0] / g[1], ref::make_paged_case(s)});
      }
    return cases;
  }
};

template <class Count, class Check>
void BulkCopyDecode::expect_reused_workspace(const std::string& seed, uint64_t rng_seed,
                                             Count&& count, Check&& check) {
  for (KvLayout l : GetParam().layouts) {
    ref::PagedCaseSpec s = seeded_spec(("decode." + tag() + "." + seed + "." + to_string(l)).c_str(),
                                       l, KvFormat::kBF16);
    s.num_qo_heads = 32;
    s.num_kv_heads = 8;
    s.seq_lens = {3001, 1, 0, 700, 33, 1024};
    ref::PagedCase c = ref::make_paged_case(s);
    DeviceCase d(c);
    const size_t words = c.spec.seq_lens.size() * c.spec.num_kv_heads;  // GQA 4: one query tile
    thrust::device_vector<uint16_t> out(c.o_elements());
    thrust::device_vector<uint8_t> ws(1, 0xFF);
    std::mt19937_64 rng(rng_seed);
    int call = 0;
    for (int splits : {2, 5, 47, 0, 2, 5})
      for (int fill = 0; fill < 4; ++fill, ++call) {
        gpu::DecodeTuning tu;
        tu.num_splits = splits;
        const std::string what = to_string(l) + " splits " + std::to_string(splits) + " fill " +
                                 std::to_string(fill) + " call " + std::to_string(call);
        const size_t bytes =
            gpu::decode_workspace_bytes(d.decode_args(c, raw(out), nullptr), id(), tu);
        if (ws.size() < bytes) ws.resize(bytes, 0xFF);
        std::vector<uint8_t> h(ws.size());
        thrust::copy(ws.begin(), ws.end(), h.begin());
        if (fill == 1) std::fill(h.begin(), h.end(), uint8_t{0xFF});
        if (fill == 2)
          for (auto& b : h) b = static_cast<uint8_t>(rng());
        if (fill == 3 && bytes >= words * 8) {
          for (size_t w = 0; w < words; ++w) {
            const uint64_t t = gpu::SplitArrival::tag(rng());
            const uint64_t v = gpu::SplitArrival::word(t, count(splits, rng));
            std::memcpy(h.data() + bytes - (words - w) * 8, &v, 8);
          }
        }
        thrust::copy(h.begin(), h.end(), ws.begin());
        GpuDecodeRun r;
        check(c, d, ws, tu, what, r);
        if (::testing::Test::HasFatalFailure()) return;
        if (r.workspace_bytes == 0) continue;  // the plan did not split
        thrust::copy(ws.begin(), ws.end(), h.begin());
        for (size_t w = 0; w < words; ++w) {
          uint64_t v = 0;
          std::memcpy(&v, h.data() + r.workspace_bytes - (words - w) * 8, 8);
          ASSERT_EQ(v, gpu::SplitArrival::kReset) << what << ": word " << w << " not reset";
        }
      }
  }
}

TEST_P(BulkCopyDecode, EveryGeometryOfItsScopeMatchesTheReference) {
  KVLAB_SKIP_WITHOUT_GPU();
  for (KvLayout l : GetParam().layouts)
    expect_geometries({KvFormat::kBF16, KvFormat::kFP16}, {64, 128, 256}, l);
}

// The peers' bits in HND; in the other layouts v5's (v5 runs every layout in the same tiles
// and mma sequence; v8 / v9 copy HND only).
TEST_P(BulkCopyDecode, ForcedSplitsAndPlanKnobsMatchTheReferenceAndPeersBitwise) {
  KVLAB_SKIP_WITHOUT_GPU();
  for (KvLayout l : GetParam().layouts) {
    ref::PagedCase c;
    expect_forced_splits(KvFormat::kBF16, "splits",
                         l == KvLayout::kHND ? GetParam().bitwise_peers : GetParam().other_peers,
                         &c, l);
    for (bool pdl : {true, false}) {
      gpu::DecodeTuning tu;
      tu.pdl = pdl;
      tu.fill_waves = 4;
      expect_matches(c, to_string(l) + (pdl ? " fill 4 pdl" : " fill 4 no-pdl"), tu);
    }
  }
}

// FP8 E4M3 with a pool scale: where the member copies it (head_dim >= 128: an FP8 row is one
// or more whole 128-byte swizzle lines), the reference on every such geometry and v5's bits
// at forced splits (v5 runs FP8 in the same 16-token tiles and mma sequence); elsewhere the
// declines below.
TEST_P(BulkCopyDecode, Fp8GeometriesOfItsScopeMatchTheReferenceAndV5Bitwise) {
  KVLAB_SKIP_WITHOUT_GPU();
  expect_narrow_format(KvFormat::kFP8E4M3, "fp8.splits", GetParam().other_peers);
}

// NVFP4 (E2M1 with E4M3 block scales, FP32 tensor scale): where the member copies it
// (head_dim >= 128: a 64- or 128-byte swizzled row, the tile's block scales by bulk copy),
// the reference on every such geometry -- the rows and block scales past a sequence's end
// hold NaN, which the V rows' zeroing must cover, scales included; at head_dim 128 the
// 32-token tiles' second halves past the end copy nothing at all -- and at forced splits the
// bits of the members with the same 32-token tiles (v11: v10's).
TEST_P(BulkCopyDecode, Nvfp4GeometriesOfItsScopeMatchTheReferenceAndPeersBitwise) {
  KVLAB_SKIP_WITHOUT_GPU();
  if (!GetParam().nvfp4) GTEST_SKIP() << tag() << " does not copy NVFP4 (declines: below)";
  expect_narrow_format(KvFormat::kNVFP4, "nvfp4.splits", GetParam().nvfp4_peers);
}

TEST_P(BulkCopyDecode, DeclinesEverythingOutsideItsScope) {
  KVLAB_SKIP_WITHOUT_GPU();
  struct Out {
    KvLayout l;
    KvFormat f;
    int bs;
    int d;
    const char* why;
  };
  const bool nhd = GetParam().layouts.size() > 1;  // HND and NHD
  std::vector<Out> outs = {{KvLayout::kSplitX, KvFormat::kFP16, 16, 128, "HND"},
                           {KvLayout::kHND, KvFormat::kMXFP4, 32, 128, "16-bit"},
                           {KvLayout::kHND, KvFormat::kFP8E5M2, 16, 128, "16-bit"},
                           {KvLayout::kHND, KvFormat::kBF16, 8, 128, "multiple of 16"},
                           {KvLayout::kHND, KvFormat::kBF16, 1, 128, "multiple of 16"}};
  if (nhd) {
    outs.push_back({KvLayout::kNHD, KvFormat::kBF16, 8, 128, "multiple of 16"});
    outs.push_back({KvLayout::kNHD, KvFormat::kFP16, 24, 64, "multiple of 16"});
    outs.push_back({KvLayout::kNHD, KvFormat::kFP8E4M3PerToken, 32, 128, "16-bit"});
  } else {
    outs.push_back({KvLayout::kNHD, KvFormat::kBF16, 16, 128, "HND"});
  }
  if (GetParam().fp8) {
    outs.push_back({KvLayout::kHND, KvFormat::kFP8E4M3, 16, 64, "head_dim >= 128"});
    outs.push_back({nhd ? KvLayout::kNHD : KvLayout::kHND, KvFormat::kFP8E4M3, 16, 64,
                    "head_dim >= 128"});
    if (GetParam().nvfp4) {
      outs.push_back({KvLayout::kHND, KvFormat::kNVFP4, 16, 64, "head_dim >= 128"});
      outs.push_back({nhd ? KvLayout::kNHD : KvLayout::kHND, KvFormat::kNVFP4, 32, 64,
                      "head_dim >= 128"});
      outs.push_back({KvLayout::kHND, KvFormat::kNVFP4, 8, 128, "multiple of 16"});
    } else {
      outs.push_back({KvLayout::kHND, KvFormat::kNVFP4, 16, 128, "16-bit"});
      outs.push_back({KvLayout::kNHD, KvFormat::kNVFP4, 32, 256, "16-bit"});
    }
  } else {
    outs.push_back({KvLayout::kHND, KvFormat::kFP8E4M3, 16, 128, "16-bit"});
    outs.push_back({KvLayout::kNHD, KvFormat::kFP8E4M3, 16, 128, "16-bit"});
    outs.push_back({KvLayout::kHND, KvFormat::kNVFP4, 32, 128, "16-bit"});
  }
  if (GetParam().max_16bit_head_dim < 256) {
    outs.push_back({KvLayout::kHND, KvFormat::kBF16, 16, 256, "head_dim <= 128"});
    outs.push_back({GetParam().layouts.back(), KvFormat::kFP16, 32, 256, "head_dim <= 128"});
  }
  for (const Out& o : outs) {
    ref::PagedCaseSpec s = seeded_spec(("decode." + tag() + ".out").c_str(), o.l, o.f);
    s.block_size = o.bs;
    s.head_dim = o.d;
    s.seq_lens = {40, 3};
    ref::PagedCase c = ref::make_paged_case(s);
    DeviceCase d(c);
    EXPECT_FALSE(gpu::decode_version_in_scope(id(), c.geom)) << c.describe();
    const std::string why =
        gpu::decode_unsupported_reason(d.decode_args(c, nullptr, nullptr), id());
    EXPECT_NE(why.find(o.why), std::string::npos) << c.describe() << ": " << why;
    EXPECT_NE(why.find(GetParam().name), std::string::npos) << why;
    thrust::device_vector<uint16_t> out(c.o_elements());
    EXPECT_THROW(
        gpu::decode_attention(d.decode_args(c, raw(out), nullptr), id(), nullptr, 0, nullptr),
        Unsupported)
        << c.describe();
  }
}

// KV-head counts that are not one group of 8 (v14 takes 8 KV heads per block: 12 and 16
// heads are two groups, the second one of 4 or 8; 3 leaves 5 of its warps idle), GQA 1-3 and
// 12 (two query tiles), at the plan and at forced splits 1 and 3, in every layout and, where
// copied, in FP8: the reference.
TEST_P(BulkCopyDecode, KvHeadCountsAcrossGroupsOfEightMatchTheReference) {
  KVLAB_SKIP_WITHOUT_GPU();
  const int heads[][2] = {{12, 12}, {32, 16}, {9, 3}, {36, 3}};  // (query heads, KV heads)
  std::vector<KvFormat> fs = {KvFormat::kBF16};
  if (GetParam().fp8) fs.push_back(KvFormat::kFP8E4M3);
  int i = 0;
  for (KvLayout l : GetParam().layouts)
    for (KvFormat f : fs)
      for (const auto& h : heads) {
        ++i;
        ref::PagedCaseSpec s = seeded_spec(
            ("decode." + tag() + ".heads." + std::to_string(i)).c_str(), l, f,
            (i % 2) ? DType::kF16 : DType::kBF16);
        s.num_qo_heads = h[0];
        s.num_kv_heads = h[1];
        s.block_size = i % 2 ? 16 : 32;
        s.seq_lens = {700, 1, 0, 33, 1500};
        ref::PagedCase c = ref::make_paged_case(s);
        for (int splits : {0, 1, 3}) {
          gpu::DecodeTuning tu;
          tu.num_splits = splits;
          expect_matches(c, to_string(l) + " " + to_string(f) + " " + std::to_string(h[0]) +
                                "/" + std::to_string(h[1]) + " heads splits " +
                                std::to_string(splits), tu);
        }
      }
}

TEST_P(BulkCopyDecode, BadTableEntryGivesNaNForThatSequenceOnly) {
  KVLAB_SKIP_WITHOUT_GPU();
  for (KvLayout l : GetParam().layouts) {
    SCOPED_TRACE(to_string(l));
    expect_bad_table_gives_nan(l);
  }
}

void BulkCopyDecode::expect_bad_table_gives_nan(KvLayout layout, const gpu::DecodeTuning& tu) {
  ref::PagedCaseSpec s = seeded_spec(
      ("decode." + tag() + ".bad_table." + to_string(layout)).c_str(), layout, KvFormat::kBF16);
  s.seq_lens = {40, 40, 300};
  ref::PagedCase c = ref::make_paged_case(s);
  DeviceCase d(c);
  std::vector<int32_t> table = c.block_table;
  table[1 * c.max_blocks_per_seq + 2] = static_cast<int32_t>(c.geom.num_blocks);  // the 3rd page
  d.block_table = to_device(table);
  const GpuDecodeRun r = run_gpu_decode(c, d, id(), nullptr, tu);
  ASSERT_TRUE(r.supported) << r.reason;
  EXPECT_EQ(r.guard_damage, "");
  const size_t per_seq = static_cast<size_t>(c.spec.num_qo_heads) * c.spec.head_dim;
  for (size_t i = 0; i < per_seq; ++i) ASSERT_FALSE(std::isnan(r.o[i])) << "seq 0 element " << i;
  for (size_t i = per_seq; i < 2 * per_seq; ++i)
    ASSERT_TRUE(std::isnan(r.o[i])) << "seq 1 element " << i;
  for (size_t i = 2 * per_seq; i < 3 * per_seq; ++i)
    ASSERT_FALSE(std::isnan(r.o[i])) << "seq 2 element " << i;
}

// The one-launch merges (v11's cluster, members with max_splits; v12's last block): forced
// splits 2, 3, 5, 8, 16 (and 47 for the last block: more than one merge batch per warp) over
// a batch whose short sequences leave most blocks of an item without tokens (length 1 and 17:
// only split 0 holds tokens; 0: none; 4096 = the bound: exactly 16 chunks of 256 at 16
// splits), GQA 1 / 4 / 8, HND and NHD, NaN in the unused slots: the reference, and v10's bits
// (v10 merges the same partials in its merge kernel, whose arithmetic both replay). 16 splits
// may exceed the device's cluster limit for a (head_dim, format); then the decline must say
// so. The last block's workspace holds v10's partials and the arrival words.
TEST_P(BulkCopyDecode, ClusterMergeAtForcedSplitsMatchesTheReferenceAndV10Bitwise) {
  KVLAB_SKIP_WITHOUT_GPU();
  if (GetParam().max_splits == 0 && !GetParam().last_block)
    GTEST_SKIP() << tag() << " merges splits in a second kernel";
  const int groups[][2] = {{8, 8}, {32, 8}, {16, 2}};  // GQA 1, 4, 8
  int i = 0;
  for (KvLayout l : GetParam().layouts)
    for (const auto& g : groups) {
      ++i;
      ref::PagedCaseSpec s = seeded_spec(
          ("decode." + tag() + ".cluster." + to_string(l) + "." + std::to_string(i)).c_str(), l,
          KvFormat::kBF16, (i % 2) ? DType::kF16 : DType::kBF16);
      s.num_qo_heads = g[0];
      s.num_kv_heads = g[1];
      s.block_size = i % 3 == 0 ? 32 : 16;
      s.seq_lens = {1, 17, 1000, 4096, 0, 63, 2500};
      ref::PagedCase c = ref::make_paged_case(s);
      ASSERT_TRUE(c.spec.poison_unused);
      DeviceCase d(c);
      thrust::device_vector<uint16_t> out(c.o_elements());
      for (int splits : {2, 3, 5, 8, 16, 47}) {
        if (splits == 47 && !GetParam().last_block) continue;  // above any cluster
        gpu::DecodeTuning tu;
        tu.num_splits = splits;
        const std::string what = to_string(l) + " GQA " + std::to_string(g[0] / g[1]) +
                                 " splits " + std::to_string(splits);
        const std::string why =
            gpu::decode_unsupported_reason(d.decode_args(c, nullptr, nullptr), id(), tu);
        if (!why.empty()) {
          EXPECT_FALSE(GetParam().last_block) << what << ": " << why;
          EXPECT_GT(splits, 8) << what << ": clusters of up to 8 blocks are portable: " << why;
          EXPECT_NE(why.find("thread-block cluster"), std::string::npos) << what << ": " << why;
          continue;
        }
        const size_t ws = gpu::decode_workspace_bytes(d.decode_args(c, raw(out), nullptr), id(), tu);
        if (GetParam().last_block)
          EXPECT_EQ(ws, (gpu::decode_workspace_bytes(d.decode_args(c, raw(out), nullptr), 10,
                                                     tu) + 7) / 8 * 8 +
                            c.spec.seq_lens.size() * c.spec.num_kv_heads *
                                ((g[0] / g[1] + 7) / 8) * sizeof(uint64_t))
              << what << ": v10's partials, then one arrival word per item";
        else
          EXPECT_EQ(ws, 0u) << what;
        expect_matches(c, what, tu);
        expect_same_bits(run_gpu_decode(c, d, id(), nullptr, tu),
                         run_gpu_decode(c, d, 10, nullptr, tu), what + ": " + tag() + " and v10");
      }
    }
}

// A bad table entry at forced splits: only the blocks of the item that read it see it, and
// the cluster turns the item's rows into NaN through the merged partial; the other sequences
// (whose clusters read good pages) stay finite. Forced splits far above the cluster limit
// are declined with the reason, and the plan's own choice never exceeds the limit.
TEST_P(BulkCopyDecode, ClusterMergeBadTableAndSplitLimit) {
  KVLAB_SKIP_WITHOUT_GPU();
  if (GetParam().max_splits == 0) GTEST_SKIP() << tag() << " merges splits in a second kernel";
  for (KvLayout l : GetParam().layouts)
    for (int splits : {2, 5}) {
      SCOPED_TRACE(to_string(l) + " splits " + std::to_string(splits));
      gpu::DecodeTuning tu;
      tu.num_splits = splits;
      expect_bad_table_gives_nan(l, tu);
    }
  ref::PagedCaseSpec s = seeded_spec(("decode." + tag() + ".limit").c_str(), KvLayout::kNHD,
                                     KvFormat::kBF16);
  s.seq_lens = {20000};
  ref::PagedCase c = ref::make_paged_case(s);
  DeviceCase d(c);
  gpu::DecodeTuning tu;
  tu.num_splits = GetParam().max_splits + 1;
  const std::string why =
      gpu::decode_unsupported_reason(d.decode_args(c, nullptr, nullptr), id(), tu);
  EXPECT_NE(why.find("thread-block cluster"), std::string::npos) << why;
  EXPECT_NE(why.find(GetParam().name), std::string::npos) << why;
  thrust::device_vector<uint16_t> out(c.o_elements());
  EXPECT_THROW(gpu::decode_attention(d.decode_args(c, raw(out), nullptr), id(), tu, nullptr, 0,
                                     nullptr),
               Unsupported);
  // One sequence of 20000 tokens on one KV-head group: the plan alone would split it far
  // more than 16 ways to fill the SMs; v11 clamps to its cluster limit, needs no workspace
  // and matches the reference.
  EXPECT_EQ(gpu::decode_workspace_bytes(d.decode_args(c, raw(out), nullptr), id()), 0u);
  expect_matches(c, "plan clamped to the cluster limit");
}

// The last-block merge's workspace across calls: one buffer reused by calls at forced splits 2,
// 5 and 47 (the arrival words at other offsets each time) and its own plan, with what it holds
// in between changed: 0xFF, nothing (the words the last call reset), random bytes, and arrival
// words of another launch's tag that count almost every split (a killed launch's, or a stale
// tag's). Each call gives v10's bits, and leaves every arrival word reset (0).
TEST_P(BulkCopyDecode, LastBlockMergeWorkspaceContentsOnEntryDoNotMatter) {
  KVLAB_SKIP_WITHOUT_GPU();
  if (!GetParam().last_block) GTEST_SKIP() << tag() << " keeps no arrival count";
  expect_reused_workspace(
      "reuse", 20261127,
      [](int splits, std::mt19937_64&) {  // one arrival short of the splits
        return static_cast<uint32_t>(std::max(splits, 2) - 1);
      },
      [&](ref::PagedCase& c, DeviceCase& d, thrust::device_vector<uint8_t>& ws,
          const gpu::DecodeTuning& tu, const std::string& what, GpuDecodeRun& r) {
        r = run_gpu_decode(c, d, id(), nullptr, tu, &ws);
        EXPECT_EQ(r.guard_damage, "") << what;
        expect_same_bits(r, run_gpu_decode(c, d, 10, nullptr, tu), what + ": " + tag() + " and v10");
      });
}

// The stream-K grid (v15): ranges of the items' tiles that start and end inside items, over
// grids from one unit per block to whole items per block (min_tiles_per_block 1, 3, 7, 64,
// 1000; forced 1 and 2 blocks per SM), a batch whose short sequences leave most parts of their
// items without tokens (lengths 1, 17, 63, 0 and the bound 4096), GQA 1 / 4 / 8, every layout,
// bf16 and (where copied) fp8_e4m3 and nvfp4: the reference. Then an invalid length (past the
// bound) on a split item and on an item held whole: NaN rows for that sequence (the merge kernel
// writes the first, the decode block the second), the other sequences' rows bitwise those of the
// valid batch (the same partition: the units come from the bound).
TEST_P(BulkCopyDecode, StreamKRangesAcrossItemsMatchTheReference) {
  KVLAB_SKIP_WITHOUT_GPU();
  if (!GetParam().stream_k) GTEST_SKIP() << tag() << " launches a block per (item, split)";
  for (SplitBatchCase& k : split_batch_cases("streamk")) {
    ref::PagedCase& c = k.c;
    ASSERT_TRUE(c.spec.poison_unused);
    const std::string lf = to_string(k.layout) + " " + to_string(k.format);
    for (int tiles : {1, 3, 7, 64, 1000}) {
      gpu::DecodeTuning tu;
      tu.min_tiles_per_block = tiles;
      expect_matches(c, lf + " GQA " + std::to_string(k.gqa) + " min tiles " + std::to_string(tiles),
                     tu);
    }
    for (int per_sm : {1, 2}) {
      gpu::DecodeTuning tu;
      tu.num_splits = per_sm;
      expect_matches(c, lf + " blocks per SM " + std::to_string(per_sm), tu);
    }
  }
  // An invalid length, past the bound, in sequence 3 or 1. At 1000 tiles per block (15 blocks
  // over 7 x 8 items of 256 units) each of them has items held whole by a block (the decode
  // kernel writes their NaN rows) and items split between two (the merge kernel does).
  ref::PagedCaseSpec s = seeded_spec(("decode." + tag() + ".streamk.badlen").c_str(),
                                     GetParam().layouts.back(), KvFormat::kBF16);
  s.num_qo_heads = 32;
  s.num_kv_heads = 8;
  s.seq_lens = {1, 17, 1000, 4096, 0, 63, 2500};
  ref::PagedCase c = ref::make_paged_case(s);
  DeviceCase d(c);
  gpu::DecodeTuning tu;
  tu.min_tiles_per_block = 1000;
  const GpuDecodeRun good = run_gpu_decode(c, d, id(), nullptr, tu);
  ASSERT_TRUE(good.supported) << good.reason;
  const size_t per_seq = static_cast<size_t>(s.num_qo_heads) * c.spec.head_dim;
  for (int bad_seq : {3, 1}) {
    SCOPED_TRACE("invalid length in sequence " + std::to_string(bad_seq));
    std::vector<int32_t> lens = c.seq_lens;
    lens[bad_seq] = c.max_seq_len + 1;
    d.seq_lens = to_device(lens);
    const GpuDecodeRun r = run_gpu_decode(c, d, id(), nullptr, tu);
    ASSERT_TRUE(r.supported) << r.reason;
    EXPECT_EQ(r.guard_damage, "");
    for (size_t q = 0; q < c.seq_lens.size(); ++q)
      for (size_t e = q * per_seq; e < (q + 1) * per_seq; ++e) {
        if (static_cast<int>(q) == bad_seq) {
          ASSERT_TRUE(std::isnan(r.o[e])) << "element " << e;
        } else {
          ASSERT_EQ(0, std::memcmp(&r.o[e], &good.o[e], sizeof(float)))
              << "sequence " << q << " element " << e;
        }
      }
    for (int h = 0; h < s.num_qo_heads; ++h)
      EXPECT_TRUE(std::isnan(r.lse[static_cast<size_t>(bad_seq) * s.num_qo_heads + h])) << h;
  }
}

// The shared tiles (v16): forced splits 2, 3, 5, 8, 16 and 47 over a batch whose short sequences
// leave most splits without a static tile (lengths 1, 17, 63: only the first splits hold
// tokens; 0: none) and whose long ones leave many tiles to claim (1000, 2500, 4096 = the bound),
// GQA 1 / 4 / 8, every layout, bf16 and (where copied) fp8_e4m3 and nvfp4, each case called
// three times (the claims race differently each time): the reference every time. At one split
// every tile is static in v10's order: v10's bits. The workspace is v10's partials, then one
// claim word per item.
TEST_P(BulkCopyDecode, SharedTilesAtForcedSplitsMatchTheReference) {
  KVLAB_SKIP_WITHOUT_GPU();
  if (!GetParam().shared_tiles) GTEST_SKIP() << tag() << " gives each split its own chunk";
  for (SplitBatchCase& k : split_batch_cases("shared")) {
    ref::PagedCase& c = k.c;
    ASSERT_TRUE(c.spec.poison_unused);
    DeviceCase d(c);
    thrust::device_vector<uint16_t> out(c.o_elements());
    for (int splits : {1, 2, 3, 5, 8, 16, 47}) {
      gpu::DecodeTuning tu;
      tu.num_splits = splits;
      const std::string what = to_string(k.layout) + " " + to_string(k.format) + " GQA " +
                               std::to_string(k.gqa) + " splits " + std::to_string(splits);
      const size_t ws = gpu::decode_workspace_bytes(d.decode_args(c, raw(out), nullptr), id(), tu);
      const size_t ws10 = gpu::decode_workspace_bytes(d.decode_args(c, raw(out), nullptr), 10, tu);
      if (splits == 1)
        EXPECT_EQ(ws, 0u) << what;
      else
        EXPECT_EQ(ws, (ws10 + 7) / 8 * 8 + c.spec.seq_lens.size() * c.spec.num_kv_heads *
                                               ((k.gqa + 7) / 8) * sizeof(uint64_t))
            << what << ": v10's partials, then one claim word per item";
      for (int call = 0; call < 3; ++call) expect_matches(c, what + " call " + std::to_string(call), tu);
      if (splits != 1) continue;
      expect_same_bits(run_gpu_decode(c, d, id(), nullptr, tu),
                       run_gpu_decode(c, d, 10, nullptr, tu),
                       what + ": " + tag() + " and v10 at one split");
    }
  }
}

// The claim words across calls: one workspace reused at forced splits 2, 5, 47 and the plan, with
// what it holds in between changed (0xFF, nothing: the words the last merge reset, random bytes,
// words of another launch's tag with any count): the reference each time, every word reset (0)
// after each call. Then a bad length and a bad table entry on split items: NaN rows for that
// sequence only.
TEST_P(BulkCopyDecode, SharedTilesWorkspaceContentsOnEntryDoNotMatter) {
  KVLAB_SKIP_WITHOUT_GPU();
  if (!GetParam().shared_tiles) GTEST_SKIP() << tag() << " keeps no claim words";
  expect_reused_workspace(
      "claims", 20261128,
      [](int, std::mt19937_64& rng) {  // counts past most items' tiles
        return static_cast<uint32_t>(rng() % 300);
      },
      [&](ref::PagedCase& c, DeviceCase& d, thrust::device_vector<uint8_t>& ws,
          const gpu::DecodeTuning& tu, const std::string& what, GpuDecodeRun& r) {
        r = run_gpu_decode(c, d, id(), nullptr, tu, &ws);
        ASSERT_TRUE(r.supported) << what << r.reason;
        expect_run_matches(r, ref::reference_decode(c), c, tag() + " " + what);
      });
  for (KvLayout l : GetParam().layouts) {
    ref::PagedCaseSpec s = seeded_spec(("decode." + tag() + ".claims." + to_string(l)).c_str(), l,
                                       KvFormat::kBF16);
    s.num_qo_heads = 32;
    s.num_kv_heads = 8;
    s.seq_lens = {3001, 1, 0, 700, 33, 1024};
    ref::PagedCase c = ref::make_paged_case(s);
    DeviceCase d(c);
    for (int splits : {2, 5}) {
      SCOPED_TRACE(to_string(l) + " splits " + std::to_string(splits));
      gpu::DecodeTuning tu;
      tu.num_splits = splits;
      expect_bad_table_gives_nan(l, tu);
      std::vector<int32_t> lens = c.seq_lens;
      lens[0] = c.max_seq_len + 1;  // past the bound: sequence 0's rows are NaN
      d.seq_lens = to_device(lens);
      const GpuDecodeRun r = run_gpu_decode(c, d, id(), nullptr, tu);
      d.seq_lens = to_device(c.seq_lens);
      ASSERT_TRUE(r.supported) << r.reason;
      EXPECT_EQ(r.guard_damage, "");
      const size_t per_seq = static_cast<size_t>(s.num_qo_heads) * c.spec.head_dim;
      for (size_t e = 0; e < per_seq; ++e) ASSERT_TRUE(std::isnan(r.o[e])) << "element " << e;
      for (size_t e = per_seq; e < r.o.size(); ++e) ASSERT_FALSE(std::isnan(r.o[e])) << "element " << e;
    }
  }
}

std::string member_name(const ::testing::TestParamInfo<BulkMember>& info) {
  return "v" + std::to_string(info.param.id);
}

INSTANTIATE_TEST_SUITE_P(DecodeV8, BulkCopyDecode,
                         ::testing::Values(BulkMember{8, "v8_mma_decode_bulk_page", {5}, false,
                                                      {KvLayout::kHND}}),
                         member_name);
INSTANTIATE_TEST_SUITE_P(DecodeV9, BulkCopyDecode,
                         ::testing::Values(BulkMember{9, "v9_mma_decode_bulk_rows", {5, 8}, false,
                                                      {KvLayout::kHND}}),
                         member_name);
INSTANTIATE_TEST_SUITE_P(DecodeV10, BulkCopyDecode,
                         ::testing::Values(BulkMember{10, "v10_mma_decode_tma_swizzle", {5, 8},
                                                      true, {KvLayout::kHND, KvLayout::kNHD}}),
                         member_name);
INSTANTIATE_TEST_SUITE_P(DecodeV11, BulkCopyDecode,
                         ::testing::Values(BulkMember{11,
                                                      "v11_mma_decode_cluster_merge",
                                                      {5, 8, 10},
                                                      true,
                                                      {KvLayout::kHND, KvLayout::kNHD},
                                                      {5, 10},
                                                      16,
                                                      {10}}),
                         member_name);
INSTANTIATE_TEST_SUITE_P(DecodeV12, BulkCopyDecode,
                         ::testing::Values(BulkMember{12,
                                                      "v12_mma_decode_last_block_merge",
                                                      {5, 8, 10},
                                                      true,
                                                      {KvLayout::kHND, KvLayout::kNHD},
                                                      {5, 10},
                                                      0,
                                                      {10},
                                                      true}),
                         member_name);
INSTANTIATE_TEST_SUITE_P(DecodeV13, BulkCopyDecode,
                         ::testing::Values(BulkMember{13,
                                                      "v13_mma_decode_eight_warps",
                                                      {},
                                                      true,
                                                      {KvLayout::kHND, KvLayout::kNHD},
                                                      {},
                                                      0,
                                                      {},
                                                      false,
                                                      128}),
                         member_name);
INSTANTIATE_TEST_SUITE_P(DecodeV14, BulkCopyDecode,
                         ::testing::Values(BulkMember{14,
                                                      "v14_mma_decode_page_heads",
                                                      {},
                                                      true,
                                                      {KvLayout::kHND, KvLayout::kNHD},
                                                      {},
                                                      0,
                                                      {},
                                                      false,
                                                      128,
                                                      false}),
                         member_name);

INSTANTIATE_TEST_SUITE_P(DecodeV15, BulkCopyDecode,
                         ::testing::Values(BulkMember{15,
                                                      "v15_mma_decode_stream_k",
                                                      {},
                                                      true,
                                                      {KvLayout::kHND, KvLayout::kNHD},
                                                      {},
                                                      0,
                                                      {},
                                                      false,
                                                      256,
                                                      false,
                                                      true}),
                         member_name);

INSTANTIATE_TEST_SUITE_P(DecodeV16, BulkCopyDecode,
                         ::testing::Values(BulkMember{16,
                                                      "v16_mma_decode_shared_tiles",
                                                      {},
                                                      true,
                                                      {KvLayout::kHND, KvLayout::kNHD},
                                                      {},
                                                      0,
                                                      {},
                                                      false,
                                                      256,
                                                      true,
                                                      false,
                                                      true}),
                         member_name);

}  // namespace
}  // namespace kvlab::test
