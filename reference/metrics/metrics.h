// metrics.h: error metrics of an output against its reference, in one place.
//
// Every comparison in kvlab — tests, `kvlab validate`, sweep records — computes the same
// ErrorStats through compare(), and judges it through the tolerance table (tolerance.h).
//
// Conventions (metrics.cpp implements them; tests/cpu/test_metrics.cpp pins them down):
//   - Sums are accumulated in double. Error metrics (max_abs, max_rel, rel_l2, nmse, cosine,
//     max_ulp) are taken over the pairs where BOTH values are finite; non-finite values are
//     counted separately and never poison the norms.
//   - A pair is a non-finite mismatch when exactly one side is non-finite, or both are and
//     differ in kind (NaN vs Inf, +Inf vs -Inf). NaN vs NaN and -Inf vs -Inf (e.g. the LSE of
//     an empty sequence on both sides) match.
//   - rel_l2 / nmse: 0 when ||out - ref|| = 0, +Inf when ||ref|| = 0 but ||out - ref|| > 0.
//     cosine: 1 when both vectors are zero, 0 when exactly one is.
//   - ULP distance: both values are rounded (RNE) into the `ulp_dtype` grid, mapped to a
//     monotone integer line on which +0 and -0 coincide, and subtracted. So 1 ULP between
//     adjacent representable values, 2 between the smallest positive and negative subnormals,
//     and values beyond the grid's range count as its Inf (adjacent to its max finite).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "reference/core/dtype.h"

namespace kvlab {

struct ErrorStats {
  int64_t count = 0;                 // elements compared
  double max_abs = 0;                // max |out - ref| over finite pairs
  double max_rel = 0;                // max |out - ref| / |ref| over finite pairs with ref != 0
  double rel_l2 = 0;                 // ||out - ref||_2 / ||ref||_2 (0 when both are zero)
  double nmse = 0;                   // ||out - ref||^2 / ||ref||^2
  double cosine = 1;                 // <out, ref> / (||out|| ||ref||); 1 when both are zero
  int64_t max_ulp = 0;               // max ULP distance in the `ulp_dtype` grid
  int64_t nan_out = 0, inf_out = 0;  // non-finite values in out
  int64_t nan_ref = 0, inf_ref = 0;  // non-finite values in ref
  int64_t mismatched_nonfinite = 0;  // positions where exactly one side is non-finite or
                                     // both are but differ (NaN vs Inf, +Inf vs -Inf)
  int64_t violations = 0;    // elements failing |out-ref| <= atol + rtol*|ref| (set by check())
  int64_t worst_index = -1;  // compare(): index of the largest |out - ref| (or of the first
                             // non-finite mismatch); check(): of the largest
                             // |out - ref| / (atol + rtol |ref|), mismatches first. -1: none
};

// Compares out against ref elementwise. ULP distance is measured in `ulp_dtype`'s grid
// (kF32, kBF16 or kF16).
ErrorStats compare(const float* out, const float* ref, size_t n, DType ulp_dtype = DType::kF32);
// Throws InvalidArgument when the sizes differ (nothing is silently truncated).
ErrorStats compare(const std::vector<float>& out, const std::vector<float>& ref,
                   DType ulp_dtype = DType::kF32);

// ULP distance of two finite floats in `dtype`'s grid (see the conventions above).
int64_t ulp_distance(float a, float b, DType dtype);

// One-line summary for logs and test failure messages.
std::string to_string(const ErrorStats& s);

}  // namespace kvlab
