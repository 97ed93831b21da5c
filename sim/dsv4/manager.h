// manager.h: KVCacheManager, the owner of the DSV4 cache: schema, budget, pools
// (through a backend), the block allocator and the request lifecycle. CUDA-free: the
// serving simulation runs it with the host backend, real runs with the GPU backend.
//
// Lifecycle of a request (ids are the caller's int64; slots are the manager's):
//   admit_request(id)           takes a free request slot (LIFO: the most recently freed
//                               slot first; initially 0, 1, 2, ...) and empties its state
//   append_tokens(id, n)        the request will hold n more tokens: allocates the blocks the
//                               compression flushes of those tokens write into (all-or-
//                               nothing), then advances its token count
//   allocate_block(id)          one block for a compression flush (the primitive under
//                               append_tokens): appended to the request's block-table row
//   acquire(layer)              LayerCacheHandle over that layer: no allocation at all
//   release_request(id)         blocks back to the allocator (last block first, so the
//                               request's first block ends on top), slot emptied and freed
// Acquire/release of blocks happen between CUDA-graph captures, never inside one.
//
// Errors leave the manager and its backend unchanged:
//   duplicate / unknown request id, no free slot       InvalidArgument
//   no free block                                      sim::OutOfBlocks (kvlab::Error)
//   a request growing past max_context_tokens          InvalidArgument
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "sim/alloc/block_allocator.h"
#include "sim/dsv4/backend.h"
#include "sim/dsv4/handle.h"
#include "sim/dsv4/schema.h"

namespace kvlab::sim {

class KVCacheManager {
 public:
  // Creates the backend's pools for schema x budget (budget from compute_block_budget()).
  KVCacheManager(const Dsv4CacheSchema& schema, const Dsv4BlockBudget& budget,
                 std::unique_ptr<Dsv4CacheBackend> backend);

  int32_t admit_request(int64_t request_id);
  void release_request(int64_t request_id);
  int32_t allocate_block(int64_t request_id);
  void append_tokens(int64_t request_id, int64_t n);
  LayerCacheHandle acquire(int32_t layer) const;

  bool has_request(int64_t request_id) const { return requests_.count(request_id) != 0; }
  int32_t slot_of(int64_t request_id) const;
  int64_t num_tokens(int64_t request_id) const;
  const std::vector<int32_t>& blocks_of(int64_t request_id) const;
  int32_t num_active() const { return static_cast<int32_t>(requests_.size()); }
  int32_t num_free_slots() const { return static_cast<int32_t>(free_slots_.size()); }
  int32_t num_free_blocks() const { return allocator_.num_free(); }
  // Could a new request of `tokens` tokens be admitted and filled right now?
  bool can_admit(int64_t tokens) const;

  const Dsv4CacheSchema& schema() const { return schema_; }
  const Dsv4BlockBudget& budget() const { return budget_; }
  const BlockAllocator& allocator() const { return allocator_; }
  Dsv4CacheBackend& backend() const { return *backend_; }

 private:
  struct Request {
    int32_t slot = 0;
    int64_t tokens = 0;
    std::vector<int32_t> blocks;
  };
  Request& get(int64_t request_id, const char* what);
  const Request& get(int64_t request_id, const char* what) const;

  Dsv4CacheSchema schema_;
  Dsv4BlockBudget budget_;
  std::unique_ptr<Dsv4CacheBackend> backend_;
  BlockAllocator allocator_;
  std::vector<int32_t> free_slots_;  // LIFO, top = back()
  std::unordered_map<int64_t, Request> requests_;
};

}  // namespace kvlab::sim
