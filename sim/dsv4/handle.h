// handle.h: LayerCacheHandle, the typed per-call view of one layer's cache.
//
// Returned by KVCacheManager::acquire(layer): a few pointers copied out of views the
// backend built at creation, so acquiring allocates nothing (0 bytes of device memory;
// safe inside CUDA-graph capture). The views are the plain structs of
// reference/dsv4/views.h that kernels take directly. A handle must not outlive its manager.
#pragma once

#include <cstdint>

#include "sim/dsv4/backend.h"

namespace kvlab::sim {

class LayerCacheHandle {
 public:
  LayerCacheHandle(Dsv4CacheBackend* backend, const Dsv4LayerViews* views)
      : backend_(backend), views_(views) {}

  int32_t layer() const { return views_->layer; }
  Dsv4LayerKind kind() const { return views_->kind; }
  int32_t ratio() const { return views_->classical.ratio; }

  // Appends raw tokens to this layer's SWA ring through the backend (reference on the host
  // backend, the append_swa kernel on `stream` for the GPU backend).
  void write_swa(const Dsv4AppendSwaArgs& args, void* stream = nullptr) const;

  const Dsv4SwaView& read_swa_view() const { return views_->swa; }
  // InvalidArgument for an SWA layer (no classical pool) / a non-CSA layer (no indexer).
  const Dsv4ClassicalView& read_classical_view() const;
  const Dsv4IndexerView& read_indexer_view() const;
  const Dsv4StreamView& stream_view() const;          // CSA / HCA compressor state
  const Dsv4StreamView& indexer_stream_view() const;  // CSA indexer compressor state
  int64_t num_slots() const { return views_->num_slots; }

 private:
  Dsv4CacheBackend* backend_;
  const Dsv4LayerViews* views_;
};

}  // namespace kvlab::sim
