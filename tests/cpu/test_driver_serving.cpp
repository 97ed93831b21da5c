// test_driver_serving.cpp: the serving kinds' CPU paths: the calibration input (serving_step
// points read back from a result file written here with known step times: the fitted model
// predicts them, its leave-one-out error is reported; points of another executor are refused
// with what the file holds), the serving kind end to end on sim's roofline clock (the
// pipeline without a GPU), and every bad input (InvalidArgument before anything runs).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "experiments/cli/registry.h"
#include "experiments/h5/h5.h"
#include "experiments/kinds/serving_common.h"
#include "experiments/results/result_file.h"
#include "reference/core/error.h"
#include "sim/cost/serving_step_model.h"
#include "sim/workload/workload.h"

using namespace kvlab;
using namespace kvlab::exp;

namespace {

Point point_of(const std::string& kind, const std::map<std::string, std::string>& set,
               int64_t index = 0) {
  const Bench& b = find_bench(kind);
  Point p;
  p.index = index;
  p.study = "s";
  p.kind = kind;
  for (const auto& a : b.axes())
    p.axes.emplace_back(a.name, set.count(a.name) ? set.at(a.name) : a.default_value);
  return p;
}

const std::map<std::string, std::string> kExec = {
    {"preset", "tiny"},     {"pool_blocks", "256"},
    {"max_num_seqs", "16"}, {"max_num_batched_tokens", "128"},
    {"max_context", "512"}, {"graph", "on"}};

std::map<std::string, std::string> with(std::map<std::string, std::string> m,
                                        const std::map<std::string, std::string>& more) {
  for (const auto& [k, v] : more) m[k] = v;
  return m;
}

// Ground truth of a step on the tiny executor (seconds): linear parts, GEMM linear in rows.
double truth(const sim::StepShape& s, bool graph, int64_t rows, int64_t lm_rows, double* gemm,
             double* lm, double* dec, double* pre) {
  *gemm = 1e-3 + 2e-6 * static_cast<double>(rows);
  *lm = lm_rows > 0 ? 1e-4 + 1e-6 * static_cast<double>(lm_rows) : 0;
  *dec =
      s.num_decode_seqs > 0 ? 5e-5 + 1e-6 * s.num_decode_seqs + 2e-9 * s.decode_context_tokens : 0;
  *pre = s.prefill_tokens > 0
             ? 2e-5 * s.num_prefill_seqs + 1e-7 * s.prefill_tokens + 4e-11 * s.prefill_attn_pairs
             : 0;
  const double rest = graph ? 2e-4 + 1e-6 * rows : 6e-4 + 3e-6 * rows + 1e-6 * lm_rows;
  return *gemm + *lm + *dec + *pre + rest;
}

void write_calibration(const std::string& path, const std::string& preset = "tiny") {
  unlink(path.c_str());
  RunMeta meta;
  meta.argv = {"kvlab", "sweep", "cal.ini"};
  meta.config_text = "name = cal\n";
  meta.sweep_name = "cal";
  h5::DurableFile::Options o;
  o.fsync = false;
  auto rf = ResultFile::create(path, meta, o);
  const Bench& b = find_bench("serving_step");
  rf->declare({&b});
  rf->begin_run(meta, false);
  const std::vector<int32_t> buckets = sim::default_graph_buckets(16);
  int64_t index = 0;
  auto add = [&](int nd, int ctx, int np, int chunk, int prefix, bool graph) {
    sim::StepShape s;
    s.num_decode_seqs = nd;
    s.decode_context_tokens = int64_t{nd} * (ctx + 1);
    s.num_prefill_seqs = np;
    s.prefill_tokens = int64_t{np} * chunk;
    s.prefill_attn_pairs = np * (double(chunk) * prefix + 0.5 * chunk * (chunk + 1.0));
    s.prefill_context_tokens = int64_t{np} * (prefix + chunk);
    s.num_sampled = nd + np;
    const int64_t rows = graph ? sim::graph_bucket(buckets, nd) : s.total_tokens();
    const int64_t lm_rows = graph ? rows : s.num_sampled;
    double g, lm, dec, pre;
    const double t = truth(s, graph, rows, lm_rows, &g, &lm, &dec, &pre);
    Point p = point_of("serving_step",
                       with(kExec, {{"preset", preset},
                                    {"decode_seqs", std::to_string(nd)},
                                    {"decode_context", std::to_string(ctx)},
                                    {"prefill_seqs", std::to_string(np)},
                                    {"prefill_tokens", std::to_string(chunk)},
                                    {"prefill_context", std::to_string(prefix)}}),
                       index++);
    Record r;
    const std::map<std::string, double> m = {
        {"step_us", 1e6 * t},
        {"gemm_us", 1e6 * g},
        {"lm_head_us", 1e6 * lm},
        {"decode_attn_us", 1e6 * dec},
        {"prefill_attn_us", 1e6 * pre},
        {"graph_step", graph ? 1.0 : 0.0},
        {"rows", double(rows)},
        {"lm_rows", double(lm_rows)},
        {"num_decode_seqs", double(s.num_decode_seqs)},
        {"decode_context_tokens", double(s.decode_context_tokens)},
        {"num_prefill_seqs", double(s.num_prefill_seqs)},
        {"prefill_tokens_total", double(s.prefill_tokens)},
        {"prefill_attn_pairs", s.prefill_attn_pairs},
        {"prefill_context_tokens", double(s.prefill_context_tokens)},
        {"num_sampled", double(s.num_sampled)}};
    for (const auto& [k, v] : m) r.metric(k, v);
    rf->write_point(p, b, r);
  };
  for (int nd : {1, 2, 4, 8, 16})
    for (int ctx : {32, 300}) add(nd, ctx, 0, 0, 0, true);
  for (int nd : {0, 3, 8})
    for (int chunk : {16, 48, 100})
      for (int prefix : {0, 200}) add(nd, 100, 1, chunk, prefix, false);
  add(4, 100, 2, 32, 50, false);  // two chunks: the shape's token total is not the chunk axis
  rf->end_run(index, 0);
}

TEST(DriverServing, CalibrationRecordsAreReadAndFitted) {
  const std::string path = testing::TempDir() + "serving_cal.h5";
  write_calibration(path);
  const ServingExecutorConfig c = serving_executor_config(point_of("serving", kExec));
  const auto recs = read_serving_step_records(path, c);
  ASSERT_EQ(recs.size(), 10u + 18u + 1u);
  EXPECT_EQ(recs.back().shape.prefill_tokens, 64);
  EXPECT_EQ(recs.back().shape.num_prefill_seqs, 2);
  EXPECT_EQ(recs.back().rows, 68);
  sim::ServingStepModelConfig mc;
  mc.graph_buckets = sim::default_graph_buckets(16);
  const sim::ServingStepFit fit = sim::fit_serving_step_model(recs, mc);
  EXPECT_LT(fit.max_abs_rel_error, 1e-6) << fit.model.describe();
  // Another executor's points are refused, naming what the file holds.
  ServingExecutorConfig other = c;
  other.max_num_seqs = 32;
  try {
    read_serving_step_records(path, other);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("it holds"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("seqs16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_serving_step_records(testing::TempDir() + "missing.h5", c), InvalidArgument);
}

TEST(DriverServing, ServingKindRunsThePipelineOnTheRooflineClock) {
  const std::string path = testing::TempDir() + "serving_cal2.h5";
  write_calibration(path);
  Bench& b = find_bench("serving");
  const Point p = point_of("serving", with(kExec, {{"executor", "roofline"},
                                                   {"calibration", path},
                                                   {"workload", "offline_batch"},
                                                   {"length_scale", "0.05"},
                                                   {"num_requests", "40"},
                                                   {"kv_blocks", "20"}}));
  b.check_point(p);
  RunContext ctx;
  Record r = b.run(p, ctx);
  ASSERT_EQ(r.status, Status::kOk) << r.reason;
  std::map<std::string, double> m(r.metrics.begin(), r.metrics.end());
  EXPECT_EQ(m["calibration_records"], 29);
  EXPECT_LT(m["calibration_median_error_loo"], 0.05);
  EXPECT_EQ(m["replay_identical"], 1);
  EXPECT_EQ(m["decisions_first_divergence"], -1);  // all at once: clock-independent decisions
  EXPECT_GT(m["measured_preemptions"], 0);
  EXPECT_EQ(m["measured_preemptions"], m["predicted_preemptions"]);
  EXPECT_TRUE(std::isfinite(m["error_mean_tpot_s"]));
  std::map<std::string, std::string> l(r.labels.begin(), r.labels.end());
  EXPECT_EQ(l["model"].rfind("serving step model", 0), 0u) << l["model"];
  EXPECT_NE(l["clock_measured"].find("not a measurement"), std::string::npos);
  std::vector<std::string> traces;
  for (const auto& t : r.traces) traces.push_back(t.name);
  EXPECT_EQ(traces,
            (std::vector<std::string>{"requests", "steps", "steps_predicted", "calibration"}));
}

TEST(DriverServing, BadInputIsRejectedBeforeRunning) {
  const Bench& b = find_bench("serving");
  auto bad = [&](const std::map<std::string, std::string>& more, const std::string& needle) {
    try {
      b.check_point(point_of("serving", with(with(kExec, {{"executor", "roofline"},
                                                          {"kv_blocks", "100"},
                                                          {"length_scale", "0.05"},
                                                          {"num_requests", "50"}}),
                                             more)));
      ADD_FAILURE() << "no error for " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  bad({{"workload", "no_such_workload"}}, "neither a file nor a spec");
  bad({{"kv_blocks", "300"}}, "kv_blocks");
  bad({{"max_context", "64"}, {"length_scale", "1"}}, "above max_context");
  bad({{"calibration", "/nonexistent/cal.h5"}}, "does not exist");
  bad({{"length_scale", "0"}}, "length_scale");
  bad({{"rate", "5"}, {"workload", "offline_batch"}}, "all at once");
  bad({{"block_size", "0"}}, "block_size");
  const Bench& s = find_bench("serving_step");
  EXPECT_THROW(s.check_point(point_of("serving_step", with(kExec, {{"decode_seqs", "200"}}))),
               InvalidArgument);  // rows above the budget
  EXPECT_THROW(s.check_point(point_of(
                   "serving_step", with(kExec, {{"decode_seqs", "8"}, {"decode_context", "600"}}))),
               InvalidArgument);  // longer than max_context
  EXPECT_THROW(
      s.check_point(point_of(
          "serving_step",
          with(kExec, {{"decode_seqs", "0"}, {"prefill_seqs", "1"}, {"prefill_tokens", "1"}}))),
      InvalidArgument);  // a one-token chunk
}

}  // namespace
