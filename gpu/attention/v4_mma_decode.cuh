// v4_mma_decode.cuh: v4's tensor-core decode kernel, its split merge and its launcher,
// templated on a design point (a Config: pipeline stages, warp tile bytes, register cap).
// v4_mma_decode.cu instantiates it at v4's design point, v5_mma_decode_2stage.cu at v5's.
// The algorithm is described at the top of v4_mma_decode.cu; the parts it is built from:
//   mma_operands.cuh      per-format operand loaders (stored K/V -> exact 16-bit fragments)
//   mma_tile_copy.cuh     the copy pipeline (block table -> page offsets -> cp.async)
//   mma_tile_compute.cuh  Q fragments, one warp's attention over a tile, the warp merge
//   softmax_state.h       the online-softmax state and its merges (CPU-tested)
//   decode_plan.h         the split plan (CPU-tested)
// Everything here is in an unnamed namespace: each version's translation unit instantiates
// only its own Config.
#pragma once

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
#include "gpu/attention/split_arrival.h"
#include "gpu/core/cuda_check.h"
#include "gpu/core/device_info.h"
#include "gpu/dispatch.cuh"

namespace kvlab::gpu::detail {
namespace {

constexpr int kV4Warps = 4;
constexpr int kV4Threads = kV4Warps * kWarpSize;
constexpr int kMergeWarps = 4;  // merge kernel: 4 warps per output row
constexpr int kMergeBatch = 8;  // splits each merge warp loads at once

// Tiles a warp prefetches into L2 beyond its pipeline stages (Cfg::kL2PrefetchTiles; 0 when
// the design point has none: v4, v5).
template <class Cfg, class = void>
struct L2PrefetchTiles {
  static constexpr int value = 0;
};
template <class Cfg>
struct L2PrefetchTiles<Cfg, std::void_t<decltype(Cfg::kL2PrefetchTiles)>> {
  static constexpr int value = Cfg::kL2PrefetchTiles;
};

// Tokens of one warp tile at a design point: about Cfg::kTileBytes of K+V per pipeline
// stage, 16..64 tokens (a power of two: whole mma passes).
template <class Cfg, int D, KvFormat F>
KVLAB_HD constexpr int v4_warp_tile() {
  const int rb = D * kv_elem_bits(kv_elem_of(F)) / 8;
  const int wt = Cfg::kTileBytes / (2 * rb);
  return wt < 16 ? 16 : (wt > 64 ? 64 : wt);
}

// Shared memory of a block (host and device agree through this function):
//   [warp 0: kStages stages | tile offsets] ... [warp 3: ...]   (reused by the warp merge)
//   [Q^T fragments hi | lo | column scales]
struct V4Smem {
  int warp_tile, stage_bytes, warp_bytes, qfrag_bytes, merge_bytes, total;
};
template <class Cfg, int D, KvFormat F>
KVLAB_HD constexpr V4Smem v4_smem() {
  constexpr int kWT = v4_warp_tile<Cfg, D, F>();
  V4Smem s{};
  s.warp_tile = kWT;
  s.stage_bytes = mma::TileStage<F, D, kWT>::kBytes;
  s.warp_bytes = Cfg::kStages * s.stage_bytes + mma::TileCopy<F, D, kWT>::kOffsetBytes;
  s.qfrag_bytes = 2 * (D / 16) * kWarpSize * 8 + mma::kHeadsPerTile * 4;
  s.merge_bytes = mma::WarpMerge<F, D, kV4Warps>::kBytes;
  const int pipe = kV4Warps * s.warp_bytes;
  s.total = (pipe > s.merge_bytes ? pipe : s.merge_bytes) + s.qfrag_bytes;
  return s;
}

struct V4Params : mma::CallParams {
  int num_qtiles;  // ceil(group_size / 8)
  int num_splits;
  int chunk_tokens;    // tokens per split
  float* partial_o;    // [num_seqs * num_qo_heads, num_splits, head_dim]  (num_splits > 1)
  float* partial_lse;  // [num_seqs * num_qo_heads, num_splits]
  // The last-block merge (v12, last_block_split_merge.cuh) and the shared tiles (v16): one
  // arrival / claim word per item [num_seqs * num_kv_heads * num_qtiles] and this launch's tag
  // (split_arrival.h); null / 0 for the other versions.
  unsigned long long* arrivals;
  uint64_t arrival_tag;
};

// What a block loads before it knows its sequence length (TUNING.md, step 7): the raw Q
// slice of this thread and the block-table entries of its warp's first tile. A split's
// token range starts at split * chunk_tokens whatever the length, so these loads go out
// together with the length's instead of one round trip after it; entries past the length
// are never used (the tile copy checks tok < end), and the table row is read only inside
// [0, max_blocks_per_seq).
template <class Cfg, int D, KvFormat F>
struct V4Startup {
  static constexpr int kWT = v4_warp_tile<Cfg, D, F>();
  mma::QSlice<D> q;
  int pages[mma::TileCopy<F, D, kWT>::kTPL];
};

// Blocks of kThreads > 128: the Q slices are the first 128 threads' (the others load none).
template <class Cfg, int D, KvFormat F, int kThreads = kV4Threads>
__device__ __forceinline__ void v4_startup_loads(const V4Params& p, int seq, int kv_head, int qtile,
                                                 int start, V4Startup<Cfg, D, F>& su) {
  constexpr int kWT = V4Startup<Cfg, D, F>::kWT;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int hl = tid >> 4, part = tid & 15;
  const int gl = qtile * mma::kHeadsPerTile + hl;
  const bool q_thread = kThreads == kV4Threads || tid < kV4Threads;
  const int64_t qrow =
      q_thread && gl < p.group_size
          ? static_cast<int64_t>(seq) * p.num_qo_heads + kv_head * p.group_size + gl
          : -1;
  mma::load_q_slice<D>(p.q, qrow, part, su.q);
  const int32_t* table = p.block_table + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const int64_t limit =
      min(static_cast<int64_t>(start) + p.chunk_tokens,
          min(static_cast<int64_t>(p.seq_len_bound),
              static_cast<int64_t>(p.max_blocks_per_seq) * p.pools.geom.block_size));
  mma::TileCopy<F, D, kWT>::fetch_pages(table, start + warp * kWT, static_cast<int>(limit),
                                        p.pools.geom.block_size, lane, su.pages);
}

// The (sequence, KV head, query tile, split) of this block: grid num_splits x num_seqs x
// num_kv_heads x num_qtiles blocks, split slowest; kSplitFastest: split fastest instead
// (the splits of one item are consecutive blocks: one thread-block cluster, v11).
struct V4Item {
  int seq, kv_head, qtile, split;
};
template <bool kSplitFastest = false>
__device__ __forceinline__ V4Item v4_item(const V4Params& p) {
  int64_t b = blockIdx.x;
  V4Item it;
  if constexpr (kSplitFastest) {
    it.split = static_cast<int>(b % p.num_splits);
    b /= p.num_splits;
  }
  it.qtile = static_cast<int>(b % p.num_qtiles);
  b /= p.num_qtiles;
  it.kv_head = static_cast<int>(b % p.pools.geom.num_kv_heads);
  b /= p.pools.geom.num_kv_heads;
  it.seq = static_cast<int>(b % p.num_seqs);
  if constexpr (!kSplitFastest) it.split = static_cast<int>(b / p.num_seqs);
  return it;
}

// The rows of an item with nothing to attend to: NaN for a bad length, zeros / -inf lse for an
// empty sequence; written by the block's first 128 threads (thread = head, 16th of its dims).
template <int D, int kThreads = kV4Threads>
__device__ __forceinline__ void v4_write_empty_rows(const V4Params& p, const V4Item& it,
                                                    bool bad_len) {
  constexpr int kOE = D / 16;
  const int hl = threadIdx.x >> 4, part = threadIdx.x & 15;
  const int gl = it.qtile * mma::kHeadsPerTile + hl;
  if (kThreads != kV4Threads && threadIdx.x >= kV4Threads) return;
  if (gl >= p.group_size) return;
  const int64_t row =
      static_cast<int64_t>(it.seq) * p.num_qo_heads + it.kv_head * p.group_size + gl;
  float x[kOE];
#pragma unroll
  for (int e = 0; e < kOE; ++e) x[e] = bad_len ? NAN : 0.0f;
  mma::store_act_n<kOE>(p.o, row * D + part * kOE, x, p.q_bf16);
  if (part == 0 && p.lse) p.lse[row] = bad_len ? NAN : -INFINITY;
}

// The block's token range [start, end) from the sequence length; false when there is nothing
// to attend to (the rows are then written here). Single split: NaN rows for a bad length,
// zero rows / -inf for an empty sequence. Multi-split: the merge kernel handles both (it
// reads only splits that hold tokens); with kSplit0Writes (the last-block merge, where no
// split holding tokens arrives for such an item) split 0 writes them as a single split does.
template <int D, bool kSplit0Writes = false, int kThreads = kV4Threads>
__device__ __forceinline__ bool v4_token_range(const V4Params& p, const V4Item& it, int start,
                                               int& end) {
  const int len = p.seq_lens[it.seq];
  const bool bad_len = len < 0 || len > p.seq_len_bound;
  end = bad_len ? 0 : min(len, start + p.chunk_tokens);
  if (!bad_len && start < end) return true;
  // Multi-split, split 0 without tokens: the length is bad or 0 (split 0 starts at token 0).
  if (p.num_splits != 1 && !(kSplit0Writes && it.split == 0)) return false;
  v4_write_empty_rows<D, kThreads>(p, it, bad_len);
  return false;
}

// Where a block's result goes (v4_merge_warps_and_store): the output rows when whole(p), else
// the workspace's partial row prow(p, row, hl) (and its lse). The KV-split family's: split
// `split` of num_splits, partial rows [row][num_splits]. A stream-K block (v15) passes its own.
struct V4SplitDest {
  int split;
  __device__ bool whole(const V4Params& p) const { return p.num_splits == 1; }
  __device__ int64_t prow(const V4Params& p, int64_t row, int) const {
    return row * p.num_splits + split;
  }
};

// One (query head hl, 16th `part` of its dims) unit of a block's result: thread (hl, part)
// combines the warp states in `area` (Merge: mma::WarpMerge), normalises, and writes the output
// row `row` and its lse (dest.whole), or the partial row dest.prow and its lse: into the
// workspace, or with `smem_partial` into the block's shared memory ([lse: 8 heads][o: 8
// heads][D] floats). `bad`: a table entry outside the pool was seen (the unit becomes NaN).
template <int D, class Op, class Merge, class Dest>
__device__ __forceinline__ void v4_combine_and_store(const V4Params& p, const uint8_t* area,
                                                     int64_t row, int hl, int part, bool bad,
                                                     float* smem_partial, const Dest& dest) {
  float o[Merge::kOE], mm, ll;
  Merge::combine(area, hl, part, o, mm, ll);
  const float inv = p.out_scale * Op::kOutScale / ll;
#pragma unroll
  for (int e = 0; e < Merge::kOE; ++e) o[e] = bad ? NAN : o[e] * inv;
  const float lse = bad ? NAN : mm + logf(ll);
  if (dest.whole(p)) {
    mma::store_act_n<Merge::kOE>(p.o, row * D + part * Merge::kOE, o, p.q_bf16);
    if (part == 0 && p.lse) p.lse[row] = lse;
  } else {
    const int64_t prow = dest.prow(p, row, hl);
    float4* dst =
        smem_partial ? reinterpret_cast<float4*>(smem_partial + mma::kHeadsPerTile + hl * D +
                                                 part * Merge::kOE)
                     : reinterpret_cast<float4*>(p.partial_o + prow * D + part * Merge::kOE);
#pragma unroll
    for (int e = 0; e < Merge::kOE; e += 4)
      dst[e / 4] = make_float4(o[e], o[e + 1], o[e + 2], o[e + 3]);
    if (part == 0) (smem_partial ? smem_partial[hl] : p.partial_lse[prow]) = lse;
  }
}

// The end of every block body of v4's family (v4, v5, v7: 4 warps; the bulk-copy family: 4
// or kWarps = 8): the warps' row sums, their states merged by log-sum-exp through `smem` (the
// pipeline area: the barrier inside also means every warp is done with its buffers; every
// copy must have landed), then thread (hl = tid / 16, part = tid % 16) of the first 128
// writes head hl's dims [part*D/16, +D/16): the output row
// (single split) or the split's partial row and lse: into the workspace, or with
// `smem_partial` into this block's shared memory, [lse: 8 heads][o: 8 heads][D] floats
// (v11's cluster merge reads it from the other blocks of the cluster); `dest` says which
// (V4SplitDest: the KV split it.split's; a stream-K segment passes its own). `bad`: this thread
// saw a table entry outside the pool (any thread's makes the block's rows NaN).
template <int D, KvFormat F, int kWT, class Op, int kWarps = kV4Warps, class Dest = V4SplitDest>
__device__ __forceinline__ void v4_merge_warps_and_store(const V4Params& p, uint8_t* smem,
                                                         const V4Item& it,
                                                         mma::WarpAttention<F, D, kWT, Op>& wa,
                                                         bool bad, float* smem_partial,
                                                         const Dest& dest) {
  using Merge = mma::WarpMerge<F, D, kWarps>;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  wa.reduce_sums();
  bad = __syncthreads_or(bad);  // also: every warp is done with its pipeline buffers
  Merge::store_warp(smem, warp, lane, wa);
  __syncthreads();
  if (kWarps != kV4Warps && tid >= kV4Threads) return;  // 8 heads x 16 parts: 128 threads

  const int hl = tid >> 4, part = tid & 15;
  const int gl = it.qtile * mma::kHeadsPerTile + hl;
  if (gl >= p.group_size) return;
  const int64_t row =
      static_cast<int64_t>(it.seq) * p.num_qo_heads + it.kv_head * p.group_size + gl;
  v4_combine_and_store<D, Op, Merge>(p, smem, row, hl, part, bad, smem_partial, dest);
}
template <int D, KvFormat F, int kWT, class Op, int kWarps = kV4Warps>
__device__ __forceinline__ void v4_merge_warps_and_store(const V4Params& p, uint8_t* smem,
                                                         const V4Item& it,
                                                         mma::WarpAttention<F, D, kWT, Op>& wa,
                                                         bool bad, float* smem_partial = nullptr) {
  v4_merge_warps_and_store<D, F, kWT, Op, kWarps>(p, smem, it, wa, bad, smem_partial,
                                                  V4SplitDest{it.split});
}

// The block body of one (sequence, KV head, query tile, split) over tokens [start, end).
// blockDim 128 (4 warps); shared memory laid out by v4_smem(). Each warp owns every 4th
// tile of the range and runs its own kStages-deep cp.async pipeline (no block barrier in
// the main loop); the 4 warps are merged by log-sum-exp at the end.
template <class Cfg, int D, KvFormat F>
__device__ __forceinline__ void v4_block(const V4Params& p, uint8_t* smem, const V4Item& it,
                                         int start, int end, const V4Startup<Cfg, D, F>& su) {
  using Op = mma::MmaOperand<F, D>;
  constexpr V4Smem kS = v4_smem<Cfg, D, F>();
  constexpr int kWT = kS.warp_tile;
  constexpr int kStages = Cfg::kStages;
  using Copy = mma::TileCopy<F, D, kWT>;
  using Stage = mma::TileStage<F, D, kWT>;

  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int t = lane & 3;
  const int kv_head = it.kv_head;
  const bool split_x = p.pools.geom.layout == KvLayout::kSplitX;
  const int32_t* table = p.block_table + static_cast<int64_t>(it.seq) * p.max_blocks_per_seq;

  uint8_t* wbase = smem + warp * kS.warp_bytes;
  int64_t* offs = reinterpret_cast<int64_t*>(wbase + kStages * kS.stage_bytes);
  const mma::TileOffsets off{offs, offs + kWT, offs + 2 * kWT};
  uint8_t* qbase = smem + (kV4Warps * kS.warp_bytes > kS.merge_bytes ? kV4Warps * kS.warp_bytes
                                                                     : kS.merge_bytes);
  uint2* qf_hi = reinterpret_cast<uint2*>(qbase);  // [D/16][32] B fragments of Q^T
  uint2* qf_lo = qf_hi + (D / 16) * kWarpSize;     // bf16 operands, f16 Q: the low part
  float* colscale = reinterpret_cast<float*>(qf_lo + (D / 16) * kWarpSize);  // [8]

  // ---- this warp's tiles: every kWarps-th tile of [start, end)
  const int num_tiles = (end - start + kWT - 1) / kWT;
  const int my_tiles = num_tiles > warp ? (num_tiles - warp + kV4Warps - 1) / kV4Warps : 0;
  auto first_token = [&](int i) { return start + (warp + kV4Warps * i) * kWT; };
  bool bad = false;
  int pf[Copy::kTPL];  // table entries of the next tile to load

  auto load_tile = [&](int i, int st) {
    __syncwarp();  // every lane is done reading the offsets of the previous call
    const Stage sg(wbase + st * kS.stage_bytes);
    Copy::stage_offsets(p.pools.geom, kv_head, pf, first_token(i), end, lane, off, bad);
    __syncwarp();
    Copy::copy_rows_cp_async(p.pools, sg, off, lane, !split_x);
    if (split_x) Copy::gather_split_x_v(p.pools, sg, off, lane);
    Copy::copy_scales(p.pools, sg, off, lane);
    cp_async_commit();
  };
  auto prefetch_pages = [&](int i) {
    Copy::fetch_pages(table, first_token(i), end, p.pools.geom.block_size, lane, pf);
  };

  // ---- pipeline prologue first: its loads fly while Q is prepared.
  // The first tile's entries came with the start-up loads.
#pragma unroll
  for (int u = 0; u < Copy::kTPL; ++u) pf[u] = su.pages[u];
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < my_tiles) {
      load_tile(s, s);
      if (s + 1 < my_tiles) prefetch_pages(s + 1);
    } else {
      cp_async_commit();  // uniform group count
    }
  }

  // L2 prefetch (design points with kL2PrefetchTiles = P > 0): tile t is prefetched into L2
  // P iterations before the pipeline loads it, so each warp has P more tiles in flight than
  // its shared-memory stages hold. The prologue covers tiles kStages-1 .. kStages-2+P (their
  // table entries load now, the prefetches issue after Q is prepared); iteration i covers
  // tile i + kStages-1 + P (entries loaded before the tile's compute, used after it).
  constexpr int kPF = L2PrefetchTiles<Cfg>::value;
  const bool l2_prefetch = kPF > 0 && !split_x;
  int pq[kPF > 0 ? kPF : 1][Copy::kTPL];
  if constexpr (kPF > 0) {
    if (l2_prefetch) {
#pragma unroll
      for (int q = 0; q < kPF; ++q)
        Copy::fetch_pages(table, first_token(kStages - 1 + q), end, p.pools.geom.block_size, lane,
                          pq[q]);
    }
  }

  mma::q_fragments<Op, D>(su.q, p.q_bf16, p.qk_scale, qf_hi, qf_lo, colscale);
  if constexpr (kPF > 0) {
    if (l2_prefetch) {
#pragma unroll
      for (int q = 0; q < kPF; ++q)
        Copy::prefetch_rows_l2(p.pools, kv_head, pq[q], first_token(kStages - 1 + q), end, lane);
    }
  }
  __syncthreads();
  const float cs0 = colscale[2 * t], cs1 = colscale[2 * t + 1];
  const bool q_lo = !Op::kQkF16 && !p.q_bf16;  // an f16 Q split into bf16 hi + lo

  mma::WarpAttention<F, D, kWT> wa;
  wa.reset();

  // ---- main loop: wait for tile i, refill the stage tile i-1 used, compute tile i.
  for (int i = 0; i < my_tiles; ++i) {
    cp_async_wait<kStages - 2>();
    __syncwarp();
    const int nxt = i + kStages - 1;
    if (nxt < my_tiles) {
      load_tile(nxt, nxt % kStages);
      if (nxt + 1 < my_tiles) prefetch_pages(nxt + 1);
    } else {
      cp_async_commit();
    }
    if constexpr (kPF > 0) {
      if (l2_prefetch)
        Copy::fetch_pages(table, first_token(nxt + kPF), end, p.pools.geom.block_size, lane, pq[0]);
    }
    const Stage sg(wbase + (i % kStages) * kS.stage_bytes);
    wa.tile(sg.sk, sg.sv, sg.sks, sg.svs, end - first_token(i), qf_hi, qf_lo, q_lo, cs0, cs1, lane);
    if constexpr (kPF > 0) {
      if (l2_prefetch)
        Copy::prefetch_rows_l2(p.pools, kv_head, pq[0], first_token(nxt + kPF), end, lane);
    }
  }
  cp_async_wait<0>();

  // The dependent launch (the split merge, waiting in pdl_wait for this whole grid) may start
  // now that the block's stream has ended (as in the bulk-copy family's bulk_block: triggered at
  // the kernel's start it was slower at the batch-1 split shapes, TUNING.md steps 35 and 38). A
  // block without tokens triggers by exiting.
  mma::pdl_launch_dependents();
  // ---- merge the 4 warps by log-sum-exp through shared memory (the pipeline area).
  v4_merge_warps_and_store<D, F>(p, smem, it, wa, bad);
}

// grid: num_splits x num_seqs x num_kv_heads x num_qtiles blocks (split slowest), 128
// threads; dynamic shared memory v4_smem<Cfg, D, F>().total.
template <class Cfg, int D, KvFormat F>
__global__ void __launch_bounds__(kV4Threads, Cfg::min_blocks(D, F))
    v4_decode_kernel(const V4Params p) {
  extern __shared__ __align__(16) uint8_t smem[];
  const V4Item it = v4_item(p);
  const int start = it.split * p.chunk_tokens;
  V4Startup<Cfg, D, F> su;
  v4_startup_loads<Cfg, D, F>(p, it.seq, it.kv_head, it.qtile, start, su);  // with the length
  int end;
  if (!v4_token_range<D>(p, it, start, end)) return;
  v4_block<Cfg, D, F>(p, smem, it, start, end, su);
}

// Splits that hold tokens for a sequence of length len (ceil(len / chunk)); -2 for a bad
// length (the row becomes NaN).
__device__ __forceinline__ int merge_used_splits(const V4Params& p, int len) {
  return (len < 0 || len > p.seq_len_bound) ? -2 : (len + p.chunk_tokens - 1) / p.chunk_tokens;
}

// grid = rows (one block per (sequence, query head) row), 128 threads.
// o = sum_i exp(lse_i - M) o_i / sum_i exp(lse_i - M); lse = M + log(sum_i exp(lse_i - M)).
// Warp w takes splits w, w + 4, ... in batches of kMergeBatch, each batch's partial rows
// AND their lse values loaded at once (and the first batch together with the sequence
// length: split slots past the length are read but never used), with a running
// per-warp max (LseAccumulator); shared memory combines the 4 warps' (max, sum, o). One L2
// round trip per batch instead of the lse pass, the max, then the partials.
// Lane l holds dims 4l..4l+3 (+128 for head_dim 256).
// kResetWords (v16, whose splits claim an item's tiles from a word per item, p.arrivals): the
// block of each item's first row resets the item's word for the next launch (the whole decode
// grid has completed; split_arrival.h).
template <bool kResetWords = false>
__global__ void __launch_bounds__(kMergeWarps* kWarpSize) v4_merge_kernel(const V4Params p) {
  __shared__ float4 red[kMergeWarps][2][kWarpSize];  // [warp][dims half][lane]
  __shared__ float red_m[kMergeWarps], red_s[kMergeWarps];
  __shared__ int red_bad[kMergeWarps];
  mma::pdl_wait();  // the split kernel has completed and its partials are visible
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x;
  const int seq = static_cast<int>(row / p.num_qo_heads);
  if constexpr (kResetWords) {
    const int qo = static_cast<int>(row % p.num_qo_heads);
    const int gl = qo % p.group_size;  // the row's head in its KV head's group
    if (threadIdx.x == 0 && gl % mma::kHeadsPerTile == 0)
      p.arrivals[(static_cast<int64_t>(seq) * p.pools.geom.num_kv_heads + qo / p.group_size) *
                     p.num_qtiles +
                 gl / mma::kHeadsPerTile] = SplitArrival::kReset;
  }
  const int D = p.pools.geom.head_dim;
  const int halves = (D + 4 * kWarpSize - 1) / (4 * kWarpSize);
  const bool lane_live = lane * 4 < D;
  const float* lse_in = p.partial_lse + row * p.num_splits;
  const float* po = p.partial_o + row * p.num_splits * static_cast<int64_t>(D);
  auto store4 = [&](int d, float a, float b, float c, float e) {
    const uint32_t w0 = static_cast<uint32_t>(round_act(a, p.q_bf16)) |
                        (static_cast<uint32_t>(round_act(b, p.q_bf16)) << 16);
    const uint32_t w1 = static_cast<uint32_t>(round_act(c, p.q_bf16)) |
                        (static_cast<uint32_t>(round_act(e, p.q_bf16)) << 16);
    *reinterpret_cast<uint2*>(static_cast<uint16_t*>(p.o) + row * D + d) = make_uint2(w0, w1);
  };
  LseAccumulator la;  // this warp's running max and sum of exp(lse - max)
  float4 acc[2] = {make_float4(0.0f, 0.0f, 0.0f, 0.0f), make_float4(0.0f, 0.0f, 0.0f, 0.0f)};
  int n = -1;  // splits holding tokens; known after the first batch's loads
  for (int i0 = warp; i0 < p.num_splits; i0 += kMergeWarps * kMergeBatch) {
    float4 x[kMergeBatch][2];
    float l[kMergeBatch];
#pragma unroll
    for (int u = 0; u < kMergeBatch; ++u) {
      const int i = i0 + u * kMergeWarps;
      const bool in = i < p.num_splits;
      l[u] = in ? lse_in[i] : -INFINITY;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        x[u][h] = (in && h < halves && lane_live)
                      ? *reinterpret_cast<const float4*>(po + static_cast<int64_t>(i) * D +
                                                         lane * 4 + h * 4 * kWarpSize)
                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    if (n < 0) {
      n = merge_used_splits(p, p.seq_lens[seq]);
      if (n < 0) break;
    }
    bool use[kMergeBatch];
#pragma unroll
    for (int u = 0; u < kMergeBatch; ++u)
      use[u] = i0 + u * kMergeWarps < n && LseAccumulator::contributes(l[u]);
    mma::merge_fold_batch(la, acc, l, x, use);
  }
  if (n < 0) {  // the first batch never ran (num_splits < warp) or a bad length
    n = merge_used_splits(p, p.seq_lens[seq]);
  }
  if (n == -2 || n == 0) {
    if (warp == 0) {
      const float v = n == -2 ? NAN : 0.0f;
      for (int d = lane * 4; d < D; d += 4 * kWarpSize) store4(d, v, v, v, v);
      if (lane == 0 && p.lse) p.lse[row] = n == -2 ? NAN : -INFINITY;
    }
    return;
  }
  red[warp][0][lane] = acc[0];
  red[warp][1][lane] = acc[1];
  if (lane == 0) red_m[warp] = la.m, red_s[warp] = la.s, red_bad[warp] = la.bad;
  __syncthreads();
  if (warp != 0) return;
  float wm[kMergeWarps], ws[kMergeWarps], lse = 0.0f;
  bool any_bad = false;
#pragma unroll
  for (int w = 0; w < kMergeWarps; ++w)
    wm[w] = red_m[w], ws[w] = red_s[w], any_bad |= red_bad[w] != 0;
  for (int h = 0; h < halves; ++h) {  // lane 0 is live (head_dim >= 64): it computes lse
    if (!lane_live) break;
    float4 y[kMergeWarps];
#pragma unroll
    for (int w = 0; w < kMergeWarps; ++w) y[w] = red[w][h][lane];
    float out[4];
    mma::merge_unit_outputs(wm, ws, y, any_bad, out, lse);
    store4(lane * 4 + h * 4 * kWarpSize, out[0], out[1], out[2], out[3]);
  }
  if (lane == 0 && p.lse) p.lse[row] = lse;
}

// ------------------------------------------------------------------ host side
// The host side every 4-warp kernel of this family shares (v4's design points and the
// bulk-copy family): the plan, the reasons a plan cannot run, the kernel parameters and the
// merge launch. What differs per kernel (its shared memory, its tile, its occupancy query) is
// passed in.

// Every (head_dim, format) instance of a design point, through the one dispatch header.
template <class F>
cudaError_t dispatch_instance(int head_dim, KvFormat format, F&& fn) {
  return KVLAB_DISPATCH_HEAD_DIM(head_dim, kD, [&] {
    return KVLAB_DISPATCH_KV_FORMAT(format, kF, [&] {
      return fn(std::integral_constant<int, kD>{}, std::integral_constant<KvFormat, kF>{});
    });
  });
}

// Raises a kernel's dynamic shared-memory limit when it needs more than the default 48 KB.
template <class Kernel>
cudaError_t allow_dynamic_smem(Kernel kernel, size_t smem) {
  if (smem > 48 * 1024)
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(smem));
  return cudaSuccess;
}

// compute() once per (device, head_dim, format) and Tag (one cache per kernel family /
// design point and per quantity), then the cached value.
template <class Tag, class Compute>
int cached_per_instance(int device, int head_dim, KvFormat f, Compute&& compute) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, int>, int> cache;
  const auto key = std::make_tuple(device, head_dim, static_cast<int>(f));
  std::lock_guard<std::mutex> lock(mu);
  const auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const int n = compute();
  cache[key] = n;
  return n;
}

// Resident blocks per SM of one kernel instance (occupancy API) of `threads` threads, cached
// per Tag and instance (cached_per_instance); 0 when the block does not fit. kernel_of(fn)
// calls fn(kernel) with the instance's kernel.
template <class Tag, class KernelOf>
int cached_blocks_per_sm(int device, int head_dim, KvFormat f, size_t smem, KernelOf&& kernel_of,
                         int threads = kV4Threads) {
  return cached_per_instance<Tag>(device, head_dim, f, [&] {
    int n = 0;
    kernel_of([&](auto kernel) {
      KVLAB_CUDA_CHECK(allow_dynamic_smem(kernel, smem));
      KVLAB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem));
      return cudaSuccess;
    });
    return n;
  });
}

struct V4Plan {
  int num_qtiles = 1;
  SplitPlan split;
  size_t smem = 0, workspace = 0;
  int blocks_per_sm = 0;
  int threads = kV4Threads;  // per block
};

// The plan of a kernel of `warps` warps with `smem` bytes per block and `warp_tile`-token
// tiles; blocks(smem) gives its resident blocks per SM (called only when the block fits). A
// block serves `heads_per_block` KV heads (v14: 8; the others 1), and `tile_warps` of its warps
// share out a chunk's tiles (a split starts on whole rounds of them; -1: all `warps`).
template <class Blocks>
V4Plan v4_family_plan(const DecodeArgs& a, const LaunchLimits& lim, const DecodeTuning& tu,
                      size_t smem, int warp_tile, Blocks&& blocks, int warps = kV4Warps,
                      int heads_per_block = 1, int tile_warps = -1) {
  V4Plan pl;
  const PageGeometry& g = a.kv.geom;
  const int hpb = std::min(g.num_kv_heads, heads_per_block);
  pl.smem = smem;
  pl.threads = warps * kWarpSize;
  pl.num_qtiles = (a.group_size() + mma::kHeadsPerTile - 1) / mma::kHeadsPerTile;
  if (pl.smem > static_cast<size_t>(lim.smem_per_block_optin))
    return pl;  // reported as unsupported
  pl.blocks_per_sm = blocks(pl.smem);
  SplitPlanInput in;
  in.items = static_cast<int64_t>(a.num_seqs) * ((g.num_kv_heads + hpb - 1) / hpb) * pl.num_qtiles;
  in.seq_len_bound = seq_len_bound64(a);
  // K + V bytes of one token of a block (every head it serves)
  in.token_bytes = 2 * static_cast<int64_t>(g.head_dim) * kv_format_bits(g.format) / 8 * hpb;
  in.granule = static_cast<int64_t>(warp_tile) * (tile_warps > 0 ? tile_warps : warps);
  in.slots = static_cast<int64_t>(lim.sm_count) * std::max(1, pl.blocks_per_sm);
  pl.split = plan_kv_splits(in, tu);
  if (pl.split.num_splits > 1)
    pl.workspace = static_cast<size_t>(a.num_seqs) * a.num_qo_heads * pl.split.num_splits *
                   (g.head_dim + 1) * sizeof(float);
  return pl;
}

// "" when the plan can run; else why not, named `name`.
inline std::string v4_family_reason(const char* name, const DecodeArgs& a,
                                    const LaunchLimits& lim, const V4Plan& pl) {
  std::ostringstream os;
  if (pl.smem > static_cast<size_t>(lim.smem_per_block_optin)) {
    os << name << " needs " << pl.smem << " bytes of shared memory per block, the device allows "
       << lim.smem_per_block_optin;
    return os.str();
  }
  if (pl.blocks_per_sm < 1) {
    os << name << "'s block (" << pl.threads << " threads, " << pl.smem
       << " bytes of shared memory) cannot be resident";
    return os.str();
  }
  if (static_cast<int64_t>(a.num_seqs) * a.num_qo_heads > INT32_MAX) {
    os << name << " merges one block per output row; "
       << static_cast<int64_t>(a.num_seqs) * a.num_qo_heads << " rows exceed the 1-D grid limit";
    return os.str();
  }
  if (pl.split.grid > INT32_MAX) {
    os << name << " grid of " << pl.split.grid << " blocks exceeds the 1-D grid limit";
    return os.str();
  }
  return "";
}

// The kernel parameters of a plan.
inline V4Params v4_params(const DecodeArgs& a, const V4Plan& pl, void* workspace) {
  const PageGeometry& g = a.kv.geom;
  V4Params p{};
  set_call_params(p, a);
  p.num_qtiles = pl.num_qtiles;
  p.num_splits = pl.split.num_splits;
  p.chunk_tokens = static_cast<int>(pl.split.chunk_tokens);
  if (pl.split.num_splits > 1 && workspace) {  // none: the splits merge elsewhere (v11)
    const size_t rows = static_cast<size_t>(a.num_seqs) * a.num_qo_heads * pl.split.num_splits;
    p.partial_o = static_cast<float*>(workspace);
    p.partial_lse = p.partial_o + rows * g.head_dim;
  }
  return p;
}

// The split merge after a multi-split launch (one block per output row), with programmatic
// dependent launch when the tuning asks for it.
template <bool kResetWords = false>
inline void v4_launch_merge(const V4Params& p, const DecodeTuning& tu, cudaStream_t stream) {
  if (p.num_splits <= 1) return;
  const int64_t rows = static_cast<int64_t>(p.num_seqs) * p.num_qo_heads;
  KVLAB_CUDA_CHECK(mma::launch_dependent(v4_merge_kernel<kResetWords>, static_cast<unsigned>(rows),
                                         kMergeWarps * kWarpSize, tu.pdl, stream, p));
}

// ---- v4's design points (v4, v5, v7): every format, v4_decode_kernel<Cfg, D, F>.
template <class Cfg>
V4Plan make_plan(const DecodeArgs& a, const LaunchLimits& lim, const DecodeTuning& tu) {
  const PageGeometry& g = a.kv.geom;
  size_t smem = 0;
  int wt = 0;
  dispatch_instance(g.head_dim, g.format, [&](auto d, auto fm) {
    constexpr int kD = decltype(d)::value;
    constexpr KvFormat kF = decltype(fm)::value;
    smem = static_cast<size_t>(v4_smem<Cfg, kD, kF>().total);
    wt = v4_warp_tile<Cfg, kD, kF>();
    return cudaSuccess;
  });
  return v4_family_plan(a, lim, tu, smem, wt, [&](size_t bytes) {
    return cached_blocks_per_sm<Cfg>(lim.device, g.head_dim, g.format, bytes, [&](auto&& fn) {
      return dispatch_instance(g.head_dim, g.format, [&](auto d, auto fm) {
        return fn(v4_decode_kernel<Cfg, decltype(d)::value, decltype(fm)::value>);
      });
    });
  });
}

template <class Cfg>
std::string v4_unsupported_reason(const DecodeArgs& a, const DecodeTuning& tu) {
  const LaunchLimits lim = current_launch_limits();
  return v4_family_reason(Cfg::kName, a, lim, make_plan<Cfg>(a, lim, tu));
}

template <class Cfg>
size_t v4_workspace_bytes(const DecodeArgs& a, const DecodeTuning& tu) {
  return make_plan<Cfg>(a, current_launch_limits(), tu).workspace;
}

template <class Cfg>
void v4_run(const DecodeArgs& a, const DecodeTuning& tu, void* workspace, cudaStream_t stream) {
  const V4Plan pl = make_plan<Cfg>(a, current_launch_limits(), tu);
  const PageGeometry& g = a.kv.geom;
  const V4Params p = v4_params(a, pl, workspace);
  cudaError_t e = dispatch_instance(g.head_dim, g.format, [&](auto d, auto fm) {
    auto kernel = v4_decode_kernel<Cfg, decltype(d)::value, decltype(fm)::value>;
    cudaError_t r = allow_dynamic_smem(kernel, pl.smem);
    if (r != cudaSuccess) return r;
    kernel<<<static_cast<unsigned>(pl.split.grid), kV4Threads, pl.smem, stream>>>(p);
    return cudaGetLastError();
  });
  KVLAB_CUDA_CHECK(e);
  v4_launch_merge(p, tu, stream);
  KVLAB_CHECK_LAUNCH();
}

}  // namespace
}  // namespace kvlab::gpu::detail
