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

// Decode attention: the fidelity target of issue #6 (median error <= 10 % on the H100).
struct DecodeAttentionMeasurement {
  std::string label;
  DecodeAttentionShape shape;
  double measured_s = 0;
};
// Fits the decode-attention terms (CostModelConfig::attn_fixed_s, attn_mem_efficiency).
Calibration calibrate_decode_attention(const GpuSpec& gpu, const std::vector<DecodeAttentionMeasurement>& m,
                                       bool prefer_measured_ceiling = true);
// Copies a decode-attention calibration into a cost-model config.
CostModelConfig with_decode_attention_calibration(CostModelConfig cfg, const Calibration& c);

struct FidelityRow {
  std::string label;
  int64_t batch = 0;
  double mean_context = 0;
  double bytes = 0;
  double predicted_s = 0;
  double measured_s = 0;
  double rel_error = 0;              // (predicted - measured) / measured
  double achieved_bytes_per_s = 0;   // bytes / measured
};
struct FidelityTable {
  std::vector<FidelityRow> rows;
  double median_abs_rel_error = 0;
  double max_abs_rel_error = 0;
};
// Predicted (with cfg, e.g. uncalibrated or calibrated) vs measured decode-attention time.
FidelityTable decode_attention_fidelity(const GpuSpec& gpu, const CostModelConfig& cfg,
                                        const std::vector<DecodeAttentionMeasurement>& m);

double median(std::vector<double> v);  // of a copy; 0 for an empty vector

}  // namespace kvlab::sim
