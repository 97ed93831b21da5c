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

#include "experiments/kinds/kind_util.h"
#include "experiments/kinds/serving_common.h"
#include "reference/core/error.h"
#include "reference/step/decoder_config.h"
#include "reference/metrics/tolerance.h"
#include "sim/serve/synthetic_step.h"

#if defined(KVLAB_HAVE_CUDA)
#include "gpu/bench/harness.h"
#endif

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

#if defined(KVLAB_HAVE_CUDA)
// The decode sequences (decode) or the prefill chunks (!decode) of b alone, same rows.
sim::StepBatch split_batch(const sim::StepBatch& b, bool decode) {
  const int32_t nd = b.num_decode, ns = b.num_seqs(), bps = b.max_blocks_per_seq;
  const int32_t s0 = decode ? 0 : nd, s1 = decode ? nd : ns;
  const int32_t r0 = b.q_start[static_cast<size_t>(s0)], r1 = b.q_start[static_cast<size_t>(s1)];
  sim::StepBatch x;
  x.num_decode = decode ? nd : 0;
  x.max_blocks_per_seq = bps;
  for (int32_t s = s0; s < s1; ++s) {
    x.seq_request.push_back(b.seq_request[static_cast<size_t>(s)]);
    x.seq_lens.push_back(b.seq_lens[static_cast<size_t>(s)]);
    x.q_start.push_back(b.q_start[static_cast<size_t>(s)] - r0);
    x.block_table.insert(x.block_table.end(), b.block_table.begin() + int64_t{s} * bps,
                         b.block_table.begin() + int64_t{s + 1} * bps);
  }
  x.q_start.push_back(r1 - r0);
  x.tokens.assign(b.tokens.begin() + r0, b.tokens.begin() + r1);
  x.positions.assign(b.positions.begin() + r0, b.positions.begin() + r1);
  x.slots.assign(b.slots.begin() + r0, b.slots.begin() + r1);
  for (size_t k = 0; k < b.sample_rows.size(); ++k)
    if (b.sample_seqs[k] >= s0 && b.sample_seqs[k] < s1) {
      x.sample_rows.push_back(b.sample_rows[k] - r0);
      x.sample_seqs.push_back(b.sample_seqs[k] - s0);
    }
  x.max_q_len = decode ? 0 : b.max_q_len;
  x.max_seq_len = b.max_seq_len;
  return x;
}

Record ServingStepBench::run(const Point& p, RunContext& ctx) {
  const ServingExecutorConfig c = serving_executor_config(p);
  const sim::SyntheticStep s = step_of(p, ctx.seed * 1000003ull + static_cast<uint64_t>(p.index));
  gpu::GpuServingExecutor& ex = serving_executor(c);
  gpu::DecodeStepExecutor& de = ex.executor();
  const sim::StepBatch b = sim::synthetic_step_batch(s, c.block_size, c.pool_blocks,
                                                     ex.max_blocks_per_seq(), c.decoder.vocab);
  const bool graph = de.serving_graph_for(b, c.graph);
  const Tolerance tol = tolerance(Op::kDecodeStepLogits, KvFormat::kBF16, DType::kF32);

  // Validation at the timed state.
  std::vector<int32_t> tok;
  ex.execute(b, &tok);
  const std::vector<float> whole = de.serving_logits(b);
  std::vector<float> parts_logits;
  if (graph) {
    de.serving_step(b, false, &tok);
    parts_logits = de.serving_logits(b);
  } else {
    // The decode part and the prefill part alone, eager: b's own rows, tables and slots.
    auto part = [&](bool decode) {
      const sim::StepBatch x = split_batch(b, decode);
      if (x.num_seqs() == 0) return std::vector<float>{};
      de.serving_step(x, false, &tok);
      return de.serving_logits(x);
    };
    parts_logits = part(true);
    const std::vector<float> pf = part(false);
    parts_logits.insert(parts_logits.end(), pf.begin(), pf.end());
  }
  ErrorStats es;
  if (whole.size() != parts_logits.size())
    return Record::failed("validation: " + std::to_string(parts_logits.size()) +
                          " logits from the parts for " + std::to_string(whole.size()));
  if (!check(whole.data(), parts_logits.data(), whole.size(), tol, &es))
    return Record::failed(std::string(graph ? "graph replay vs eager twin: "
                                            : "mixed step vs its parts run alone: ") +
                          explain_failure(es, tol));

  // Timing: whole steps (the harness's stopping rule), then the parts in the same state.
  const TimingConfig& t = ctx.timing_cfg;
  std::vector<float> wall_us, dev_us;
  gpu::bench::Timing tm;
  for (int i = 0; i < t.warmup; ++i) ex.execute(b, &tok);
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const sim::StepTiming st = ex.execute(b, &tok);
    wall_us.push_back(static_cast<float>(st.wall_s * 1e6));
    dev_us.push_back(static_cast<float>(st.device_s * 1e6));
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (gpu::bench::sampling_done(wall_us, el, t, &tm)) break;
  }
  const gpu::bench::Timing td = gpu::bench::summarize(dev_us, t.target_rel_iqr);
  const auto parts = ex.time_parts(b, std::max(3, static_cast<int>(wall_us.size())));
  // How it was timed: host wall clock of whole steps, no flush; the weights alone stream
  // far more than L2 between two uses of a byte (cold by construction).
  const double step_bytes =
      2.0 * static_cast<double>(step_weight_elements(c.decoder)) +
      kv_bytes_per_token(c.decoder, KvFormat::kBF16) *
          static_cast<double>(b.shape.decode_context_tokens + b.shape.prefill_context_tokens);
  tm.graph = graph;
  tm.calls_per_sample = 1;
  tm.l2_bytes = gpu::bench::device_l2_bytes();
  tm.cold_l2 = step_bytes > static_cast<double>(gpu::bench::l2_flush_bytes(tm.l2_bytes));
  tm.flush = tm.cold_l2 ? gpu::bench::L2Flush::kSelf : gpu::bench::L2Flush::kNone;

  Record r;
  record_timing(&r, tm, {step_bytes, CeilingKind::kRead}, ctx);
  r.metric("step_us", tm.median_us);
  r.metric("step_us_q1", tm.q1_us);
  r.metric("step_us_q3", tm.q3_us);
  r.metric("samples", tm.reps);
  r.metric("device_us", td.median_us);
  r.metric("gemm_us", parts.gemm_ms * 1e3);
  r.metric("lm_head_us", parts.lm_head_ms * 1e3);
  r.metric("decode_attn_us", parts.decode_attn_ms * 1e3);
  r.metric("prefill_attn_us", parts.prefill_attn_ms * 1e3);
  r.metric("graph_step", graph ? 1.0 : 0.0);
  r.metric("rows", parts.rows);
  r.metric("lm_rows", parts.lm_rows);
  r.metric("num_decode_seqs", static_cast<double>(b.shape.num_decode_seqs));
  r.metric("decode_context_tokens", static_cast<double>(b.shape.decode_context_tokens));
  r.metric("num_prefill_seqs", static_cast<double>(b.shape.num_prefill_seqs));
  r.metric("prefill_tokens_total", static_cast<double>(b.shape.prefill_tokens));
  r.metric("prefill_attn_pairs", b.shape.prefill_attn_pairs);
  r.metric("prefill_context_tokens", static_cast<double>(b.shape.prefill_context_tokens));
  r.metric("num_sampled", static_cast<double>(b.shape.num_sampled));
  r.metric("check_max_abs", es.max_abs);
  r.metric("check_nmse", es.nmse);
  r.label("executor", c.key());
  r.label("decode_attention", decode_attention_label(de, graph ? parts.rows : b.num_decode));
  return r;
}
#else
Record ServingStepBench::run(const Point&, RunContext&) {
  return Record::skipped("built without CUDA");
}
#endif

}  // namespace

std::unique_ptr<Bench> make_serving_step_bench() {
  return std::make_unique<ServingStepBench>();
}

}  // namespace kvlab::exp
