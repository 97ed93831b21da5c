// arena.h: where every buffer of a DSV4 cache lives inside one allocation.
//
// Both backends (host vectors, one cudaMalloc) allocate a single arena of
// Dsv4ArenaLayout::total_bytes, fill it with 0xFF, and build their views from the same
// offsets, so the simulation's byte accounting and the GPU's allocation are one number.
// 0xFF everywhere means: block table -1, ring positions -1, and every unwritten payload
// byte reads as NaN (E4M3 0xFF, BF16 0xFFFF, FP32 0xFFFFFFFF, UE8M0 0xFF) — a kernel that
// reads a slot nobody wrote produces NaN instead of a plausible number. Ring heads are set
// to 0 by reset_slot() at creation.
//
// Buffers (per layer, offsets -1 when absent; shapes in views.h):
//   ring_data/ring_rope/ring_inv  SWA ring entries  [max_requests, window]
//   ring_pos [max_requests, window] int32, ring_head [max_requests] int32
//   pool_data/pool_rope/pool_inv  compressed entries [num_blocks, entries_per_block]
//   idx_codes/idx_scales          indexer keys       [num_blocks, entries_per_block]
//   ka/za/kb/zb, ika/iza/ikb/izb  FP32 stream rows (main / indexer compressor)
// plus the block table int32 [max_requests, max_blocks_per_request]. Every buffer starts at
// a multiple of 256 bytes.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/dsv4/backend.h"

namespace kvlab::sim {

struct Dsv4LayerOffsets {
  int64_t ring_data = -1, ring_rope = -1, ring_inv = -1, ring_pos = -1, ring_head = -1;
  int64_t pool_data = -1, pool_rope = -1, pool_inv = -1;
  int64_t idx_codes = -1, idx_scales = -1;
  int64_t ka = -1, za = -1, kb = -1, zb = -1;
  int64_t ika = -1, iza = -1, ikb = -1, izb = -1;
};

struct Dsv4ArenaLayout {
  int64_t total_bytes = 0;
  int64_t block_table = -1;
  std::vector<Dsv4LayerOffsets> layers;
};

Dsv4ArenaLayout plan_dsv4_arena(const Dsv4CacheSchema& schema, const Dsv4BlockBudget& budget);

// Views of every layer over an arena starting at `base` (host or device address).
std::vector<Dsv4LayerViews> build_dsv4_views(const Dsv4CacheSchema& schema,
                                             const Dsv4BlockBudget& budget,
                                             const Dsv4ArenaLayout& layout, uint8_t* base);

}  // namespace kvlab::sim
