// gpu_kinds.cpp: the kinds that run on a GPU, as the driver sees them: axes, metrics, bad-input
// checks, support and time estimates. Each run() hands the point to its GPU half behind the
// CUDA-free experiments/device/device.h, implemented in experiments/cuda/<kind>.cpp (what a
// point validates and times is described there) or, in builds without CUDA, by the stub
// library (the runner records the points as skipped before that).
//   decode_attention  every registered GPU decode version on a paged KV cache
//   append            the append / quantize-on-write kernel per format x layout
//   decode_step       the synthetic decoder's whole step (kinds/decode_step.h)
//   step_gemm         one linear layer of that step vs batch (kinds/decode_step.h)
//   prefill_attention every registered GPU paged chunked-prefill version
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <limits>

#include "experiments/bench/table_trace.h"
#include "experiments/device/device.h"
#include "experiments/kinds/decode_step.h"
#include "experiments/kinds/kinds.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "reference/step/decode_step.h"
#include "reference/step/decoder_config.h"

namespace kvlab::exp {
namespace {

// ---------------------------------------------------------------------------- decode_attention
class DecodeAttentionBench : public Bench {
 public:
  std::string name() const override { return "decode_attention"; }
  std::string summary() const override {
    return "GPU decode attention: every registered version, validated against the reference, timed "
           "(GB/s, % of "
           "the read ceiling)";
  }
  bool needs_gpu() const override { return true; }
  // Every version, split and graph mode of one shape share the device pools and the host
  // reference (built once per case, the costly part of a validation-heavy sweep).
  std::string case_key(const Point& p) const override {
    std::string key;
    for (const auto& [a, v] : p.axes)
      if (a != "version" && a != "graph" && a != "num_splits") key += a + "=" + v + ",";
    return key;
  }
  std::vector<AxisSpec> axes() const override {
    AxisSpec version{
        "version", AxisType::kString, "all", {}, "decode version (gpu/attention registry)"};
    const std::vector<std::string> versions = decode_version_names();
    if (!versions.empty()) {
      version.type = AxisType::kEnum;
      version.choices = versions;
      version.choices.push_back("auto");
      version.default_value = "auto";
      version.doc +=
          " (default: auto, the version and split picked per shape from the calibration table; "
          "all = every version and auto)";
    } else {
      version.doc += " (built without CUDA: any name, recorded as skipped)";
    }
    return {
        {"layout", AxisType::kEnum, "nhd", kv_layout_names(), "KV page layout (kv_layout.h)"},
        {"kv_format", AxisType::kEnum, "bf16", kv_format_names(), "KV storage format",
         format_name_aliases()},
        AxisSpec{"head_dim", AxisType::kInt, "128", {}, "head dimension"}.range(1, 4096),
        AxisSpec{"block_size", AxisType::kInt, "16", {}, "tokens per page"}.range(1, 1 << 16),
        AxisSpec{"num_kv_heads", AxisType::kInt, "8", {}, "KV heads"}.range(1, 1024),
        AxisSpec{"gqa_group", AxisType::kInt, "4", {}, "query heads per KV head"}.range(1, 256),
        AxisSpec{"batch", AxisType::kInt, "1", {}, "sequences"}.range(0, 1 << 20),
        AxisSpec{"context",
         AxisType::kInt,
         "4096",
         {},
         "tokens per sequence (the longest with lengths = mixed)"}.range(0, std::numeric_limits<int32_t>::max()),
        {"lengths",
         AxisType::kEnum,
         "uniform",
         {"uniform", "mixed"},
         "uniform: every sequence `context` tokens; mixed: seeded uniform in [min(1024, context), "
         "context]"},
        {"page_order",
         AxisType::kEnum,
         "shuffled",
         {"shuffled", "sequential"},
         "the pool's pages in the block tables: shuffled (a seeded permutation, as a running "
         "allocator leaves them; what every target is judged on) or sequential (sequence after "
         "sequence in pool order, the most contiguous paged KV: separates the cost of the page "
         "scatter from the kernel's; calibration and the target table skip these rows)"},
        AxisSpec{"seed", AxisType::kInt, "0", {}, "case seed (mixed with the run seed)"}.range(0, kMaxSeed),
        {"graph",
         AxisType::kEnum,
         "off",
         {"off", "on"},
         "time by CUDA-graph replay (launch-bound points; also when [timing] graph = true)"},
        AxisSpec{"num_splits",
         AxisType::kInt,
         "0",
         {},
         "plan knob: forced KV splits per item (v4, v5) or persistent blocks per item (v6); 0: "
         "the version's (or auto's) plan"}.range(0, 1000000),
        version,
    };
  }
  std::vector<MetricSpec> metrics() const override {
    std::vector<MetricSpec> m = {
        {"min_bytes", "B", "Q + attended K/V at storage precision + scales + O"},
        {"max_abs_err", "", "validated outputs: max |gpu - reference|"},
        {"rel_l2", "", "validated outputs: ||gpu - reference|| / ||reference||"},
        {"nmse", "", "validated outputs: normalized MSE"},
        {"max_ulp", "", "validated outputs: max distance in BF16 ULPs"},
        {"violations", "", "validated outputs outside the tolerance table's bound"},
        {"lse_max_abs_err", "", "validated LSE: max |gpu - reference|"},
        {"nonfinite_out", "", "non-finite values in the whole output (every sequence)"},
        {"validated_seqs", "", "sequences compared with the reference"},
        {"guards_intact", "", "1 when the guard regions around O and LSE are untouched"},
        {"picked_version", "", "version = auto: the registry id it ran"},
        {"picked_splits", "", "version = auto: the split it forced (0: the version's plan)"}};
    for (auto& t : timing_metric_specs(CeilingKind::kRead)) m.push_back(std::move(t));
    return m;
  }
  void check_point(const Point& p) const override {
    for (const char* a : {"head_dim", "block_size", "num_kv_heads", "gqa_group"})
      if (p.integer(a) < 1)
        throw InvalidArgument(std::string(a) + " must be >= 1, got " + p.str(a));
    if (p.integer("batch") < 0 || p.integer("context") < 0)
      throw InvalidArgument("batch and context must be >= 0, got " + p.str("batch") + " and " +
                            p.str("context"));
    if (p.integer("context") > INT32_MAX)
      throw InvalidArgument("context " + p.str("context") + " exceeds int32");
    if (p.integer("num_splits") < 0 || p.integer("num_splits") > 1000000)
      throw InvalidArgument("num_splits must be in [0, 1000000] (0: the plan), got " +
                            p.str("num_splits"));
  }
  double estimate_seconds(const Point& p, const RunContext& ctx) const override {
    const double tokens = static_cast<double>(p.integer("batch")) * p.integer("context");
    return 0.05 + 2e-8 * tokens * p.integer("num_kv_heads") +
           std::min(ctx.timing_cfg.max_seconds, 0.3);
  }
  Record run(const Point& p, RunContext& ctx) override {
    return run_decode_attention(p, ctx, &state_);
  }

 private:
  std::unique_ptr<DeviceState> state_;  // the pools of the previous point
};

// ---------------------------------------------------------------------------- append
class AppendBench : public Bench {
 public:
  std::string name() const override { return "append"; }
  std::string summary() const override {
    return "GPU append / quantize-on-write (reshape_and_cache): byte-exact vs the reference, GB/s "
           "vs the copy ceiling";
  }
  bool needs_gpu() const override { return true; }
  std::vector<AxisSpec> axes() const override {
    return {
        {"kv_format", AxisType::kEnum, "bf16", kv_format_names(), "KV storage format",
         format_name_aliases()},
        {"layout", AxisType::kEnum, "nhd", kv_layout_names(), "KV page layout"},
        AxisSpec{"head_dim", AxisType::kInt, "128", {}, "head dimension"}.range(1, 4096),
        AxisSpec{"num_kv_heads", AxisType::kInt, "8", {}, "KV heads"}.range(1, 1024),
        AxisSpec{"block_size", AxisType::kInt, "16", {}, "tokens per page"}.range(1, 1 << 16),
        AxisSpec{"tokens", AxisType::kInt, "65536", {}, "tokens appended per call"}.range(0, std::numeric_limits<int32_t>::max()),
        {"in_dtype", AxisType::kEnum, "bf16", {"bf16", "f16", "f32"}, "dtype of the K/V inputs"},
        AxisSpec{"seed", AxisType::kInt, "0", {}, "input seed (mixed with the run seed)"}.range(0, kMaxSeed),
        {"graph",
         AxisType::kEnum,
         "off",
         {"off", "on"},
         "time by CUDA-graph replay (also when [timing] graph = true)"},
    };
  }
  std::vector<MetricSpec> metrics() const override {
    std::vector<MetricSpec> m = {
        {"append_bytes", "B", "K/V read + slots read + K/V written with scales"},
        {"differing_bytes", "", "pool and scale bytes that differ from the reference (exact: 0)"},
        {"validated_tokens", "", "tokens of the byte-exactness check"}};
    for (auto& t : timing_metric_specs(CeilingKind::kCopy)) m.push_back(std::move(t));
    return m;
  }
  void check_point(const Point& p) const override {
    for (const char* a : {"head_dim", "num_kv_heads", "block_size"})
      if (p.integer(a) < 1)
        throw InvalidArgument(std::string(a) + " must be >= 1, got " + p.str(a));
    if (p.integer("tokens") < 0 || p.integer("tokens") > INT32_MAX)
      throw InvalidArgument("tokens must be in [0, 2^31), got " + p.str("tokens"));
  }
  double estimate_seconds(const Point& p, const RunContext& ctx) const override {
    const double n = static_cast<double>(std::min(p.integer("tokens"), kAppendValidatedTokens)) *
                     p.integer("num_kv_heads") * p.integer("head_dim");
    return 0.05 + 6e-8 * n +
           4e-9 * p.integer("tokens") * p.integer("num_kv_heads") * p.integer("head_dim") +
           std::min(ctx.timing_cfg.max_seconds, 0.3);
  }
  Record run(const Point& p, RunContext& ctx) override { return run_append(p, ctx); }
};

// ---------------------------------------------------------------------------- decode_step
class DecodeStepBench : public Bench {
 public:
  std::string name() const override { return "decode_step"; }
  std::string summary() const override {
    return "full decode step of a synthetic decoder on the GPU: time per variant (eager/fused/CUDA "
           "graph) "
           "vs batch and context, validated vs the eager unfused step and the CPU reference";
  }
  std::vector<AxisSpec> axes() const override {
    return {
        {"preset", AxisType::kEnum, "llama3-8b", decoder_preset_names(),
         "decoder shape (weights synthetic)"},
        AxisSpec{"layers", AxisType::kInt, "0", {}, "decoder layers (0: the preset's)"}.range(0, 1024),
        {"variant",
         AxisType::kEnum,
         "graph_fused",
         {"eager_unfused", "eager_fused", "graph_fused", "graph_unfused"},
         "eager unfused, eager fused, or captured as a CUDA graph per batch bucket"},
        AxisSpec{"batch", AxisType::kInt, "1", {}, "sequences decoding one token each"}.range(1, 65535),
        AxisSpec{"context", AxisType::kInt, "1024", {}, "tokens already in each sequence's cache"}.range(0, 1 << 30),
        {"kv_format", AxisType::kEnum, "bf16", kv_format_names(), "KV-cache storage format",
         format_name_aliases()},
        {"kv_layout", AxisType::kEnum, "nhd", kv_layout_names(), "KV-cache layout"},
        AxisSpec{"block_size", AxisType::kInt, "16", {}, "tokens per cache page"}.range(1, 1 << 16),
        AxisSpec{"top_k", AxisType::kInt, "0", {}, "sampling: 0 greedy, k >= 1 top-k at temperature 1"}.range(0, 1 << 20),
        AxisSpec{"attn_version",
         AxisType::kInt,
         "-1",
         {},
         "decode-attention registry id (-1: the fastest for this shape)"}.range(-1, 1024),
        AxisSpec{"steps", AxisType::kInt, "4", {}, "back-to-back steps per timed sample"}.range(1, 64),
    };
  }
  std::vector<MetricSpec> metrics() const override {
    std::vector<MetricSpec> m = {
        {"step_us", "us", "median time of one decode step (= median_us)"},
        {"step_us_q1", "us", "first quartile (= q1_us)"},
        {"step_us_q3", "us", "third quartile (= q3_us)"},
        {"samples", "", "timed samples (= reps)"},
        {"tokens_per_s", "1/s", "batch / step time"},
        {"weight_bytes", "B", "weights read per step (all but the embedding table)"},
        {"kv_bytes", "B", "KV cache bytes attended per step (storage format, scales included)"},
        {"flops", "FLOP", "GEMM + attention FLOPs of one step"},
        {"predicted_us", "us", "sim cost model: roofline step time, eager or graph launch model"},
        {"predicted_gemm_us", "us", "sim: GEMM part"},
        {"predicted_attention_us", "us", "sim: decode attention part"},
        {"attn_version_used", "", "decode-attention version used (autotuned when the axis is -1)"},
        {"check_max_abs", "", "max |logit - eager unfused logit| at the same state"},
        {"check_nmse", "", "NMSE of the same comparison"},
        {"ref_max_abs", "",
         "max |logit - CPU reference| over a short teacher-forced run from an empty cache"},
        {"ref_nmse", "", "worst per-step NMSE of the same comparison"},
        {"ref_rows", "", "sequences compared with the CPU reference"},
        {"ref_steps", "", "steps compared with the CPU reference"},
        {"bitwise_eager_twin", "",
         "1 when a graph variant's logits equal its eager twin's bitwise (-1: not applicable)"},
    };
    for (auto& t : timing_metric_specs(CeilingKind::kRead)) m.push_back(std::move(t));
    return m;
  }
  bool needs_gpu() const override { return true; }
  std::string unsupported_reason(const Point& p, const RunContext&) const override {
    if (p.integer("batch") < 1 || p.integer("batch") > 65535) return "batch outside [1, 65535]";
    if (p.integer("context") < 0) return "context must be >= 0";
    if (p.integer("steps") < 1 || p.integer("steps") > 64) return "steps outside [1, 64]";
    if (p.integer("block_size") < 1) return "block_size must be >= 1";
    if (p.integer("top_k") < 0) return "top_k must be >= 0";
    return "";
  }
  double estimate_seconds(const Point& p, const RunContext&) const override {
    const DecoderConfig c = decoder_preset(p.str("preset"));
    const double layers = p.integer("layers") > 0 ? double(p.integer("layers")) : c.layers;
    const double bytes =
        2.0 * step_weight_elements(c) * layers / c.layers +
        double(p.integer("batch")) * p.integer("context") * kv_bytes_per_token(c, KvFormat::kBF16);
    return 1.0 + 60 * p.integer("steps") * bytes / 2.5e12;
  }
  Record run(const Point& p, RunContext& ctx) override { return run_decode_step(p, ctx); }
};

// ---------------------------------------------------------------------------- step_gemm
class StepGemmBench : public Bench {
 public:
  std::string name() const override { return "step_gemm"; }
  std::string summary() const override {
    return "one linear layer of the synthetic decoder (cuBLAS, BF16 in, FP32 out) vs batch: the "
           "memory-bound to compute-bound crossover against sim's roofline";
  }
  std::vector<AxisSpec> axes() const override {
    return {
        {"preset", AxisType::kEnum, "llama3-8b", decoder_preset_names(), "decoder shape"},
        AxisSpec{"layers",
         AxisType::kInt,
         "0",
         {},
         "weight copies rotated through (0: the preset's layers)"}.range(0, 1024),
        {"linear",
         AxisType::kEnum,
         "qkv",
         {"qkv", "o", "gate_up", "down", "lm_head"},
         "which linear layer"},
        AxisSpec{"batch", AxisType::kInt, "1", {}, "rows M of the GEMM (sequences in the step)"}.range(1, 65535),
    };
  }
  std::vector<MetricSpec> metrics() const override {
    std::vector<MetricSpec> m = {
        {"time_us", "us", "median time of one GEMM, cold L2 (= median_us)"},
        {"gemm_n", "", "output features N"},
        {"gemm_k", "", "input features K"},
        {"flops", "FLOP", "2 M N K"},
        {"bytes", "B", "weights + input + FP32 output, each once"},
        {"tflops", "TFLOP/s", "achieved"},
        {"intensity", "FLOP/B", "flops / bytes"},
        {"predicted_us", "us", "sim roofline: measured read ceiling, datasheet BF16 rate"},
        {"predicted_us_measured_rate", "us", "sim roofline: measured read ceiling and matrix rate"},
        {"predicted_compute_bound", "", "1 when sim's roofline (datasheet rate) is compute-bound"},
        {"ridge_batch", "", "sim: smallest M that is compute-bound (datasheet rate)"},
        {"ridge_batch_measured_rate", "", "sim: the same with the measured matrix rate"},
        {"matmul_tflops_measured", "TFLOP/s", "8192^3 BF16 GEMM on this device"},
        {"read_ceiling", "B/s", "the run's measured read ceiling"},
    };
    for (auto& t : timing_metric_specs(CeilingKind::kRead)) m.push_back(std::move(t));
    return m;
  }
  bool needs_gpu() const override { return true; }
  std::string unsupported_reason(const Point& p, const RunContext&) const override {
    if (p.integer("batch") < 1 || p.integer("batch") > 65535) return "batch outside [1, 65535]";
    return "";
  }
  double estimate_seconds(const Point&, const RunContext& ctx) const override {
    return 0.5 + 0.5 * ctx.timing_cfg.max_seconds;
  }
  Record run(const Point& p, RunContext& ctx) override { return run_step_gemm(p, ctx); }
};

// ---------------------------------------------------------------------------- prefill_attention
class PrefillAttentionBench : public Bench {
 public:
  std::string name() const override { return "prefill_attention"; }
  std::string summary() const override {
    return "GPU paged chunked-prefill attention versions: validated against the reference, timed";
  }
  std::vector<AxisSpec> axes() const override {
    AxisSpec version{"version", AxisType::kString, "any", {}, "prefill version"};
    const std::vector<std::string> versions = prefill_version_names();
    if (!versions.empty()) {
      version.type = AxisType::kEnum;
      version.choices = versions;
      version.default_value = versions.front();
    } else {
      version.doc += " (built without CUDA: any name, recorded as skipped)";
    }
    return {
        {"batch", AxisType::kInt, "1", {}, "sequences"},
        {"chunk", AxisType::kInt, "512", {}, "query tokens per sequence (its prompt chunk)"},
        {"prefix", AxisType::kInt, "0", {}, "cached tokens before each chunk"},
        {"num_kv_heads", AxisType::kInt, "8", {}, "KV heads"},
        {"gqa_group", AxisType::kInt, "4", {}, "query heads per KV head"},
        {"head_dim", AxisType::kInt, "128", {}, "head dimension"},
        {"block_size", AxisType::kInt, "16", {}, "tokens per page"},
        {"layout", AxisType::kEnum, "nhd", kv_layout_names(), "KV layout"},
        {"kv_format", AxisType::kEnum, "bf16", kv_format_names(), "KV storage format",
         format_name_aliases()},
        version,
    };
  }
  std::vector<MetricSpec> metrics() const override {
    std::vector<MetricSpec> m = timing_metric_specs(CeilingKind::kRead);
    const std::vector<MetricSpec> own = {
        {"max_abs_err", "", "max |O - reference| over the validated rows"},
        {"nmse", "", "normalized MSE of the same comparison"},
        {"lse_max_abs_err", "", "max |LSE - reference|"},
        {"validated_rows", "", "query rows compared with the host reference"},
        {"nonfinite_out", "", "non-finite outputs anywhere (must be 0)"},
        {"flops", "FLOP", "4 * heads * head_dim per causal (query, key) pair"},
        {"min_bytes", "B", "Q + O + the K/V of every attended token, once"},
        {"tflops", "TFLOP/s", "flops / median"},
        {"pct_datasheet_flops", "%", "tflops / the GPU table's dense BF16 rate"},
    };
    m.insert(m.begin(), own.begin(), own.end());
    return m;
  }
  bool needs_gpu() const override { return true; }
  std::string unsupported_reason(const Point& p, const RunContext&) const override {
    for (const char* a : {"batch", "chunk", "num_kv_heads", "gqa_group", "head_dim", "block_size"})
      if (p.integer(a) < 1) return std::string(a) + " must be >= 1";
    if (p.integer("prefix") < 0) return "prefix must be >= 0";
    return "";
  }
  double estimate_seconds(const Point& p, const RunContext& ctx) const override {
    const double pairs = double(p.integer("batch")) * p.integer("chunk") *
                         (p.integer("prefix") + 0.5 * p.integer("chunk"));
    const double flops =
        4.0 * pairs * p.integer("num_kv_heads") * p.integer("gqa_group") * p.integer("head_dim");
    return 0.3 + ctx.timing_cfg.max_reps * flops / 2e14;
  }
  Record run(const Point& p, RunContext& ctx) override { return run_prefill_attention(p, ctx); }
};

}  // namespace

std::unique_ptr<Bench> make_decode_attention_bench() {
  return std::make_unique<DecodeAttentionBench>();
}
std::unique_ptr<Bench> make_append_bench() {
  return std::make_unique<AppendBench>();
}
std::unique_ptr<Bench> make_decode_step_bench() {
  return std::make_unique<DecodeStepBench>();
}
std::unique_ptr<Bench> make_step_gemm_bench() {
  return std::make_unique<StepGemmBench>();
}
std::unique_ptr<Bench> make_prefill_attention_bench() {
  return std::make_unique<PrefillAttentionBench>();
}

}  // namespace kvlab::exp
