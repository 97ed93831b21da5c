// test_metrics.cpp: compare() and check() on hand-made vectors with hand-computed answers.
// The Tolerance objects built here are synthetic inputs to check()'s mechanics, not bounds
// of any operation (those live only in the tolerance table).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "reference/core/error.h"
#include "reference/metrics/metrics.h"
#include "reference/metrics/tolerance.h"

namespace kvlab {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInfF = std::numeric_limits<float>::infinity();
const float kMinSub = std::numeric_limits<float>::denorm_min();

TEST(Metrics, IdenticalVectorsHaveNoError) {
  const std::vector<float> v{1.5f, -2.0f, 0.0f, 3e-20f, -7.25f};
  const ErrorStats s = compare(v, v);
  EXPECT_EQ(s.count, 5);
  EXPECT_EQ(s.max_abs, 0);
  EXPECT_EQ(s.max_rel, 0);
  EXPECT_EQ(s.rel_l2, 0);
  EXPECT_EQ(s.nmse, 0);
  EXPECT_DOUBLE_EQ(s.cosine, 1.0);
  EXPECT_EQ(s.max_ulp, 0);
  EXPECT_EQ(s.nan_out + s.inf_out + s.nan_ref + s.inf_ref + s.mismatched_nonfinite, 0);
}

TEST(Metrics, HandComputedVector) {
  const std::vector<float> out{1.0f, 2.0f, 3.0f}, ref{1.0f, 2.5f, 2.0f};
  const ErrorStats s = compare(out, ref);
  EXPECT_DOUBLE_EQ(s.max_abs, 1.0);
  EXPECT_DOUBLE_EQ(s.max_rel, 0.5);  // |3-2|/2 beats |2-2.5|/2.5 = 0.2
  EXPECT_DOUBLE_EQ(s.nmse, 1.25 / 11.25);
  EXPECT_DOUBLE_EQ(s.rel_l2, std::sqrt(1.25 / 11.25));
  EXPECT_DOUBLE_EQ(s.cosine, 12.0 / (std::sqrt(14.0) * std::sqrt(11.25)));
  EXPECT_EQ(s.worst_index, 2);
  EXPECT_EQ(s.max_ulp, 1 << 22);  // 3 vs 2 in f32: 2^22 steps of 2^-22 in [2,4)
}

TEST(Metrics, MaxRelSkipsZeroReference) {
  const std::vector<float> out{1e-3f, 1.0f}, ref{0.0f, 1.0f};
  const ErrorStats s = compare(out, ref);
  EXPECT_EQ(s.max_rel, 0);
  EXPECT_FLOAT_EQ(static_cast<float>(s.max_abs), 1e-3f);
}

TEST(Metrics, UlpDistanceF32AcrossZeroAndSubnormals) {
  EXPECT_EQ(ulp_distance(1.0f, std::nextafter(1.0f, 2.0f), DType::kF32), 1);
  EXPECT_EQ(ulp_distance(1.0f, std::nextafter(1.0f, 0.0f), DType::kF32), 1);
  EXPECT_EQ(ulp_distance(0.0f, -0.0f, DType::kF32), 0);
  EXPECT_EQ(ulp_distance(0.0f, kMinSub, DType::kF32), 1);
  EXPECT_EQ(ulp_distance(-kMinSub, kMinSub, DType::kF32), 2);
  EXPECT_EQ(ulp_distance(FLT_MIN, std::nextafter(FLT_MIN, 0.0f), DType::kF32),
            1);  // normal/subnormal border
  EXPECT_EQ(ulp_distance(-1.0f, 1.0f, DType::kF32), 2 * 0x3F800000ll);
}

TEST(Metrics, UlpDistanceBf16Grid) {
  EXPECT_EQ(ulp_distance(1.0f, 1.0078125f, DType::kBF16), 1);   // 1 + 2^-7
  EXPECT_EQ(ulp_distance(1.0f, 1.00390625f, DType::kBF16), 0);  // the tie rounds to even = 1
  EXPECT_EQ(ulp_distance(1.0f, 1.005f, DType::kBF16), 1);       // rounds up to 1 + 2^-7
  const float min_sub = std::ldexp(1.0f, -133);
  EXPECT_EQ(ulp_distance(min_sub, -min_sub, DType::kBF16), 2);
  EXPECT_EQ(ulp_distance(min_sub, 0.0f, DType::kBF16), 1);
  // Beyond max finite, a value is the grid's Inf: one step above max finite.
  EXPECT_EQ(ulp_distance(FLT_MAX, 3.3895313892515355e38f /* bf16 max */, DType::kBF16), 1);
}

TEST(Metrics, UlpDistanceF16Grid) {
  EXPECT_EQ(ulp_distance(1.0f, 1.0f + 0.0009765625f, DType::kF16), 1);  // 1 + 2^-10
  EXPECT_EQ(ulp_distance(std::ldexp(1.0f, -24), 0.0f, DType::kF16), 1);
  EXPECT_EQ(ulp_distance(std::ldexp(1.0f, -24), -std::ldexp(1.0f, -24), DType::kF16), 2);
  EXPECT_EQ(ulp_distance(65504.0f, 65520.0f, DType::kF16), 1);  // 65520 rounds to Inf
  EXPECT_EQ(ulp_distance(-2.0f, 2.0f, DType::kF16), 2 * 0x4000);
}

TEST(Metrics, UlpDistanceRejectsNonFiniteAndBadDtype) {
  EXPECT_THROW(ulp_distance(kNaN, 1.0f, DType::kF32), InvalidArgument);
  EXPECT_THROW(ulp_distance(1.0f, kInfF, DType::kBF16), InvalidArgument);
  EXPECT_THROW(compare(std::vector<float>{1}, std::vector<float>{1}, static_cast<DType>(7)),
               InvalidArgument);
}

TEST(Metrics, NonFiniteAccounting) {
  const std::vector<float> out{kNaN, kInfF, 1.0f, -kInfF, kNaN, 2.0f};
  const std::vector<float> ref{kNaN, kInfF, kNaN, kInfF, 1.0f, 2.5f};
  const ErrorStats s = compare(out, ref);
  EXPECT_EQ(s.nan_out, 2);
  EXPECT_EQ(s.inf_out, 2);
  EXPECT_EQ(s.nan_ref, 2);
  EXPECT_EQ(s.inf_ref, 2);
  // NaN/NaN and +Inf/+Inf match; finite/NaN, -Inf/+Inf and NaN/finite do not.
  EXPECT_EQ(s.mismatched_nonfinite, 3);
  EXPECT_EQ(s.worst_index, 2);  // the first mismatch outranks the finite difference
  // Norms only over the one finite pair.
  EXPECT_DOUBLE_EQ(s.max_abs, 0.5);
  EXPECT_DOUBLE_EQ(s.nmse, 0.25 / 6.25);
}

TEST(Metrics, ZeroReference) {
  const ErrorStats nonzero =
      compare(std::vector<float>{0.0f, 1e-6f}, std::vector<float>{0.0f, 0.0f});
  EXPECT_TRUE(std::isinf(nonzero.rel_l2));
  EXPECT_TRUE(std::isinf(nonzero.nmse));
  EXPECT_EQ(nonzero.cosine, 0);
  const ErrorStats both = compare(std::vector<float>{0.0f, -0.0f}, std::vector<float>{0.0f, 0.0f});
  EXPECT_EQ(both.rel_l2, 0);
  EXPECT_EQ(both.cosine, 1);
}

TEST(Metrics, SizeMismatchAndNullThrow) {
  EXPECT_THROW(compare(std::vector<float>{1, 2}, std::vector<float>{1}), InvalidArgument);
  EXPECT_THROW(compare(nullptr, nullptr, 3), InvalidArgument);
  EXPECT_NO_THROW(compare(nullptr, nullptr, 0));
}

TEST(Metrics, ToStringNamesEveryField) {
  const std::string s = to_string(compare(std::vector<float>{1, kNaN}, std::vector<float>{2, 1}));
  for (const char* field :
       {"n=2", "max_abs=", "max_rel=", "rel_l2=", "nmse=", "cos=", "max_ulp=", "nan(out/ref)=1/0",
        "nonfinite_mismatch=1", "violations=", "worst_index="})
    EXPECT_NE(s.find(field), std::string::npos) << field << " missing in " << s;
}

TEST(Check, ElementwiseBound) {
  Tolerance tol;
  tol.atol = 0.125;
  tol.rtol = 0.0625;
  tol.nmse_max = 1;
  ErrorStats s;
  // bound at ref 2 is 0.125 + 0.125 = 0.25
  EXPECT_TRUE(check(std::vector<float>{2.25f, 0.0f}, std::vector<float>{2.0f, 0.0f}, tol, &s));
  EXPECT_EQ(s.violations, 0);
  EXPECT_FALSE(
      check(std::vector<float>{2.3f, 0.0f, 5.0f}, std::vector<float>{2.0f, 0.0f, 5.0f}, tol, &s));
  EXPECT_EQ(s.violations, 1);
  EXPECT_EQ(s.worst_index, 0);
  EXPECT_NE(explain_failure(s, tol).find("1 of 3 elements exceed"), std::string::npos)
      << explain_failure(s, tol);
}

TEST(Check, WorstIndexIsRelativeToTheBound) {
  Tolerance tol;
  tol.atol = 0;
  tol.rtol = 0.5;
  tol.nmse_max = 10;
  ErrorStats s;
  // index 0: |d|=1 vs bound 50 (ratio 0.02); index 1: |d|=0.6 vs bound 0.5 (ratio 1.2)
  EXPECT_FALSE(check(std::vector<float>{101, 1.6f}, std::vector<float>{100, 1.0f}, tol, &s));
  EXPECT_EQ(s.worst_index, 1);
}

TEST(Check, NmseBound) {
  Tolerance tol;
  tol.atol = 1;
  tol.rtol = 0;
  tol.nmse_max = 0.01;
  ErrorStats s;
  EXPECT_FALSE(
      check(std::vector<float>{1.5f, 1.5f}, std::vector<float>{1, 1}, tol, &s));  // nmse 0.25
  EXPECT_EQ(s.violations, 0);
  EXPECT_NE(explain_failure(s, tol).find("nmse"), std::string::npos);
  // ||ref|| = 0: the nmse check is skipped, the elementwise bound decides.
  EXPECT_TRUE(check(std::vector<float>{0.5f}, std::vector<float>{0.0f}, tol, &s));
}

TEST(Check, NonFinite) {
  Tolerance tol;
  tol.atol = 1;
  tol.rtol = 1;
  tol.nmse_max = 1;
  ErrorStats s;
  const float ninf = -kInfF;
  // Matching non-finite values (e.g. lse = -inf of an empty sequence on both sides) pass.
  EXPECT_TRUE(check(std::vector<float>{ninf, kNaN, 1}, std::vector<float>{ninf, kNaN, 1}, tol, &s));
  EXPECT_FALSE(check(std::vector<float>{1, kNaN}, std::vector<float>{1, 1}, tol, &s));
  EXPECT_EQ(s.violations, 1);
  EXPECT_EQ(s.worst_index, 1);
  EXPECT_NE(explain_failure(s, tol).find("non-finite"), std::string::npos);
  tol.allow_nonfinite = true;
  EXPECT_TRUE(check(std::vector<float>{1, kNaN}, std::vector<float>{1, 1}, tol, &s));
}

TEST(Check, ZeroToleranceMeansExact) {
  const Tolerance exact = tolerance(Op::kAppend, KvFormat::kBF16, DType::kBF16);
  ErrorStats s;
  EXPECT_TRUE(check(std::vector<float>{1, -0.0f}, std::vector<float>{1, 0.0f}, exact, &s));
  EXPECT_FALSE(
      check(std::vector<float>{1}, std::vector<float>{std::nextafter(1.0f, 2.0f)}, exact, &s));
  EXPECT_THROW(check(std::vector<float>{1}, std::vector<float>{1, 2}, exact, &s), InvalidArgument);
}

}  // namespace
}  // namespace kvlab
