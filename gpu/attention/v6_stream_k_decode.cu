// v6_stream_k_decode.cu: tensor-core GQA decode with a persistent stream-K grid and Hopper
// bulk copies: at most one wave of blocks; the work (16-token tiles of every (sequence, KV
// head, query tile) item, counted from the real sequence lengths on the device) is cut into
// equal contiguous ranges, one per block; each warp streams its tiles with one bulk copy
// per K and V row completing on a shared-memory barrier; items shared by several blocks are
// merged by a programmatic-dependent-launch merge kernel.
//
// What changed vs v4/v5, and why (gpu/attention/TUNING.md, step 10: the prediction and,
// after the H100 run, the measured result):
//  * Scheduling. v4/v5 cut every item into equal splits from the length BOUND and launch
//    one block per (item, split): the last wave is partly empty (v4 at 64 x 8k: 1.94
//    waves, ~3 % of the time lost at the end), splits past a short sequence's end still
//    cost a block, and at batch 1-8 the blocks start and finish together, so the slowest
//    one sets the time. v6 launches min(resident slots, work / 8 tiles) blocks once; each
//    block scans the lengths (every block redundantly: a few hundred bytes from L2), takes
//    units [c*W/C, (c+1)*W/C) of the W tiles in item order (decode_plan.h, stream-K
//    helpers, CPU-tested) and walks them as segments, one per item its range touches. The
//    ranges differ by at most one tile, whatever the batch and the length mix.
//  * Copies. A tile's K and V rows are fetched by one cp.async.bulk per row (NHD / HND: a
//    token's row of one KV head is contiguous) into the padded row layout the operand
//    loaders read, completing as transaction bytes on the stage's mbarrier, with an L2
//    evict-first hint: one instruction per 128-512-byte row instead of 8-32 16-byte
//    cp.async, no registers for addresses. Rows past the end are zero-filled by cp.async
//    (V only: P = 0 there but 0 x NaN garbage would not be 0), scales keep their 4-byte
//    cp.async, and both are counted on the same barrier through cp.async.mbarrier.arrive.noinc.
//    Split-x pools (16-byte chunks of a row lie block_size x 16 bytes apart) keep v4's
//    chunk copies and V gather, counted the same way.
//  * Pipeline across items. Each warp's pipeline runs over its whole range: the tiles of
//    the next item are in flight while an item's 4 warps are merged (in a separate, half-
//    size merge area, CompactWarpMerge), and the next item's Q slice is loaded while the
//    current item runs. v4/v5 drain their pipeline at the end of every block.
//  * Merge. A block writes an item it holds whole straight to O; an item shared by blocks
//    leaves one normalized partial result per block (slot 0: the first item of a range,
//    slot 1: the last). The merge kernel (stream_k_split_merge.cuh, shared with v15; one
//    block per output row, launched with programmatic dependent launch so its launch overlaps
//    the decode's tail) finds an item's parts from the item's first unit and W, which the
//    decode blocks record (V6MergeUnits). No
//    workspace content is assumed on entry: every word the merge reads is written by the
//    decode kernel of the same call.
//  * Compute: v5's (mma_tile_compute.cuh; one operand loader per format, 16-token warp
//    tiles, 2 stages, register caps for 2-4 resident blocks per SM).
// Numerics as v4: natural-log logits, exp(s - m) formed before the base-2 scaling, the 4
// warps and the parts merged by log-sum-exp; a bad table entry or length gives NaN rows.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <type_traits>

#include "gpu/attention/decode_impl.h"
#include "gpu/attention/decode_plan.h"
#include "gpu/attention/kv_vec.cuh"
#include "gpu/attention/mma_operands.cuh"
#include "gpu/attention/mma_ptx.cuh"
#include "gpu/attention/mma_tile_compute.cuh"
#include "gpu/attention/mma_tile_copy.cuh"
#include "gpu/attention/softmax_state.h"
#include "gpu/attention/stream_k_split_merge.cuh"
#include "gpu/core/cuda_check.h"
#include "gpu/core/device_info.h"
#include "gpu/dispatch.cuh"

namespace kvlab::gpu::detail {
namespace {

constexpr int kV6Warps = 4;
constexpr int kV6Threads = kV6Warps * kWarpSize;
constexpr int kV6Tile = 16;       // tokens per warp tile (the mma M): the stream-K unit
constexpr int kV6Stages = 2;      // tiles per warp: one computed, one in flight
constexpr int kV6ScratchBytes = 64;

// The register cap of an instance: 4 resident blocks (128 registers) for FP8 with a pool
// scale, 3 for per-token FP8 and FP4, 2 for 16-bit (whose 2-stage tiles of 8.5 KB per warp
// fill the shared memory at 2 blocks), 1 for head_dim 256.
constexpr int v6_min_blocks(int d, KvFormat f) {
  return d > 128 ? 1
                 : ((f == KvFormat::kFP8E4M3 || f == KvFormat::kFP8E5M2)
                        ? 4
                        : ((f == KvFormat::kBF16 || f == KvFormat::kFP16) ? 2 : 3));
}

// Shared memory of a block:
//   [warp w: kV6Stages stages | tile offsets | stage mbarriers] x 4
//   [merge area (CompactWarpMerge)] [Q^T fragments hi | lo | column scales] [scratch]
struct V6Smem {
  int stage_bytes, warp_bytes, merge_offset, qfrag_offset, scratch_offset, total;
};
template <int D, KvFormat F>
KVLAB_HD constexpr V6Smem v6_smem() {
  V6Smem s{};
  s.stage_bytes = mma::TileStage<F, D, kV6Tile>::kBytes;
  s.warp_bytes = kV6Stages * s.stage_bytes + mma::TileCopy<F, D, kV6Tile>::kOffsetBytes +
                 mma::round16(kV6Stages * 8);
  s.merge_offset = kV6Warps * s.warp_bytes;
  s.qfrag_offset = s.merge_offset + mma::CompactWarpMerge<F, D>::kBytes;
  s.scratch_offset = s.qfrag_offset + 2 * (D / 16) * kWarpSize * 8 + mma::kHeadsPerTile * 4;
  s.total = s.scratch_offset + kV6ScratchBytes;
  return s;
}

struct V6Params : mma::CallParams {
  int num_qtiles;      // ceil(group_size / 8)
  int hq;              // items per sequence: num_kv_heads x num_qtiles
  int64_t num_blocks;  // the decode grid (the merge kernel's C)
  // Workspace (every word the merge reads is written by the decode kernel of the call):
  float* partial_o;      // [blocks][2 slots][8 heads][head_dim]  normalized partial results
  float* partial_lse;    // [blocks][2 slots][8 heads]
  int64_t* item_first;   // [num_seqs * hq] first unit of each item with tiles
  int64_t* total_units;  // [1] W
};

// Output rows of an empty sequence (zeros, lse -inf) or one with an invalid length (NaN).
__device__ __forceinline__ void v6_write_empty_rows(const V6Params& p, int seq, bool bad, int D) {
  const float v = bad ? NAN : 0.0f;
  const uint16_t bits = round_act(v, p.q_bf16);
  const uint32_t w = static_cast<uint32_t>(bits) | (static_cast<uint32_t>(bits) << 16);
  uint16_t* o = static_cast<uint16_t*>(p.o) + static_cast<int64_t>(seq) * p.num_qo_heads * D;
  for (int e = threadIdx.x * 8; e < p.num_qo_heads * D; e += kV6Threads * 8)
    *reinterpret_cast<uint4*>(o + e) = make_uint4(w, w, w, w);
  if (p.lse)
    for (int h = threadIdx.x; h < p.num_qo_heads; h += kV6Threads)
      p.lse[static_cast<int64_t>(seq) * p.num_qo_heads + h] = bad ? NAN : -INFINITY;
}

// grid: the persistent blocks of the plan (<= one wave), 128 threads; dynamic shared
// memory v6_smem<D, F>().total.
template <int D, KvFormat F>
__global__ void __launch_bounds__(kV6Threads, v6_min_blocks(D, F))
    v6_decode_kernel(const V6Params p) {
  using Op = mma::MmaOperand<F, D>;
  using Copy = mma::TileCopy<F, D, kV6Tile>;
  using Stage = mma::TileStage<F, D, kV6Tile>;
  using Merge = mma::CompactWarpMerge<F, D>;
  constexpr V6Smem kS = v6_smem<D, F>();
  constexpr int kOE = D / 16;
  extern __shared__ __align__(16) uint8_t smem[];
  mma::pdl_launch_dependents();  // the merge kernel may start launching (it waits for us)

  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int t = lane & 3;
  const int64_t C = gridDim.x, c = blockIdx.x;
  const int64_t bound = p.seq_len_bound;
  const int bs = p.pools.geom.block_size;
  const bool split_x = p.pools.geom.layout == KvLayout::kSplitX;
  auto len_of = [&](int s) { return __ldg(p.seq_lens + s); };

  uint8_t* wbase = smem + warp * kS.warp_bytes;
  int64_t* offs = reinterpret_cast<int64_t*>(wbase + kV6Stages * kS.stage_bytes);
  const mma::TileOffsets off{offs, offs + kV6Tile, offs + 2 * kV6Tile};
  uint64_t* bars = reinterpret_cast<uint64_t*>(offs + 3 * kV6Tile);  // [kV6Stages]
  uint8_t* merge_area = smem + kS.merge_offset;
  uint2* qf_hi = reinterpret_cast<uint2*>(smem + kS.qfrag_offset);  // [D/16][32]
  uint2* qf_lo = qf_hi + (D / 16) * kWarpSize;
  float* colscale = reinterpret_cast<float*>(qf_lo + (D / 16) * kWarpSize);  // [8]
  int64_t* scratch = reinterpret_cast<int64_t*>(smem + kS.scratch_offset);   // [8]

  if (lane == 0) {
    // Each phase: the 32 lanes' cp.async arrivals (.noinc) and lane 0's arrival.
#pragma unroll
    for (int s = 0; s < kV6Stages; ++s) mma::mbarrier_init(&bars[s], kWarpSize + 1);
    mma::fence_barrier_init();
  }

  // ---- the work: W units from the real lengths; rows of empty / invalid sequences.
  int64_t mine = 0;
  for (int base = 0; base < p.num_seqs; base += kV6Threads) {
    const int s = base + tid;
    if (s < p.num_seqs) mine += p.hq * streamk_seq_tiles(len_of(s), bound, kV6Tile);
  }
#pragma unroll
  for (int off_ = 16; off_ > 0; off_ /= 2) mine += __shfl_xor_sync(0xFFFFFFFFu, mine, off_);
  if (lane == 0) scratch[warp] = mine;
  __syncthreads();  // also: the barrier initializations are visible to the block
  const int64_t W = scratch[0] + scratch[1] + scratch[2] + scratch[3];
  if (c == 0 && tid == 0) *p.total_units = W;
  for (int64_t s = c; s < p.num_seqs; s += C) {  // block-uniform loop
    const int len = len_of(static_cast<int>(s));
    if (streamk_seq_tiles(len, bound, kV6Tile) == 0)
      v6_write_empty_rows(p, static_cast<int>(s), len != 0, D);
  }
  const int64_t ub = streamk_unit_begin(c, W, C), ue = streamk_unit_begin(c + 1, W, C);
  if (ub >= ue) return;

  // ---- the sequence holding unit ub: a block-wide scan of the units per sequence.
  __syncthreads();  // everyone has read scratch[0..3]
  {
    int64_t before = 0;  // units of the sequences of earlier chunks
    for (int base = 0; base < p.num_seqs; base += kV6Threads) {
      const int s = base + tid;
      const int64_t u = s < p.num_seqs ? p.hq * streamk_seq_tiles(len_of(s), bound, kV6Tile) : 0;
      int64_t incl = u;  // inclusive scan inside the warp
#pragma unroll
      for (int off_ = 1; off_ < kWarpSize; off_ *= 2) {
        const int64_t x = __shfl_up_sync(0xFFFFFFFFu, incl, off_);
        if (lane >= off_) incl += x;
      }
      if (lane == kWarpSize - 1) scratch[4 + warp] = incl;
      __syncthreads();
      int64_t excl = before + incl - u;
      for (int w = 0; w < warp; ++w) excl += scratch[4 + w];
      const int64_t chunk = scratch[4] + scratch[5] + scratch[6] + scratch[7];
      if (u > 0 && excl <= ub && ub < excl + u) scratch[0] = s, scratch[1] = excl;
      __syncthreads();
      if (before + chunk > ub) break;  // found in this chunk (block-uniform)
      before += chunk;
    }
  }
  StreamKCursor seg;  // the block's segment cursor (uniform over the block)
  seg.start(static_cast<int>(scratch[0]), scratch[1], len_of, p.num_seqs, bound, kV6Tile);

  // ---- this warp's units: ub + warp + 4k, k < my_n; its loader (one unit ahead).
  // (A block's range is below 2^31 units: int counters; the plan bounds it.)
  const int my_n =
      ue - ub > warp ? static_cast<int>((ue - ub - warp + kV6Warps - 1) / kV6Warps) : 0;
  StreamKCursor lc = seg;  // the loader's cursor
  struct Next {
    int seq = 0, kv_head = 0, first = 0, end = 0;
  } nx;
  int pf[Copy::kTPL];
  uint32_t bad_stages = 0;  // stages whose tile met an out-of-range page
  const uint64_t l2_policy = mma::l2_evict_first_policy();
  auto prefetch = [&](int i) {  // descriptor and page entries of my unit i (i = 0, 1, ...)
    if (i == 0)
      lc.seek(ub + warp, len_of, p.num_seqs, p.hq, bound, kV6Tile);  // one division per warp
    else
      lc.advance(kV6Warps, len_of, p.num_seqs, p.hq, bound, kV6Tile);  // none per tile
    nx.seq = lc.seq;
    nx.kv_head = lc.item / p.num_qtiles;
    nx.first = static_cast<int>(lc.tile) * kV6Tile;
    nx.end = lc.len;
    Copy::fetch_pages(p.block_table + static_cast<int64_t>(nx.seq) * p.max_blocks_per_seq, nx.first,
                      nx.end, bs, lane, pf);
  };
  auto load = [&](int i) {  // my unit i (described by nx / pf) into stage i % kV6Stages
    const int st = i % kV6Stages;
    // Earlier generic writes of this stage (zero fills, the gathers) and the reads of its
    // last tile come before the bulk copies that overwrite it.
    mma::fence_proxy_async_smem();
    __syncwarp();
    const Stage sg(wbase + st * kS.stage_bytes);
    bool bad = false;
    Copy::stage_offsets(p.pools.geom, nx.kv_head, pf, nx.first, nx.end, lane, off, bad);
    __syncwarp();
    if (!split_x) {
      const int rows = Copy::valid_rows(off, lane);
      if (lane == 0) mma::mbarrier_expect_tx(&bars[st], rows * 2 * Op::kRowBytes);
      __syncwarp();
      Copy::copy_rows_bulk(p.pools, sg, off, lane, &bars[st], l2_policy);
    } else {
      Copy::copy_rows_cp_async(p.pools, sg, off, lane, false);
      Copy::gather_split_x_v(p.pools, sg, off, lane);
    }
    Copy::copy_scales(p.pools, sg, off, lane);
    mma::cp_async_mbarrier_arrive_noinc(&bars[st]);  // this lane's cp.async copies count too
    __syncwarp();
    if (lane == 0) mma::mbarrier_arrive(&bars[st]);
    if (__any_sync(0xFFFFFFFFu, bad)) bad_stages |= 1u << st;
  };

  // ---- the first segment's Q slice and the pipeline prologue fly together.
  const int hl = tid >> 4, part = tid & 15;  // Q slices, outputs: 16 threads per head
  auto q_row = [&](int seq, int item) -> int64_t {
    const int gl = (item % p.num_qtiles) * mma::kHeadsPerTile + hl;
    return gl < p.group_size ? static_cast<int64_t>(seq) * p.num_qo_heads +
                                   (item / p.num_qtiles) * p.group_size + gl
                             : -1;
  };
  mma::QSlice<D> qs;
  mma::load_q_slice<D>(p.q, q_row(seg.seq, seg.item_in_seq(ub)), part, qs);
  int i_load = 0;
  if (my_n > 0) prefetch(0);
#pragma unroll
  for (int s = 0; s < kV6Stages - 1; ++s) {
    if (i_load < my_n) {
      load(i_load);
      if (++i_load < my_n) prefetch(i_load);
    }
  }

  const bool q_lo = !Op::kQkF16 && !p.q_bf16;  // an f16 Q split into bf16 hi + lo
  int i_comp = 0;                              // my next unit to compute
  for (int64_t u = ub; u < ue;) {
    // ---- segment: this block's units [u, seg_end) of item `item` of sequence seg.seq
    const int item = seg.item_in_seq(u);
    const int64_t item_first = seg.first + item * seg.tiles;
    const int64_t seg_end = min(ue, item_first + seg.tiles);
    const int seq = seg.seq, len = seg.len;
    // Q^T fragments (every warp is past the previous segment's tiles: its merge barriers).
    mma::q_fragments<Op, D>(qs, p.q_bf16, p.qk_scale, qf_hi, qf_lo, colscale);
    if (seg_end < ue) {  // the next segment's Q slice flies during this one
      StreamKCursor nseg = seg;
      nseg.seek(seg_end, len_of, p.num_seqs, p.hq, bound, kV6Tile);
      mma::load_q_slice<D>(p.q, q_row(nseg.seq, nseg.item_in_seq(seg_end)), part, qs);
    }
    __syncthreads();
    const float cs0 = colscale[2 * t], cs1 = colscale[2 * t + 1];

    mma::WarpAttention<F, D, kV6Tile> wa;
    wa.reset();
    bool bad = false;
    const int my_end =
        seg_end - ub > warp ? static_cast<int>((seg_end - ub - warp + kV6Warps - 1) / kV6Warps) : 0;
    for (; i_comp < my_end; ++i_comp) {
      const int st = i_comp % kV6Stages;
      mma::mbarrier_wait(&bars[st], static_cast<uint32_t>((i_comp / kV6Stages) & 1));
      if (i_load < my_n) {  // refill the stage the previous tile used
        load(i_load);
        if (++i_load < my_n) prefetch(i_load);
      }
      if ((bad_stages >> st) & 1u) bad = true, bad_stages &= ~(1u << st);
      const Stage sg(wbase + st * kS.stage_bytes);
      const int64_t first = (ub + warp + kV6Warps * i_comp - item_first) * kV6Tile;
      wa.tile(sg.sk, sg.sv, sg.sks, sg.svs, len - static_cast<int>(first), qf_hi, qf_lo, q_lo, cs0,
              cs1, lane);
    }

    // ---- merge the 4 warps (CompactWarpMerge), then O or a partial result.
    wa.reduce_sums();
    Merge::publish(merge_area, warp, lane, wa);
    bad = __syncthreads_or(bad);
    Merge::accumulate(merge_area, warp, lane, wa);
    __syncthreads();
    const bool whole = item_first >= ub && item_first + seg.tiles <= ue;
    if (tid == 0 && item_first >= ub)
      p.item_first[static_cast<int64_t>(seq) * p.hq + item] = item_first;
    const int gl = (item % p.num_qtiles) * mma::kHeadsPerTile + hl;
    if (gl < p.group_size) {
      float o[kOE], mm, ll;
      Merge::combine(merge_area, hl, part, o, mm, ll);
      const float inv = p.out_scale * Op::kOutScale / ll;
#pragma unroll
      for (int e = 0; e < kOE; ++e) o[e] = bad ? NAN : o[e] * inv;
      const float lse = bad ? NAN : mm + logf(ll);
      if (whole) {
        const int64_t row =
            static_cast<int64_t>(seq) * p.num_qo_heads + (item / p.num_qtiles) * p.group_size + gl;
        mma::store_act_n<kOE>(p.o, row * D + part * kOE, o, p.q_bf16);
        if (part == 0 && p.lse) p.lse[row] = lse;
      } else {
        const int slot = streamk_partial_slot(c, item_first, W, C);
        const int64_t prow = (c * 2 + slot) * mma::kHeadsPerTile + hl;
        float4* dst = reinterpret_cast<float4*>(p.partial_o + prow * D + part * kOE);
#pragma unroll
        for (int e = 0; e < kOE; e += 4)
          dst[e / 4] = make_float4(o[e], o[e + 1], o[e + 2], o[e + 3]);
        if (part == 0) p.partial_lse[prow] = lse;
      }
    }
    u = seg_end;
    if (u < ue) seg.seek(u, len_of, p.num_seqs, p.hq, bound, kV6Tile);
  }
}

// The merge's view of v6's partition (stream_k_split_merge.cuh): W and the items' first units
// come from the real lengths (the decode blocks record them), so every part holds tokens; an
// empty or invalid sequence's rows were written by the decode kernel.
struct V6MergeUnits {
  static __device__ StreamKRowParts parts(const V6Params& p, int seq, int item) {
    StreamKRowParts r;
    const int64_t tiles = streamk_seq_tiles(p.seq_lens[seq], p.seq_len_bound, kV6Tile);
    if (tiles == 0) return r;
    r.W = *p.total_units;
    r.C = p.num_blocks;
    r.first = p.item_first[static_cast<int64_t>(seq) * p.hq + item];
    r.parts = streamk_item_parts(r.first, tiles, r.W, r.C);
    if (r.parts > 1) r.action = StreamKRowParts::kMerge;  // else held whole by one block
    return r;
  }
};

// ------------------------------------------------------------------ host side
template <class Fn>
cudaError_t v6_dispatch(int head_dim, KvFormat format, Fn&& fn) {
  return KVLAB_DISPATCH_HEAD_DIM(head_dim, kD, [&] {
    return KVLAB_DISPATCH_KV_FORMAT(format, kF, [&] {
      return fn(std::integral_constant<int, kD>{}, std::integral_constant<KvFormat, kF>{});
    });
  });
}

size_t v6_smem_bytes(int head_dim, KvFormat f) {
  size_t bytes = 0;
  v6_dispatch(head_dim, f, [&](auto d, auto fm) {
    bytes = static_cast<size_t>(v6_smem<decltype(d)::value, decltype(fm)::value>().total);
    return cudaSuccess;
  });
  return bytes;
}

// Resident blocks per SM of the (head_dim, format) instance (occupancy API, cached per
// device and instance; 0 when the block does not fit).
int v6_blocks_per_sm(int device, int head_dim, KvFormat f, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int>, int> cache;
  const auto key = std::make_tuple(device, head_dim, static_cast<int>(f));
  std::lock_guard<std::mutex> lock(mu);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int n = 0;
  v6_dispatch(head_dim, f, [&](auto d, auto fm) {
    auto kernel = v6_decode_kernel<decltype(d)::value, decltype(fm)::value>;
    if (smem > 48 * 1024)
      KVLAB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
    KVLAB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kV6Threads, smem));
    return cudaSuccess;
  });
  cache[key] = n;
  return n;
}

struct V6Plan {
  int num_qtiles = 1, hq = 0;
  StreamKPlan sk;
  size_t smem = 0;
  int blocks_per_sm = 0;
  size_t partial_o_bytes = 0, partial_lse_bytes = 0, item_first_bytes = 0, workspace = 0;
};

V6Plan v6_plan(const DecodeArgs& a, const LaunchLimits& lim, const DecodeTuning& tu) {
  V6Plan pl;
  const PageGeometry& g = a.kv.geom;
  pl.smem = v6_smem_bytes(g.head_dim, g.format);
  pl.num_qtiles = (a.group_size() + mma::kHeadsPerTile - 1) / mma::kHeadsPerTile;
  pl.hq = g.num_kv_heads * pl.num_qtiles;
  if (pl.smem > static_cast<size_t>(lim.smem_per_block_optin)) return pl;
  pl.blocks_per_sm = v6_blocks_per_sm(lim.device, g.head_dim, g.format, pl.smem);
  StreamKPlanInput in;
  in.items = static_cast<int64_t>(a.num_seqs) * pl.hq;
  in.seq_len_bound = seq_len_bound64(a);
  in.tile_tokens = kV6Tile;
  in.warps = kV6Warps;
  in.slots = static_cast<int64_t>(lim.sm_count) * std::max(1, pl.blocks_per_sm);
  pl.sk = plan_stream_k(in, tu);
  const auto up16 = [](size_t b) { return (b + 15) / 16 * 16; };
  pl.partial_o_bytes =
      up16(static_cast<size_t>(pl.sk.blocks) * 2 * mma::kHeadsPerTile * g.head_dim * sizeof(float));
  pl.partial_lse_bytes =
      up16(static_cast<size_t>(pl.sk.blocks) * 2 * mma::kHeadsPerTile * sizeof(float));
  pl.item_first_bytes = up16(static_cast<size_t>(in.items) * sizeof(int64_t));
  pl.workspace = pl.partial_o_bytes + pl.partial_lse_bytes + pl.item_first_bytes + 16;
  return pl;
}

std::string v6_unsupported_reason(const DecodeArgs& a, const DecodeTuning& tu) {
  const LaunchLimits lim = current_launch_limits();
  const V6Plan pl = v6_plan(a, lim, tu);
  std::ostringstream os;
  if (pl.smem > static_cast<size_t>(lim.smem_per_block_optin)) {
    os << "v6 needs " << pl.smem << " bytes of shared memory per block, the device allows "
       << lim.smem_per_block_optin;
    return os.str();
  }
  if (pl.blocks_per_sm < 1) {
    os << "v6's block (" << kV6Threads << " threads, " << pl.smem
       << " bytes of shared memory) cannot be resident";
    return os.str();
  }
  if (static_cast<int64_t>(a.num_seqs) * a.num_qo_heads > INT32_MAX) {
    os << "v6 merges one block per output row; "
       << static_cast<int64_t>(a.num_seqs) * a.num_qo_heads << " rows exceed the 1-D grid limit";
    return os.str();
  }
  return "";
}

size_t v6_workspace_bytes(const DecodeArgs& a, const DecodeTuning& tu) {
  return v6_plan(a, current_launch_limits(), tu).workspace;
}

void v6_run(const DecodeArgs& a, const DecodeTuning& tu, void* workspace, cudaStream_t stream) {
  const V6Plan pl = v6_plan(a, current_launch_limits(), tu);
  const PageGeometry& g = a.kv.geom;
  V6Params p{};
  set_call_params(p, a);
  p.num_qtiles = pl.num_qtiles;
  p.hq = pl.hq;
  uint8_t* ws = static_cast<uint8_t*>(workspace);
  p.partial_o = reinterpret_cast<float*>(ws);
  p.partial_lse = reinterpret_cast<float*>(ws + pl.partial_o_bytes);
  p.item_first = reinterpret_cast<int64_t*>(ws + pl.partial_o_bytes + pl.partial_lse_bytes);
  p.total_units = reinterpret_cast<int64_t*>(ws + pl.partial_o_bytes + pl.partial_lse_bytes +
                                             pl.item_first_bytes);
  p.num_blocks = pl.sk.blocks;
  KVLAB_CUDA_CHECK(v6_dispatch(g.head_dim, g.format, [&](auto d, auto fm) {
    constexpr int kD = decltype(d)::value;
    constexpr KvFormat kF = decltype(fm)::value;
    auto kernel = v6_decode_kernel<kD, kF>;
    if (pl.smem > 48 * 1024) {
      const cudaError_t r = cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(pl.smem));
      if (r != cudaSuccess) return r;
    }
    kernel<<<static_cast<unsigned>(pl.sk.blocks), kV6Threads, pl.smem, stream>>>(p);
    cudaError_t r = cudaGetLastError();
    if (r != cudaSuccess) return r;
    return stream_k_launch_merge<kD, V6MergeUnits>(p, tu.pdl, stream);
  }));
  KVLAB_CHECK_LAUNCH();
}

}  // namespace

DecodeVersionImpl make_v6_stream_k_decode() {
  DecodeVersionImpl v;
  v.info = {6, "v6_stream_k_decode",
            "tensor-core GQA decode on a persistent stream-K grid (equal tile ranges from the "
            "real lengths), bulk-copied K/V rows completing on mbarriers, pipelines across "
            "items, PDL merge of shared items"};
  v.unsupported_reason = v6_unsupported_reason;
  v.workspace_bytes = v6_workspace_bytes;
  v.run = v6_run;
  return v;
}

}  // namespace kvlab::gpu::detail
