// append.cuh: the append / quantize-on-write row writer: one (token, head) row of K or V,
// quantized into a paged KV pool by the 32 lanes of one warp, byte-exact to
// kvlab::ref::append_kv (reference/quant/append.h states the rule per format).
//
// Every kernel that writes a KV row through the pool's format calls append_row():
//   gpu/quant/append.cu       append_kv's row path (split-x layouts, unaligned buffers), rows
//                             read from the K/V inputs in bf16 / f16 / f32
//   gpu/step/step_kernels.cu  the decode step's fused RoPE + append, rows staged in shared
//                             memory as FP32 after the rotation
// (append_kv's vector path, append.cu, is the contiguous-row fast path of the same op: 16 or
// 32 elements per thread with the division-free encoders of append_encode.h; the same GPU
// tests hold both paths byte-exact to the same reference.)
//
// Every scale and element code comes from the host/device functions the reference calls
// (scale_rules.h, formats.h), in the same order, so the bytes match by construction:
//   bf16 / fp16          encode(x, non-saturating)
//   fp8 (pool scale)     quantize_element(x, pool_scale, fmt, satfinite, encoder clamp)
//   fp8 per token        s = kv_fp8_token_scale(amax over the row), then as above
//   nvfp4 / mxfp4        per scale group (16 / 32 dims): amax, kv_fp4_block_scale, E2M1 codes
// The only cross-lane arithmetic is the amax, whose NaN-absorbing max (amax_accumulate) gives
// the same bits in any reduction order: per-token FP8 reduces over the warp, NVFP4 over the 16
// lanes of half a round, MXFP4 over the 32 lanes of a round (lane d0 + l holds dim d0 + l).
// FP4 stores: where a byte holds two dims of one row (NHD, HND, split-x K) the even lane takes
// its neighbour's nibble by shuffle and writes the whole byte; in the split-x V pool
// ([.., head_dim, block_size]) a byte holds two *slots*, i.e. two tokens written by other
// warps, so each lane merges its nibble into the enclosing 32-bit word with atomicAnd /
// atomicOr on disjoint bits (the reference's read-modify-write, race-free).
#pragma once

#include <cstdint>

#include "reference/attention/args.h"
#include "reference/formats/formats.h"
#include "reference/layout/kv_layout.h"
#include "reference/quant/scale_rules.h"

namespace kvlab::gpu {
namespace append_detail {

// amax over aligned groups of kWidth lanes: identical bits on every lane of a group.
template <int kWidth>
__device__ __forceinline__ float group_amax(float a) {
#pragma unroll
  for (int off = kWidth / 2; off > 0; off /= 2)
    a = amax_accumulate(a, __shfl_xor_sync(0xFFFFFFFFu, a, off));
  return a;
}

// Sets the nibble of pool element `idx` to `code` without touching the other nibble.
__device__ __forceinline__ void store_nibble_atomic(uint8_t* pool, int64_t idx, uint32_t code) {
  const uintptr_t byte = reinterpret_cast<uintptr_t>(pool + (idx >> 1));
  unsigned int* word = reinterpret_cast<unsigned int*>(byte & ~uintptr_t{3});
  const unsigned shift = static_cast<unsigned>((byte & 3u) * 8u + ((idx & 1) ? 4u : 0u));
  atomicAnd(word, ~(0xFu << shift));
  atomicOr(word, (code & 0xFu) << shift);
}

}  // namespace append_detail

// Writes row (block, head, slot) of the K pool (is_v false) or the V pool of `kv`, with its
// per-token or block scales. load(d) -> float: element d of the row [head_dim] (called more
// than once per element; every lane may read every element). Called by all 32 lanes of one
// warp with the same arguments but `lane` (0..31): the shuffles below are warp-wide. The
// geometry is one kvlab::validate() accepts; FP4 pools are 4-byte aligned (the nibble atomics
// work on aligned 32-bit words).
template <typename Load>
__device__ __forceinline__ void append_row(const KvCacheView& kv, bool is_v, int64_t block,
                                           int head, int slot, Load load, int lane) {
  using append_detail::group_amax;
  const PageGeometry& g = kv.geom;
  const int D = g.head_dim;
  uint8_t* pool = static_cast<uint8_t*>(is_v ? kv.v : kv.k);
  void* scales = is_v ? kv.v_scales : kv.k_scales;
  const float pool_scale = is_v ? kv.v_scale : kv.k_scale;
  auto index = [&](int d) {
    return is_v ? g.v_index(block, head, slot, d) : g.k_index(block, head, slot, d);
  };

  switch (g.format) {
    case KvFormat::kBF16:
    case KvFormat::kFP16:
      for (int d = lane; d < D; d += 32) {
        const float xv = load(d);
        reinterpret_cast<uint16_t*>(pool)[index(d)] =
            g.format == KvFormat::kBF16 ? float_to_bf16_bits(xv, Saturation::kNonSaturating)
                                        : float_to_fp16_bits(xv, Saturation::kNonSaturating);
      }
      return;
    case KvFormat::kFP8E4M3:
    case KvFormat::kFP8E5M2: {
      const ElemFormat ef =
          g.format == KvFormat::kFP8E4M3 ? ElemFormat::kFP8E4M3 : ElemFormat::kFP8E5M2;
      for (int d = lane; d < D; d += 32)
        pool[index(d)] = static_cast<uint8_t>(quantize_element(
            load(d), pool_scale, ef, Saturation::kSatFinite, ElementClamp::kEncoder));
      return;
    }
    case KvFormat::kFP8E4M3PerToken: {
      float amax = 0.0f;
      for (int d = lane; d < D; d += 32) amax = amax_accumulate(amax, load(d));
      amax = group_amax<32>(amax);
      // A NaN amax gives the canonical NaN scale (fp32_scale_exact), as the reference stores.
      const float s = kv_fp8_token_scale(amax);
      for (int d = lane; d < D; d += 32)
        pool[index(d)] = static_cast<uint8_t>(quantize_element(
            load(d), s, ElemFormat::kFP8E4M3, Saturation::kSatFinite, ElementClamp::kEncoder));
      if (lane == 0) static_cast<float*>(scales)[g.token_scale_index(block, head, slot)] = s;
      return;
    }
    case KvFormat::kNVFP4:
    case KvFormat::kMXFP4: {
      const bool nv = g.format == KvFormat::kNVFP4;
      const int G = g.scale_group();  // 16 or 32; head_dim is a multiple of it (validate())
      const bool atomic_nibbles = is_v && g.layout == KvLayout::kSplitX;
      for (int d0 = 0; d0 < D; d0 += 32) {  // uniform trip count: shuffles below are warp-wide
        const int d = d0 + lane;
        const bool valid = d < D;
        const float xv = valid ? load(d) : 0.0f;
        float amax = amax_accumulate(0.0f, xv);
        amax = nv ? group_amax<16>(amax) : group_amax<32>(amax);
        const KvBlockScale bs = kv_fp4_block_scale(nv, amax, pool_scale);
        const uint32_t code = quantize_element(xv, bs.div, ElemFormat::kFP4E2M1,
                                               Saturation::kSatFinite, ElementClamp::kEncoder) &
                              0xFu;
        const uint32_t odd_code = __shfl_xor_sync(0xFFFFFFFFu, code, 1);
        if (valid) {
          const int64_t idx = index(d);
          if (atomic_nibbles) {
            append_detail::store_nibble_atomic(pool, idx, code);
          } else if ((d & 1) == 0) {  // dims 2k, 2k+1 share byte idx / 2 (idx even)
            pool[idx >> 1] = pack_fp4x2(static_cast<uint8_t>(code), static_cast<uint8_t>(odd_code));
          }
          if (d % G == 0)
            static_cast<uint8_t*>(scales)[g.block_scale_index(block, head, slot, d)] = bs.code;
        }
      }
      return;
    }
  }
}

}  // namespace kvlab::gpu
