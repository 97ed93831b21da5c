// kv_access.h: scalar read of one dequantized KV element (host/device).
//
// The canonical dequantization, used by the reference and by simple GPU paths; fast
// kernels dequantize vectors but must produce the same float for every element:
//   bf16/fp16       value
//   fp8 (pool)      fp8 * scale
//   fp8 per token   fp8 * token_scale[block, head, slot]
//   nvfp4           e2m1 * (e4m3_block_scale * pool_scale)     (scale product first)
//   mxfp4           e2m1 * ue8m0_block_scale
#pragma once

#include <cstdint>

#include "reference/attention/args.h"
#include "reference/core/hostdevice.h"
#include "reference/formats/formats.h"
#include "reference/layout/kv_layout.h"

namespace kvlab {

// Raw element `idx` of a pool in `format`, decoded to float (no scale applied).
KVLAB_HD float decode_pool_element(const void* pool, KvFormat format, int64_t idx) {
  switch (format) {
    case KvFormat::kBF16:
      return bf16_bits_to_float(static_cast<const uint16_t*>(pool)[idx]);
    case KvFormat::kFP16:
      return fp16_bits_to_float(static_cast<const uint16_t*>(pool)[idx]);
    case KvFormat::kFP8E4M3:
    case KvFormat::kFP8E4M3PerToken:
      return e4m3_to_float(static_cast<const uint8_t*>(pool)[idx]);
    case KvFormat::kFP8E5M2:
      return e5m2_to_float(static_cast<const uint8_t*>(pool)[idx]);
    case KvFormat::kNVFP4:
    case KvFormat::kMXFP4: {
      const uint8_t byte = static_cast<const uint8_t*>(pool)[idx >> 1];
      return e2m1_to_float((idx & 1) ? fp4_hi(byte) : fp4_lo(byte));
    }
  }
  return 0.0f;
}

// The multiplier applied to a raw element of (block, head, slot, dim).
KVLAB_HD float element_scale(const PageGeometry& g, const void* scales, float pool_scale,
                             int64_t block, int head, int slot, int dim) {
  switch (g.format) {
    case KvFormat::kBF16:
    case KvFormat::kFP16:
      return 1.0f;
    case KvFormat::kFP8E4M3:
    case KvFormat::kFP8E5M2:
      return pool_scale;
    case KvFormat::kFP8E4M3PerToken:
      return static_cast<const float*>(scales)[g.token_scale_index(block, head, slot)];
    case KvFormat::kNVFP4:
      return e4m3_to_float(
                 static_cast<const uint8_t*>(scales)[g.block_scale_index(block, head, slot, dim)]) *
             pool_scale;
    case KvFormat::kMXFP4:
      return ue8m0_to_float(
          static_cast<const uint8_t*>(scales)[g.block_scale_index(block, head, slot, dim)]);
  }
  return 0.0f;
}

KVLAB_HD float load_k(const KvCacheView& c, int64_t block, int head, int slot, int dim) {
  const float raw = decode_pool_element(c.k, c.geom.format, c.geom.k_index(block, head, slot, dim));
  return raw * element_scale(c.geom, c.k_scales, c.k_scale, block, head, slot, dim);
}

KVLAB_HD float load_v(const KvCacheView& c, int64_t block, int head, int slot, int dim) {
  const float raw = decode_pool_element(c.v, c.geom.format, c.geom.v_index(block, head, slot, dim));
  return raw * element_scale(c.geom, c.v_scales, c.v_scale, block, head, slot, dim);
}

}  // namespace kvlab
