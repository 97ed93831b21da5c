// calibration.cpp: weighted least-squares fit of the roofline to measurements.
#include "sim/cost/calibration.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include "reference/core/error.h"

namespace kvlab::sim {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t n = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n), v.end());
  if (v.size() % 2 == 1) return v[n];
  const double hi = v[n];
  return 0.5 * (hi + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n)));
}

double Calibration::predict(const OpCost& r) const {
  // The bound is the uncalibrated roofline's, as in the fit.
  return fixed_s + (r.bound() == Bound::kMemory ? r.memory_s / mem_efficiency : r.compute_s / compute_efficiency);
}

namespace {

struct Fit {
  double fixed = 0, x_mem = 1, x_comp = 1;
  bool ok = false;
};

// Weighted LS of measured on [1, memory_s * is_mem, compute_s * !is_mem], weights 1/measured
// (relative error). Columns without data are dropped (their coefficient stays 1).
Fit fit(const std::vector<KernelTiming>& recs, const std::vector<size_t>& use) {
  bool any_mem = false, any_comp = false;
  for (size_t i : use) (recs[i].roofline.bound() == Bound::kMemory ? any_mem : any_comp) = true;
  auto solve = [&](bool intercept) {
    const int cols = (intercept ? 1 : 0) + (any_mem ? 1 : 0) + (any_comp ? 1 : 0);
    Eigen::MatrixXd A(static_cast<Eigen::Index>(use.size()), cols);
    Eigen::VectorXd b(static_cast<Eigen::Index>(use.size()));
    for (size_t r = 0; r < use.size(); ++r) {
      const KernelTiming& k = recs[use[r]];
      const double w = 1.0 / k.measured_s;
      const bool mem = k.roofline.bound() == Bound::kMemory;
      int c = 0;
      if (intercept) A(r, c++) = w;
      if (any_mem) A(r, c++) = mem ? k.roofline.memory_s * w : 0.0;
      if (any_comp) A(r, c++) = mem ? 0.0 : k.roofline.compute_s * w;
      b(r) = 1.0;  // measured * w
    }
    Fit f;
    Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(A);
    if (qr.rank() < cols) return f;
    const Eigen::VectorXd x = qr.solve(b);
    int c = 0;
    if (intercept) f.fixed = x(c++);
    if (any_mem) f.x_mem = x(c++);
    if (any_comp) f.x_comp = x(c++);
    f.ok = f.x_mem > 0 && f.x_comp > 0;
    return f;
  };
  // Records that cannot separate a fixed cost from the slope (rank-deficient) are an error
  // upstream; only a determined but negative intercept falls back to fixed = 0.
  Fit f = solve(true);
  if (f.ok && f.fixed < 0) f = solve(false);
  return f;
}

double predict_with(const Fit& f, const OpCost& r) {
  return f.fixed + (r.bound() == Bound::kMemory ? r.memory_s * f.x_mem : r.compute_s * f.x_comp);
}

}  // namespace

Calibration calibrate(const std::vector<KernelTiming>& recs) {
  KVLAB_REQUIRE(recs.size() >= 2, "calibration needs at least 2 timing records, got " << recs.size());
  std::vector<size_t> all(recs.size());
  for (size_t i = 0; i < recs.size(); ++i) {
    all[i] = i;
    KVLAB_REQUIRE(std::isfinite(recs[i].measured_s) && recs[i].measured_s > 0,
                  "calibration record " << i << " ('" << recs[i].label << "'): measured_s " << recs[i].measured_s
                                        << " must be finite and > 0");
    KVLAB_REQUIRE(recs[i].roofline.bytes >= 0 && recs[i].roofline.memory_s >= 0 && recs[i].roofline.compute_s >= 0,
                  "calibration record " << i << " ('" << recs[i].label << "'): negative roofline terms");
  }
  const Fit f = fit(recs, all);
  KVLAB_REQUIRE(f.ok, "calibration: the records do not determine the model (need shapes with different bytes or "
                      "FLOPs, and times that grow with them)");
  Calibration c;
  c.fixed_s = f.fixed;
  c.mem_efficiency = 1.0 / f.x_mem;
  c.compute_efficiency = 1.0 / f.x_comp;
  c.num_records = static_cast<int64_t>(recs.size());
  std::vector<double> e_un, e_in, e_loo;
  for (size_t i = 0; i < recs.size(); ++i) {
    const KernelTiming& k = recs[i];
    (k.roofline.bound() == Bound::kMemory ? c.num_memory_bound : c.num_compute_bound)++;
    const double raw = std::max(k.roofline.memory_s, k.roofline.compute_s) + k.roofline.fixed_s;
    e_un.push_back(std::fabs(raw - k.measured_s) / k.measured_s);
    e_in.push_back(std::fabs(predict_with(f, k.roofline) - k.measured_s) / k.measured_s);
    std::vector<size_t> rest;
    for (size_t j = 0; j < recs.size(); ++j)
      if (j != i) rest.push_back(j);
    const Fit g = fit(recs, rest);
    // A record the others cannot predict (e.g. the only compute-bound one) keeps the
    // uncalibrated error: leave-one-out never borrows the record's own data.
    e_loo.push_back(g.ok ? std::fabs(predict_with(g, k.roofline) - k.measured_s) / k.measured_s : e_un.back());
  }
  c.median_abs_rel_error_uncalibrated = median(e_un);
  c.median_abs_rel_error = median(e_in);
  c.median_abs_rel_error_loo = median(e_loo);
  return c;
}

Calibration calibrate_decode_attention(const GpuSpec& gpu, const std::vector<DecodeAttentionMeasurement>& m,
                                       bool prefer_measured_ceiling) {
  CostModelConfig raw;
  raw.prefer_measured_ceiling = prefer_measured_ceiling;
  std::vector<KernelTiming> recs;
  recs.reserve(m.size());
  for (const auto& x : m) recs.push_back({x.label, decode_attention_cost(gpu, x.shape, raw), x.measured_s});
  return calibrate(recs);
}

CostModelConfig with_decode_attention_calibration(CostModelConfig cfg, const Calibration& c) {
  cfg.attn_fixed_s = c.fixed_s;
  cfg.attn_mem_efficiency = c.mem_efficiency;
  return cfg;
}

FidelityTable decode_attention_fidelity(const GpuSpec& gpu, const CostModelConfig& cfg,
                                        const std::vector<DecodeAttentionMeasurement>& m) {
  FidelityTable t;
  std::vector<double> errs;
  for (size_t i = 0; i < m.size(); ++i) {
    const auto& x = m[i];
    KVLAB_REQUIRE(std::isfinite(x.measured_s) && x.measured_s > 0,
                  "fidelity record " << i << " ('" << x.label << "'): measured_s " << x.measured_s
                                     << " must be finite and > 0");
    const OpCost c = decode_attention_cost(gpu, x.shape, cfg);
    FidelityRow r;
    r.label = x.label;
    r.batch = x.shape.batch;
    r.mean_context = x.shape.batch > 0 ? static_cast<double>(x.shape.total_tokens()) / x.shape.batch : 0;
    r.bytes = c.bytes;
    r.predicted_s = c.seconds;
    r.measured_s = x.measured_s;
    r.rel_error = (c.seconds - x.measured_s) / x.measured_s;
    r.achieved_bytes_per_s = c.bytes / x.measured_s;
    errs.push_back(std::fabs(r.rel_error));
    t.rows.push_back(r);
  }
  t.median_abs_rel_error = median(errs);
  t.max_abs_rel_error = errs.empty() ? 0 : *std::max_element(errs.begin(), errs.end());
  return t;
}

}  // namespace kvlab::sim
