// block_allocator.cpp: LIFO free list of block ids (semantics in block_allocator.h).
#include "sim/alloc/block_allocator.h"

#include <limits>
#include <sstream>

namespace kvlab::sim {

namespace {
std::string oom_message(int64_t requested, int64_t num_free, int64_t capacity) {
  std::ostringstream os;
  os << "out of KV-cache blocks: requested " << requested << ", " << num_free << " free of "
     << capacity;
  return os.str();
}
}  // namespace

OutOfBlocks::OutOfBlocks(int64_t requested, int64_t num_free, int64_t capacity)
    : kvlab::Error(oom_message(requested, num_free, capacity)),
      requested_(requested),
      num_free_(num_free),
      capacity_(capacity) {}

BlockAllocator::BlockAllocator(int64_t num_blocks) {
  KVLAB_REQUIRE(
      num_blocks >= 0 && num_blocks <= std::numeric_limits<int32_t>::max(),
      "BlockAllocator: num_blocks " << num_blocks << " outside [0, 2^31-1] (block ids are int32)");
  capacity_ = static_cast<int32_t>(num_blocks);
  stack_.reserve(capacity_);
  // Bottom..top = N-1 .. 0, so the top is 0 and the first acquires return 0, 1, 2, ...
  for (int32_t i = capacity_ - 1; i >= 0; --i) stack_.push_back(i);
  is_free_.assign(capacity_, 1);
}

void BlockAllocator::check_id(int32_t id, const char* what) const {
  KVLAB_REQUIRE(id >= 0 && id < capacity_, "BlockAllocator::" << what << ": unknown block id " << id
                                                              << " (valid ids are [0, " << capacity_
                                                              << "))");
}

bool BlockAllocator::is_free(int32_t id) const {
  check_id(id, "is_free");
  return is_free_[id] != 0;
}

int32_t BlockAllocator::acquire() {
  if (stack_.empty()) throw OutOfBlocks(1, 0, capacity_);
  const int32_t id = stack_.back();
  stack_.pop_back();
  is_free_[id] = 0;
  ++total_acquired_;
  return id;
}

void BlockAllocator::acquire(int64_t n, std::vector<int32_t>* out) {
  KVLAB_REQUIRE(n >= 0, "BlockAllocator::acquire: negative block count " << n);
  KVLAB_REQUIRE(out != nullptr, "BlockAllocator::acquire: null output vector");
  if (n > static_cast<int64_t>(stack_.size())) throw OutOfBlocks(n, num_free(), capacity_);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = stack_.back();
    stack_.pop_back();
    is_free_[id] = 0;
    out->push_back(id);
  }
  total_acquired_ += n;
}

std::vector<int32_t> BlockAllocator::acquire_n(int64_t n) {
  std::vector<int32_t> ids;
  ids.reserve(n > 0 ? static_cast<size_t>(n) : 0);
  acquire(n, &ids);
  return ids;
}

void BlockAllocator::release(int32_t id) {
  check_id(id, "release");
  KVLAB_REQUIRE(!is_free_[id],
                "BlockAllocator::release: double free of block " << id << " (it is already free)");
  is_free_[id] = 1;
  stack_.push_back(id);
  ++total_released_;
}

void BlockAllocator::release(const int32_t* ids, int64_t n) {
  KVLAB_REQUIRE(n >= 0, "BlockAllocator::release: negative block count " << n);
  KVLAB_REQUIRE(n == 0 || ids != nullptr,
                "BlockAllocator::release: null id array for " << n << " blocks");
  // Validate everything before touching the stack: ids in range, not free, not repeated.
  // Marking is_free_ as we go detects repeats; on error the marks are rolled back.
  int64_t i = 0;
  try {
    for (; i < n; ++i) {
      check_id(ids[i], "release");
      KVLAB_REQUIRE(!is_free_[ids[i]], "BlockAllocator::release: double free of block "
                                           << ids[i] << " (element " << i << " of a batch of " << n
                                           << "; it is already free or named twice)");
      is_free_[ids[i]] = 1;
    }
  } catch (...) {
    for (int64_t j = 0; j < i; ++j) is_free_[ids[j]] = 0;
    throw;
  }
  for (int64_t j = 0; j < n; ++j) stack_.push_back(ids[j]);
  total_released_ += n;
}

}  // namespace kvlab::sim
