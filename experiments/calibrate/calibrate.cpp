// calibrate.cpp: reading, fitting and predicting (run_calibration; see calibrate.h). The
// bench is calibrate_bench.cpp, the subcommand calibrate_cli.cpp, the read-back for
// simulations calibration_file.cpp.
#include "experiments/calibrate/calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>

#include "experiments/sweep/expr.h"
#include "reference/core/error.h"
#include "sim/core/text.h"

namespace kvlab::exp {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// A results argument: as given when it exists, else data/<rest> through find_data_file
// (so the shipped data/perf files work from any directory).
std::string resolve_results(const std::string& path) {
  if (access(path.c_str(), F_OK) == 0) return path;
  if (path.rfind("data/", 0) == 0) {
    try {
      return sim::find_data_file(path.substr(5));
    } catch (const InvalidArgument&) {
    }
  }
  return path;  // read_file reports it as missing
}

CalibrateResult::Errors errors_of(const std::vector<double>& pred,
                                  const std::vector<DecodeRecord>& recs,
                                  const std::vector<bool>& heldout, bool want_heldout) {
  std::vector<double> e;
  for (size_t i = 0; i < recs.size(); ++i)
    if (heldout[i] == want_heldout && std::isfinite(pred[i]))
      e.push_back(std::fabs(pred[i] - recs[i].m.measured_s) / recs[i].m.measured_s);
  CalibrateResult::Errors out;
  out.count = static_cast<int64_t>(e.size());
  out.median = sim::median(e);
  out.max = e.empty() ? 0 : *std::max_element(e.begin(), e.end());
  return out;
}

// True when the GPU's short name (before the first '-': "H100") is a word of the device
// name ("NVIDIA H100 80GB HBM3"), case-insensitively.
bool device_is(const std::string& device_name, const sim::GpuSpec& g) {
  std::vector<std::string> words;
  std::string w;
  for (char c : lower(device_name) + " ") {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      w += c;
    } else if (!w.empty()) {
      words.push_back(w);
      w.clear();
    }
  }
  const std::string short_name = lower(g.name.substr(0, g.name.find('-')));
  return std::find(words.begin(), words.end(), short_name) != words.end();
}

}  // namespace

const sim::GpuSpec& gpu_for_device(const std::vector<sim::GpuSpec>& table,
                                   const std::string& device_name) {
  for (const auto& g : table)
    if (device_is(device_name, g)) return g;
  std::string known;
  for (const auto& g : table) known += " " + g.name;
  throw InvalidArgument("device '" + device_name + "' is not in the GPU table (known:" + known +
                        "); give --gpu NAME for a table entry of the same chip");
}

CalibrateResult run_calibration(const CalibrateRequest& req) {
  CalibrateResult res;
  std::vector<std::string> files;
  for (const auto& f : req.files) files.push_back(resolve_results(f));
  res.selection = load_decode_records(files, req.version);
  const auto& recs = res.selection.records;
  const std::string& device = res.selection.device_name;

  // The GPU: the table's entry for the files' device (or the named one, which must match).
  const std::vector<sim::GpuSpec> table = sim::load_gpu_table();
  if (req.gpu == "auto") {
    if (device.empty())
      throw InvalidArgument("the files do not name their device: give --gpu NAME");
    res.gpu = gpu_for_device(table, device);
  } else {
    res.gpu = sim::find_gpu(table, req.gpu);
    if (!device.empty() && !device_is(device, res.gpu))
      throw InvalidArgument("--gpu " + req.gpu + " (" + res.gpu.name +
                            ") does not match the device the files were "
                            "measured on ('" +
                            device + "')");
  }
  if (res.selection.read_ceiling_bytes_per_s > 0) {
    res.gpu.measured_read_bytes_per_s = res.selection.read_ceiling_bytes_per_s;
    res.ceiling_source = "the result files' measured read ceiling";
  } else {
    res.ceiling_source = res.gpu.measured_read_bytes_per_s > 0
                             ? "the GPU table's measured read ceiling (the files "
                               "have none)"
                             : "the GPU table's datasheet bandwidth (no measured "
                               "ceiling anywhere)";
  }

  // Train / test split.
  res.heldout.assign(recs.size(), false);
  if (req.holdout != "none") {
    int64_t n = 0;
    try {
      const Expr e = Expr::parse(req.holdout);
      for (size_t i = 0; i < recs.size(); ++i) {
        res.heldout[i] = e.eval([&](const std::string& name) -> ExprValue {
          const DecodeAxisValue v = decode_axis(recs[i], name);
          if (v.numeric) return v.number;
          return v.text;
        });
        n += res.heldout[i] ? 1 : 0;
      }
    } catch (const InvalidArgument& e) {
      throw InvalidArgument("--holdout '" + req.holdout + "': " + e.what());
    }
    if (n == 0)
      throw InvalidArgument("--holdout '" + req.holdout + "' selects none of the " +
                            std::to_string(recs.size()) + " records: nothing to test");
    if (n == static_cast<int64_t>(recs.size()))
      throw InvalidArgument("--holdout '" + req.holdout + "' selects all " +
                            std::to_string(recs.size()) + " records: nothing to fit");
  }
  std::vector<sim::DecodeAttentionMeasurement> train, all;
  std::vector<size_t> train_index(recs.size(), SIZE_MAX);
  for (size_t i = 0; i < recs.size(); ++i) {
    all.push_back(recs[i].m);
    if (!res.heldout[i]) {
      train_index[i] = train.size();
      train.push_back(recs[i].m);
    }
  }
  sim::DecodeAttentionFitOptions pooled_opt;
  pooled_opt.per_launch = false;
  pooled_opt.per_format = false;
  res.pooled = sim::fit_decode_attention_model(res.gpu, train, pooled_opt);
  res.model = sim::fit_decode_attention_model(res.gpu, train, sim::DecodeAttentionFitOptions{});

  // Predictions through the cost model itself (what a simulation uses).
  const sim::CostModelConfig raw;
  const sim::FidelityTable un = sim::decode_attention_fidelity(res.gpu, raw, all);
  const sim::FidelityTable po = sim::decode_attention_fidelity(
      res.gpu, sim::with_decode_attention_calibration(raw, res.pooled, res.gpu), all);
  const sim::FidelityTable ca = sim::decode_attention_fidelity(
      res.gpu, sim::with_decode_attention_calibration(raw, res.model, res.gpu), all);
  for (size_t i = 0; i < recs.size(); ++i) {
    res.bytes.push_back(un.rows[i].bytes);
    res.predicted_uncalibrated.push_back(un.rows[i].predicted_s);
    res.predicted_pooled.push_back(po.rows[i].predicted_s);
    res.predicted.push_back(ca.rows[i].predicted_s);
    const size_t t = train_index[i];
    res.predicted_loo.push_back(t == SIZE_MAX ? NAN : res.model.predicted_loo_s[t]);
    res.predicted_pooled_loo.push_back(t == SIZE_MAX ? NAN : res.pooled.predicted_loo_s[t]);
  }
  res.train_uncalibrated = errors_of(res.predicted_uncalibrated, recs, res.heldout, false);
  res.train_pooled = errors_of(res.predicted_pooled, recs, res.heldout, false);
  res.train_pooled_loo = errors_of(res.predicted_pooled_loo, recs, res.heldout, false);
  res.train = errors_of(res.predicted, recs, res.heldout, false);
  res.train_loo = errors_of(res.predicted_loo, recs, res.heldout, false);
  res.test_uncalibrated = errors_of(res.predicted_uncalibrated, recs, res.heldout, true);
  res.test_pooled = errors_of(res.predicted_pooled, recs, res.heldout, true);
  res.test = errors_of(res.predicted, recs, res.heldout, true);
  return res;
}

}  // namespace kvlab::exp
