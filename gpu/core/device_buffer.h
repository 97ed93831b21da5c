// device_buffer.h: a minimal owning device allocation for host code (g++ or nvcc).
//
// Tests (.cu) use thrust::device_vector; host tools and experiments compiled by g++ cannot
// include Thrust without CCCL's include path, so they use this RAII wrapper instead.
// Optional guard regions: `guard_bytes` canary bytes (kGuardByte) before and after the
// payload, checked by guards_intact() to catch out-of-bounds writes of a kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "gpu/core/cuda_check.h"

namespace kvlab::gpu {

class DeviceBuffer {
 public:
  static constexpr uint8_t kGuardByte = 0xA5;

  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes, size_t guard_bytes = 0) { allocate(bytes, guard_bytes); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }

  // guard_bytes is rounded up to 256 so the payload keeps cudaMalloc's alignment.
  void allocate(size_t bytes, size_t guard_bytes = 0) {
    release();
    guard_ = (guard_bytes + 255) / 256 * 256;
    bytes_ = bytes;
    KVLAB_CUDA_CHECK(cudaMalloc(&base_, bytes_ + 2 * guard_ + (bytes_ + 2 * guard_ == 0 ? 1 : 0)));
    if (guard_ > 0) {
      KVLAB_CUDA_CHECK(cudaMemset(base_, kGuardByte, guard_));
      KVLAB_CUDA_CHECK(
          cudaMemset(static_cast<uint8_t*>(base_) + guard_ + bytes_, kGuardByte, guard_));
    }
  }
  void release() noexcept {
    if (base_) cudaFree(base_);
    base_ = nullptr;
    bytes_ = guard_ = 0;
  }

  void* data() const { return base_ ? static_cast<uint8_t*>(base_) + guard_ : nullptr; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data());
  }
  size_t bytes() const { return bytes_; }

  void upload(const void* host, size_t n) {
    KVLAB_REQUIRE(n <= bytes_, "upload of " << n << " bytes into a DeviceBuffer of " << bytes_);
    KVLAB_CUDA_CHECK(cudaMemcpy(data(), host, n, cudaMemcpyHostToDevice));
  }
  template <class T>
  void upload(const std::vector<T>& v) {
    upload(v.data(), v.size() * sizeof(T));
  }
  void download(void* host, size_t n) const {
    KVLAB_REQUIRE(n <= bytes_, "download of " << n << " bytes from a DeviceBuffer of " << bytes_);
    KVLAB_CUDA_CHECK(cudaMemcpy(host, data(), n, cudaMemcpyDeviceToHost));
  }
  template <class T>
  std::vector<T> download() const {
    std::vector<T> v(bytes_ / sizeof(T));
    download(v.data(), v.size() * sizeof(T));
    return v;
  }
  void fill_bytes(uint8_t value) { KVLAB_CUDA_CHECK(cudaMemset(data(), value, bytes_)); }

  // True when both guard regions still hold kGuardByte (always true without guards).
  bool guards_intact() const {
    if (guard_ == 0) return true;
    std::vector<uint8_t> g(guard_);
    for (int side = 0; side < 2; ++side) {
      const uint8_t* p = static_cast<const uint8_t*>(base_) + (side == 0 ? 0 : guard_ + bytes_);
      KVLAB_CUDA_CHECK(cudaMemcpy(g.data(), p, guard_, cudaMemcpyDeviceToHost));
      for (uint8_t b : g)
        if (b != kGuardByte) return false;
    }
    return true;
  }

 private:
  void swap(DeviceBuffer& o) noexcept {
    std::swap(base_, o.base_);
    std::swap(bytes_, o.bytes_);
    std::swap(guard_, o.guard_);
  }
  void* base_ = nullptr;
  size_t bytes_ = 0;
  size_t guard_ = 0;
};

}  // namespace kvlab::gpu
