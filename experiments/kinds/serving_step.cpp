// serving_step.cpp: bench "serving_step" (see serving_common.h).
//
// A point: the executor axes, then one synthetic step (sim/serve/synthetic_step.h):
// decode_seqs sequences of decode_context cached tokens decoding one token each, and
// prefill_seqs chunks of prefill_tokens tokens after prefill_context cached ones (sampling
// at the chunk's end with prefill_samples on). Its blocks come from a sim::BlockAllocator over
// the executor's pool, whose K/V the executor's warm-up filled with seeded bf16 values.
// Validation, before timing, in the same state:
//   - batching invariance: the sampled rows' logits of the whole step vs the same rows of its
//     decode part and its prefill part run alone (eager), tolerance decode_step_logits;
//   - a decode-only step with graph on: the graph replay vs its eager twin (same tolerance).
// Timing: the [timing] section's warm-up and stopping rule over whole steps (host wall clock
// from upload to the sampled tokens on the host, as the serving run measures its steps;
// recorded by record_timing against the read ceiling with the weights + attended KV), and
// the median device time; then the parts alone, in the same state, the same number of
// repetitions: every layer's GEMMs at the step's rows, the LM head at its sampled rows (a
// graph step: the bucket's rows), every layer's decode and prefill attention. The index row
// holds the step's StepShape as sim::Engine counts it, so `kvlab sweep` output is directly
// the serving step model's calibration input (serving kind, calibration axis).
#include <algorithm>
#include <chrono>
#include <cmath>

#include "experiments/bench/table_trace.h"
#include "experiments/kinds/serving_common.h"
#include "reference/core/error.h"
#include "reference/step/decoder_config.h"
#include "reference/metrics/tolerance.h"
#include "sim/serve/synthetic_step.h"

namespace kvlab::exp {
namespace {

sim::SyntheticStep step_of(const Point& p, uint64_t seed) {
  sim::SyntheticStep s;
  auto in = [&](const char* axis, int64_t lo, int64_t hi) {
    const int64_t v = p.integer(axis);
    KVLAB_REQUIRE(v >= lo && v <= hi, axis << " " << v << " outside [" << lo << ", " << hi << "]");
    return static_cast<int32_t>(v);
  };
  s.decode_seqs = in("decode_seqs", 0, 65535);
  s.decode_context = in("decode_context", 0, 1 << 24);
  s.prefill_seqs = in("prefill_seqs", 0, 65535);
  s.prefill_tokens = in("prefill_tokens", 0, 65535);
  s.prefill_context = in("prefill_context", 0, 1 << 24);
  s.prefill_samples = p.str("prefill_samples") == "on";
  s.seed = seed;
  if (s.prefill_seqs == 0) s.prefill_tokens = 0;
  s.validate();
  return s;
}

class ServingStepBench : public Bench {
 public:
  std::string name() const override { return "serving_step"; }
  std::string summary() const override {
    return "one synthetic serving step (decode sequences + prefill chunks) through the GPU serving "
           "executor: validated, timed whole and part by part (the serving step model's "
           "calibration)";
  }
  std::vector<AxisSpec> axes() const override {
    std::vector<AxisSpec> a = serving_executor_axes();
    a.push_back({"decode_seqs", AxisType::kInt, "8", {}, "sequences decoding one token"});
    a.push_back({"decode_context",
                 AxisType::kInt,
                 "512",
                 {},
                 "cached tokens of each decode sequence before its token"});
    a.push_back({"prefill_seqs", AxisType::kInt, "0", {}, "sequences computing a prompt chunk"});
    a.push_back({"prefill_tokens", AxisType::kInt, "0", {}, "tokens per chunk (>= 2)"});
    a.push_back({"prefill_context",
                 AxisType::kInt,
                 "0",
                 {},
                 "cached tokens before each chunk (a later chunk of a long prompt)"});
    a.push_back({"prefill_samples",
                 AxisType::kEnum,
                 "on",
                 {"on", "off"},
                 "the chunks end their prompts (each samples a token)"});
    return a;
  }
  std::vector<MetricSpec> metrics() const override {
    std::vector<MetricSpec> m = timing_metric_specs(CeilingKind::kRead);
    const std::vector<MetricSpec> own = {
        {"step_us", "us", "median host wall time of the whole step (upload to sampled tokens)"},
        {"step_us_q1", "us", "first quartile"},
        {"step_us_q3", "us", "third quartile"},
        {"samples", "", "timed steps"},
        {"device_us", "us", "median device time of the step (events around it)"},
        {"gemm_us", "us", "every layer's linear layers at the step's rows, alone (median)"},
        {"lm_head_us", "us", "the LM head at the sampled rows, alone (median)"},
        {"decode_attn_us", "us", "every layer's decode attention, alone (median)"},
        {"prefill_attn_us", "us", "every layer's prefill attention, alone (median)"},
        {"graph_step", "", "1 when the step replays a CUDA graph (decode-only, graph on)"},
        {"rows", "", "token rows the step runs (a graph step: its bucket)"},
        {"lm_rows", "", "rows through the LM head (a graph step: its bucket)"},
        {"num_decode_seqs", "", "sim StepShape: decode sequences"},
        {"decode_context_tokens", "", "sim StepShape: keys attended by them"},
        {"num_prefill_seqs", "", "sim StepShape: prefill chunks"},
        {"prefill_tokens_total", "", "sim StepShape: tokens in all the chunks"},
        {"prefill_attn_pairs", "", "sim StepShape: causal (query, key) pairs of the chunks"},
        {"prefill_context_tokens", "", "sim StepShape: keys read by the chunks"},
        {"num_sampled", "", "sim StepShape: sequences sampling a token"},
        {"check_max_abs", "", "max |logit| difference of the validation (batching / graph)"},
        {"check_nmse", "", "NMSE of the same comparison"},
    };
    m.insert(m.begin(), own.begin(), own.end());
    return m;
  }
  bool needs_gpu() const override { return true; }
  void check_point(const Point& p) const override {
    const ServingExecutorConfig c = serving_executor_config(p);
    const sim::SyntheticStep s = step_of(p, 1);
    const int64_t rows = int64_t{s.decode_seqs} + int64_t{s.prefill_seqs} * s.prefill_tokens;
    KVLAB_REQUIRE(rows <= c.max_num_batched_tokens,
                  "serving_step: " << rows << " token rows exceed max_num_batched_tokens "
                                   << c.max_num_batched_tokens);
    KVLAB_REQUIRE(s.decode_seqs + s.prefill_seqs <= c.max_num_seqs,
                  "serving_step: " << s.decode_seqs + s.prefill_seqs
                                   << " sequences exceed max_num_seqs " << c.max_num_seqs);
    KVLAB_REQUIRE(s.decode_context + 1 <= c.max_context &&
                      s.prefill_context + s.prefill_tokens <= c.max_context,
                  "serving_step: a sequence longer than max_context " << c.max_context);
    KVLAB_REQUIRE(sim::synthetic_step_blocks(s, c.block_size) <= c.pool_blocks,
                  "serving_step: the step needs " << sim::synthetic_step_blocks(s, c.block_size)
                                                  << " blocks, pool_blocks is " << c.pool_blocks);
  }
  double estimate_seconds(const Point& p, const RunContext& ctx) const override {
    const double rows = double(p.integer("decode_seqs")) +
                        double(p.integer("prefill_seqs")) * double(p.integer("prefill_tokens"));
    return 0.2 + (ctx.timing_cfg.min_reps + 4) * 2.0 * (0.009 + 3e-5 * rows);
  }
  Record run(const Point& p, RunContext& ctx) override;
};

Record ServingStepBench::run(const Point& p, RunContext& ctx) {
  const ServingExecutorConfig c = serving_executor_config(p);
  return run_serving_step(p, ctx, c, step_of(p, mix_seed(ctx.seed, p.index)));
}

}  // namespace

std::unique_ptr<Bench> make_serving_step_bench() {
  return std::make_unique<ServingStepBench>();
}

}  // namespace kvlab::exp
