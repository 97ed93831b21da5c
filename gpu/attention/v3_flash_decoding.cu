// v3_flash_decoding.cu: flash-decoding: split-KV along the sequence, online softmax in
// registers, GQA-aware, 16-byte cp.async tiles.
//
// What changed vs v2:
//  * GQA-aware: one thread block serves a KV head and (up to 512 / (head_dim / 8)) of its
//    query heads at once; thread (tx, ty, tz) = (8 dims, query head, token lane). A KV tile
//    is copied once into shared memory and read there by every query head of the group, so
//    each KV byte leaves DRAM once per group (MQA included, up to 64/32/16 query heads per
//    block for head_dim 64/128/256; larger groups are split into query tiles).
//  * Split-KV along the sequence (flash-decoding): grid = splits x KV heads x query tiles x
//    sequences; the split count comes from the host-known length bound and the SM count, so
//    batch 1 with a long context still fills the GPU. Each split keeps an online-softmax
//    state (running max m, sum l, accumulator) per thread in registers, merges the token
//    lanes through shared memory and writes a normalized fp32 partial plus its log-sum-exp;
//    a merge kernel combines the splits by log-sum-exp. With one split the block writes O
//    and LSE directly (no workspace, one launch).
//  * Memory: K and V tiles (~4 KB each) stream through a 3-stage cp.async pipeline in
//    16-byte chunks (every layout stores a K row, and an NHD/HND V row, as whole 16-byte
//    chunks). The split-x V layout is token-minor: its tiles are gathered element by element
//    into the same row-major shared layout (correct, slower).
//  * Dequantization in the loop from shared memory (decoders of kv_vec.cuh, exact); the K
//    pool scale folds into the softmax scale, the V pool scale into the output, per-token
//    scales into the score / the probability, block scales per 8-element thread slice.
// Why: the first version designed for bandwidth: the bandwidth targets (K1-K3) in gpu/README.md.
// Numerics: logits in natural units; exp(s - m) forms s - m before scaling into base 2 (so
// logits like -1e30 keep their O(1) differences); fully masked splits never produce NaN.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "gpu/attention/decode_impl.h"
#include "gpu/attention/kv_vec.cuh"
#include "gpu/core/cuda_check.h"
#include "gpu/core/device_info.h"
#include "gpu/dispatch.cuh"

namespace kvlab::gpu {
namespace detail {
namespace {

constexpr int kStages = 3;            // cp.async pipeline depth
constexpr int kTpt = 4;               // tokens per thread per sub-step (scores in registers)
constexpr int kMaxThreads = 512;      // per block
constexpr int kTargetThreads = 128;   // bdz fills a block up to this
constexpr int kTileBytes = 4096;      // target bytes of one K (or V) tile
constexpr int kMinSplitTokens = 256;  // never split finer than this
constexpr int kMergeThreads = 128;
constexpr int kMergeWarps = kMergeThreads / kWarpSize;

struct FlashParams {
  const void* q;  // [num_seqs, num_qo_heads, head_dim]  bf16/fp16
  void* o;        // [num_seqs, num_qo_heads, head_dim]
  float* lse;     // [num_seqs, num_qo_heads] or null
  bool q_bf16;
  const uint8_t* k;  // pools, kv_layout.h
  const uint8_t* v;
  const void* k_scales;
  const void* v_scales;
  float k_pool_scale;  // NVFP4 tensor scales (inside the block-scale product)
  float v_pool_scale;
  float qk_scale;   // sm_scale (x K pool scale for kPool)
  float out_scale;  // V pool scale for kPool, else 1
  PageGeometry geom;
  ScaleMode mode;
  const int32_t* block_table;  // [num_seqs, max_blocks_per_seq]
  const int32_t* seq_lens;     // [num_seqs]
  int num_qo_heads;
  int group_size;
  int max_blocks_per_seq;
  int seq_len_bound;
  // plan
  int num_qtiles;   // query tiles per KV head (group_size > blockDim.y)
  int tile_tokens;  // tokens per pipeline stage (multiple of blockDim.z * kTpt)
  int num_splits;
  int chunk_tokens;    // tokens per split (multiple of tile_tokens)
  float* partial_o;    // [num_seqs, num_qo_heads, num_splits, head_dim]  (num_splits > 1)
  float* partial_lse;  // [num_seqs, num_qo_heads, num_splits]
};

struct FlashPlan {
  int bdy = 1, bdz = 1, num_qtiles = 1, tile_tokens = 0, num_splits = 1, chunk_tokens = 0;
  size_t smem = 0, workspace = 0;
  int64_t grid = 0;
};

FlashPlan make_plan(const DecodeArgs& a, int sm_count) {
  FlashPlan pl;
  const PageGeometry& g = a.kv.geom;
  const int D = g.head_dim;
  const int bdx = D / 8;
  const int row_bytes = D * kv_format_bits(g.format) / 8;
  const int G = a.group_size();
  const int max_bdy = std::max(1, kMaxThreads / bdx);
  pl.num_qtiles = (G + max_bdy - 1) / max_bdy;
  pl.bdy = (G + pl.num_qtiles - 1) / pl.num_qtiles;
  pl.bdz = std::max(1, kTargetThreads / (bdx * pl.bdy));
  const int step = pl.bdz * kTpt;
  pl.tile_tokens = step * std::max(1, kTileBytes / (row_bytes * step));
  const size_t pipe = static_cast<size_t>(kStages) * 2 * pl.tile_tokens * row_bytes;
  const size_t merge =
      (static_cast<size_t>(pl.bdy) * pl.bdz * (D + 2) + kSmemSlackFloats) * sizeof(float);
  pl.smem = std::max(pipe, merge);

  const int64_t bound = seq_len_bound64(a);
  const int64_t ctas = static_cast<int64_t>(a.num_seqs) * g.num_kv_heads * pl.num_qtiles;
  int64_t splits = 1;
  if (bound > 0 && ctas > 0 && ctas < 4LL * sm_count) {
    splits = (4LL * sm_count + ctas - 1) / ctas;
    splits = std::min<int64_t>(splits, (bound + kMinSplitTokens - 1) / kMinSplitTokens);
    splits = std::max<int64_t>(splits, 1);
  }
  int64_t chunk = bound > 0 ? (bound + splits - 1) / splits : pl.tile_tokens;
  chunk = (chunk + pl.tile_tokens - 1) / pl.tile_tokens * pl.tile_tokens;
  pl.chunk_tokens = static_cast<int>(chunk);
  pl.num_splits = bound > 0 ? static_cast<int>((bound + chunk - 1) / chunk) : 1;
  pl.grid = ctas * pl.num_splits;
  if (pl.num_splits > 1)
    pl.workspace =
        static_cast<size_t>(a.num_seqs) * a.num_qo_heads * pl.num_splits * (D + 1) * sizeof(float);
  return pl;
}

// Element `dim` of V[page, head, slot] as its raw storage bits (gather path).
template <int kBits>
__device__ __forceinline__ uint32_t raw_bits(const uint8_t* pool, int64_t idx) {
  if constexpr (kBits == 16) return reinterpret_cast<const uint16_t*>(pool)[idx];
  if constexpr (kBits == 8) return pool[idx];
  const uint8_t b = pool[idx >> 1];
  return (idx & 1) ? (b >> 4) : (b & 0xFu);
}

// blockDim (kHeadDim / 8, bdy, bdz); grid num_splits * num_kv_heads * num_qtiles * num_seqs.
// shared: kStages x {K tile, V tile} [tile_tokens, row_bytes] raw storage; reused at the end
// for the token-lane merge: m, l [bdz, bdy] and acc [bdz, bdy, kHeadDim] float.
template <int kHeadDim, KvElem kElem>
__global__ void __launch_bounds__(kMaxThreads, 1) flash_decode_kernel(const FlashParams p) {
  constexpr int kBits = kv_elem_bits(kElem);
  constexpr int kBdx = kHeadDim / 8;
  constexpr int kRowBytes = kHeadDim * kBits / 8;
  constexpr int kChunks = kRowBytes / 16;       // 16-byte chunks per token row
  constexpr int kX = 128 / kBits;               // elements per chunk
  constexpr int kThreadWords = 8 * kBits / 32;  // 32-bit words per thread slice (8 elements)
  constexpr bool kBlockScaled = kElem == KvElem::kE2M1;
  constexpr bool kMaybePerToken = kElem == KvElem::kE4M3;

  extern __shared__ __align__(16) uint8_t smem[];
  const int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
  const int bdy = blockDim.y, bdz = blockDim.z;
  const int tid = tx + kBdx * (ty + bdy * tz);
  const int nthreads = kBdx * bdy * bdz;
  const int num_kv_heads = p.geom.num_kv_heads;

  int64_t b = blockIdx.x;
  const int split = static_cast<int>(b % p.num_splits);
  b /= p.num_splits;
  const int qtile = static_cast<int>(b % p.num_qtiles);
  b /= p.num_qtiles;
  const int kv_head = static_cast<int>(b % num_kv_heads);
  const int seq = static_cast<int>(b / num_kv_heads);
  const int g_local = qtile * bdy + ty;
  const bool head_valid = g_local < p.group_size;
  const int head = kv_head * p.group_size + g_local;
  const int64_t row = static_cast<int64_t>(seq) * p.num_qo_heads + head;
  const bool single = p.num_splits == 1;

  const int len = p.seq_lens[seq];
  if (len < 0 || len > p.seq_len_bound) {  // reported as NaN (multi-split: by the merge kernel)
    if (single && head_valid) {
      float nan8[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) nan8[e] = NAN;
      store_act8(p.o, row * kHeadDim + tx * 8, nan8, p.q_bf16);
      if (tx == 0 && p.lse) p.lse[row] = NAN;
    }
    return;
  }
  const int start = split * p.chunk_tokens;
  const int end = min(len, start + p.chunk_tokens);
  if (start >= end) {
    if (single && head_valid) {  // len == 0: zero output, lse = -inf
      const float zero8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      store_act8(p.o, row * kHeadDim + tx * 8, zero8, p.q_bf16);
      if (tx == 0 && p.lse) p.lse[row] = -INFINITY;
    }
    return;  // multi-split: splits past the end are never read by the merge kernel
  }

  const int32_t* table = p.block_table + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const int bs = p.geom.block_size;
  const int64_t num_blocks = p.geom.num_blocks;
  const int tile = p.tile_tokens;
  const int stage_bytes = 2 * tile * kRowBytes;
  const bool gather_v = p.geom.layout == KvLayout::kSplitX;  // token-minor V
  bool bad = false;

  float q[8];
  if (head_valid) {
    load_q8(p.q, row * kHeadDim + tx * 8, p.q_bf16, q);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) q[e] = 0.0f;
  }

  // ---- loader: tile `it` into stage `st`; every thread issues its share of 16-byte chunks.
  auto load_tile = [&](int it, int st) {
    uint8_t* ks = smem + st * stage_bytes;
    uint8_t* vs = ks + tile * kRowBytes;
    const int t_base = start + it * tile;
    for (int c = tid; c < tile * kChunks; c += nthreads) {
      const int tok = c / kChunks, ch = c % kChunks;
      const int t = t_base + tok;
      int64_t page = -1;
      int slot = 0;
      if (t < end) {
        page = table[t / bs];
        slot = t % bs;
        if (page < 0 || page >= num_blocks) {
          bad = true;
          page = -1;
        }
      }
      const bool ok = page >= 0;
      const uint8_t* ksrc =
          ok ? p.k + p.geom.k_index(page, kv_head, slot, ch * kX) * kBits / 8 : p.k;
      cp_async16(ks + tok * kRowBytes + ch * 16, ksrc, ok ? 16 : 0);  // 0: zero-fill
      if (!gather_v) {
        const uint8_t* vsrc =
            ok ? p.v + p.geom.v_index(page, kv_head, slot, ch * kX) * kBits / 8 : p.v;
        cp_async16(vs + tok * kRowBytes + ch * 16, vsrc, ok ? 16 : 0);
      }
    }
    if (gather_v) {
      // Token-fastest so neighbouring threads read neighbouring slots of a row.
      for (int c = tid; c < tile * kChunks; c += nthreads) {
        const int tok = c % tile, ch = c / tile;
        const int t = t_base + tok;
        uint32_t w[4] = {0, 0, 0, 0};
        if (t < end) {
          const int64_t page = table[t / bs];
          const int slot = t % bs;
          if (page >= 0 && page < num_blocks) {
            // split-x V [.., head_dim, block_size]: consecutive dims are block_size apart
            const int64_t idx0 = p.geom.v_index(page, kv_head, slot, ch * kX);
#pragma unroll
            for (int e = 0; e < kX; ++e) {  // constant word index: w stays in registers
              const uint32_t bits = raw_bits<kBits>(p.v, idx0 + static_cast<int64_t>(e) * bs);
              w[(e * kBits) / 32] |= bits << ((e * kBits) % 32);
            }
          }
        }
        *reinterpret_cast<uint4*>(vs + tok * kRowBytes + ch * 16) =
            make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
    cp_async_commit();
  };

  // Page and slot of token t (scale lookups; t < end, page checked by the loader).
  auto page_of = [&](int t) -> int64_t {
    const int64_t pg = table[t / bs];
    return (pg >= 0 && pg < num_blocks) ? pg : 0;
  };

  float m = -INFINITY, l = 0.0f;
  float acc[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] = 0.0f;

  const int num_tiles = (end - start + tile - 1) / tile;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles)
      load_tile(s, s);
    else
      cp_async_commit();  // keep the group count uniform
  }
  const int step = bdz * kTpt;
  for (int it = 0; it < num_tiles; ++it) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile `it` visible to all; stage (it - 1) % kStages free again
    if (it + kStages - 1 < num_tiles)
      load_tile(it + kStages - 1, (it + kStages - 1) % kStages);
    else
      cp_async_commit();

    const uint8_t* ks = smem + (it % kStages) * stage_bytes;
    const uint8_t* vs = ks + tile * kRowBytes;
    const int t_base = start + it * tile;
    for (int sub = 0; sub < tile; sub += step) {
      float s[kTpt];
#pragma unroll
      for (int i = 0; i < kTpt; ++i) {
        const int tok = sub + tz * kTpt + i;
        const int t = t_base + tok;
        float kf[8];
        decode_words<kElem, kThreadWords>(
            reinterpret_cast<const uint32_t*>(ks + tok * kRowBytes + tx * kThreadWords * 4), kf);
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) dot += q[e] * kf[e];
        if constexpr (kBlockScaled) {
          if (t < end) {
            const int64_t pg = page_of(t);
            dot *= block_scale_value(
                p.mode,
                static_cast<const uint8_t*>(
                    p.k_scales)[p.geom.block_scale_index(pg, kv_head, t % bs, tx * 8)],
                p.k_pool_scale);
          }
        }
        dot = group_sum<kBdx>(dot);  // the kBdx lanes of one (query head, token)
        float sc = dot * p.qk_scale;
        if (kMaybePerToken && p.mode == ScaleMode::kPerToken && t < end)
          sc *= static_cast<const float*>(
              p.k_scales)[p.geom.token_scale_index(page_of(t), kv_head, t % bs)];
        s[i] = t < end ? sc : -INFINITY;
      }
      float m_new = m;
#pragma unroll
      for (int i = 0; i < kTpt; ++i) m_new = fmaxf(m_new, s[i]);
      if (m_new == -INFINITY) continue;  // nothing valid yet for this lane (no shuffles below)
      const float corr = exp_diff(m, m_new);
      l *= corr;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] *= corr;
#pragma unroll
      for (int i = 0; i < kTpt; ++i) {
        const int tok = sub + tz * kTpt + i;
        const int t = t_base + tok;
        if (t >= end) continue;
        float pr = exp_diff(s[i], m_new);
        l += pr;
        if (kMaybePerToken && p.mode == ScaleMode::kPerToken)
          pr *= static_cast<const float*>(
              p.v_scales)[p.geom.token_scale_index(page_of(t), kv_head, t % bs)];
        if constexpr (kBlockScaled)
          pr *= block_scale_value(
              p.mode,
              static_cast<const uint8_t*>(
                  p.v_scales)[p.geom.block_scale_index(page_of(t), kv_head, t % bs, tx * 8)],
              p.v_pool_scale);
        float vf[8];
        decode_words<kElem, kThreadWords>(
            reinterpret_cast<const uint32_t*>(vs + tok * kRowBytes + tx * kThreadWords * 4), vf);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] += pr * vf[e];
      }
      m = m_new;
    }
  }
  cp_async_wait<0>();
  bad = __syncthreads_or(bad);  // also: every thread is done with the pipeline buffers

  // ---- merge the bdz token lanes of each query head through shared memory.
  float* red_m = reinterpret_cast<float*>(smem);  // [bdz, bdy]
  float* red_l = red_m + bdz * bdy;               // [bdz, bdy]
  float* red_acc = red_l + bdz * bdy;             // [bdz, bdy, kHeadDim]
  if (tx == 0) {
    red_m[tz * bdy + ty] = m;
    red_l[tz * bdy + ty] = l;
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) red_acc[(tz * bdy + ty) * kHeadDim + tx * 8 + e] = acc[e];
  __syncthreads();
  if (tz != 0 || !head_valid) return;
  float mm = -INFINITY;
  for (int z = 0; z < bdz; ++z) mm = fmaxf(mm, red_m[z * bdy + ty]);
  float ll = 0.0f, o8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int z = 0; z < bdz; ++z) {
    const float w = exp_diff(red_m[z * bdy + ty], mm);  // 0 for lanes that saw no token
    ll += w * red_l[z * bdy + ty];
#pragma unroll
    for (int e = 0; e < 8; ++e) o8[e] += w * red_acc[(z * bdy + ty) * kHeadDim + tx * 8 + e];
  }
  // ll >= 1: the split holds at least one valid token and its max term is exp(0).
  const float inv = p.out_scale / ll;
#pragma unroll
  for (int e = 0; e < 8; ++e) o8[e] = bad ? NAN : o8[e] * inv;
  const float lse = bad ? NAN : mm + logf(ll);
  if (single) {
    store_act8(p.o, row * kHeadDim + tx * 8, o8, p.q_bf16);
    if (tx == 0 && p.lse) p.lse[row] = lse;
  } else {
    const int64_t prow = row * p.num_splits + split;
    float4* dst = reinterpret_cast<float4*>(p.partial_o + prow * kHeadDim + tx * 8);
    dst[0] = make_float4(o8[0], o8[1], o8[2], o8[3]);
    dst[1] = make_float4(o8[4], o8[5], o8[6], o8[7]);
    if (tx == 0) p.partial_lse[prow] = lse;
  }
}

// grid num_seqs * num_qo_heads; block kMergeThreads. shared: red [kMergeWarps], w [num_splits].
// o = sum_i exp(lse_i - M) o_i / sum_i exp(lse_i - M); lse = M + log(sum_i exp(lse_i - M)).
__global__ void __launch_bounds__(kMergeThreads) flash_decode_merge_kernel(const FlashParams p) {
  extern __shared__ float msmem[];
  float* red = msmem;
  float* w = red + kMergeWarps;
  const int64_t row = blockIdx.x;
  const int seq = static_cast<int>(row / p.num_qo_heads);
  const int D = p.geom.head_dim;
  const int len = p.seq_lens[seq];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  if (len < 0 || len > p.seq_len_bound) {
    for (int d = threadIdx.x; d < D; d += kMergeThreads) store_act(p.o, row * D + d, NAN, p.q_bf16);
    if (threadIdx.x == 0 && p.lse) p.lse[row] = NAN;
    return;
  }
  const int n = (len + p.chunk_tokens - 1) / p.chunk_tokens;
  if (n == 0) {
    for (int d = threadIdx.x; d < D; d += kMergeThreads)
      store_act(p.o, row * D + d, 0.0f, p.q_bf16);
    if (threadIdx.x == 0 && p.lse) p.lse[row] = -INFINITY;
    return;
  }
  const float* lse_in = p.partial_lse + row * p.num_splits;
  float mx = -INFINITY;
  bool bad = false;
  for (int i = threadIdx.x; i < n; i += kMergeThreads) {
    mx = fmaxf(mx, lse_in[i]);
    bad |= isnan(lse_in[i]);
  }
  mx = group_max<kWarpSize>(mx);
  if (lane == 0) red[warp] = mx;
  __syncthreads();
  mx = red[0];
#pragma unroll
  for (int i = 1; i < kMergeWarps; ++i) mx = fmaxf(mx, red[i]);
  bad = __syncthreads_or(bad);  // also: red[] reads done before it is rewritten
  float sum = 0.0f;
  for (int i = threadIdx.x; i < n; i += kMergeThreads) {
    w[i] = exp_diff(lse_in[i], mx);
    sum += w[i];
  }
  sum = group_sum<kWarpSize>(sum);
  if (lane == 0) red[warp] = sum;
  __syncthreads();
  sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kMergeWarps; ++i) sum += red[i];
  const float inv = 1.0f / sum;
  for (int d = threadIdx.x; d < D; d += kMergeThreads) {
    float acc = 0.0f;
    for (int i = 0; i < n; ++i) acc += w[i] * p.partial_o[(row * p.num_splits + i) * D + d];
    store_act(p.o, row * D + d, bad ? NAN : acc * inv, p.q_bf16);
  }
  if (threadIdx.x == 0 && p.lse) p.lse[row] = bad ? NAN : mx + logf(sum);
}

template <int kHeadDim, KvElem kElem>
cudaError_t launch_flash_decode_t(const FlashParams& p, const FlashPlan& pl, cudaStream_t stream) {
  auto kernel = flash_decode_kernel<kHeadDim, kElem>;
  if (pl.smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(pl.smem));
    if (e != cudaSuccess) return e;
  }
  kernel<<<static_cast<unsigned>(pl.grid), dim3(kHeadDim / 8, pl.bdy, pl.bdz), pl.smem, stream>>>(
      p);
  return cudaGetLastError();
}

// Launcher: the split kernel, then (num_splits > 1) the merge kernel.
cudaError_t launch_flash_decode(const FlashParams& p, const FlashPlan& pl, int num_seqs,
                                cudaStream_t stream) {
  cudaError_t e = KVLAB_DISPATCH_HEAD_DIM(p.geom.head_dim, kHeadDim, [&] {
    return KVLAB_DISPATCH_KV_ELEM(p.geom.format, kElem, [&] {
      return launch_flash_decode_t<kHeadDim, kElem>(p, pl, stream);
    });
  });
  if (e != cudaSuccess || pl.num_splits == 1) return e;
  const size_t smem =
      (kMergeWarps + static_cast<size_t>(pl.num_splits) + kSmemSlackFloats) * sizeof(float);
  if (smem > 48 * 1024) {
    e = cudaFuncSetAttribute(flash_decode_merge_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  const int64_t rows = static_cast<int64_t>(num_seqs) * p.num_qo_heads;
  flash_decode_merge_kernel<<<static_cast<unsigned>(rows), kMergeThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

std::string v3_unsupported_reason(const DecodeArgs& a, const DecodeTuning&) {
  const LaunchLimits lim = current_launch_limits();
  const FlashPlan pl = make_plan(a, lim.sm_count);
  std::ostringstream os;
  if (pl.smem > static_cast<size_t>(lim.smem_per_block_optin)) {
    os << "v3 needs " << pl.smem << " bytes of shared memory per block, the device allows "
       << lim.smem_per_block_optin;
    return os.str();
  }
  if (pl.grid > INT32_MAX || static_cast<int64_t>(a.num_seqs) * a.num_qo_heads > INT32_MAX) {
    os << "v3 grid of " << pl.grid << " blocks exceeds the 1-D grid limit";
    return os.str();
  }
  const size_t merge_smem =
      (kMergeWarps + static_cast<size_t>(pl.num_splits) + kSmemSlackFloats) * sizeof(float);
  if (merge_smem > static_cast<size_t>(lim.smem_per_block_optin)) {
    os << "v3 merge of " << pl.num_splits << " splits needs " << merge_smem
       << " bytes of shared memory";
    return os.str();
  }
  return "";
}

size_t v3_workspace_bytes(const DecodeArgs& a, const DecodeTuning&) {
  return make_plan(a, current_launch_limits().sm_count).workspace;
}

void v3_run(const DecodeArgs& a, const DecodeTuning&, void* workspace, cudaStream_t stream) {
  const FlashPlan pl = make_plan(a, current_launch_limits().sm_count);
  const PageGeometry& g = a.kv.geom;
  FlashParams p{};
  p.q = a.q;
  p.o = a.o;
  p.lse = a.lse;
  p.q_bf16 = a.q_dtype == DType::kBF16;
  p.k = static_cast<const uint8_t*>(a.kv.k);
  p.v = static_cast<const uint8_t*>(a.kv.v);
  p.k_scales = a.kv.k_scales;
  p.v_scales = a.kv.v_scales;
  p.mode = scale_mode_of(g.format);
  p.k_pool_scale = kv_format_has_pool_scale(g.format) ? a.kv.k_scale : 1.0f;
  p.v_pool_scale = kv_format_has_pool_scale(g.format) ? a.kv.v_scale : 1.0f;
  p.qk_scale = a.sm_scale * (p.mode == ScaleMode::kPool ? p.k_pool_scale : 1.0f);
  p.out_scale = p.mode == ScaleMode::kPool ? p.v_pool_scale : 1.0f;
  p.geom = g;
  p.block_table = a.block_table;
  p.seq_lens = a.seq_lens;
  p.num_qo_heads = a.num_qo_heads;
  p.group_size = a.group_size();
  p.max_blocks_per_seq = a.max_blocks_per_seq;
  p.seq_len_bound = static_cast<int>(seq_len_bound64(a));
  p.num_qtiles = pl.num_qtiles;
  p.tile_tokens = pl.tile_tokens;
  p.num_splits = pl.num_splits;
  p.chunk_tokens = pl.chunk_tokens;
  if (pl.num_splits > 1) {
    const size_t rows = static_cast<size_t>(a.num_seqs) * a.num_qo_heads * pl.num_splits;
    p.partial_o = static_cast<float*>(workspace);
    p.partial_lse = p.partial_o + rows * g.head_dim;
  }
  KVLAB_CUDA_CHECK(launch_flash_decode(p, pl, a.num_seqs, stream));
  KVLAB_CHECK_LAUNCH();
}

}  // namespace

DecodeVersionImpl make_v3_flash_decoding() {
  DecodeVersionImpl v;
  v.info = {
      3, "v3_flash_decoding",
      "flash-decoding: split-KV, online softmax in registers, GQA-aware blocks over a cp.async "
      "16-byte tile pipeline, log-sum-exp merge of fp32 partials"};
  v.unsupported_reason = v3_unsupported_reason;
  v.workspace_bytes = v3_workspace_bytes;
  v.run = v3_run;
  return v;
}

}  // namespace detail
}  // namespace kvlab::gpu
