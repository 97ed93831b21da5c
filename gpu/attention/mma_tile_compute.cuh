// mma_tile_compute.cuh: the compute side of the tensor-core decode kernels (v4, v5, v6):
// Q as mma B fragments, one warp's attention over a tile in shared memory, the block's
// merge of its warps, and the output stores.
//
// For a 16-token pass a warp computes (tokens as M, the query tile's 8 heads as N)
//   S^T [16 tokens x 8 heads] = K [16 x D] . Q^T [D x 8]          (D/16 mma)
//   O^T [D x 8 heads]        += V^T [D x 16 tokens] . P^T [16 x 8] (D/16 mma, P = hi + lo)
// with the K and V A fragments from the format's loader (mma_operands.cuh) and the online
// softmax of softmax_state.h. P is split into two 16-bit halves (hi + lo, two mma), so only
// ~22 (f16) or ~16 (bf16) of its bits survive: far below the output rounding.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/attention/kv_vec.cuh"
#include "gpu/attention/mma_operands.cuh"
#include "gpu/attention/mma_ptx.cuh"
#include "gpu/attention/softmax_state.h"

namespace kvlab::gpu::mma {

constexpr int kHeadsPerTile = 8;  // the mma N: query heads of one query tile

// ------------------------------------------------------------------ activations
// N consecutive output elements (N = 4, 8, 16; 8-byte aligned) rounded to the activation dtype.
template <int N>
__device__ __forceinline__ void store_act_n(void* o, int64_t elem_offset, const float* x,
                                            bool is_bf16) {
  uint32_t w[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i)
    w[i] = static_cast<uint32_t>(round_act(x[2 * i], is_bf16)) |
           (static_cast<uint32_t>(round_act(x[2 * i + 1], is_bf16)) << 16);
  uint16_t* dst = static_cast<uint16_t*>(o) + elem_offset;
#pragma unroll
  for (int i = 0; i < N / 2; i += 2)
    *reinterpret_cast<uint2*>(dst + 2 * i) = make_uint2(w[i], w[i + 1]);
}

// ------------------------------------------------------------------ Q
// The Q slice of one thread of a 128-thread block: thread (hl = tid / 16, part = tid % 16)
// holds elements [part*D/16, (part+1)*D/16) of head hl of the query tile, as raw 16-bit pairs.
template <int D>
struct QSlice {
  uint2 w[D / 64];
};

// Loads the slice of Q row `row` (-1: a head past the group: zeros).
template <int D>
__device__ __forceinline__ void load_q_slice(const void* q, int64_t row, int part, QSlice<D>& qs) {
#pragma unroll
  for (int i = 0; i < D / 64; ++i) qs.w[i] = make_uint2(0u, 0u);
  if (row >= 0) {
    const uint16_t* src = static_cast<const uint16_t*>(q) + row * D + part * (D / 16);
#pragma unroll
    for (int i = 0; i < D / 64; ++i) qs.w[i] = *reinterpret_cast<const uint2*>(src + 4 * i);
  }
}

// Q^T as B fragments in shared memory: qf_hi / qf_lo [D/16 k-steps][32 lanes] (fragment
// order: conflict-free), colscale [8] the softmax scale of each head. Called by all 128
// threads of the block. f16 operands: each head's Q is scaled by a power of two into
// [2^14, 2^15) (the power folded into its column scale); bf16 operands with an f16 Q: Q is
// split into bf16 hi + lo (exact), both used by the Q.K^T mma.
// Position P = part*D/16 + e lands in k-step s = (P % (D/4)) / 4 of lane hl*4 + P / (D/4)
// (the thread slice order of mma_operands.cuh's K fragments) and holds Q's dim P, or with
// Op::kKDimPairs dim (P & ~7) | pair_order(P & 7) (mma_operands.cuh).
// `tid`: the thread's index in its group of 128 (whole warps: the head's 16 threads
// exchange values by shuffles); q_fragments below passes threadIdx.x.
template <class Op, int D>
__device__ __forceinline__ void q_fragments_of(int tid, const QSlice<D>& qs, bool q_bf16,
                                               float qk_scale, uint2* qf_hi, uint2* qf_lo,
                                               float* colscale) {
  constexpr int kQE = D / 16;  // elements per thread: 16 threads per head
  const int hl = tid >> 4, part = tid & 15;
  float qv[kQE];
#pragma unroll
  for (int i = 0; i < kQE / 4; ++i) {
    const uint2 r = qs.w[i];
    const float2 a = q_bf16 ? bf16x2_bits_to_float2(r.x) : fp16x2_bits_to_float2(r.x);
    const float2 b = q_bf16 ? bf16x2_bits_to_float2(r.y) : fp16x2_bits_to_float2(r.y);
    qv[4 * i] = a.x, qv[4 * i + 1] = a.y, qv[4 * i + 2] = b.x, qv[4 * i + 3] = b.y;
  }
  if constexpr (Op::kKDimPairs) {
    // A group of 8 dims is this thread's (D >= 128) or shared with lane ^ 1 (D = 64:
    // the even part holds dims 0..3 of the group, the odd part dims 4..7).
    float src[kQE];
    if constexpr (kQE >= 8) {
#pragma unroll
      for (int e = 0; e < kQE; ++e) src[e] = qv[(e & ~7) | pair_order(e & 7)];
    } else {
      static_assert(kQE == 4, "head_dim 64, 128 or 256");
      float other[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) other[e] = __shfl_xor_sync(0xFFFFFFFFu, qv[e], 1);
      const bool odd = part & 1;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int de = pair_order(e), dd = pair_order(4 + e);  // the dims in the group
        const float ve = de < 4 ? qv[de] : other[de - 4], vo = dd >= 4 ? qv[dd - 4] : other[dd];
        src[e] = odd ? vo : ve;
      }
    }
#pragma unroll
    for (int e = 0; e < kQE; ++e) qv[e] = src[e];
  }
  float pre = 1.0f, cs = qk_scale;
  if constexpr (Op::kQkF16) {
    float amax = 0.0f;
#pragma unroll
    for (int e = 0; e < kQE; ++e) amax = fmaxf(amax, fabsf(qv[e]));
    amax = group_max<16>(amax);  // the 16 threads of this head (aligned lane groups)
    if (amax > 0.0f && amax <= 3.4028235e38f) {
      int ex = 0;
      frexpf(amax, &ex);  // amax in [2^(ex-1), 2^ex)
      const int k = max(-100, min(100, 15 - ex));
      pre = ldexpf(1.0f, k);
      cs = qk_scale * ldexpf(1.0f, -k);
    }
  }
#pragma unroll
  for (int e = 0; e < kQE; e += 4) {
    const int dim = part * kQE + e;
    const int tq = dim / (D / 4), s = (dim % (D / 4)) / 4;
    const int entry = s * kWarpSize + hl * 4 + tq;
    uint32_t h0, l0, h1, l1;
    split2<Op::kQkF16>(qv[e] * pre, qv[e + 1] * pre, h0, l0);
    split2<Op::kQkF16>(qv[e + 2] * pre, qv[e + 3] * pre, h1, l1);
    qf_hi[entry] = make_uint2(h0, h1);
    qf_lo[entry] = make_uint2(l0, l1);
  }
  if (part == 0) colscale[hl] = cs * Op::kScoreScale;
}
template <class Op, int D>
__device__ __forceinline__ void q_fragments(const QSlice<D>& qs, bool q_bf16, float qk_scale,
                                            uint2* qf_hi, uint2* qf_lo, float* colscale) {
  q_fragments_of<Op, D>(static_cast<int>(threadIdx.x), qs, q_bf16, qk_scale, qf_hi, qf_lo,
                        colscale);
}

// ------------------------------------------------------------------ one warp's attention
// The state of one warp over a run of tiles of one (sequence, KV head, query tile): the
// online softmax of heads 2t, 2t+1 and O^T fragments acc[m-tile][c0..c3].
// OpT: the operand loader (default: the format's, reading padded cp.async tiles).
template <KvFormat F, int D, int kWT, class OpT = MmaOperand<F, D>>
struct WarpAttention {
  using Op = OpT;
  static constexpr int kSub = kWT / 16;  // 16-token mma passes per tile
  static constexpr int kMT = D / 16;
  static_assert(kWT % 16 == 0, "warp tiles are whole mma passes");

  FragmentSoftmax sm;
  float acc[kMT][4];

  __device__ void reset() {
    sm.reset();
#pragma unroll
    for (int i = 0; i < kMT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  }

  // One tile: rows [0, kWT) of the stage, the first n_valid of them tokens of the sequence.
  // qf_hi / qf_lo: Q^T fragments; q_lo: add the lo half (bf16 operands with an f16 Q);
  // cs0 / cs1: the softmax scales of heads 2t, 2t+1.
  __device__ void tile(const uint8_t* sk, const uint8_t* sv, const uint8_t* sks, const uint8_t* svs,
                       int n_valid, const uint2* qf_hi, const uint2* qf_lo, bool q_lo, float cs0,
                       float cs1, int lane) {
    const int g = lane >> 2;
    float s[kSub][4];
#pragma unroll
    for (int sub = 0; sub < kSub; ++sub) {
      const int r0 = sub * 16 + g, r1 = r0 + 8;
      // Two accumulators (even / odd k-steps): half the dependent mma chain.
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      Op::k_frags(sk + sub * 16 * Op::kRowStride, sks + sub * 16 * Op::kScaleBytes, lane,
                  [&](int ks, const uint32_t(&a)[4]) {
                    const uint2 bh = qf_hi[ks * kWarpSize + lane];
                    float(&cc)[4] = (ks & 1) ? c2 : c;
                    mma16816<Op::kQkF16>(cc, a, bh.x, bh.y);
                    if (!Op::kQkF16 && q_lo) {
                      const uint2 bl = qf_lo[ks * kWarpSize + lane];
                      mma16816<Op::kQkF16>(cc, a, bl.x, bl.y);
                    }
                  });
#pragma unroll
      for (int e = 0; e < 4; ++e) c[e] += c2[e];
      const float ks0 = Op::k_row_scale(sks, r0), ks1 = Op::k_row_scale(sks, r1);
      const bool v0 = r0 < n_valid, v1 = r1 < n_valid;
      s[sub][0] = v0 ? c[0] * cs0 * ks0 : -INFINITY;  // (token r0, head 2t)
      s[sub][1] = v0 ? c[1] * cs1 * ks0 : -INFINITY;  // (token r0, head 2t+1)
      s[sub][2] = v1 ? c[2] * cs0 * ks1 : -INFINITY;  // (token r1, head 2t)
      s[sub][3] = v1 ? c[3] * cs1 * ks1 : -INFINITY;
    }

    // Online softmax over the tile: one max / rescale per tile, per head of this thread.
    float mx0, mx1;
    sm.tile_max(s, mx0, mx1);
#pragma unroll
    for (int off = 4; off < kWarpSize; off *= 2) {  // over g (the tokens), not t (the heads)
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xFFFFFFFFu, mx0, off));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xFFFFFFFFu, mx1, off));
    }
    float corr0, corr1;
    sm.rescale_to(mx0, mx1, corr0, corr1);
#pragma unroll
    for (int i = 0; i < kMT; ++i)
      acc[i][0] *= corr0, acc[i][1] *= corr1, acc[i][2] *= corr0, acc[i][3] *= corr1;

#pragma unroll
    for (int sub = 0; sub < kSub; ++sub) {
      const int r0 = sub * 16 + g, r1 = r0 + 8;
      float p[4];
      sm.probs(s[sub], p);
      Op::scale_probs(p, svs, r0, r1);
      // S^T C fragment (token, head pairs) -> P^T B fragment (token pairs of one head).
      uint32_t h01, lo01, h23, lo23;
      split2<Op::kPvF16>(p[0], p[1], h01, lo01);
      split2<Op::kPvF16>(p[2], p[3], h23, lo23);
      const uint32_t bh0 = movmatrix_trans(h01), bh1 = movmatrix_trans(h23);
      const uint32_t bl0 = movmatrix_trans(lo01), bl1 = movmatrix_trans(lo23);
      Op::v_frags(sv + sub * 16 * Op::kRowStride, svs + sub * 16 * Op::kScaleBytes, lane,
                  [&](int mt, const uint32_t(&a)[4]) {
                    mma16816<Op::kPvF16>(acc[mt], a, bh0, bh1);
                    mma16816<Op::kPvF16>(acc[mt], a, bl0, bl1);
                  });
    }
  }

  // The row sums over the 8 lanes sharing t (after the last tile).
  __device__ void reduce_sums() {
#pragma unroll
    for (int off = 4; off < kWarpSize; off *= 2) {
      sm.l[0] += __shfl_xor_sync(0xFFFFFFFFu, sm.l[0], off);
      sm.l[1] += __shfl_xor_sync(0xFFFFFFFFu, sm.l[1], off);
    }
  }
};

// ------------------------------------------------------------------ the block's warp merge
// Shared memory of kWarps warps' partial states for the 8 heads of a query tile:
// m [kWarps][8], l [kWarps][8], o [kWarps][8][D + 4] (unnormalized, dims in order).
template <KvFormat F, int D, int kWarps>
struct WarpMerge {
  using Op = MmaOperand<F, D>;
  static constexpr int kDP = D + 4;
  static constexpr int kOE = D / 16;  // output elements per thread: 16 threads per head
  static constexpr int kBytes = 2 * kWarps * kHeadsPerTile * 4 + kWarps * kHeadsPerTile * kDP * 4;

  // A warp's state (sums already reduced) into the area.
  template <int kWT, class OpT>
  __device__ static void store_warp(uint8_t* area, int warp, int lane,
                                    const WarpAttention<F, D, kWT, OpT>& wa) {
    const int g = lane >> 2, t = lane & 3;
    float* red_m = reinterpret_cast<float*>(area);
    float* red_l = red_m + kWarps * kHeadsPerTile;
    float* red_o = red_l + kWarps * kHeadsPerTile;
    if (g == 0) {
      red_m[warp * kHeadsPerTile + 2 * t] = wa.sm.m[0];
      red_m[warp * kHeadsPerTile + 2 * t + 1] = wa.sm.m[1];
      red_l[warp * kHeadsPerTile + 2 * t] = wa.sm.l[0];
      red_l[warp * kHeadsPerTile + 2 * t + 1] = wa.sm.l[1];
    }
    float* o_h0 = red_o + (warp * kHeadsPerTile + 2 * t) * kDP;
    float* o_h1 = o_h0 + kDP;
#pragma unroll
    for (int mt = 0; mt < D / 16; ++mt) {
      const int d0 = Op::acc_dim(mt, g, 0), d1 = Op::acc_dim(mt, g, 1);
      o_h0[d0] = wa.acc[mt][0], o_h1[d0] = wa.acc[mt][1];
      o_h0[d1] = wa.acc[mt][2], o_h1[d1] = wa.acc[mt][3];
    }
  }

  // Thread (hl, part) combines the warps for head hl, dims [part*kOE, +kOE): o unnormalized
  // (sum_w exp(m_w - mm) o_w), mm the common max, ll the common sum (>= 1 when any warp saw a
  // token: the warp holding the largest logit contributes exp(0)).
  __device__ static void combine(const uint8_t* area, int hl, int part, float (&o)[kOE], float& mm,
                                 float& ll) {
    const float* red_m = reinterpret_cast<const float*>(area);
    const float* red_l = red_m + kWarps * kHeadsPerTile;
    const float* red_o = red_l + kWarps * kHeadsPerTile;
    float m[kWarps], l[kWarps], w[kWarps];
#pragma unroll
    for (int i = 0; i < kWarps; ++i)
      m[i] = red_m[i * kHeadsPerTile + hl], l[i] = red_l[i * kHeadsPerTile + hl];
    mm = combine_partials<kWarps>(m, l, w, ll);
#pragma unroll
    for (int e = 0; e < kOE; ++e) o[e] = 0.0f;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) {
      const float* src = red_o + (i * kHeadsPerTile + hl) * kDP + part * kOE;
#pragma unroll
      for (int e = 0; e < kOE; ++e) o[e] += w[i] * src[e];
    }
  }
};

// The block's merge of 4 warps in about half of WarpMerge's shared memory (v6, whose
// pipeline keeps loading the next segment's tiles while a segment is merged, so the merge
// cannot reuse the pipeline buffers): the warps publish their maxima and sums, each warp
// rescales its own accumulators to the common maximum, warps 0 and 1 write them into two
// buffers, then warps 2 and 3 add theirs (a fixed order: deterministic results).
//   area: m [4][8], l [4][8], buf [2][8][D + 4]
// Use: publish(); __syncthreads(); accumulate() (holds one barrier); __syncthreads();
// combine() by thread (hl, part).
template <KvFormat F, int D>
struct CompactWarpMerge {
  using Op = MmaOperand<F, D>;
  static constexpr int kWarps = 4;
  static constexpr int kDP = D + 4;
  static constexpr int kOE = D / 16;
  static constexpr int kBytes = 2 * kWarps * kHeadsPerTile * 4 + 2 * kHeadsPerTile * kDP * 4;

  __device__ static float* red_m(uint8_t* a) { return reinterpret_cast<float*>(a); }
  __device__ static float* red_l(uint8_t* a) { return red_m(a) + kWarps * kHeadsPerTile; }
  __device__ static float* buf(uint8_t* a) { return red_l(a) + kWarps * kHeadsPerTile; }

  // A warp's maxima and (reduced) sums.
  template <int kWT>
  __device__ static void publish(uint8_t* area, int warp, int lane,
                                 const WarpAttention<F, D, kWT>& wa) {
    const int g = lane >> 2, t = lane & 3;
    if (g == 0) {
      red_m(area)[warp * kHeadsPerTile + 2 * t] = wa.sm.m[0];
      red_m(area)[warp * kHeadsPerTile + 2 * t + 1] = wa.sm.m[1];
      red_l(area)[warp * kHeadsPerTile + 2 * t] = wa.sm.l[0];
      red_l(area)[warp * kHeadsPerTile + 2 * t + 1] = wa.sm.l[1];
    }
  }

  // After a barrier: the accumulators rescaled to the common max, into the two buffers.
  template <int kWT>
  __device__ static void accumulate(uint8_t* area, int warp, int lane,
                                    const WarpAttention<F, D, kWT>& wa) {
    const int g = lane >> 2, t = lane & 3;
    float sc[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mm = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, red_m(area)[w * kHeadsPerTile + 2 * t + h]);
      sc[h] = exp_diff(wa.sm.m[h], mm);  // 0 for a warp without tokens
    }
    float* o_h0 = buf(area) + ((warp & 1) * kHeadsPerTile + 2 * t) * kDP;
    float* o_h1 = o_h0 + kDP;
    if (warp < 2) {
#pragma unroll
      for (int mt = 0; mt < D / 16; ++mt) {
        const int d0 = Op::acc_dim(mt, g, 0), d1 = Op::acc_dim(mt, g, 1);
        o_h0[d0] = wa.acc[mt][0] * sc[0], o_h1[d0] = wa.acc[mt][1] * sc[1];
        o_h0[d1] = wa.acc[mt][2] * sc[0], o_h1[d1] = wa.acc[mt][3] * sc[1];
      }
    }
    __syncthreads();
    if (warp >= 2) {
#pragma unroll
      for (int mt = 0; mt < D / 16; ++mt) {
        const int d0 = Op::acc_dim(mt, g, 0), d1 = Op::acc_dim(mt, g, 1);
        o_h0[d0] += wa.acc[mt][0] * sc[0], o_h1[d0] += wa.acc[mt][1] * sc[1];
        o_h0[d1] += wa.acc[mt][2] * sc[0], o_h1[d1] += wa.acc[mt][3] * sc[1];
      }
    }
  }

  // After a barrier: thread (hl, part) gets head hl's dims [part*kOE, +kOE) (unnormalized,
  // at the common max mm) and the common sum ll (>= 1 when any warp saw a token).
  __device__ static void combine(uint8_t* area, int hl, int part, float (&o)[kOE], float& mm,
                                 float& ll) {
    float m[kWarps], l[kWarps], w[kWarps];
#pragma unroll
    for (int i = 0; i < kWarps; ++i)
      m[i] = red_m(area)[i * kHeadsPerTile + hl], l[i] = red_l(area)[i * kHeadsPerTile + hl];
    mm = combine_partials<kWarps>(m, l, w, ll);
    const float* b0 = buf(area) + hl * kDP + part * kOE;
    const float* b1 = b0 + kHeadsPerTile * kDP;
#pragma unroll
    for (int e = 0; e < kOE; ++e) o[e] = b0[e] + b1[e];
  }
};

// ------------------------------------------------------------------ split merge
// The arithmetic of every split merge (v4's merge kernel, the stream-K merge of v6 / v15,
// v11's cluster merge and v12's last-block merge, the last two replaying v4's kernel's warps
// one after the other): the same operations in the same order wherever the same partials are
// merged, so the bits agree.
// One batch of kB partials (normalized o as kH float4s, log-sum-exp l) folded into a warp's
// running state (softmax_state.h's LseAccumulator): the batch's max, the rescale of what is
// held, the weighted sum; partials with use[b] false are skipped.
template <int kB, int kH>
__device__ __forceinline__ void merge_fold_batch(LseAccumulator& la, float4 (&acc)[kH],
                                                 const float (&l)[kB], const float4 (&x)[kB][kH],
                                                 const bool (&use)[kB]) {
  const float bm = la.batch_max(l, use);
  if (bm == -INFINITY) return;  // nothing valid yet (n reached, or every lse -inf)
  const float r = la.raise_to(bm);
#pragma unroll
  for (int h = 0; h < kH; ++h) acc[h].x *= r, acc[h].y *= r, acc[h].z *= r, acc[h].w *= r;
#pragma unroll
  for (int b = 0; b < kB; ++b) {
    if (use[b]) {
      const float w = la.weight(l[b]);
#pragma unroll
      for (int h = 0; h < kH; ++h)
        acc[h].x += w * x[b][h].x, acc[h].y += w * x[b][h].y, acc[h].z += w * x[b][h].z,
            acc[h].w += w * x[b][h].w;
    }
  }
}
// The warps' accumulators y[w] weighted by combine_partials' sc[w], in warp order.
template <int kW>
__device__ __forceinline__ float4 merge_weighted_sum(const float (&sc)[kW], const float4 (&y)[kW]) {
  float4 t = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int w = 0; w < kW; ++w)
    t.x += sc[w] * y[w].x, t.y += sc[w] * y[w].y, t.z += sc[w] * y[w].z, t.w += sc[w] * y[w].w;
  return t;
}
// The end of every split merge's arithmetic for one output unit (4 dims of a row): the kW
// warps' states (max wm, sum ws, accumulator y) combined in warp order, the unit's outputs and
// lse (NaN when a partial was). v4's merge kernel and the stream-K merge call it per 128-dim
// half of a lane's dims, v11's cluster and v12's last block per unit.
template <int kW>
__device__ __forceinline__ void merge_unit_outputs(const float (&wm)[kW], const float (&ws)[kW],
                                                   const float4 (&y)[kW], bool any_bad,
                                                   float (&out)[4], float& lse) {
  float sc[kW], sum = 0.0f;
  const float mx = combine_partials<kW>(wm, ws, sc, sum);
  const float inv = 1.0f / sum;
  const float4 t = merge_weighted_sum(sc, y);
  out[0] = any_bad ? NAN : t.x * inv, out[1] = any_bad ? NAN : t.y * inv;
  out[2] = any_bad ? NAN : t.z * inv, out[3] = any_bad ? NAN : t.w * inv;
  lse = any_bad ? NAN : mx + logf(sum);
}

}  // namespace kvlab::gpu::mma
