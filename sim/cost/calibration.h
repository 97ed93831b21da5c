// calibration.h: fitting the roofline to measured kernel timings, and the fidelity table.
//
// The driver reads measured timings from its HDF5 (shape + median seconds per sweep point)
// and calls these functions; sim never reads HDF5 itself.
//
// Model fitted (weighted least squares on relative error, Eigen):
//     measured ~= fixed_s + memory_s / mem_efficiency      (memory-bound records)
//     measured ~= fixed_s + compute_s / compute_efficiency (compute-bound records)
// where memory_s / compute_s are the uncalibrated roofline terms. A negative fitted fixed_s
// is unphysical: the fit is then redone with fixed_s = 0. Leave-one-out errors are reported
// next to the in-sample ones so that a table never overstates the model.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sim/cost/roofline.h"

namespace kvlab::sim {

// One measured kernel call: its uncalibrated roofline (any *_cost function with the default
// CostModelConfig efficiencies of 1 and no fixed overhead) and the measured seconds.
struct KernelTiming {
  std::string label;
  OpCost roofline;
  double measured_s = 0;
};

struct Calibration {
  double fixed_s = 0;
  double mem_efficiency = 1;      // achieved / ceiling bandwidth (memory-bound records)
  double compute_efficiency = 1;  // achieved / peak rate (compute-bound records; 1 if none)
  int64_t num_records = 0;
  int64_t num_memory_bound = 0;
  int64_t num_compute_bound = 0;
  double median_abs_rel_error_uncalibrated = 0;  // roofline alone
  double median_abs_rel_error = 0;               // calibrated, in-sample
  double median_abs_rel_error_loo = 0;           // calibrated, leave-one-out
  double predict(const OpCost& roofline) const;  // calibrated seconds for an uncalibrated roofline
};

// InvalidArgument when the records cannot determine the model: fewer than 2, a measured
// time that is not finite and > 0, or all memory-bound records with the same bytes.
Calibration calibrate(const std::vector<KernelTiming>& records);

// Decode attention: the cost model's fidelity target is a median |predicted - measured| /
// measured of at most 10 % on the H100 (kvlab calibrate, experiments/calibrate/FIDELITY.md).
struct DecodeAttentionMeasurement {
  std::string label;
  DecodeAttentionShape shape;
  double measured_s = 0;
  // How the call was timed: back-to-back stream launches (eager) or CUDA-graph replay.
  // Only a calibration with a separate graph overhead (attn_graph_fixed_s) tells them apart.
  LaunchMode launch = LaunchMode::kEager;
};
// Fits the decode-attention terms (CostModelConfig::attn_fixed_s, attn_mem_efficiency).
Calibration calibrate_decode_attention(const GpuSpec& gpu,
                                       const std::vector<DecodeAttentionMeasurement>& m,
                                       bool prefer_measured_ceiling = true);
// Copies a decode-attention calibration into a cost-model config.
CostModelConfig with_decode_attention_calibration(CostModelConfig cfg, const Calibration& c);

// The decode-attention model with the compatible extensions of CostModelConfig, fitted by
// weighted least squares on relative error (Eigen), every record memory-bound:
//     measured ~= fixed(launch) + memory_s / efficiency(format)
// memory_s = bytes / read ceiling (the uncalibrated roofline). Options choose the terms:
//   per_launch  separate overheads for eager-timed and graph-replayed calls (needs records
//               of both kinds; without graph records the graph overhead is the eager one);
//   per_format  one efficiency per KV format present (else one pooled efficiency: with
//               both options off this is exactly calibrate_decode_attention's model).
// A negative fitted overhead is unphysical: that overhead is then fixed at 0 and the rest
// refitted. The pooled efficiency (the one slope that best fits every record given the
// fitted overheads) stands in for formats the records do not cover.
struct DecodeAttentionFitOptions {
  bool per_launch = true;
  bool per_format = true;
  bool prefer_measured_ceiling = true;
};

struct DecodeAttentionModelFit {
  DecodeAttentionFitOptions options;
  double read_ceiling_bytes_per_s = 0;  // the ceiling memory_s was computed with
  double fixed_s = 0;                   // per-call overhead, eager-timed calls
  double graph_fixed_s = 0;             // per-call overhead, graph replay (= fixed_s unless fitted)
  bool graph_fixed_fitted = false;
  double mem_efficiency = 1;                     // pooled achieved fraction of the read ceiling
  std::map<KvFormat, double> format_efficiency;  // per format with records (per_format)
  std::map<KvFormat, int64_t> format_records;    // records per format
  int64_t num_records = 0;
  int64_t num_graph_records = 0;
  // Per record, in input order: calibrated prediction, and the prediction of the model
  // refitted without the record (leave-one-out: a record whose format or launch mode no
  // other record has is predicted with the pooled efficiency / the eager overhead).
  std::vector<double> predicted_s;
  std::vector<double> predicted_loo_s;
  double median_abs_rel_error_uncalibrated = 0;
  double median_abs_rel_error = 0;
  double max_abs_rel_error = 0;
  double median_abs_rel_error_loo = 0;
  double max_abs_rel_error_loo = 0;
  double efficiency(KvFormat f) const;  // the format's efficiency, else the pooled one
  double predict(const GpuSpec& gpu, const DecodeAttentionMeasurement& m) const;  // seconds
};

// InvalidArgument when the records cannot determine the model (fewer than 2, a measured
// time that is not finite and > 0, a compute-bound record, all records of one size).
DecodeAttentionModelFit fit_decode_attention_model(const GpuSpec& gpu,
                                                   const std::vector<DecodeAttentionMeasurement>& m,
                                                   const DecodeAttentionFitOptions& options = {});
// Copies the fitted model into a cost-model config for `gpu`. Efficiencies are rescaled by
// fit.read_ceiling / gpu.read_ceiling(cfg.prefer_measured_ceiling), so the calibrated
// bandwidth (bytes/s) is kept when the simulation's ceiling differs from the one the fit
// used (e.g. the table's 3.09 TB/s vs a run's own 3.01 TB/s measurement).
CostModelConfig with_decode_attention_calibration(CostModelConfig cfg,
                                                  const DecodeAttentionModelFit& fit,
                                                  const GpuSpec& gpu);

struct FidelityRow {
  std::string label;
  int64_t batch = 0;
  double mean_context = 0;
  double bytes = 0;
  double predicted_s = 0;
  double measured_s = 0;
  double rel_error = 0;             // (predicted - measured) / measured
  double achieved_bytes_per_s = 0;  // bytes / measured
};
struct FidelityTable {
  std::vector<FidelityRow> rows;
  double median_abs_rel_error = 0;
  double max_abs_rel_error = 0;
};
// Predicted (with cfg, e.g. uncalibrated or calibrated) vs measured decode-attention time.
// Each record is predicted with cfg.launch set to the record's launch mode.
FidelityTable decode_attention_fidelity(const GpuSpec& gpu, const CostModelConfig& cfg,
                                        const std::vector<DecodeAttentionMeasurement>& m);

double median(std::vector<double> v);  // of a copy; 0 for an empty vector

}  // namespace kvlab::sim
