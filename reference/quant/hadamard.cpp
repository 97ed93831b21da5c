// hadamard.cpp: butterfly Walsh-Hadamard transform (see hadamard.h for the exact order).
#include "reference/quant/hadamard.h"

#include <cmath>

#include "reference/core/error.h"

namespace kvlab::ref {

bool is_hadamard_size(int64_t n) {
  return n >= 1 && n <= 32768 && (n & (n - 1)) == 0;
}

float hadamard_norm(int n) {
  KVLAB_REQUIRE(is_hadamard_size(n),
                "Hadamard size must be a power of two in [1, 32768], got " << n);
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
}

void hadamard_transform(float* x, int n) {
  const float norm = hadamard_norm(n);
  for (int h = 1; h < n; h <<= 1) {
    for (int i = 0; i < n; ++i) {
      if (i & h) continue;
      const float a = x[i], b = x[i + h];
      x[i] = a + b;
      x[i + h] = a - b;
    }
  }
  for (int i = 0; i < n; ++i) x[i] *= norm;
}

void hadamard_inverse(float* x, int n) {
  hadamard_transform(x, n);
}

void hadamard_transform_runs(float* x, int64_t len, int n) {
  KVLAB_REQUIRE(is_hadamard_size(n),
                "Hadamard size must be a power of two in [1, 32768], got " << n);
  KVLAB_REQUIRE(len >= 0 && len % n == 0,
                "Hadamard runs: length " << len << " is not a multiple of the size " << n);
  for (int64_t k = 0; k < len; k += n) hadamard_transform(x + k, n);
}

void hadamard_inverse_runs(float* x, int64_t len, int n) {
  hadamard_transform_runs(x, len, n);
}

std::vector<double> hadamard_matrix(int n) {
  const double norm = 1.0 / std::sqrt(static_cast<double>(n));
  KVLAB_REQUIRE(is_hadamard_size(n),
                "Hadamard size must be a power of two in [1, 32768], got " << n);
  std::vector<double> m(static_cast<size_t>(n) * n);
  // Sylvester: H[i][j] = (-1)^popcount(i & j).
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      m[static_cast<size_t>(i) * n + j] = (__builtin_popcount(i & j) & 1) ? -norm : norm;
  return m;
}

}  // namespace kvlab::ref
