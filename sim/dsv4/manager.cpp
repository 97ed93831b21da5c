#include "sim/dsv4/manager.h"

#include "reference/core/error.h"

namespace kvlab::sim {

KVCacheManager::KVCacheManager(const Dsv4CacheSchema& schema, const Dsv4BlockBudget& budget,
                               std::unique_ptr<Dsv4CacheBackend> backend)
    : schema_(schema),
      budget_(budget),
      backend_(std::move(backend)),
      allocator_(budget.num_blocks) {
  KVLAB_REQUIRE(backend_ != nullptr, "KVCacheManager needs a backend");
  KVLAB_REQUIRE(budget.max_requests >= 1,
                "budget.max_requests must be >= 1, got " << budget.max_requests);
  KVLAB_REQUIRE(budget.bytes_per_block == schema.bytes_per_block(),
                "budget computed for "
                    << budget.bytes_per_block << " bytes per block, the schema has "
                    << schema.bytes_per_block() << " (use compute_block_budget on this schema)");
  backend_->create(schema_, budget_);
  for (int32_t s = budget.max_requests - 1; s >= 0; --s) free_slots_.push_back(s);
}

KVCacheManager::Request& KVCacheManager::get(int64_t id, const char* what) {
  auto it = requests_.find(id);
  KVLAB_REQUIRE(it != requests_.end(), what << ": unknown request id " << id << " ("
                                            << requests_.size() << " active request(s))");
  return it->second;
}
const KVCacheManager::Request& KVCacheManager::get(int64_t id, const char* what) const {
  auto it = requests_.find(id);
  KVLAB_REQUIRE(it != requests_.end(), what << ": unknown request id " << id << " ("
                                            << requests_.size() << " active request(s))");
  return it->second;
}

int32_t KVCacheManager::admit_request(int64_t id) {
  KVLAB_REQUIRE(!requests_.count(id), "admit_request: request id " << id << " is already admitted");
  KVLAB_REQUIRE(!free_slots_.empty(), "admit_request: all "
                                          << budget_.max_requests
                                          << " request slots are in use (request id " << id << ")");
  const int32_t slot = free_slots_.back();
  backend_->reset_slot(slot);
  free_slots_.pop_back();
  Request r;
  r.slot = slot;
  requests_.emplace(id, std::move(r));
  return slot;
}

void KVCacheManager::release_request(int64_t id) {
  Request& r = get(id, "release_request");
  // Last block first: the request's first block ends on top of the free stack.
  std::vector<int32_t> order(r.blocks.rbegin(), r.blocks.rend());
  allocator_.release(order);  // validates every id before changing anything
  try {
    backend_->on_blocks_released(r.slot, order.data(), static_cast<int32_t>(order.size()));
  } catch (...) {
    std::vector<int32_t> back;
    allocator_.acquire(static_cast<int64_t>(order.size()),
                       &back);  // pops exactly `order`, restoring the stack
    throw;
  }
  backend_->reset_slot(r.slot);
  free_slots_.push_back(r.slot);
  requests_.erase(id);
}

int32_t KVCacheManager::allocate_block(int64_t id) {
  Request& r = get(id, "allocate_block");
  KVLAB_REQUIRE(static_cast<int32_t>(r.blocks.size()) < budget_.max_blocks_per_request,
                "allocate_block: request "
                    << id << " already holds " << r.blocks.size()
                    << " blocks, the block table's limit for max_context_tokens="
                    << budget_.max_context_tokens);
  const int32_t b = allocator_.acquire();  // OutOfBlocks: nothing changed
  try {
    backend_->on_blocks_acquired(r.slot, static_cast<int32_t>(r.blocks.size()), &b, 1);
  } catch (...) {
    allocator_.release(b);  // back on top: the allocator is as before
    throw;
  }
  r.blocks.push_back(b);
  return b;
}

void KVCacheManager::append_tokens(int64_t id, int64_t n) {
  Request& r = get(id, "append_tokens");
  KVLAB_REQUIRE(n >= 0, "append_tokens: request " << id << ": n must be >= 0, got " << n);
  const int64_t total = r.tokens + n;
  KVLAB_REQUIRE(total <= budget_.max_context_tokens,
                "append_tokens: request "
                    << id << " would hold " << total << " tokens, above max_context_tokens="
                    << budget_.max_context_tokens << " the block table is sized for");
  const int64_t need = schema_.blocks_for_tokens(total) - static_cast<int64_t>(r.blocks.size());
  if (need > 0) {
    std::vector<int32_t> ids;
    allocator_.acquire(need, &ids);  // all-or-nothing
    try {
      backend_->on_blocks_acquired(r.slot, static_cast<int32_t>(r.blocks.size()), ids.data(),
                                   static_cast<int32_t>(need));
    } catch (...) {
      allocator_.release(
          std::vector<int32_t>(ids.rbegin(), ids.rend()));  // restores the stack exactly
      throw;
    }
    r.blocks.insert(r.blocks.end(), ids.begin(), ids.end());
  }
  r.tokens = total;
}

LayerCacheHandle KVCacheManager::acquire(int32_t layer) const {
  KVLAB_REQUIRE(layer >= 0 && layer < schema_.num_layers(),
                "acquire: layer " << layer << " outside [0, " << schema_.num_layers() << ")");
  return LayerCacheHandle(backend_.get(), &backend_->layer_views(layer));
}

int32_t KVCacheManager::slot_of(int64_t id) const {
  return get(id, "slot_of").slot;
}
int64_t KVCacheManager::num_tokens(int64_t id) const {
  return get(id, "num_tokens").tokens;
}
const std::vector<int32_t>& KVCacheManager::blocks_of(int64_t id) const {
  return get(id, "blocks_of").blocks;
}

bool KVCacheManager::can_admit(int64_t tokens) const {
  if (free_slots_.empty() || tokens > budget_.max_context_tokens || tokens < 0) return false;
  return allocator_.can_acquire(schema_.blocks_for_tokens(tokens));
}

}  // namespace kvlab::sim
