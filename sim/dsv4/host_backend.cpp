#include "sim/dsv4/host_backend.h"

#include <algorithm>

#include "reference/core/error.h"
#include "reference/dsv4/cache_ops.h"

namespace kvlab::sim {

void Dsv4HostBackend::create(const Dsv4CacheSchema& schema, const Dsv4BlockBudget& budget) {
  KVLAB_REQUIRE(arena_.empty(), "Dsv4HostBackend::create called twice");
  budget_ = budget;
  layout_ = plan_dsv4_arena(schema, budget);
  arena_.assign(static_cast<size_t>(layout_.total_bytes), 0xFF);
  views_ = build_dsv4_views(schema, budget, layout_, arena_.data());
  for (int32_t s = 0; s < budget.max_requests; ++s) reset_slot(s);
}

const int32_t* Dsv4HostBackend::block_table_row(int32_t slot) const {
  KVLAB_REQUIRE(slot >= 0 && slot < budget_.max_requests,
                "slot " << slot << " outside [0, " << budget_.max_requests << ")");
  if (layout_.block_table < 0) return nullptr;
  return reinterpret_cast<const int32_t*>(arena_.data() + layout_.block_table) +
         static_cast<int64_t>(slot) * budget_.max_blocks_per_request;
}

void Dsv4HostBackend::on_blocks_acquired(int32_t slot, int32_t first, const int32_t* ids,
                                         int32_t n) {
  KVLAB_REQUIRE(slot >= 0 && slot < budget_.max_requests && first >= 0 && n >= 0 &&
                    first + n <= budget_.max_blocks_per_request,
                "block-table write [" << first << ", " << first + n << ") of slot " << slot
                                      << " outside the table [" << budget_.max_requests << ", "
                                      << budget_.max_blocks_per_request << "]");
  int32_t* row = const_cast<int32_t*>(block_table_row(slot));
  std::copy(ids, ids + n, row + first);
}

void Dsv4HostBackend::on_blocks_released(int32_t slot, const int32_t*, int32_t) {
  if (layout_.block_table < 0) return;
  int32_t* row = const_cast<int32_t*>(block_table_row(slot));
  std::fill(row, row + budget_.max_blocks_per_request, -1);
}

void Dsv4HostBackend::reset_slot(int32_t slot) {
  KVLAB_REQUIRE(slot >= 0 && slot < budget_.max_requests,
                "slot " << slot << " outside [0, " << budget_.max_requests << ")");
  for (auto& v : views_) {
    std::fill(v.swa.pos_row(slot), v.swa.pos_row(slot) + v.swa.window(), -1);
    v.swa.head[slot] = 0;
  }
}

const Dsv4LayerViews& Dsv4HostBackend::layer_views(int32_t layer) const {
  KVLAB_REQUIRE(layer >= 0 && layer < static_cast<int32_t>(views_.size()),
                "layer " << layer << " outside [0, " << views_.size() << ")");
  return views_[layer];
}

void Dsv4HostBackend::append_swa(const Dsv4SwaView& swa, const Dsv4AppendSwaArgs& args, void*) {
  ref::dsv4_append_swa(swa, args);
}

}  // namespace kvlab::sim
