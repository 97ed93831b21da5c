// cache_ops.h: reference data-plane operations of the DSV4 substrate (host buffers).
// Each has a GPU mirror in gpu/dsv4/dsv4_kernels.h with the same views and args plus a stream.
//
//   dsv4_append_swa           raw BF16 tokens -> SWA ring (FP8 NoPE + BF16 RoPE + scales),
//                             position metadata, ring head (atomic head or pos % window)
//   dsv4_store_entries        FP32 compressed entries -> the paged classical pool
//   dsv4_store_indexer_keys   FP32 indexer keys -> FP4 (NVFP4, or MXFP4 after Hadamard)
//   dsv4_decode_attention     one query per sequence over visible compressed entries + window
//
// A decode step of a CSA/HCA layer is: append_swa(t); compress (compressor.h) and store
// the entries whose window completed at t (allocate their block first); decode_attention(t).
#pragma once

#include "reference/dsv4/args.h"
#include "reference/dsv4/views.h"

namespace kvlab::ref {

// Tokens are processed in array order (the atomic head hands out rows in that order).
// Throws InvalidArgument for null pointers, a slot outside the ring, a negative position,
// more than `window` tokens for one slot in one call, or two tokens of a slot whose
// positions repeat (kAtomicHead) or share a ring row (kPosModWindow). Checks everything
// before writing anything: on error the ring is unchanged.
void dsv4_append_swa(const Dsv4SwaView& swa, const Dsv4AppendSwaArgs& args);

// Throws InvalidArgument when an entry's block-table index reaches max_blocks_per_request
// or its block id lies outside [0, num_blocks) (allocate the block before the flush), or
// for a slot outside the block table's rows (num_slots). Checks before writing.
void dsv4_store_entries(const Dsv4ClassicalView& pool, int64_t num_slots,
                        const Dsv4StoreArgs& args);
void dsv4_store_indexer_keys(const Dsv4IndexerView& keys, int64_t num_slots,
                             const Dsv4StoreArgs& args);

// classical = nullptr for SWA layers. Accumulates in double (the truth the GPU is checked
// against). Throws InvalidArgument for a bad slot, a negative position, or a block-table
// entry of a visible compressed entry outside [0, num_blocks).
void dsv4_decode_attention(const Dsv4SwaView& swa, const Dsv4ClassicalView* classical,
                           const Dsv4DecodeArgs& args);

// Dequantized entry [head_dim] of ring row (slot, row) / of compressed entry e of a slot.
void dsv4_load_ring_entry(const Dsv4SwaView& swa, int64_t slot, int row, float* out);
void dsv4_load_compressed_entry(const Dsv4ClassicalView& pool, int64_t slot, int64_t entry,
                                float* out);

}  // namespace kvlab::ref
