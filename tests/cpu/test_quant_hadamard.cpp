// test_quant_hadamard.cpp: the normalized Walsh-Hadamard transform against the dense
// Sylvester matrix (Eigen): orthonormality, symmetry, transform == matrix product,
// inverse, energy preservation, bad sizes.
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "reference/core/error.h"
#include "reference/quant/hadamard.h"
#include "tests/common/test_env.h"

namespace kvlab::ref {
namespace {

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

MatD dense(int n) {
  const std::vector<double> h = hadamard_matrix(n);
  return Eigen::Map<const MatD>(h.data(), n, n);
}

// Per-element float error of the butterfly: log2(n) additions, each within half a float
// ulp of a partial sum bounded by sqrt(n) * ||x||_2 before normalization, plus the final
// multiply: |err| <= (log2(n) + 1) * 2^-24 * ||x||_2 (after normalization, in units of
// the input's L2 norm).
double butterfly_bound(int n, double l2) {
  return (std::log2(static_cast<double>(n)) + 1) * std::ldexp(l2, -24) * 2;
}

TEST(Hadamard, MatrixIsOrthonormalAndSymmetric) {
  for (int n : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
    const MatD h = dense(n);
    const MatD eye = MatD::Identity(n, n);
    EXPECT_LE((h * h.transpose() - eye).cwiseAbs().maxCoeff(), 1e-14 * n) << n;
    EXPECT_EQ((h - h.transpose()).cwiseAbs().maxCoeff(), 0.0) << n;
    // Sylvester recursion: H_2n = [[H, H], [H, -H]] / sqrt(2)
    if (n >= 2) {
      const MatD hh = dense(n / 2);
      const double r = 1.0 / std::sqrt(2.0);
      EXPECT_LE((h.topLeftCorner(n / 2, n / 2) - r * hh).cwiseAbs().maxCoeff(), 1e-15) << n;
      EXPECT_LE((h.bottomRightCorner(n / 2, n / 2) + r * hh).cwiseAbs().maxCoeff(), 1e-15) << n;
    }
  }
}

TEST(Hadamard, TransformEqualsMatrixProductAndInverts) {
  const uint64_t seed = test::seed_for("hadamard.x");
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int n : {2, 4, 8, 32, 128, 1024}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = nd(rng);
    x[0] = 50.0f;  // an outlier channel
    Eigen::VectorXd xd(n);
    for (int i = 0; i < n; ++i) xd[i] = x[i];
    const Eigen::VectorXd want = dense(n) * xd;
    std::vector<float> y = x;
    hadamard_transform(y.data(), n);
    const double bound = butterfly_bound(n, xd.norm());
    double worst = 0, yl2 = 0;
    for (int i = 0; i < n; ++i) {
      worst = std::max(worst, std::fabs(y[i] - want[i]));
      yl2 += static_cast<double>(y[i]) * y[i];
    }
    EXPECT_LE(worst, bound) << "n " << n;
    EXPECT_NEAR(std::sqrt(yl2), xd.norm(), bound * std::sqrt(static_cast<double>(n)))
        << "energy, n " << n;
    std::vector<float> back = y;
    hadamard_inverse(back.data(), n);
    double back_err = 0;
    for (int i = 0; i < n; ++i)
      back_err = std::max(back_err, std::fabs(static_cast<double>(back[i]) - x[i]));
    EXPECT_LE(back_err, 2 * bound) << "inverse, n " << n;
  }
}

TEST(Hadamard, ExactOnIntegerBasisVectors) {
  // H e_j is column j: entries ±1/sqrt(n), exactly the float 1/sqrt(n) for every entry
  const int n = 128;
  for (int j : {0, 1, 77, 127}) {
    std::vector<float> e(n, 0.0f);
    e[j] = 1.0f;
    hadamard_transform(e.data(), n);
    const MatD h = dense(n);
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(std::fabs(e[i]), hadamard_norm(n)) << i;
      EXPECT_EQ(e[i] > 0, h(i, j) > 0) << i;
    }
  }
  EXPECT_EQ(hadamard_norm(4), 0.5f);
  EXPECT_EQ(hadamard_norm(128), static_cast<float>(1.0 / std::sqrt(128.0)));
}

TEST(Hadamard, RunsTransformEachRun) {
  std::vector<float> x(3 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
  std::vector<float> y = x;
  hadamard_transform_runs(y.data(), static_cast<int64_t>(y.size()), 64);
  for (int r = 0; r < 3; ++r) {
    std::vector<float> one(x.begin() + r * 64, x.begin() + (r + 1) * 64);
    hadamard_transform(one.data(), 64);
    for (int i = 0; i < 64; ++i) EXPECT_EQ(y[r * 64 + i], one[i]);
  }
  hadamard_inverse_runs(y.data(), static_cast<int64_t>(y.size()), 64);
  for (int r = 0; r < 3; ++r) {
    double l2 = 0;
    for (int i = 0; i < 64; ++i) l2 += static_cast<double>(x[r * 64 + i]) * x[r * 64 + i];
    const double bound = 2 * butterfly_bound(64, std::sqrt(l2));
    for (int i = 0; i < 64; ++i)
      EXPECT_LE(std::fabs(static_cast<double>(y[r * 64 + i]) - x[r * 64 + i]), bound);
  }
}

TEST(Hadamard, BadSizesThrow) {
  std::vector<float> x(128);
  EXPECT_THROW(hadamard_transform(x.data(), 0), InvalidArgument);
  EXPECT_THROW(hadamard_transform(x.data(), 96), InvalidArgument);
  EXPECT_THROW(hadamard_transform(x.data(), -4), InvalidArgument);
  EXPECT_THROW(hadamard_transform_runs(x.data(), 100, 32), InvalidArgument);
  EXPECT_THROW(hadamard_matrix(3), InvalidArgument);
  EXPECT_THROW(hadamard_norm(65536), InvalidArgument);
  EXPECT_TRUE(is_hadamard_size(1));
  EXPECT_TRUE(is_hadamard_size(32768));
  EXPECT_FALSE(is_hadamard_size(65536));
}

}  // namespace
}  // namespace kvlab::ref
