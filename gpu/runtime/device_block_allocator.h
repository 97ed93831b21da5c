// device_block_allocator.h: the GPU-resident block free list of the DSV4 substrate: a GPU
// stack with a pinned host top pointer; acquire / release between graph captures only; out
// of blocks raises.
//
// A device int32 stack of free block ids plus a device in-use flag per block; the stack's
// top is a host integer kept in pinned, device-mapped memory next to a status record the
// release kernel writes. It makes exactly the decisions of the host sim::BlockAllocator
// (sim/alloc/block_allocator.h), so the control plane can predict every id without reading
// the device:
//   initial stack [N-1, ..., 1, 0] (bottom..top): the first acquires return 0, 1, 2, ...
//   acquire(n, dst)   pops n ids into dst in pop order (the first is the old top), all or
//                     nothing; no synchronization (the host knows the count). Exhaustion
//                     throws sim::OutOfBlocks with nothing changed.
//   release(ids, n)   validates every id on the device (range, in use, no repeats), then
//                     pushes them in the given order (the last ends on top); synchronizes
//                     the stream and throws InvalidArgument naming the first bad id (double
//                     free or unknown id), with nothing changed.
// Host-only header (no CUDA device code); the kernels are in block_allocator.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace kvlab::gpu {

class GpuBlockAllocator {
 public:
  // num_blocks in [0, 2^31). Allocates the device stack, flags and the pinned record.
  GpuBlockAllocator(int64_t num_blocks, cudaStream_t stream = nullptr);
  ~GpuBlockAllocator();
  GpuBlockAllocator(const GpuBlockAllocator&) = delete;
  GpuBlockAllocator& operator=(const GpuBlockAllocator&) = delete;

  int32_t capacity() const { return capacity_; }
  int32_t num_free() const;
  int32_t num_used() const { return capacity_ - num_free(); }

  // dst: device int32 [n]. n >= 0.
  void acquire(int32_t n, int32_t* dst_device, cudaStream_t stream);
  // ids: device int32 [n], read before this returns.
  void release(const int32_t* ids_device, int32_t n, cudaStream_t stream);
  // Same, from host ids (staged through pinned memory).
  void release_host(const int32_t* ids, int32_t n, cudaStream_t stream);

  // The free stack bottom..top (synchronizes `stream`): compare with BlockAllocator::stack().
  std::vector<int32_t> stack(cudaStream_t stream) const;
  // Bytes of device memory it holds (stack + flags + staging + scratch).
  int64_t device_bytes() const { return 4 * 4 * static_cast<int64_t>(capacity_); }

 private:
  struct Pinned {       // pinned, device-mapped
    int32_t top;        // free ids on the stack (host-owned; kernels get it by value)
    int32_t status;     // release: 0 ok, 1 id out of range, 2 already free / repeated
    int32_t bad_index;  // release: first offending index in the batch
    int32_t bad_id;     // release: that id
  };
  int32_t capacity_ = 0;
  int32_t* stack_ = nullptr;       // device [capacity]
  int32_t* in_use_ = nullptr;      // device [capacity] 0/1
  int32_t* staging_ = nullptr;     // device [capacity] (release_host)
  int32_t* cleared_ = nullptr;     // device [capacity] (release: flags this call cleared)
  Pinned* pinned_ = nullptr;       // host pointer
  Pinned* pinned_dev_ = nullptr;   // its device alias
  int32_t* pinned_ids_ = nullptr;  // pinned host [capacity] (release_host staging)
};

}  // namespace kvlab::gpu
