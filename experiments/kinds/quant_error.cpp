// quant_error.cpp: bench "quant_error": round-trip error of the block-scaled quantization
// schemes (reference/quant/schemes.h) on synthetic KV (reference/synth/synth.h).
//
// A point quantizes a [tokens, heads, head_dim] tensor with one scheme (a preset, with an
// optional group-size and scale-rule override) and measures the round trip per token
// (a "token" is one (token, head) row of head_dim values, the unit every scheme scales):
// relative L2 mean / p50 / p99 / max, NMSE, max abs error, non-finite outputs, and the
// storage cost (bytes per token-head row, bits per value, scales included).
#include <algorithm>

#include "experiments/bench/table_trace.h"
#include "experiments/kinds/kinds.h"
#include "experiments/kinds/scheme_axes.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "reference/quant/roundtrip.h"
#include "reference/quant/schemes.h"
#include "reference/synth/synth.h"

namespace kvlab::exp {
namespace {

// The scheme text parse_scheme_spec understands: "mxfp4 group=16 rule=ceil_pow2".
std::string scheme_text(const Point& p) {
  return ref::scheme_text(p.str("scheme"), scheme_override(p));
}

class QuantErrorBench : public Bench {
 public:
  std::string name() const override { return "quant_error"; }
  std::string summary() const override {
    return "block-scaled quantization schemes on synthetic KV: per-token relative L2 (mean, p99), "
           "NMSE, bytes";
  }
  std::vector<AxisSpec> axes() const override {
    std::vector<AxisSpec> axes = {{"scheme", AxisType::kEnum, "fp8_e4m3_pt", ref::scheme_names(),
                                   "preset of reference/quant/schemes.h", format_name_aliases()}};
    for (AxisSpec& a : scheme_override_axes(false)) axes.push_back(std::move(a));
    std::vector<AxisSpec> rest = {
        {"dist", AxisType::kEnum, "gaussian", ref::synth_preset_names(),
         "synthetic KV preset of reference/synth"},
        AxisSpec{"tokens", AxisType::kInt, "1024", {}, "tokens"}.range(1, 1 << 24),
        AxisSpec{"heads", AxisType::kInt, "1", {},
                 "KV heads (each (token, head) row is scaled on its own)"}
            .range(1, 1024),
        AxisSpec{"head_dim", AxisType::kInt, "128", {}, "values per (token, head)"}.range(1,
                                                                                       1 << 16),
        AxisSpec{"seed", AxisType::kInt, "0", {}, "input seed (mixed with the run seed)"}.range(
            0, kMaxSeed),
    };
    for (AxisSpec& a : rest) axes.push_back(std::move(a));
    return axes;
  }
  void check_point(const Point& p) const override {
    require_tensor_fits(p, {"tokens", "heads", "head_dim"});
  }
  std::vector<MetricSpec> metrics() const override {
    return {
        {"rel_l2_mean", "", "mean over tokens of ||x' - x|| / ||x||"},
        {"rel_l2_p50", "", "median over tokens of the relative L2 error"},
        {"rel_l2_p99", "", "99th percentile (nearest rank) over tokens of the relative L2 error"},
        {"rel_l2_max", "", "max over tokens of the relative L2 error"},
        {"nmse", "", "||x' - x||^2 / ||x||^2 over the tensor"},
        {"max_abs_err", "", "max |x' - x|"},
        {"nonfinite", "", "decoded values that are NaN/Inf where the input is finite"},
        {"bytes_per_token", "B", "storage bytes per (token, head) row, scales included"},
        {"bits_per_value", "bit", "storage bits per value, scales included"},
        {"scale_group", "",
         "values sharing one scale (0: no scale; tokens*heads*head_dim: per tensor)"}};
  }
  std::string unsupported_reason(const Point& p, const RunContext&) const override {
    try {
      const ref::QuantScheme s = ref::make_scheme(scheme_text(p));
      s.check_cols(p.integer("head_dim"));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  double estimate_seconds(const Point& p, const RunContext&) const override {
    const double n =
        static_cast<double>(p.integer("tokens") * p.integer("heads") * p.integer("head_dim"));
    return 1.5e-7 * n * (p.str("scheme").find("hadamard") != std::string::npos ? 2.0 : 1.0) + 2e-4;
  }
  Record run(const Point& p, RunContext& ctx) override {
    const ref::QuantScheme scheme = ref::make_scheme(scheme_text(p));
    const int64_t tokens = p.integer("tokens");
    const int32_t heads = static_cast<int32_t>(p.integer("heads")),
                  dim = static_cast<int32_t>(p.integer("head_dim"));
    const uint64_t seed = point_seed(ctx, p);
    const std::vector<float> x =
        ref::synth_kv(ref::synth_preset(p.str("dist"), tokens, heads, dim, seed));
    const int64_t rows = tokens * heads;
    const std::vector<float> y = scheme.roundtrip(x.data(), rows, dim);
    const ref::RoundTripStats st = ref::roundtrip_stats(x.data(), y.data(), rows, dim);
    Record r;
    r.metric("rel_l2_mean", st.rel_l2_mean);
    r.metric("rel_l2_p50", st.rel_l2_p50);
    r.metric("rel_l2_p99", st.rel_l2_p99);
    r.metric("rel_l2_max", st.rel_l2_max);
    r.metric("nmse", st.nmse);
    r.metric("max_abs_err", st.max_abs);
    r.metric("nonfinite", static_cast<double>(st.nonfinite));
    const double bpt = scheme.bytes_per_token(dim, rows);
    r.metric("bytes_per_token", bpt);
    r.metric("bits_per_value", 8.0 * bpt / dim);
    double group = 0;
    switch (scheme.spec().granularity) {
      case ref::Granularity::kNone:
        group = 0;
        break;
      case ref::Granularity::kPerTensor:
        group = static_cast<double>(rows * scheme.quantized_cols(dim));
        break;
      case ref::Granularity::kPerToken:
        group = static_cast<double>(scheme.quantized_cols(dim));
        break;
      case ref::Granularity::kPerGroup:
        group = scheme.spec().group_size;
        break;
    }
    r.metric("scale_group", group);
    r.label("granularity", ref::to_string(scheme.spec().granularity));
    r.label("scheme_spec", ref::to_string(scheme.spec()));
    Trace t;
    t.name = "rel_l2_per_token";
    t.doc = "relative L2 error of each (token, head) row [tokens * heads]";
    t.array = h5::ColumnData::of(ref::per_row_rel_l2(x.data(), y.data(), rows, dim));
    r.traces.push_back(std::move(t));
    return r;
  }
};

}  // namespace

std::unique_ptr<Bench> make_quant_error_bench() {
  return std::make_unique<QuantErrorBench>();
}

}  // namespace kvlab::exp
