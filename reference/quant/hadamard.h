// hadamard.h: the normalized Walsh-Hadamard transform (reference).
//
// H_n (n a power of two) is Sylvester's matrix: H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]],
// normalized by 1/sqrt(n) so that it is orthonormal and symmetric: its inverse is itself.
// Quantizers rotate each run of n values of a token before block-scaling (DeepSeek-V4's
// indexer keys: n = 128), which spreads outlier channels over the whole run.
//
// The float computation is fixed so that a GPU version can reproduce it bit for bit:
// stages h = 1, 2, 4, ..., n/2; in stage h every pair (i, i + h) with (i & h) == 0 becomes
// (a + b, a - b) in float; at the end every value is multiplied by the float
// kHadamardNorm(n) = RN(1 / sqrt(n)) (computed in double, rounded once). The result is
// y = RN(H_n x) up to the float rounding of the butterflies (|error| ~ log2(n) ulp).
#pragma once

#include <cstdint>
#include <vector>

namespace kvlab::ref {

constexpr int kDefaultHadamardSize = 128;

// True for n = 1, 2, 4, ... 2^15.
bool is_hadamard_size(int64_t n);
// RN(1/sqrt(n)) as float.
float hadamard_norm(int n);

// In-place normalized transform of x[0..n). Throws InvalidArgument unless is_hadamard_size(n).
void hadamard_transform(float* x, int n);
// Its inverse (the same transform: H is symmetric and orthonormal); kept separate so that
// call sites say which direction they mean.
void hadamard_inverse(float* x, int n);

// Transforms every run x[k*n .. (k+1)*n) of a buffer of `len` values (len a multiple of n).
void hadamard_transform_runs(float* x, int64_t len, int n = kDefaultHadamardSize);
void hadamard_inverse_runs(float* x, int64_t len, int n = kDefaultHadamardSize);

// The dense normalized matrix H_n / sqrt(n), row-major [n, n], in double (tests, analysis).
std::vector<double> hadamard_matrix(int n);

}  // namespace kvlab::ref
