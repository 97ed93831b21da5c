// block_table.h: per-sequence block lists and the int32 block tables / int64 slot mappings
// that real GPU runs hand to kernels (see reference/layout/kv_layout.h and args.h).
//
// A sequence's logical token t lives in block blocks(seq)[t / block_size], slot
// t % block_size; its global slot is  slot = block * block_size + offset  (int64; the
// AppendArgs::slot_mapping convention, -1 = padding token). Blocks come from a
// BlockAllocator (LIFO semantics, block_allocator.h), one acquire per new block in token
// order, so the same call sequence gives the same ids in the simulation and on the GPU.
//
//   BlockAllocator alloc(num_blocks);
//   BlockTable table(&alloc, /*block_size=*/16);
//   table.add_sequence(7);
//   std::vector<int64_t> slots;
//   table.append_tokens(7, prompt_len, &slots);     // AppendArgs::slot_mapping
//   std::vector<int32_t> bt; table.build_block_table({7}, max_blocks, -1, &bt);
//   ... decode ...; table.free_sequence(7);
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "sim/alloc/block_allocator.h"

namespace kvlab::sim {

// Global slot of (block, offset): the slot-mapping element for one token.
inline int64_t slot_of(int32_t block, int32_t offset, int32_t block_size) {
  return static_cast<int64_t>(block) * block_size + offset;
}
// Blocks needed to hold n tokens: ceil(n / block_size).
inline int64_t blocks_for_tokens(int64_t n, int32_t block_size) {
  return (n + block_size - 1) / block_size;
}

class BlockTable {
 public:
  // The allocator is borrowed (must outlive the table); block_size >= 1.
  BlockTable(BlockAllocator* allocator, int32_t block_size);

  int32_t block_size() const { return block_size_; }
  // Registers an empty sequence; InvalidArgument if seq_id is already present.
  void add_sequence(int64_t seq_id);
  bool has_sequence(int64_t seq_id) const { return seqs_.count(seq_id) != 0; }
  int64_t num_sequences() const { return static_cast<int64_t>(seqs_.size()); }

  // Appends n >= 0 tokens to seq_id: acquires the blocks they need (all-or-nothing:
  // OutOfBlocks leaves table and allocator unchanged) and appends the n slots to *slots
  // when slots is non-null.
  void append_tokens(int64_t seq_id, int64_t n, std::vector<int64_t>* slots);
  // Releases the sequence's blocks tail-first (the last block is pushed first, so the
  // sequence's first block ends on top of the free stack) and forgets the sequence.
  void free_sequence(int64_t seq_id);

  int64_t num_tokens(int64_t seq_id) const;
  const std::vector<int32_t>& blocks(int64_t seq_id) const;
  // Global slot of logical token t of the sequence (0 <= t < num_tokens).
  int64_t slot(int64_t seq_id, int64_t t) const;

  // Dense block table int32 [seq_ids.size(), max_blocks_per_seq], row i = seq_ids[i], entries
  // past a sequence's block count set to pad. InvalidArgument if a sequence holds more than
  // max_blocks_per_seq blocks (nothing is truncated). *out is resized.
  void build_block_table(const std::vector<int64_t>& seq_ids, int32_t max_blocks_per_seq,
                         int32_t pad, std::vector<int32_t>* out) const;
  // seq_lens int32 [seq_ids.size()] (InvalidArgument above 2^31-1 tokens).
  std::vector<int32_t> seq_lens(const std::vector<int64_t>& seq_ids) const;
  // Largest block count among the given sequences (0 for none).
  int32_t max_blocks(const std::vector<int64_t>& seq_ids) const;

 private:
  struct Seq {
    int64_t num_tokens = 0;
    std::vector<int32_t> blocks;
  };
  const Seq& get(int64_t seq_id, const char* what) const;
  Seq& get(int64_t seq_id, const char* what);

  BlockAllocator* allocator_;
  int32_t block_size_;
  std::unordered_map<int64_t, Seq> seqs_;
};

}  // namespace kvlab::sim
