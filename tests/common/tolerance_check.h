// tolerance_check.h: gtest conveniences over the tolerance table (host-only; no Eigen, so
// .cu tests can include it too).
//
//   EXPECT_TRUE(kvlab::test::within_tolerance(out, ref, Op::kDecodeAttention, format,
//                                             DType::kBF16, c.describe()));
// On failure the message names the table entry (op, format, dtype, atol/rtol/nmse and why),
// the ErrorStats, the worst element (index, out, ref) and the caller's context (put the
// case's seed there).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "reference/core/dtype.h"
#include "reference/layout/kv_layout.h"
#include "reference/metrics/tolerance.h"

namespace kvlab::test {

::testing::AssertionResult within_tolerance(const std::vector<float>& out,
                                            const std::vector<float>& ref, Op op, KvFormat format,
                                            DType out_dtype, const std::string& context,
                                            ErrorStats* stats = nullptr);

// The same against an explicit Tolerance (e.g. one looked up once outside a loop).
::testing::AssertionResult within_tolerance(const std::vector<float>& out,
                                            const std::vector<float>& ref, const Tolerance& tol,
                                            const std::string& what, const std::string& context,
                                            ErrorStats* stats = nullptr);

}  // namespace kvlab::test
