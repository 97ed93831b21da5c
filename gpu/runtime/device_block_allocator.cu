// device_block_allocator.cu: kernels of the GPU block free list (see device_block_allocator.h).
//   init_kernel     stack[i] = N-1-i, in_use = 0
//   pop_kernel      dst[i] = stack[top-1-i], in_use[id] = 1          (pop order)
//   release_kernel  one block: atomically clears in_use for every id, and if any id was out
//                   of range or not in use (double free, or repeated in the batch) restores
//                   every flag it cleared and reports the first offending index; otherwise
//                   pushes the ids in order at stack[top .. top+n).
#include "gpu/runtime/device_block_allocator.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <string>

#include "gpu/core/cuda_check.h"
#include "reference/core/error.h"
#include "sim/alloc/block_allocator.h"

namespace kvlab::gpu {

namespace {

constexpr int kThreads = 256;

__global__ void init_kernel(int32_t* stack, int32_t* in_use, int32_t n) {
  for (int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    stack[i] = n - 1 - i;
    in_use[i] = 0;
  }
}

__global__ void pop_kernel(const int32_t* stack, int32_t* in_use, int32_t top, int32_t n,
                           int32_t* dst) {
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int32_t id = stack[top - 1 - i];
    dst[i] = id;
    in_use[id] = 1;
  }
}

__global__ void release_kernel(int32_t* stack, int32_t* in_use, int32_t* cleared, int32_t capacity,
                               int32_t top, const int32_t* ids, int32_t n, int32_t* status,
                               int32_t* bad_index, int32_t* bad_id) {
  __shared__ int s_bad;
  if (threadIdx.x == 0) s_bad = INT_MAX;
  __syncthreads();
  // Phase 1: clear each id's flag; an id out of range, already free, or repeated in the
  // batch (its second occurrence finds the flag cleared by the first) is an error.
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int32_t id = ids[i];
    cleared[i] = 0;
    if (id < 0 || id >= capacity) {
      atomicMin(&s_bad, i);
      continue;
    }
    if (atomicExch(&in_use[id], 0) == 1)
      cleared[i] = 1;
    else
      atomicMin(&s_bad, i);
  }
  __syncthreads();
  const int bad = s_bad;
  if (bad != INT_MAX) {
    // Phase 2 (error): restore exactly the flags this call cleared; push nothing.
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x)
      if (cleared[i]) in_use[ids[i]] = 1;
    if (threadIdx.x == 0) {
      *bad_index = bad;
      *bad_id = ids[bad];
      *status = (ids[bad] < 0 || ids[bad] >= capacity) ? 1 : 2;
    }
    return;
  }
  // Phase 2 (ok): push in order; the last id ends on top.
  for (int32_t i = threadIdx.x; i < n; i += blockDim.x) stack[top + i] = ids[i];
  if (threadIdx.x == 0) *status = 0;
}

}  // namespace

GpuBlockAllocator::GpuBlockAllocator(int64_t num_blocks, cudaStream_t stream) {
  KVLAB_REQUIRE(num_blocks >= 0 && num_blocks < (int64_t{1} << 31),
                "GpuBlockAllocator: num_blocks " << num_blocks << " outside [0, 2^31)");
  capacity_ = static_cast<int32_t>(num_blocks);
  const size_t bytes = 4 * static_cast<size_t>(capacity_ > 0 ? capacity_ : 1);
  KVLAB_CUDA_CHECK(cudaMalloc(&stack_, bytes));
  KVLAB_CUDA_CHECK(cudaMalloc(&in_use_, bytes));
  KVLAB_CUDA_CHECK(cudaMalloc(&staging_, bytes));
  KVLAB_CUDA_CHECK(cudaMalloc(&cleared_, bytes));
  KVLAB_CUDA_CHECK(
      cudaHostAlloc(reinterpret_cast<void**>(&pinned_), sizeof(Pinned), cudaHostAllocMapped));
  KVLAB_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&pinned_dev_), pinned_, 0));
  KVLAB_CUDA_CHECK(
      cudaHostAlloc(reinterpret_cast<void**>(&pinned_ids_), bytes, cudaHostAllocDefault));
  pinned_->top = capacity_;
  pinned_->status = 0;
  if (capacity_ > 0) {
    init_kernel<<<(capacity_ + kThreads - 1) / kThreads, kThreads, 0, stream>>>(stack_, in_use_,
                                                                                capacity_);
    KVLAB_CHECK_LAUNCH();
  }
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(stream));
}

GpuBlockAllocator::~GpuBlockAllocator() {
  cudaFree(stack_);
  cudaFree(in_use_);
  cudaFree(staging_);
  cudaFree(cleared_);
  cudaFreeHost(pinned_);
  cudaFreeHost(pinned_ids_);
}

int32_t GpuBlockAllocator::num_free() const {
  return pinned_->top;
}

void GpuBlockAllocator::acquire(int32_t n, int32_t* dst, cudaStream_t stream) {
  KVLAB_REQUIRE(n >= 0, "GpuBlockAllocator::acquire: n must be >= 0, got " << n);
  if (n > pinned_->top) throw sim::OutOfBlocks(n, pinned_->top, capacity_);
  if (n == 0) return;
  KVLAB_REQUIRE(dst != nullptr, "GpuBlockAllocator::acquire: null destination");
  pop_kernel<<<1, kThreads, 0, stream>>>(stack_, in_use_, pinned_->top, n, dst);
  KVLAB_CHECK_LAUNCH();
  pinned_->top -= n;
}

void GpuBlockAllocator::release(const int32_t* ids, int32_t n, cudaStream_t stream) {
  KVLAB_REQUIRE(n >= 0, "GpuBlockAllocator::release: n must be >= 0, got " << n);
  if (n == 0) return;
  KVLAB_REQUIRE(ids != nullptr, "GpuBlockAllocator::release: null ids");
  KVLAB_REQUIRE(n <= capacity_, "GpuBlockAllocator::release: "
                                    << n << " ids for " << capacity_
                                    << " blocks: some id is repeated or unknown; nothing released");
  pinned_->status = -1;
  release_kernel<<<1, kThreads, 0, stream>>>(stack_, in_use_, cleared_, capacity_, pinned_->top,
                                             ids, n, &pinned_dev_->status, &pinned_dev_->bad_index,
                                             &pinned_dev_->bad_id);
  KVLAB_CHECK_LAUNCH();
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(stream));
  volatile Pinned* vp = pinned_;  // written by the kernel through the mapped alias
  Pinned r;
  r.status = vp->status;
  r.bad_index = vp->bad_index;
  r.bad_id = vp->bad_id;
  if (r.status == 1)
    throw InvalidArgument("GpuBlockAllocator::release: block id " + std::to_string(r.bad_id) +
                          " (index " + std::to_string(r.bad_index) + " of the batch) outside [0, " +
                          std::to_string(capacity_) + "); nothing released");
  if (r.status == 2)
    throw InvalidArgument("GpuBlockAllocator::release: double free of block id " +
                          std::to_string(r.bad_id) + " (index " + std::to_string(r.bad_index) +
                          " of the batch): it is already free; nothing released");
  KVLAB_REQUIRE(r.status == 0,
                "GpuBlockAllocator::release: kernel did not report (status " << r.status << ")");
  pinned_->top += n;
}

void GpuBlockAllocator::release_host(const int32_t* ids, int32_t n, cudaStream_t stream) {
  KVLAB_REQUIRE(n >= 0 && n <= capacity_,
                "GpuBlockAllocator::release_host: "
                    << n << " ids for " << capacity_
                    << " blocks: some id is repeated or unknown; nothing released");
  if (n == 0) return;
  std::copy(ids, ids + n, pinned_ids_);
  KVLAB_CUDA_CHECK(cudaMemcpyAsync(staging_, pinned_ids_, 4 * static_cast<size_t>(n),
                                   cudaMemcpyHostToDevice, stream));
  release(staging_, n, stream);
}

std::vector<int32_t> GpuBlockAllocator::stack(cudaStream_t stream) const {
  std::vector<int32_t> out(pinned_->top);
  if (!out.empty())
    KVLAB_CUDA_CHECK(
        cudaMemcpyAsync(out.data(), stack_, 4 * out.size(), cudaMemcpyDeviceToHost, stream));
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}

}  // namespace kvlab::gpu
