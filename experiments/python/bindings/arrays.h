// arrays.h: checking DLPack arrays (nanobind ndarray) before their pointers go into kvlab's
// argument structs.
//
// Every binding takes arrays untyped (nb::ndarray<> accepts any dtype, device and strides)
// and checks them here, so that a wrong array fails with kvlab's kind of message (what was
// given, what is allowed) as kvlab::InvalidArgument -> Python ValueError, instead of
// nanobind's generic "incompatible function arguments". Nothing is converted or copied:
// a kvlab op reads and writes the caller's memory, so an array must already have the
// dtype, device and dense row-major strides the op needs.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reference/core/dtype.h"
#include "reference/core/error.h"

namespace kvlab::py {

namespace nb = nanobind;
using Array = nb::ndarray<>;
using OptArray = std::optional<Array>;

// Where the arrays of one call must live: host memory (kvlab.ref, kvlab.formats) or one
// CUDA device (kvlab.ops).
enum class Where { kHost, kDevice };

// Element kinds a kvlab argument may have. kBits8 / kBits16 accept any 1- or 2-byte
// integer dtype as raw storage (numpy has no bf16 / fp8), besides the matching float type.
enum class Elem {
  kF32,
  kF64,
  kI32,
  kI64,
  kU8,           // uint8 or int8 raw bytes
  kBF16,         // bfloat16, or 16-bit integers holding BF16 bits
  kF16,          // float16, or 16-bit integers holding FP16 bits
  kFP8E4M3,      // float8_e4m3fn, or 8-bit integers holding E4M3 codes
  kFP8E5M2,      // float8_e5m2, or 8-bit integers holding E5M2 codes
  kUE8M0,        // float8_e8m0fnu, or 8-bit integers holding UE8M0 codes
  kFP4Packed,    // two E2M1 codes per byte: uint8 / int8 (or float4_e2m1fn_x2)
};

std::string dtype_name(const nb::dlpack::dtype& t);
std::string shape_str(const Array& a);
std::string elem_name(Elem e);
bool dtype_matches(const nb::dlpack::dtype& t, Elem e);

// The checks of one call: device placement (one device for all arrays), dtype, rank,
// shape, dense row-major strides. Throws InvalidArgument naming the argument.
class Checker {
 public:
  explicit Checker(Where where) : where_(where) {}

  // Checks `a` and returns its data pointer. `shape` entries < 0 are free ("any size").
  void* check(const Array& a, const char* name, Elem e, const std::vector<int64_t>& shape);
  void* check_opt(const OptArray& a, const char* name, Elem e, const std::vector<int64_t>& shape) {
    return a ? check(*a, name, e, shape) : nullptr;
  }
  // Rank only (the caller reads the sizes from the array).
  void* check_rank(const Array& a, const char* name, Elem e, size_t ndim);

  Where where() const { return where_; }
  int device_id() const { return device_id_; }  // -1 until a device array was checked

 private:
  void placement(const Array& a, const char* name);
  void check_head(const Array& a, const char* name, Elem e, size_t ndim);  // place, dtype, rank
  void check_strides(const Array& a, const char* name);
  Where where_;
  int device_id_ = -1;
  std::string first_name_;
};

int64_t dim(const Array& a, size_t i);
// Python scalar-ish stream handle (an int: cudaStream_t as integer) to a pointer.
inline void* stream_ptr(uintptr_t s) { return reinterpret_cast<void*>(s); }

DType parse_q_dtype(const Array& q, const std::string& q_dtype);

}  // namespace kvlab::py
