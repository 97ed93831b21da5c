// model_eval.cpp: plans, teacher-forced runs, baselines and K/V activations (see model_eval.h).
#include "experiments/model/model_eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>

#include "experiments/device/device.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "reference/quant/roundtrip.h"
#include "reference/quant/scale_rules.h"

namespace kvlab::exp {
namespace {

constexpr int kChunk = 256;  // rows per forward_sequence call (bounds the logits at 256 x vocab)

// The preset -> paged cache format pairs whose bytes are identical (decode_step.h).
const std::map<std::string, KvFormat>& paged_presets() {
  static const std::map<std::string, KvFormat> m = {
      {"bf16", KvFormat::kBF16},
      {"fp16", KvFormat::kFP16},
      {"fp8_e4m3", KvFormat::kFP8E4M3},
      {"fp8_e5m2", KvFormat::kFP8E5M2},
      {"fp8_e4m3_pt", KvFormat::kFP8E4M3PerToken},
      {"nvfp4", KvFormat::kNVFP4},
      {"mxfp4", KvFormat::kMXFP4},
  };
  return m;
}

bool unscaled(const std::string& preset) {
  return preset == "bf16" || preset == "fp16";
}

// The overrides apply to the scaled formats only: K in BF16 next to V in NVFP4 with group=16
// keeps its plain cast.
std::string scheme_text(const std::string& preset, const KvChoice& c) {
  if (unscaled(preset)) return preset;
  return ref::scheme_text(preset, {c.group_size, c.scale_rule, c.hadamard});
}

bool has_tensor_scale(const ref::SchemeSpec& s) {
  return s.granularity == ref::Granularity::kPerTensor || s.two_level;
}

// The static (pool / tensor) scale a scheme uses from a calibrated amax.
float tensor_scale_for(const ref::SchemeSpec& s, float amax) {
  if (s.two_level) return nvfp4_tensor_scale(amax, s.amax_floor, s.floor_at);
  return fp32_scale_exact(amax, elem_max_finite(s.elem), s.amax_floor, s.floor_at);
}

// Bytes of one (token, head) row of K or V in a paged format.
double paged_row_bytes(KvFormat f, int head_dim) {
  double b = head_dim * kv_format_bits(f) / 8.0;
  if (kv_format_has_token_scales(f)) b += 4.0;
  if (kv_format_has_block_scales(f)) b += static_cast<double>(head_dim) / kv_format_scale_group(f);
  return b;
}

// log-softmax of one row in double: writes lp (float) when given; returns the lse.
double log_softmax(const float* x, int n, float* lp) {
  double m = -INFINITY;
  for (int i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - m);
  const double lse = m + std::log(s);
  if (lp)
    for (int i = 0; i < n; ++i) lp[i] = static_cast<float>(static_cast<double>(x[i]) - lse);
  return lse;
}

// Turns one logits row (position i) into the run's per-position results.
void score_row(const float* logits, int vocab, int i, const std::vector<int32_t>& tokens,
               const TeacherForced* base, bool keep, TeacherForced* out) {
  const double lse = log_softmax(logits, vocab, nullptr);
  out->nll[i] = lse - static_cast<double>(logits[tokens[i + 1]]);
  out->top1[i] = ref::greedy_token(logits, vocab);
  if (keep) {
    float* lp = out->logprobs.data() + static_cast<size_t>(i) * vocab;
    for (int j = 0; j < vocab; ++j)
      lp[j] = static_cast<float>(static_cast<double>(logits[j]) - lse);
  }
  if (base) {
    // KL(p || q) = sum_j p_j (log p_j - log q_j), p the baseline's distribution
    const float* lb = base->logprobs.data() + static_cast<size_t>(i) * vocab;
    double kl = 0;
    for (int j = 0; j < vocab; ++j) {
      const double lbj = lb[j];
      kl += std::exp(lbj) * (lbj - (static_cast<double>(logits[j]) - lse));
    }
    out->kld[i] = std::max(kl, 0.0);  // rounding can leave -1e-17 for identical rows
  }
}

std::vector<int32_t> identity_table(int n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), 0);
  return t;
}

}  // namespace

const char* to_string(Engine e) {
  return e == Engine::kCpu ? "cpu" : "gpu";
}

std::vector<int> parse_layer_list(const std::string& text, int layers) {
  std::vector<int> out;
  if (text.empty() || text == "none") return out;
  std::string norm = text;
  std::replace(norm.begin(), norm.end(), '+', ',');  // '+' inside sweep axis values
  std::stringstream ss(norm);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int l = -1;
    if (item == "last") {
      l = layers - 1;
    } else {
      try {
        size_t used = 0;
        l = std::stoi(item, &used);
        if (used != item.size()) l = -1;
      } catch (const std::exception&) {
        l = -1;
      }
    }
    KVLAB_REQUIRE(l >= 0 && l < layers, "layer list '" << text << "': '" << item
                                                       << "' is not a layer in [0, " << layers
                                                       << ") (or 'last', or 'none')");
    if (std::find(out.begin(), out.end(), l) == out.end()) out.push_back(l);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool needs_tensor_scale(const KvChoice& choice, int head_dim) {
  for (const std::string& p : {choice.k_format, choice.v_format}) {
    const ref::QuantScheme s = ref::make_scheme(scheme_text(p, choice));
    s.check_cols(head_dim);
    if (has_tensor_scale(s.spec())) return true;
  }
  return false;
}

KvPlan plan_kv(const DecoderConfig& c, const KvChoice& choice, const std::vector<float>& k_amax,
               const std::vector<float>& v_amax) {
  KVLAB_REQUIRE(choice.pool_scale == "calibrated" || choice.pool_scale == "unit",
                "pool_scale '" << choice.pool_scale << "' (allowed: calibrated, unit)");
  auto ks = std::make_shared<const ref::QuantScheme>(
      ref::make_scheme(scheme_text(choice.k_format, choice)));
  auto vs = std::make_shared<const ref::QuantScheme>(
      ref::make_scheme(scheme_text(choice.v_format, choice)));
  ks->check_cols(c.head_dim);
  vs->check_cols(c.head_dim);
  const bool calibrated = choice.pool_scale == "calibrated";
  if (calibrated && (has_tensor_scale(ks->spec()) || has_tensor_scale(vs->spec())))
    KVLAB_REQUIRE(
        static_cast<int>(k_amax.size()) == c.layers && static_cast<int>(v_amax.size()) == c.layers,
        "plan_kv: calibrated scales need the per-layer amax of the BF16 run");
  KvPlan plan;
  plan.k_spec = ref::to_string(ks->spec());
  plan.v_spec = ref::to_string(vs->spec());
  const bool overrides =
      choice.group_size != 0 || choice.scale_rule != "preset" || choice.hadamard > 0;
  auto pf = paged_presets().find(choice.k_format);
  const bool paged = choice.k_format == choice.v_format && pf != paged_presets().end() &&
                     (!overrides || unscaled(choice.k_format));
  plan.paged = paged;
  plan.paged_format = paged ? pf->second : KvFormat::kBF16;
  plan.is_baseline = true;
  for (int l = 0; l < c.layers; ++l) {
    const bool keep_bf16 = std::find(choice.bf16_layers.begin(), choice.bf16_layers.end(), l) !=
                           choice.bf16_layers.end();
    ref::LayerKvSpec s;
    double row_bytes = 0;
    if (keep_bf16 || (paged && plan.paged_format == KvFormat::kBF16)) {
      s.format = KvFormat::kBF16;
      row_bytes = 2.0 * paged_row_bytes(KvFormat::kBF16, c.head_dim);
    } else if (paged) {
      s.format = plan.paged_format;
      plan.is_baseline = false;
      if (kv_format_has_pool_scale(s.format) && calibrated) {
        s.k_scale = tensor_scale_for(ks->spec(), k_amax[l]);
        s.v_scale = tensor_scale_for(vs->spec(), v_amax[l]);
      }
      row_bytes = 2.0 * paged_row_bytes(s.format, c.head_dim);
    } else {
      s.k_scheme = ks;
      s.v_scheme = vs;
      plan.is_baseline = false;
      if (calibrated) {
        if (has_tensor_scale(ks->spec())) s.k_scale = tensor_scale_for(ks->spec(), k_amax[l]);
        if (has_tensor_scale(vs->spec())) s.v_scale = tensor_scale_for(vs->spec(), v_amax[l]);
      }
      row_bytes = ks->bytes_per_token(c.head_dim) + vs->bytes_per_token(c.head_dim);
    }
    plan.bytes_per_token += row_bytes * c.kv_heads;
    plan.layers.push_back(std::move(s));
  }
  return plan;
}

TeacherForced teacher_forced(const ModelFile& m, const std::vector<int32_t>& tokens, int context,
                             const KvPlan& plan, Engine engine, const TeacherForced* baseline,
                             bool keep_logprobs) {
  const DecoderConfig& c = m.config;
  KVLAB_REQUIRE(context >= 2 && context <= static_cast<int>(tokens.size()),
                "context " << context << " outside [2, " << tokens.size() << " text tokens]");
  const int n = context - 1, V = c.vocab;
  if (baseline)
    KVLAB_REQUIRE(static_cast<int>(baseline->nll.size()) == n &&
                      baseline->logprobs.size() == static_cast<size_t>(n) * V,
                  "teacher_forced: the baseline covers another context");
  const auto t0 = std::chrono::steady_clock::now();
  TeacherForced out;
  out.nll.assign(n, 0.0);
  out.top1.assign(n, 0);
  if (baseline) out.kld.assign(n, 0.0);
  if (keep_logprobs) out.logprobs.assign(static_cast<size_t>(n) * V, 0.0f);
  out.k_amax.assign(c.layers, 0.0f);
  out.v_amax.assign(c.layers, 0.0f);

  if (engine == Engine::kCpu) {
    ref::StepCacheOptions co;
    co.block_size = 16;
    co.layers = plan.layers;
    ref::DecoderRef r(c, m.weights, co, 1, context);
    r.start(1, identity_table(r.blocks_per_seq()));
    const ref::KvObserver obs = [&](int l, int, int rows, const float*, const float* k,
                                    const float* v, const uint16_t*) {
      for (int64_t i = 0; i < int64_t{rows} * c.kv_dim(); ++i) {
        out.k_amax[l] = std::max(out.k_amax[l], std::fabs(k[i]));
        out.v_amax[l] = std::max(out.v_amax[l], std::fabs(v[i]));
      }
    };
    for (int p0 = 0; p0 < n; p0 += kChunk) {
      const int rows = std::min(kChunk, n - p0);
      r.forward_sequence(std::vector<int32_t>(tokens.begin() + p0, tokens.begin() + p0 + rows),
                         obs);
      const std::vector<float>& lg = r.logits();
      for (int i = 0; i < rows; ++i)
        score_row(lg.data() + static_cast<size_t>(i) * V, V, p0 + i, tokens, baseline,
                  keep_logprobs, &out);
    }
  } else {
    KVLAB_UNSUPPORTED_IF(!built_with_cuda(), "built without CUDA");
    KVLAB_UNSUPPORTED_IF(!plan.paged,
                         "the GPU executor runs paged cache formats only (K and V "
                         "in one paged format, no group/rule/Hadamard override)");
    for (const auto& s : plan.layers)
      KVLAB_UNSUPPORTED_IF(s.format != plan.paged_format,
                           "the GPU executor runs one cache format for every layer (no BF16 "
                           "layers)");
    std::vector<float> k_scales, v_scales;
    for (const auto& s : plan.layers) {
      k_scales.push_back(s.k_scale);
      v_scales.push_back(s.v_scale);
    }
    decode_logits_on_device(c, m.weights, plan.paged_format, k_scales, v_scales, context, tokens, n,
                            [&](int i, const float* lg) {
                              score_row(lg, V, i, tokens, baseline, keep_logprobs, &out);
                            });
    out.k_amax.clear();  // not observable inside the fused kernels
    out.v_amax.clear();
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

std::shared_ptr<const TeacherForced> baseline_run(const ModelFile& m, const std::string& text,
                                                  int context, Engine engine) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const TeacherForced>> cache;
  const std::string key =
      m.path + "|" + text + "|" + std::to_string(context) + "|" + to_string(engine);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  KvChoice bf16;
  const KvPlan plan = plan_kv(m.config, bf16, {}, {});
  auto run = std::make_shared<const TeacherForced>(
      teacher_forced(m, model_text(m, text).tokens, context, plan, engine, nullptr, true));
  // Baselines are (context - 1) x vocab floats: keep the two most recent (one per engine).
  if (cache.size() >= 2) cache.erase(cache.begin());
  cache.emplace(key, run);
  return run;
}

QualityStats compare_to_baseline(const TeacherForced& run, const TeacherForced& base,
                                 const std::vector<int32_t>& tokens) {
  const size_t n = run.nll.size();
  KVLAB_REQUIRE(n > 0 && base.nll.size() == n && run.kld.size() == n,
                "compare_to_baseline: runs of different lengths or without KL");
  QualityStats q;
  double s = 0, sb = 0, k = 0;
  size_t agree = 0, acc = 0, acc_b = 0;
  for (size_t i = 0; i < n; ++i) {
    s += run.nll[i];
    sb += base.nll[i];
    k += run.kld[i];
    agree += run.top1[i] == base.top1[i];
    acc += run.top1[i] == tokens[i + 1];
    acc_b += base.top1[i] == tokens[i + 1];
  }
  q.ppl = std::exp(s / n);
  q.ppl_base = std::exp(sb / n);
  q.dppl = q.ppl - q.ppl_base;
  q.dppl_rel = 100.0 * q.dppl / q.ppl_base;
  q.kld_mean = k / n;
  q.kld_p50 = ref::nearest_rank(run.kld, 0.5);
  q.kld_p99 = ref::nearest_rank(run.kld, 0.99);
  q.kld_max = *std::max_element(run.kld.begin(), run.kld.end());
  q.top1_agree = static_cast<double>(agree) / n;
  q.top1_acc = static_cast<double>(acc) / n;
  q.top1_acc_base = static_cast<double>(acc_b) / n;
  return q;
}

std::shared_ptr<const KvActivations> kv_activations(const ModelFile& m, const std::string& text,
                                                    int tokens) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const KvActivations>> cache;
  const std::string key = m.path + "|" + text + "|" + std::to_string(tokens);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const std::vector<int32_t>& ids = model_text(m, text).tokens;
  const DecoderConfig& c = m.config;
  KVLAB_REQUIRE(tokens >= 1 && tokens <= static_cast<int>(ids.size()),
                "tokens " << tokens << " outside [1, " << ids.size() << " text tokens]");
  auto a = std::make_shared<KvActivations>();
  a->tokens = tokens;
  const size_t per = static_cast<size_t>(tokens) * c.kv_dim();
  a->k_pre.assign(c.layers, std::vector<float>(per));
  a->k_post.assign(c.layers, std::vector<float>(per));
  a->v.assign(c.layers, std::vector<float>(per));
  ref::StepCacheOptions co;
  co.block_size = 16;
  ref::DecoderRef r(c, m.weights, co, 1, tokens);
  r.start(1, identity_table(r.blocks_per_seq()));
  const ref::KvObserver obs = [&](int l, int pos0, int rows, const float* kp, const float* k,
                                  const float* v, const uint16_t*) {
    const size_t off = static_cast<size_t>(pos0) * c.kv_dim(), len = size_t(rows) * c.kv_dim();
    std::copy(kp, kp + len, a->k_pre[l].begin() + off);
    std::copy(k, k + len, a->k_post[l].begin() + off);
    std::copy(v, v + len, a->v[l].begin() + off);
  };
  for (int p0 = 0; p0 < tokens; p0 += kChunk) {
    const int rows = std::min(kChunk, tokens - p0);
    r.forward_sequence(std::vector<int32_t>(ids.begin() + p0, ids.begin() + p0 + rows), obs);
  }
  cache.clear();  // one set at a time (30 layers x 1k tokens x 3 tensors: ~70 MB)
  cache.emplace(key, a);
  return a;
}

}  // namespace kvlab::exp
