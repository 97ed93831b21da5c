// test_sim_workload.cpp: synthetic workloads (determinism, distribution shapes), workload
// spec files and CSV traces (round trip, malformed lines naming file/line/field).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <string>

#include "reference/core/error.h"
#include "sim/core/text.h"
#include "sim/workload/trace_csv.h"
#include "sim/workload/workload.h"
#include "tests/common/test_env.h"

namespace kvlab::sim {
namespace {

// Statistical checks below use a band of kSigmas standard errors of the estimated quantity,
// computed from the distribution itself: a correct sampler fails with probability < 1e-6.
constexpr double kSigmas = 5.0;

void expect_error_contains(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an InvalidArgument containing '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

WorkloadSpec base_spec(const char* name, int64_t n) {
  WorkloadSpec w;
  w.seed = test::seed_for(name);
  w.num_requests = n;
  w.arrival.rate = 4;
  w.prompt = LengthDist::uniform(10, 20);
  w.output = LengthDist::fixed(5);
  return w;
}

TEST(SimWorkload, SameSeedSameRequestsAndIndependentStreams) {
  WorkloadSpec w = base_spec("sim_workload_det", 500);
  SCOPED_TRACE("seed " + std::to_string(w.seed));
  const auto a = generate_workload(w), b = generate_workload(w);
  ASSERT_EQ(a.size(), 500u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].arrival_s, b[i].arrival_s);
    EXPECT_EQ(a[i].prompt_tokens, b[i].prompt_tokens);
    EXPECT_EQ(a[i].id, static_cast<int64_t>(i));
  }
  validate_requests(a);
  // Changing the output distribution leaves arrivals and prompts unchanged.
  w.output = LengthDist::uniform(1, 100);
  const auto c = generate_workload(w);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].arrival_s, c[i].arrival_s);
    EXPECT_EQ(a[i].prompt_tokens, c[i].prompt_tokens);
  }
  w.seed += 1;
  EXPECT_NE(generate_workload(w)[0].arrival_s, a[0].arrival_s);
}

TEST(SimWorkload, PoissonAndBurstyInterArrivals) {
  const int64_t n = 20000;
  for (double burstiness : {1.0, 0.25, 4.0}) {
    WorkloadSpec w = base_spec("sim_workload_arrivals", n);
    SCOPED_TRACE("seed " + std::to_string(w.seed) + " burstiness " + std::to_string(burstiness));
    w.arrival.kind = burstiness == 1.0 ? ArrivalKind::kPoisson : ArrivalKind::kBursty;
    w.arrival.burstiness = burstiness;
    const auto r = generate_workload(w);
    std::vector<double> gaps;
    double prev = 0;
    for (const auto& q : r) gaps.push_back(q.arrival_s - prev), prev = q.arrival_s;
    double mean = 0, var = 0;
    for (double g : gaps) mean += g;
    mean /= n;
    for (double g : gaps) var += (g - mean) * (g - mean);
    var /= n - 1;
    // Gamma(k, 1/(rate k)): mean 1/rate, variance 1/(rate^2 k), so CV = 1/sqrt(k).
    const double true_sd = 1.0 / (w.arrival.rate * std::sqrt(burstiness));
    EXPECT_NEAR(mean, 1.0 / w.arrival.rate, kSigmas * true_sd / std::sqrt(static_cast<double>(n)));
    // Sample CV: delta-method relative standard error from the Gamma's excess kurtosis 6/k
    // (sample sd) and its CV^2 = 1/k (sample mean).
    const double k = burstiness;
    const double cv = std::sqrt(var) / mean;
    const double rel_se = std::sqrt((2.0 + 6.0 / k) / (4.0 * n) + 1.0 / (k * n));
    EXPECT_NEAR(cv, 1.0 / std::sqrt(k), kSigmas * rel_se / std::sqrt(k));
  }
  WorkloadSpec w = base_spec("sim_workload_batch", 10);
  w.arrival.kind = ArrivalKind::kAllAtOnce;
  for (const auto& q : generate_workload(w)) EXPECT_EQ(q.arrival_s, 0.0);
}

TEST(SimWorkload, LengthDistributions) {
  const int64_t n = 20000;
  WorkloadSpec w = base_spec("sim_workload_lengths", n);
  SCOPED_TRACE("seed " + std::to_string(w.seed));
  // Zipf s = 1 on [1, 100]: P(1) = 1 / H_100.
  w.prompt = LengthDist::zipf(1.0, 1, 100);
  w.output = LengthDist::lognormal(50, 0.5, 1, 100000);
  const auto r = generate_workload(w);
  double h100 = 0;
  for (int k = 1; k <= 100; ++k) h100 += 1.0 / k;
  int64_t ones = 0;
  std::vector<int> outs;
  for (const auto& q : r) {
    ASSERT_GE(q.prompt_tokens, 1);
    ASSERT_LE(q.prompt_tokens, 100);
    ones += q.prompt_tokens == 1;
    outs.push_back(q.output_tokens);
  }
  const double p1 = 1.0 / h100;
  EXPECT_NEAR(static_cast<double>(ones) / n, p1, kSigmas * std::sqrt(p1 * (1 - p1) / n));
  // Lognormal median 50, sigma 0.5, rounded to nearest: P(draw <= 50) = P(x < 50.5).
  const int64_t below = std::count_if(outs.begin(), outs.end(), [](int x) { return x <= 50; });
  const double p50 = 0.5 * std::erfc(-std::log(50.5 / 50.0) / (0.5 * std::sqrt(2.0)));
  EXPECT_NEAR(static_cast<double>(below) / n, p50, kSigmas * std::sqrt(p50 * (1 - p50) / n));
  // Uniform stays in range and hits both ends; fixed is fixed.
  w.prompt = LengthDist::uniform(3, 5);
  w.output = LengthDist::fixed(9);
  int seen[6] = {0};
  for (const auto& q : generate_workload(w)) {
    ASSERT_GE(q.prompt_tokens, 3);
    ASSERT_LE(q.prompt_tokens, 5);
    ++seen[q.prompt_tokens];
    EXPECT_EQ(q.output_tokens, 9);
  }
  EXPECT_GT(seen[3], 0);
  EXPECT_GT(seen[5], 0);
}

TEST(SimWorkload, SharedPrefixGroups) {
  WorkloadSpec w = base_spec("sim_workload_prefix", 300);
  w.num_prefix_groups = 3;
  w.shared_prefix_tokens = 64;
  std::set<int32_t> groups;
  for (const auto& q : generate_workload(w)) {
    EXPECT_EQ(q.shared_prefix_tokens, 64);
    EXPECT_GE(q.prompt_tokens, 64 + 10);
    EXPECT_LE(q.prompt_tokens, 64 + 20);
    groups.insert(q.prefix_group);
  }
  EXPECT_EQ(groups, (std::set<int32_t>{1, 2, 3}));
}

TEST(SimWorkload, BadSpecsAreClearErrors) {
  WorkloadSpec w = base_spec("sim_workload_bad", 10);
  w.arrival.rate = -1;
  expect_error_contains([&] { generate_workload(w); }, "arrival rate -1");
  w = base_spec("sim_workload_bad", 10);
  w.arrival.kind = ArrivalKind::kBursty;
  w.arrival.burstiness = 0;
  expect_error_contains([&] { generate_workload(w); }, "burstiness 0");
  w = base_spec("sim_workload_bad", 10);
  w.prompt = LengthDist::uniform(20, 10);
  expect_error_contains([&] { generate_workload(w); }, "prompt length: range [20, 10]");
  w.prompt = LengthDist::zipf(0, 1, 10);
  expect_error_contains([&] { generate_workload(w); }, "zipf exponent");
  w.prompt = LengthDist::lognormal(1e6, 0.01, 1, 10);  // no mass in range
  expect_error_contains([&] { generate_workload(w); }, "acceptance");
  w = base_spec("sim_workload_bad", -3);
  expect_error_contains([&] { generate_workload(w); }, "num_requests -3");
  w = base_spec("sim_workload_bad", 1);
  w.shared_prefix_tokens = 5;
  expect_error_contains([&] { generate_workload(w); }, "needs num_prefix_groups");
}

TEST(SimWorkload, SpecFilesParseAndReportLines) {
  const std::string good =
      "# comment\nseed = 5\nnum_requests = 3\narrival = bursty\nrate = 2.5\nburstiness = 0.5\n"
      "prompt = zipf\nprompt_s = 1.2\nprompt_min = 4\nprompt_max = 40\noutput = "
      "fixed\noutput_value = 7\n";
  const WorkloadSpec w = parse_workload_spec(good, "good.cfg");
  EXPECT_EQ(w.seed, 5u);
  EXPECT_EQ(w.arrival.kind, ArrivalKind::kBursty);
  EXPECT_EQ(w.arrival.burstiness, 0.5);
  EXPECT_EQ(w.prompt.kind, LengthDistKind::kZipf);
  EXPECT_EQ(w.output.value, 7);
  expect_error_contains([&] { parse_workload_spec(good + "colour = red\n", "x.cfg"); },
                        "x.cfg:13: unknown key 'colour'");
  expect_error_contains([&] { parse_workload_spec("num_requests = ten\n", "y.cfg"); },
                        "y.cfg:1: field 'num_requests' = 'ten' is not an integer");
  expect_error_contains(
      [&] { parse_workload_spec("num_requests = 1\narrival = poisson\nrate = -2\n", "z.cfg"); },
      "z.cfg:3: field 'rate' = -2 must be > 0");
  expect_error_contains([&] { parse_workload_spec("num_requests 4\n", "w.cfg"); },
                        "w.cfg:1: expected 'key = value'");
  expect_error_contains([&] { parse_workload_spec("seed = 1\nseed = 2\n", "v.cfg"); },
                        "v.cfg:2: key 'seed' repeats line 1");
  expect_error_contains(
      [&] {
        parse_workload_spec(
            "num_requests = 1\narrival = poisson\nrate = 1\nprompt = uniform\nprompt_min = 3\n",
            "u.cfg");
      },
      "needs key 'prompt_max'");
  // Every shipped workload file parses and generates.
  for (const char* f : {"workloads/chat_poisson.cfg", "workloads/bursty_zipf.cfg",
                        "workloads/shared_prefix.cfg", "workloads/offline_batch.cfg"}) {
    SCOPED_TRACE(f);
    const WorkloadSpec s = load_workload_spec(find_data_file(f));
    EXPECT_EQ(static_cast<int64_t>(generate_workload(s).size()), s.num_requests);
  }
}

TEST(SimTrace, RoundTripAndShippedTraces) {
  WorkloadSpec w = base_spec("sim_trace_roundtrip", 50);
  w.num_prefix_groups = 2;
  w.shared_prefix_tokens = 7;
  const auto a = generate_workload(w);
  const auto b = parse_trace_csv(format_trace_csv(a, "made by a test\nsecond line"), "mem.csv");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].arrival_s, b[i].arrival_s);  // 17 significant digits round-trip exactly
    EXPECT_EQ(a[i].prompt_tokens, b[i].prompt_tokens);
    EXPECT_EQ(a[i].prefix_group, b[i].prefix_group);
    EXPECT_EQ(a[i].shared_prefix_tokens, b[i].shared_prefix_tokens);
  }
  // Four-column form with columns in another order.
  const auto c = parse_trace_csv(
      "output_tokens,request_id,prompt_tokens,arrival_s\n3,10,5,0.5\n1,11,2,0.5\n", "c.csv");
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].id, 10);
  EXPECT_EQ(c[0].output_tokens, 3);
  EXPECT_EQ(c[1].prefix_group, 0);
  EXPECT_EQ(load_trace_csv(find_data_file("traces/synthetic_chat.csv")).size(), 2000u);
  EXPECT_EQ(load_trace_csv(find_data_file("traces/example_prefix.csv")).size(), 8u);
}

TEST(SimTrace, MalformedLinesNameFileLineAndField) {
  const std::string h = "request_id,arrival_s,prompt_tokens,output_tokens\n";
  expect_error_contains([&] { parse_trace_csv(h + "0,0.0,12a,5\n", "t.csv"); },
                        "t.csv:2: field 'prompt_tokens' = '12a' is not an integer");
  expect_error_contains([&] { parse_trace_csv(h + "# c\n0,0.0,1,5\n1,nan,1,5\n", "t.csv"); },
                        "t.csv:4: field 'arrival_s' = 'nan' is not a finite number");
  expect_error_contains([&] { parse_trace_csv(h + "0,1.0,1,5\n1,0.5,1,5\n", "t.csv"); },
                        "t.csv:3: field 'arrival_s' = 0.5 is earlier than the previous row's 1");
  expect_error_contains([&] { parse_trace_csv(h + "0,0,0,5\n", "t.csv"); },
                        "t.csv:2: field 'prompt_tokens' = 0 outside [1");
  expect_error_contains([&] { parse_trace_csv(h + "0,0,1,5\n0,0,1,5\n", "t.csv"); },
                        "t.csv:3: field 'request_id' = 0 repeats line 2");
  expect_error_contains([&] { parse_trace_csv(h + "0,0,1\n", "t.csv"); },
                        "t.csv:2: 3 fields, the header has 4");
  expect_error_contains([&] { parse_trace_csv(h + "0,-1,1,5\n", "t.csv"); },
                        "t.csv:2: field 'arrival_s' = -1 is negative");
  expect_error_contains([&] { parse_trace_csv("request_id,arrival_s,prompt_tokens\n", "t.csv"); },
                        "t.csv:1: header lacks the required column 'output_tokens'");
  expect_error_contains(
      [&] { parse_trace_csv("request_id,arrival_s,prompt_tokens,output_tokens,user\n", "t.csv"); },
      "t.csv:1: unknown column 'user'");
  expect_error_contains([&] { parse_trace_csv(h + "0,0,4,5,1\n", "t.csv"); }, "t.csv:2: 5 fields");
  expect_error_contains(
      [&] {
        parse_trace_csv(
            "request_id,arrival_s,prompt_tokens,output_tokens,prefix_group,shared_prefix_tokens\n0,"
            "0,4,1,1,9\n",
            "t.csv");
      },
      "t.csv:2: field 'shared_prefix_tokens' = 9 exceeds prompt_tokens 4");
  expect_error_contains([&] { parse_trace_csv("# only a comment\n", "t.csv"); },
                        "t.csv: no header line");
  expect_error_contains([&] { load_trace_csv("/nonexistent/trace.csv"); },
                        "cannot open file '/nonexistent/trace.csv'");
}

}  // namespace
}  // namespace kvlab::sim
