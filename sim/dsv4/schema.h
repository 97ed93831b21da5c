// schema.h: per-layer KV-cache shapes of the DSV4 substrate and the block budget.
//
// The control plane's view of the per-layer cache shapes (reference/README.md, "The DSV4
// substrate"). Everything here is byte accounting and
// shape math (CUDA-free); the GPU pools (gpu/dsv4) and the host pools (sim/dsv4/host_backend)
// are allocated from exactly these numbers, and the serving simulation's capacity planner
// consumes the same API.
//
// Blocks. A block covers `block_tokens` original tokens (BLOCK_SIZE_ORIGINAL_TOKENS, 128 by
// default, the lcm of the compression ratios; 256 is also supported). In a compressed layer
// of ratio r a block holds block_tokens / r entries (CSA 128/4 = 32 entries plus 32 indexer
// entries; HCA 128/128 = 1 entry). Every compressed layer fills its block b exactly when the
// request passes original token (b+1) * block_tokens, so one block id names the same span in
// every layer's pool: one block table per request and ONE allocator for all layers (vLLM's
// choice for uniform layers), not one allocator per layer. A block is allocated at the first
// flush that writes into it (compression flush: KVCacheManager::allocate_block).
//
// State (per request slot, allocated for max_requests at start, never paged):
//   SWA ring   window entries in the layer's entry format + int32 position per entry +
//              an int32 head                                                 (every layer)
//   streams    FP32 raw projection rows the streaming compressor still needs (the "tail":
//              tail_tokens below counts its pending tokens, 3 / 127):
//              CSA (overlap): ka, za [2, ratio, d] (lane a of the previous and the current
//                window, indexed by window parity) and kb, zb [ratio, d] (lane b of the
//                current window): entry i needs lane a of window i-1 and lane b of window i,
//                so the state keeps 2 * ratio lane-a rows, more than a tail of 3 pending
//                tokens would hold.
//                Kept for the main entries (d = head_dim) and the indexer (d = indexer_dim).
//              HCA: ka, za [ratio, d] (single lane, d = head_dim).
//              SWA: none.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/dsv4/variant.h"
#include "sim/dsv4/dsv4_model_stack.h"

namespace kvlab::sim {

// Every buffer of a cache's arena (sim/dsv4/arena.h) starts at a multiple of this.
constexpr int64_t kDsv4ArenaAlign = 256;
// Upper bound of the arena's buffer count: the block table + 18 per layer.
constexpr int64_t kDsv4ArenaBuffersPerLayer = 18;

struct Dsv4CacheConfig {
  int32_t block_tokens = 128;  // BLOCK_SIZE_ORIGINAL_TOKENS: a multiple of every ratio
  Dsv4Variant variant = Dsv4Variant::per_token_scales();
  // NVFP4 indexer keys (per_token_scales variant) need a fixed FP32 tensor scale for a cache that
  // streams: block scales are E4M3 codes of RN(RN(amax/6) / t). 1.0 covers |key| <= 2688.
  float indexer_tensor_scale = 1.0f;
};

struct Dsv4LayerSchema {
  int32_t layer = 0;
  Dsv4LayerKind kind = Dsv4LayerKind::kSWA;
  int32_t ratio = 0;   // tokens per compressed entry (0: SWA)
  int32_t window = 0;  // SWA ring length
  int32_t nope_dim = 0, rope_dim = 0, head_dim = 0;
  int64_t entry_bytes = 0;  // one stored entry (ring and pool share the format)

  // Classical (compressed) pool: [num_blocks, entries_per_block] entries.
  bool has_classical = false;
  int32_t entries_per_block = 0;  // block_tokens / ratio
  int64_t classical_bytes_per_block = 0;
  // Indexer keys (CSA only): [num_blocks, indexer_entries_per_block] FP4 keys.
  bool has_indexer = false;
  int32_t indexer_dim = 0;
  int32_t indexer_entries_per_block = 0;
  int64_t indexer_entry_bytes = 0;
  int64_t indexer_bytes_per_block = 0;

  // Streaming compressor state.
  bool overlap = false;     // CSA: two lanes, overlapping windows
  int32_t tail_tokens = 0;  // the tail: pending tokens of an unfinished window (ratio - 1)
  int32_t state_rows = 0;   // raw rows kept: CSA 2 * ratio (previous + current window), HCA ratio
  int64_t stream_bytes_per_slot = 0;  // FP32 ka/za(/kb/zb), main + indexer
  int64_t swa_bytes_per_slot = 0;     // ring entries + positions + head
  int64_t state_bytes_per_slot() const { return stream_bytes_per_slot + swa_bytes_per_slot; }
  int64_t bytes_per_block() const { return classical_bytes_per_block + indexer_bytes_per_block; }
};

struct Dsv4CacheSchema {
  Dsv4ModelStack stack;
  Dsv4CacheConfig config;
  std::vector<Dsv4LayerSchema> layers;

  int32_t block_tokens() const { return config.block_tokens; }
  int32_t num_layers() const { return static_cast<int32_t>(layers.size()); }
  const Dsv4LayerSchema& layer(int32_t i) const;  // throws InvalidArgument out of range
  bool has_paged_layers() const;                  // any CSA / HCA layer
  int64_t bytes_per_block() const;                // summed over layers (one block id, all pools)
  int64_t state_bytes_per_slot() const;           // summed over layers
  // Blocks a request holding `tokens` original tokens needs: the largest over compressed
  // layers of ceil(floor(tokens / ratio) / entries_per_block); 0 for an SWA-only stack.
  int64_t blocks_for_tokens(int64_t tokens) const;
  // Compressed entries a layer holds after `tokens` tokens: floor(tokens / ratio).
  int64_t entries_for_tokens(int32_t layer, int64_t tokens) const;
};

// Throws InvalidArgument: block_tokens not positive or not a multiple of a ratio of the
// stack ("window or ratio mismatch"), an invalid variant, an indexer_dim the Hadamard
// variant cannot rotate (multiple of 128 needed), a non-positive/non-finite tensor scale.
Dsv4CacheSchema build_dsv4_schema(const Dsv4ModelStack& stack, const Dsv4CacheConfig& config);

// How a memory budget splits into per-slot state and paged blocks.
struct Dsv4BlockBudget {
  int64_t memory_bytes = 0;       // the budget given
  int32_t max_requests = 0;       // request slots (state allocated up front)
  int64_t state_bytes = 0;        // max_requests * state_bytes_per_slot
  int64_t bytes_per_block = 0;    // one block id across all layers' pools
  int64_t num_blocks = 0;         // floor((memory - state) / bytes_per_block); 0 for SWA-only
  int64_t pool_bytes = 0;         // num_blocks * bytes_per_block
  int64_t block_table_bytes = 0;  // int32 [max_requests, max_blocks_per_request]
  int32_t max_blocks_per_request = 0;
  int64_t max_context_tokens = 0;  // the request length the block table is sized for
  int64_t align_slack_bytes = 0;   // kDsv4ArenaAlign per arena buffer (padding between buffers)
  int64_t unused_bytes() const {
    return memory_bytes - state_bytes - pool_bytes - block_table_bytes - align_slack_bytes;
  }
};

// Sizes the pools for a memory budget: state for max_requests slots, a block table sized
// for max_context_tokens per request, the alignment padding of the arena, and as many
// blocks as the rest holds (the arena a backend allocates never exceeds memory_bytes). Throws
// InvalidArgument (naming the bytes needed and given) when the budget cannot hold the state
// plus the blocks of ONE request of max_context_tokens, or for max_requests < 1 or
// max_context_tokens < 1.
Dsv4BlockBudget compute_block_budget(const Dsv4CacheSchema& schema, int64_t memory_bytes,
                                     int32_t max_requests, int64_t max_context_tokens);

// Bytes per original token of the whole stack holding one request of `context_tokens`
// (paged blocks it needs + its state slot), and the same stack with every layer storing
// every token as a BF16 head_dim vector (the dense BF16 baseline).
struct Dsv4BytesPerToken {
  int64_t context_tokens = 0;
  int64_t blocks = 0;
  int64_t paged_bytes = 0;          // blocks * bytes_per_block
  int64_t ring_bytes = 0;           // SWA rings (+ positions, heads) of all layers
  int64_t stream_bytes = 0;         // compressor streams of all layers
  int64_t classical_bytes = 0;      // paged share: compressed entries
  int64_t indexer_bytes = 0;        // paged share: indexer keys
  double per_token = 0;             // (paged + ring + stream) / context_tokens
  double bf16_dense_per_token = 0;  // num_layers * head_dim * 2
};
Dsv4BytesPerToken bytes_per_token(const Dsv4CacheSchema& schema, int64_t context_tokens);

// Human-readable table of the schema (one line per layer kind group plus totals).
std::string describe(const Dsv4CacheSchema& schema);

}  // namespace kvlab::sim
