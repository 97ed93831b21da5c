// tolerance.h: THE tolerance table. No tolerance literal lives in a test body.
//
// A check passes when every element satisfies |out - ref| <= atol + rtol * |ref|, the
// normalized MSE is at most nmse_max, and no non-finite value appears where the reference
// is finite (unless allow_nonfinite). Entries are keyed by (operation, storage format,
// output dtype); each entry documents why its numbers are what they are (tolerance.cpp).
#pragma once

#include <string>

#include "reference/core/dtype.h"
#include "reference/layout/kv_layout.h"
#include "reference/metrics/metrics.h"

namespace kvlab {

enum class Op {
  kDecodeAttention,        // GPU decode vs reference over the *same* (dequantized) cache
  kDecodeAttentionVsBf16,  // quantized-cache decode vs reference over the original data (loose, recorded)
  kDecodeLse,              // the log-sum-exp output
  kPrefillAttention,
  kOnlineSoftmaxMerge,     // split-KV merge vs two-pass softmax
  kQuantRoundTrip,         // quantize -> dequantize vs input (per-token relative L2)
  kQuantBytes,             // quantizer bytes vs reference: exact (0 differing bytes)
  kAppend,                 // append / reshape_and_cache vs reference: exact
  kCompressor,             // DSV4 CSA/HCA compression, GPU vs reference
  kDecodeStepLogits,       // full decode step logits, GPU vs CPU reference
};

struct Tolerance {
  double atol = 0;
  double rtol = 0;
  double nmse_max = 0;
  bool allow_nonfinite = false;
  const char* why = "";
};

Tolerance tolerance(Op op, KvFormat format, DType out_dtype);
std::string to_string(Op op);

// Fills s.violations / s.worst_index using the tolerance and returns whether the whole
// check passes (elementwise, NMSE and non-finite conditions).
bool check(const float* out, const float* ref, size_t n, const Tolerance& tol, ErrorStats* s);

}  // namespace kvlab
