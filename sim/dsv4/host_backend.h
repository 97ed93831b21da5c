// host_backend.h: the DSV4 cache on host memory, driven by the reference kernels.
//
// The backend the serving simulation and the CPU tests run KVCacheManager with: one arena
// (arena.h) in a host vector, block-table rows written from the host allocator's
// decisions, append_swa through kvlab::ref::dsv4_append_swa.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/dsv4/arena.h"
#include "sim/dsv4/backend.h"

namespace kvlab::sim {

class Dsv4HostBackend final : public Dsv4CacheBackend {
 public:
  std::string name() const override { return "host"; }
  bool on_device() const override { return false; }
  void create(const Dsv4CacheSchema& schema, const Dsv4BlockBudget& budget) override;
  void on_blocks_acquired(int32_t slot, int32_t first, const int32_t* ids, int32_t n) override;
  void on_blocks_released(int32_t slot, const int32_t* ids, int32_t n) override;
  void reset_slot(int32_t slot) override;
  const Dsv4LayerViews& layer_views(int32_t layer) const override;
  int64_t memory_bytes() const override { return static_cast<int64_t>(arena_.size()); }
  void append_swa(const Dsv4SwaView& swa, const Dsv4AppendSwaArgs& args, void* stream) override;

  // The block table row of a slot (tests).
  const int32_t* block_table_row(int32_t slot) const;

 private:
  Dsv4ArenaLayout layout_;
  Dsv4BlockBudget budget_;
  std::vector<uint8_t> arena_;
  std::vector<Dsv4LayerViews> views_;
};

}  // namespace kvlab::sim
