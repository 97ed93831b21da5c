// roundtrip.h: round-trip error statistics of a quantization scheme over data.
//
// x [rows, cols] (a row = one token) goes through scheme.quantize -> dequantize; the
// result y is compared with x through kvlab::compare() (reference/metrics), per row and
// overall, with its conventions (double sums; norms over the pairs where both values are
// finite, non-finite pairs counted apart):
//   per-token relative L2   ||x_r - y_r||_2 / ||x_r||_2 (0 when both rows are zero, +Inf
//                           when only x_r is zero), summarized as mean, p50, p99 and max;
//                           percentiles are nearest-rank: the ceil(p * rows)-th smallest
//   nmse                    ||x - y||^2 / ||x||^2 over the whole tensor
//   max_abs                 max |x - y|
//   nonfinite               positions where exactly one of x, y is non-finite (or both are
//                           but differ): e.g. a finite token turned NaN by its scale
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/quant/schemes.h"

namespace kvlab::ref {

struct RoundTripStats {
  int64_t rows = 0;
  int64_t cols = 0;
  double rel_l2_mean = 0, rel_l2_p50 = 0, rel_l2_p99 = 0, rel_l2_max = 0;
  double nmse = 0;
  double max_abs = 0;
  int64_t nonfinite = 0;
  double bytes_per_token = 0;  // the scheme's storage (record bytes) per row
};

// Statistics of y against the reference x, both [rows, cols].
RoundTripStats roundtrip_stats(const float* x, const float* y, int64_t rows, int64_t cols);
// Quantizes x with the scheme and measures the round trip.
RoundTripStats roundtrip_stats(const QuantScheme& scheme, const float* x, int64_t rows,
                               int64_t cols);

// Per-row relative L2 errors (the distribution the summary is taken from).
std::vector<double> per_row_rel_l2(const float* x, const float* y, int64_t rows, int64_t cols);

// Nearest-rank percentile (p in [0, 1]) of values; throws on an empty vector.
double nearest_rank(std::vector<double> values, double p);

std::string to_string(const RoundTripStats& s);

}  // namespace kvlab::ref
