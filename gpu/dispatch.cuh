// dispatch.cuh: THE runtime -> compile-time dispatch of kvlab's kernels.
//
// Every template parameter a kernel has is chosen here, from an explicit value list; any
// other value is a clear kvlab::Unsupported error ("unsupported head_dim 96 (compiled:
// 64, 128, 256)"), never a silently wrong result. Everything else (block size, layout,
// Q/O dtype, scale mode, GQA group size, split sizes) is a runtime parameter: a template
// must clearly pay for itself because CI compiles every instance for sm_90 on 2 cores.
//
// The compiled values (the curated instance set):
//   head_dim          64, 128, 256           (register arrays are sized by it)
//   KV element class  bf16, fp16, e4m3, e5m2, e2m1
//                     (the decode instruction sequence of the inner loop; the scale mode
//                      - pool, per token, NVFP4 / MX block - is a runtime parameter)
//   KV format         the 7 KvFormats (tensor-core decode only: the scale mode picks the
//                     mma operand types, so each format has its own operand loader)
//   activation dtype  bf16, fp16, f32        (append / quantize inputs only; attention
//                                              reads Q and writes O with a runtime branch)
//
// Usage (the body is a lambda, as in PyTorch's AT_DISPATCH; it may return a value):
//   return KVLAB_DISPATCH_HEAD_DIM(args.kv.geom.head_dim, kHeadDim, [&] {
//     return KVLAB_DISPATCH_KV_ELEM(args.kv.geom.format, kElem, [&] {
//       return launch_flash_decode<kHeadDim, kElem>(params, stream);
//     });
//   });
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <sstream>
#include <string>

#include "reference/core/dtype.h"
#include "reference/core/error.h"
#include "reference/layout/kv_layout.h"

namespace kvlab::gpu {

// ------------------------------------------------------------------ value lists
// X-macros: the single place where the compiled values are listed.
#define KVLAB_FOR_EACH_HEAD_DIM(X) X(64) X(128) X(256)

// The element encoding of a KV pool: what the inner loop decodes. Several KvFormats share
// one class (kFP8E4M3 and kFP8E4M3PerToken differ only in their scales; kNVFP4 and kMXFP4
// only in their block-scale encoding), so the instance count stays at five.
enum class KvElem : int32_t { kBF16 = 0, kFP16 = 1, kE4M3 = 2, kE5M2 = 3, kE2M1 = 4 };

__host__ __device__ constexpr KvElem kv_elem_of(KvFormat f) {
  return f == KvFormat::kBF16                                           ? KvElem::kBF16
         : f == KvFormat::kFP16                                         ? KvElem::kFP16
         : (f == KvFormat::kFP8E4M3 || f == KvFormat::kFP8E4M3PerToken) ? KvElem::kE4M3
         : f == KvFormat::kFP8E5M2                                      ? KvElem::kE5M2
                                                                        : KvElem::kE2M1;
}
__host__ __device__ constexpr int kv_elem_bits(KvElem e) {
  return (e == KvElem::kBF16 || e == KvElem::kFP16) ? 16 : (e == KvElem::kE2M1 ? 4 : 8);
}

// How stored elements are scaled (runtime: it costs one multiply per score / probability).
//   kNone      16-bit storage
//   kPool      one FP32 scale per pool, folded into the softmax scale (K) and the output (V)
//   kPerToken  FP32 inverse scale per (block, head, slot), applied to the score (K) or to
//              the probability (V)
//   kNvfp4     E4M3 block scale per 16 elements times the FP32 pool scale
//   kMx        UE8M0 block scale per 32 elements
enum class ScaleMode : int32_t { kNone = 0, kPool = 1, kPerToken = 2, kNvfp4 = 3, kMx = 4 };

__host__ __device__ constexpr ScaleMode scale_mode_of(KvFormat f) {
  return (f == KvFormat::kBF16 || f == KvFormat::kFP16)         ? ScaleMode::kNone
         : (f == KvFormat::kFP8E4M3 || f == KvFormat::kFP8E5M2) ? ScaleMode::kPool
         : f == KvFormat::kFP8E4M3PerToken                      ? ScaleMode::kPerToken
         : f == KvFormat::kNVFP4                                ? ScaleMode::kNvfp4
                                                                : ScaleMode::kMx;
}

// ------------------------------------------------------------------ host-side queries
inline bool head_dim_compiled(int d) {
#define KVLAB_HD_CASE_(v) \
  if (d == v) return true;
  KVLAB_FOR_EACH_HEAD_DIM(KVLAB_HD_CASE_)
#undef KVLAB_HD_CASE_
  return false;
}

inline std::string compiled_head_dims() {
  std::ostringstream os;
  const char* sep = "";
#define KVLAB_HD_LIST_(v) os << sep << v, sep = ", ";
  KVLAB_FOR_EACH_HEAD_DIM(KVLAB_HD_LIST_)
#undef KVLAB_HD_LIST_
  return os.str();
}

// "" when head_dim is compiled, else the reason.
inline std::string head_dim_unsupported_reason(int d) {
  if (head_dim_compiled(d)) return "";
  std::ostringstream os;
  os << "unsupported head_dim " << d << " (compiled: " << compiled_head_dims() << ")";
  return os.str();
}

// ------------------------------------------------------------------ dispatch macros
#define KVLAB_DISPATCH_HD_CASE_(v, NAME, ...) \
  case v: {                                   \
    constexpr int NAME = v;                   \
    return __VA_ARGS__();                     \
  }

// head_dim -> constexpr int NAME
#define KVLAB_DISPATCH_HEAD_DIM(head_dim, NAME, ...)                                      \
  [&]() {                                                                                 \
    const int kvlab_hd_ = (head_dim);                                                     \
    switch (kvlab_hd_) {                                                                  \
      KVLAB_DISPATCH_HD_CASE_(64, NAME, __VA_ARGS__)                                      \
      KVLAB_DISPATCH_HD_CASE_(128, NAME, __VA_ARGS__)                                     \
      KVLAB_DISPATCH_HD_CASE_(256, NAME, __VA_ARGS__)                                     \
      default:                                                                            \
        throw ::kvlab::Unsupported(::kvlab::gpu::head_dim_unsupported_reason(kvlab_hd_)); \
    }                                                                                     \
  }()

#define KVLAB_DISPATCH_ELEM_CASE_(fmt_value, elem_value, NAME, ...) \
  case fmt_value: {                                                 \
    constexpr ::kvlab::gpu::KvElem NAME = elem_value;               \
    return __VA_ARGS__();                                           \
  }

// KvFormat -> constexpr KvElem NAME (every KvFormat has an element class; an out-of-range
// enum value is an InvalidArgument).
#define KVLAB_DISPATCH_KV_ELEM(format, NAME, ...)                                                 \
  [&]() {                                                                                         \
    const ::kvlab::KvFormat kvlab_f_ = (format);                                                  \
    switch (kvlab_f_) {                                                                           \
      KVLAB_DISPATCH_ELEM_CASE_(::kvlab::KvFormat::kBF16, ::kvlab::gpu::KvElem::kBF16, NAME,      \
                                __VA_ARGS__)                                                      \
      KVLAB_DISPATCH_ELEM_CASE_(::kvlab::KvFormat::kFP16, ::kvlab::gpu::KvElem::kFP16, NAME,      \
                                __VA_ARGS__)                                                      \
      case ::kvlab::KvFormat::kFP8E4M3:                                                           \
        KVLAB_DISPATCH_ELEM_CASE_(::kvlab::KvFormat::kFP8E4M3PerToken,                            \
                                  ::kvlab::gpu::KvElem::kE4M3, NAME, __VA_ARGS__)                 \
        KVLAB_DISPATCH_ELEM_CASE_(::kvlab::KvFormat::kFP8E5M2, ::kvlab::gpu::KvElem::kE5M2, NAME, \
                                  __VA_ARGS__)                                                    \
      case ::kvlab::KvFormat::kNVFP4:                                                             \
        KVLAB_DISPATCH_ELEM_CASE_(::kvlab::KvFormat::kMXFP4, ::kvlab::gpu::KvElem::kE2M1, NAME,   \
                                  __VA_ARGS__)                                                    \
    }                                                                                             \
    std::ostringstream kvlab_os_;                                                                 \
    kvlab_os_ << "invalid KvFormat value " << static_cast<int>(kvlab_f_);                         \
    throw ::kvlab::InvalidArgument(kvlab_os_.str());                                              \
  }()

#define KVLAB_DISPATCH_FMT_CASE_(fmt_value, NAME, ...) \
  case fmt_value: {                                    \
    constexpr ::kvlab::KvFormat NAME = fmt_value;      \
    return __VA_ARGS__();                              \
  }

// KvFormat -> constexpr KvFormat NAME, for kernels whose operand path is chosen per format
// (the tensor-core decode versions: the scale mode fixes the mma operand types, so the
// format, not only its element class, is a template parameter there). An out-of-range
// enum value is an InvalidArgument.
#define KVLAB_DISPATCH_KV_FORMAT(format, NAME, ...)                                    \
  [&]() {                                                                              \
    const ::kvlab::KvFormat kvlab_f_ = (format);                                       \
    switch (kvlab_f_) {                                                                \
      KVLAB_DISPATCH_FMT_CASE_(::kvlab::KvFormat::kBF16, NAME, __VA_ARGS__)            \
      KVLAB_DISPATCH_FMT_CASE_(::kvlab::KvFormat::kFP16, NAME, __VA_ARGS__)            \
      KVLAB_DISPATCH_FMT_CASE_(::kvlab::KvFormat::kFP8E4M3, NAME, __VA_ARGS__)         \
      KVLAB_DISPATCH_FMT_CASE_(::kvlab::KvFormat::kFP8E4M3PerToken, NAME, __VA_ARGS__) \
      KVLAB_DISPATCH_FMT_CASE_(::kvlab::KvFormat::kFP8E5M2, NAME, __VA_ARGS__)         \
      KVLAB_DISPATCH_FMT_CASE_(::kvlab::KvFormat::kNVFP4, NAME, __VA_ARGS__)           \
      KVLAB_DISPATCH_FMT_CASE_(::kvlab::KvFormat::kMXFP4, NAME, __VA_ARGS__)           \
    }                                                                                  \
    std::ostringstream kvlab_os_;                                                      \
    kvlab_os_ << "invalid KvFormat value " << static_cast<int>(kvlab_f_);              \
    throw ::kvlab::InvalidArgument(kvlab_os_.str());                                   \
  }()

#define KVLAB_DISPATCH_DTYPE_CASE_(dt, T, NAME, ...) \
  case dt: {                                         \
    using NAME = T;                                  \
    return __VA_ARGS__();                            \
  }

// Activation dtype (append / quantize inputs) -> `using NAME = __nv_bfloat16 | __half | float`.
#define KVLAB_DISPATCH_ACT_DTYPE(dtype, NAME, ...)                                        \
  [&]() {                                                                                 \
    const ::kvlab::DType kvlab_dt_ = (dtype);                                             \
    switch (kvlab_dt_) {                                                                  \
      KVLAB_DISPATCH_DTYPE_CASE_(::kvlab::DType::kBF16, __nv_bfloat16, NAME, __VA_ARGS__) \
      KVLAB_DISPATCH_DTYPE_CASE_(::kvlab::DType::kF16, __half, NAME, __VA_ARGS__)         \
      KVLAB_DISPATCH_DTYPE_CASE_(::kvlab::DType::kF32, float, NAME, __VA_ARGS__)          \
    }                                                                                     \
    std::ostringstream kvlab_os_;                                                         \
    kvlab_os_ << "unsupported activation dtype value " << static_cast<int>(kvlab_dt_)     \
              << " (allowed: bf16, f16, f32)";                                            \
    throw ::kvlab::Unsupported(kvlab_os_.str());                                          \
  }()

}  // namespace kvlab::gpu
