#include "reference/core/dtype.h"

#include "reference/core/error.h"

namespace kvlab {

std::string to_string(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
  }
  return "?";
}

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "fp32" || s == "float32") return DType::kF32;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "f16" || s == "fp16" || s == "float16") return DType::kF16;
  throw InvalidArgument("unknown dtype '" + s + "' (allowed: f32, bf16, f16)");
}

}  // namespace kvlab
