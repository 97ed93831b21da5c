// kv_layout.h: THE layout header. Page geometry, KV storage formats, strides and offsets.
//
// Everything that addresses a paged KV cache — the reference, every GPU kernel, the tests
// and the simulator's byte accounting — goes through this header (host/device), so a
// layout is defined exactly once.
//
// A paged cache is two pools, K and V, of `num_blocks` pages. A page ("block", as vLLM
// says; not a GPU thread block) holds `block_size` token slots for every KV head.
// Element layouts (index of the logical element (block, head, slot, dim) in its pool):
//
//   kNHD     K and V: [num_blocks, block_size, num_kv_heads, head_dim]
//   kHND     K and V: [num_blocks, num_kv_heads, block_size, head_dim]
//   kSplitX  vLLM:  K [num_blocks, num_kv_heads, head_dim/x, block_size, x]
//                   V [num_blocks, num_kv_heads, head_dim, block_size]
//            x = elements per 16 bytes: 8 for 16-bit, 16 for FP8, 32 for FP4 storage.
//
// Sub-byte storage (FP4): element i of a pool lives in byte i/2, low nibble for even i
// (first element in the low nibble). Every layout keeps pairs (2k, 2k+1) inside one page
// because head_dim is even.
//
// Scales live beside the pools, in one token-major layout for every element layout:
//   per-token FP32 inverse scales     [num_blocks, num_kv_heads, block_size]            (float)
//   block scales (NVFP4 E4M3, MX UE8M0) [num_blocks, num_kv_heads, block_size, head_dim/g] (uint8)
// where g is the scale group (16 for NVFP4, 32 for MXFP4). An "inverse scale"
// (reference/README.md): real value = stored value * scale (the scale is amax/max_finite; its
// inverse multiplied on write).
//
// Block tables: int32 [num_seqs, max_blocks_per_seq]; the logical token t of sequence s is
// in page block_table[s][t / block_size], slot t % block_size. Slot mapping (append): int64
// [num_tokens], slot = page * block_size + offset, -1 = padding token (skipped).
// All offsets are 64-bit: pools above 2^31 elements are supported.
#pragma once

#include <cstdint>

#include "reference/core/hostdevice.h"

namespace kvlab {

enum class KvLayout : int32_t { kNHD = 0, kHND = 1, kSplitX = 2 };

// Storage format of the KV pools (element format + how it is scaled).
//   kBF16, kFP16        16-bit, no scale
//   kFP8E4M3            FP8 E4M3, one FP32 scale per pool (KvCacheView::k_scale / v_scale)
//   kFP8E4M3PerToken    FP8 E4M3, one FP32 inverse scale per (block, head, slot)
//   kFP8E5M2            FP8 E5M2, one FP32 scale per pool
//   kNVFP4              FP4 E2M1, E4M3 scale per 16 elements, FP32 pool scale (k_scale/v_scale)
//   kMXFP4              FP4 E2M1, UE8M0 scale per 32 elements
enum class KvFormat : int32_t {
  kBF16 = 0,
  kFP16 = 1,
  kFP8E4M3 = 2,
  kFP8E4M3PerToken = 3,
  kFP8E5M2 = 4,
  kNVFP4 = 5,
  kMXFP4 = 6,
};
constexpr int kNumKvFormats = 7;

KVLAB_HD int kv_format_bits(KvFormat f) {
  switch (f) {
    case KvFormat::kBF16:
    case KvFormat::kFP16:
      return 16;
    case KvFormat::kFP8E4M3:
    case KvFormat::kFP8E4M3PerToken:
    case KvFormat::kFP8E5M2:
      return 8;
    case KvFormat::kNVFP4:
    case KvFormat::kMXFP4:
      return 4;
  }
  return 0;
}

// Elements sharing one block scale (0 = no block scales).
KVLAB_HD int kv_format_scale_group(KvFormat f) {
  return f == KvFormat::kNVFP4 ? 16 : (f == KvFormat::kMXFP4 ? 32 : 0);
}
KVLAB_HD bool kv_format_has_token_scales(KvFormat f) {
  return f == KvFormat::kFP8E4M3PerToken;
}
KVLAB_HD bool kv_format_has_block_scales(KvFormat f) {
  return kv_format_scale_group(f) != 0;
}
// Formats whose pool-wide FP32 scale (k_scale / v_scale) multiplies every element.
KVLAB_HD bool kv_format_has_pool_scale(KvFormat f) {
  return f == KvFormat::kFP8E4M3 || f == KvFormat::kFP8E5M2 || f == KvFormat::kNVFP4;
}

// Page geometry: the shape of one pool and its address math.
struct PageGeometry {
  KvLayout layout = KvLayout::kNHD;
  KvFormat format = KvFormat::kBF16;
  int64_t num_blocks = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;

  KVLAB_HD int elem_bits() const { return kv_format_bits(format); }
  // x of the split-x layout: elements per 16-byte chunk.
  KVLAB_HD int x() const { return 128 / elem_bits(); }
  KVLAB_HD int scale_group() const { return kv_format_scale_group(format); }

  KVLAB_HD int64_t elements_per_block() const {
    return static_cast<int64_t>(num_kv_heads) * block_size * head_dim;
  }
  KVLAB_HD int64_t elements() const { return num_blocks * elements_per_block(); }
  KVLAB_HD int64_t bytes_per_block() const { return elements_per_block() * elem_bits() / 8; }
  KVLAB_HD int64_t bytes() const { return num_blocks * bytes_per_block(); }

  // Element index of K[block, head, slot, dim] in the K pool.
  KVLAB_HD int64_t k_index(int64_t block, int head, int slot, int dim) const {
    const int64_t H = num_kv_heads, B = block_size, D = head_dim;
    switch (layout) {
      case KvLayout::kNHD:
        return ((block * B + slot) * H + head) * D + dim;
      case KvLayout::kHND:
        return ((block * H + head) * B + slot) * D + dim;
      case KvLayout::kSplitX: {
        const int64_t X = x();
        return (((block * H + head) * (D / X) + dim / X) * B + slot) * X + dim % X;
      }
    }
    return -1;
  }
  // Element index of V[block, head, slot, dim] in the V pool.
  KVLAB_HD int64_t v_index(int64_t block, int head, int slot, int dim) const {
    const int64_t H = num_kv_heads, B = block_size, D = head_dim;
    if (layout == KvLayout::kSplitX) return ((block * H + head) * D + dim) * B + slot;
    return k_index(block, head, slot, dim);
  }

  // Per-token scale index (kFP8E4M3PerToken): [num_blocks, num_kv_heads, block_size].
  KVLAB_HD int64_t token_scale_index(int64_t block, int head, int slot) const {
    return (block * num_kv_heads + head) * block_size + slot;
  }
  // The same index in 32-bit arithmetic, for device copies of pools whose (block, head, slot)
  // rows are known to number below 2^31 (the TMA maps require it: tma_pool_map.cuh).
  KVLAB_HD int token_scale_index32(int block, int head, int slot) const {
    return (block * num_kv_heads + head) * block_size + slot;
  }
  KVLAB_HD int64_t token_scales_per_pool() const {
    return num_blocks * num_kv_heads * static_cast<int64_t>(block_size);
  }
  // Block scale index: [num_blocks, num_kv_heads, block_size, head_dim / g], dim's group.
  KVLAB_HD int64_t block_scale_index(int64_t block, int head, int slot, int dim) const {
    const int g = scale_group();
    return ((block * num_kv_heads + head) * block_size + slot) * (head_dim / g) + dim / g;
  }
  KVLAB_HD int64_t block_scales_per_pool() const {
    const int g = scale_group();
    return g == 0 ? 0 : token_scales_per_pool() * (head_dim / g);
  }
  // Bytes of scale storage per pool (0 for unscaled and pool-scaled formats).
  KVLAB_HD int64_t scale_bytes() const {
    if (kv_format_has_token_scales(format)) return token_scales_per_pool() * 4;
    return block_scales_per_pool();
  }
};

// Logical token t of a sequence -> (page index in the block table, slot).
KVLAB_HD int page_of_token(int64_t t, int block_size) {
  return static_cast<int>(t / block_size);
}
KVLAB_HD int slot_of_token(int64_t t, int block_size) {
  return static_cast<int>(t % block_size);
}

}  // namespace kvlab
