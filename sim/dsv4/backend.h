// backend.h: the storage interface the DSV4 KVCacheManager drives.
//
// The manager (sim/dsv4/manager.h) is CUDA-free lifecycle logic shared by the serving
// simulation and real GPU runs. It decides everything on the host (slots, block ids from
// the LIFO sim::BlockAllocator, token counts) and tells a backend what to mirror:
//   Dsv4HostBackend (sim/dsv4/host_backend.h)  host buffers, reference kernels: simulation,
//                                              tests, the CPU truth
//   gpu::Dsv4DeviceBackend (gpu/runtime/dsv4_device_backend.h)  device pools, a GPU-resident free
//                                              stack making the same block decisions, kernels
// Views (reference/dsv4/views.h) point into the backend's buffers; they are built once in
// create() and never change, so acquiring a handle allocates nothing.
#pragma once

#include <cstdint>
#include <string>

#include "reference/dsv4/args.h"
#include "reference/dsv4/views.h"
#include "sim/dsv4/schema.h"

namespace kvlab::sim {

// Every view of one layer (absent parts have null pointers; `kind` says which exist).
struct Dsv4LayerViews {
  int32_t layer = 0;
  Dsv4LayerKind kind = Dsv4LayerKind::kSWA;
  Dsv4SwaView swa;
  Dsv4ClassicalView classical;    // CSA, HCA
  Dsv4IndexerView indexer;        // CSA
  Dsv4StreamView stream;          // CSA (dim = head_dim, overlap), HCA (single lane)
  Dsv4StreamView indexer_stream;  // CSA (dim = indexer_dim, overlap)
  int64_t num_slots = 0;          // request slots (rows of the block table)
};

class Dsv4CacheBackend {
 public:
  virtual ~Dsv4CacheBackend() = default;
  virtual std::string name() const = 0;
  virtual bool on_device() const = 0;

  // Allocates every pool, the per-slot state and the block table [max_requests,
  // max_blocks_per_request] (filled with -1), and builds the views. Called once.
  virtual void create(const Dsv4CacheSchema& schema, const Dsv4BlockBudget& budget) = 0;
  // The host allocator handed out `ids` (pop order) for block_table[slot][first .. first+n).
  // The backend records them (host) or pops its own device stack into the table (GPU; its
  // LIFO stack yields the same ids).
  virtual void on_blocks_acquired(int32_t slot, int32_t first, const int32_t* ids, int32_t n) = 0;
  // The ids go back to the free list in this order (the last ends on top); the table row
  // is reset to -1.
  virtual void on_blocks_released(int32_t slot, const int32_t* ids, int32_t n) = 0;
  // Empties a slot's state: ring positions -1, head 0. Stream rows need no reset: they are
  // addressed by position and read only after being written.
  virtual void reset_slot(int32_t slot) = 0;
  virtual const Dsv4LayerViews& layer_views(int32_t layer) const = 0;
  // Bytes the backend allocated (pools + state + block table + allocator).
  virtual int64_t memory_bytes() const = 0;

  // Data plane (host backend: reference; GPU backend: kernels on `stream`, a cudaStream_t).
  virtual void append_swa(const Dsv4SwaView& swa, const Dsv4AppendSwaArgs& args, void* stream) = 0;
};

}  // namespace kvlab::sim
