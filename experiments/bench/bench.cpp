// bench.cpp: Point accessors, status names and the one timing recorder.
#include "experiments/bench/bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "experiments/bench/number_text.h"
#include "reference/core/error.h"

namespace kvlab::exp {

std::string Point::key() const {
  std::string k = study + "/" + kind + ":";
  for (size_t i = 0; i < axes.size(); ++i)
    k += (i ? "," : "") + axes[i].first + "=" + axes[i].second;
  return k;
}

bool Point::has(const std::string& axis) const {
  for (const auto& a : axes)
    if (a.first == axis) return true;
  return false;
}

const std::string& Point::str(const std::string& axis) const {
  for (const auto& a : axes)
    if (a.first == axis) return a.second;
  throw InvalidArgument("point " + key() + " has no axis '" + axis + "'");
}

int64_t Point::integer(const std::string& axis) const {
  long long v = 0;
  if (!parse_int(str(axis), &v))
    throw InvalidArgument("axis " + axis + " = '" + str(axis) + "' is not an integer");
  return v;
}

double Point::number(const std::string& axis) const {
  double v = 0;
  if (!parse_float(str(axis), &v))
    throw InvalidArgument("axis " + axis + " = '" + str(axis) + "' is not a number");
  return v;
}

std::string Point::describe() const {
  std::string s;
  for (size_t i = 0; i < axes.size(); ++i)
    s += (i ? " " : "") + axes[i].first + "=" + axes[i].second;
  return s;
}

std::string to_string(Status s) {
  switch (s) {
    case Status::kOk:
      return "ok";
    case Status::kSkipped:
      return "skipped";
    case Status::kFailed:
      return "failed";
  }
  return "?";
}

namespace {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string mib(double bytes) {
  return fmt("%.0f MiB", bytes / (1 << 20));
}

// One sentence: how the samples of `t` were taken.
std::string how_timed(const Timing& t, double bytes) {
  std::string s;
  switch (t.flush) {
    case L2Flush::kReadAllocate:
      s = "cold L2: " + mib(static_cast<double>(t.flush_bytes)) +
          " read with ld.global.cg (allocating) before each call";
      break;
    case L2Flush::kReadStreaming:
      s = "NOT cold: evict-first streaming flush of " + mib(static_cast<double>(t.flush_bytes)) +
          " (test control)";
      break;
    case L2Flush::kSelf:
      s = "cold: each call streams " + fmt("%.3g", bytes / 1e9) + " GB (" +
          fmt("%.0f", t.l2_bytes ? bytes / static_cast<double>(t.l2_bytes) : 0.0) +
          "x L2) between two uses of any byte";
      break;
    case L2Flush::kNone:
      s = "warm L2: calls back to back";
      break;
  }
  if (t.graph)
    s += "; CUDA graph, " + std::to_string(t.calls_per_sample) +
         (t.calls_per_sample == 1 ? " call per replay" : " calls per replay");
  else
    s += "; eager";
  s += t.held ? "; stream held until enqueued" : "; stream not held";
  return s;
}

}  // namespace

void record_timing(Record* r, const Timing& t, const TimedBytes& b, const RunContext& ctx) {
  if (t.reps == 0) return;  // not timed: the columns stay NaN
  const bool read = b.ceiling == CeilingKind::kRead;
  const double ceiling = read ? ctx.read_ceiling_bytes_per_s : ctx.copy_ceiling_bytes_per_s;
  const bool have_ceiling = ceiling > 0;
  // No DRAM traffic (reads, writes or a mix: an append reads more than it writes, so it may
  // beat the copy ceiling) moves faster than the best of the run's read and copy kernels.
  const double bound = std::max(ctx.read_ceiling_bytes_per_s, ctx.copy_ceiling_bytes_per_s);
  const double bps = t.median_us > 0 ? b.bytes / (t.median_us * 1e-6) : NAN;
  const double bps_slow = t.q3_us > 0 ? b.bytes / (t.q3_us * 1e-6) : NAN;
  const double floor_us = have_ceiling ? b.bytes / ceiling * 1e6 : NAN;
  const bool exceeds = bound > 0 && bps_slow > bound;
  r->metric("median_us", t.median_us);
  r->metric("q1_us", t.q1_us);
  r->metric("q3_us", t.q3_us);
  r->metric("rel_iqr", t.rel_iqr);
  r->metric("min_us", t.min_us);
  r->metric("reps", t.reps);
  r->metric("converged", t.converged ? 1.0 : 0.0);
  r->metric("cold_l2", t.cold_l2 ? 1.0 : 0.0);
  r->metric("calls_per_sample", t.calls_per_sample);
  r->metric("flush_bytes", static_cast<double>(t.flush_bytes));
  r->metric("l2_bytes", t.l2_bytes ? static_cast<double>(t.l2_bytes) : NAN);
  r->metric("working_set_bytes", b.bytes);
  r->metric("bytes_per_s", bps);
  r->metric("ceiling_bytes_per_s", have_ceiling ? ceiling : NAN);
  r->metric(read ? "pct_read_ceiling" : "pct_copy_ceiling",
            have_ceiling ? 100 * bps / ceiling : NAN);
  r->metric("pct_datasheet", ctx.peak_bytes_per_s > 0 ? 100 * bps / ctx.peak_bytes_per_s : NAN);
  r->metric("floor_us", floor_us);
  r->metric("excess_us", have_ceiling ? t.median_us - floor_us : NAN);
  r->metric("exceeds_ceiling", bound > 0 ? (exceeds ? 1.0 : 0.0) : NAN);
  const bool invalid = exceeds && t.cold_l2;
  r->metric("timing_valid", invalid ? 0.0 : 1.0);
  r->label("flush", to_string(t.flush));
  r->label("timing", how_timed(t, b.bytes));
  r->traces.push_back(
      samples_trace("samples_us", "every timed sample (us per call)", t.samples_us));
  if (invalid && r->status == Status::kOk) {
    r->status = Status::kFailed;
    r->reason = "timing invalid: a cold-L2 call moved its " + fmt("%.4g", b.bytes / 1e6) +
                " MB at " + fmt("%.4g", bps / 1e12) + " TB/s (slower quartile " +
                fmt("%.4g", bps_slow / 1e12) +
                " TB/s), above the best DRAM bandwidth of this run " + fmt("%.4g", bound / 1e12) +
                " TB/s (read ceiling " + fmt("%.4g", ctx.read_ceiling_bytes_per_s / 1e12) +
                ", copy ceiling " + fmt("%.4g", ctx.copy_ceiling_bytes_per_s / 1e12) +
                "): the flush left bytes in L2, or the ceilings are too low";
  }
}

bool is_ceiling_row_timing(const Timing& t, double bytes) {
  return t.reps > 0 && t.cold_l2 && t.l2_bytes > 0 &&
         bytes >= kCeilingRowMinL2Multiple * static_cast<double>(t.l2_bytes);
}

bool raise_run_ceiling(const Timing& t, const TimedBytes& b, RunContext* ctx, double* from) {
  double& ceiling =
      b.ceiling == CeilingKind::kRead ? ctx->read_ceiling_bytes_per_s : ctx->copy_ceiling_bytes_per_s;
  if (from) *from = ceiling;
  // No ceilings pass, no R to raise: a run without ceilings judges nothing against one.
  if (!(ceiling > 0) || !is_ceiling_row_timing(t, b.bytes) || !(t.q1_us > 0)) return false;
  const double fast = b.bytes / (t.q1_us * 1e-6);
  if (!(fast > ceiling)) return false;
  ceiling = fast;
  return true;
}

std::vector<MetricSpec> timing_metric_specs(CeilingKind ceiling) {
  const bool read = ceiling == CeilingKind::kRead;
  const std::string c = read ? "the read ceiling R" : "the copy ceiling C (read + write)";
  return {
      {"median_us", "us", "median time per call"},
      {"q1_us", "us", "first quartile of the samples"},
      {"q3_us", "us", "third quartile of the samples"},
      {"rel_iqr", "", "(q3 - q1) / median: the noise band"},
      {"min_us", "us", "fastest sample"},
      {"reps", "", "timed samples"},
      {"converged", "", "1 when rel_iqr reached the [timing] target"},
      {"cold_l2", "", "1 when no byte of the call was in L2 as it started (label flush says how)"},
      {"calls_per_sample", "", "calls between one pair of events (a warm CUDA graph: > 1)"},
      {"flush_bytes", "B", "bytes the L2 flush read before each call (0: none)"},
      {"l2_bytes", "B", "the device's L2 size"},
      {"working_set_bytes", "B", "bytes the call must move from/to DRAM (the floor's bytes)"},
      {"bytes_per_s", "B/s", "implied bandwidth: working_set_bytes / median"},
      {"ceiling_bytes_per_s", "B/s",
       c + " of this run as this row was timed (the ceilings pass's, or higher once a ceiling "
           "row beat it; the run's final one is the file's root attribute)"},
      {read ? "pct_read_ceiling" : "pct_copy_ceiling", "%", "bytes_per_s / " + c},
      {"pct_datasheet", "%", "bytes_per_s / the device's datasheet peak"},
      {"floor_us", "us", "working_set_bytes / " + c},
      {"excess_us", "us", "median - floor_us: the time above the bandwidth floor"},
      {"exceeds_ceiling", "",
       "1 when working_set_bytes / q3 beats the best of the read and copy ceilings (a cold row "
       "then is invalid)"},
      {"timing_valid", "", "0 for a cold row that beats its ceiling (recorded as failed)"},
  };
}

}  // namespace kvlab::exp
