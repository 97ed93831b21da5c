// model_eval.h: a real model's KV cache under a storage format, measured on real text.
//
// What the real-model kinds (experiments/kinds/real_kv_error.cpp, model_quality.cpp) and
// `kvlab model` share:
//   - KvChoice -> KvPlan: a K format and a V format (quantization scheme presets of
//     reference/quant/schemes.h), a group-size / scale-rule / Hadamard override, layers kept
//     in BF16 and the pool-scale rule, turned into one LayerKvSpec per layer. When K and V use
//     the same preset without overrides and that preset is a paged cache format (bf16, fp16,
//     fp8_e4m3, fp8_e5m2, fp8_e4m3_pt, nvfp4, mxfp4), the plan is
//     the paged cache itself (append_kv + load_k/load_v: the kernels' path, and the only one the
//     GPU executor has); otherwise scheme-coded layers (decode_step.h).
//   - Pool / tensor scales ("calibrated"): per layer, K and V apart, RN(amax / m) of the BF16
//     run's stored K (post-RoPE) and V over the evaluated tokens, m = 448 (E4M3), 57344 (E5M2),
//     6 * 448 (NVFP4's two-level tensor scale); the best case for a static scale, since it saw
//     the very tokens it scales. "unit": 1.0 (vLLM's default k_scale/v_scale).
//   - Teacher forcing: the text's first `context` tokens run through the decoder (the CPU
//     reference in chunks of forward_sequence, or the GPU executor one decode step per token);
//     position i's next-token distribution q_i (log-softmax in double) against the text's token
//     i+1 (negative log-likelihood) and against the BF16-KV run's p_i: KL(p_i || q_i) and
//     whether both argmaxes agree. Perplexity = exp(mean NLL) over the context - 1 predictions.
//   - The BF16-KV baseline of (model, text, context, engine) is computed once per process and
//     kept (its log-probabilities: (context - 1) x vocab floats) for every point that needs it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "experiments/model/model_file.h"
#include "reference/step/decode_step.h"

namespace kvlab::exp {

struct KvChoice {
  std::string k_format = "bf16";  // scheme preset names (reference/quant/schemes.h)
  std::string v_format = "bf16";
  int group_size = 0;                     // 0: the preset's
  std::string scale_rule = "preset";      // or exact, ceil_pow2, ocp_floor, e4m3_rounded
  int hadamard = -1;                      // -1: the preset's; 0: none; n: rotate runs of n values
  std::vector<int> bf16_layers;           // layers stored in BF16 whatever the formats
  std::string pool_scale = "calibrated";  // or "unit"
};

// Parses "none" / "" / "0+1+29" or "0,1,29" (layer ids; "last" = the last layer; '+' is the
// separator inside sweep axis values, where ',' separates values). Throws InvalidArgument.
std::vector<int> parse_layer_list(const std::string& text, int layers);

struct KvPlan {
  std::vector<ref::LayerKvSpec> layers;
  bool paged = false;  // every layer a paged format, one format for all
  KvFormat paged_format = KvFormat::kBF16;
  std::string k_spec, v_spec;  // the schemes' full specs (to_string(SchemeSpec))
  double bytes_per_token = 0;  // K + V storage of all layers, scales included
  bool is_baseline = false;    // every layer BF16 (the reference run itself)
};

// Throws InvalidArgument for unknown presets / overrides the schemes reject for this head_dim.
// k_amax / v_amax: per-layer amax of the BF16 run (for calibrated scales; may be empty when
// no scheme needs a tensor scale).
KvPlan plan_kv(const DecoderConfig& c, const KvChoice& choice, const std::vector<float>& k_amax,
               const std::vector<float>& v_amax);
// Whether the choice needs the calibrated amax (a per-tensor or two-level scheme).
bool needs_tensor_scale(const KvChoice& choice, int head_dim);

// Per-position results of one teacher-forced run (positions 0 .. context - 2, each predicting
// the next token of the text).
struct TeacherForced {
  std::vector<double> nll;            // -log q_i(token i+1)
  std::vector<int32_t> top1;          // argmax of q_i (lowest id on ties)
  std::vector<double> kld;            // KL(p_i || q_i) against the baseline (when one was given)
  std::vector<float> logprobs;        // [context - 1, vocab] (kept only for a baseline)
  std::vector<float> k_amax, v_amax;  // per layer: max |K| (post-RoPE) and |V| before storage
  double seconds = 0;
};

enum class Engine { kCpu, kGpu };
const char* to_string(Engine e);  // "cpu", "gpu"

// Runs the first `context` tokens of `tokens` through the model with the plan (context - 1
// decode positions). baseline: compare each position to it (kld). keep_logprobs: keep every
// position's log-probabilities (to be a baseline). The GPU engine needs a paged plan with one
// format for every layer and a CUDA build and a device (Unsupported otherwise).
TeacherForced teacher_forced(const ModelFile& m, const std::vector<int32_t>& tokens, int context,
                             const KvPlan& plan, Engine engine, const TeacherForced* baseline,
                             bool keep_logprobs);

// The cached BF16-KV baseline of (model file, text, context, engine).
std::shared_ptr<const TeacherForced> baseline_run(const ModelFile& m, const std::string& text,
                                                  int context, Engine engine);

// Summary of a run against its baseline.
struct QualityStats {
  double ppl = 0, ppl_base = 0, dppl = 0, dppl_rel = 0;  // dppl_rel in percent
  double kld_mean = 0, kld_p50 = 0, kld_p99 = 0, kld_max = 0;
  double top1_agree = 0;  // fraction of positions whose argmax equals the baseline's
  double top1_acc = 0, top1_acc_base = 0;  // fraction whose argmax is the text's next token
};
QualityStats compare_to_baseline(const TeacherForced& run, const TeacherForced& base,
                                 const std::vector<int32_t>& tokens);

// The BF16-KV run's K/V activations of `tokens` tokens (CPU reference), per layer
// [tokens, kv_heads * head_dim]: K before RoPE, K after RoPE, V. Cached per (file, text, tokens).
struct KvActivations {
  int tokens = 0;
  std::vector<std::vector<float>> k_pre, k_post, v;
};
std::shared_ptr<const KvActivations> kv_activations(const ModelFile& m, const std::string& text,
                                                    int tokens);

}  // namespace kvlab::exp
