// block_allocator.h: the host block allocator, a fixed-size free list of KV-cache block ids.
//
// One allocator, two clocks: the serving simulation (virtual clock) and real GPU runs (block
// tables handed to kernels) both take their block ids from this class, and the GPU-resident
// stack of the DeepSeek-V4-style substrate (sim/dsv4, gpu/) must make *identical* decisions.
// The semantics are therefore specified exactly, not "some free block":
//
//   The free list is a LIFO stack of block ids, stored bottom..top in stack().
//   - Initial state: stack() == [N-1, N-2, ..., 1, 0], so the first acquires return 0, 1, 2, ...
//   - acquire():      pops the top id and returns it.
//   - acquire(n):     all-or-nothing; returns the ids in pop order (the first is the old top).
//                     Same result as n single acquire() calls, or an error with no change.
//   - release(id):    pushes id onto the top (the next acquire() returns it).
//   - release(ids):   validates every id first, then pushes them in the given order (the last
//                     one ends on top). On error nothing is released.
//
// Errors (the state is unchanged after every error):
//   - exhaustion:     OutOfBlocks (a kvlab::Error) with the requested and free counts;
//   - unknown id:     InvalidArgument naming the id and the valid range [0, N);
//   - double free:    InvalidArgument naming the id (it is already free);
//   - a batch naming one id twice is a double free.
//
// Costs: acquire/release O(1) (O(n) for batches), no allocation after construction.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/core/error.h"

namespace kvlab::sim {

// Thrown when an acquire asks for more blocks than are free. A typed error so that a caller
// can tell exhaustion (preempt, evict, reject) from a programming error (InvalidArgument).
class OutOfBlocks : public kvlab::Error {
 public:
  OutOfBlocks(int64_t requested, int64_t num_free, int64_t capacity);
  int64_t requested() const { return requested_; }
  int64_t num_free() const { return num_free_; }
  int64_t capacity() const { return capacity_; }

 private:
  int64_t requested_, num_free_, capacity_;
};

class BlockAllocator {
 public:
  // num_blocks >= 0 (0 is a valid, always-exhausted allocator) and below 2^31 (int32 ids,
  // the block-table element type).
  explicit BlockAllocator(int64_t num_blocks);

  int32_t acquire();
  // Appends n ids to *out in pop order; n >= 0. All-or-nothing.
  void acquire(int64_t n, std::vector<int32_t>* out);
  std::vector<int32_t> acquire_n(int64_t n);

  void release(int32_t id);
  void release(const int32_t* ids, int64_t n);
  void release(const std::vector<int32_t>& ids) {
    release(ids.data(), static_cast<int64_t>(ids.size()));
  }

  int32_t capacity() const { return capacity_; }
  int32_t num_free() const { return static_cast<int32_t>(stack_.size()); }
  int32_t num_used() const { return capacity_ - num_free(); }
  bool can_acquire(int64_t n) const { return n <= static_cast<int64_t>(stack_.size()); }
  // Throws InvalidArgument for an id outside [0, capacity).
  bool is_free(int32_t id) const;
  // Cumulative operation counts since construction (single ids, batches count each id).
  int64_t total_acquired() const { return total_acquired_; }
  int64_t total_released() const { return total_released_; }
  // The free stack, bottom..top: the exact state another implementation must reproduce.
  const std::vector<int32_t>& stack() const { return stack_; }

 private:
  void check_id(int32_t id, const char* what) const;

  int32_t capacity_ = 0;
  std::vector<int32_t> stack_;    // free ids, top = back()
  std::vector<uint8_t> is_free_;  // [capacity] 1 while the id is on the stack
  int64_t total_acquired_ = 0;
  int64_t total_released_ = 0;
};

}  // namespace kvlab::sim
