// guard_region.h: output buffers surrounded by canary bytes and pre-filled with NaN.
//
// A kernel (or reference) that writes outside its output, or leaves part of it unwritten,
// is caught: the allocation is [front guard | payload | back guard]; guard byte j (j counts
// over the whole allocation) holds guard_canary_byte(j), a position-dependent pattern that a
// shifted or repeated write cannot reproduce by accident; the payload starts as the quiet
// NaN of its dtype, so an element never written stays NaN and fails the comparison.
// guard_canary_byte() is host/device: a device buffer fills and checks the very same bytes
// (the GPU tests mirror GuardedBuffer with cudaMemcpy of storage()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "reference/core/dtype.h"
#include "reference/core/error.h"
#include "reference/core/hostdevice.h"

namespace kvlab {

// Default guard size: 256 bytes keeps the payload 256-byte aligned relative to the start
// of the allocation (cudaMalloc alignment), so vector loads stay legal.
constexpr size_t kGuardBytes = 256;

KVLAB_HD uint8_t guard_canary_byte(uint64_t j) {
  return static_cast<uint8_t>(((j * 0x9Du) ^ (j >> 8) ^ 0x5Bu) & 0xFFu);
}

// Quiet-NaN bit patterns used to pre-fill outputs (the formats' canonical NaNs).
constexpr uint16_t kBF16NaNBits = 0x7FFF;
constexpr uint16_t kFP16NaNBits = 0x7FFF;
constexpr uint32_t kF32NaNBits = 0x7FC00000u;

class GuardedBuffer {
 public:
  GuardedBuffer() = default;
  // `elements` of `dtype` (payload = elements * dtype_bytes), NaN-filled, guarded.
  GuardedBuffer(size_t elements, DType dtype, size_t guard_bytes = kGuardBytes)
      : dtype_(dtype),
        elements_(elements),
        guard_(guard_bytes),
        storage_(2 * guard_bytes + elements * static_cast<size_t>(dtype_bytes(dtype))) {
    for (size_t j = 0; j < guard_; ++j) {
      storage_[j] = guard_canary_byte(j);
      const size_t b = guard_ + payload_bytes() + j;
      storage_[b] = guard_canary_byte(b);
    }
    fill_nan();
  }

  void* data() { return storage_.data() + guard_; }
  const void* data() const { return storage_.data() + guard_; }
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(data());
  }
  size_t elements() const { return elements_; }
  size_t payload_bytes() const { return elements_ * static_cast<size_t>(dtype_bytes(dtype_)); }
  size_t guard_bytes() const { return guard_; }
  DType dtype() const { return dtype_; }
  // The whole allocation (guards included), e.g. to cudaMemcpy to and from a device mirror.
  std::vector<uint8_t>& storage() { return storage_; }
  const std::vector<uint8_t>& storage() const { return storage_; }

  void fill_nan() {
    uint8_t* p = storage_.data() + guard_;
    for (size_t i = 0; i < elements_; ++i) {
      if (dtype_ == DType::kF32)
        std::memcpy(p + 4 * i, &kF32NaNBits, 4);
      else
        std::memcpy(p + 2 * i, dtype_ == DType::kBF16 ? &kBF16NaNBits : &kFP16NaNBits, 2);
    }
  }

  // "" when both guards hold their canaries, else which bytes changed (first few).
  std::string guard_damage() const {
    std::ostringstream os;
    int reported = 0;
    size_t damaged = 0;
    auto scan = [&](size_t begin, const char* where) {
      for (size_t j = begin; j < begin + guard_; ++j) {
        if (storage_[j] == guard_canary_byte(j)) continue;
        ++damaged;
        if (reported++ < 4)
          os << where << " guard byte " << (j - begin) << " = 0x" << std::hex
             << static_cast<int>(storage_[j]) << " (expected 0x"
             << static_cast<int>(guard_canary_byte(j)) << std::dec << "); ";
      }
    };
    scan(0, "front");
    scan(guard_ + payload_bytes(), "back");
    if (damaged == 0) return "";
    os << damaged << " guard bytes overwritten";
    return os.str();
  }
  bool guards_intact() const { return guard_damage().empty(); }

 private:
  DType dtype_ = DType::kF32;
  size_t elements_ = 0;
  size_t guard_ = 0;
  std::vector<uint8_t> storage_;
};

}  // namespace kvlab
