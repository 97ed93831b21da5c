// dtype.h: element types of activations (Q, O, raw K/V before caching).
#pragma once

#include <cstdint>
#include <string>

namespace kvlab {

enum class DType : int32_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

inline int dtype_bytes(DType t) {
  return t == DType::kF32 ? 4 : 2;
}
std::string to_string(DType t);
// Parses "f32"/"fp32"/"float32", "bf16"/"bfloat16", "f16"/"fp16"/"float16"; throws
// InvalidArgument naming the allowed values otherwise.
DType parse_dtype(const std::string& s);

}  // namespace kvlab
