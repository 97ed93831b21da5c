// dsv4_device_backend.h: the DSV4 cache on the GPU, driven by KVCacheManager (sim/dsv4).
//
// One cudaMalloc'ed arena laid out by sim::plan_dsv4_arena (the same offsets the host
// backend and the budget use), filled with 0xFF (unwritten payload reads as NaN, block
// table and ring positions read -1), views built once at creation. Block ids come from a
// GpuBlockAllocator that pops straight into the device block table: the manager's host
// BlockAllocator decides, this stack makes the same decision on the device without any
// read-back (verify_mirror = true reads the popped ids back and throws if they differ;
// tests use it). append_swa runs the GPU kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/runtime/device_block_allocator.h"
#include "sim/dsv4/arena.h"
#include "sim/dsv4/backend.h"

namespace kvlab::gpu {

class Dsv4DeviceBackend final : public sim::Dsv4CacheBackend {
 public:
  // `stream` carries the control operations (allocator pops/pushes, slot resets).
  explicit Dsv4DeviceBackend(cudaStream_t stream = nullptr, bool verify_mirror = false)
      : stream_(stream), verify_mirror_(verify_mirror) {}
  ~Dsv4DeviceBackend() override;

  std::string name() const override { return "gpu"; }
  bool on_device() const override { return true; }
  void create(const sim::Dsv4CacheSchema& schema, const sim::Dsv4BlockBudget& budget) override;
  void on_blocks_acquired(int32_t slot, int32_t first, const int32_t* ids, int32_t n) override;
  void on_blocks_released(int32_t slot, const int32_t* ids, int32_t n) override;
  void reset_slot(int32_t slot) override;
  const sim::Dsv4LayerViews& layer_views(int32_t layer) const override;
  int64_t memory_bytes() const override;
  void append_swa(const Dsv4SwaView& swa, const Dsv4AppendSwaArgs& args, void* stream) override;

  const GpuBlockAllocator& allocator() const { return *allocator_; }
  uint8_t* arena() const { return arena_; }
  int64_t arena_bytes() const { return layout_.total_bytes; }
  // Device pointer of a slot's block-table row.
  int32_t* block_table_row(int32_t slot) const;

 private:
  cudaStream_t stream_;
  bool verify_mirror_;
  sim::Dsv4ArenaLayout layout_;
  sim::Dsv4BlockBudget budget_;
  uint8_t* arena_ = nullptr;
  std::unique_ptr<GpuBlockAllocator> allocator_;
  std::vector<sim::Dsv4LayerViews> views_;
};

}  // namespace kvlab::gpu
