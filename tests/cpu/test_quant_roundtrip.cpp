// test_quant_roundtrip.cpp: round-trip statistics (roundtrip.h) and every preset's round
// trip judged by the tolerance table (Op::kQuantRoundTrip), per token and per tensor.
// Also prints the closing-note table: each preset on Gaussian data, 4096 tokens x 128.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "reference/core/error.h"
#include "reference/metrics/tolerance.h"
#include "reference/quant/roundtrip.h"
#include "reference/synth/synth.h"
#include "tests/common/test_env.h"

namespace kvlab::ref {
namespace {

TEST(QuantRoundTrip, PerRowRelL2AndPercentiles) {
  const float x[6] = {3, 4, 0, 0, 0, 0};
  const float y[6] = {3, 4.5f, 0, 0, 0, 1};
  const std::vector<double> r = per_row_rel_l2(x, y, 3, 2);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_DOUBLE_EQ(r[0], 0.1);    // 0.5 / 5
  EXPECT_EQ(r[1], 0.0);           // both rows zero
  EXPECT_TRUE(std::isinf(r[2]));  // zero reference, non-zero error
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(101 - i);  // unsorted
  EXPECT_EQ(nearest_rank(v, 0.99), 99);
  EXPECT_EQ(nearest_rank(v, 0.50), 50);
  EXPECT_EQ(nearest_rank(v, 0.0), 1);
  EXPECT_EQ(nearest_rank(v, 1.0), 100);
  EXPECT_EQ(nearest_rank({7.0}, 0.99), 7.0);
  EXPECT_THROW(nearest_rank({}, 0.5), InvalidArgument);
  EXPECT_THROW(nearest_rank(v, 1.5), InvalidArgument);
  const RoundTripStats s = roundtrip_stats(x, y, 2, 2);  // rows 0-1 only
  EXPECT_DOUBLE_EQ(s.rel_l2_max, 0.1);
  EXPECT_DOUBLE_EQ(s.rel_l2_mean, 0.05);
  EXPECT_DOUBLE_EQ(s.nmse, 0.25 / 25);
  EXPECT_DOUBLE_EQ(s.max_abs, 0.5);
  EXPECT_EQ(s.nonfinite, 0);
  const float z[2] = {1, std::numeric_limits<float>::quiet_NaN()};
  const float one[2] = {1, 1};
  EXPECT_EQ(roundtrip_stats(one, z, 1, 2).nonfinite, 1);
}

// The KvFormat whose tolerance entry describes a preset (presets without one are judged
// by their elementwise bounds in test_quant_schemes.cpp).
std::map<std::string, KvFormat> kTableFormat{{"bf16", KvFormat::kBF16},
                                             {"fp16", KvFormat::kFP16},
                                             {"fp8_e4m3_per_tensor", KvFormat::kFP8E4M3},
                                             {"fp8_e5m2_per_tensor", KvFormat::kFP8E5M2},
                                             {"fp8_e4m3_per_token", KvFormat::kFP8E4M3PerToken},
                                             {"nvfp4", KvFormat::kNVFP4},
                                             {"mxfp4", KvFormat::kMXFP4},
                                             {"mxfp4_hadamard", KvFormat::kMXFP4}};

// Every token (row) and the whole tensor pass the table's round-trip entry.
void check_against_table(const std::string& name, const std::string& data, int64_t tokens,
                         int32_t heads) {
  const QuantScheme s = make_scheme(name);
  const int32_t cols = s.spec().required_cols ? s.spec().required_cols : 128;
  const uint64_t seed = test::seed_for(("roundtrip." + name + "." + data).c_str());
  const std::vector<float> x = synth_kv(synth_preset(data, tokens, heads, cols, seed));
  const std::vector<float> y = s.roundtrip(x.data(), tokens * heads, cols);
  const Tolerance tol = tolerance(Op::kQuantRoundTrip, kTableFormat.at(name), DType::kF32);
  ErrorStats all;
  EXPECT_TRUE(check(y.data(), x.data(), y.size(), tol, &all))
      << name << " on " << data << " seed " << seed << ": " << explain_failure(all, tol);
  int64_t bad_rows = 0;
  for (int64_t r = 0; r < tokens * heads; ++r) {
    ErrorStats row;
    if (!check(y.data() + r * cols, x.data() + r * cols, cols, tol, &row) && ++bad_rows <= 3)
      ADD_FAILURE() << name << " on " << data << " seed " << seed << " token-row " << r << ": "
                    << explain_failure(row, tol);
  }
  EXPECT_EQ(bad_rows, 0) << name << " on " << data;
}

TEST(QuantRoundTrip, PresetsWithinToleranceTableGaussian) {
  for (const auto& [name, fmt] : kTableFormat) check_against_table(name, "gaussian", 1024, 2);
}

// Per-token and per-group presets hold on K-cache-like data too (outlier channels,
// heavy tails, channel bias, temporal correlation). Per-tensor FP8 is excluded: its
// per-token bound assumes tokens of comparable norm, which this data breaks on purpose.
TEST(QuantRoundTrip, PresetsWithinToleranceTableKCache) {
  for (const auto& [name, fmt] : kTableFormat)
    if (name.find("per_tensor") == std::string::npos) check_against_table(name, "kcache", 512, 4);
}

// Prints the closing-note table (same numbers as `kvlab_quant_roundtrip`) and checks the
// summary's internal consistency.
TEST(QuantRoundTrip, PresetTableOnGaussian) {
  std::printf("%-22s %10s %10s %10s %8s\n", "scheme", "mean", "p99", "max", "B/token");
  for (const auto& name : scheme_names()) {
    const QuantScheme s = make_scheme(name);
    const int32_t cols = s.spec().required_cols ? s.spec().required_cols : 128;
    const std::vector<float> x = synth_kv(synth_preset("gaussian", 4096, 1, cols, 0));
    const RoundTripStats r = roundtrip_stats(s, x.data(), 4096, cols);
    std::printf("%-22s %10.3e %10.3e %10.3e %8.1f\n", name.c_str(), r.rel_l2_mean, r.rel_l2_p99,
                r.rel_l2_max, r.bytes_per_token);
    EXPECT_LE(r.rel_l2_p50, r.rel_l2_p99) << name;
    EXPECT_LE(r.rel_l2_p99, r.rel_l2_max) << name;
    EXPECT_LE(r.rel_l2_mean, r.rel_l2_max) << name;
    EXPECT_GT(r.rel_l2_mean, 0.0) << name;  // Gaussian floats are never all representable
    EXPECT_EQ(r.nonfinite, 0) << name;
    EXPECT_EQ(r.bytes_per_token, static_cast<double>(s.record_bytes(cols))) << name;
  }
}

}  // namespace
}  // namespace kvlab::ref
