// bench.h: the point kinds ("benches") a sweep is made of, and what one point yields.
//
// A bench declares its axes (each with a type, a default and, for enums, the allowed
// values) and the summary metrics it reports; the driver expands a study of the sweep
// config into points (one value per axis), asks the bench whether it supports each point
// (a reason when not: the point is recorded as "skipped" with it), runs it, and writes
// the Record: status, summary metrics (one column each in the index table), declared
// bytes and FLOPs, and bulk traces under the point's own HDF5 group. Validation against
// the reference and timing of the same configuration are one record (experiments/README.md).
#pragma once

#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "experiments/h5/h5.h"
#include "reference/core/timing.h"

namespace kvlab::exp {

enum class AxisType { kInt, kFloat, kString, kEnum };

// An axis and the one validation rule every value of it passes before any output is touched
// (experiments/sweep/axis_rule.h applies it, for every kind alike; a value that fails is bad
// input: exit code 2 naming the study, the axis and the value):
//   kInt:    a 64-bit integer in [min, max] (default [0, 2^31 - 1]: a count or size that fits
//            the int32 the kernels take); a power of two when pow2 (0 too when min is 0);
//   kFloat:  a finite number in [lo, hi] (default [0, +inf)), lo itself excluded when lo_open;
//   kEnum:   one of `choices` ("all" expands to them);
//   kString: non-empty, printable;
//   and `check`, when set: "" or why the value is not allowed (a name that must exist, ...).
// Kinds declare their ranges with the chained setters:
//   AxisSpec{"block_size", AxisType::kInt, "16", {}, "tokens per page"}.range(1, 1 << 20)
struct AxisSpec {
  AxisSpec() = default;
  AxisSpec(std::string name_, AxisType type_, std::string default_value_,
           std::vector<std::string> choices_ = {}, std::string doc_ = "",
           std::vector<std::pair<std::string, std::string>> aliases_ = {})
      : name(std::move(name_)),
        type(type_),
        default_value(std::move(default_value_)),
        choices(std::move(choices_)),
        doc(std::move(doc_)),
        aliases(std::move(aliases_)) {}

  std::string name;
  AxisType type = AxisType::kInt;
  std::string default_value;         // used when a study does not list the axis
  std::vector<std::string> choices;  // kEnum: the allowed values ("all" expands to them)
  std::string doc;
  int64_t min = 0;
  int64_t max = std::numeric_limits<int32_t>::max();
  bool pow2 = false;
  // A float axis that declares no range still has a finite one: a value whose text the
  // canonical form would round (2^63 as 9.22e18) is refused, not run as another value.
  double lo = 0, hi = 1e12;
  bool lo_open = false;
  std::function<std::string(const std::string&)> check;

  // kEnum: older spellings a config or the command line may still use, each with the choice it
  // names (the expanded point holds the choice: one spelling in every result file).
  std::vector<std::pair<std::string, std::string>> aliases{};
  bool numeric() const { return type == AxisType::kInt || type == AxisType::kFloat; }
  AxisSpec range(int64_t lo_incl, int64_t hi_incl) const {
    AxisSpec a = *this;
    a.min = lo_incl;
    a.max = hi_incl;
    return a;
  }
  AxisSpec powers_of_two() const {
    AxisSpec a = *this;
    a.pow2 = true;
    return a;
  }
  AxisSpec real_range(double lo_v, double hi_v, bool exclude_lo = false) const {
    AxisSpec a = *this;
    a.lo = lo_v;
    a.hi = hi_v;
    a.lo_open = exclude_lo;
    return a;
  }
  AxisSpec checked_by(std::function<std::string(const std::string&)> f) const {
    AxisSpec a = *this;
    a.check = std::move(f);
    return a;
  }
};

struct MetricSpec {
  std::string name;
  std::string unit;  // "" when dimensionless
  std::string doc;
};

// One sweep point: a bench and one value per declared axis (canonical text).
struct Point {
  int64_t index = 0;  // position in the whole sweep's enumeration (stable for a config)
  std::string study;  // the config section it came from
  std::string kind;   // bench name
  std::vector<std::pair<std::string, std::string>> axes;  // in the bench's axis order

  std::string key() const;  // "study/kind:a=1,b=x": identifies the point across runs
  bool has(const std::string& axis) const;
  const std::string& str(const std::string& axis) const;  // throws for unknown axes
  int64_t integer(const std::string& axis) const;
  double number(const std::string& axis) const;
  std::string describe() const;  // "a=1 b=x"
};

enum class Status { kOk, kSkipped, kFailed };
std::string to_string(Status s);

// A bulk trace stored under /points/<row>/<name>: a table (named columns) or an array.
struct Trace {
  std::string name;
  std::string doc;
  std::vector<std::pair<h5::Table::Column, h5::ColumnData>> columns;  // a table when non-empty
  h5::ColumnData array;  // otherwise an array of this shape
  std::vector<uint64_t> shape;
};

// A 1-D trace of every timed sample (any container of numbers), stored as doubles.
template <typename Samples>
Trace samples_trace(std::string name, std::string doc, const Samples& samples) {
  Trace tr;
  tr.name = std::move(name);
  tr.doc = std::move(doc);
  tr.array = h5::ColumnData::of(std::vector<double>(std::begin(samples), std::end(samples)));
  return tr;
}

struct Record {
  Status status = Status::kOk;
  std::string reason;                                       // why skipped / failed ("" when ok)
  std::vector<std::pair<std::string, double>> metrics;      // summary numbers
  std::vector<std::pair<std::string, std::string>> labels;  // summary strings
  std::vector<Trace> traces;
  double seconds = 0;  // wall time of the whole point (set by the runner)

  void metric(const std::string& name, double v) { metrics.emplace_back(name, v); }
  void label(const std::string& name, const std::string& v) { labels.emplace_back(name, v); }
  static Record skipped(std::string why) {
    Record r;
    r.status = Status::kSkipped;
    r.reason = std::move(why);
    return r;
  }
  static Record failed(std::string why) {
    Record r;
    r.status = Status::kFailed;
    r.reason = std::move(why);
    return r;
  }
};

// The options of the GPU timing harness: a sweep's [timing] section sets them (one struct
// for the config and the harness; reference/core/timing.h states the rules).
using TimingConfig = TimingOptions;

// What a bench may use while running: seeds, timing options and the measured ceilings.
struct RunContext {
  uint64_t seed = 1;
  int cpu_threads = 1;  // CPU threads a point may use (reference computations): cores / workers
  bool timing = true;  // false for `kvlab validate`: check only
  TimingConfig timing_cfg;
  // The run's ceilings R and C (0 when not measured): the ceilings pass's before the first
  // point, raised by the run's own ceiling rows as they come (raise_run_ceiling), so that
  // at the end they are the best valid cold DRAM read / copy of the whole run.
  double read_ceiling_bytes_per_s = 0;
  double copy_ceiling_bytes_per_s = 0;
  // What the ceilings pass alone measured (gpu::bench::measure_ceilings; 0 when not measured).
  double pass_read_ceiling_bytes_per_s = 0;
  double pass_copy_ceiling_bytes_per_s = 0;
  double peak_bytes_per_s = 0;  // datasheet-style figure of the device
  std::string device_name;
  bool device_present = false;
};

class Bench {
 public:
  virtual ~Bench() = default;
  virtual std::string name() const = 0;
  virtual std::string summary() const = 0;
  virtual std::vector<AxisSpec> axes() const = 0;
  virtual std::vector<MetricSpec> metrics() const = 0;
  virtual bool needs_gpu() const { return false; }
  // The version of what the kind computes, part of a sweep's identity: bump it when the same
  // point would now give different numbers, so that --resume and merge do not mix the two.
  virtual std::string version() const { return "1"; }
  // Points with the same non-empty case key share expensive setup that the bench keeps
  // between consecutive points (a device pool and its reference outputs): the worker
  // hand-out gives them to one worker, in sweep order.
  virtual std::string case_key(const Point&) const { return ""; }
  // Bad input that the per-axis rules (AxisSpec) cannot see, because it involves several
  // axes of the point: throws InvalidArgument naming the axes and values. Called for every
  // point before the output file is touched, so bad input ends the run with exit code 2 and
  // nothing written. Cheap checks only (no computation).
  virtual void check_point(const Point&) const {}
  // "" when the point can run, else the reason it cannot (recorded as skipped).
  virtual std::string unsupported_reason(const Point&, const RunContext&) const { return ""; }
  // Runs the point. Bad input throws (InvalidArgument / Unsupported: recorded as failed /
  // skipped); a validation failure returns a Record with status kFailed.
  virtual Record run(const Point& p, RunContext& ctx) = 0;
  // A rough wall-time estimate (for --dry-run and the ETA before the first points finish).
  virtual double estimate_seconds(const Point& p, const RunContext& ctx) const = 0;
};

// The seed of a point's inputs: the run seed (the config's `seed`, --seed) mixed with the
// point's own `seed` axis, so that one run seed gives every point its own inputs and a
// point's inputs change with either. (calibrate/decode_records.cpp recomputes the inputs of
// recorded decode_attention points with it.)
inline uint64_t mix_seed(uint64_t run_seed, int64_t point_seed) {
  return run_seed * 1000003ull + static_cast<uint64_t>(point_seed);
}
// mix_seed of the run and the point's `seed` axis.
inline uint64_t point_seed(const RunContext& ctx, const Point& p) {
  return mix_seed(ctx.seed, p.integer("seed"));
}

// ------------------------------------------------------------------ recording a timing
// Which measured ceiling bounds a timed operation.
enum class CeilingKind {
  kRead,  // the read ceiling R (reads dominate: decode attention, GEMMs, decode steps)
  kCopy,  // the copy ceiling C, counting read + write bytes (append, copies)
};

// The bytes a timed call must move from or to DRAM: its working set and the floor's bytes
// (Q + attended KV + scales + O for decode attention; read + write for an append).
struct TimedBytes {
  double bytes = 0;
  CeilingKind ceiling = CeilingKind::kRead;
};

// Records a timing into `r`, the same columns for every timed kind:
//   statistics   median_us, q1_us, q3_us, rel_iqr, min_us, reps, converged, samples_us (trace)
//   how timed    cold_l2 (1/0), calls_per_sample, flush_bytes, l2_bytes, working_set_bytes,
//                labels `flush` (read_allocate | none | self) and `timing` (one sentence)
//   vs ceiling   bytes_per_s (implied bandwidth: working set / median), ceiling_bytes_per_s,
//                pct_read_ceiling or pct_copy_ceiling, pct_datasheet, floor_us (bytes / ceiling),
//                excess_us (median - floor_us), exceeds_ceiling (1 when even the slower
//                quartile beats the best DRAM bandwidth of the run, max(R, C): no traffic,
//                read, write or mixed, may), timing_valid
// NaN wherever the run measured no ceiling (or the device reports no datasheet figure).
// A cold row that exceeds max(R, C) is no result: the flush left bytes in L2 or the
// ceilings are too low. Such a record becomes failed ("timing invalid: ..."), its numbers kept
// for diagnosis, timing_valid 0. Warm rows may legitimately beat a DRAM ceiling (L2 hits):
// flagged, still valid.
void record_timing(Record* r, const Timing& t, const TimedBytes& b, const RunContext& ctx);
// The metric declarations of record_timing's columns (append them to a bench's metrics()).
std::vector<MetricSpec> timing_metric_specs(CeilingKind ceiling);

// ------------------------------------------------------------------ the run's ceilings
// R (C) is the best valid cold DRAM read (copy) of the run: the ceilings pass before the first
// point, and every ceiling row of the sweep. A ceiling row is a timing of a contiguous read or
// copy kernel (kind bandwidth, order interleaved or ranges: the kernels the pass draws from, or
// any other contiguous one; scattered-granule reads never) that is cold (the flush ran before
// every call), passed its validation, and whose working set is at least
// kCeilingRowMinL2Multiple times the L2 the timing recorded. Such a read streams through L2
// eight times before its first byte is needed again, so neither a flush that failed nor the
// previous call could serve it from L2: when it beats R it shows that the pass measured R low,
// not that the flush failed, and it raises R (at its fast edge, working set / q1 time, the
// edge the pass takes a ceiling at) instead of being recorded as timing invalid. Everything
// else that beats the bound (small working sets, decode rows, peers: L2 could explain it) is
// still judged by record_timing and fails. experiments/peers/run_ceilings.py applies the same
// rule to a result file (for files written before the sweep raised its ceilings).
constexpr double kCeilingRowMinL2Multiple = 8;
// True when a timing of `bytes` is cold and large enough to be a ceiling row.
bool is_ceiling_row_timing(const Timing& t, double bytes);
// For a ceiling row (the caller, the bandwidth kind, vouches for the kernel: contiguous, its
// validation passed): raises ctx's R (b.ceiling kRead) or C (kCopy) to b.bytes / t.q1_us when
// that is higher. Call it before record_timing, so the row is judged against the raised ceiling.
// Returns true when it raised; *from gets the ceiling before.
bool raise_run_ceiling(const Timing& t, const TimedBytes& b, RunContext* ctx, double* from);

}  // namespace kvlab::exp
