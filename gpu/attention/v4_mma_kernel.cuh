// v4_mma_kernel.cuh: the tensor-core decode kernel shared by v4_mma_decode.cu and
// v5_mma_decode_2stage.cu, templated on a design point (a Config: pipeline stages, warp
// tile size, register cap, which operand flavours an instance carries). The algorithm and
// its numerics are described at the top of v4_mma_decode.cu; v5_mma_decode_2stage.cu says
// what its Config changes. Everything here is in an unnamed namespace: each version's
// translation unit instantiates only its own Config.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <mutex>
#include <sstream>
#include <type_traits>

#include "gpu/attention/decode_impl.h"
#include "gpu/attention/kv_vec.cuh"
#include "gpu/attention/v4_mma_ptx.cuh"
#include "gpu/attention/v4_tuning.h"
#include "gpu/core/cuda_check.h"
#include "gpu/core/device_info.h"
#include "gpu/dispatch.cuh"

namespace kvlab::gpu::detail {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kHeadsPerBlock = 8;    // the mma N: query heads of one block
constexpr int kMergeWarps = 4;       // merge kernel: one warp per output row
constexpr float kPScale = 16384.0f;  // f16 flavour: P * 2^14 keeps P's f16 split subnormal-free

// The design point of a version (stages, tile size, register cap), see V4Config / V5Config.
// Tokens of one warp tile: about tile_bytes of K+V per pipeline stage, 16..64 tokens.
template <class Cfg>
KVLAB_HD constexpr int v4_warp_tile(int head_dim, int bits) {
  const int rb = head_dim * bits / 8;
  const int wt = Cfg::kTileBytes / (2 * rb);
  return wt < 16 ? 16 : (wt > 64 ? 64 : wt);
}
// Bytes per token of the shared-memory scale tile of an element class (per-token FP32, or
// NVFP4's D/16 block-scale codes, which also holds MXFP4's D/32).
KVLAB_HD constexpr int v4_scale_stride(KvElem e, int head_dim) {
  return e == KvElem::kE4M3 ? 4 : (e == KvElem::kE2M1 ? head_dim / 16 : 0);
}
KVLAB_HD constexpr int round16(int x) {
  return (x + 15) / 16 * 16;
}

// Shared-memory footprint of a block (host and device agree through these functions).
struct V4Smem {
  int row_stride, warp_tile, scale_tile, stage_bytes, warp_bytes, qfrag_bytes, merge_bytes, total;
};
template <class Cfg>
KVLAB_HD constexpr V4Smem v4_smem(int head_dim, KvElem e) {
  const int bits = kv_elem_bits(e);
  const int rb = head_dim * bits / 8;
  V4Smem s{};
  s.row_stride = rb + 16;  // padding: consecutive rows start 4 banks apart
  s.warp_tile = v4_warp_tile<Cfg>(head_dim, bits);
  s.scale_tile = round16(s.warp_tile * v4_scale_stride(e, head_dim));
  s.stage_bytes = 2 * s.warp_tile * s.row_stride + 2 * s.scale_tile;
  s.warp_bytes =
      Cfg::kStages * s.stage_bytes + 3 * s.warp_tile * 8;  // + koff, voff, soff [warp_tile] int64
  s.qfrag_bytes =
      2 * (head_dim / 16) * kWarpSize * 8 + kHeadsPerBlock * 4;  // hi, lo, column scales
  s.merge_bytes = 2 * kWarps * kHeadsPerBlock * 4 + kWarps * kHeadsPerBlock * (head_dim + 4) * 4;
  const int pipe = kWarps * s.warp_bytes;
  s.total = (pipe > s.merge_bytes ? pipe : s.merge_bytes) + s.qfrag_bytes;
  return s;
}

struct V4Params {
  const void* q;  // [num_seqs, num_qo_heads, head_dim]  bf16/fp16
  void* o;        // [num_seqs, num_qo_heads, head_dim]
  float* lse;     // [num_seqs, num_qo_heads] or null
  bool q_bf16;
  const uint8_t* k;  // pools, kv_layout.h
  const uint8_t* v;
  const uint8_t* k_scales;  // per-token float / block-scale codes (kv_layout.h), or null
  const uint8_t* v_scales;
  float qk_scale;   // sm_scale x K pool scale (kPool, NVFP4 tensor scale)
  float out_scale;  // V pool scale (kPool, NVFP4 tensor scale), else 1
  PageGeometry geom;
  ScaleMode mode;
  const int32_t* block_table;  // [num_seqs, max_blocks_per_seq]
  const int32_t* seq_lens;     // [num_seqs]
  int num_seqs;
  int num_qo_heads;
  int group_size;
  int max_blocks_per_seq;
  int seq_len_bound;
  int num_qtiles;  // ceil(group_size / 8)
  int num_splits;
  int chunk_tokens;    // tokens per split
  float* partial_o;    // [num_seqs * num_qo_heads, num_splits, head_dim]  (num_splits > 1)
  float* partial_lse;  // [num_seqs * num_qo_heads, num_splits]
};

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

// N consecutive activations (N = 4, 8, 16; 8-byte aligned) -> floats.
template <int N>
__device__ __forceinline__ void load_act_n(const void* src, int64_t elem_offset, bool is_bf16,
                                           float (&out)[N]) {
  const uint16_t* s = static_cast<const uint16_t*>(src) + elem_offset;
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    const uint2 r = *reinterpret_cast<const uint2*>(s + i);
    const float2 a = is_bf16 ? bf16x2_bits_to_float2(r.x) : fp16x2_bits_to_float2(r.x);
    const float2 b = is_bf16 ? bf16x2_bits_to_float2(r.y) : fp16x2_bits_to_float2(r.y);
    out[i] = a.x, out[i + 1] = a.y, out[i + 2] = b.x, out[i + 3] = b.y;
  }
}

// kWords 32-bit words from shared memory (8- or 16-byte aligned when kWords >= 2 / 4).
template <int kWords>
__device__ __forceinline__ void lds_words(const uint8_t* src, uint32_t (&w)[kWords]) {
  if constexpr (kWords == 1) {
    w[0] = *reinterpret_cast<const uint32_t*>(src);
  } else if constexpr (kWords == 2) {
    const uint2 r = *reinterpret_cast<const uint2*>(src);
    w[0] = r.x, w[1] = r.y;
  } else {
#pragma unroll
    for (int i = 0; i < kWords / 4; ++i) {
      const uint4 r = *reinterpret_cast<const uint4*>(src + 16 * i);
      w[4 * i] = r.x, w[4 * i + 1] = r.y, w[4 * i + 2] = r.z, w[4 * i + 3] = r.w;
    }
  }
}

// A range of 2/4/8/16 bytes of shared memory as 32-bit words (a 2-byte range in the low half).
template <int kBytes>
__device__ __forceinline__ void lds_range(const uint8_t* src, uint32_t (&w)[(kBytes + 3) / 4]) {
  if constexpr (kBytes == 2)
    w[0] = *reinterpret_cast<const uint16_t*>(src);
  else
    lds_words<kBytes / 4>(src, w);
}

// Element `idx` of a pool as raw storage bits (the split-x V gather).
template <int kBits>
__device__ __forceinline__ uint32_t raw_elem_bits(const uint8_t* pool, int64_t idx) {
  if constexpr (kBits == 16) return reinterpret_cast<const uint16_t*>(pool)[idx];
  if constexpr (kBits == 8) return pool[idx];
  const uint8_t b = pool[idx >> 1];
  return (idx & 1) ? (b >> 4) : (b & 0xFu);
}

// The block-scale multiplier of a code (NVFP4's tensor scale is folded elsewhere).
__device__ __forceinline__ float block_code_value(ScaleMode mode, uint8_t code) {
  return mode == ScaleMode::kNvfp4 ? e4m3_to_float(code) : ue8m0_to_float(code);
}

// Four stored elements (the low 16 bits of w for 4-bit storage, w for 8-bit) -> floats, exactly.
template <KvElem E>
__device__ __forceinline__ void decode4(uint32_t w, float (&f)[4]) {
  if constexpr (E == KvElem::kE2M1) {
    const float2 a = e2m1x2_to_float2(w & 0xFFu), b = e2m1x2_to_float2((w >> 8) & 0xFFu);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
  } else if constexpr (E == KvElem::kE4M3) {
    const float2 a = e4m3x2_to_float2(static_cast<uint16_t>(w & 0xFFFFu)),
                 b = e4m3x2_to_float2(static_cast<uint16_t>(w >> 16));
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
  } else {
    const float2 a = e5m2x2_to_float2(w & 0xFFFFu), b = e5m2x2_to_float2(w >> 16);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
  }
}

// Tokens per lane of a warp tile's block-table prefetch (lane i: tokens i, i + 32, ...).
template <class Cfg, int D, KvElem E>
KVLAB_HD constexpr int v4_tpl() {
  return (v4_smem<Cfg>(D, E).warp_tile + kWarpSize - 1) / kWarpSize;
}

// What a block loads before it knows its sequence length (TUNING.md, step 6): the raw Q
// slice of this thread and the block-table entries of its warp's first tile. A split's
// token range starts at split * chunk_tokens whatever the length, so these loads go out
// together with the length's instead of one round trip after it; entries past the length
// are never used (load_tile checks tok < end), and the table row is read only inside
// [0, max_blocks_per_seq).
template <class Cfg, int D, KvElem E>
struct V4Startup {
  uint2 q[D / 64];  // this thread's D/16 Q elements as 16-bit pairs (load_act_n order)
  int pages[v4_tpl<Cfg, D, E>()];  // table entries of tokens start + warp * warp_tile + lane (+32)
};

template <class Cfg, int D, KvElem E>
__device__ __forceinline__ void v4_startup_loads(const V4Params& p, int seq, int kv_head, int qtile,
                                                 int start, V4Startup<Cfg, D, E>& su) {
  constexpr int kWT = v4_smem<Cfg>(D, E).warp_tile;
  constexpr int kQE = D / 16;
  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int hl = tid >> 4, part = tid & 15;
  const int gl = qtile * kHeadsPerBlock + hl;
#pragma unroll
  for (int i = 0; i < D / 64; ++i) su.q[i] = make_uint2(0u, 0u);
  if (gl < p.group_size) {
    const int64_t base =
        (static_cast<int64_t>(seq) * p.num_qo_heads + kv_head * p.group_size + gl) * D + part * kQE;
    const uint16_t* src = static_cast<const uint16_t*>(p.q) + base;
#pragma unroll
    for (int i = 0; i < D / 64; ++i) su.q[i] = *reinterpret_cast<const uint2*>(src + 4 * i);
  }
  const int32_t* table = p.block_table + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const int64_t limit = min(static_cast<int64_t>(start) + p.chunk_tokens,
                            min(static_cast<int64_t>(p.seq_len_bound),
                                static_cast<int64_t>(p.max_blocks_per_seq) * p.geom.block_size));
#pragma unroll
  for (int u = 0; u < v4_tpl<Cfg, D, E>(); ++u) {
    const int i = lane + kWarpSize * u;
    const int64_t tok = static_cast<int64_t>(start) + static_cast<int64_t>(warp) * kWT + i;
    su.pages[u] = (i < kWT && tok < limit) ? __ldg(table + tok / p.geom.block_size) : -1;
  }
}

// The block body of one (sequence, KV head, query tile, split), for one operand flavour:
// kQkF16 / kPvF16 select f16 or bf16 mma operands for Q.K^T and P.V.
// blockDim 128 (4 warps); shared memory laid out by v4_smem().
template <class Cfg, int D, KvElem E, bool kQkF16, bool kPvF16>
__device__ __forceinline__ void v4_block(const V4Params& p, uint8_t* smem, int seq, int kv_head,
                                         int qtile, int split, int start, int end,
                                         const V4Startup<Cfg, D, E>& su) {
  constexpr int kBits = kv_elem_bits(E);
  constexpr bool k16 = kBits == 16;
  constexpr int kRowBytes = D * kBits / 8;
  constexpr V4Smem kS = v4_smem<Cfg>(D, E);
  constexpr int kStages = Cfg::kStages;
  constexpr int kRowStride = kS.row_stride;
  constexpr int kWT = kS.warp_tile;
  constexpr int kSub = kWT / 16;                           // 16-token mma passes per tile
  constexpr int kTPL = (kWT + kWarpSize - 1) / kWarpSize;  // tokens per lane (offsets, pages)
  constexpr int kChunks = kRowBytes / 16;                  // 16-byte chunks per row
  constexpr int kX = 128 / kBits;                          // elements per chunk
  constexpr int kSB = v4_scale_stride(E, D);
  constexpr int kMT = D / 16;                   // k-steps of Q.K^T = m-tiles of P.V
  constexpr int kCS = kMT < 8 ? kMT : 8;        // k-steps per K-slice load
  constexpr int kCBytes = kCS * 4 * kBits / 8;  // bytes per token per K-slice load
  constexpr int kCW = kCBytes / 4;
  constexpr int kRange = D / 16;  // dims per V range (8/4-bit path)
  constexpr int kRangeBytes = kRange * kBits / 8;
  constexpr int kRangeWords = (kRangeBytes + 3) / 4;
  static_assert(kChunks >= 2 && (kWT * kChunks) % kWarpSize == 0, "chunk loop");
  static_assert(kCBytes % 8 == 0, "K slice loads");

  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int g = lane >> 2, t = lane & 3;
  const PageGeometry& geom = p.geom;
  const int bs = geom.block_size;
  const int64_t num_blocks = geom.num_blocks;
  const bool split_x = geom.layout == KvLayout::kSplitX;
  const int64_t kchunk_stride = split_x ? int64_t{16} * bs : 16;  // bytes between a row's K chunks
  const int32_t* table = p.block_table + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const bool single = p.num_splits == 1;

  uint8_t* wbase = smem + warp * kS.warp_bytes;
  int64_t* s_koff = reinterpret_cast<int64_t*>(
      wbase + kStages * kS.stage_bytes);  // [kWT] K row byte offset, -1: none
  int64_t* s_voff = s_koff + kWT;         // split-x: V element index of dim 0; else unused
  int64_t* s_soff = s_voff + kWT;         // token scale index (token_scale_index), -1: none
  uint8_t* qbase =
      smem + (kWarps * kS.warp_bytes > kS.merge_bytes ? kWarps * kS.warp_bytes : kS.merge_bytes);
  uint2* qf_hi = reinterpret_cast<uint2*>(qbase);  // [kMT][32] B fragments of Q^T
  uint2* qf_lo = qf_hi + kMT * kWarpSize;          // bf16 flavour, f16 Q: the low part
  float* colscale = reinterpret_cast<float*>(qf_lo + kMT * kWarpSize);  // [8]

  // ---- this warp's tiles: every kWarps-th tile of [start, end)
  const int num_tiles = (end - start + kWT - 1) / kWT;
  const int my_tiles = num_tiles > warp ? (num_tiles - warp + kWarps - 1) / kWarps : 0;
  auto tile_of = [&](int i) { return warp + kWarps * i; };
  bool bad = false;

  // Block-table entries of a tile's tokens (lane i: tokens i and i + 32), loaded one tile
  // ahead of their use so the latency overlaps a tile of compute.
  int pf[kTPL];
  auto fetch_pages = [&](int j) {
#pragma unroll
    for (int u = 0; u < kTPL; ++u) {
      const int i = lane + kWarpSize * u;
      const int tok = start + j * kWT + i;
      pf[u] = (i < kWT && tok < end) ? __ldg(table + tok / bs) : -1;
    }
  };

  auto load_tile = [&](int j, int st) {
    __syncwarp();  // every lane is done reading the offsets of the previous call
    uint8_t* sk = wbase + st * kS.stage_bytes;
    uint8_t* sv = sk + kWT * kRowStride;
    uint8_t* sks = sv + kWT * kRowStride;
    uint8_t* svs = sks + kS.scale_tile;
    const int tb = start + j * kWT;
#pragma unroll
    for (int u = 0; u < kTPL; ++u) {
      const int i = lane + kWarpSize * u;
      if (i < kWT) {
        const int tok = tb + i;
        int64_t ko = -1, vo = -1, so = -1;
        if (tok < end) {
          const int64_t pg = pf[u];
          if (pg < 0 || pg >= num_blocks) {
            bad = true;  // never read: the row stays zero, the output NaN
          } else {
            const int slot = tok % bs;
            ko = geom.k_index(pg, kv_head, slot, 0) * kBits / 8;
            vo = split_x ? geom.v_index(pg, kv_head, slot, 0) : ko;
            so = geom.token_scale_index(pg, kv_head, slot);
          }
        }
        s_koff[i] = ko;
        s_voff[i] = vo;
        s_soff[i] = so;
      }
    }
    __syncwarp();
    // K rows (and NHD/HND V rows: v_index == k_index there), 16-byte chunks, lanes along a
    // row. kChunks divides 32, so a lane keeps its chunk and steps over tokens: per copy one
    // shared load of the token offset, one add, one cp.async (zero-fill past the end).
    {
      constexpr int kTokStep = kWarpSize / kChunks;
      const int ch = lane % kChunks, tok0 = lane / kChunks;
      const uint8_t* kb = p.k + ch * kchunk_stride;
      const uint8_t* vb = p.v + ch * 16;
      uint8_t* kd = sk + tok0 * kRowStride + ch * 16;
      uint8_t* vd = sv + tok0 * kRowStride + ch * 16;
#pragma unroll
      for (int i = 0; i < kWT / kTokStep; ++i) {
        const int64_t ko = s_koff[tok0 + i * kTokStep];
        const bool ok = ko >= 0;
        const int64_t off = ok ? ko : 0;
        cp_async16(kd + i * kTokStep * kRowStride, kb + off, ok ? 16 : 0);
        if (!split_x) cp_async16(vd + i * kTokStep * kRowStride, vb + off, ok ? 16 : 0);
      }
    }
    if (split_x) {
      // split-x V [.., head_dim, block_size] is token-minor: gather (correct, slow), token
      // fastest so neighbouring lanes read neighbouring slots.
      for (int c = lane; c < kWT * kChunks; c += kWarpSize) {
        const int tok = c % kWT, ch = c / kWT;
        const int64_t vo = s_voff[tok];
        uint32_t w[4] = {0, 0, 0, 0};
        if (vo >= 0) {
#pragma unroll
          for (int e = 0; e < kX; ++e) {
            const uint32_t bits =
                raw_elem_bits<kBits>(p.v, vo + static_cast<int64_t>(ch * kX + e) * bs);
            w[(e * kBits) / 32] |= bits << ((e * kBits) % 32);
          }
        }
        *reinterpret_cast<uint4*>(sv + tok * kRowStride + ch * 16) =
            make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
    if constexpr (E == KvElem::kE4M3) {
      if (p.mode == ScaleMode::kPerToken) {
        for (int i = lane; i < kWT; i += kWarpSize) {
          const int64_t so = s_soff[i];
          const bool ok = so >= 0;
          mma::cp_async4(sks + i * 4, ok ? p.k_scales + so * 4 : p.k_scales, ok ? 4 : 0);
          mma::cp_async4(svs + i * 4, ok ? p.v_scales + so * 4 : p.v_scales, ok ? 4 : 0);
        }
      }
    }
    if constexpr (E == KvElem::kE2M1) {
      const int sb = D / geom.scale_group();  // scale codes per token: D/16 (NVFP4), D/32 (MXFP4)
      if ((sb & 3) == 0) {
        const int pieces = sb / 4;
        for (int c = lane; c < kWT * pieces; c += kWarpSize) {
          const int tok = c / pieces, pc = c % pieces;
          const int64_t so = s_soff[tok];
          const bool ok = so >= 0;
          mma::cp_async4(sks + tok * kSB + pc * 4, ok ? p.k_scales + so * sb + pc * 4 : p.k_scales,
                         ok ? 4 : 0);
          mma::cp_async4(svs + tok * kSB + pc * 4, ok ? p.v_scales + so * sb + pc * 4 : p.v_scales,
                         ok ? 4 : 0);
        }
      } else {  // 2 codes per token (MXFP4, head_dim 64): not 4-byte aligned, plain copies
        for (int i = lane; i < kWT; i += kWarpSize) {
          const int64_t so = s_soff[i];
          uint8_t k0 = 0, k1 = 0, v0 = 0, v1 = 0;
          if (so >= 0) {
            k0 = p.k_scales[so * 2], k1 = p.k_scales[so * 2 + 1];
            v0 = p.v_scales[so * 2], v1 = p.v_scales[so * 2 + 1];
          }
          sks[i * kSB] = k0, sks[i * kSB + 1] = k1;
          svs[i * kSB] = v0, svs[i * kSB + 1] = v1;
        }
      }
    }
    cp_async_commit();
  };

  // ---- pipeline prologue first: its loads fly while Q is prepared.
  // The first tile's entries came with the start-up loads (tile_of(0) == warp).
#pragma unroll
  for (int u = 0; u < kTPL; ++u) pf[u] = su.pages[u];
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < my_tiles) {
      load_tile(tile_of(s), s);
      if (s + 1 < my_tiles) fetch_pages(tile_of(s + 1));
    } else {
      cp_async_commit();  // uniform group count
    }
  }

  // ---- Q^T B fragments into shared memory (fragment order: [k-step][lane], conflict-free).
  const bool q_lo = !kQkF16 && !p.q_bf16;  // an f16 Q split into bf16 hi + lo
  {
    constexpr int kQE = D / 16;  // elements per thread: 16 threads per head
    const int hl = tid >> 4, part = tid & 15;
    const int gl = qtile * kHeadsPerBlock + hl;
    const bool hv = gl < p.group_size;
    float qv[kQE];
#pragma unroll
    for (int e = 0; e < kQE; ++e) qv[e] = 0.0f;
    if (hv) {
#pragma unroll
      for (int i = 0; i < kQE / 4; ++i) {
        const uint2 r = su.q[i];
        const float2 a = p.q_bf16 ? bf16x2_bits_to_float2(r.x) : fp16x2_bits_to_float2(r.x);
        const float2 b = p.q_bf16 ? bf16x2_bits_to_float2(r.y) : fp16x2_bits_to_float2(r.y);
        qv[4 * i] = a.x, qv[4 * i + 1] = a.y, qv[4 * i + 2] = b.x, qv[4 * i + 3] = b.y;
      }
    }
    float pre = 1.0f, cs = p.qk_scale;
    if constexpr (kQkF16) {
      float amax = 0.0f;
#pragma unroll
      for (int e = 0; e < kQE; ++e) amax = fmaxf(amax, fabsf(qv[e]));
      amax = group_max<16>(amax);  // the 16 threads of this head (aligned lane groups)
      if (amax > 0.0f && amax <= 3.4028235e38f) {
        int ex = 0;
        frexpf(amax, &ex);  // amax in [2^(ex-1), 2^ex)
        const int k = max(-100, min(100, 15 - ex));
        pre = ldexpf(1.0f, k);
        cs = p.qk_scale * ldexpf(1.0f, -k);
      }
    }
    // Element dim = part*kQE + e lands in k-step s = (dim % (D/4)) / 4 of lane hl*4 + dim / (D/4).
#pragma unroll
    for (int e = 0; e < kQE; e += 4) {
      const int dim = part * kQE + e;
      const int tq = dim / (D / 4), s = (dim % (D / 4)) / 4;
      const int entry = s * kWarpSize + hl * 4 + tq;
      uint32_t h0, l0, h1, l1;
      mma::split2<kQkF16>(qv[e] * pre, qv[e + 1] * pre, h0, l0);
      mma::split2<kQkF16>(qv[e + 2] * pre, qv[e + 3] * pre, h1, l1);
      qf_hi[entry] = make_uint2(h0, h1);
      qf_lo[entry] = make_uint2(l0, l1);
    }
    if (part == 0) colscale[hl] = cs;
  }
  __syncthreads();
  const float cs0 = colscale[2 * t], cs1 = colscale[2 * t + 1];

  // ---- online-softmax state of this warp: heads 2t and 2t+1 (uniform over g after the
  // warp reductions); acc = O^T fragments [kMT m-tiles][c0..c3].
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  float acc[kMT][4];
#pragma unroll
  for (int i = 0; i < kMT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  const bool per_token = E == KvElem::kE4M3 && p.mode == ScaleMode::kPerToken;

  auto compute_tile = [&](int j, int st) {
    const uint8_t* sk = wbase + st * kS.stage_bytes;
    const uint8_t* sv = sk + kWT * kRowStride;
    const uint8_t* sks = sv + kWT * kRowStride;
    const uint8_t* svs = sks + kS.scale_tile;
    const int tb = start + j * kWT;

    float s[kSub][4];
#pragma unroll
    for (int sub = 0; sub < kSub; ++sub) {
      const int r0 = sub * 16 + g, r1 = r0 + 8;
      // Two accumulators (even / odd k-steps): half the dependent mma chain.
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const uint8_t* k0 = sk + r0 * kRowStride + t * (kRowBytes / 4);
      const uint8_t* k1 = sk + r1 * kRowStride + t * (kRowBytes / 4);
      // NVFP4 (f16 flavour): the E4M3 block scales of this thread's slice [t*D/4, (t+1)*D/4)
      // as replicated f16x2 pairs (group j of the slice covers k-steps 4j .. 4j+3).
      constexpr int kGpt = (D / 4) >= 16 ? (D / 4) / 16 : 1;
      uint32_t ksc0[kGpt], ksc1[kGpt];
      if constexpr (E == KvElem::kE2M1 && kQkF16) {
#pragma unroll
        for (int j = 0; j < kGpt; ++j) {
          ksc0[j] =
              mma::e4m3x2_to_f16x2(static_cast<uint32_t>(sks[r0 * kSB + t * kGpt + j]) * 0x0101u);
          ksc1[j] =
              mma::e4m3x2_to_f16x2(static_cast<uint32_t>(sks[r1 * kSB + t * kGpt + j]) * 0x0101u);
        }
      }
#pragma unroll
      for (int ck = 0; ck < kMT / kCS; ++ck) {
        uint32_t w0[kCW], w1[kCW];
        lds_words<kCW>(k0 + ck * kCBytes, w0);
        lds_words<kCW>(k1 + ck * kCBytes, w1);
#pragma unroll
        for (int s_ = 0; s_ < kCS; ++s_) {
          const int ks = ck * kCS + s_;
          uint32_t a[4];
          if constexpr (k16) {  // bf16 / fp16: the stored pairs are the fragments
            a[0] = w0[2 * s_], a[2] = w0[2 * s_ + 1], a[1] = w1[2 * s_], a[3] = w1[2 * s_ + 1];
          } else if constexpr (E == KvElem::kE4M3) {
            a[0] = mma::e4m3x2_to_f16x2(w0[s_]), a[2] = mma::e4m3x2_to_f16x2(w0[s_] >> 16);
            a[1] = mma::e4m3x2_to_f16x2(w1[s_]), a[3] = mma::e4m3x2_to_f16x2(w1[s_] >> 16);
          } else if constexpr (E == KvElem::kE5M2) {  // the code is the top byte of the equal half
            a[0] = __byte_perm(w0[s_], 0u, 0x1404), a[2] = __byte_perm(w0[s_], 0u, 0x3424);
            a[1] = __byte_perm(w1[s_], 0u, 0x1404), a[3] = __byte_perm(w1[s_], 0u, 0x3424);
          } else if constexpr (kQkF16) {  // NVFP4: e2m1 -> e4m3 bytes -> f16, x the E4M3 block
                                          // scale (exact)
            const uint32_t e0 = mma::e2m1x4_to_e4m3x4(w0[s_ / 2] >> (16 * (s_ % 2)));
            const uint32_t e1 = mma::e2m1x4_to_e4m3x4(w1[s_ / 2] >> (16 * (s_ % 2)));
            const uint32_t sc0 = ksc0[ks / 4 < kGpt ? ks / 4 : kGpt - 1],
                           sc1 = ksc1[ks / 4 < kGpt ? ks / 4 : kGpt - 1];
            a[0] = mma::hmul2_bits(mma::e4m3x2_to_f16x2(e0), sc0),
            a[2] = mma::hmul2_bits(mma::e4m3x2_to_f16x2(e0 >> 16), sc0);
            a[1] = mma::hmul2_bits(mma::e4m3x2_to_f16x2(e1), sc1),
            a[3] = mma::hmul2_bits(mma::e4m3x2_to_f16x2(e1 >> 16), sc1);
          } else {  // MXFP4: e2m1 x 2^k in bf16 (exact)
            const int grp = (t * (D / 4) + 4 * ks) / geom.scale_group();
            const float sc0 = block_code_value(p.mode, sks[r0 * kSB + grp]);
            const float sc1 = block_code_value(p.mode, sks[r1 * kSB + grp]);
            float f0[4], f1[4];
            decode4<E>(w0[s_ / 2] >> (16 * (s_ % 2)), f0);
            decode4<E>(w1[s_ / 2] >> (16 * (s_ % 2)), f1);
            a[0] = mma::pack2<kQkF16>(f0[0] * sc0, f0[1] * sc0),
            a[2] = mma::pack2<kQkF16>(f0[2] * sc0, f0[3] * sc0);
            a[1] = mma::pack2<kQkF16>(f1[0] * sc1, f1[1] * sc1),
            a[3] = mma::pack2<kQkF16>(f1[2] * sc1, f1[3] * sc1);
          }
          const uint2 bh = qf_hi[ks * kWarpSize + lane];
          float(&cc)[4] = (ks & 1) ? c2 : c;
          mma::mma16816<kQkF16>(cc, a, bh.x, bh.y);
          if (!kQkF16 && q_lo) {
            const uint2 bl = qf_lo[ks * kWarpSize + lane];
            mma::mma16816<kQkF16>(cc, a, bl.x, bl.y);
          }
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) c[e] += c2[e];
      float ks0 = 1.0f, ks1 = 1.0f;
      if (per_token) {
        ks0 = reinterpret_cast<const float*>(sks)[r0];
        ks1 = reinterpret_cast<const float*>(sks)[r1];
      }
      const bool v0 = tb + r0 < end, v1 = tb + r1 < end;
      s[sub][0] = v0 ? c[0] * cs0 * ks0 : -INFINITY;  // (token r0, head 2t)
      s[sub][1] = v0 ? c[1] * cs1 * ks0 : -INFINITY;  // (token r0, head 2t+1)
      s[sub][2] = v1 ? c[2] * cs0 * ks1 : -INFINITY;  // (token r1, head 2t)
      s[sub][3] = v1 ? c[3] * cs1 * ks1 : -INFINITY;
    }

    // Online softmax over the tile: one max / rescale per tile, per head of this thread.
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int sub = 0; sub < kSub; ++sub) {
      mx0 = fmaxf(mx0, fmaxf(s[sub][0], s[sub][2]));
      mx1 = fmaxf(mx1, fmaxf(s[sub][1], s[sub][3]));
    }
#pragma unroll
    for (int off = 4; off < kWarpSize; off *= 2) {  // over g (the tokens), not t (the heads)
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xFFFFFFFFu, mx0, off));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xFFFFFFFFu, mx1, off));
    }
    const float corr0 = exp_diff(m0, mx0), corr1 = exp_diff(m1, mx1);
    m0 = mx0, m1 = mx1;
    l0 *= corr0, l1 *= corr1;
#pragma unroll
    for (int i = 0; i < kMT; ++i) {
      acc[i][0] *= corr0, acc[i][1] *= corr1, acc[i][2] *= corr0, acc[i][3] *= corr1;
    }

#pragma unroll
    for (int sub = 0; sub < kSub; ++sub) {
      const int r0 = sub * 16 + g, r1 = r0 + 8;
      float p0 = exp_diff(s[sub][0], m0), p1 = exp_diff(s[sub][1], m1);
      float p2 = exp_diff(s[sub][2], m0), p3 = exp_diff(s[sub][3], m1);
      l0 += p0 + p2, l1 += p1 + p3;
      if constexpr (kPvF16) {
        p0 *= kPScale, p1 *= kPScale, p2 *= kPScale, p3 *= kPScale;
      } else if (per_token) {  // V's per-token scale rides on the probability (bf16 range)
        const float vs0 = reinterpret_cast<const float*>(svs)[r0],
                    vs1 = reinterpret_cast<const float*>(svs)[r1];
        p0 *= vs0, p1 *= vs0, p2 *= vs1, p3 *= vs1;
      }
      // S^T C fragment (token, head pairs) -> P^T B fragment (token pairs of one head).
      uint32_t h01, lo01, h23, lo23;
      mma::split2<kPvF16>(p0, p1, h01, lo01);
      mma::split2<kPvF16>(p2, p3, h23, lo23);
      const uint32_t bh0 = mma::movmatrix_trans(h01), bh1 = mma::movmatrix_trans(h23);
      const uint32_t bl0 = mma::movmatrix_trans(lo01), bl1 = mma::movmatrix_trans(lo23);

      if constexpr (k16) {
        // V^T fragments straight from the token-major tile: matrix i of lane l is rows
        // (tokens) (i/2)*8 + l%8, columns (dims) mt*16 + (i%2)*8.
        const uint8_t* vrow =
            sv + (sub * 16 + (lane >> 4) * 8 + (lane & 7)) * kRowStride + ((lane >> 3) & 1) * 16;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          uint32_t a[4];
          mma::ldmatrix_x4_trans(a, vrow + mt * 32);
          mma::mma16816<kPvF16>(acc[mt], a, bh0, bh1);
          mma::mma16816<kPvF16>(acc[mt], a, bl0, bl1);
        }
      } else {
        // Thread (g, t): tokens 2t, 2t+1 (a0/a1), 2t+8, 2t+9 (a2/a3) of the pass; dims
        // [g*kRange, ...) (a0/a2) and [(g+8)*kRange, ...) (a1/a3); m-tile mt = dim offset.
        const uint8_t* vb = sv + (sub * 16) * kRowStride;
        const int ra = 2 * t, rb = 2 * t + 1, rc = 2 * t + 8, rd = 2 * t + 9;
        const int o0 = g * kRangeBytes, o1 = (g + 8) * kRangeBytes;
        uint32_t wa0[kRangeWords], wa1[kRangeWords], wb0[kRangeWords], wb1[kRangeWords];
        uint32_t wc0[kRangeWords], wc1[kRangeWords], wd0[kRangeWords], wd1[kRangeWords];
        lds_range<kRangeBytes>(vb + ra * kRowStride + o0, wa0);
        lds_range<kRangeBytes>(vb + ra * kRowStride + o1, wa1);
        lds_range<kRangeBytes>(vb + rb * kRowStride + o0, wb0);
        lds_range<kRangeBytes>(vb + rb * kRowStride + o1, wb1);
        lds_range<kRangeBytes>(vb + rc * kRowStride + o0, wc0);
        lds_range<kRangeBytes>(vb + rc * kRowStride + o1, wc1);
        lds_range<kRangeBytes>(vb + rd * kRowStride + o0, wd0);
        lds_range<kRangeBytes>(vb + rd * kRowStride + o1, wd1);
        // Block scales of the 8 (token, range) pieces: each range lies inside one group.
        float sa0 = 1.0f, sa1 = 1.0f, sb0 = 1.0f, sb1 = 1.0f, sc0 = 1.0f, sc1 = 1.0f, sd0 = 1.0f,
              sd1 = 1.0f;
        uint32_t hab0 = 0, hab1 = 0, hcd0 = 0, hcd1 = 0;  // NVFP4: f16x2 (scale of x, scale of y)
        if constexpr (E == KvElem::kE2M1) {
          const int gs = geom.scale_group();
          const int q0 = (g * kRange) / gs, q1 = ((g + 8) * kRange) / gs;
          const uint8_t* vsc = svs + (sub * 16) * kSB;
          if constexpr (kPvF16) {
            auto pair = [&](int x, int y, int q) {
              return mma::e4m3x2_to_f16x2(static_cast<uint32_t>(vsc[x * kSB + q]) |
                                          (static_cast<uint32_t>(vsc[y * kSB + q]) << 8));
            };
            hab0 = pair(ra, rb, q0), hab1 = pair(ra, rb, q1), hcd0 = pair(rc, rd, q0),
            hcd1 = pair(rc, rd, q1);
          } else {
            sa0 = block_code_value(p.mode, vsc[ra * kSB + q0]),
            sa1 = block_code_value(p.mode, vsc[ra * kSB + q1]);
            sb0 = block_code_value(p.mode, vsc[rb * kSB + q0]),
            sb1 = block_code_value(p.mode, vsc[rb * kSB + q1]);
            sc0 = block_code_value(p.mode, vsc[rc * kSB + q0]),
            sc1 = block_code_value(p.mode, vsc[rc * kSB + q1]);
            sd0 = block_code_value(p.mode, vsc[rd * kSB + q0]),
            sd1 = block_code_value(p.mode, vsc[rd * kSB + q1]);
          }
        }
        constexpr int kPerWord = 32 / kBits;  // elements per word
#pragma unroll
        for (int q4 = 0; q4 < kRange / 4; ++q4) {  // 4 dims (4 m-tiles) at a time
          const int wi = (q4 * 4) / kPerWord, sh = ((q4 * 4) % kPerWord) * kBits;
          uint32_t A[4][4];  // [m-tile within the step][a0..a3]
          auto pieces = [&](const uint32_t(&x)[kRangeWords], const uint32_t(&y)[kRangeWords],
                            float sx, float sy, uint32_t hxy, int reg) {
            const uint32_t px = x[wi] >> sh, py = y[wi] >> sh;
            if constexpr (E == KvElem::kE2M1 &&
                          kPvF16) {  // NVFP4: via e4m3 bytes, x the scale pair
              const uint32_t ex = mma::e2m1x4_to_e4m3x4(px), ey = mma::e2m1x4_to_e4m3x4(py);
              const uint32_t lo = __byte_perm(ex, ey, 0x5140), hi = __byte_perm(ex, ey, 0x7362);
              A[0][reg] = mma::hmul2_bits(mma::e4m3x2_to_f16x2(lo), hxy);
              A[1][reg] = mma::hmul2_bits(mma::e4m3x2_to_f16x2(lo >> 16), hxy);
              A[2][reg] = mma::hmul2_bits(mma::e4m3x2_to_f16x2(hi), hxy);
              A[3][reg] = mma::hmul2_bits(mma::e4m3x2_to_f16x2(hi >> 16), hxy);
            } else if constexpr (E == KvElem::kE4M3 && kPvF16) {
              const uint32_t lo = __byte_perm(px, py, 0x5140), hi = __byte_perm(px, py, 0x7362);
              A[0][reg] = mma::e4m3x2_to_f16x2(lo), A[1][reg] = mma::e4m3x2_to_f16x2(lo >> 16);
              A[2][reg] = mma::e4m3x2_to_f16x2(hi), A[3][reg] = mma::e4m3x2_to_f16x2(hi >> 16);
            } else if constexpr (E == KvElem::kE5M2) {
              const uint32_t ax = __byte_perm(px, 0u, 0x1404), bx = __byte_perm(py, 0u, 0x1404);
              const uint32_t ay = __byte_perm(px, 0u, 0x3424), by = __byte_perm(py, 0u, 0x3424);
              A[0][reg] = __byte_perm(ax, bx, 0x5410), A[1][reg] = __byte_perm(ax, bx, 0x7632);
              A[2][reg] = __byte_perm(ay, by, 0x5410), A[3][reg] = __byte_perm(ay, by, 0x7632);
            } else {
              float fx[4], fy[4];
              decode4<E>(px, fx);
              decode4<E>(py, fy);
#pragma unroll
              for (int d = 0; d < 4; ++d) A[d][reg] = mma::pack2<kPvF16>(fx[d] * sx, fy[d] * sy);
            }
          };
          pieces(wa0, wb0, sa0, sb0, hab0, 0);  // a0: dims of range 0, tokens 2t, 2t+1
          pieces(wa1, wb1, sa1, sb1, hab1, 1);  // a1: range 1
          pieces(wc0, wd0, sc0, sd0, hcd0, 2);  // a2: range 0, tokens 2t+8, 2t+9
          pieces(wc1, wd1, sc1, sd1, hcd1, 3);  // a3
#pragma unroll
          for (int d = 0; d < 4; ++d) {
            mma::mma16816<kPvF16>(acc[q4 * 4 + d], A[d], bh0, bh1);
            mma::mma16816<kPvF16>(acc[q4 * 4 + d], A[d], bl0, bl1);
          }
        }
      }
    }
  };

  // ---- main loop: wait for tile i, refill the stage tile i-1 used, compute tile i.
  for (int i = 0; i < my_tiles; ++i) {
    cp_async_wait<kStages - 2>();
    __syncwarp();
    const int nxt = i + kStages - 1;
    if (nxt < my_tiles) {
      load_tile(tile_of(nxt), nxt % kStages);
      if (nxt + 1 < my_tiles) fetch_pages(tile_of(nxt + 1));
    } else {
      cp_async_commit();
    }
    compute_tile(tile_of(i), i % kStages);
  }
  cp_async_wait<0>();

  // ---- merge the 4 warps by log-sum-exp through shared memory (the pipeline area).
#pragma unroll
  for (int off = 4; off < kWarpSize; off *= 2) {
    l0 += __shfl_xor_sync(0xFFFFFFFFu, l0, off);
    l1 += __shfl_xor_sync(0xFFFFFFFFu, l1, off);
  }
  bad = __syncthreads_or(bad);  // also: every warp is done with its pipeline buffers
  constexpr int kDP = D + 4;
  float* red_m = reinterpret_cast<float*>(smem);   // [kWarps][8]
  float* red_l = red_m + kWarps * kHeadsPerBlock;  // [kWarps][8]
  float* red_o = red_l + kWarps * kHeadsPerBlock;  // [kWarps][8][kDP]
  if (g == 0) {
    red_m[warp * kHeadsPerBlock + 2 * t] = m0, red_m[warp * kHeadsPerBlock + 2 * t + 1] = m1;
    red_l[warp * kHeadsPerBlock + 2 * t] = l0, red_l[warp * kHeadsPerBlock + 2 * t + 1] = l1;
  }
  float* o_h0 = red_o + (warp * kHeadsPerBlock + 2 * t) * kDP;
  float* o_h1 = o_h0 + kDP;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    const int d0 = k16 ? mt * 16 + g : g * kRange + mt;
    const int d1 = k16 ? mt * 16 + g + 8 : (g + 8) * kRange + mt;
    o_h0[d0] = acc[mt][0], o_h1[d0] = acc[mt][1];
    o_h0[d1] = acc[mt][2], o_h1[d1] = acc[mt][3];
  }
  __syncthreads();

  constexpr int kOE = D / 16;  // output elements per thread: 16 threads per head
  const int hl = tid >> 4, part = tid & 15;
  const int gl = qtile * kHeadsPerBlock + hl;
  if (gl >= p.group_size) return;
  const int64_t row = static_cast<int64_t>(seq) * p.num_qo_heads + kv_head * p.group_size + gl;
  float mm = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, red_m[w * kHeadsPerBlock + hl]);
  float ll = 0.0f, o[kOE];
#pragma unroll
  for (int e = 0; e < kOE; ++e) o[e] = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const float wt = exp_diff(red_m[w * kHeadsPerBlock + hl], mm);  // 0 for warps without tokens
    ll += wt * red_l[w * kHeadsPerBlock + hl];
    const float* src = red_o + (w * kHeadsPerBlock + hl) * kDP + part * kOE;
#pragma unroll
    for (int e = 0; e < kOE; ++e) o[e] += wt * src[e];
  }
  // ll >= 1: the warp holding the split's largest logit contributes exp(0).
  const float inv = p.out_scale * (kPvF16 ? 1.0f / kPScale : 1.0f) / ll;
#pragma unroll
  for (int e = 0; e < kOE; ++e) o[e] = bad ? NAN : o[e] * inv;
  const float lse = bad ? NAN : mm + logf(ll);
  if (single) {
    store_act_n<kOE>(p.o, row * D + part * kOE, o, p.q_bf16);
    if (part == 0 && p.lse) p.lse[row] = lse;
  } else {
    const int64_t prow = row * p.num_splits + split;
    float4* dst = reinterpret_cast<float4*>(p.partial_o + prow * D + part * kOE);
#pragma unroll
    for (int e = 0; e < kOE; e += 4) dst[e / 4] = make_float4(o[e], o[e + 1], o[e + 2], o[e + 3]);
    if (part == 0) p.partial_lse[prow] = lse;
  }
}

// grid: num_splits x num_seqs x num_kv_heads x num_qtiles blocks (split slowest), 128
// threads; dynamic shared memory v4_smem<Cfg>(D, E).total.
template <class Cfg, int D, KvElem E>
__global__ void __launch_bounds__(kThreads, Cfg::min_blocks(D, E))
    v4_decode_kernel(const V4Params p) {
  extern __shared__ __align__(16) uint8_t smem[];
  mma::pdl_launch_dependents();  // the merge kernel may start launching (it waits for us)
  int64_t b = blockIdx.x;
  const int qtile = static_cast<int>(b % p.num_qtiles);
  b /= p.num_qtiles;
  const int kv_head = static_cast<int>(b % p.geom.num_kv_heads);
  b /= p.geom.num_kv_heads;
  const int seq = static_cast<int>(b % p.num_seqs);
  const int split = static_cast<int>(b / p.num_seqs);
  const bool single = p.num_splits == 1;

  const int start = split * p.chunk_tokens;
  V4Startup<Cfg, D, E> su;
  v4_startup_loads<Cfg, D, E>(p, seq, kv_head, qtile, start, su);  // in flight with the length
  const int len = p.seq_lens[seq];
  const bool bad_len = len < 0 || len > p.seq_len_bound;
  const int end = bad_len ? 0 : min(len, start + p.chunk_tokens);
  if (bad_len || start >= end) {
    // Single split: NaN rows for a bad length, zero rows / -inf for an empty sequence.
    // Multi-split: the merge kernel handles both (it reads only splits that hold tokens).
    if (!single) return;
    constexpr int kOE = D / 16;
    const int hl = threadIdx.x >> 4, part = threadIdx.x & 15;
    const int gl = qtile * kHeadsPerBlock + hl;
    if (gl >= p.group_size) return;
    const int64_t row = static_cast<int64_t>(seq) * p.num_qo_heads + kv_head * p.group_size + gl;
    float x[kOE];
#pragma unroll
    for (int e = 0; e < kOE; ++e) x[e] = bad_len ? NAN : 0.0f;
    store_act_n<kOE>(p.o, row * D + part * kOE, x, p.q_bf16);
    if (part == 0 && p.lse) p.lse[row] = bad_len ? NAN : -INFINITY;
    return;
  }
  if constexpr (E == KvElem::kBF16) {
    v4_block<Cfg, D, E, false, false>(p, smem, seq, kv_head, qtile, split, start, end, su);
  } else if constexpr (E == KvElem::kFP16 || E == KvElem::kE5M2 || Cfg::kPoolOnly) {
    v4_block<Cfg, D, E, true, true>(p, smem, seq, kv_head, qtile, split, start, end, su);
  } else if constexpr (E == KvElem::kE4M3) {
    if (p.mode == ScaleMode::kPerToken)
      v4_block<Cfg, D, E, true, false>(p, smem, seq, kv_head, qtile, split, start, end, su);
    else
      v4_block<Cfg, D, E, true, true>(p, smem, seq, kv_head, qtile, split, start, end, su);
  } else {
    if (p.mode == ScaleMode::kMx)
      v4_block<Cfg, D, E, false, false>(p, smem, seq, kv_head, qtile, split, start, end, su);
    else
      v4_block<Cfg, D, E, true, true>(p, smem, seq, kv_head, qtile, split, start, end, su);
  }
}

// grid = rows (one block per (sequence, query head) row), 128 threads.
// o = sum_i exp(lse_i - M) o_i / sum_i exp(lse_i - M); lse = M + log(sum_i exp(lse_i - M)).
// Warp w takes splits w, w + 4, ... in batches of kMergeBatch, each batch's partial rows
// AND their lse values loaded at once (and the first batch together with the sequence
// length: split slots past the length are read but never used), with a running
// per-warp max (online-softmax rescaling); shared memory combines the 4 warps' (max, sum,
// o). One L2 round trip per batch instead of the lse pass, the max, then the partials.
// Lane l holds dims 4l..4l+3 (+128 for head_dim 256).
constexpr int kMergeBatch = 8;
__global__ void __launch_bounds__(kMergeWarps* kWarpSize) v4_merge_kernel(const V4Params p) {
  __shared__ float4 red[kMergeWarps][2][kWarpSize];  // [warp][dims half][lane]
  __shared__ float red_m[kMergeWarps], red_s[kMergeWarps];
  __shared__ int red_bad[kMergeWarps];
  mma::pdl_wait();  // the split kernel has completed and its partials are visible
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t row = blockIdx.x;
  const int seq = static_cast<int>(row / p.num_qo_heads);
  const int D = p.geom.head_dim;
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
  float mw = -INFINITY, sw = 0.0f;  // this warp's running max and sum of exp(lse - mw)
  float4 acc[2] = {make_float4(0.0f, 0.0f, 0.0f, 0.0f), make_float4(0.0f, 0.0f, 0.0f, 0.0f)};
  bool bad = false;
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
      const int len = p.seq_lens[seq];
      n = (len < 0 || len > p.seq_len_bound) ? -2 : (len + p.chunk_tokens - 1) / p.chunk_tokens;
      if (n < 0) break;
    }
    float bm = mw;
#pragma unroll
    for (int u = 0; u < kMergeBatch; ++u) {
      const int i = i0 + u * kMergeWarps;
      if (i < n) {
        bm = fmaxf(bm, l[u]);
        bad |= isnan(l[u]);
      }
    }
    if (bm == -INFINITY) continue;     // nothing valid yet (n reached, or every lse -inf)
    const float r = exp_diff(mw, bm);  // rescale what this warp holds (0 when mw = -inf)
    sw *= r;
#pragma unroll
    for (int h = 0; h < 2; ++h) acc[h].x *= r, acc[h].y *= r, acc[h].z *= r, acc[h].w *= r;
#pragma unroll
    for (int u = 0; u < kMergeBatch; ++u) {
      const int i = i0 + u * kMergeWarps;
      const float w = i < n ? exp_diff(l[u], bm) : 0.0f;
      if (i < n) {
        sw += w;
#pragma unroll
        for (int h = 0; h < 2; ++h)
          acc[h].x += w * x[u][h].x, acc[h].y += w * x[u][h].y, acc[h].z += w * x[u][h].z,
              acc[h].w += w * x[u][h].w;
      }
    }
    mw = bm;
  }
  if (n < 0) {  // the first batch never ran (num_splits < warp) or a bad length
    const int len = p.seq_lens[seq];
    n = (len < 0 || len > p.seq_len_bound) ? -2 : (len + p.chunk_tokens - 1) / p.chunk_tokens;
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
  if (lane == 0) red_m[warp] = mw, red_s[warp] = sw, red_bad[warp] = bad;
  __syncthreads();
  if (warp != 0) return;
  float mx = -INFINITY, sum = 0.0f;
  bool any_bad = false;
#pragma unroll
  for (int w = 0; w < kMergeWarps; ++w) mx = fmaxf(mx, red_m[w]), any_bad |= red_bad[w] != 0;
  float sc[kMergeWarps];
#pragma unroll
  for (int w = 0; w < kMergeWarps; ++w) sc[w] = exp_diff(red_m[w], mx), sum += sc[w] * red_s[w];
  const float inv = 1.0f / sum;
  for (int h = 0; h < halves; ++h) {
    if (!lane_live) break;
    float4 t = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kMergeWarps; ++w) {
      const float4 y = red[w][h][lane];
      t.x += sc[w] * y.x, t.y += sc[w] * y.y, t.z += sc[w] * y.z, t.w += sc[w] * y.w;
    }
    const int d = lane * 4 + h * 4 * kWarpSize;
    if (any_bad)
      store4(d, NAN, NAN, NAN, NAN);
    else
      store4(d, t.x * inv, t.y * inv, t.z * inv, t.w * inv);
  }
  if (lane == 0 && p.lse) p.lse[row] = any_bad ? NAN : mx + logf(sum);
}

// ------------------------------------------------------------------ host side
struct V4Plan {
  int num_qtiles = 1, num_splits = 1, chunk_tokens = 0;
  size_t smem = 0, workspace = 0;
  int64_t grid = 0;
  int blocks_per_sm = 0;
};

template <class Cfg, int D, KvElem E>
cudaError_t prepare_kernel(size_t smem) {
  if (smem > 48 * 1024)
    return cudaFuncSetAttribute(v4_decode_kernel<Cfg, D, E>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(smem));
  return cudaSuccess;
}

// Resident blocks per SM of the (head_dim, element) instance (occupancy API, cached per
// device, configuration and instance; 0 when the block does not fit).
template <class Cfg>
int blocks_per_sm(int device, int head_dim, KvFormat f, size_t smem) {
  const KvElem e = kv_elem_of(f);
  static std::mutex mu;
  static std::array<std::array<std::array<int, 5>, 3>, 16> cache = [] {
    std::array<std::array<std::array<int, 5>, 3>, 16> c{};
    for (auto& a : c)
      for (auto& b : a) b.fill(-1);
    return c;
  }();
  const int hd = head_dim == 64 ? 0 : (head_dim == 128 ? 1 : 2);
  const int ei = static_cast<int>(e);
  std::lock_guard<std::mutex> lock(mu);
  if (device >= 0 && device < 16 && cache[device][hd][ei] >= 0) return cache[device][hd][ei];
  int n = 0;
  Cfg::dispatch(head_dim, f, [&](auto d, auto el) {
    constexpr int kD = decltype(d)::value;
    constexpr KvElem kE = decltype(el)::value;
    auto kernel = v4_decode_kernel<Cfg, kD, kE>;
    const cudaError_t r = prepare_kernel<Cfg, kD, kE>(smem);
    KVLAB_CUDA_CHECK(r);
    KVLAB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, smem));
    return cudaSuccess;
  });
  if (device >= 0 && device < 16) cache[device][hd][ei] = n;
  return n;
}

template <class Cfg>
V4Plan make_plan(const DecodeArgs& a, const LaunchLimits& lim) {
  V4Plan pl;
  const PageGeometry& g = a.kv.geom;
  const KvElem e = kv_elem_of(g.format);
  const V4Smem s = v4_smem<Cfg>(g.head_dim, e);
  pl.smem = static_cast<size_t>(s.total);
  pl.num_qtiles = (a.group_size() + kHeadsPerBlock - 1) / kHeadsPerBlock;
  if (pl.smem > static_cast<size_t>(lim.smem_per_block_optin))
    return pl;  // reported as unsupported
  pl.blocks_per_sm = blocks_per_sm<Cfg>(lim.device, g.head_dim, g.format, pl.smem);
  const V4Tuning& tu = v4_tuning();
  const int64_t bound = seq_len_bound64(a);
  const int64_t items = static_cast<int64_t>(a.num_seqs) * g.num_kv_heads * pl.num_qtiles;
  const int64_t slots = static_cast<int64_t>(lim.sm_count) * std::max(1, pl.blocks_per_sm);
  const int64_t wt = s.warp_tile;
  const int64_t granule = wt * kWarps;    // chunks are whole tiles for every warp
  const int64_t min_chunk = 2 * granule;  // >= 2 tiles per warp: the pipeline has work
  const int64_t token_bytes = 2 * static_cast<int64_t>(g.head_dim) * kv_format_bits(g.format) / 8;
  const int64_t max_chunk = std::max(
      min_chunk, tu.max_chunk_bytes / std::max<int64_t>(1, token_bytes) / granule * granule);
  int64_t splits = 1;
  if (bound > 0 && items > 0) {
    // floor: items x splits stays within the waves (a ceil here can spill into one more wave)
    if (items < slots) splits = std::max<int64_t>(1, std::max(1, tu.fill_waves) * slots / items);
    splits = std::max(splits, (bound + max_chunk - 1) / max_chunk);
    splits = std::min(splits, (bound + min_chunk - 1) / min_chunk);
    splits = std::max<int64_t>(splits, 1);
  }
  auto chunk_of = [&](int64_t sp) {
    const int64_t c = bound > 0 ? (bound + sp - 1) / sp : granule;
    return (c + granule - 1) / granule * granule;
  };
  // Wave quantization: blocks of equal work finish together, so items x splits = 1.3 waves
  // costs 2 waves. Split further (up to 16 more) until the last wave is nearly full.
  if (bound > 0 && items > 0 && tu.min_wave_efficiency > 0) {
    for (int64_t sp = splits; sp <= splits + 16; ++sp) {
      const int64_t c = chunk_of(sp);
      if (c < min_chunk && sp > splits) break;
      const int64_t blocks = items * ((bound + c - 1) / c);
      const double waves = static_cast<double>(blocks) / slots;
      if (waves / std::ceil(waves) >= tu.min_wave_efficiency) {
        splits = sp;
        break;
      }
    }
  }
  const int64_t chunk = chunk_of(splits);
  pl.chunk_tokens = static_cast<int>(std::min<int64_t>(chunk, INT32_MAX / 2));
  pl.num_splits = bound > 0 ? static_cast<int>((bound + chunk - 1) / chunk) : 1;
  pl.grid = items * pl.num_splits;
  if (pl.num_splits > 1)
    pl.workspace = static_cast<size_t>(a.num_seqs) * a.num_qo_heads * pl.num_splits *
                   (g.head_dim + 1) * sizeof(float);
  return pl;
}

template <class Cfg>
std::string v4_unsupported_reason(const DecodeArgs& a) {
  const LaunchLimits lim = current_launch_limits();
  const V4Plan pl = make_plan<Cfg>(a, lim);
  std::ostringstream os;
  if (pl.smem > static_cast<size_t>(lim.smem_per_block_optin)) {
    os << "v4 needs " << pl.smem << " bytes of shared memory per block, the device allows "
       << lim.smem_per_block_optin;
    return os.str();
  }
  if (pl.blocks_per_sm < 1) {
    os << "v4's block (" << kThreads << " threads, " << pl.smem
       << " bytes of shared memory) cannot be resident";
    return os.str();
  }
  if (static_cast<int64_t>(a.num_seqs) * a.num_qo_heads > INT32_MAX) {
    os << "v4 merges one block per output row; "
       << static_cast<int64_t>(a.num_seqs) * a.num_qo_heads << " rows exceed the 1-D grid limit";
    return os.str();
  }
  if (pl.grid > INT32_MAX) {
    os << "v4 grid of " << pl.grid << " blocks exceeds the 1-D grid limit";
    return os.str();
  }
  return "";
}

template <class Cfg>
size_t v4_workspace_bytes(const DecodeArgs& a) {
  return make_plan<Cfg>(a, current_launch_limits()).workspace;
}

template <class Cfg>
void v4_run(const DecodeArgs& a, void* workspace, cudaStream_t stream) {
  const V4Plan pl = make_plan<Cfg>(a, current_launch_limits());
  const PageGeometry& g = a.kv.geom;
  V4Params p{};
  p.q = a.q;
  p.o = a.o;
  p.lse = a.lse;
  p.q_bf16 = a.q_dtype == DType::kBF16;
  p.k = static_cast<const uint8_t*>(a.kv.k);
  p.v = static_cast<const uint8_t*>(a.kv.v);
  p.k_scales = static_cast<const uint8_t*>(a.kv.k_scales);
  p.v_scales = static_cast<const uint8_t*>(a.kv.v_scales);
  p.mode = scale_mode_of(g.format);
  const bool pool = kv_format_has_pool_scale(g.format);  // kPool and NVFP4's tensor scale
  p.qk_scale = a.sm_scale * (pool ? a.kv.k_scale : 1.0f);
  p.out_scale = pool ? a.kv.v_scale : 1.0f;
  p.geom = g;
  p.block_table = a.block_table;
  p.seq_lens = a.seq_lens;
  p.num_seqs = a.num_seqs;
  p.num_qo_heads = a.num_qo_heads;
  p.group_size = a.group_size();
  p.max_blocks_per_seq = a.max_blocks_per_seq;
  p.seq_len_bound = static_cast<int>(seq_len_bound64(a));
  p.num_qtiles = pl.num_qtiles;
  p.num_splits = pl.num_splits;
  p.chunk_tokens = pl.chunk_tokens;
  if (pl.num_splits > 1) {
    const size_t rows = static_cast<size_t>(a.num_seqs) * a.num_qo_heads * pl.num_splits;
    p.partial_o = static_cast<float*>(workspace);
    p.partial_lse = p.partial_o + rows * g.head_dim;
  }
  cudaError_t e = Cfg::dispatch(g.head_dim, g.format, [&](auto d, auto el) {
    constexpr int kD = decltype(d)::value;
    constexpr KvElem kE = decltype(el)::value;
    cudaError_t r = prepare_kernel<Cfg, kD, kE>(pl.smem);
    if (r != cudaSuccess) return r;
    v4_decode_kernel<Cfg, kD, kE><<<static_cast<unsigned>(pl.grid), kThreads, pl.smem, stream>>>(p);
    return cudaGetLastError();
  });
  KVLAB_CUDA_CHECK(e);
  if (pl.num_splits > 1) {
    const int64_t rows = static_cast<int64_t>(a.num_seqs) * a.num_qo_heads;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(rows));
    cfg.blockDim = dim3(kMergeWarps * kWarpSize);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = v4_tuning().pdl ? 1 : 0;
    KVLAB_CUDA_CHECK(cudaLaunchKernelEx(&cfg, v4_merge_kernel, p));
  }
  KVLAB_CHECK_LAUNCH();
}

}  // namespace
}  // namespace kvlab::gpu::detail
