// block_pool.cpp: block metadata, prefix cache and ledger counters (see block_pool.h).
#include "sim/engine/block_pool.h"

#include <sstream>

#include "reference/core/error.h"

namespace kvlab::sim {

BlockPool::BlockPool(int64_t num_blocks, int32_t block_size, bool prefix_caching)
    : allocator_(num_blocks), block_size_(block_size), prefix_caching_(prefix_caching) {
  KVLAB_REQUIRE(block_size >= 1, "BlockPool: block_size " << block_size << " must be >= 1");
  const size_t n = static_cast<size_t>(num_blocks);
  ref_.assign(n, 0);
  fill_.assign(n, 0);
  hash_.assign(n, 0);
  has_hash_.assign(n, 0);
  lru_prev_.assign(n, -1);
  lru_next_.assign(n, -1);
  if (prefix_caching) by_hash_.reserve(n);
}

void BlockPool::lru_push_back(int32_t b) {
  lru_prev_[b] = lru_tail_;
  lru_next_[b] = -1;
  if (lru_tail_ >= 0)
    lru_next_[lru_tail_] = b;
  else
    lru_head_ = b;
  lru_tail_ = b;
}

void BlockPool::lru_remove(int32_t b) {
  const int32_t p = lru_prev_[b], n = lru_next_[b];
  if (p >= 0)
    lru_next_[p] = n;
  else
    lru_head_ = n;
  if (n >= 0)
    lru_prev_[n] = p;
  else
    lru_tail_ = p;
  lru_prev_[b] = lru_next_[b] = -1;
}

int32_t BlockPool::allocate() {
  if (allocator_.num_free() == 0 && cached_blocks_ > 0) {
    // Evict the least recently released cached block back to the free stack.
    const int32_t victim = lru_head_;
    lru_remove(victim);
    by_hash_.erase(hash_[victim]);
    has_hash_[victim] = 0;
    fill_[victim] = 0;
    --cached_blocks_;
    ++evictions_;
    allocator_.release(victim);
  }
  const int32_t b = allocator_.acquire();  // OutOfBlocks when nothing is left
  ref_[b] = 1;
  fill_[b] = 0;
  ++used_empty_;
  return b;
}

void BlockPool::add_ref(int32_t b) {
  KVLAB_REQUIRE(b >= 0 && b < num_blocks(), "BlockPool::add_ref: unknown block " << b);
  if (ref_[b] == 0) {
    KVLAB_REQUIRE(has_hash_[b], "BlockPool::add_ref: block " << b << " is free, not cached");
    lru_remove(b);
    --cached_blocks_;
    if (fill_[b] > 0)
      ++used_nonempty_;
    else
      ++used_empty_;
    tokens_ += fill_[b];
  }
  ++ref_[b];
}

void BlockPool::release(int32_t b) {
  KVLAB_REQUIRE(b >= 0 && b < num_blocks() && ref_[b] > 0,
                "BlockPool::release: block " << b << " is not in use");
  if (--ref_[b] > 0) return;
  if (fill_[b] > 0)
    --used_nonempty_;
  else
    --used_empty_;
  tokens_ -= fill_[b];
  if (has_hash_[b]) {
    lru_push_back(b);
    ++cached_blocks_;
  } else {
    fill_[b] = 0;
    allocator_.release(b);
  }
}

int32_t BlockPool::lookup(uint64_t hash) const {
  const auto it = by_hash_.find(hash);
  return it == by_hash_.end() ? -1 : it->second;
}

bool BlockPool::register_block(int32_t b, uint64_t hash) {
  if (has_hash_[b]) return false;
  const auto ins = by_hash_.emplace(hash, b);
  if (!ins.second) return false;
  hash_[b] = hash;
  has_hash_[b] = 1;
  return true;
}

LedgerCounts BlockPool::counts() const {
  LedgerCounts c;
  c.token_slots = tokens_;
  c.slack_slots = used_nonempty_ * block_size_ - tokens_;
  c.reserved_slots = used_empty_ * block_size_;
  c.cached_slots = cached_blocks_ * block_size_;
  c.free_blocks = allocator_.num_free();
  c.free_slots = c.free_blocks * block_size_;
  c.used_blocks = used_nonempty_ + used_empty_;
  c.cached_blocks = cached_blocks_;
  return c;
}

void BlockPool::check() const {
  const LedgerCounts c = counts();
  const int64_t cap = num_blocks() * block_size_;
  if (c.sum_slots() != cap || c.used_blocks + c.cached_blocks != allocator_.num_used() ||
      c.slack_slots < 0 || tokens_ < used_nonempty_ || used_empty_ < 0 || used_nonempty_ < 0) {
    std::ostringstream os;
    os << "memory ledger invariant violated: tokens " << c.token_slots << " + slack "
       << c.slack_slots << " + reserved " << c.reserved_slots << " + cached " << c.cached_slots
       << " + free " << c.free_slots << " = " << c.sum_slots() << " slots vs capacity " << cap
       << "; used " << c.used_blocks << " + cached " << c.cached_blocks << " blocks vs allocator's "
       << allocator_.num_used() << " in use";
    throw kvlab::Error(os.str());
  }
}

void BlockPool::audit() const {
  check();
  LedgerCounts r;
  int64_t lru_len = 0;
  for (int32_t b = lru_head_; b >= 0; b = lru_next_[b]) ++lru_len;
  for (int32_t b = 0; b < num_blocks(); ++b) {
    const bool free = allocator_.is_free(b);
    std::ostringstream err;
    if (free) {
      if (ref_[b] != 0 || fill_[b] != 0 || has_hash_[b])
        err << "free block " << b << " has ref/fill/hash";
      r.free_slots += block_size_;
      ++r.free_blocks;
    } else if (ref_[b] > 0) {
      if (fill_[b] < 0 || fill_[b] > block_size_) err << "block " << b << " fill " << fill_[b];
      r.token_slots += fill_[b];
      if (fill_[b] == 0)
        r.reserved_slots += block_size_;
      else
        r.slack_slots += block_size_ - fill_[b];
      ++r.used_blocks;
    } else {
      if (!has_hash_[b]) err << "block " << b << " is neither free, used nor cached";
      r.cached_slots += block_size_;
      ++r.cached_blocks;
    }
    if (has_hash_[b]) {
      const auto it = by_hash_.find(hash_[b]);
      if (it == by_hash_.end() || it->second != b) err << "block " << b << " hash not in the index";
    }
    if (!err.str().empty()) throw kvlab::Error("memory ledger audit: " + err.str());
  }
  const LedgerCounts c = counts();
  if (r.token_slots != c.token_slots || r.slack_slots != c.slack_slots ||
      r.reserved_slots != c.reserved_slots || r.cached_slots != c.cached_slots ||
      r.free_slots != c.free_slots || lru_len != c.cached_blocks ||
      static_cast<int64_t>(by_hash_.size()) < c.cached_blocks) {
    std::ostringstream os;
    os << "memory ledger audit: recount tokens/slack/reserved/cached/free " << r.token_slots << "/"
       << r.slack_slots << "/" << r.reserved_slots << "/" << r.cached_slots << "/" << r.free_slots
       << " vs counters " << c.token_slots << "/" << c.slack_slots << "/" << c.reserved_slots << "/"
       << c.cached_slots << "/" << c.free_slots << " (eviction list " << lru_len << ")";
    throw kvlab::Error(os.str());
  }
}

}  // namespace kvlab::sim
