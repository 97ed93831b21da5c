// last_block_split_merge.cuh: the split merge of v12_mma_decode_last_block_merge inside the
// decode launch: every split of an item writes its normalized partial (o, lse) to the
// workspace as v10's do, then arrives on the item's word (split_arrival.h); the block whose
// arrival is the item's last merges the item's splits and writes its final rows. No second
// kernel, no wait for the whole grid, no cluster placement.
//
//   workspace: [partial_o: rows x S x D floats][partial_lse: rows x S floats][arrival words:
//   items x 8 bytes]   (rows = num_seqs x num_qo_heads, items = num_seqs x num_kv_heads x
//   num_qtiles, S = num_splits; the words 8-byte aligned)
//
// Ordering: the block's threads write their partial rows, the block barrier, then thread 0
// arrives with acquire-release atomics at GPU scope (releasing the whole block's writes, by
// the barrier's cumulativity; acquiring those of the arrivals before it); the barrier hands
// the last arrival's acquire to the block, whose threads read the other splits' partials
// from L2 (ld.global.cg: never a stale L1 line).
//
// The arithmetic is v4_merge_kernel's (mma::merge_fold_batch, merge_weighted_sum,
// softmax_state.h's LseAccumulator and combine_partials), replayed per output unit (4 dims
// of one head) in the kernel's order: the kernel's warp w folds splits w, w + 4, ... in
// batches of kMergeBatch, then the 4 warps are combined in order; batches past the splits
// that hold tokens change nothing (a batch without a used entry multiplies by exp2(0) = 1).
// For the same split the outputs and lse are bitwise v10's. Splits 0..3 (every split of a
// plan of up to 4) are loaded at once, one L2 round trip; the further entries of a warp's
// batch with its batch (up to 8 splits: two round trips).
#pragma once

#include <cuda/atomic>
#include <cuda_runtime.h>

#include "gpu/attention/split_arrival.h"
#include "gpu/attention/v4_mma_decode.cuh"

namespace kvlab::gpu::detail {
namespace {

// The arrival word of item `it` (grid order of v4_item: qtile fastest, then KV head, sequence).
__device__ __forceinline__ unsigned long long* split_arrival_word(const V4Params& p,
                                                                  const V4Item& it) {
  const int64_t item =
      (static_cast<int64_t>(it.seq) * p.pools.geom.num_kv_heads + it.kv_head) * p.num_qtiles +
      it.qtile;
  return p.arrivals + item;
}

// Output unit (head row `row`, dims [d, d + 4)) of an item whose n >= 1 splits hold tokens.
template <int D>
__device__ __forceinline__ void last_block_merge_unit(const V4Params& p, int n, int64_t row, int d,
                                                      float (&out)[4], float& lse) {
  constexpr int kPre = kMergeWarps;  // entry 0 of every warp's first batch: splits 0-3
  const float* lse_in = p.partial_lse + row * p.num_splits;
  const float* po = p.partial_o + row * p.num_splits * static_cast<int64_t>(D) + d;
  float lp[kPre];
  float4 xp[kPre];
#pragma unroll
  for (int i = 0; i < kPre; ++i) {  // issued together: one round trip for up to 4 splits
    lp[i] = i < n ? __ldcg(lse_in + i) : -INFINITY;
    xp[i] = i < n ? __ldcg(reinterpret_cast<const float4*>(po + static_cast<int64_t>(i) * D))
                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  float wm[kMergeWarps], ws[kMergeWarps];
  float4 y[kMergeWarps];
  bool any_bad = false;
#pragma unroll
  for (int w = 0; w < kMergeWarps; ++w) {
    LseAccumulator la;
    float4 acc[1] = {make_float4(0.0f, 0.0f, 0.0f, 0.0f)};
    for (int i0 = w; i0 < n; i0 += kMergeWarps * kMergeBatch) {
      float l[kMergeBatch];
      float4 x[kMergeBatch][1];
      bool use[kMergeBatch];
#pragma unroll
      for (int b = 0; b < kMergeBatch; ++b) {
        const int i = i0 + b * kMergeWarps;
        if (i0 == w && b == 0) {  // preloaded (i = w < kPre)
          l[b] = lp[w];
          x[b][0] = xp[w];
        } else {
          l[b] = i < n ? __ldcg(lse_in + i) : -INFINITY;
          x[b][0] = i < n ? __ldcg(reinterpret_cast<const float4*>(po + static_cast<int64_t>(i) * D))
                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        use[b] = i < n && LseAccumulator::contributes(l[b]);
      }
      mma::merge_fold_batch(la, acc, l, x, use);
    }
    wm[w] = la.m, ws[w] = la.s, y[w] = acc[0], any_bad |= la.bad;
  }
  mma::merge_unit_outputs(wm, ws, y, any_bad, out, lse);
}

// Called by every thread of a block that held tokens of a multi-split item, after its partial
// is in the workspace (v4_merge_warps_and_store). The last block of the item writes its rows.
template <int D>
__device__ __forceinline__ void last_block_merge_splits(const V4Params& p, const V4Item& it) {
  __shared__ int last;
  const int n = merge_used_splits(p, p.seq_lens[it.seq]);  // >= 1: this block held tokens
  __syncthreads();  // every partial row of this block written
  if (threadIdx.x == 0) {
    // acq_rel at GPU scope: releases the block's partial (every thread's rows, ordered before
    // by the barrier) with the arrival, and acquires the partials of the arrivals before it.
    cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> word(
        *split_arrival_word(p, it));
    const uint32_t arrived = split_arrive(
        p.arrival_tag,
        [&](uint64_t expect, uint64_t want) {
          unsigned long long e = expect;
          word.compare_exchange_strong(e, want, cuda::memory_order_acq_rel);
          return static_cast<uint64_t>(e);
        },
        [&](uint64_t v) {
          return static_cast<uint64_t>(word.fetch_add(v, cuda::memory_order_acq_rel));
        });
    last = arrived == static_cast<uint32_t>(n);
    if (last) word.store(SplitArrival::kReset, cuda::memory_order_relaxed);  // all arrived
  }
  __syncthreads();
  if (!last) return;
  constexpr int kUnitsPerHead = D / 4;
  const int heads = min(mma::kHeadsPerTile, p.group_size - it.qtile * mma::kHeadsPerTile);
  for (int u = threadIdx.x; u < heads * kUnitsPerHead; u += blockDim.x) {
    const int hl = u / kUnitsPerHead, d = (u % kUnitsPerHead) * 4;
    const int64_t row = static_cast<int64_t>(it.seq) * p.num_qo_heads +
                        it.kv_head * p.group_size + it.qtile * mma::kHeadsPerTile + hl;
    float out[4], lse;
    last_block_merge_unit<D>(p, n, row, d, out, lse);
    mma::store_act_n<4>(p.o, row * D + d, out, p.q_bf16);
    if (d == 0 && p.lse) p.lse[row] = lse;
  }
}

}  // namespace
}  // namespace kvlab::gpu::detail
