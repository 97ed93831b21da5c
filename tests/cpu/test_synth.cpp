// test_synth.cpp: the synthetic KV generators produce the statistics they promise.
//
// Statistical checks use bounds derived from the sample size: a sample mean of n unit-
// variance values is within 6 / sqrt(n) of the truth except with probability ~1e-9, a
// sample variance within 6 * sqrt(kurtosis_excess + 2) / sqrt(n) (relative), and a lag-1
// autocorrelation within 6 / sqrt(n) of rho (for |rho| < 1, its variance is <= 1/n).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <vector>

#include "reference/core/error.h"
#include "reference/synth/synth.h"
#include "tests/common/test_env.h"

namespace kvlab::ref {
namespace {

uint64_t seed_of(const char* name) {
  const uint64_t s = test::seed_for(name);
  std::printf("[seed] %s = %llu\n", name, static_cast<unsigned long long>(s));
  return s;
}

struct Moments {
  double mean = 0, var = 0, kurt = 0;
};
Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  double m2 = 0, m4 = 0;
  for (double x : v) {
    const double d = x - m.mean;
    m2 += d * d;
    m4 += d * d * d * d;
  }
  m2 /= static_cast<double>(v.size());
  m4 /= static_cast<double>(v.size());
  m.var = m2;
  m.kurt = m4 / (m2 * m2) - 3.0;
  return m;
}

// Values of channel (h, d) along tokens.
std::vector<double> channel(const std::vector<float>& x, const SynthSpec& s, int h, int d) {
  std::vector<double> out(static_cast<size_t>(s.tokens));
  for (int64_t t = 0; t < s.tokens; ++t) out[t] = x[(t * s.heads + h) * s.head_dim + d];
  return out;
}

TEST(Synth, DeterministicPerSeedAndShape) {
  const SynthSpec s = synth_preset("kcache", 64, 2, 32, seed_of("synth.det"));
  const std::vector<float> a = synth_kv(s), b = synth_kv(s);
  ASSERT_EQ(a.size(), static_cast<size_t>(64 * 2 * 32));
  EXPECT_EQ(a, b);
  SynthSpec s2 = s;
  s2.seed ^= 1;
  EXPECT_NE(synth_kv(s2), a);
  for (float v : a) ASSERT_TRUE(std::isfinite(v));
  // the first token does not depend on how many tokens follow
  SynthSpec s3 = s;
  s3.tokens = 1;
  const std::vector<float> c = synth_kv(s3);
  EXPECT_TRUE(std::equal(c.begin(), c.end(), a.begin()));
  s3.tokens = 0;
  EXPECT_TRUE(synth_kv(s3).empty());
}

TEST(Synth, GaussianMomentsAndIndependence) {
  const SynthSpec s = synth_preset("gaussian", 20000, 2, 16, seed_of("synth.gauss"));
  const std::vector<float> x = synth_kv(s);
  std::vector<double> all(x.begin(), x.end());
  const Moments m = moments(all);
  const double n = static_cast<double>(all.size());
  EXPECT_LE(std::fabs(m.mean), 6 / std::sqrt(n));
  EXPECT_LE(std::fabs(m.var - 1.0), 6 * std::sqrt(2.0) / std::sqrt(n));
  EXPECT_LE(std::fabs(m.kurt), 6 * std::sqrt(24.0 / n));  // Gaussian: excess kurtosis 0
  // tokens independent: lag-1 autocorrelation ~ 0
  const std::vector<double> c = channel(x, s, 1, 5);
  double num = 0, den = 0;
  for (size_t t = 1; t < c.size(); ++t) num += c[t] * c[t - 1];
  for (double v : c) den += v * v;
  EXPECT_LE(std::fabs(num / den), 6 / std::sqrt(static_cast<double>(c.size())));
}

TEST(Synth, Ar1Autocorrelation) {
  for (double rho : {0.5, 0.9, 0.99}) {
    SynthSpec s = synth_preset("ar1", 40000, 1, 4, seed_of("synth.ar1"));
    s.rho = rho;
    const std::vector<float> x = synth_kv(s);
    for (int d = 0; d < 4; ++d) {
      const std::vector<double> c = channel(x, s, 0, d);
      double num = 0, den = 0;
      for (size_t t = 1; t < c.size(); ++t) num += c[t] * c[t - 1];
      for (double v : c) den += v * v;
      // effective sample size of an AR(1) series: n (1 - rho) / (1 + rho); its lag-1
      // estimate has standard deviation sqrt((1 - rho^2) / n)
      const double sd = std::sqrt((1 - rho * rho) / static_cast<double>(c.size()));
      EXPECT_NEAR(num / den, rho, 6 * sd + 1.0 / static_cast<double>(c.size()))
          << "rho " << rho << " channel " << d;
      // stationary unit variance (std 1), sample variance of a correlated series:
      // relative sd ~ sqrt(2 (1 + rho^2) / ((1 - rho^2) n))
      const double vsd =
          std::sqrt(2 * (1 + rho * rho) / ((1 - rho * rho) * static_cast<double>(c.size())));
      EXPECT_NEAR(den / static_cast<double>(c.size()), 1.0, 6 * vsd) << "rho " << rho;
    }
  }
}

TEST(Synth, OutlierChannelsAndHeavyTails) {
  SynthSpec s = synth_preset("heavy_tailed", 20000, 3, 64, seed_of("synth.heavy"));
  s.channel_bias_std = 0;
  const auto outliers = synth_outlier_channels(s);
  ASSERT_EQ(outliers.size(), 3u);
  const std::vector<float> x = synth_kv(s);
  for (int h = 0; h < 3; ++h) {
    ASSERT_EQ(outliers[h].size(), 4u);
    EXPECT_TRUE(std::is_sorted(outliers[h].begin(), outliers[h].end()));
    EXPECT_EQ(std::set<int32_t>(outliers[h].begin(), outliers[h].end()).size(), 4u);
    const std::set<int32_t> out(outliers[h].begin(), outliers[h].end());
    double max_normal_sd = 0, min_outlier_sd = 1e300;
    for (int d = 0; d < 64; ++d) {
      const Moments m = moments(channel(x, s, h, d));
      const double sd = std::sqrt(m.var);
      if (out.count(d)) {
        min_outlier_sd = std::min(min_outlier_sd, sd);
        // gain in [10, 100] x std 1 (sample sd within the Student-t(4) spread)
        EXPECT_GE(sd, 10 * 0.8) << "head " << h << " outlier " << d;
        EXPECT_LE(sd, 100 * 1.2) << "head " << h << " outlier " << d;
      } else {
        max_normal_sd = std::max(max_normal_sd, sd);
        EXPECT_NEAR(sd, 1.0, 0.2) << "head " << h << " channel " << d;
      }
    }
    EXPECT_GT(min_outlier_sd, 5 * max_normal_sd) << "head " << h;
  }
  // Student-t(4) innovations: heavy tails, excess kurtosis far above a Gaussian's 0
  std::vector<double> normal;
  const std::set<int32_t> out0(outliers[0].begin(), outliers[0].end());
  for (int d = 0; d < 64; ++d)
    if (!out0.count(d)) {
      const auto c = channel(x, s, 0, d);
      normal.insert(normal.end(), c.begin(), c.end());
    }
  EXPECT_GT(moments(normal).kurt, 1.0);
}

TEST(Synth, ChannelBias) {
  SynthSpec s = synth_preset("gaussian", 4000, 1, 256, seed_of("synth.bias"));
  s.channel_bias_std = 3.0;
  const std::vector<float> x = synth_kv(s);
  std::vector<double> means;
  for (int d = 0; d < 256; ++d) means.push_back(moments(channel(x, s, 0, d)).mean);
  const Moments mm = moments(means);
  // channel means ~ N(0, 9) plus sampling noise of 1/sqrt(4000): sample sd of 256 means
  EXPECT_NEAR(std::sqrt(mm.var), 3.0, 6 * 3.0 / std::sqrt(2.0 * 256));
}

TEST(Synth, BadSpecsThrow) {
  auto bad = [](SynthSpec s, const char* needle) {
    try {
      (void)synth_kv(s);
      ADD_FAILURE() << needle << ": no exception";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const SynthSpec ok = synth_preset("gaussian", 4, 1, 8, 1);
  SynthSpec s = ok;
  s.tokens = -1;
  bad(s, "tokens");
  s = ok;
  s.heads = 0;
  bad(s, "heads");
  s = ok;
  s.std = 0;
  bad(s, "std");
  s = ok;
  s.t_dof = 2;
  bad(s, "t_dof");
  s = ok;
  s.outlier_channels = 9;
  bad(s, "outlier_channels");
  s = ok;
  s.outlier_min = 0.5;
  bad(s, "outlier gains");
  s = ok;
  s.rho = 1.0;
  bad(s, "rho");
  s = ok;
  s.channel_bias_std = -1;
  bad(s, "channel_bias_std");
  EXPECT_THROW(synth_preset("uniform", 1, 1, 8, 0), InvalidArgument);
}

}  // namespace
}  // namespace kvlab::ref
