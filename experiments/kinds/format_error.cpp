// format_error.cpp: bench "format_error": what an element format alone does to KV values.
//
// Each point encodes a synthetic [tokens, head_dim] tensor to one element format with one
// scale for the whole tensor (amax / max finite, or none) through the bit-exact encoders
// of reference/formats/formats.h, decodes it, and reports the error per token. It is the
// baseline that the block-scaled schemes of the quant_error bench improve on.
//
// Inputs (seeded, [tokens, head_dim] float32):
//   gaussian          N(0, 1)
//   laplace           Laplace(0, 1): heavier tails
//   student_t3        Student t with 3 degrees of freedom: rare huge values
//   outlier_channels  N(0, 1) with 4 channels scaled by 50 (the activation outliers of
//                     LLM keys): one scale for everything wastes the format's range
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <random>

#include "experiments/bench/table_trace.h"
#include "experiments/kinds/kinds.h"
#include "reference/core/error.h"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"

namespace kvlab::exp {
namespace {

struct Codec {
  float max_finite;
  int bits;
  float (*round_trip)(float, Saturation);
};

Codec codec(const std::string& f) {
  if (f == "fp8_e4m3")
    return {kE4M3Max, 8, [](float x, Saturation s) { return e4m3_to_float(float_to_e4m3(x, s)); }};
  if (f == "fp8_e5m2")
    return {kE5M2Max, 8, [](float x, Saturation s) { return e5m2_to_float(float_to_e5m2(x, s)); }};
  if (f == "fp4_e2m1")
    return {kE2M1Max, 4, [](float x, Saturation) { return e2m1_to_float(float_to_e2m1(x)); }};
  if (f == "bf16")
    return {fmt_detail::bits_f32(0x7F7F0000u), 16,
            [](float x, Saturation s) { return bf16_bits_to_float(float_to_bf16_bits(x, s)); }};
  if (f == "fp16")
    return {kFP16Max, 16,
            [](float x, Saturation s) { return fp16_bits_to_float(float_to_fp16_bits(x, s)); }};
  throw InvalidArgument("format_error: unknown format '" + f + "'");
}

Eigen::MatrixXf make_input(const std::string& dist, int64_t tokens, int64_t dim, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Eigen::MatrixXf x(tokens, dim);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::exponential_distribution<float> expo(1.0f);
  std::student_t_distribution<float> t3(3.0f);
  std::bernoulli_distribution coin(0.5);
  for (int64_t i = 0; i < tokens; ++i) {
    for (int64_t j = 0; j < dim; ++j) {
      float v;
      if (dist == "gaussian" || dist == "outlier_channels")
        v = normal(rng);
      else if (dist == "laplace")
        v = coin(rng) ? expo(rng) : -expo(rng);
      else if (dist == "student_t3")
        v = t3(rng);
      else
        throw InvalidArgument("format_error: unknown dist '" + dist + "'");
      x(i, j) = v;
    }
  }
  if (dist == "outlier_channels")
    for (int64_t j : {int64_t{3}, dim / 3, dim / 2 + 1, dim - 2})
      x.col(std::min(j, dim - 1)) *= 50.0f;
  return x;
}

class FormatErrorBench : public Bench {
 public:
  std::string name() const override { return "format_error"; }
  std::string summary() const override {
    return "element-format round trip (one tensor-wide scale) on synthetic KV: error per token";
  }
  std::vector<AxisSpec> axes() const override {
    return {
        {"format",
         AxisType::kEnum,
         "fp8_e4m3",
         {"fp8_e4m3", "fp8_e5m2", "fp4_e2m1", "bf16", "fp16"},
         "element format",
         format_name_aliases()},
        {"scaling",
         AxisType::kEnum,
         "amax",
         {"amax", "none"},
         "amax: x / (amax / max_finite); none: x as is"},
        {"saturation",
         AxisType::kEnum,
         "satfinite",
         {"satfinite", "nonsat"},
         "overflow: clamp to max finite, or NaN/Inf"},
        {"dist",
         AxisType::kEnum,
         "gaussian",
         {"gaussian", "laplace", "student_t3", "outlier_channels"},
         "input distribution"},
        AxisSpec{"tokens", AxisType::kInt, "256", {}, "tokens in the tensor"}.range(1, 1 << 24),
        AxisSpec{"head_dim", AxisType::kInt, "128", {}, "values per token"}.range(1, 1 << 16),
        AxisSpec{"seed", AxisType::kInt, "0", {}, "input seed (mixed with the run seed)"}.range(
            0, kMaxSeed),
    };
  }
  void check_point(const Point& p) const override { require_tensor_fits(p, {"tokens", "head_dim"}); }
  std::vector<MetricSpec> metrics() const override {
    return {{"rel_l2_mean", "", "mean over tokens of ||x' - x|| / ||x||"},
            {"rel_l2_p99", "", "99th percentile over tokens of the relative L2 error"},
            {"nmse", "", "||x' - x||^2 / ||x||^2 over the tensor"},
            {"max_abs_err", "", "max |x' - x| (finite pairs)"},
            {"nonfinite_frac", "", "fraction of decoded values that are NaN/Inf"},
            {"bits_per_value", "bit", "storage bits per value (scale included)"},
            {"bytes", "B", "storage bytes of the tensor (scale included)"}};
  }
  double estimate_seconds(const Point& p, const RunContext&) const override {
    return 2e-8 * static_cast<double>(p.integer("tokens") * p.integer("head_dim")) + 1e-4;
  }
  Record run(const Point& p, RunContext& ctx) override {
    const int64_t tokens = p.integer("tokens"), dim = p.integer("head_dim");
    KVLAB_REQUIRE(tokens >= 1 && dim >= 1,
                  "format_error: tokens " << tokens << " and head_dim " << dim << " must be >= 1");
    const Codec c = codec(p.str("format"));
    const Saturation sat =
        p.str("saturation") == "satfinite" ? Saturation::kSatFinite : Saturation::kNonSaturating;
    const uint64_t seed = point_seed(ctx, p);
    const Eigen::MatrixXf x = make_input(p.str("dist"), tokens, dim, seed);
    const float amax = x.cwiseAbs().maxCoeff();
    const float scale = p.str("scaling") == "amax" && amax > 0 ? amax / c.max_finite : 1.0f;
    Eigen::MatrixXf y(tokens, dim);
    int64_t nonfinite = 0;
    for (int64_t i = 0; i < tokens; ++i)
      for (int64_t j = 0; j < dim; ++j) {
        const float v = c.round_trip(x(i, j) / scale, sat) * scale;
        y(i, j) = v;
        nonfinite += std::isfinite(v) ? 0 : 1;
      }
    std::vector<double> rel(tokens);
    double num = 0, den = 0, max_abs = 0;
    for (int64_t i = 0; i < tokens; ++i) {
      double e2 = 0, r2 = 0;
      for (int64_t j = 0; j < dim; ++j) {
        const double d = static_cast<double>(y(i, j)) - x(i, j);
        if (std::isfinite(d)) max_abs = std::max(max_abs, std::fabs(d));
        e2 += d * d;
        r2 += static_cast<double>(x(i, j)) * x(i, j);
      }
      rel[i] = r2 > 0 ? std::sqrt(e2 / r2) : (e2 > 0 ? INFINITY : 0.0);
      num += e2;
      den += r2;
    }
    std::vector<double> sorted = rel;
    std::sort(sorted.begin(), sorted.end());
    double mean = 0;
    for (double r : rel) mean += r;
    mean /= static_cast<double>(tokens);
    const size_t p99 =
        std::min(sorted.size() - 1, static_cast<size_t>(std::ceil(0.99 * sorted.size())) - 1);
    const double bits =
        static_cast<double>(c.bits) + (p.str("scaling") == "amax" ? 32.0 / (tokens * dim) : 0.0);
    Record r;
    r.metric("rel_l2_mean", mean);
    r.metric("rel_l2_p99", sorted[p99]);
    r.metric("nmse", den > 0 ? num / den : 0.0);
    r.metric("max_abs_err", max_abs);
    r.metric("nonfinite_frac", static_cast<double>(nonfinite) / static_cast<double>(tokens * dim));
    r.metric("bits_per_value", bits);
    r.metric("bytes", std::ceil(bits * tokens * dim / 8.0));
    Trace t;
    t.name = "rel_l2_per_token";
    t.doc = "relative L2 error of each token [tokens]";
    t.array = h5::ColumnData::of(rel);
    r.traces.push_back(std::move(t));
    return r;
  }
};

}  // namespace

std::unique_ptr<Bench> make_format_error_bench() {
  return std::make_unique<FormatErrorBench>();
}

}  // namespace kvlab::exp
