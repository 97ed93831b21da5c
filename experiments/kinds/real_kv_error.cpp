// real_kv_error.cpp: bench "real_kv_error": quantization error on a real model's K and V.
//
// The quant_error metrics (reference/quant/roundtrip.h) on the activations a real model
// writes to its KV cache, not on synthetic data: the BF16-KV run of a kvlab model file over the
// first `tokens` tokens of a study text (experiments/model/model_eval.h) gives, per layer, K
// before RoPE, K after RoPE (what kvlab caches) and V, [tokens, kv_heads, head_dim]. A point
// quantizes one of them with one scheme (preset + group size / scale rule / Hadamard override)
// per (token, head) row, as every scheme scales, and measures the round trip:
//   layer = -1: every layer, one row per layer in the trace `layers`, summary metrics over all
//   layers pooled; layer = l: that layer only.
// Per-tensor schemes use the tensor's own amax (a dynamic per-tensor scale over these tokens).
// The trace `channels` holds each channel's max |x| and RMS per layer (the outlier channels
// that make keys hard to quantize, and that a Hadamard rotation spreads).
#include <algorithm>
#include <cmath>

#include "experiments/bench/table_trace.h"
#include "experiments/kinds/kinds.h"
#include "experiments/kinds/scheme_axes.h"
#include "experiments/model/model_eval.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "reference/quant/roundtrip.h"
#include "reference/quant/schemes.h"

namespace kvlab::exp {
namespace {

std::string scheme_text(const Point& p) {
  return ref::scheme_text(p.str("scheme"), scheme_override(p));
}

class RealKvErrorBench : public Bench {
 public:
  std::string name() const override { return "real_kv_error"; }
  std::string summary() const override {
    return "quantization schemes on a real model's K (pre/post RoPE) and V per layer: relative L2, "
           "NMSE, bytes";
  }
  std::vector<AxisSpec> axes() const override {
    std::vector<AxisSpec> axes = {
        {"model",
         AxisType::kString,
         "build/model/smollm2-135m.h5",
         {},
         "kvlab model file (kvlab model import)"},
        {"text", AxisType::kString, "gpl3", {}, "study text of the model file"},
        {"tokens", AxisType::kInt, "512", {}, "tokens of the text run through the model"},
        {"tensor",
         AxisType::kEnum,
         "k_post_rope",
         {"k_pre_rope", "k_post_rope", "v"},
         "which activation: K before RoPE, K after RoPE (cached), V"},
        AxisSpec{"layer", AxisType::kInt, "-1", {},
                 "decoder layer (-1: every layer, one trace row each)"}
            .range(-1, 4096),
        {"scheme", AxisType::kEnum, "fp8_e4m3_pt", ref::scheme_names(),
         "preset of reference/quant/schemes.h", format_name_aliases()},
    };
    for (AxisSpec& a : scheme_override_axes(true)) axes.push_back(std::move(a));
    return axes;
  }
  std::vector<MetricSpec> metrics() const override {
    return {
        {"rel_l2_mean", "", "mean over (token, head) rows of ||x' - x|| / ||x||"},
        {"rel_l2_p50", "", "median over rows of the relative L2 error"},
        {"rel_l2_p99", "", "99th percentile (nearest rank) over rows"},
        {"rel_l2_max", "", "max over rows"},
        {"nmse", "", "||x' - x||^2 / ||x||^2"},
        {"max_abs_err", "", "max |x' - x|"},
        {"nonfinite", "", "decoded values that are NaN/Inf where the input is finite"},
        {"bytes_per_token", "B", "storage bytes per (token, head) row, scales included"},
        {"bits_per_value", "bit", "storage bits per value, scales included"},
        {"amax", "", "max |x| of the input"},
        {"channel_amax_ratio", "",
         "max over channels of max|x| / median over channels of max|x| (outlier channels)"},
        {"layers_measured", "", "layers measured"},
    };
  }
  void check_point(const Point& p) const override {
    check_model_file(p.str("model"), p.str("text"), p.integer("tokens"));
    const DecoderConfig c = read_model_config(p.str("model"));
    const int64_t l = p.integer("layer");
    KVLAB_REQUIRE(l >= -1 && l < c.layers,
                  "layer " << l << " outside [-1, " << c.layers << ") of " << p.str("model"));
  }
  std::string unsupported_reason(const Point& p, const RunContext&) const override {
    if (p.integer("tokens") < 1) return "tokens must be >= 1";
    try {
      ref::make_scheme(scheme_text(p)).check_cols(read_model_config(p.str("model")).head_dim);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  double estimate_seconds(const Point& p, const RunContext&) const override {
    return 0.05 + 2e-6 * p.integer("tokens") * (p.integer("layer") < 0 ? 30 : 1);
  }
  Record run(const Point& p, RunContext&) override {
    const std::shared_ptr<const ModelFile> m = load_model_cached(p.str("model"));
    const DecoderConfig& c = m->config;
    const int tokens = static_cast<int>(p.integer("tokens"));
    const std::shared_ptr<const KvActivations> a = kv_activations(*m, p.str("text"), tokens);
    const std::string tensor = p.str("tensor");
    const auto& per_layer = tensor == "k_pre_rope" ? a->k_pre : (tensor == "v" ? a->v : a->k_post);
    const ref::QuantScheme scheme = ref::make_scheme(scheme_text(p));
    const int D = c.head_dim, kvd = c.kv_dim();
    const int64_t rows = int64_t{tokens} * c.kv_heads;
    std::vector<int> layers;
    if (p.integer("layer") >= 0)
      layers.push_back(static_cast<int>(p.integer("layer")));
    else
      for (int l = 0; l < c.layers; ++l) layers.push_back(l);

    std::vector<float> all_x, all_y;
    std::vector<int64_t> t_layer;
    std::vector<double> t_mean, t_p50, t_p99, t_max, t_nmse, t_amax, t_ratio;
    std::vector<int64_t> ch_layer, ch_index;
    std::vector<double> ch_amax, ch_rms;
    double ratio_max = 0;
    for (int l : layers) {
      const std::vector<float>& x = per_layer[l];
      const std::vector<float> y = scheme.roundtrip(x.data(), rows, D);
      const ref::RoundTripStats st = ref::roundtrip_stats(x.data(), y.data(), rows, D);
      all_x.insert(all_x.end(), x.begin(), x.end());
      all_y.insert(all_y.end(), y.begin(), y.end());
      std::vector<double> amax(kvd, 0.0), ss(kvd, 0.0);
      for (int t = 0; t < tokens; ++t)
        for (int i = 0; i < kvd; ++i) {
          const double v = x[static_cast<size_t>(t) * kvd + i];
          amax[i] = std::max(amax[i], std::fabs(v));
          ss[i] += v * v;
        }
      std::vector<double> sorted = amax;
      std::sort(sorted.begin(), sorted.end());
      const double med = sorted[sorted.size() / 2];
      const double ratio = med > 0 ? sorted.back() / med : 0.0;
      ratio_max = std::max(ratio_max, ratio);
      for (int i = 0; i < kvd; ++i) {
        ch_layer.push_back(l);
        ch_index.push_back(i);
        ch_amax.push_back(amax[i]);
        ch_rms.push_back(std::sqrt(ss[i] / tokens));
      }
      t_layer.push_back(l);
      t_mean.push_back(st.rel_l2_mean);
      t_p50.push_back(st.rel_l2_p50);
      t_p99.push_back(st.rel_l2_p99);
      t_max.push_back(st.rel_l2_max);
      t_nmse.push_back(st.nmse);
      t_amax.push_back(sorted.back());
      t_ratio.push_back(ratio);
    }
    const int64_t all_rows = rows * static_cast<int64_t>(layers.size());
    const ref::RoundTripStats st = ref::roundtrip_stats(all_x.data(), all_y.data(), all_rows, D);
    Record r;
    r.metric("rel_l2_mean", st.rel_l2_mean);
    r.metric("rel_l2_p50", st.rel_l2_p50);
    r.metric("rel_l2_p99", st.rel_l2_p99);
    r.metric("rel_l2_max", st.rel_l2_max);
    r.metric("nmse", st.nmse);
    r.metric("max_abs_err", st.max_abs);
    r.metric("nonfinite", static_cast<double>(st.nonfinite));
    const double bpt = scheme.bytes_per_token(D, all_rows);
    r.metric("bytes_per_token", bpt);
    r.metric("bits_per_value", 8.0 * bpt / D);
    r.metric("amax", *std::max_element(t_amax.begin(), t_amax.end()));
    r.metric("channel_amax_ratio", ratio_max);
    r.metric("layers_measured", static_cast<double>(layers.size()));
    r.label("scheme_spec", ref::to_string(scheme.spec()));
    r.label("model_name", m->name);
    r.label("text_sha256", model_text(*m, p.str("text")).sha256);
    r.traces.push_back(TableTrace("layers", "round-trip error per layer")
                           .add("layer", t_layer)
                           .add("rel_l2_mean", t_mean)
                           .add("rel_l2_p50", t_p50)
                           .add("rel_l2_p99", t_p99)
                           .add("rel_l2_max", t_max)
                           .add("nmse", t_nmse)
                           .add("amax", t_amax, "", "max |x| of the layer's input")
                           .add("channel_amax_ratio", t_ratio, "",
                                "max / median over channels of the channel max |x|")
                           .take());
    r.traces.push_back(
        TableTrace("channels", "per layer and channel (head * head_dim + dim) of the input")
            .add("layer", ch_layer)
            .add("channel", ch_index)
            .add("amax", ch_amax, "", "max |x| over the tokens")
            .add("rms", ch_rms, "", "root mean square over the tokens")
            .take());
    return r;
  }
};

}  // namespace

std::unique_ptr<Bench> make_real_kv_error_bench() {
  return std::make_unique<RealKvErrorBench>();
}

}  // namespace kvlab::exp
