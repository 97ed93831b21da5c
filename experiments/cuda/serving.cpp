// serving.cpp: the GPU halves of the serving kinds (declared in experiments/kinds/serving.cpp
// and serving_step.cpp; the entries in experiments/device/device.h): the GPU serving executor
// (gpu/runtime/serving_executor.h) kept between points, and serving_step's validation and timing
// of one synthetic mixed step on it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "experiments/device/device.h"
#include "gpu/attention/decode.h"
#include "gpu/attention/decode_auto.h"
#include "gpu/bench/harness.h"
#include "gpu/runtime/serving_executor.h"
#include "reference/core/error.h"
#include "reference/metrics/tolerance.h"
#include "reference/step/decode_step.h"
#include "reference/step/decoder_config.h"

namespace kvlab::exp {
namespace {

// The process's executor for c (built, or rebuilt when it differs).
gpu::GpuServingExecutor& gpu_serving_executor(const ServingExecutorConfig& c) {
  static std::unique_ptr<gpu::GpuServingExecutor> exec;
  static std::string key;
  if (exec && key == c.key()) return *exec;
  exec.reset();  // free the old one's weights and pool first
  key.clear();
  gpu::ServingExecutorOptions o;
  o.block_size = c.block_size;
  o.pool_blocks = c.pool_blocks;
  o.max_rows = c.max_num_batched_tokens;
  o.max_seqs = c.max_num_seqs;
  o.max_context = c.max_context;
  o.graph = c.graph;
  exec = std::make_unique<gpu::GpuServingExecutor>(c.decoder, o);
  key = c.key();
  return *exec;
}

// The decode attention the executor runs over `rows` decode rows, for the record's label: the
// fixed version's name, or auto and its pick for that batch. Never throws (a label must not
// fail a measured point).
std::string decode_attention_label(const gpu::DecodeStepExecutor& de, int rows) {
  try {
    const int id = de.attn_version();
    if (id >= 0) return gpu::decode_version(id).name;
    if (rows < 1) return "auto";
    const DecodeArgs a = gpu::step_decode_args(de.config(), de.options(), de.cache_view(0), nullptr,
                                               nullptr, nullptr, nullptr, rows);
    const gpu::DecodeChoice ch = gpu::choose_decode(a);
    return "auto: " + gpu::decode_version(ch.version).name + " (" + ch.basis + ")";
  } catch (const std::exception&) {
    return "auto";
  }
}

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

}  // namespace

sim::StepExecutor& serving_executor(const ServingExecutorConfig& c) {
  return gpu_serving_executor(c);
}

Record run_serving_step(const Point&, RunContext& ctx, const ServingExecutorConfig& c,
                        const sim::SyntheticStep& s) {
  gpu::GpuServingExecutor& ex = gpu_serving_executor(c);
  gpu::DecodeStepExecutor& de = ex.executor();
  const sim::StepBatch b = sim::synthetic_step_batch(s, c.block_size, c.pool_blocks,
                                                     ex.max_blocks_per_seq(), c.decoder.vocab);
  const bool graph = de.serving_graph_for(b, c.graph);
  const Tolerance tol = tolerance(Op::kDecodeStepLogits, KvFormat::kBF16, DType::kF32, c.decoder.layers);

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

}  // namespace kvlab::exp
