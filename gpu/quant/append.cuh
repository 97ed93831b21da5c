// kv_store.cuh: device helper of the fused RoPE + append kernel: quantize one head vector of
// one token and store it into a paged KV pool (one warp per call).
//
// Quantize-on-write must be byte-exact to kvlab::ref::append_kv (reference/quant/append.h
// states the rule per format), so every format goes through the same host/device functions
// of scale_rules.h and formats.h, in the same order:
//   bf16 / fp16          encode(x, non-saturating)
//   fp8 (pool scale)     quantize_element(x, pool_scale, fmt, satfinite, encoder clamp)
//   fp8 per token        amax over the head (max is order-free: a warp reduction gives the
//                        reference's bits), s = fp8_scale_from_amax(...), then as above
//   nvfp4 / mxfp4        per scale group: amax, block-scale code, divisor, e2m1 codes
// FP4 nibbles: in every layout but split-x V a byte holds two dims of this (token, head)
// and is stored whole; in split-x V ([.., head_dim, block_size]) a byte holds two *slots*,
// i.e. two tokens that other warps may write concurrently, so the nibble is merged into its
// 32-bit word with atomics (the reference's read-modify-write, race-free).
#pragma once

#include <cstdint>

#include "reference/attention/args.h"
#include "reference/formats/formats.h"
#include "reference/layout/kv_layout.h"
#include "reference/quant/scale_rules.h"

namespace kvlab::gpu::step {

// "" when kv_store_head() writes this geometry, else the reason (host and device).
inline const char* kv_store_unsupported_reason(const PageGeometry& g) {
  if (g.head_dim < 2 || g.head_dim > 1024) return "head_dim outside [2, 1024]";
  if (kv_format_bits(g.format) == 0) return "unknown KV format";
  return "";
}

namespace detail {

__device__ __forceinline__ float warp_amax(float a) {
  for (int off = 16; off > 0; off >>= 1)
    a = amax_accumulate(a, __shfl_xor_sync(0xFFFFFFFFu, a, off));
  return a;
}

// Merges a 4-bit code into element `idx` of an FP4 pool with two atomics on disjoint bits.
__device__ __forceinline__ void store_nibble_atomic(uint8_t* pool, int64_t idx, uint8_t code) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(pool + (idx >> 1));
  unsigned int* word = reinterpret_cast<unsigned int*>(addr & ~uintptr_t{3});
  const unsigned shift = static_cast<unsigned>((addr & 3u) * 8u + ((idx & 1) ? 4u : 0u));
  atomicAnd(word, ~(0xFu << shift));
  atomicOr(word, static_cast<unsigned>(code & 0xFu) << shift);
}

}  // namespace detail

// x: the head vector [head_dim] in shared memory (FP32; K already roped). Called by all 32
// lanes of one warp.
__device__ inline void kv_store_head(const KvCacheView& kv, bool is_v, int64_t block, int head,
                                     int slot, const float* x, int lane) {
  const PageGeometry& g = kv.geom;
  void* pool = is_v ? kv.v : kv.k;
  void* scales = is_v ? kv.v_scales : kv.k_scales;
  const float pool_scale = is_v ? kv.v_scale : kv.k_scale;
  const int D = g.head_dim;
  auto index = [&](int d) {
    return is_v ? g.v_index(block, head, slot, d) : g.k_index(block, head, slot, d);
  };

  switch (g.format) {
    case KvFormat::kBF16:
      for (int d = lane; d < D; d += 32)
        static_cast<uint16_t*>(pool)[index(d)] =
            float_to_bf16_bits(x[d], Saturation::kNonSaturating);
      return;
    case KvFormat::kFP16:
      for (int d = lane; d < D; d += 32)
        static_cast<uint16_t*>(pool)[index(d)] =
            float_to_fp16_bits(x[d], Saturation::kNonSaturating);
      return;
    case KvFormat::kFP8E4M3:
    case KvFormat::kFP8E5M2: {
      const ElemFormat ef =
          g.format == KvFormat::kFP8E4M3 ? ElemFormat::kFP8E4M3 : ElemFormat::kFP8E5M2;
      for (int d = lane; d < D; d += 32)
        static_cast<uint8_t*>(pool)[index(d)] = static_cast<uint8_t>(
            quantize_element(x[d], pool_scale, ef, Saturation::kSatFinite, ElementClamp::kEncoder));
      return;
    }
    case KvFormat::kFP8E4M3PerToken: {
      float amax = 0.0f;
      for (int d = lane; d < D; d += 32) amax = amax_accumulate(amax, x[d]);
      amax = detail::warp_amax(amax);
      const float s = kv_fp8_token_scale(amax);
      for (int d = lane; d < D; d += 32)
        static_cast<uint8_t*>(pool)[index(d)] = static_cast<uint8_t>(quantize_element(
            x[d], s, ElemFormat::kFP8E4M3, Saturation::kSatFinite, ElementClamp::kEncoder));
      if (lane == 0) static_cast<float*>(scales)[g.token_scale_index(block, head, slot)] = s;
      return;
    }
    case KvFormat::kNVFP4:
    case KvFormat::kMXFP4: {
      const int G = g.scale_group();
      const bool shared_bytes = is_v && g.layout == KvLayout::kSplitX;
      uint8_t* p8 = static_cast<uint8_t*>(pool);
      for (int d0 = lane * G; d0 < D; d0 += 32 * G) {  // one scale group per lane
        float amax = 0.0f;
        for (int d = d0; d < d0 + G; ++d) amax = amax_accumulate(amax, x[d]);
        const KvBlockScale bs = kv_fp4_block_scale(g.format == KvFormat::kNVFP4, amax, pool_scale);
        const uint8_t scode = bs.code;
        const float div = bs.div;
        for (int d = d0; d < d0 + G; d += 2) {
          const uint8_t c0 = static_cast<uint8_t>(quantize_element(
              x[d], div, ElemFormat::kFP4E2M1, Saturation::kSatFinite, ElementClamp::kEncoder));
          const uint8_t c1 = static_cast<uint8_t>(quantize_element(
              x[d + 1], div, ElemFormat::kFP4E2M1, Saturation::kSatFinite, ElementClamp::kEncoder));
          if (shared_bytes) {
            detail::store_nibble_atomic(p8, index(d), c0);
            detail::store_nibble_atomic(p8, index(d + 1), c1);
          } else {
            // dims d (even) and d + 1 are elements 2i and 2i + 1 of one byte in these layouts
            p8[index(d) >> 1] = pack_fp4x2(c0, c1);
          }
        }
        static_cast<uint8_t*>(scales)[g.block_scale_index(block, head, slot, d0)] = scode;
      }
      return;
    }
  }
}

}  // namespace kvlab::gpu::step
