// v15_mma_decode_stream_k.cu: v10 (TMA tensor copies of each 16-token tile, 128-byte swizzled,
// 4 warps with 3-stage pipelines, v4's tile compute) on a persistent stream-K grid: one block
// per resident slot (SMs x resident blocks per SM), the work (the warp tiles of every
// (sequence, KV head, query tile) item, counted from the length bound) cut into equal
// contiguous ranges, one per block; an item shared by blocks is merged by a second kernel.
//
// What changed vs v10, and why (gpu/attention/TUNING.md, step 34: the prediction and the
// measured result):
//  * Scheduling. v10 cuts every item into the plan's equal splits and launches one block per
//    (item, split). When items x splits is not a multiple of the resident slots, some SMs hold
//    fewer blocks than the others: FP8 at 16 x 8k runs 256 blocks on 132 SMs (124 SMs with two,
//    8 with one), so the time is the two-block SMs' and the streaming runs at 91 % of the read
//    ceiling (TUNING.md step 30's stamps); BF16 at batch 16 pays the same, and at 64 x 8k the
//    1.94 waves leave a second wave short of 16 blocks and a 17 us spread of block ends. Here
//    every slot gets the same number of tiles (to one), so every SM streams the same bytes and
//    the blocks end together.
//  * The units are counted from the length bound (decode_plan.h, plan_stream_k_bound), not from
//    the real lengths as in v6: the host knows every block's range before the launch, so a
//    block's first loads (its Q slice, the table entry of its first tile, the length) go out
//    together, as v10's do, instead of after a scan of the lengths. A skewed batch is then
//    balanced as the bound's batch would be (v10's plan has the same property); units past a
//    sequence's end are skipped.
//  * A block walks its range as segments, one per item it touches; each segment is v10's block
//    body (mma_bulk_decode.cuh's bulk_block over the segment's tokens, the same tile copies,
//    tile compute and warp merge); the next segment starts its pipeline afresh, each warp's
//    stages and barrier phases going on from where its last segment left them (the barriers
//    are initialised once). A segment that holds its item whole writes
//    the output rows; the others write a normalised partial (slot 0: the first item of the
//    block's range, slot 1: the last), merged by stream_k_split_merge.cuh's kernel (launched
//    with programmatic dependent launch), which also writes the rows of an empty or invalid
//    sequence whose item is split.
//  * Scope: v10's without NVFP4 (bf16 / fp16 at every compiled head_dim, fp8_e4m3 with a pool
//    scale at head_dim >= 128, HND and NHD, block_size a multiple of 16; the same declines, and
//    nvfp4 declined: racecheck flags its block-scale copies under the segments, below).
//    For the same tokens per block the outputs are v10's to rounding: the segments' boundaries
//    differ from v10's splits, so the bits do not.
// DecodeTuning: num_splits > 0 forces that many blocks per SM (clamped to the resident ones);
// min_tiles_per_block bounds the grid of small work (decode_plan.h); pdl as v10's.
#include "gpu/attention/stream_k_split_merge.cuh"
#include "gpu/attention/tma_pool_map.cuh"

namespace kvlab::gpu::detail {
namespace {

struct V15Name {
  static constexpr const char* kName = "v15_mma_decode_stream_k";
};
// v10's tensor copies, rows and swizzle, without NVFP4 (the family's scope reasons read kNVFP4):
// compute-sanitizer's racecheck reports write-write hazards between the bulk copies of NVFP4's
// block scales under v15's segments (TUNING.md step 34), none under v10's one range per block;
// until they are understood v15 declines NVFP4.
struct V15StreamKCopy : TmaSwizzleCopy<V15Name> {
  static constexpr bool kNVFP4 = false;
};
using V15Copy = V15StreamKCopy;

struct V15Params : V4Params {
  int hq;               // items per sequence: num_kv_heads x num_qtiles
  int unit_tokens;      // tokens per unit (the warp tile)
  int64_t item_tiles;   // T: units per item (from the bound)
  int64_t total_units;  // W = num_seqs x hq x T
  int64_t num_blocks;   // C: the persistent grid
  // V4Params' partial_o / partial_lse hold [C][2 slots][8 heads][head_dim] / [C][2][8].
};

// A segment's result: the output rows when the block holds the item whole, else its partial
// rows (block c, slot) of the workspace.
struct StreamKSegmentDest {
  bool whole_;
  int64_t base;  // (c x 2 + slot) x 8
  __device__ bool whole(const V4Params&) const { return whole_; }
  __device__ int64_t prow(const V4Params&, int64_t, int hl) const { return base + hl; }
};

// grid: C = num_blocks persistent blocks, 128 threads; dynamic shared memory
// bulk_smem<V15Copy, D, F>().total (v10's block).
template <int D, KvFormat F>
__global__ void __launch_bounds__(kV4Threads, bulk_min_blocks<D, F>())
    stream_k_bulk_decode_kernel(const V15Params p, const __grid_constant__ TmaPoolMaps maps) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = smem_raw;  // rounded up to the swizzle's period (the slack is counted)
  smem += (V15Copy::kSmemAlign - mma::smem_addr(smem_raw) % V15Copy::kSmemAlign) %
          V15Copy::kSmemAlign;
  const int64_t C = p.num_blocks, c = blockIdx.x;
  const int64_t T = p.item_tiles, W = p.total_units;
  const int64_t ub = streamk_unit_begin(c, W, C), ue = streamk_unit_begin(c + 1, W, C);
  const int H = p.pools.geom.num_kv_heads;
  bool ran_body = false;  // a segment ran the block body (block-uniform)
  int warp_tiles = 0;     // this warp's tiles in those segments (its stages' phases go on)
  for (int64_t u = ub; u < ue;) {  // block-uniform
    const int64_t item = u / T, item_first = item * T;
    const int64_t seg_end = min(ue, item_first + T);
    V4Item it;
    it.qtile = static_cast<int>(item % p.num_qtiles);
    it.kv_head = static_cast<int>((item / p.num_qtiles) % H);
    it.seq = static_cast<int>(item / p.hq);
    it.split = 0;
    // Units below the bound's tiles: token offsets fit in int.
    const int start = static_cast<int>((u - item_first) * p.unit_tokens);
    V4Startup<BulkConfig<D, F>, D, F> su;
    v4_startup_loads<BulkConfig<D, F>, D, F>(p, it.seq, it.kv_head, it.qtile, start, su);
    const int len = p.seq_lens[it.seq];
    const bool bad_len = len < 0 || len > p.seq_len_bound;
    const int end = bad_len ? 0 : min(len, static_cast<int>((seg_end - item_first) * p.unit_tokens));
    const bool whole = item_first >= ub && item_first + T <= ue;
    if (start < end) {
      if (ran_body) bulk_segment_boundary();
      const StreamKSegmentDest dest{
          whole, (c * 2 + streamk_partial_slot(c, item_first, W, C)) * mma::kHeadsPerTile};
      bulk_block<V15Copy, D, F>(p, maps, smem, it, start, end, su, nullptr, dest, warp_tiles,
                                !ran_body);
      warp_tiles += bulk_warp_tiles<bulk_tile<F, D>(), kV4Warps>(start, end,
                                                                 threadIdx.x / kWarpSize);
      ran_body = true;
    } else if (whole) {
      v4_write_empty_rows<D>(p, it, bad_len);  // an empty or invalid sequence held whole
    }
    // A split item's segment without tokens (past the sequence's end, or an invalid length)
    // writes nothing: the merge kernel skips it and writes such an item's rows.
    u = seg_end;
  }
}

// The merge's view of v15's partition (stream_k_split_merge.cuh): an item's units lie at
// [item x T, (item + 1) x T); of its parts, those whose first unit lies below the length hold
// tokens (parts start in unit order). The decode kernel wrote the rows of items held whole.
struct V15MergeUnits {
  static __device__ StreamKRowParts parts(const V15Params& p, int seq, int item) {
    StreamKRowParts r;
    r.W = p.total_units;
    r.C = p.num_blocks;
    r.first = (static_cast<int64_t>(seq) * p.hq + item) * p.item_tiles;
    if (streamk_item_parts(r.first, p.item_tiles, r.W, r.C) <= 1) return r;
    const int len = p.seq_lens[seq];
    if (len < 0 || len > p.seq_len_bound) {
      r.action = StreamKRowParts::kNaN;
    } else if (len == 0) {
      r.action = StreamKRowParts::kEmpty;
    } else {
      r.action = StreamKRowParts::kMerge;
      r.parts = stream_k_bound_used_parts(r.first, len, p.unit_tokens, r.W, r.C);
    }
    return r;
  }
};

// ------------------------------------------------------------------ host side
struct V15Tag {};

struct V15Plan {
  int num_qtiles = 1, hq = 0, unit_tokens = kBulkTile;
  StreamKBoundPlan sk;
  size_t smem = 0, partial_o_bytes = 0, workspace = 0;
  int blocks_per_sm = 0;
  bool merge = false;  // some item is split between blocks
};

V15Plan v15_plan(const DecodeArgs& a, const LaunchLimits& lim, const DecodeTuning& tu) {
  V15Plan pl;
  const PageGeometry& g = a.kv.geom;
  bulk_dispatch<V15Copy>(g.head_dim, g.format, [&](auto d, auto fm) {
    pl.smem = static_cast<size_t>(bulk_smem<V15Copy, decltype(d)::value, decltype(fm)::value>().total);
    pl.unit_tokens = bulk_tile<decltype(fm)::value, decltype(d)::value>();
    return cudaSuccess;
  });
  pl.num_qtiles = (a.group_size() + mma::kHeadsPerTile - 1) / mma::kHeadsPerTile;
  pl.hq = g.num_kv_heads * pl.num_qtiles;
  if (pl.smem > static_cast<size_t>(lim.smem_per_block_optin)) return pl;
  pl.blocks_per_sm = cached_blocks_per_sm<V15Tag>(
      lim.device, g.head_dim, g.format, pl.smem, [&](auto&& fn) {
        return bulk_dispatch<V15Copy>(g.head_dim, g.format, [&](auto d, auto fm) {
          return fn(stream_k_bulk_decode_kernel<decltype(d)::value, decltype(fm)::value>);
        });
      });
  StreamKBoundInput in;
  in.items = static_cast<int64_t>(a.num_seqs) * pl.hq;
  in.seq_len_bound = seq_len_bound64(a);
  in.unit_tokens = pl.unit_tokens;
  in.warps = kV4Warps;
  in.sm_count = lim.sm_count;
  in.blocks_per_sm = std::max(1, pl.blocks_per_sm);
  pl.sk = plan_stream_k_bound(in, tu);
  pl.merge = pl.sk.blocks > 1 && stream_k_bound_splits_items(pl.sk);
  if (pl.merge) {
    const size_t rows = static_cast<size_t>(pl.sk.blocks) * 2 * mma::kHeadsPerTile;
    pl.partial_o_bytes = rows * g.head_dim * sizeof(float);
    pl.workspace = pl.partial_o_bytes + rows * sizeof(float);
  }
  return pl;
}

std::string v15_unsupported_reason(const DecodeArgs& a, const DecodeTuning& tu) {
  const std::string layout = bulk_layout_reason<V15Copy>(a.kv.geom);
  if (!layout.empty()) return layout;
  const LaunchLimits lim = current_launch_limits();
  const V15Plan pl = v15_plan(a, lim, tu);
  // The family's reasons (shared memory, residency, one merge block per output row, the grid)
  // read these fields of a plan.
  V4Plan limits;
  limits.smem = pl.smem;
  limits.blocks_per_sm = pl.blocks_per_sm;
  limits.threads = kV4Threads;
  limits.split.grid = pl.sk.blocks;
  const std::string plan = v4_family_reason(V15Name::kName, a, lim, limits);
  if (!plan.empty()) return plan;
  return V15Copy::maps_reason(a);
}

size_t v15_workspace_bytes(const DecodeArgs& a, const DecodeTuning& tu) {
  return v15_plan(a, current_launch_limits(), tu).workspace;
}

void v15_run(const DecodeArgs& a, const DecodeTuning& tu, void* workspace, cudaStream_t stream) {
  const V15Plan pl = v15_plan(a, current_launch_limits(), tu);
  if (pl.sk.blocks == 0) return;  // no sequences
  const PageGeometry& g = a.kv.geom;
  V15Params p{};
  set_call_params(p, a);
  p.num_qtiles = pl.num_qtiles;
  p.num_splits = 0;  // unused: each segment's StreamKSegmentDest says where its result goes
  p.chunk_tokens = static_cast<int>(pl.sk.item_tiles * pl.unit_tokens);  // start-up loads' limit
  p.hq = pl.hq;
  p.unit_tokens = pl.unit_tokens;
  p.item_tiles = pl.sk.item_tiles;
  p.total_units = pl.sk.units;
  p.num_blocks = pl.sk.blocks;
  if (pl.merge) {
    p.partial_o = static_cast<float*>(workspace);
    p.partial_lse = reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + pl.partial_o_bytes);
  }
  const TmaPoolMaps maps = V15Copy::maps(a);
  KVLAB_CUDA_CHECK(bulk_dispatch<V15Copy>(g.head_dim, g.format, [&](auto d, auto fm) {
    constexpr int kD = decltype(d)::value;
    auto kernel = stream_k_bulk_decode_kernel<kD, decltype(fm)::value>;
    cudaError_t r = allow_dynamic_smem(kernel, pl.smem);
    if (r != cudaSuccess) return r;
    kernel<<<static_cast<unsigned>(pl.sk.blocks), kV4Threads, pl.smem, stream>>>(p, maps);
    r = cudaGetLastError();
    if (r != cudaSuccess || !pl.merge) return r;
    return stream_k_launch_merge<kD, V15MergeUnits>(p, tu.pdl, stream);
  }));
  KVLAB_CHECK_LAUNCH();
}

}  // namespace

DecodeVersionImpl make_v15_mma_decode_stream_k() {
  DecodeVersionImpl v;
  v.info = {15, V15Name::kName,
            "v10's tensor copies and tile compute on a persistent stream-K grid: one block per "
            "resident slot, equal contiguous ranges of the items' 16-token tiles (counted from "
            "the length bound), items shared by blocks merged in a second kernel (bf16/fp16, "
            "fp8_e4m3 at head_dim >= 128, HND or NHD, block_size a multiple of 16)"};
  v.info.in_scope = [](const PageGeometry& g) { return bulk_layout_reason<V15Copy>(g).empty(); };
  v.unsupported_reason = v15_unsupported_reason;
  v.workspace_bytes = v15_workspace_bytes;
  v.run = v15_run;
  return v;
}

}  // namespace kvlab::gpu::detail
