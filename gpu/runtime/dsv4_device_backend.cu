// dsv4_device_backend.cu: see dsv4_device_backend.h.
#include "gpu/runtime/dsv4_device_backend.h"

#include <cuda_runtime.h>

#include <string>

#include "gpu/core/cuda_check.h"
#include "gpu/dsv4/dsv4_kernels.h"
#include "reference/core/error.h"

namespace kvlab::gpu {

Dsv4DeviceBackend::~Dsv4DeviceBackend() {
  allocator_.reset();
  if (arena_) cudaFree(arena_);
}

void Dsv4DeviceBackend::create(const sim::Dsv4CacheSchema& schema,
                               const sim::Dsv4BlockBudget& budget) {
  KVLAB_REQUIRE(arena_ == nullptr, "Dsv4DeviceBackend::create called twice");
  budget_ = budget;
  layout_ = sim::plan_dsv4_arena(schema, budget);
  KVLAB_CUDA_CHECK(cudaMalloc(&arena_, static_cast<size_t>(layout_.total_bytes)));
  KVLAB_CUDA_CHECK(
      cudaMemsetAsync(arena_, 0xFF, static_cast<size_t>(layout_.total_bytes), stream_));
  views_ = sim::build_dsv4_views(schema, budget, layout_, arena_);
  allocator_ = std::make_unique<GpuBlockAllocator>(budget.num_blocks, stream_);
  for (const auto& v : views_)
    KVLAB_CUDA_CHECK(cudaMemsetAsync(v.swa.head, 0, 4 * static_cast<size_t>(v.num_slots), stream_));
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

int32_t* Dsv4DeviceBackend::block_table_row(int32_t slot) const {
  KVLAB_REQUIRE(slot >= 0 && slot < budget_.max_requests,
                "slot " << slot << " outside [0, " << budget_.max_requests << ")");
  if (layout_.block_table < 0) return nullptr;
  return reinterpret_cast<int32_t*>(arena_ + layout_.block_table) +
         static_cast<int64_t>(slot) * budget_.max_blocks_per_request;
}

void Dsv4DeviceBackend::on_blocks_acquired(int32_t slot, int32_t first, const int32_t* ids,
                                           int32_t n) {
  KVLAB_REQUIRE(slot >= 0 && slot < budget_.max_requests && first >= 0 && n >= 0 &&
                    first + n <= budget_.max_blocks_per_request,
                "block-table write [" << first << ", " << first + n << ") of slot " << slot
                                      << " outside the table [" << budget_.max_requests << ", "
                                      << budget_.max_blocks_per_request << "]");
  if (n == 0) return;
  int32_t* dst = block_table_row(slot) + first;
  allocator_->acquire(n, dst, stream_);  // device pop straight into the table: no read-back
  if (!verify_mirror_) return;
  std::vector<int32_t> got(n);
  KVLAB_CUDA_CHECK(cudaMemcpyAsync(got.data(), dst, 4 * static_cast<size_t>(n),
                                   cudaMemcpyDeviceToHost, stream_));
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (int32_t i = 0; i < n; ++i)
    if (got[i] != ids[i])
      throw Error("Dsv4DeviceBackend: the GPU free stack popped block " + std::to_string(got[i]) +
                  " where the host allocator decided " + std::to_string(ids[i]) + " (slot " +
                  std::to_string(slot) + ", index " + std::to_string(first + i) +
                  "): the allocators diverged");
}

void Dsv4DeviceBackend::on_blocks_released(int32_t slot, const int32_t* ids, int32_t n) {
  allocator_->release_host(ids, n, stream_);  // validates on the device, synchronizes
  if (int32_t* row = block_table_row(slot))
    KVLAB_CUDA_CHECK(cudaMemsetAsync(
        row, 0xFF, 4 * static_cast<size_t>(budget_.max_blocks_per_request), stream_));
}

void Dsv4DeviceBackend::reset_slot(int32_t slot) {
  KVLAB_REQUIRE(slot >= 0 && slot < budget_.max_requests,
                "slot " << slot << " outside [0, " << budget_.max_requests << ")");
  for (const auto& v : views_) {
    KVLAB_CUDA_CHECK(cudaMemsetAsync(v.swa.pos_row(slot), 0xFF,
                                     4 * static_cast<size_t>(v.swa.window()), stream_));
    KVLAB_CUDA_CHECK(cudaMemsetAsync(v.swa.head + slot, 0, 4, stream_));
  }
}

const sim::Dsv4LayerViews& Dsv4DeviceBackend::layer_views(int32_t layer) const {
  KVLAB_REQUIRE(layer >= 0 && layer < static_cast<int32_t>(views_.size()),
                "layer " << layer << " outside [0, " << views_.size() << ")");
  return views_[layer];
}

int64_t Dsv4DeviceBackend::memory_bytes() const {
  return layout_.total_bytes + (allocator_ ? allocator_->device_bytes() : 0);
}

void Dsv4DeviceBackend::append_swa(const Dsv4SwaView& swa, const Dsv4AppendSwaArgs& args,
                                   void* stream) {
  dsv4_append_swa(swa, args, static_cast<cudaStream_t>(stream));
}

}  // namespace kvlab::gpu
