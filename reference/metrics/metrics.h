// metrics.h: error metrics of an output against its reference, in one place.
//
// Every comparison in kvlab — tests, `kvlab validate`, sweep records — computes the same
// ErrorStats through compare(), and judges it through the tolerance table (tolerance.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "reference/core/dtype.h"

namespace kvlab {

struct ErrorStats {
  int64_t count = 0;          // elements compared
  double max_abs = 0;         // max |out - ref| over finite pairs
  double max_rel = 0;         // max |out - ref| / |ref| over finite pairs with ref != 0
  double rel_l2 = 0;          // ||out - ref||_2 / ||ref||_2 (0 when both are zero)
  double nmse = 0;            // ||out - ref||^2 / ||ref||^2
  double cosine = 1;          // <out, ref> / (||out|| ||ref||); 1 when both are zero
  int64_t max_ulp = 0;        // max ULP distance in the `ulp_dtype` grid
  int64_t nan_out = 0, inf_out = 0;  // non-finite values in out
  int64_t nan_ref = 0, inf_ref = 0;  // non-finite values in ref
  int64_t mismatched_nonfinite = 0;  // positions where exactly one side is non-finite or
                                     // both are but differ (NaN vs Inf, +Inf vs -Inf)
  int64_t violations = 0;     // elements failing |out-ref| <= atol + rtol*|ref| (set by check())
  int64_t worst_index = -1;   // index of the largest |out - ref| / (atol + rtol |ref|)
};

// Compares out against ref elementwise. ULP distance is measured in `ulp_dtype`'s grid
// (kF32, kBF16 or kF16).
ErrorStats compare(const float* out, const float* ref, size_t n, DType ulp_dtype = DType::kF32);
inline ErrorStats compare(const std::vector<float>& out, const std::vector<float>& ref,
                          DType ulp_dtype = DType::kF32) {
  return compare(out.data(), ref.data(), out.size() < ref.size() ? out.size() : ref.size(), ulp_dtype);
}

// One-line summary for logs and test failure messages.
std::string to_string(const ErrorStats& s);

}  // namespace kvlab
