// test_run_ceiling.cpp: the run's read ceiling R is the best valid cold DRAM read of the whole
// run (experiments/bench/bench.h raise_run_ceiling), on CPU with synthetic timings:
//   - a ceiling row (cold, contiguous, working set >= 8 x L2) that beats the ceilings pass's R
//     raises R at its fast edge (bytes / q1) and is recorded ok, not "timing invalid";
//   - a row that beats R where L2 could explain it (a small working set, a warm row, a decode
//     row, however large) does not raise it and is still judged as before: the cold ones fail;
//   - through the point writer, a synthetic run: the file's root R and the run's /runs row
//     follow the raise at once, rows after it are judged against the raised R, rows before it
//     keep the R they were judged against.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "experiments/bench/bench.h"
#include "experiments/bench/kind_list.h"
#include "experiments/h5/h5.h"
#include "experiments/results/identity.h"
#include "experiments/run/point_writer.h"
#include "experiments/sweep/spec.h"
#include "reference/core/timing.h"
#include "tests/common/test_env.h"

namespace kvlab::exp {
namespace {

constexpr double kL2 = 50.0 * (1 << 20);  // the H100's 50 MiB
constexpr double kPassR = 3.158e12;       // the ceilings pass's R of the fair run
constexpr double kPassC = 3.03e12;

double metric(const Record& r, const std::string& name) {
  for (const auto& [k, x] : r.metrics)
    if (k == name) return x;
  return NAN;
}

// Ten samples around `us` (+-0.2 %), cold by the read-allocate flush unless `warm`.
Timing timing_at(double us, bool warm = false) {
  std::vector<float> s;
  for (int i = 0; i < 10; ++i) s.push_back(static_cast<float>(us * (0.998 + 0.0004 * i)));
  Timing t = kvlab::summarize(s, 0.05);
  t.cold_l2 = !warm;
  t.flush = warm ? L2Flush::kNone : L2Flush::kReadAllocate;
  t.flush_bytes = warm ? 0 : uint64_t{200} << 20;
  t.l2_bytes = static_cast<uint64_t>(kL2);
  return t;
}

// The time at which `bytes` move at `bps`, in us.
double us_at(double bytes, double bps) {
  return bytes / bps * 1e6;
}

RunContext pass_context() {
  RunContext ctx;
  ctx.read_ceiling_bytes_per_s = ctx.pass_read_ceiling_bytes_per_s = kPassR;
  ctx.copy_ceiling_bytes_per_s = ctx.pass_copy_ceiling_bytes_per_s = kPassC;
  return ctx;
}

TEST(RunCeiling, BigColdReadAboveThePassRaisesRAndStaysValid) {
  // The fair run's ceilings_bulk row: 4 GiB read at ~3.172 TB/s against a pass R of 3.158.
  const double bytes = 4096.0 * (1 << 20);
  const Timing t = timing_at(us_at(bytes, 3.172e12));
  RunContext ctx = pass_context();
  double from = 0;
  ASSERT_TRUE(raise_run_ceiling(t, {bytes, CeilingKind::kRead}, &ctx, &from));
  EXPECT_DOUBLE_EQ(from, kPassR);
  EXPECT_DOUBLE_EQ(ctx.read_ceiling_bytes_per_s, bytes / (t.q1_us * 1e-6));  // its fast edge
  EXPECT_DOUBLE_EQ(ctx.pass_read_ceiling_bytes_per_s, kPassR);                // the pass stays
  EXPECT_DOUBLE_EQ(ctx.copy_ceiling_bytes_per_s, kPassC);                     // C untouched
  Record r;
  record_timing(&r, t, {bytes, CeilingKind::kRead}, ctx);
  EXPECT_EQ(r.status, Status::kOk) << r.reason;
  EXPECT_DOUBLE_EQ(metric(r, "timing_valid"), 1);
  EXPECT_DOUBLE_EQ(metric(r, "exceeds_ceiling"), 0);
  EXPECT_DOUBLE_EQ(metric(r, "ceiling_bytes_per_s"), ctx.read_ceiling_bytes_per_s);
  EXPECT_LE(metric(r, "pct_read_ceiling"), 100.0);  // the median is slower than the fast edge
  // The same row without the raise is what the fair run recorded: timing invalid.
  Record old;
  record_timing(&old, t, {bytes, CeilingKind::kRead}, pass_context());
  EXPECT_EQ(old.status, Status::kFailed);
  EXPECT_EQ(old.reason.rfind("timing invalid", 0), 0u) << old.reason;
}

TEST(RunCeiling, BigColdCopyRaisesCNotR) {
  const double bytes = 2 * 4096.0 * (1 << 20);  // read + write
  const Timing t = timing_at(us_at(bytes, 3.05e12));
  RunContext ctx = pass_context();
  ASSERT_TRUE(raise_run_ceiling(t, {bytes, CeilingKind::kCopy}, &ctx, nullptr));
  EXPECT_DOUBLE_EQ(ctx.copy_ceiling_bytes_per_s, bytes / (t.q1_us * 1e-6));
  EXPECT_DOUBLE_EQ(ctx.read_ceiling_bytes_per_s, kPassR);
}

TEST(RunCeiling, RowsThatL2CouldFlatterNeverRaiseR) {
  // 8 x L2 is the smallest ceiling row; one byte less is not one.
  const double edge = 8 * kL2;
  const Timing fast_edge = timing_at(us_at(edge, 3.3e12));
  RunContext ctx = pass_context();
  EXPECT_FALSE(raise_run_ceiling(timing_at(us_at(edge - 16, 3.3e12)),
                                 {edge - 16, CeilingKind::kRead}, &ctx, nullptr));
  EXPECT_DOUBLE_EQ(ctx.read_ceiling_bytes_per_s, kPassR);
  // A small working set beating R: not raised, and still a failed cold row.
  const double small = 16.0 * (1 << 20);
  const Timing ts = timing_at(us_at(small, 3.4e12));
  EXPECT_FALSE(raise_run_ceiling(ts, {small, CeilingKind::kRead}, &ctx, nullptr));
  Record r;
  record_timing(&r, ts, {small, CeilingKind::kRead}, ctx);
  EXPECT_EQ(r.status, Status::kFailed);
  EXPECT_EQ(r.reason.rfind("timing invalid", 0), 0u) << r.reason;
  // A warm big read: not raised (flagged only, as before).
  const double big = 4096.0 * (1 << 20);
  const Timing tw = timing_at(us_at(big, 3.3e12), /*warm=*/true);
  EXPECT_FALSE(raise_run_ceiling(tw, {big, CeilingKind::kRead}, &ctx, nullptr));
  Record w;
  record_timing(&w, tw, {big, CeilingKind::kRead}, ctx);
  EXPECT_EQ(w.status, Status::kOk);
  EXPECT_DOUBLE_EQ(metric(w, "exceeds_ceiling"), 1);
  // No ceilings pass (R = 0): nothing to raise.
  RunContext none;
  EXPECT_FALSE(raise_run_ceiling(fast_edge, {edge, CeilingKind::kRead}, &none, nullptr));
  EXPECT_EQ(none.read_ceiling_bytes_per_s, 0);
  // A slower big read leaves R alone.
  EXPECT_FALSE(raise_run_ceiling(timing_at(us_at(big, 3.10e12)), {big, CeilingKind::kRead}, &ctx,
                                 nullptr));
  EXPECT_DOUBLE_EQ(ctx.read_ceiling_bytes_per_s, kPassR);
  // And the rule raises at 8 x L2 exactly.
  EXPECT_TRUE(raise_run_ceiling(fast_edge, {edge, CeilingKind::kRead}, &ctx, nullptr));
}

// ---- a synthetic run through the point writer
// Kind "ceiling_probe": each `role` a synthetic timing as the bandwidth / decode kinds record
// them. ceiling_* rows are ceiling kernels (raise_run_ceiling then record_timing, as
// experiments/cuda/bandwidth.cpp); decode_* rows only record_timing (as decode_attention).
class CeilingProbe : public Bench {
 public:
  std::string name() const override { return "ceiling_probe"; }
  std::string summary() const override { return "synthetic timings for the run-ceiling test"; }
  std::vector<AxisSpec> axes() const override {
    return {{"role",
             AxisType::kEnum,
             "decode_before",
             {"decode_before", "ceiling_big", "ceiling_small", "decode_big", "decode_between"},
             "which synthetic row"}};
  }
  std::vector<MetricSpec> metrics() const override {
    return timing_metric_specs(CeilingKind::kRead);
  }
  double estimate_seconds(const Point&, const RunContext&) const override { return 0.001; }
  Record run(const Point& p, RunContext& ctx) override {
    const std::string role = p.str("role");
    const double big = 4096.0 * (1 << 20);
    const double bytes = role == "ceiling_small" ? 16.0 * (1 << 20) : role == "decode_big" ? 2.148e9
                         : role == "ceiling_big"  ? big
                                                  : 2.148e9;
    const double bps = role == "decode_before"    ? 3.05e12   // a decode row below both Rs
                       : role == "ceiling_big"    ? 3.172e12  // beats the pass
                       : role == "ceiling_small"  ? 3.40e12   // beats everything (L2)
                       : role == "decode_big"     ? 3.30e12   // beats everything
                                                  : 3.163e12;  // between the pass and the run R
    const Timing t = timing_at(us_at(bytes, bps));
    const TimedBytes b{bytes, CeilingKind::kRead};
    if (role.rfind("ceiling_", 0) == 0) raise_run_ceiling(t, b, &ctx, nullptr);
    Record r;
    record_timing(&r, t, b, ctx);
    return r;
  }
};

TEST(RunCeiling, SyntheticRunRaisesTheFilesRAndJudgesLaterRowsByIt) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kvlab-run-ceiling-" + std::to_string(test::seed_for("run_ceiling.dir")));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "run.h5").string();
  std::vector<std::unique_ptr<Bench>> list;
  list.push_back(std::make_unique<CeilingProbe>());
  const KindList kinds(std::move(list));
  // Sweep order is study order: a decode row, the ceiling rows, then the rows they judge.
  const SweepSpec spec = parse_sweep(R"(
name = run_ceiling
seed = 3
[before]
kind = ceiling_probe
role = decode_before
[ceilings]
kind = ceiling_probe
role = ceiling_big, ceiling_small
[after]
kind = ceiling_probe
role = decode_big, decode_between
)",
                                     "run_ceiling_test");
  const std::vector<Point> all = expand(spec, kinds);
  ASSERT_EQ(all.size(), 5u);
  SweepOptions opt;
  opt.kinds = &kinds;
  opt.out = out;
  opt.progress = "none";
  opt.fsync = false;
  std::ostringstream log;
  std::vector<Record> got;
  double raised = 0;
  {
    PointWriter w(spec, make_identity(spec, all, true, kinds), opt, out, "0/1",
                  static_cast<int64_t>(all.size()), log);
    std::vector<const Point*> todo;
    for (const auto& p : all) todo.push_back(&p);
    w.begin(todo);  // no GPU point: no ceilings pass; the test stands in for it
    w.context().read_ceiling_bytes_per_s = w.context().pass_read_ceiling_bytes_per_s = kPassR;
    w.context().copy_ceiling_bytes_per_s = w.context().pass_copy_ceiling_bytes_per_s = kPassC;
    for (const auto& p : all) got.push_back(w.run(p));
    raised = w.context().read_ceiling_bytes_per_s;
    w.end(static_cast<int64_t>(all.size()), 2);
  }
  EXPECT_GT(raised, 3.172e12);  // the big row's fast edge, above its median
  EXPECT_LT(raised, 3.18e12);
  EXPECT_NE(log.str().find("read ceiling R raised"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("ceilings/ceiling_probe:role=ceiling_big"), std::string::npos)
      << log.str();
  // decode_before: judged against the pass's R, which it stays below; it keeps that R.
  EXPECT_EQ(got[0].status, Status::kOk) << got[0].reason;
  EXPECT_DOUBLE_EQ(metric(got[0], "ceiling_bytes_per_s"), kPassR);
  // ceiling_big: raised R, valid.
  EXPECT_EQ(got[1].status, Status::kOk) << got[1].reason;
  EXPECT_DOUBLE_EQ(metric(got[1], "ceiling_bytes_per_s"), raised);
  // ceiling_small and decode_big: beyond the raised R where L2 could explain it: invalid.
  for (int i : {2, 3}) {
    EXPECT_EQ(got[i].status, Status::kFailed) << i;
    EXPECT_EQ(got[i].reason.rfind("timing invalid", 0), 0u) << got[i].reason;
  }
  // decode_between: above the pass's R, below the run's: valid, judged by the run's R.
  EXPECT_EQ(got[4].status, Status::kOk) << got[4].reason;
  EXPECT_DOUBLE_EQ(metric(got[4], "ceiling_bytes_per_s"), raised);
  EXPECT_LT(metric(got[4], "pct_read_ceiling"), 100);
  // The file: root R and the run's /runs row hold the run's R.
  const h5::File f = h5::File::open(out);
  EXPECT_DOUBLE_EQ(f.attr_double("read_ceiling_bytes_per_s"), raised);
  EXPECT_DOUBLE_EQ(f.attr_double("copy_ceiling_bytes_per_s"), kPassC);
  const h5::Table runs = h5::Table::open(f, "runs");
  EXPECT_DOUBLE_EQ(runs.read_doubles("read_ceiling_bytes_per_s").back(), raised);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvlab::exp
