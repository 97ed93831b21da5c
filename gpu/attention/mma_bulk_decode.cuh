// mma_bulk_decode.cuh: the bulk-copy family of v4's tensor-core decode (v8, v9, v10): one
// block body, one kernel entry and one host side, templated on a copy policy: how a
// 16-token tile's K and V rows land in a pipeline stage (one bulk copy per page run, one per
// row, one TMA tensor copy per tile) and which row geometry the operand loaders read them
// through (mma_operands.cuh). Each version's file holds its policy, the header saying what
// changed and why, and its registry entry.
//
// The design point every member shares (v4's, gpu/attention/TUNING.md steps 13-15):
//  * 128 threads = 4 warps (a policy's kWarps: 8, v13); warp w owns the 16-token tiles w,
//    w + W, ... of the block's token range (W warps) and runs its own 3-stage pipeline, each
//    stage [K rows | V rows] of one tile, completion counted on the stage's mbarrier (no
//    block barrier in the main loop). Q, the warps' merge and the stores take the block's
//    first 128 threads whatever W is (thread = (head, 16th of the head's dims)).
//  * Scope: BF16 and FP16 pools (and FP8 E4M3 with a pool scale at head_dim >= 128 where the
//    policy says kFP8, NVFP4 at head_dim >= 128 where it says kNVFP4), HND layout (and NHD
//    where the policy says kNHD), block_size a multiple of 16: the tile's 16 slots of one (page, KV head) lie in one page (HND: one
//    contiguous run, 16 x head_dim x element bytes; NHD: 16 rows num_kv_heads x head_dim
//    elements apart).
//  * The tile's page is one block-table load by lane 0, one tile ahead. A table entry outside
//    the pool copies nothing and turns the block's rows into NaN.
//  * Rows past the sequence's end: K is masked to -inf by the tile compute (a select, never
//    arithmetic on what the stage holds there), V rows (and NVFP4's V block scales) are
//    zeroed after the copy lands (P is 0 there, but 0 x NaN would not be).
//  * Numerics and the split plan (decode_plan.h): v4's; for the same split the outputs are
//    bitwise v4's / v5's (the same mma sequence over the same values).
//  * The split merge is a second policy, Merge:
//      PdlSplitMerge      (v8, v9, v10) each split's partial (o, lse) to the workspace, v4's
//                         merge kernel launched after it (programmatic dependent launch when
//                         tuning.pdl); grid split slowest.
//      ClusterSplitMerge  (v11) the splits of an item are one thread-block cluster (split
//                         fastest, cluster dims num_splits x 1 x 1); each block keeps its
//                         partial in its shared memory and the cluster merges them through
//                         distributed shared memory (cluster_split_merge.cuh): one launch, no
//                         workspace. The plan's splits are clamped to the largest cluster
//                         that can be resident (a forced split above it is declined).
//      LastBlockSplitMerge (v12) each split's partial to the workspace as PdlSplitMerge's,
//                         then an arrival on the item's word; the item's last block merges
//                         (last_block_split_merge.cuh): one launch, grid split slowest, the
//                         workspace PdlSplitMerge's plus 8 bytes per item.
//
// A copy policy Copy provides (every member static):
//   kName, kCopies        registry name; what one copy moves (for the unsupported reasons)
//   Rows<F, D>            the stage's row geometry of a (format, head_dim) (mma::PaddedRows<N>,
//                         mma::SwizzleRows<span>)
//   kSmemAlign            alignment the stage buffers need (16, or 1024 for the swizzle)
//   kWarpIssues           true: the whole warp calls issue(); false: one elected lane
//   kFP8                  true: FP8 E4M3 pools (pool scale) at head_dim >= 128 too
//   kNVFP4                true: NVFP4 pools at head_dim >= 128 too (the tile's block scales
//                         land in the stage's scale runs, BulkTile::sks / svs)
//   kNHD                  true: NHD pools too (the copy gathers the tile's strided rows)
//   Maps                  extra kernel parameter (__grid_constant__), e.g. tensor maps
//   tx_bytes<D, F>(rows)  bytes the copies of a 16-row half with `rows` rows below the
//                         sequence's end complete on the stage's barrier
//   issue<D, F>(t, maps)  copies the half t (BulkTile below) into its stage, completing on
//                         t.bar (the block body has fenced the async proxy and announced the
//                         bytes; with kWarpIssues every lane issues after a __syncwarp, else
//                         the elected lane, for every half: a half with t.copy false passes it
//                         as the copies' predicate and copies nothing)
//   maps_reason(a), maps(a)   host: "" or why Maps cannot be built; the Maps of a launch
//   kWarps                (optional) warps per block, 4 when absent; with 8, 16-bit rows are
//                         copied at head_dim <= 128 only (8 warps x 3 stages of 16 rows of
//                         d256 would need 393 KB of shared memory)
#pragma once

#include <string>

#include "gpu/attention/cluster_split_merge.cuh"
#include "gpu/attention/last_block_split_merge.cuh"
#include "gpu/attention/v4_mma_decode.cuh"
#include "reference/layout/layout_names.h"

namespace kvlab::gpu::detail {
namespace {

constexpr int kBulkTile = 16;    // tokens per copy: the mma M, one page run at block 16
constexpr int kBulkStages = 3;   // v4's pipeline depth: the same bytes in flight per SM

// Tokens of a warp tile and the pipeline depth of a (format, head_dim). A tile is copied in
// 16-row halves (one page run each, every half completing on the stage's one barrier) and
// gets one wait and one online-softmax update. NVFP4 at head_dim 128 takes 32-token tiles:
// its loop is issue-bound, so the per-tile wait, max, shuffles and accumulator rescale, paid
// once per two passes, are measurable (TUNING.md step 24); two stages of 32 keep v4's tokens
// in flight (one tile ahead of 32 against two of 16). The rest take 16-token tiles in
// kBulkStages.
template <KvFormat F, int D>
KVLAB_HD constexpr int bulk_tile() {
  return F == KvFormat::kNVFP4 && D <= 128 ? 2 * kBulkTile : kBulkTile;
}
template <KvFormat F, int D>
KVLAB_HD constexpr int bulk_stages() {
  return bulk_tile<F, D>() > kBulkTile ? 2 : kBulkStages;
}

// What the shared start-up loads (v4_startup_loads) read of a design point: the tile size
// (their lane i fetches the page of the warp's first tile's token i).
template <int D, KvFormat F>
struct BulkConfig {
  static constexpr int kTileBytes = bulk_tile<F, D>() * 2 * (D * kv_elem_bits(kv_elem_of(F)) / 8);
};
static_assert(v4_warp_tile<BulkConfig<128, KvFormat::kBF16>, 128, KvFormat::kBF16>() == kBulkTile &&
                  v4_warp_tile<BulkConfig<128, KvFormat::kNVFP4>, 128, KvFormat::kNVFP4>() ==
                      2 * kBulkTile,
              "the start-up loads fetch the pages of the bulk tiles");

// Warps per block of a copy policy: Copy::kWarps where it has one, else v4's 4.
template <class Copy, class = void>
struct BulkWarps {
  static constexpr int value = kV4Warps;
};
template <class Copy>
struct BulkWarps<Copy, std::void_t<decltype(Copy::kWarps)>> {
  static constexpr int value = Copy::kWarps;
};
template <class Copy>
KVLAB_HD constexpr int bulk_warps() {
  static_assert(BulkWarps<Copy>::value == kV4Warps || BulkWarps<Copy>::value == 2 * kV4Warps,
                "the block body is written for 4 or 8 warps");
  return BulkWarps<Copy>::value;
}
// The 16-bit head_dims a policy's blocks fit: all with 4 warps, <= 128 with more.
template <class Copy>
constexpr bool bulk_16bit_head_dim(int d) {
  return bulk_warps<Copy>() == kV4Warps || d <= 128;
}

// Kernel parameter of the policies that need none.
struct NoMaps {};

// The operand loader of a (policy, format): v4's loaders over the policy's row geometry.
template <class Copy, KvFormat F, int D>
using BulkOperand = std::conditional_t<
    F == KvFormat::kFP8E4M3 || F == KvFormat::kNVFP4,
    mma::MmaOperand<F, D, typename Copy::template Rows<F, D>>,
    mma::Operand16<F, D, F == KvFormat::kFP16, typename Copy::template Rows<F, D>>>;

// Resident blocks the kernel is compiled for: 4 for FP8 at head_dim <= 128 (v5's measured
// FP8 design point: f16 operands both ways, <= 128 registers), kBulkNvfp4Blocks for NVFP4 at
// head_dim <= 128 (its decode is issue-bound: more warps per scheduler), else 1 (no register
// cap: the 16-bit instances are held to 2 blocks per SM by their shared memory). A block of
// 8 warps counts as two: the same 128-register cap per thread.
constexpr int kBulkNvfp4Blocks = 4;
template <int D, KvFormat F, int kWarps = kV4Warps>
constexpr int bulk_min_blocks() {
  if (D > 128) return 1;
  const int four_warp = F == KvFormat::kFP8E4M3 ? 4 : (F == KvFormat::kNVFP4 ? kBulkNvfp4Blocks : 1);
  return four_warp * kV4Warps / kWarps > 1 ? four_warp * kV4Warps / kWarps : 1;
}

// One tile copy, as the block body hands it to the policy. Lane 0's page (every lane holds it)
// is checked to lie inside the pool: copy is false (and page 0) when it does not, or when the
// half lies past the sequence's end.
struct BulkTile {
  const mma::PoolView* pools;
  int64_t page;     // the (page, KV head) run holds slots [slot, slot + 16)
  int kv_head;
  int slot;         // first slot of the tile in its page (a multiple of 16)
  int rows;         // rows below the sequence's end (1..16; copy false: anything)
  bool copy;        // false: the half copies nothing (the policy's copies are predicated off)
  uint8_t* sk;      // the stage's K rows
  uint8_t* sv;      // the stage's V rows
  uint8_t* sks;     // the stage's K block scales (NVFP4: 16 rows x D/16 codes), else unused
  uint8_t* svs;     // the stage's V block scales
  uint64_t* bar;    // the stage's mbarrier (one arrival per tile, with the bytes)
  uint64_t l2_policy;
  int lane;
};

// Shared memory of a block:
//   [warp 0: bulk_stages() stages of [K rows | V rows | K scales | V scales], bulk_tile() rows
//   each, a stage rounded up to Copy::kSmemAlign] ... [warp W-1]  (after the loop: the
//   warp merge's area, then the cluster merge's partial at partial_off)
//   [Q^T fragments hi | lo | column scales] [mbarriers: W warps x bulk_stages()]
// plus Copy::kSmemAlign - 16 bytes of slack when the stages need more than the 16-byte
// alignment of the dynamic shared memory (the kernel rounds its base up). The partial (8 x
// (D + 1) floats) sits beside the warp merge's area; qbase is the larger of the pipeline
// area and both (16-bit and FP8 pipelines, >= 384 x D bytes, always hold them: v11's shared
// memory is v10's there; NVFP4's, 288 x D, may not, and the max grows the block for it).
struct BulkSmem {
  int row_bytes, row_stride, scale_off, stage_bytes, warp_bytes, partial_off, qbase, qfrag_bytes,
      bar_off, total;
};
template <class Copy, int D, KvFormat F>
KVLAB_HD constexpr BulkSmem bulk_smem() {
  BulkSmem s{};
  s.row_bytes = BulkOperand<Copy, F, D>::kRowBytes;
  s.row_stride = BulkOperand<Copy, F, D>::kRowStride;
  constexpr int kWT = bulk_tile<F, D>();
  s.scale_off = 2 * kWT * s.row_stride;  // K scales here, V scales one run further
  const int scales = 2 * kWT * BulkOperand<Copy, F, D>::kScaleBytes;
  s.stage_bytes = (s.scale_off + scales + Copy::kSmemAlign - 1) / Copy::kSmemAlign * Copy::kSmemAlign;
  s.warp_bytes = bulk_stages<F, D>() * s.stage_bytes;
  constexpr int kW = bulk_warps<Copy>();
  const int pipe = kW * s.warp_bytes;
  const int merge = mma::WarpMerge<F, D, kW>::kBytes;
  s.partial_off = (merge + 15) / 16 * 16;  // beside the warp merge's area: no barrier between
  const int after = s.partial_off + ClusterPartial<D>::kBytes;
  s.qbase = pipe > after ? pipe : after;
  s.qfrag_bytes = 2 * (D / 16) * kWarpSize * 8 + mma::kHeadsPerTile * 4;
  s.bar_off = (s.qbase + s.qfrag_bytes + 7) / 8 * 8;
  s.total = s.bar_off + kW * bulk_stages<F, D>() * 8 +
            (Copy::kSmemAlign > 16 ? Copy::kSmemAlign - 16 : 0);
  return s;
}

// Token -> (page index, slot) of a runtime block_size: a shift and a mask when the block size
// is a power of two (16, 32, 64, 128: every size serving systems use), a division otherwise.
// Lane 0 splits a token once per tile; the warp waits while it does (a divergent path), and
// a 32-bit division is ~20 instructions, which the dequantising formats' issue-bound loops
// feel.
struct PageSplit {
  int bs, shift;  // shift >= 0: bs == 1 << shift
  __device__ explicit PageSplit(int block_size) : bs(block_size), shift(-1) {
    if ((block_size & (block_size - 1)) == 0) shift = __ffs(block_size) - 1;
  }
  __device__ int page(int tok) const { return shift >= 0 ? tok >> shift : tok / bs; }
  __device__ int slot(int tok) const { return shift >= 0 ? tok & (bs - 1) : tok % bs; }
};

// The tiles warp `warp` of a block of kW warps takes in bulk_block's run over [start, end).
template <int kWT, int kW>
__device__ __forceinline__ int bulk_warp_tiles(int start, int end, int warp) {
  const int num_tiles = (end - start + kWT - 1) / kWT;
  return num_tiles > warp ? (num_tiles - warp + kW - 1) / kW : 0;
}

// The block body of one (sequence, KV head, query tile, split) over tokens [start, end);
// a multi-split partial goes to smem_partial when given (the cluster merge), else to the
// workspace; `dest` says whether the result is whole and where a partial goes (V4SplitDest:
// the KV split's; v15's stream-K segments pass their own). Warp w takes tiles w, w + W, ... of
// the range (bulk_warp_tiles counts them).
// A block that runs the body more than once (v15's segments) initialises its stage barriers in
// the first run only (`init_barriers`) and passes, in each later one, `warp_tiles_before`: the
// tiles this warp took in the earlier runs, so that its stages and barrier phases continue where
// they stopped (tile i of this run is the warp's tile warp_tiles_before + i; an mbarrier is
// never initialised twice); bulk_segment_boundary comes between two runs.
// kShared (v16, SharedTilesMerge): the item's num_splits blocks share its tiles [0, end): split s
// is called with start = s x kW x kWT, its warp w takes the tiles s x kW + w + num_splits x kW x k
// of the item for k <= kStages (its static tiles: the pipeline's first ones and the first one to
// need a claim later), then claims the item's further tiles one at a time from the item's word
// (split_arrival.h's shared_tile_claim_*), each claim issued one tile before its table entry is
// fetched; at one split every tile is static (v10's order).
template <class Copy, int D, KvFormat F, class Dest = V4SplitDest, bool kShared = false>
__device__ __forceinline__ void bulk_block(const V4Params& p, const typename Copy::Maps& maps,
                                          uint8_t* smem, const V4Item& it, int start, int end,
                                          const V4Startup<BulkConfig<D, F>, D, F>& su,
                                          float* smem_partial, const Dest& dest,
                                          int warp_tiles_before = 0, bool init_barriers = true) {
  using Op = BulkOperand<Copy, F, D>;
  constexpr BulkSmem kS = bulk_smem<Copy, D, F>();
  constexpr int kWT = bulk_tile<F, D>();
  constexpr int kStages = bulk_stages<F, D>();
  constexpr int kHalves = kWT / kBulkTile;  // 16-row copies per tile, on one barrier arrival
  constexpr int kW = bulk_warps<Copy>();
  static_assert(V4Startup<BulkConfig<D, F>, D, F>::kWT == kWT, "the start-up pages are the tile's");
  static_assert(!Copy::kWarpIssues || kHalves == 1, "warp-issued copies take 16-token tiles");
  static_assert(Op::kRowStride == kS.row_stride, "the loaders read the rows where the copies put them");
  static_assert(kS.stage_bytes % Copy::kSmemAlign == 0 &&
                    (kWT * kS.row_stride) % Copy::kSmemAlign == 0,
                "every stage's K and V rows keep the buffers' alignment");

  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int t = lane & 3;
  const PageGeometry& geom = p.pools.geom;
  const PageSplit ps(geom.block_size);  // tokens are >= 0
  const int32_t* table = p.block_table + static_cast<int64_t>(it.seq) * p.max_blocks_per_seq;

  uint8_t* wbase = smem + warp * kS.warp_bytes;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + kS.bar_off) + warp * kStages;
  uint2* qf_hi = reinterpret_cast<uint2*>(smem + kS.qbase);  // [D/16][32] B fragments of Q^T
  uint2* qf_lo = qf_hi + (D / 16) * kWarpSize;
  float* colscale = reinterpret_cast<float*>(qf_lo + (D / 16) * kWarpSize);  // [8]

  // ---- this warp's tiles: every kW-th kWT-token tile of [start, end) (kShared: the static
  // ones every num_splits x kW-th)
  const int my_tiles = bulk_warp_tiles<kWT, kW>(start, end, warp);
  auto first_token = [&](int i) { return start + (warp + kW * i) * kWT; };
  bool bad = false;  // lane 0: a table entry outside the pool (the output becomes NaN)
  // Lane 0: the pages of the next tile's halves (first tile: the start-up loads', whose lane
  // 16 * h holds the page of the tile's token 16 * h).
  int pf[kHalves];
  pf[0] = su.pages[0];
#pragma unroll
  for (int h = 1; h < kHalves; ++h) pf[h] = __shfl_sync(0xFFFFFFFFu, su.pages[0], kBulkTile * h);
  const uint64_t l2_policy = mma::l2_evict_first_policy();

  if (lane == 0 && init_barriers) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) mma::mbarrier_init(&bars[s], 1);
    mma::fence_barrier_init();
  }
  __syncwarp();
  // The stage of this run's tile i, and the parity of its barrier's phase.
  auto stage_of = [&](int i) { return (warp_tiles_before + i) % kStages; };
  auto parity_of = [&](int i) { return static_cast<uint32_t>(((warp_tiles_before + i) / kStages) & 1); };

  // Tile i into stage st, one 16-row copy per half. The stage's earlier readers (every lane of
  // this warp) are done: the caller passed a __syncwarp after their last read. The issuing
  // thread fences the async proxy once and arrives once on the stage's barrier with every
  // copying half's bytes; then the halves' copies go out. A half past the sequence's end, or
  // whose table entry lies outside the pool, copies nothing (its rows are masked, its V rows
  // zeroed, by the tile's reader). Every lane takes lane 0's pages; a policy whose copies one
  // thread issues runs them on the lane elect.sync picks, not under `lane == 0`: the compiler
  // then knows a single thread holds the copies' operands and moves them to the uniform
  // registers directly, where under a lane test it wraps every copy in a loop over the
  // active lanes (~5 instructions per copy, 8 copies per NVFP4 tile: TUNING.md step 28).
  // load_tile / fetch_page take this warp's tile index i (kShared: the tile's first token,
  // < end for load_tile).
  auto load_tile = [&](int i, int st) {
    uint64_t* bar = &bars[st];
    uint8_t* stage = wbase + st * kS.stage_bytes;
    int64_t pg[kHalves];
    bool copies[kHalves];
    uint32_t tx = 0;
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      pg[h] = __shfl_sync(0xFFFFFFFFu, pf[h], 0);  // lane 0's
      const int f = (kShared ? i : first_token(i)) + kBulkTile * h;  // h = 0: below end
      const bool past_end = h > 0 && f >= end;
      copies[h] = !past_end && pg[h] >= 0 && pg[h] < geom.num_blocks;
      if (copies[h])
        tx += Copy::template tx_bytes<D, F>(min(kBulkTile, end - f));
      else if (lane == 0)
        bad |= !past_end;
    }
    BulkTile tile[kHalves];
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      const int f = (kShared ? i : first_token(i)) + kBulkTile * h;
      tile[h].pools = &p.pools;
      tile[h].page = copies[h] ? pg[h] : 0;  // an entry outside the pool is never used
      tile[h].kv_head = it.kv_head;
      tile[h].slot = ps.slot(f);
      tile[h].rows = min(kBulkTile, end - f);
      tile[h].copy = copies[h];
      tile[h].sk = stage + kBulkTile * h * kS.row_stride;
      tile[h].sv = tile[h].sk + kWT * kS.row_stride;
      tile[h].sks = stage + kS.scale_off + kBulkTile * h * Op::kScaleBytes;
      tile[h].svs = tile[h].sks + kWT * Op::kScaleBytes;
      tile[h].bar = bar;
      tile[h].l2_policy = l2_policy;
      tile[h].lane = lane;
    }
    if constexpr (Copy::kWarpIssues) {
      mma::fence_proxy_async_smem();  // this thread's generic stage accesses before async writes
      if (lane == 0) mma::mbarrier_arrive_expect_tx(bar, tx);
      __syncwarp();  // the bytes are announced before any copy
#pragma unroll
      for (int h = 0; h < kHalves; ++h)
        if (copies[h]) Copy::template issue<D, F>(tile[h], maps);
    } else if (mma::elect_one_sync()) {
      // Straight-line code on the elected thread: a branch here (a half that copies nothing)
      // would cost the compiler its knowledge of the single thread; the copies are predicated.
      mma::fence_proxy_async_smem();
      mma::mbarrier_arrive_expect_tx(bar, tx);
#pragma unroll
      for (int h = 0; h < kHalves; ++h) Copy::template issue<D, F>(tile[h], maps);
    }
  };
  auto fetch_page = [&](int i) {  // lane 0: the table entries of tile i's halves (-1 past the end)
    if (lane != 0) return;
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      const int f = (kShared ? i : first_token(i)) + kBulkTile * h;
      pf[h] = f < end ? __ldg(table + ps.page(f)) : -1;
    }
  };

  // kShared: tk[j] is the first token of this warp's tile i + j (-1: none, nor any later), j =
  // 0..kStages, i the main loop's tile; static tiles first, then claimed ones (tile index c_first
  // + the claim's index). `added` (lane 0): the result of the claim in flight.
  [[maybe_unused]] int tk[kStages + 1] = {};
  [[maybe_unused]] uint64_t added = 0;
  [[maybe_unused]] bool claims = false;  // the item has tiles past every warp's static ones
  [[maybe_unused]] int c_first = 0, num_tiles = 0;
  [[maybe_unused]] const int k_static = p.num_splits > 1 ? kStages + 1 : INT_MAX;
  auto static_token = [&](int k) {  // kShared: this warp's static tile k, or -1
    const int f = start + (warp + p.num_splits * kW * k) * kWT;
    return k < k_static && f < end ? f : -1;
  };
  [[maybe_unused]] unsigned long long* word = nullptr;
  auto claim_cas = [&](uint64_t expect, uint64_t want) {
    return static_cast<uint64_t>(atomicCAS(word, expect, want));
  };
  auto claim_add = [&](uint64_t v) { return static_cast<uint64_t>(atomicAdd(word, v)); };
  auto claim_load = [&] { return static_cast<uint64_t>(*static_cast<volatile unsigned long long*>(word)); };

  // ---- pipeline prologue first: its copies fly while Q is prepared.
  if constexpr (!kShared) {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < my_tiles) {
        load_tile(s, stage_of(s));
        if (s + 1 < my_tiles) fetch_page(s + 1);
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j <= kStages; ++j) tk[j] = static_token(j);
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (tk[s] >= 0) {
        load_tile(tk[s], stage_of(s));
        if (tk[s + 1] >= 0) fetch_page(tk[s + 1]);
      }
    }
    num_tiles = (end + kWT - 1) / kWT;
    c_first = p.num_splits * kW * (kStages + 1);
    claims = p.num_splits > 1 && num_tiles > c_first;
    // The claim of tile kStages + 1, the first past the static ones: its table entry is fetched
    // in main-loop iteration 1, after the pipeline's first tiles have landed.
    if (claims && lane == 0) {
      word = split_arrival_word(p, it);
      added = shared_tile_claim_first(p.arrival_tag, claim_cas, claim_add);
    }
  }

  // Thread (head, 16th of its dims) of the first 4 warps writes Q's fragments (warp-uniform).
  if (kW == kV4Warps || warp < kV4Warps)
    mma::q_fragments<Op, D>(su.q, p.q_bf16, p.qk_scale, qf_hi, qf_lo, colscale);
  __syncthreads();
  const float cs0 = colscale[2 * t], cs1 = colscale[2 * t + 1];
  const bool q_lo = !Op::kQkF16 && !p.q_bf16;  // an f16 Q split into bf16 hi + lo

  mma::WarpAttention<F, D, kWT, Op> wa;
  wa.reset();

  // ---- main loop: wait for tile i, refill the stage tile i-1 used, compute tile i.
  for (int i = 0; kShared ? tk[0] >= 0 : i < my_tiles; ++i) {
    const int st = stage_of(i);
    mma::mbarrier_wait(&bars[st], parity_of(i));
    uint8_t* sk = wbase + st * kS.stage_bytes;
    uint8_t* sv = sk + kWT * kS.row_stride;
    uint8_t* sks = sk + kS.scale_off;
    uint8_t* svs = sks + kWT * Op::kScaleBytes;
    const int n_valid = end - (kShared ? tk[0] : first_token(i));
    if (n_valid < kWT) {
      // The sequence's last tile: zero the V rows past the end (whatever the copy left there:
      // stale rows, or the pool's unused slots), and their block scales (0 x a NaN code
      // would not be 0).
      constexpr int kChunksPerRow = kS.row_bytes / 16;
      for (int c = n_valid * kChunksPerRow + lane; c < kWT * kChunksPerRow; c += kWarpSize)
        *reinterpret_cast<uint4*>(sv + Op::at(c / kChunksPerRow, (c % kChunksPerRow) * 16)) =
            make_uint4(0u, 0u, 0u, 0u);
      if constexpr (Op::kScaleBytes > 0)
        for (int b = n_valid * Op::kScaleBytes + lane; b < kWT * Op::kScaleBytes; b += kWarpSize)
          svs[b] = 0;
    }
    __syncwarp();  // every lane is done with tile i-1's stage and sees tile i's zeroed rows
    const int nxt = i + kStages - 1;
    if constexpr (!kShared) {
      if (nxt < my_tiles) {
        load_tile(nxt, stage_of(nxt));
        if (nxt + 1 < my_tiles) fetch_page(nxt + 1);
      }
    } else {
      // Tile i + kStages: claimed (in iteration i - 1, or the prologue for i = 1); its index
      // came back while tile i landed. Then the claim of tile i + kStages + 1, unless the
      // item's tiles have run out.
      if (claims && i > 0 && tk[kStages] >= 0) {  // >= 0: a claim is in flight
        int f = -1;
        if (lane == 0) {
          const int c = static_cast<int>(
              shared_tile_claim_resolve(p.arrival_tag, added, claim_load, claim_cas, claim_add));
          f = c < num_tiles - c_first ? (c_first + c) * kWT : -1;
        }
        tk[kStages] = __shfl_sync(0xFFFFFFFFu, f, 0);
      }
      if (tk[kStages - 1] >= 0) {
        load_tile(tk[kStages - 1], stage_of(nxt));
        if (tk[kStages] >= 0) fetch_page(tk[kStages]);
      }
      if (claims && i > 0 && tk[kStages] >= 0 && lane == 0) added = claim_add(1);
    }
    wa.tile(sk, sv, sks, svs, n_valid, qf_hi, qf_lo, q_lo, cs0, cs1, lane);
    if constexpr (kShared) {
#pragma unroll
      for (int j = 0; j < kStages; ++j) tk[j] = tk[j + 1];
      // Static (one split: every tile), or the claim in flight's (resolved next iteration).
      tk[kStages] = claims ? (tk[kStages - 1] >= 0 ? 0 : -1) : static_token(i + kStages + 1);
    }
  }

  // The dependent launch (the split merge, waiting in pdl_wait for this whole grid) may start
  // now that the block's stream has ended: triggered at the kernel's start instead, it was
  // 1.4-2.2 % slower at the batch-1 split shapes (v10 at 1 x 8k / 32k, BF16, FP8 and NVFP4) and
  // level elsewhere (TUNING.md step 35). A block without tokens triggers by exiting.
  mma::pdl_launch_dependents();
  // ---- merge the kW warps (the pipeline area; every copy a warp issued was waited for in
  // its loop).
  v4_merge_warps_and_store<D, F, kWT, Op, kW>(p, smem, it, wa, bad, smem_partial, dest);
}


// Between two runs of bulk_block in one block: every thread is past the last run's stores (its
// reads of the merge area, which the next run's copies overwrite), and its generic shared-memory
// accesses are ordered before the async proxy's writes.
__device__ __forceinline__ void bulk_segment_boundary() {
  mma::fence_proxy_async_smem();
  __syncthreads();
}

// The split merge policies (the header above).
struct PdlSplitMerge {
  static constexpr bool kCluster = false;
  static constexpr bool kLastBlock = false;
  static constexpr bool kSharedTiles = false;
};
struct ClusterSplitMerge {
  static constexpr bool kCluster = true;
  static constexpr bool kLastBlock = false;
  static constexpr bool kSharedTiles = false;
};
struct LastBlockSplitMerge {
  static constexpr bool kCluster = false;
  static constexpr bool kLastBlock = true;
  static constexpr bool kSharedTiles = false;
};
// PdlSplitMerge's merge kernel, with the item's splits sharing its tiles (bulk_block's kShared):
// the workspace holds the partials, then one claim word per item, which the merge kernel
// resets after the decode grid.
struct SharedTilesMerge {
  static constexpr bool kCluster = false;
  static constexpr bool kLastBlock = false;
  static constexpr bool kSharedTiles = true;
};

// grid: num_splits x num_seqs x num_kv_heads x num_qtiles blocks (PdlSplitMerge,
// LastBlockSplitMerge and SharedTilesMerge: split slowest; ClusterSplitMerge: split fastest, one cluster of
// num_splits blocks per item when num_splits > 1), 32 x bulk_warps<Copy>() threads; dynamic
// shared memory bulk_smem<Copy, D, F>().total.
template <class Copy, class Merge, int D, KvFormat F>
__global__ void __launch_bounds__(bulk_warps<Copy>() * kWarpSize,
                                  bulk_min_blocks<D, F, bulk_warps<Copy>()>())
    bulk_decode_kernel(const V4Params p, const __grid_constant__ typename Copy::Maps maps) {
  static_assert(!Merge::kCluster || bulk_warps<Copy>() == kV4Warps,
                "the cluster merge's occupancy queries and merge loops are v11's 4-warp blocks");
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = smem_raw;
  if constexpr (Copy::kSmemAlign > 16)  // round the shared-space address up (the slack is counted)
    smem += (Copy::kSmemAlign - mma::smem_addr(smem_raw) % Copy::kSmemAlign) % Copy::kSmemAlign;
  const V4Item it = v4_item<Merge::kCluster>(p);
  const int start = it.split * p.chunk_tokens;
  constexpr int kThreads = bulk_warps<Copy>() * kWarpSize;
  V4Startup<BulkConfig<D, F>, D, F> su;
  v4_startup_loads<BulkConfig<D, F>, D, F, kThreads>(p, it.seq, it.kv_head, it.qtile, start, su);
  int end;
  const bool has_tokens = v4_token_range<D, Merge::kLastBlock, kThreads>(p, it, start, end);
  if constexpr (Merge::kLastBlock) {
    if (!has_tokens) {  // past the end (no arrival counted), or split 0 wrote the rows
      // Split 0 without tokens: the length is bad or 0, no split arrives; the item's word is
      // left reset as an arrived item's is.
      if (p.num_splits > 1 && it.split == 0 && threadIdx.x == 0)
        *split_arrival_word(p, it) = SplitArrival::kReset;
      return;
    }
    bulk_block<Copy, D, F>(p, maps, smem, it, start, end, su, nullptr, V4SplitDest{it.split});
    if (p.num_splits > 1) last_block_merge_splits<D>(p, it);
  } else if constexpr (Merge::kSharedTiles) {
    if (!has_tokens) return;
    end = p.seq_lens[it.seq];  // valid (has_tokens): the splits share the item's whole range
    bulk_block<Copy, D, F, V4SplitDest, true>(p, maps, smem, it, start, end, su, nullptr,
                                              V4SplitDest{it.split});
  } else if constexpr (!Merge::kCluster) {
    if (!has_tokens) return;
    bulk_block<Copy, D, F>(p, maps, smem, it, start, end, su, nullptr, V4SplitDest{it.split});
  } else {
    // No return before the cluster merge while a cluster is launched (num_splits > 1): every
    // block must reach its two barriers, a block without tokens included.
    constexpr BulkSmem kS = bulk_smem<Copy, D, F>();
    float* partial = reinterpret_cast<float*>(smem + kS.partial_off);
    if (has_tokens)
      bulk_block<Copy, D, F>(p, maps, smem, it, start, end, su, partial, V4SplitDest{it.split});
    if (p.num_splits == 1) return;  // uniform: one block per item, its rows written
    cluster_merge_splits<D>(p, it, partial);
  }
}

// ------------------------------------------------------------------ host side
// The (head_dim, format) instances of a policy: every compiled head_dim in BF16 and FP16,
// and FP8 E4M3 / NVFP4 at head_dim >= 128 when the policy copies them.
template <class Copy>
constexpr bool bulk_fp8_head_dim(int d) {
  return Copy::kFP8 && d >= 128;
}
template <class Copy>
constexpr bool bulk_nvfp4_head_dim(int d) {
  return Copy::kNVFP4 && d >= 128;
}
template <class Copy, class Fn>
cudaError_t bulk_dispatch(int head_dim, KvFormat format, Fn&& fn) {
  return KVLAB_DISPATCH_HEAD_DIM(head_dim, kD, [&] {
    if constexpr (bulk_16bit_head_dim<Copy>(kD)) {
      if (format == KvFormat::kBF16)
        return fn(std::integral_constant<int, kD>{},
                  std::integral_constant<KvFormat, KvFormat::kBF16>{});
      if (format == KvFormat::kFP16)
        return fn(std::integral_constant<int, kD>{},
                  std::integral_constant<KvFormat, KvFormat::kFP16>{});
    }
    if constexpr (bulk_fp8_head_dim<Copy>(kD)) {
      if (format == KvFormat::kFP8E4M3)
        return fn(std::integral_constant<int, kD>{},
                  std::integral_constant<KvFormat, KvFormat::kFP8E4M3>{});
    }
    if constexpr (bulk_nvfp4_head_dim<Copy>(kD)) {
      if (format == KvFormat::kNVFP4)
        return fn(std::integral_constant<int, kD>{},
                  std::integral_constant<KvFormat, KvFormat::kNVFP4>{});
    }
    return cudaErrorInvalidValue;  // unreachable: bulk_layout_reason rejects the format
  });
}

// "" when the family's copies apply to the pool: 16-bit rows (or FP8 E4M3 ones of >= 128
// bytes, NVFP4 ones of >= 64, where the policy copies them), HND (or NHD where the policy
// copies it), whole tiles inside a page.
template <class Copy>
std::string bulk_layout_reason(const PageGeometry& g) {
  std::ostringstream os;
  const bool fp8 = g.format == KvFormat::kFP8E4M3 && Copy::kFP8;
  const bool nvfp4 = g.format == KvFormat::kNVFP4 && Copy::kNVFP4;
  if (g.format != KvFormat::kBF16 && g.format != KvFormat::kFP16 && !fp8 && !nvfp4)
    os << Copy::kName << " copies 16-bit (bf16, fp16) "
       << (Copy::kFP8 ? "or fp8_e4m3 (pool scale) " : "")
       << (Copy::kNVFP4 ? "or nvfp4 " : "") << Copy::kCopies << ", got "
       << to_string(g.format);
  else if (fp8 && !bulk_fp8_head_dim<Copy>(g.head_dim))
    os << Copy::kName << " copies fp8_e4m3 rows of head_dim >= 128 (one 128-byte swizzle line "
       << "or more), got head_dim " << g.head_dim;
  else if (nvfp4 && !bulk_nvfp4_head_dim<Copy>(g.head_dim))
    os << Copy::kName << " copies nvfp4 rows of head_dim >= 128 (a 64-byte swizzle span or "
       << "more), got head_dim " << g.head_dim;
  else if (!fp8 && !nvfp4 && !bulk_16bit_head_dim<Copy>(g.head_dim))
    os << Copy::kName << " copies 16-bit rows of head_dim <= 128 (" << bulk_warps<Copy>()
       << " warps x " << kBulkStages << " stages of " << kBulkTile << " rows of head_dim "
       << g.head_dim << " would exceed the shared memory of a block), got head_dim "
       << g.head_dim;
  else if (g.layout != KvLayout::kHND && !(Copy::kNHD && g.layout == KvLayout::kNHD))
    os << Copy::kName << " copies " << Copy::kCopies
       << (Copy::kNHD ? " of (page, KV head) rows of the HND or NHD layout, got "
                      : " of contiguous (page, KV head) runs of the HND layout, got ")
       << to_string(g.layout);
  else if (g.block_size % kBulkTile != 0)
    os << Copy::kName << " needs block_size a multiple of " << kBulkTile
       << " (a warp tile inside one page), got " << g.block_size;
  return os.str();
}

// Where the last-block merge's arrival words start after `partials` bytes of partial rows.
constexpr size_t bulk_arrivals_offset(size_t partials) {
  return (partials + alignof(unsigned long long) - 1) / alignof(unsigned long long) *
         alignof(unsigned long long);
}
// The last-block merge's arrival words of a launch: one per (sequence, KV head, query tile).
inline size_t bulk_arrival_words(const DecodeArgs& a, const V4Plan& pl) {
  return static_cast<size_t>(a.num_seqs) * a.kv.geom.num_kv_heads * pl.num_qtiles;
}

// One cache of resident blocks / clusters per (copy, merge) kernel family.
template <class Copy, class Merge>
struct BulkTag {};

// A bulk plan: v4's plan, and for the cluster merge the largest resident cluster (0 when not
// asked: a single split) and whether a forced split exceeds it.
// SharedTilesMerge at more than one split: the kernel's chunk_tokens, one static tile per warp
// (split s's warps start at the item's tile s x kW), and the item's most tiles.
struct BulkPlan : V4Plan {
  int cluster_limit = 0;
  bool cluster_declined = false;
  int shared_chunk = 0;
  int64_t shared_tiles = 0;
};

template <class Copy, class Merge>
BulkPlan bulk_make_plan(const DecodeArgs& a, const LaunchLimits& lim, const DecodeTuning& tu) {
  const PageGeometry& g = a.kv.geom;
  size_t smem = 0;
  int tile = kBulkTile;  // the warp tile: the plan's splits start on whole tiles
  bulk_dispatch<Copy>(g.head_dim, g.format, [&](auto d, auto fm) {
    smem = static_cast<size_t>(bulk_smem<Copy, decltype(d)::value, decltype(fm)::value>().total);
    tile = bulk_tile<decltype(fm)::value, decltype(d)::value>();
    return cudaSuccess;
  });
  auto kernel_of = [&](auto&& fn) {
    return bulk_dispatch<Copy>(g.head_dim, g.format, [&](auto d, auto fm) {
      return fn(bulk_decode_kernel<Copy, Merge, decltype(d)::value, decltype(fm)::value>);
    });
  };
  auto blocks = [&](size_t bytes) {
    return cached_blocks_per_sm<BulkTag<Copy, Merge>>(lim.device, g.head_dim, g.format, bytes,
                                                      kernel_of, bulk_warps<Copy>() * kWarpSize);
  };
  BulkPlan pl;
  static_cast<V4Plan&>(pl) = v4_family_plan(a, lim, tu, smem, tile, blocks, bulk_warps<Copy>());
  if constexpr (Merge::kLastBlock || Merge::kSharedTiles) {
    if (pl.split.num_splits > 1)  // the partials, then one arrival / claim word per item
      pl.workspace = bulk_arrivals_offset(pl.workspace) +
                     bulk_arrival_words(a, pl) * sizeof(unsigned long long);
  }
  if constexpr (Merge::kSharedTiles) {
    if (pl.split.num_splits > 1) {
      pl.shared_chunk = bulk_warps<Copy>() * tile;
      pl.shared_tiles = (seq_len_bound64(a) + tile - 1) / tile;
    }
  }
  if constexpr (Merge::kCluster) {
    pl.workspace = 0;  // the partials stay in the cluster's shared memory
    if (pl.split.num_splits > 1 && pl.blocks_per_sm >= 1) {
      pl.cluster_limit = cached_cluster_limit<BulkTag<Copy, Merge>>(lim.device, g.head_dim,
                                                                   g.format, pl.smem, kernel_of);
      const ClusterSplitDecision dec =
          cluster_split_decision(pl.split.num_splits, tu.num_splits > 0, pl.cluster_limit);
      pl.cluster_declined = dec.decline;
      if (dec.force_splits > 0) {  // the plan's own choice, clamped to the cluster limit
        DecodeTuning t = tu;
        t.num_splits = dec.force_splits;
        static_cast<V4Plan&>(pl) = v4_family_plan(a, lim, t, smem, tile, blocks);
        pl.workspace = 0;
      }
    }
  }
  return pl;
}

template <class Copy, class Merge>
std::string bulk_unsupported_reason(const DecodeArgs& a, const DecodeTuning& tu) {
  const std::string layout = bulk_layout_reason<Copy>(a.kv.geom);
  if (!layout.empty()) return layout;
  const LaunchLimits lim = current_launch_limits();
  const BulkPlan pl = bulk_make_plan<Copy, Merge>(a, lim, tu);
  const std::string plan = v4_family_reason(Copy::kName, a, lim, pl);
  if (!plan.empty()) return plan;
  if (pl.shared_tiles + static_cast<int64_t>(pl.split.num_splits) * bulk_warps<Copy>() >
      static_cast<int64_t>(SplitArrival::kCountMask)) {
    std::ostringstream os;
    os << Copy::kName << " counts an item's tile claims in " << SplitArrival::kCountBits
       << " bits; a sequence length bound of " << seq_len_bound64(a) << " tokens gives "
       << pl.shared_tiles << " tiles per item, more than that count holds";
    return os.str();
  }
  if (pl.cluster_declined) {
    std::ostringstream os;
    os << Copy::kName << " merges the splits of an item inside one thread-block cluster; the "
       << "largest cluster of its blocks that can be resident on this device "
       << "(cudaOccupancyMaxActiveClusters over sizes 16, 8, 4, 2) holds " << pl.cluster_limit
       << " blocks, the forced num_splits " << tu.num_splits << " gives " << pl.split.num_splits
       << " splits per item";
    return os.str();
  }
  return Copy::maps_reason(a);
}

template <class Copy, class Merge>
size_t bulk_workspace_bytes(const DecodeArgs& a, const DecodeTuning& tu) {
  return bulk_make_plan<Copy, Merge>(a, current_launch_limits(), tu).workspace;
}

template <class Copy, class Merge>
void bulk_run(const DecodeArgs& a, const DecodeTuning& tu, void* workspace, cudaStream_t stream) {
  const BulkPlan pl = bulk_make_plan<Copy, Merge>(a, current_launch_limits(), tu);
  const PageGeometry& g = a.kv.geom;
  V4Params p = v4_params(a, pl, Merge::kCluster ? nullptr : workspace);
  if constexpr (Merge::kLastBlock || Merge::kSharedTiles) {
    if (pl.split.num_splits > 1) {  // the words end the workspace (bulk_make_plan)
      p.arrivals = reinterpret_cast<unsigned long long*>(
          static_cast<uint8_t*>(workspace) + pl.workspace -
          bulk_arrival_words(a, pl) * sizeof(unsigned long long));
      p.arrival_tag = next_split_arrival_tag();
    }
  }
  if constexpr (Merge::kSharedTiles) {
    if (pl.split.num_splits > 1) p.chunk_tokens = pl.shared_chunk;
  }
  const typename Copy::Maps maps = Copy::maps(a);
  cudaError_t e = bulk_dispatch<Copy>(g.head_dim, g.format, [&](auto d, auto fm) {
    auto kernel = bulk_decode_kernel<Copy, Merge, decltype(d)::value, decltype(fm)::value>;
    const unsigned grid = static_cast<unsigned>(pl.split.grid);
    if constexpr (Merge::kCluster) {
      if (pl.split.num_splits > 1)
        return launch_cluster(kernel, grid, kV4Threads, pl.smem, pl.split.num_splits, stream, p,
                              maps);
    }
    cudaError_t r = allow_dynamic_smem(kernel, pl.smem);
    if (r != cudaSuccess) return r;
    kernel<<<grid, pl.threads, pl.smem, stream>>>(p, maps);
    return cudaGetLastError();
  });
  KVLAB_CUDA_CHECK(e);
  if constexpr (!Merge::kCluster && !Merge::kLastBlock)
    v4_launch_merge<Merge::kSharedTiles>(p, tu, stream);
  KVLAB_CHECK_LAUNCH();
}

// The registry entry of a (copy, merge) policy pair.
template <class Copy, class Merge = PdlSplitMerge>
DecodeVersionImpl bulk_version(int id, const char* description) {
  DecodeVersionImpl v;
  v.info = {id, Copy::kName, description};
  v.info.in_scope = [](const PageGeometry& g) { return bulk_layout_reason<Copy>(g).empty(); };
  v.unsupported_reason = bulk_unsupported_reason<Copy, Merge>;
  v.workspace_bytes = bulk_workspace_bytes<Copy, Merge>;
  v.run = bulk_run<Copy, Merge>;
  return v;
}

}  // namespace
}  // namespace kvlab::gpu::detail
