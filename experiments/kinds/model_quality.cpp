// model_quality.cpp: bench "model_quality": what a KV-cache format does to a real model's output.
//
// A point runs the first `context` tokens of a study text of a kvlab model file (written by
// `kvlab model import`) teacher-forced through kvlab's own decode-step code with the KV cache
// stored as the point says, and compares every next-token distribution with the BF16-KV run of
// the same model, text, context and engine (experiments/model/model_eval.h):
//   perplexity and its change (dppl = ppl - ppl_bf16), KL(p_bf16 || q) per position (mean,
//   p50, p99, max), top-1 agreement with the BF16 run, top-1 accuracy on the text, and the
//   cache's storage cost (bytes per token over all layers, K + V, scales included).
// Axes: K and V formats apart (scheme presets; a preset that is a paged cache format, with K =
// V and no override, runs through the paged cache and append_kv: the kernels' path), the group
// size / scale rule / Hadamard override, layers kept in BF16, the pool-scale rule, the context,
// and the engine: the CPU reference (reference/step) or the GPU decode-step executor
// (gpu/runtime; paged formats only, one format for all layers).
#include <algorithm>
#include <cmath>

#include "experiments/bench/table_trace.h"
#include "experiments/device/device.h"
#include "experiments/kinds/kinds.h"
#include "experiments/kinds/scheme_axes.h"
#include "experiments/model/model_eval.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "reference/quant/schemes.h"

namespace kvlab::exp {
namespace {

KvChoice choice_of(const Point& p, int layers) {
  KvChoice c;
  c.k_format = p.str("k_format");
  c.v_format = p.str("v_format");
  const ref::SchemeOverride o = scheme_override(p);
  c.group_size = o.group_size;
  c.scale_rule = o.scale_rule;
  c.hadamard = o.hadamard;
  c.bf16_layers = parse_layer_list(p.str("bf16_layers"), layers);
  c.pool_scale = p.str("pool_scale");
  return c;
}

Engine engine_of(const Point& p) {
  return p.str("engine") == "gpu" ? Engine::kGpu : Engine::kCpu;
}

class ModelQualityBench : public Bench {
 public:
  std::string name() const override { return "model_quality"; }
  std::string summary() const override {
    return "a real model (kvlab model file) teacher-forced on real text with its KV cache in a "
           "format: dPPL, KL vs the BF16-KV run, top-1 agreement, bytes per token";
  }
  std::vector<AxisSpec> axes() const override {
    const std::vector<std::string> schemes = ref::scheme_names();
    std::vector<AxisSpec> axes = {
        {"model",
         AxisType::kString,
         "build/model/smollm2-135m.h5",
         {},
         "kvlab model file (kvlab model import)"},
        {"text", AxisType::kString, "gpl3", {}, "study text of the model file"},
        {"context", AxisType::kInt, "1024", {}, "tokens of the text run (context - 1 predictions)"},
        {"engine",
         AxisType::kEnum,
         "cpu",
         {"cpu", "gpu"},
         "cpu: the CPU reference decode step; gpu: the GPU decode-step executor"},
        {"k_format", AxisType::kEnum, "bf16", schemes, "K storage: scheme preset",
         format_name_aliases()},
        {"v_format", AxisType::kEnum, "bf16", schemes, "V storage: scheme preset",
         format_name_aliases()},
    };
    for (AxisSpec& a : scheme_override_axes(true)) axes.push_back(std::move(a));
    std::vector<AxisSpec> rest = {
        {"bf16_layers",
         AxisType::kString,
         "none",
         {},
         "layers kept in BF16: ids joined by +, 'last', or none (e.g. 0+last)"},
        {"pool_scale",
         AxisType::kEnum,
         "calibrated",
         {"calibrated", "unit"},
         "static pool/tensor scales: RN(amax/max) of the BF16 run's K/V per layer, or 1"},
    };
    for (AxisSpec& a : rest) axes.push_back(std::move(a));
    return axes;
  }
  std::vector<MetricSpec> metrics() const override {
    return {
        {"ppl", "", "perplexity of the text's next tokens with this cache"},
        {"ppl_bf16", "", "perplexity with the BF16 cache (same model, text, context, engine)"},
        {"dppl", "", "ppl - ppl_bf16"},
        {"dppl_rel", "%", "100 dppl / ppl_bf16"},
        {"kld_mean", "nat", "mean over positions of KL(p_bf16 || q)"},
        {"kld_p50", "nat", "median over positions of the KL divergence"},
        {"kld_p99", "nat", "99th percentile (nearest rank) of the KL divergence"},
        {"kld_max", "nat", "max over positions of the KL divergence"},
        {"top1_agree", "", "fraction of positions whose argmax equals the BF16 run's"},
        {"top1_acc", "", "fraction of positions whose argmax is the text's next token"},
        {"top1_acc_bf16", "", "the same for the BF16 run"},
        {"bytes_per_token", "B", "KV-cache bytes per token, all layers, K + V, scales included"},
        {"bytes_per_token_bf16", "B", "the same for the BF16 cache"},
        {"predictions", "", "positions scored (context - 1)"},
        {"run_seconds", "s", "wall time of this configuration's run (baseline excluded)"},
    };
  }
  bool needs_gpu() const override { return false; }  // the gpu engine skips itself
  void check_point(const Point& p) const override {
    check_model_file(p.str("model"), p.str("text"), p.integer("context"));
    parse_layer_list(p.str("bf16_layers"), read_model_config(p.str("model")).layers);
  }
  std::string unsupported_reason(const Point& p, const RunContext& ctx) const override {
    if (p.integer("context") < 2) return "context must be >= 2";
    try {
      const KvChoice c = choice_of(p, read_model_config(p.str("model")).layers);
      (void)needs_tensor_scale(c, read_model_config(p.str("model")).head_dim);
    } catch (const Error& e) {
      return e.what();
    }
    if (engine_of(p) == Engine::kGpu) {
      if (!built_with_cuda()) return "built without CUDA";
      if (!ctx.device_present) return "no device";
    }
    return "";
  }
  double estimate_seconds(const Point& p, const RunContext&) const override {
    // ~15 s per 1k tokens of a 135M model on one core, twice on the first point (baseline)
    const double ctx = static_cast<double>(p.integer("context"));
    return engine_of(p) == Engine::kGpu ? 1.0 + 2e-3 * ctx : 0.5 + 1.5e-2 * ctx;
  }
  Record run(const Point& p, RunContext&) override {
    const std::shared_ptr<const ModelFile> m = load_model_cached(p.str("model"));
    const DecoderConfig& c = m->config;
    const std::string text = p.str("text");
    const int context = static_cast<int>(p.integer("context"));
    const Engine engine = engine_of(p);
    const KvChoice choice = choice_of(p, c.layers);
    // Calibrated scales always come from the CPU reference's BF16 run (one definition for both
    // engines); the baseline distributions from the point's own engine.
    const bool calibrate =
        choice.pool_scale == "calibrated" && needs_tensor_scale(choice, c.head_dim);
    std::shared_ptr<const TeacherForced> amax_run;
    if (calibrate) amax_run = baseline_run(*m, text, context, Engine::kCpu);
    const KvPlan plan = plan_kv(c, choice, amax_run ? amax_run->k_amax : std::vector<float>{},
                                amax_run ? amax_run->v_amax : std::vector<float>{});
    const std::shared_ptr<const TeacherForced> base = baseline_run(*m, text, context, engine);
    const std::vector<int32_t>& tokens = model_text(*m, text).tokens;
    TeacherForced run;
    if (plan.is_baseline) {
      run = *base;  // the configuration is the baseline itself: its own run, KL 0 by definition
      run.kld.assign(run.nll.size(), 0.0);
      run.logprobs.clear();
    } else {
      run = teacher_forced(*m, tokens, context, plan, engine, base.get(), false);
    }
    const QualityStats q = compare_to_baseline(run, *base, tokens);
    const KvPlan bf16_plan = plan_kv(c, KvChoice{}, {}, {});
    Record r;
    r.metric("ppl", q.ppl);
    r.metric("ppl_bf16", q.ppl_base);
    r.metric("dppl", q.dppl);
    r.metric("dppl_rel", q.dppl_rel);
    r.metric("kld_mean", q.kld_mean);
    r.metric("kld_p50", q.kld_p50);
    r.metric("kld_p99", q.kld_p99);
    r.metric("kld_max", q.kld_max);
    r.metric("top1_agree", q.top1_agree);
    r.metric("top1_acc", q.top1_acc);
    r.metric("top1_acc_bf16", q.top1_acc_base);
    r.metric("bytes_per_token", plan.bytes_per_token);
    r.metric("bytes_per_token_bf16", bf16_plan.bytes_per_token);
    r.metric("predictions", static_cast<double>(run.nll.size()));
    r.metric("run_seconds", plan.is_baseline ? base->seconds : run.seconds);
    r.label("kv_path", plan.paged ? "paged:" + to_string(plan.paged_format) : "scheme-coded");
    r.label("k_spec", plan.k_spec);
    r.label("v_spec", plan.v_spec);
    r.label("model_name", m->name);
    r.label("model_slice", m->slice);
    const ModelText& t = model_text(*m, text);
    r.label("text_path", t.path);
    r.label("text_sha256", t.sha256);
    r.label("text_licence", t.licence);
    std::vector<double> agree(run.nll.size());
    for (size_t i = 0; i < agree.size(); ++i) agree[i] = run.top1[i] == base->top1[i];
    r.traces.push_back(TableTrace("positions", "per predicted position i (token i+1 of the text)")
                           .add("nll", run.nll, "nat", "-log q(token i+1)")
                           .add("nll_bf16", base->nll, "nat", "the same with the BF16 cache")
                           .add("kld", run.kld, "nat", "KL(p_bf16 || q) at this position")
                           .add("top1_agree", agree, "", "1 when both argmaxes agree")
                           .take());
    std::vector<int64_t> layer_ids;
    std::vector<std::string> kinds;
    std::vector<double> kscale, vscale;
    for (int l = 0; l < c.layers; ++l) {
      const ref::LayerKvSpec& s = plan.layers[l];
      layer_ids.push_back(l);
      kinds.push_back(s.scheme_coded() ? "scheme" : "paged:" + to_string(s.format));
      kscale.push_back(s.k_scale);
      vscale.push_back(s.v_scale);
    }
    r.traces.push_back(TableTrace("layers", "how each layer stored its K and V")
                           .add("layer", layer_ids)
                           .add_strings("storage", kinds, "paged:<format> or scheme-coded")
                           .add("k_scale", kscale, "", "K pool / tensor scale")
                           .add("v_scale", vscale, "", "V pool / tensor scale")
                           .take());
    return r;
  }
};

}  // namespace

std::unique_ptr<Bench> make_model_quality_bench() {
  return std::make_unique<ModelQualityBench>();
}

}  // namespace kvlab::exp
