// block_pool.h: the serving engine's KV block pool: the BlockAllocator plus per-block
// metadata (reference count, fill), the prefix cache and the memory ledger's counters.
//
// Block states (each physical block is in exactly one):
//   free      on the allocator's free stack (ref 0, fill 0, no hash)
//   used      ref >= 1: held by running requests; `fill` tokens written (0 = reserved)
//   cached    ref 0 but registered in the prefix cache under its content hash; evictable.
//             Cached blocks are NOT on the free stack: the allocator stays a pure LIFO
//             stack (its semantics are shared with the GPU stack), and the pool evicts the
//             least recently released cached block back to the allocator only when the free
//             stack is empty.
//
// Ledger classes in token slots (capacity = num_blocks * block_size), each physical block
// counted once however many requests share it:
//   tokens    slots holding KV            = sum of fill over used blocks
//   slack     empty slots of used blocks that hold >= 1 token (the last-block waste)
//   reserved  slots of used blocks holding no token yet (allocated ahead)
//   cached    slots of cached blocks
//   free      slots of free blocks
// The counters are updated incrementally (O(1) per event); check() asserts their sum and
// their agreement with the allocator's own count, audit() recounts from the metadata.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "sim/alloc/block_allocator.h"

namespace kvlab::sim {

struct LedgerCounts {
  int64_t token_slots = 0;
  int64_t slack_slots = 0;
  int64_t reserved_slots = 0;
  int64_t cached_slots = 0;
  int64_t free_slots = 0;
  int64_t used_blocks = 0;
  int64_t cached_blocks = 0;
  int64_t free_blocks = 0;
  int64_t sum_slots() const {
    return token_slots + slack_slots + reserved_slots + cached_slots + free_slots;
  }
};

class BlockPool {
 public:
  BlockPool(int64_t num_blocks, int32_t block_size, bool prefix_caching);

  int32_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return allocator_.capacity(); }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks obtainable now: free plus evictable cached.
  int64_t available() const { return allocator_.num_free() + cached_blocks_; }

  // A new private block (ref 1, fill 0): pops the free stack, evicting the least recently
  // released cached block first when the stack is empty. OutOfBlocks when nothing is left.
  int32_t allocate();
  // Takes another reference to a used or cached block (a prefix-cache hit). A cached block
  // becomes used again (leaves the eviction list).
  void add_ref(int32_t block);
  // Drops one reference; at 0 a hashed block becomes cached, any other block free.
  void release(int32_t block);
  // Writes n more tokens into a used, private block (fill + n <= block_size).
  void fill(int32_t block, int32_t n) { fill_from(block, fill_[block], n); }
  // Same, when the caller knows the block's current fill `prev` (the engine's fill cursor):
  // the hot path of every computed token writes the metadata without reading it. audit()
  // verifies that the cursors and the metadata agree.
  void fill_from(int32_t block, int32_t prev, int32_t n) {
    if (prev == 0 && n > 0) {
      --used_empty_;
      ++used_nonempty_;
    }
    fill_[block] = prev + n;
    tokens_ += n;
  }
  // Address of a block's fill entry, for the engine's software prefetch.
  const int32_t* fill_address(int32_t block) const { return &fill_[block]; }
  int32_t fill_of(int32_t block) const { return fill_[block]; }
  int32_t ref_of(int32_t block) const { return ref_[block]; }
  bool is_cached(int32_t block) const { return ref_[block] == 0 && has_hash_[block]; }

  // Prefix cache: the block holding the content `hash`, or -1.
  int32_t lookup(uint64_t hash) const;
  // Registers a full, used block under `hash`. Returns false (and leaves the block private)
  // when another block already holds that content.
  bool register_block(int32_t block, uint64_t hash);

  LedgerCounts counts() const;
  // O(1) consistency check of the incremental counters against capacity and the allocator;
  // throws kvlab::Error describing the violated invariant.
  void check() const;
  // O(num_blocks) recount from per-block metadata, compared with counts(); throws kvlab::Error.
  void audit() const;
  const BlockAllocator& allocator() const { return allocator_; }
  int64_t num_evictions() const { return evictions_; }

 private:
  void lru_push_back(int32_t b);
  void lru_remove(int32_t b);

  BlockAllocator allocator_;
  int32_t block_size_;
  bool prefix_caching_;
  std::vector<int32_t> ref_;    // [num_blocks]
  std::vector<int32_t> fill_;   // [num_blocks] tokens written
  std::vector<uint64_t> hash_;  // [num_blocks] content hash when has_hash_
  std::vector<uint8_t> has_hash_;
  std::vector<int32_t> lru_prev_, lru_next_;  // eviction list of cached blocks (head = oldest)
  int32_t lru_head_ = -1, lru_tail_ = -1;
  std::unordered_map<uint64_t, int32_t> by_hash_;
  // Ledger counters.
  int64_t used_nonempty_ = 0;  // used blocks with fill >= 1
  int64_t used_empty_ = 0;     // used blocks with fill 0 (reserved)
  int64_t tokens_ = 0;         // sum of fill over used blocks
  int64_t cached_blocks_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace kvlab::sim
