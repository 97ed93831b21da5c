// test_driver_calibrate_model.cpp: the decode-attention model behind `kvlab calibrate`
// (sim/cost: fit_decode_attention_model, the CostModelConfig extensions it fills, and
// with_decode_attention_calibration): recovery of known terms from synthetic timings,
// equivalence with the sim's original two-term calibration, leave-one-out semantics,
// compatibility of the defaults, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "reference/core/error.h"
#include "sim/cost/calibration.h"
#include "sim/cost/gpu_spec.h"
#include "sim/cost/roofline.h"
#include "sim/model/model_stack.h"

namespace kvlab::sim {
namespace {

// Synthetic, noise-free timings make the fit exact algebra: only least-squares rounding
// separates it from the truth (the same bound as the sim's own calibration tests).
constexpr double kFitRelTol = 1e-9;

void expect_error_contains(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an InvalidArgument containing '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// The known model the synthetic timings come from.
struct Truth {
  double fixed = 9e-6, graph_fixed = 7e-6;
  double eff_bf16 = 0.95, eff_fp8 = 0.88, eff_nvfp4 = 0.45;
  double eff(KvFormat f) const {
    return f == KvFormat::kBF16 ? eff_bf16 : f == KvFormat::kFP8E4M3 ? eff_fp8 : eff_nvfp4;
  }
};

DecodeAttentionShape shape(KvFormat f, int64_t batch, int64_t ctx) {
  DecodeAttentionShape s;
  s.batch = batch;
  s.context = ctx;
  s.num_qo_heads = 32;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  s.block_size = 16;
  s.format = f;
  s.write_lse = true;
  return s;
}

double memory_s(const GpuSpec& gpu, const DecodeAttentionShape& s) {
  return decode_attention_cost(gpu, s, CostModelConfig{}).memory_s;
}

std::vector<DecodeAttentionMeasurement> synthetic(const GpuSpec& gpu, const Truth& t,
                                                  const std::vector<KvFormat>& formats,
                                                  bool with_graph) {
  std::vector<DecodeAttentionMeasurement> m;
  for (KvFormat f : formats)
    for (int64_t batch : {1, 7, 64})
      for (int64_t ctx : {509, 4096, 32768}) {
        DecodeAttentionMeasurement x;
        x.shape = shape(f, batch, ctx);
        x.label = std::to_string(static_cast<int>(f)) + "_b" + std::to_string(batch) + "_c" +
                  std::to_string(ctx);
        x.measured_s = t.fixed + memory_s(gpu, x.shape) / t.eff(f);
        m.push_back(x);
      }
  if (with_graph)
    for (int64_t ctx : {512, 1024, 3001}) {
      DecodeAttentionMeasurement x;
      x.shape = shape(KvFormat::kBF16, 1, ctx);
      x.launch = LaunchMode::kCudaGraph;
      x.label = "graph_c" + std::to_string(ctx);
      x.measured_s = t.graph_fixed + memory_s(gpu, x.shape) / t.eff_bf16;
      m.push_back(x);
    }
  return m;
}

TEST(CalibrateModel, RecoversOverheadsAndPerFormatEfficiencies) {
  const GpuSpec h100 = gpu_spec("H100");
  const Truth t;
  const auto m = synthetic(h100, t, {KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kNVFP4}, true);
  const DecodeAttentionModelFit f = fit_decode_attention_model(h100, m);
  EXPECT_NEAR(f.fixed_s, t.fixed, t.fixed * kFitRelTol);
  EXPECT_TRUE(f.graph_fixed_fitted);
  EXPECT_NEAR(f.graph_fixed_s, t.graph_fixed, t.graph_fixed * kFitRelTol);
  ASSERT_EQ(f.format_efficiency.size(), 3u);
  for (KvFormat k : {KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kNVFP4})
    EXPECT_NEAR(f.format_efficiency.at(k), t.eff(k), t.eff(k) * kFitRelTol) << static_cast<int>(k);
  EXPECT_EQ(f.num_records, static_cast<int64_t>(m.size()));
  EXPECT_EQ(f.num_graph_records, 3);
  EXPECT_EQ(f.format_records.at(KvFormat::kBF16), 12);
  EXPECT_EQ(f.format_records.at(KvFormat::kNVFP4), 9);
  EXPECT_DOUBLE_EQ(f.read_ceiling_bytes_per_s, 3.09e12);
  EXPECT_LT(f.median_abs_rel_error, kFitRelTol);
  EXPECT_LT(f.max_abs_rel_error, kFitRelTol);
  EXPECT_LT(f.max_abs_rel_error_loo, kFitRelTol);
  EXPECT_GT(f.median_abs_rel_error_uncalibrated, 0.1);
  // The pooled efficiency lies between the formats' and stands in for unseen formats.
  EXPECT_GT(f.mem_efficiency, t.eff_nvfp4);
  EXPECT_LT(f.mem_efficiency, t.eff_bf16);
  EXPECT_DOUBLE_EQ(f.efficiency(KvFormat::kFP8E5M2), f.mem_efficiency);
  // predict() agrees with the per-record predictions.
  for (size_t i = 0; i < m.size(); ++i)
    EXPECT_NEAR(f.predict(h100, m[i]), f.predicted_s[i], m[i].measured_s * 1e-12);
}

TEST(CalibrateModel, BothOptionsOffIsTheSimsTwoTermCalibration) {
  const GpuSpec h100 = gpu_spec("H100");
  Truth t;
  t.eff_fp8 = t.eff_bf16;  // one efficiency: the two-term model is then exact too
  auto m = synthetic(h100, t, {KvFormat::kBF16, KvFormat::kFP8E4M3}, false);
  DecodeAttentionFitOptions o;
  o.per_format = false;
  o.per_launch = false;
  const DecodeAttentionModelFit f = fit_decode_attention_model(h100, m, o);
  const Calibration c = calibrate_decode_attention(h100, m);
  EXPECT_NEAR(f.fixed_s, c.fixed_s, c.fixed_s * kFitRelTol);
  EXPECT_NEAR(f.mem_efficiency, c.mem_efficiency, kFitRelTol);
  EXPECT_NEAR(f.median_abs_rel_error_loo, c.median_abs_rel_error_loo, kFitRelTol);
  EXPECT_FALSE(f.graph_fixed_fitted);
  EXPECT_TRUE(f.format_efficiency.empty());
  // With different efficiencies per format the pooled fit misses by the spread, the
  // per-format fit does not: the extension's whole point.
  m = synthetic(h100, Truth{}, {KvFormat::kBF16, KvFormat::kNVFP4}, false);
  EXPECT_GT(fit_decode_attention_model(h100, m, o).median_abs_rel_error, 0.1);
  EXPECT_LT(fit_decode_attention_model(h100, m).median_abs_rel_error, kFitRelTol);
}

TEST(CalibrateModel, CostModelConfigCarriesTheFitAndRescalesToAnotherCeiling) {
  const GpuSpec h100 = gpu_spec("H100");
  const auto m = synthetic(h100, Truth{}, {KvFormat::kBF16, KvFormat::kNVFP4}, true);
  const DecodeAttentionModelFit f = fit_decode_attention_model(h100, m);
  const CostModelConfig cfg = with_decode_attention_calibration({}, f, h100);
  ASSERT_TRUE(cfg.attn_graph_fixed_s.has_value());
  const FidelityTable tab = decode_attention_fidelity(h100, cfg, m);
  for (size_t i = 0; i < m.size(); ++i)
    EXPECT_NEAR(tab.rows[i].predicted_s, f.predicted_s[i], m[i].measured_s * 1e-12) << m[i].label;
  EXPECT_LT(tab.max_abs_rel_error, kFitRelTol);
  // The same chip with another measured ceiling (a run's 3.01 TB/s vs the table's 3.09):
  // the calibrated bytes/s, hence the predicted seconds, stay.
  GpuSpec other = h100;
  other.measured_read_bytes_per_s = 3.01e12;
  const CostModelConfig cfg2 = with_decode_attention_calibration({}, f, other);
  EXPECT_NEAR(cfg2.attn_efficiency(KvFormat::kBF16) * 3.01e12,
              cfg.attn_efficiency(KvFormat::kBF16) * 3.09e12, 1.0);
  const FidelityTable tab2 = decode_attention_fidelity(other, cfg2, m);
  for (size_t i = 0; i < m.size(); ++i)
    EXPECT_NEAR(tab2.rows[i].predicted_s, tab.rows[i].predicted_s, m[i].measured_s * 1e-12);
  // A fit without graph records leaves the graph overhead unset (both modes: attn_fixed_s).
  const auto eager_only = synthetic(h100, Truth{}, {KvFormat::kBF16}, false);
  const CostModelConfig cfg3 =
      with_decode_attention_calibration({}, fit_decode_attention_model(h100, eager_only), h100);
  EXPECT_FALSE(cfg3.attn_graph_fixed_s.has_value());
  EXPECT_DOUBLE_EQ(cfg3.attn_fixed(LaunchMode::kCudaGraph), cfg3.attn_fixed(LaunchMode::kEager));
}

TEST(CalibrateModel, DefaultsLeaveTheCostModelUnchanged) {
  CostModelConfig c;
  c.attn_fixed_s = 5e-6;
  c.attn_mem_efficiency = 0.9;
  EXPECT_DOUBLE_EQ(c.attn_fixed(LaunchMode::kCudaGraph), 5e-6);
  EXPECT_DOUBLE_EQ(c.attn_fixed(LaunchMode::kEager), 5e-6);
  for (KvFormat f : {KvFormat::kBF16, KvFormat::kNVFP4, KvFormat::kMXFP4})
    EXPECT_DOUBLE_EQ(c.attn_efficiency(f), 0.9);
  // The step model: a graph overhead changes graph steps only, by (graph - eager) per layer.
  const GpuSpec h100 = gpu_spec("H100");
  const ModelStack model = model_preset("llama3.1-8b");
  StepShape s;
  s.num_decode_seqs = 16;
  s.decode_context_tokens = 16 * 4096;
  s.num_sampled = 16;
  for (LaunchMode mode : {LaunchMode::kEager, LaunchMode::kCudaGraph}) {
    CostModelConfig a = c;
    a.launch = mode;
    CostModelConfig b = a;
    b.attn_graph_fixed_s = 2e-6;
    const double da = CostModel(h100, model, KvFormat::kBF16, a).step(s).attention_s;
    const double db = CostModel(h100, model, KvFormat::kBF16, b).step(s).attention_s;
    if (mode == LaunchMode::kEager)
      EXPECT_DOUBLE_EQ(da, db);
    else
      EXPECT_NEAR(da - db, (5e-6 - 2e-6) * model.num_layers, 1e-15);
  }
  // A format factor scales that format's attention bandwidth only.
  CostModelConfig f = c;
  f.attn_format_efficiency[KvFormat::kNVFP4] = 0.5;
  const DecodeAttentionShape bf = shape(KvFormat::kBF16, 4, 8192),
                             nv = shape(KvFormat::kNVFP4, 4, 8192);
  EXPECT_DOUBLE_EQ(decode_attention_cost(h100, bf, f).memory_s,
                   decode_attention_cost(h100, bf, c).memory_s);
  EXPECT_DOUBLE_EQ(decode_attention_cost(h100, nv, f).memory_s,
                   2 * decode_attention_cost(h100, nv, c).memory_s);
}

TEST(CalibrateModel, LeaveOneOutNeverBorrowsTheRecord) {
  const GpuSpec h100 = gpu_spec("H100");
  const Truth t;
  auto m = synthetic(h100, t, {KvFormat::kBF16}, true);
  DecodeAttentionMeasurement lone;  // the only NVFP4 record
  lone.shape = shape(KvFormat::kNVFP4, 16, 8192);
  lone.label = "lone_nvfp4";
  lone.measured_s = t.fixed + memory_s(h100, lone.shape) / t.eff_nvfp4;
  m.push_back(lone);
  const DecodeAttentionModelFit f = fit_decode_attention_model(h100, m);
  // In-sample its own efficiency is exact; left out, it gets the others' pooled efficiency
  // (bf16's here), which overestimates its bandwidth.
  EXPECT_NEAR(f.format_efficiency.at(KvFormat::kNVFP4), t.eff_nvfp4, t.eff_nvfp4 * kFitRelTol);
  const double want_loo = t.fixed + memory_s(h100, lone.shape) / t.eff_bf16;
  EXPECT_NEAR(f.predicted_loo_s.back(), want_loo, want_loo * kFitRelTol);
  // The graph records: each left out is predicted with the other two's graph overhead.
  for (size_t i = 0; i < m.size(); ++i)
    if (m[i].launch == LaunchMode::kCudaGraph)
      EXPECT_NEAR(f.predicted_loo_s[i], m[i].measured_s, m[i].measured_s * kFitRelTol)
          << m[i].label;
}

TEST(CalibrateModel, NegativeOverheadIsClampedAndBadInputIsNamed) {
  const GpuSpec h100 = gpu_spec("H100");
  Truth t;
  t.fixed = 0;
  t.graph_fixed = 0;
  const DecodeAttentionModelFit f =
      fit_decode_attention_model(h100, synthetic(h100, t, {KvFormat::kBF16}, true));
  EXPECT_GE(f.fixed_s, 0.0);
  EXPECT_GE(f.graph_fixed_s, 0.0);
  EXPECT_NEAR(f.format_efficiency.at(KvFormat::kBF16), t.eff_bf16, t.eff_bf16 * kFitRelTol);

  auto m = synthetic(h100, Truth{}, {KvFormat::kBF16}, false);
  expect_error_contains([&] { fit_decode_attention_model(h100, {m[0]}); },
                        "at least 2 measurements, got 1");
  auto bad = m;
  bad[3].measured_s = NAN;
  expect_error_contains([&] { fit_decode_attention_model(h100, bad); },
                        "record 3 ('0_b7_c509'): measured_s nan");
  expect_error_contains(
      [&] {
        fit_decode_attention_model(h100, {m[0], m[0], m[0]});
      },
      "do not determine the model");
  auto heavy = m;
  heavy[0].shape.num_qo_heads = 8 * 4096;  // GQA group 4096: compute-bound under the roofline
  expect_error_contains([&] { fit_decode_attention_model(h100, heavy); },
                        "('0_b1_c509') is compute-bound");
  CostModelConfig c;
  c.attn_graph_fixed_s = -1e-6;
  expect_error_contains([&] { c.validate(); }, "attn_graph_fixed_s -1e-06 must be finite and >= 0");
  CostModelConfig z;
  z.attn_format_efficiency[KvFormat::kNVFP4] = 0;
  expect_error_contains([&] { z.validate(); }, "attention efficiency factor of nvfp4 is 0");
  expect_error_contains(
      [&] { with_decode_attention_calibration({}, DecodeAttentionModelFit{}, h100); },
      "not fitted");
}

}  // namespace
}  // namespace kvlab::sim
