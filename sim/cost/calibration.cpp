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
  return fixed_s + (r.bound() == Bound::kMemory ? r.memory_s / mem_efficiency
                                                : r.compute_s / compute_efficiency);
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
  KVLAB_REQUIRE(recs.size() >= 2,
                "calibration needs at least 2 timing records, got " << recs.size());
  std::vector<size_t> all(recs.size());
  for (size_t i = 0; i < recs.size(); ++i) {
    all[i] = i;
    KVLAB_REQUIRE(std::isfinite(recs[i].measured_s) && recs[i].measured_s > 0,
                  "calibration record " << i << " ('" << recs[i].label << "'): measured_s "
                                        << recs[i].measured_s << " must be finite and > 0");
    KVLAB_REQUIRE(
        recs[i].roofline.bytes >= 0 && recs[i].roofline.memory_s >= 0 &&
            recs[i].roofline.compute_s >= 0,
        "calibration record " << i << " ('" << recs[i].label << "'): negative roofline terms");
  }
  const Fit f = fit(recs, all);
  KVLAB_REQUIRE(
      f.ok,
      "calibration: the records do not determine the model (need shapes with different bytes or "
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
    e_loo.push_back(g.ok ? std::fabs(predict_with(g, k.roofline) - k.measured_s) / k.measured_s
                         : e_un.back());
  }
  c.median_abs_rel_error_uncalibrated = median(e_un);
  c.median_abs_rel_error = median(e_in);
  c.median_abs_rel_error_loo = median(e_loo);
  return c;
}

Calibration calibrate_decode_attention(const GpuSpec& gpu,
                                       const std::vector<DecodeAttentionMeasurement>& m,
                                       bool prefer_measured_ceiling) {
  CostModelConfig raw;
  raw.prefer_measured_ceiling = prefer_measured_ceiling;
  std::vector<KernelTiming> recs;
  recs.reserve(m.size());
  for (const auto& x : m)
    recs.push_back({x.label, decode_attention_cost(gpu, x.shape, raw), x.measured_s});
  return calibrate(recs);
}

CostModelConfig with_decode_attention_calibration(CostModelConfig cfg, const Calibration& c) {
  cfg.attn_fixed_s = c.fixed_s;
  cfg.attn_mem_efficiency = c.mem_efficiency;
  return cfg;
}

// ---- the extended decode-attention model (fit_decode_attention_model) ----------------------

namespace {

struct DecodeRec {
  double memory_s = 0;  // uncalibrated roofline: bytes / read ceiling
  double measured_s = 0;
  bool graph = false;
  KvFormat format = KvFormat::kBF16;
};

struct DecodeSol {
  bool ok = false;
  double fixed_eager = 0, fixed_graph = 0;
  bool graph_fitted = false;
  std::map<KvFormat, double> slope;  // 1 / efficiency per format with records
  double pooled_slope = 1;
  double predict(const DecodeRec& r) const {
    const auto it = slope.find(r.format);
    return (r.graph ? fixed_graph : fixed_eager) +
           r.memory_s * (it == slope.end() ? pooled_slope : it->second);
  }
};

// Weighted least squares (weights 1/measured: relative error) over the records in `use`.
// Columns: the overheads (one, or eager and graph), then the slopes (one, or one per format
// present). A negative overhead is fixed at 0 and the rest refitted; a rank-deficient system
// or a non-positive slope gives ok = false.
DecodeSol solve_decode(const std::vector<DecodeRec>& recs, const std::vector<size_t>& use,
                       const DecodeAttentionFitOptions& opt) {
  DecodeSol sol;
  bool any_eager = false, any_graph = false;
  std::vector<KvFormat> formats;
  for (size_t i : use) {
    (recs[i].graph ? any_graph : any_eager) = true;
    if (std::find(formats.begin(), formats.end(), recs[i].format) == formats.end())
      formats.push_back(recs[i].format);
  }
  if (use.empty()) return sol;
  if (!opt.per_format) formats.assign(1, recs[use.front()].format);  // one slope column for all
  const bool split = opt.per_launch && any_eager && any_graph;
  // Overhead columns: 0 = eager (or the only one), 1 = graph (when split).
  std::vector<bool> active = split ? std::vector<bool>{true, true} : std::vector<bool>{true};
  Eigen::VectorXd x;
  std::vector<int> fixed_col(active.size(), -1);
  for (int round = 0; round < 3; ++round) {
    int cols = 0;
    for (size_t k = 0; k < active.size(); ++k) fixed_col[k] = active[k] ? cols++ : -1;
    const int first_slope = cols;
    cols += static_cast<int>(formats.size());
    Eigen::MatrixXd A = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(use.size()), cols);
    const Eigen::VectorXd b = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(use.size()));
    for (size_t r = 0; r < use.size(); ++r) {
      const DecodeRec& d = recs[use[r]];
      const double w = 1.0 / d.measured_s;
      const size_t k = split && d.graph ? 1 : 0;
      if (fixed_col[k] >= 0) A(static_cast<Eigen::Index>(r), fixed_col[k]) = w;
      const size_t f =
          opt.per_format ? static_cast<size_t>(std::find(formats.begin(), formats.end(), d.format) -
                                               formats.begin())
                         : 0;
      A(static_cast<Eigen::Index>(r), first_slope + static_cast<int>(f)) = d.memory_s * w;
    }
    Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(A);
    if (qr.rank() < cols) return sol;
    x = qr.solve(b);
    bool negative = false;
    for (size_t k = 0; k < active.size(); ++k)
      if (fixed_col[k] >= 0 && x(fixed_col[k]) < 0) {
        active[k] = false;
        negative = true;
      }
    if (!negative) {
      const auto fixed_of = [&](size_t k) { return fixed_col[k] >= 0 ? x(fixed_col[k]) : 0.0; };
      sol.fixed_eager = fixed_of(0);
      sol.fixed_graph = split ? fixed_of(1) : sol.fixed_eager;
      sol.graph_fitted = split;
      for (size_t f = 0; f < formats.size(); ++f) {
        const double v = x(first_slope + static_cast<int>(f));
        if (!(v > 0)) return sol;
        sol.slope[formats[f]] = v;
      }
      break;
    }
  }
  if (sol.slope.empty()) return sol;
  if (opt.per_format) {
    // The one slope that best fits every record given the fitted overheads (closed form of
    // the weighted least squares in one unknown).
    double num = 0, den = 0;
    for (size_t i : use) {
      const DecodeRec& d = recs[i];
      const double w2 = 1.0 / (d.measured_s * d.measured_s);
      num += w2 * d.memory_s * (d.measured_s - (d.graph ? sol.fixed_graph : sol.fixed_eager));
      den += w2 * d.memory_s * d.memory_s;
    }
    if (!(den > 0 && num > 0)) return sol;
    sol.pooled_slope = num / den;
  } else {
    sol.pooled_slope = sol.slope.begin()->second;
    sol.slope.clear();
    for (size_t i : use) sol.slope[recs[i].format] = sol.pooled_slope;
  }
  sol.ok = true;
  return sol;
}

double max_of(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

}  // namespace

double DecodeAttentionModelFit::efficiency(KvFormat f) const {
  const auto it = format_efficiency.find(f);
  return it == format_efficiency.end() ? mem_efficiency : it->second;
}

double DecodeAttentionModelFit::predict(const GpuSpec& gpu,
                                        const DecodeAttentionMeasurement& m) const {
  KVLAB_REQUIRE(read_ceiling_bytes_per_s > 0,
                "decode-attention model: not fitted (read ceiling 0)");
  CostModelConfig raw;
  raw.prefer_measured_ceiling = options.prefer_measured_ceiling;
  const double bytes = decode_attention_cost(gpu, m.shape, raw).bytes;
  return (m.launch == LaunchMode::kCudaGraph ? graph_fixed_s : fixed_s) +
         bytes / (read_ceiling_bytes_per_s * efficiency(m.shape.format));
}

DecodeAttentionModelFit fit_decode_attention_model(const GpuSpec& gpu,
                                                   const std::vector<DecodeAttentionMeasurement>& m,
                                                   const DecodeAttentionFitOptions& options) {
  KVLAB_REQUIRE(m.size() >= 2,
                "decode-attention calibration needs at least 2 measurements, got " << m.size());
  CostModelConfig raw;
  raw.prefer_measured_ceiling = options.prefer_measured_ceiling;
  std::vector<DecodeRec> recs(m.size());
  std::vector<size_t> all(m.size());
  DecodeAttentionModelFit fit;
  fit.options = options;
  fit.read_ceiling_bytes_per_s = gpu.read_ceiling(options.prefer_measured_ceiling);
  for (size_t i = 0; i < m.size(); ++i) {
    const auto& x = m[i];
    KVLAB_REQUIRE(std::isfinite(x.measured_s) && x.measured_s > 0,
                  "decode-attention record " << i << " ('" << x.label << "'): measured_s "
                                             << x.measured_s << " must be finite and > 0");
    const OpCost c = decode_attention_cost(gpu, x.shape, raw);
    KVLAB_REQUIRE(c.bound() == Bound::kMemory,
                  "decode-attention record "
                      << i << " ('" << x.label << "') is compute-bound under the roofline ("
                      << c.intensity() << " FLOP/byte): the model covers memory-bound calls");
    recs[i] = {c.memory_s, x.measured_s, x.launch == LaunchMode::kCudaGraph, x.shape.format};
    all[i] = i;
    fit.format_records[x.shape.format] += 1;
    fit.num_graph_records += recs[i].graph ? 1 : 0;
  }
  fit.num_records = static_cast<int64_t>(m.size());
  const DecodeSol sol = solve_decode(recs, all, options);
  KVLAB_REQUIRE(
      sol.ok,
      "decode-attention calibration: the "
          << m.size()
          << " records do not determine the model (each fitted term needs records of different "
             "sizes, and times that grow with the bytes moved)");
  fit.fixed_s = sol.fixed_eager;
  fit.graph_fixed_s = sol.fixed_graph;
  fit.graph_fixed_fitted = sol.graph_fitted;
  fit.mem_efficiency = 1.0 / sol.pooled_slope;
  if (options.per_format)
    for (const auto& [f, v] : sol.slope) fit.format_efficiency[f] = 1.0 / v;
  std::vector<double> e_un, e_in, e_loo;
  std::vector<size_t> rest;
  rest.reserve(m.size());
  for (size_t i = 0; i < m.size(); ++i) {
    const DecodeRec& d = recs[i];
    fit.predicted_s.push_back(sol.predict(d));
    rest.clear();
    for (size_t j = 0; j < m.size(); ++j)
      if (j != i) rest.push_back(j);
    const DecodeSol g = solve_decode(recs, rest, options);
    // A record the others cannot predict keeps the uncalibrated roofline: leave-one-out
    // never borrows the record's own data.
    fit.predicted_loo_s.push_back(g.ok ? g.predict(d) : d.memory_s);
    e_un.push_back(std::fabs(d.memory_s - d.measured_s) / d.measured_s);
    e_in.push_back(std::fabs(fit.predicted_s.back() - d.measured_s) / d.measured_s);
    e_loo.push_back(std::fabs(fit.predicted_loo_s.back() - d.measured_s) / d.measured_s);
  }
  fit.median_abs_rel_error_uncalibrated = median(e_un);
  fit.median_abs_rel_error = median(e_in);
  fit.max_abs_rel_error = max_of(e_in);
  fit.median_abs_rel_error_loo = median(e_loo);
  fit.max_abs_rel_error_loo = max_of(e_loo);
  return fit;
}

CostModelConfig with_decode_attention_calibration(CostModelConfig cfg,
                                                  const DecodeAttentionModelFit& fit,
                                                  const GpuSpec& gpu) {
  KVLAB_REQUIRE(fit.read_ceiling_bytes_per_s > 0 && fit.mem_efficiency > 0,
                "decode-attention calibration: not fitted (read ceiling "
                    << fit.read_ceiling_bytes_per_s << ", efficiency " << fit.mem_efficiency
                    << ")");
  const double target = gpu.read_ceiling(cfg.prefer_measured_ceiling);
  KVLAB_REQUIRE(target > 0, "GPU '" << gpu.name << "' has no read ceiling");
  const double scale = fit.read_ceiling_bytes_per_s / target;
  cfg.attn_fixed_s = fit.fixed_s;
  if (fit.graph_fixed_fitted)
    cfg.attn_graph_fixed_s = fit.graph_fixed_s;
  else
    cfg.attn_graph_fixed_s.reset();
  cfg.attn_mem_efficiency = fit.mem_efficiency * scale;
  cfg.attn_format_efficiency.clear();
  for (const auto& [f, e] : fit.format_efficiency)
    cfg.attn_format_efficiency[f] = e / fit.mem_efficiency;
  cfg.validate();
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
    CostModelConfig launch_cfg = cfg;
    launch_cfg.launch = x.launch;
    const OpCost c = decode_attention_cost(gpu, x.shape, launch_cfg);
    FidelityRow r;
    r.label = x.label;
    r.batch = x.shape.batch;
    r.mean_context =
        x.shape.batch > 0 ? static_cast<double>(x.shape.total_tokens()) / x.shape.batch : 0;
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
