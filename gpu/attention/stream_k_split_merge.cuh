// stream_k_split_merge.cuh: the merge kernel of the stream-K decode versions (v6, v15): an item
// whose units (tiles) span several persistent blocks leaves one normalised partial result per
// block, and this kernel, launched after the decode grid (programmatic dependent launch when
// the tuning asks), folds them into the output row by log-sum-exp.
//
// The partition is decode_plan.h's: W units in item order over C blocks, block c owning
// [streamk_unit_begin(c), streamk_unit_begin(c + 1)); an item shared by blocks has one part per
// block it touches, block b's in slot streamk_partial_slot(b, item's first unit) (0: the first
// item of b's range, 1: the last). Partial rows: [C][2 slots][8 heads][head_dim] floats and
// [C][2][8] lse values.
//
// What differs between the versions is where an item's units lie and which parts hold tokens,
// a Units policy:
//   static __device__ StreamKRowParts parts(const P& p, int seq, int item_in_seq)
// (v6: W and the items' first units come from the real lengths, recorded by the decode
// blocks; every part holds tokens. v15: the units come from the length bound, so parts past a
// shorter sequence's end hold none, and the kernel writes an empty or invalid sequence's rows.)
//
// Arithmetic: v4_merge_kernel's (mma::merge_fold_batch and merge_unit_outputs, softmax_state.h's
// LseAccumulator). Warp w takes parts w, w + 4, ... in batches of 8 loaded
// at once; shared memory combines the 4 warps. Lane l holds dims 4l..4l+3 (+128 for d256).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "gpu/attention/decode_plan.h"
#include "gpu/attention/mma_operands.cuh"
#include "gpu/attention/mma_ptx.cuh"
#include "gpu/attention/mma_tile_compute.cuh"
#include "gpu/attention/softmax_state.h"

namespace kvlab::gpu::detail {
namespace {

constexpr int kStreamKMergeWarps = 4;  // warps per output row
constexpr int kStreamKMergeBatch = 8;  // parts each warp loads at once

// What the merge does with one output row.
struct StreamKRowParts {
  enum Action { kWrittenByDecode, kMerge, kNaN, kEmpty } action = kWrittenByDecode;
  int64_t first = 0;  // the item's first unit
  int64_t W = 0, C = 0;
  int64_t parts = 0;  // kMerge: the parts to fold, k = 0 .. parts - 1 (the first ones)
};

// grid = rows (one block per (sequence, query head) row), kStreamKMergeWarps x 32 threads.
// P carries: o, lse, q_bf16, num_qo_heads, group_size, num_qtiles, partial_o, partial_lse.
template <int D, class P, class Units>
__global__ void __launch_bounds__(kStreamKMergeWarps* kWarpSize)
    stream_k_merge_kernel(const P p) {
  __shared__ float4 red[kStreamKMergeWarps][2][kWarpSize];  // [warp][dims half][lane]
  __shared__ float red_m[kStreamKMergeWarps], red_s[kStreamKMergeWarps];
  __shared__ int red_bad[kStreamKMergeWarps];
  constexpr int kHalves = (D + 4 * kWarpSize - 1) / (4 * kWarpSize);
  mma::pdl_wait();  // the decode kernel has completed and its writes are visible
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x;
  const int seq = static_cast<int>(row / p.num_qo_heads);
  const int qh = static_cast<int>(row % p.num_qo_heads);
  const int kv_head = qh / p.group_size, gl = qh % p.group_size;
  const int item = kv_head * p.num_qtiles + gl / mma::kHeadsPerTile;
  const int hl = gl % mma::kHeadsPerTile;
  const StreamKRowParts rp = Units::parts(p, seq, item);
  const bool lane_live = lane * 4 < D;
  if (rp.action == StreamKRowParts::kWrittenByDecode) return;
  if (rp.action != StreamKRowParts::kMerge) {  // an invalid length (NaN) or an empty sequence
    if (warp != 0) return;
    const float v = rp.action == StreamKRowParts::kNaN ? NAN : 0.0f;
    float x[4] = {v, v, v, v};
#pragma unroll
    for (int h = 0; h < kHalves; ++h)
      if (lane_live) mma::store_act_n<4>(p.o, row * D + lane * 4 + h * 4 * kWarpSize, x, p.q_bf16);
    if (lane == 0 && p.lse) p.lse[row] = rp.action == StreamKRowParts::kNaN ? NAN : -INFINITY;
    return;
  }
  LseAccumulator la;
  float4 acc[kHalves];
#pragma unroll
  for (int h = 0; h < kHalves; ++h) acc[h] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int64_t k0 = warp; k0 < rp.parts; k0 += kStreamKMergeWarps * kStreamKMergeBatch) {
    float4 x[kStreamKMergeBatch][kHalves];
    float l[kStreamKMergeBatch];
    bool use[kStreamKMergeBatch];
#pragma unroll
    for (int b = 0; b < kStreamKMergeBatch; ++b) {
      const int64_t k = k0 + b * kStreamKMergeWarps;
      use[b] = k < rp.parts;
      int64_t prow = 0;
      if (use[b]) {
        const int64_t blk = streamk_part_block(k, rp.first, rp.W, rp.C);
        prow = (blk * 2 + streamk_partial_slot(blk, rp.first, rp.W, rp.C)) * mma::kHeadsPerTile + hl;
      }
      l[b] = use[b] ? p.partial_lse[prow] : -INFINITY;
#pragma unroll
      for (int h = 0; h < kHalves; ++h)
        x[b][h] = (use[b] && lane_live) ? *reinterpret_cast<const float4*>(
                                              p.partial_o + prow * D + lane * 4 + h * 4 * kWarpSize)
                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      use[b] = use[b] && LseAccumulator::contributes(l[b]);
    }
    mma::merge_fold_batch(la, acc, l, x, use);
  }
#pragma unroll
  for (int h = 0; h < kHalves; ++h) red[warp][h][lane] = acc[h];
  if (lane == 0) red_m[warp] = la.m, red_s[warp] = la.s, red_bad[warp] = la.bad;
  __syncthreads();
  if (warp != 0 || !lane_live) return;
  float wm[kStreamKMergeWarps], ws[kStreamKMergeWarps], lse = 0.0f;
  bool any_bad = false;
#pragma unroll
  for (int w = 0; w < kStreamKMergeWarps; ++w)
    wm[w] = red_m[w], ws[w] = red_s[w], any_bad |= red_bad[w] != 0;
#pragma unroll
  for (int h = 0; h < kHalves; ++h) {
    float4 z[kStreamKMergeWarps];
#pragma unroll
    for (int w = 0; w < kStreamKMergeWarps; ++w) z[w] = red[w][h][lane];
    float v[4];
    mma::merge_unit_outputs(wm, ws, z, any_bad, v, lse);
    mma::store_act_n<4>(p.o, row * D + lane * 4 + h * 4 * kWarpSize, v, p.q_bf16);
  }
  if (lane == 0 && p.lse) p.lse[row] = lse;
}

// Host: the merge after a stream-K decode launch, one block per output row (P carries
// num_seqs and num_qo_heads), as its programmatic dependent when `pdl`.
template <int D, class Units, class P>
cudaError_t stream_k_launch_merge(const P& p, bool pdl, cudaStream_t stream) {
  return mma::launch_dependent(stream_k_merge_kernel<D, P, Units>,
                               static_cast<unsigned>(static_cast<int64_t>(p.num_seqs) *
                                                     p.num_qo_heads),
                               kStreamKMergeWarps * kWarpSize, pdl, stream, p);
}

}  // namespace
}  // namespace kvlab::gpu::detail
