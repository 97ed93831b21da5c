// calibrate_bench.cpp: bench "calibrate": one decode-attention calibration per point
// (calibrate.h). CPU-only: it reads result files written on the GPU machine.
//
// Record: metrics = the fitted terms of both models and the error summary (train:
// in-sample and leave-one-out; test: the --holdout records); labels = the GPU entry, the
// files, the version selection, the ceiling's source; traces:
//   fidelity  one row per record: source file and row, shape axes, bytes, measured and
//             predicted seconds (uncalibrated, pooled, calibrated, leave-one-out), errors
//   formats   one row per KV format of the fit: records, achieved fraction of R, bytes/s
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "experiments/calibrate/calibrate.h"
#include "experiments/bench/table_trace.h"
#include "experiments/sweep/expr.h"
#include "experiments/sweep/values.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"

namespace kvlab::exp {
namespace {

CalibrateRequest request_of(const Point& p) {
  CalibrateRequest r;
  for (const auto& f : split(p.str("results"), '+')) {
    const std::string t = trim(f);
    if (t.empty())
      throw InvalidArgument("results '" + p.str("results") +
                            "': an empty file name (files are joined by '+')");
    r.files.push_back(t);
  }
  r.gpu = p.str("gpu");
  r.version = p.str("version");
  r.holdout = p.str("holdout");
  if (r.holdout != "none") {  // syntax errors first, with the position
    try {
      Expr::parse(r.holdout);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument("holdout '" + r.holdout + "': " + e.what());
    }
  }
  return r;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

class CalibrateBench : public Bench {
 public:
  std::string name() const override { return "calibrate"; }
  std::string summary() const override {
    return "fit the sim's decode-attention cost model to measured decode_attention timings: "
           "fidelity table "
           "(predicted vs measured, in-sample, leave-one-out, held out)";
  }
  std::vector<AxisSpec> axes() const override {
    return {
        {"results",
         AxisType::kString,
         "data/perf/h100_perf_sweep.h5",
         {},
         "kvlab result files with timed decode_attention points, joined by '+'"},
        {"gpu",
         AxisType::kString,
         "auto",
         {},
         "GPU of data/gpus/gpus.csv (auto: the files' device)"},
        {"version",
         AxisType::kString,
         "best",
         {},
         "decode version to fit (best: the fastest kvlab version per shape)"},
        {"holdout",
         AxisType::kString,
         "none",
         {},
         "test set: an expression over the record axes (e.g. context > 16384); none = "
         "leave-one-out only"},
    };
  }
  std::vector<MetricSpec> metrics() const override {
    return {
        {"records", "", "decode-attention records (shapes) in the table"},
        {"heldout_records", "", "records held out of the fit (--holdout)"},
        {"graph_records", "", "records timed by CUDA-graph replay (fitted)"},
        {"fit_read_ceiling_bytes_per_s", "B/s", "read ceiling R the roofline terms use"},
        {"fixed_us", "us", "calibrated per-call overhead, eager-timed calls"},
        {"graph_fixed_us", "us", "calibrated per-call overhead, CUDA-graph replay"},
        {"graph_fixed_fitted", "",
         "1 when graph_fixed_us was fitted (graph-timed records present)"},
        {"fallback_efficiency", "",
         "calibrated: achieved fraction of R for formats without records"},
        {"pooled_fixed_us", "us", "pooled model (one overhead, one efficiency): overhead"},
        {"pooled_efficiency", "", "pooled model: achieved fraction of R"},
        {"err_uncalibrated_median", "", "fitted records: median |pred - meas| / meas, bytes / R"},
        {"err_uncalibrated_max", "", "fitted records: max error, bytes / R"},
        {"err_pooled_median", "", "fitted records: median error, pooled model, in-sample"},
        {"err_pooled_max", "", "fitted records: max error, pooled model, in-sample"},
        {"err_pooled_loo_median", "", "fitted records: median error, pooled model, leave-one-out"},
        {"err_median", "", "fitted records: median error, calibrated model, in-sample"},
        {"err_max", "", "fitted records: max error, calibrated model, in-sample"},
        {"err_loo_median", "", "fitted records: median error, calibrated model, leave-one-out"},
        {"err_loo_max", "", "fitted records: max error, calibrated model, leave-one-out"},
        {"test_err_uncalibrated_median", "",
         "held-out records: median error, bytes / R (NaN: no holdout)"},
        {"test_err_pooled_median", "", "held-out records: median error, pooled model"},
        {"test_err_median", "", "held-out records: median error, calibrated model"},
        {"test_err_max", "", "held-out records: max error, calibrated model"}};
  }
  // The whole calibration is cheap (milliseconds): running it here turns every bad input
  // (files, GPU, version, holdout, an undetermined fit) into exit code 2 before any output.
  void check_point(const Point& p) const override { run_calibration(request_of(p)); }
  double estimate_seconds(const Point&, const RunContext&) const override { return 0.5; }

  Record run(const Point& p, RunContext&) override {
    const CalibrateResult c = run_calibration(request_of(p));
    const auto& recs = c.selection.records;
    Record r;
    const auto& m = c.model;
    r.metric("records", static_cast<double>(recs.size()));
    r.metric("heldout_records", static_cast<double>(c.test.count));
    r.metric("graph_records", static_cast<double>(m.num_graph_records));
    r.metric("fit_read_ceiling_bytes_per_s", m.read_ceiling_bytes_per_s);
    r.metric("fixed_us", m.fixed_s * 1e6);
    r.metric("graph_fixed_us", m.graph_fixed_s * 1e6);
    r.metric("graph_fixed_fitted", m.graph_fixed_fitted ? 1.0 : 0.0);
    r.metric("fallback_efficiency", m.mem_efficiency);
    r.metric("pooled_fixed_us", c.pooled.fixed_s * 1e6);
    r.metric("pooled_efficiency", c.pooled.mem_efficiency);
    r.metric("err_uncalibrated_median", c.train_uncalibrated.median);
    r.metric("err_uncalibrated_max", c.train_uncalibrated.max);
    r.metric("err_pooled_median", c.train_pooled.median);
    r.metric("err_pooled_max", c.train_pooled.max);
    r.metric("err_pooled_loo_median", c.train_pooled_loo.median);
    r.metric("err_median", c.train.median);
    r.metric("err_max", c.train.max);
    r.metric("err_loo_median", c.train_loo.median);
    r.metric("err_loo_max", c.train_loo.max);
    const bool test = c.test.count > 0;
    r.metric("test_err_uncalibrated_median", test ? c.test_uncalibrated.median : NAN);
    r.metric("test_err_pooled_median", test ? c.test_pooled.median : NAN);
    r.metric("test_err_median", test ? c.test.median : NAN);
    r.metric("test_err_max", test ? c.test.max : NAN);
    r.label("gpu_name", c.gpu.name);
    r.label("device", c.selection.device_name);
    r.label("sources", join(
                           [&] {
                             std::vector<std::string> s;
                             for (const auto& x : recs)
                               if (std::find(s.begin(), s.end(), x.source) == s.end())
                                 s.push_back(x.source);
                             return s;
                           }(),
                           " + "));
    r.label("selection", p.str("version") == "best"
                             ? "fastest of " + join(c.selection.versions, ", ") + " per shape"
                             : "version " + p.str("version"));
    r.label("ceiling_source", c.ceiling_source);
    r.label(
        "model",
        "calibrated: fixed(eager | graph) + bytes / (R * efficiency(kv_format)); pooled: fixed + "
        "bytes / (R * efficiency); uncalibrated: bytes / R");

    std::vector<std::string> label, source, study, version, layout, fmt, lengths, graph;
    std::vector<int64_t> row, repeats, batch, context, head_dim, kv_heads, group, block, heldout;
    std::vector<double> mean_ctx, min_bytes, meas, err_un, err_po, err, err_loo, achieved, pct;
    for (size_t i = 0; i < recs.size(); ++i) {
      const DecodeRecord& d = recs[i];
      const auto& s = d.m.shape;
      label.push_back(d.m.label);
      source.push_back(d.source);
      study.push_back(d.study);
      version.push_back(d.version);
      layout.push_back(d.layout);
      fmt.push_back(to_string(s.format));
      lengths.push_back(d.lengths);
      graph.push_back(d.graph ? "on" : "off");
      row.push_back(d.row);
      repeats.push_back(d.repeats);
      batch.push_back(s.batch);
      context.push_back(d.context);
      head_dim.push_back(s.head_dim);
      kv_heads.push_back(s.num_kv_heads);
      group.push_back(s.num_qo_heads / s.num_kv_heads);
      block.push_back(s.block_size);
      heldout.push_back(c.heldout[i] ? 1 : 0);
      mean_ctx.push_back(
          s.batch > 0 ? static_cast<double>(s.total_tokens()) / static_cast<double>(s.batch) : 0.0);
      min_bytes.push_back(d.min_bytes);
      const double t = d.m.measured_s;
      meas.push_back(t);
      err_un.push_back((c.predicted_uncalibrated[i] - t) / t);
      err_po.push_back((c.predicted_pooled[i] - t) / t);
      err.push_back((c.predicted[i] - t) / t);
      err_loo.push_back((c.predicted_loo[i] - t) / t);
      achieved.push_back(c.bytes[i] / t);
      pct.push_back(100.0 * c.bytes[i] / t / m.read_ceiling_bytes_per_s);
    }
    TableTrace fid(
        "fidelity",
        "predicted vs measured decode-attention time, one row per record (shape and version); "
        "errors are (predicted - measured) / measured");
    fid.add_strings("label", label)
        .add_strings("source", source, "result file of the measurement")
        .add("row", row, "", "its /index row (the first of repeated measurements)")
        .add("repeats", repeats, "", "measurements of this shape and version (median taken)")
        .add_strings("study", study)
        .add_strings("version", version)
        .add_strings("layout", layout)
        .add_strings("kv_format", fmt)
        .add_strings("lengths", lengths)
        .add_strings("graph", graph, "on: timed by CUDA-graph replay")
        .add("batch", batch)
        .add("context", context, "", "the context axis (the longest length for mixed batches)")
        .add("mean_context", mean_ctx, "", "mean attended length")
        .add("head_dim", head_dim)
        .add("num_kv_heads", kv_heads)
        .add("gqa_group", group)
        .add("block_size", block)
        .add("heldout", heldout, "", "1: in the --holdout test set, not fitted")
        .add("bytes", c.bytes, "B", "bytes the sim counts (min_bytes + block table, seq_lens, LSE)")
        .add("min_bytes", min_bytes, "B", "bytes the decode kind counted")
        .add("measured_s", meas, "s", "median time per call")
        .add("predicted_uncalibrated_s", c.predicted_uncalibrated, "s", "bytes / R")
        .add("predicted_pooled_s", c.predicted_pooled, "s", "pooled model")
        .add("predicted_s", c.predicted, "s", "calibrated model")
        .add("predicted_loo_s", c.predicted_loo, "s",
             "calibrated model refitted without this record (NaN: held out)")
        .add("err_uncalibrated", err_un)
        .add("err_pooled", err_po)
        .add("err", err)
        .add("err_loo", err_loo)
        .add("achieved_bytes_per_s", achieved, "B/s", "bytes / measured")
        .add("pct_read_ceiling", pct, "%", "achieved / R");
    r.traces.push_back(fid.take());

    std::vector<std::string> f_name;
    std::vector<int64_t> f_recs;
    std::vector<double> f_eff, f_bw;
    for (const auto& [f, n] : m.format_records) {
      f_name.push_back(to_string(f));
      f_recs.push_back(n);
      f_eff.push_back(m.efficiency(f));
      f_bw.push_back(m.efficiency(f) * m.read_ceiling_bytes_per_s);
    }
    TableTrace fmts("formats", "calibrated achieved bandwidth per KV format (fitted records)");
    fmts.add_strings("kv_format", f_name)
        .add("records", f_recs)
        .add("efficiency", f_eff, "", "achieved fraction of the read ceiling R")
        .add("bytes_per_s", f_bw, "B/s", "efficiency * R");
    r.traces.push_back(fmts.take());
    return r;
  }
};

}  // namespace

std::unique_ptr<Bench> make_calibrate_bench() {
  return std::make_unique<CalibrateBench>();
}

}  // namespace kvlab::exp
