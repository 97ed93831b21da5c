// roundtrip.cpp: round-trip error statistics (see roundtrip.h).
#include "reference/quant/roundtrip.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "reference/core/error.h"
#include "reference/metrics/metrics.h"

namespace kvlab::ref {

std::vector<double> per_row_rel_l2(const float* x, const float* y, int64_t rows, int64_t cols) {
  KVLAB_REQUIRE(rows >= 0 && cols >= 0, "per_row_rel_l2: bad shape " << rows << " x " << cols);
  std::vector<double> out(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    out[r] = compare(y + r * cols, x + r * cols, static_cast<size_t>(cols)).rel_l2;
  return out;
}

double nearest_rank(std::vector<double> values, double p) {
  KVLAB_REQUIRE(!values.empty(), "nearest_rank: no values");
  KVLAB_REQUIRE(p >= 0 && p <= 1, "nearest_rank: p must be in [0, 1], got " << p);
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  size_t k = static_cast<size_t>(std::ceil(p * static_cast<double>(n)));
  if (k < 1) k = 1;
  return values[k - 1];
}

RoundTripStats roundtrip_stats(const float* x, const float* y, int64_t rows, int64_t cols) {
  RoundTripStats s;
  s.rows = rows;
  s.cols = cols;
  if (rows == 0 || cols == 0) return s;
  const std::vector<double> rel = per_row_rel_l2(x, y, rows, cols);
  double sum = 0;
  for (double v : rel) sum += v;
  s.rel_l2_mean = sum / static_cast<double>(rows);
  s.rel_l2_p50 = nearest_rank(rel, 0.50);
  s.rel_l2_p99 = nearest_rank(rel, 0.99);
  s.rel_l2_max = *std::max_element(rel.begin(), rel.end());
  const ErrorStats all = compare(y, x, static_cast<size_t>(rows * cols));
  s.nmse = all.nmse;
  s.max_abs = all.max_abs;
  s.nonfinite = all.mismatched_nonfinite;
  return s;
}

RoundTripStats roundtrip_stats(const QuantScheme& scheme, const float* x, int64_t rows,
                               int64_t cols) {
  const std::vector<float> y = scheme.roundtrip(x, rows, cols);
  RoundTripStats s = roundtrip_stats(x, y.data(), rows, cols);
  s.bytes_per_token = scheme.bytes_per_token(cols);
  return s;
}

std::string to_string(const RoundTripStats& s) {
  std::ostringstream os;
  os << s.rows << "x" << s.cols << " rel_l2 mean " << s.rel_l2_mean << " p50 " << s.rel_l2_p50
     << " p99 " << s.rel_l2_p99 << " max " << s.rel_l2_max << " nmse " << s.nmse << " max_abs "
     << s.max_abs << " nonfinite " << s.nonfinite << " bytes/token " << s.bytes_per_token;
  return os.str();
}

}  // namespace kvlab::ref
