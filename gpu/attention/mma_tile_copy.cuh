// mma_tile_copy.cuh: the copy side of the tensor-core decode kernels (v4, v5, v6): one warp
// moves a tile of kWT tokens of one (sequence, KV head) from the paged pools into its
// shared-memory stage (the layout mma_operands.cuh reads).
//
// A tile load has four steps; the versions differ only in how the copies are issued and
// how their completion is observed:
//   1. fetch_pages     the block-table entries of the tile's tokens (lane i: tokens i, i+32),
//                      loaded one tile ahead of their use so their latency hides behind a
//                      tile of compute;
//   2. stage_offsets   per token: byte offset of the K row (NHD/HND: also the V row),
//                      split-x: the V element index of dim 0, and the scale index; -1 for
//                      tokens past the end; an out-of-range page sets `bad` (never read:
//                      the output becomes NaN);
//   3. rows            v4/v5: 16-byte cp.async chunks, lanes along a row, zero-fill past the
//                      end (copy_rows_cp_async; split-x V is gathered element by element);
//                      v6: one bulk copy per K and per V row (copy_rows_bulk), V rows past
//                      the end zero-filled by cp.async (P = 0 there, but 0 x NaN garbage
//                      would not be 0);
//   4. scales          per-token FP32 / block-scale codes by 4-byte cp.async (zero-fill past
//                      the end).
// v4/v5 commit the copies as one cp.async group per tile; v6 counts them on the stage's
// mbarrier (bulk bytes as transaction bytes, cp.async through cp.async.mbarrier.arrive).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/attention/kv_vec.cuh"
#include "gpu/attention/mma_operands.cuh"
#include "gpu/attention/mma_ptx.cuh"
#include "reference/layout/kv_layout.h"

namespace kvlab::gpu::mma {

KVLAB_HD constexpr int round16(int x) {
  return (x + 15) / 16 * 16;
}

// Element `idx` of a pool as raw storage bits (the split-x V gather).
template <int kBits>
__device__ __forceinline__ uint32_t raw_elem_bits(const uint8_t* pool, int64_t idx) {
  if constexpr (kBits == 16) return reinterpret_cast<const uint16_t*>(pool)[idx];
  if constexpr (kBits == 8) return pool[idx];
  const uint8_t b = pool[idx >> 1];
  return (idx & 1) ? (b >> 4) : (b & 0xFu);
}

// The pools and page geometry a tile copy reads (a slice of a kernel's params).
struct PoolView {
  const uint8_t* k;
  const uint8_t* v;
  const uint8_t* k_scales;  // per-token float / block-scale codes (kv_layout.h), or null
  const uint8_t* v_scales;
  PageGeometry geom;
};

// What every tensor-core decode kernel (v4's family, v6) takes from the call (set on the host
// by set_call_params, decode_impl.h); each kernel's parameters extend it with its plan.
struct CallParams {
  const void* q;  // [num_seqs, num_qo_heads, head_dim]  bf16/fp16
  void* o;        // [num_seqs, num_qo_heads, head_dim]
  float* lse;     // [num_seqs, num_qo_heads] or null
  bool q_bf16;
  PoolView pools;
  float qk_scale;              // sm_scale x K pool scale (kPool, NVFP4 tensor scale)
  float out_scale;             // V pool scale (kPool, NVFP4 tensor scale), else 1
  const int32_t* block_table;  // [num_seqs, max_blocks_per_seq]
  const int32_t* seq_lens;     // [num_seqs]
  int num_seqs;
  int num_qo_heads;
  int group_size;
  int max_blocks_per_seq;
  int seq_len_bound;
};

// One stage of a warp's tile: [K rows][V rows][K scale rows][V scale rows].
template <KvFormat F, int D, int kWT>
struct TileStage {
  using G = OperandGeometry<F, D>;
  static constexpr int kScaleTile = round16(kWT * G::kScaleBytes);
  static constexpr int kBytes = 2 * kWT * G::kRowStride + 2 * kScaleTile;
  uint8_t* sk;
  uint8_t* sv;
  uint8_t* sks;
  uint8_t* svs;
  __device__ explicit TileStage(uint8_t* base)
      : sk(base),
        sv(base + kWT * G::kRowStride),
        sks(base + 2 * kWT * G::kRowStride),
        svs(base + 2 * kWT * G::kRowStride + kScaleTile) {}
};

// Per-token offsets of one tile, staged in shared memory for the copy loops.
struct TileOffsets {
  int64_t* koff;  // [kWT] K row byte offset (NHD/HND: also V's), -1: none
  int64_t* voff;  // [kWT] split-x: V element index of dim 0
  int64_t* soff;  // [kWT] token scale index (token_scale_index), -1: none
};

template <KvFormat F, int D, int kWT>
struct TileCopy {
  using G = OperandGeometry<F, D>;
  static constexpr int kBits = G::kBits;
  static constexpr int kTPL = (kWT + kWarpSize - 1) / kWarpSize;  // tokens per lane
  static constexpr int kChunks = G::kRowBytes / 16;               // 16-byte chunks per row
  static constexpr int kX = 128 / kBits;                          // elements per chunk
  static_assert(kChunks >= 2 && (kWT * kChunks) % kWarpSize == 0, "chunk loop");
  static constexpr int kOffsetBytes = 3 * kWT * 8;  // TileOffsets storage per warp

  // 1. Block-table entries of tokens first + lane (+ 32) below `end`; -1 past it.
  __device__ static void fetch_pages(const int32_t* table, int first, int end, int block_size,
                                     int lane, int (&pf)[kTPL]) {
#pragma unroll
    for (int u = 0; u < kTPL; ++u) {
      const int i = lane + kWarpSize * u;
      const int tok = first + i;
      pf[u] = (i < kWT && tok < end) ? __ldg(table + tok / block_size) : -1;
    }
  }

  // 2. Offsets of tokens first + i (i < kWT) from their page entries.
  __device__ static void stage_offsets(const PageGeometry& geom, int kv_head, const int (&pf)[kTPL],
                                       int first, int end, int lane, const TileOffsets& off,
                                       bool& bad) {
    const bool split_x = geom.layout == KvLayout::kSplitX;
#pragma unroll
    for (int u = 0; u < kTPL; ++u) {
      const int i = lane + kWarpSize * u;
      if (i < kWT) {
        const int tok = first + i;
        int64_t ko = -1, vo = -1, so = -1;
        if (tok < end) {
          const int64_t pg = pf[u];
          if (pg < 0 || pg >= geom.num_blocks) {
            bad = true;  // never read: the row stays zero, the output NaN
          } else {
            const int slot = tok % geom.block_size;
            ko = geom.k_index(pg, kv_head, slot, 0) * kBits / 8;
            vo = split_x ? geom.v_index(pg, kv_head, slot, 0) : ko;
            so = geom.token_scale_index(pg, kv_head, slot);
          }
        }
        off.koff[i] = ko;
        off.voff[i] = vo;
        off.soff[i] = so;
      }
    }
  }

  // 3a. K rows (and NHD/HND V rows: v_index == k_index there), 16-byte chunks, lanes along a
  // row. kChunks divides 32, so a lane keeps its chunk and steps over tokens: per copy one
  // shared load of the token offset, one add, one cp.async (zero-fill past the end).
  // with_v = false copies K only (split-x, whose V is gathered).
  __device__ static void copy_rows_cp_async(const PoolView& pv, const TileStage<F, D, kWT>& st,
                                            const TileOffsets& off, int lane, bool with_v) {
    constexpr int kTokStep = kWarpSize / kChunks;
    const bool split_x = pv.geom.layout == KvLayout::kSplitX;
    const int64_t kchunk_stride = split_x ? int64_t{16} * pv.geom.block_size : 16;
    const int ch = lane % kChunks, tok0 = lane / kChunks;
    const uint8_t* kb = pv.k + ch * kchunk_stride;
    const uint8_t* vb = pv.v + ch * 16;
    uint8_t* kd = st.sk + tok0 * G::kRowStride + ch * 16;
    uint8_t* vd = st.sv + tok0 * G::kRowStride + ch * 16;
#pragma unroll
    for (int i = 0; i < kWT / kTokStep; ++i) {
      const int64_t ko = off.koff[tok0 + i * kTokStep];
      const bool ok = ko >= 0;
      const int64_t o = ok ? ko : 0;
      cp_async16(kd + i * kTokStep * G::kRowStride, kb + o, ok ? 16 : 0);
      if (with_v) cp_async16(vd + i * kTokStep * G::kRowStride, vb + o, ok ? 16 : 0);
    }
  }

  // 3d (v7). L2 prefetch of the K and V rows of tokens first + i (i < kWT, below `end`) from
  // their block-table entries `pf` (fetch_pages of the same tile): one bulk prefetch per row,
  // NHD/HND only (a token's row of one KV head is contiguous). Entries outside the pool are
  // skipped (the tile's copy marks them bad when it gets there).
  __device__ static void prefetch_rows_l2(const PoolView& pv, int kv_head, const int (&pf)[kTPL],
                                          int first, int end, int lane) {
    static_assert(G::kRowBytes % 16 == 0, "bulk prefetch sizes are multiples of 16 bytes");
#pragma unroll
    for (int u = 0; u < kTPL; ++u) {
      const int i = lane + kWarpSize * u;
      const int tok = first + i;
      const int64_t pg = pf[u];
      if (i < kWT && tok < end && pg >= 0 && pg < pv.geom.num_blocks) {
        const int64_t ko = pv.geom.k_index(pg, kv_head, tok % pv.geom.block_size, 0) * kBits / 8;
        bulk_prefetch_l2(pv.k + ko, G::kRowBytes);
        bulk_prefetch_l2(pv.v + ko, G::kRowBytes);
      }
    }
  }

  // 3b. Split-x V [.., head_dim, block_size] is token-minor: gathered element by element
  // (correct, slow), token fastest so neighbouring lanes read neighbouring slots.
  __device__ static void gather_split_x_v(const PoolView& pv, const TileStage<F, D, kWT>& st,
                                          const TileOffsets& off, int lane) {
    const int bs = pv.geom.block_size;
    for (int c = lane; c < kWT * kChunks; c += kWarpSize) {
      const int tok = c % kWT, ch = c / kWT;
      const int64_t vo = off.voff[tok];
      uint32_t w[4] = {0, 0, 0, 0};
      if (vo >= 0) {
#pragma unroll
        for (int e = 0; e < kX; ++e) {
          const uint32_t bits =
              raw_elem_bits<kBits>(pv.v, vo + static_cast<int64_t>(ch * kX + e) * bs);
          w[(e * kBits) / 32] |= bits << ((e * kBits) % 32);
        }
      }
      *reinterpret_cast<uint4*>(st.sv + tok * G::kRowStride + ch * 16) =
          make_uint4(w[0], w[1], w[2], w[3]);
    }
  }

  // 3c (v6). One bulk copy per valid K and V row (NHD/HND: a token's row is contiguous),
  // completing on `bar`; V rows of tokens past the end are zero-filled by cp.async. Returns
  // nothing: the caller announced valid_rows x 2 x kRowBytes transaction bytes first.
  __device__ static void copy_rows_bulk(const PoolView& pv, const TileStage<F, D, kWT>& st,
                                        const TileOffsets& off, int lane, uint64_t* bar,
                                        uint64_t l2_policy) {
#pragma unroll
    for (int u = 0; u < kTPL; ++u) {
      const int i = lane + kWarpSize * u;
      if (i < kWT) {
        const int64_t ko = off.koff[i];
        if (ko >= 0) {
          bulk_copy_g2s(st.sk + i * G::kRowStride, pv.k + ko, G::kRowBytes, bar, l2_policy);
          bulk_copy_g2s(st.sv + i * G::kRowStride, pv.v + ko, G::kRowBytes, bar, l2_policy);
        }
      }
    }
    // Zero V rows past the end (a lane per chunk, as in copy_rows_cp_async).
    constexpr int kTokStep = kWarpSize / kChunks;
    const int ch = lane % kChunks, tok0 = lane / kChunks;
#pragma unroll
    for (int i = 0; i < kWT / kTokStep; ++i) {
      const int r = tok0 + i * kTokStep;
      if (off.koff[r] < 0) cp_async16(st.sv + r * G::kRowStride + ch * 16, pv.v, 0);
    }
  }

  // Rows of the tile with data (tokens below the end on valid pages).
  __device__ static int valid_rows(const TileOffsets& off, int lane) {
    int n = 0;
#pragma unroll
    for (int u = 0; u < kTPL; ++u) {
      const int i = lane + kWarpSize * u;
      n += __popc(__ballot_sync(0xFFFFFFFFu, i < kWT && off.koff[i] >= 0));
    }
    return n;
  }

  // 4. Scales: per-token FP32 (4 bytes per token), or the block-scale codes of each token
  // (kScaleBytes: D/16 NVFP4, D/32 MXFP4), zero past the end.
  __device__ static void copy_scales(const PoolView& pv, const TileStage<F, D, kWT>& st,
                                     const TileOffsets& off, int lane) {
    if constexpr (G::kTokenScales) {
      for (int i = lane; i < kWT; i += kWarpSize) {
        const int64_t so = off.soff[i];
        const bool ok = so >= 0;
        cp_async4(st.sks + i * 4, ok ? pv.k_scales + so * 4 : pv.k_scales, ok ? 4 : 0);
        cp_async4(st.svs + i * 4, ok ? pv.v_scales + so * 4 : pv.v_scales, ok ? 4 : 0);
      }
    } else if constexpr (G::kScaleBytes % 4 == 0 && G::kScaleBytes > 0) {
      constexpr int kSB = G::kScaleBytes, kPieces = kSB / 4;
      for (int c = lane; c < kWT * kPieces; c += kWarpSize) {
        const int tok = c / kPieces, pc = c % kPieces;
        const int64_t so = off.soff[tok];
        const bool ok = so >= 0;
        cp_async4(st.sks + tok * kSB + pc * 4, ok ? pv.k_scales + so * kSB + pc * 4 : pv.k_scales,
                  ok ? 4 : 0);
        cp_async4(st.svs + tok * kSB + pc * 4, ok ? pv.v_scales + so * kSB + pc * 4 : pv.v_scales,
                  ok ? 4 : 0);
      }
    } else if constexpr (G::kScaleBytes > 0) {
      // 2 codes per token (MXFP4, head_dim 64): not 4-byte aligned, plain copies.
      static_assert(G::kScaleBytes == 2, "block-scale codes per token");
      for (int i = lane; i < kWT; i += kWarpSize) {
        const int64_t so = off.soff[i];
        uint8_t k0 = 0, k1 = 0, v0 = 0, v1 = 0;
        if (so >= 0) {
          k0 = pv.k_scales[so * 2], k1 = pv.k_scales[so * 2 + 1];
          v0 = pv.v_scales[so * 2], v1 = pv.v_scales[so * 2 + 1];
        }
        st.sks[i * 2] = k0, st.sks[i * 2 + 1] = k1;
        st.svs[i * 2] = v0, st.svs[i * 2 + 1] = v1;
      }
    }
  }
};

}  // namespace kvlab::gpu::mma
