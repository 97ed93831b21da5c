// decode_step.cpp: the GPU halves of the kinds "decode_step" and "step_gemm" (declared in
// experiments/kinds/gpu_kinds.cpp; experiments/kinds/decode_step.h says what they measure).
//
// decode_step, per point: a DecodeStepExecutor for (preset, KV format/layout, block size) sized
// for exactly (batch, context + steps); `context` tokens of synthetic K/V per sequence
// (seeded rows through the RoPE+append kernel); the decode-attention version autotuned
// for this shape (attn_version -1) or the given one. Validation before timing, same state:
// the variant's logits after one step vs the eager unfused step's (tolerance
// kDecodeStepLogits; a CUDA graph must also agree bitwise with its eager twin when the
// batch fills the bucket), and for the tiny/small presets a short teacher-forced run from
// an empty cache against the CPU reference. Timing: each sample rewinds every sequence to
// `context` (outside the timed region) and runs `steps` back-to-back steps between CUDA
// events (host launch gaps included: that is what CUDA graphs remove), median over
// samples with the [timing] section's stopping rule. The weights (16 GB for llama3-8b)
// dwarf L2, so no flush is needed.
// The CPU reference check runs on the point's own executor before the synthetic context is
// filled: from an empty cache, teacher-forced seeded tokens, every preset including
// llama3-8b (all rows of the batch and 8 steps for the small presets; 2 rows and 4 steps
// for the large ones, whose Eigen reference holds the weights as floats: 32 GB and seconds
// per step for llama3-8b). The reference logits depend only on the model, the KV format and
// the tokens (not on layout, block size or page placement: tests/cpu/test_step_reference),
// so they are computed once per process, i.e. once per sweep, for each (model, format, rows,
// steps) and reused by every point and variant.
//
// step_gemm, per point: y[M, N] = x[M, K] W^T of one linear layer through cuBLAS, timed by
// the driver's harness (cold L2, a different layer's weight each launch). Prediction:
// sim::gemm_cost with the run's measured read ceiling and (a) the datasheet BF16 rate,
// (b) the matrix rate measured once per process on an 8192^3 BF16 GEMM.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

#include "experiments/cuda/timing.h"
#include "experiments/device/device.h"
#include "gpu/bench/harness.h"
#include "gpu/core/cuda_check.h"
#include "gpu/runtime/decode_step_executor.h"
#include "gpu/step/gemm.h"
#include "gpu/step/step_kernels.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "reference/step/decode_step.h"
#include "reference/step/decoder_config.h"
#include "sim/cost/gpu_spec.h"
#include "sim/cost/roofline.h"
#include "sim/model/model_stack.h"

namespace kvlab::exp {
namespace {

DecoderConfig config_of(const Point& p) {
  DecoderConfig c = decoder_preset(p.str("preset"));
  const int64_t layers = p.integer("layers");
  KVLAB_REQUIRE(layers >= 0 && layers <= 4096,
                "layers " << layers << " outside [0, 4096] (0 = the preset's)");
  if (layers > 0) c.layers = static_cast<int32_t>(layers);
  validate(c);
  return c;
}

// The GPU table row for the device (by its marketing name), with the run's measured read
// ceiling. Unknown devices: the H100 row, labelled so.
sim::GpuSpec gpu_spec_for(const RunContext& ctx, std::string* used) {
  std::string key = "H100";
  for (const char* k : {"H200", "H100", "A100", "B200"})
    if (ctx.device_name.find(k) != std::string::npos) {
      key = k;
      break;
    }
  *used = key;
  sim::GpuSpec g = sim::gpu_spec(key);
  if (ctx.read_ceiling_bytes_per_s > 0) g.measured_read_bytes_per_s = ctx.read_ceiling_bytes_per_s;
  return g;
}

// Smallest M at which the roofline of y[M, n] = x[M, k] W^T turns compute-bound.
int64_t ridge_batch(const sim::GpuSpec& g, int64_t n, int64_t k) {
  sim::CostModelConfig cfg;
  for (int64_t m = 1; m <= (int64_t{1} << 20); m *= 2) {
    if (sim::gemm_cost(g, "probe", m, n, k, 16, cfg).bound() != sim::Bound::kCompute) continue;
    int64_t lo = m / 2, hi = m;  // bound(lo) memory, bound(hi) compute
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) / 2;
      (sim::gemm_cost(g, "probe", mid, n, k, 16, cfg).bound() == sim::Bound::kCompute ? hi : lo) =
          mid;
    }
    return hi;
  }
  return -1;
}

// The dense BF16 matrix rate of this device, measured once per process: an 8192^3 GEMM
// through the same cuBLAS path as the decoder (BF16 in, FP32 out), median of the harness.
double measured_matmul_flops(const TimingConfig& t) {
  static double rate = 0;
  if (rate > 0) return rate;
  const int n = 8192;
  cudaStream_t st = nullptr;
  KVLAB_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  void *a = nullptr, *b = nullptr, *c = nullptr;
  KVLAB_CUDA_CHECK(cudaMalloc(&a, size_t{2} * n * n));
  KVLAB_CUDA_CHECK(cudaMalloc(&b, size_t{2} * n * n));
  KVLAB_CUDA_CHECK(cudaMalloc(&c, size_t{4} * n * n));
  try {
    gpu::step::fill_synthetic_bf16(static_cast<uint16_t*>(a), int64_t{n} * n, 1, 1, 1.0f, 0.0f, st);
    gpu::step::fill_synthetic_bf16(static_cast<uint16_t*>(b), int64_t{n} * n, 1, 2, 0.01f, 0.0f,
                                   st);
    gpu::step::CublasLinear lin(st);
    gpu::bench::TimingOptions o = to_harness(t, false);
    o.cold_l2 = false;
    o.min_reps = 5;
    o.max_reps = 20;
    const gpu::bench::Timing tm = gpu::bench::time_kernel(
        [&](cudaStream_t) {
          lin.forward(static_cast<const uint16_t*>(a), n, static_cast<const uint16_t*>(b), n, n,
                      static_cast<float*>(c), n, n);
        },
        o, st);
    rate = 2.0 * n * double(n) * n / (tm.median_us * 1e-6);
  } catch (...) {
    cudaFree(a), cudaFree(b), cudaFree(c), cudaStreamDestroy(st);
    throw;
  }
  cudaFree(a), cudaFree(b), cudaFree(c), cudaStreamDestroy(st);
  return rate;
}

Linear parse_linear(const std::string& s) {
  for (int i = 0; i < kNumLinears; ++i)
    if (s == to_string(static_cast<Linear>(i))) return static_cast<Linear>(i);
  throw InvalidArgument("unknown linear '" + s + "' (allowed: qkv, o, gate_up, down, lm_head)");
}

// The CPU reference's logits of a short teacher-forced run from an empty cache, computed once
// per process for each (model, KV format, rows, steps): see the file comment.
struct RefLogits {
  int rows = 0, steps = 0;
  std::vector<std::vector<int32_t>> tokens;  // [steps][rows]
  std::vector<std::vector<float>> logits;    // [steps][rows * vocab]
};

const RefLogits& reference_logits(const DecoderConfig& cfg, const gpu::ExecutorOptions& o,
                                  int batch, uint64_t seed) {
  // Small presets: every row, 8 steps; large ones (a reference step reads > 1 GB of float
  // weights): 2 rows, 4 steps, whatever the batch (a batch-1 point compares the first row:
  // rows are independent sequences), so the reference runs once per model and format.
  const bool small = parameter_count(cfg) <= 100'000'000;
  const int rows = small ? batch : 2;
  const int steps = std::min(small ? 8 : 4, o.max_context);
  std::ostringstream key;
  key << to_string(cfg) << " seed " << cfg.seed << " theta " << cfg.rope_theta << " "
      << to_string(o.kv_format) << " k_scale " << o.k_scale << " v_scale " << o.v_scale << " rows "
      << rows << " steps " << steps << " token seed " << seed;
  static std::map<std::string, RefLogits> cache;
  auto it = cache.find(key.str());
  if (it != cache.end()) return it->second;
  RefLogits r;
  r.rows = rows;
  r.steps = steps;
  ref::StepCacheOptions rc;
  rc.format = o.kv_format;
  rc.layout = o.kv_layout;
  rc.block_size = o.block_size;
  rc.k_scale = o.k_scale;
  rc.v_scale = o.v_scale;
  ref::DecoderRef rf(cfg, rc, rows, steps);
  std::vector<int32_t> table(static_cast<size_t>(rows) * rf.blocks_per_seq());
  std::iota(table.begin(), table.end(), 0);
  rf.start(rows, table);
  std::mt19937_64 rng(seed);
  for (int s = 0; s < steps; ++s) {
    std::vector<int32_t> tok(static_cast<size_t>(rows));
    for (auto& t : tok) t = static_cast<int32_t>(rng() % cfg.vocab);
    rf.step(tok);
    r.tokens.push_back(tok);
    r.logits.push_back(rf.logits());
  }
  return cache.emplace(key.str(), std::move(r)).first->second;
}

}  // namespace

Record run_decode_step(const Point& p, RunContext& ctx) {
  const DecoderConfig cfg = config_of(p);
  const int batch = static_cast<int>(p.integer("batch"));
  const int context = static_cast<int>(p.integer("context"));
  const int steps = static_cast<int>(p.integer("steps"));
  const gpu::StepVariant variant = gpu::parse_step_variant(p.str("variant"));
  gpu::ExecutorOptions o;
  o.kv_format = parse_kv_format(p.str("kv_format"));
  o.kv_layout = parse_kv_layout(p.str("kv_layout"));
  o.block_size = static_cast<int>(p.integer("block_size"));
  o.max_batch = batch;
  o.max_context = context + steps + 1;
  o.attn_version = static_cast<int>(p.integer("attn_version"));
  o.k_scale = o.v_scale = 0.02f;  // pool scales: unit-scale synthetic K/V over the FP8/FP4 range
  gpu::Sampling smp;
  smp.top_k = static_cast<int>(p.integer("top_k"));
  smp.seed = ctx.seed;
  const Tolerance tol = tolerance(Op::kDecodeStepLogits, o.kv_format, DType::kF32, cfg.layers);
  Record r;

  gpu::DecodeStepExecutor e(cfg, o);

  // Validation against the CPU reference: this executor and variant, from an empty cache.
  const RefLogits& rl = reference_logits(cfg, o, batch, ctx.seed);
  const int ref_rows = std::min(rl.rows, batch);
  ErrorStats ref_es;
  double ref_nmse = 0;
  e.start(ref_rows);
  for (int s = 0; s < rl.steps; ++s) {
    const std::vector<int32_t>& tok = rl.tokens[static_cast<size_t>(s)];
    e.step(std::vector<int32_t>(tok.begin(), tok.begin() + ref_rows), variant, gpu::Sampling{});
    ErrorStats es;
    const std::vector<float> lg = e.logits();
    const std::vector<float>& want = rl.logits[static_cast<size_t>(s)];
    if (!check(lg.data(), want.data(), lg.size(), tol, &es))
      return Record::failed("logits vs the CPU reference at step " + std::to_string(s) + " (" +
                            std::to_string(ref_rows) +
                            " rows from an empty cache): " + to_string(es));
    ref_es.max_abs = std::max(ref_es.max_abs, es.max_abs);
    ref_nmse = std::max(ref_nmse, es.nmse);
  }

  e.start(batch);
  e.fill_synthetic_context(context, ctx.seed);
  const int attn = o.attn_version >= 0 ? e.attn_version() : e.autotune_attention(3);

  // Validation at the timed state: this variant vs the eager unfused step (and a graph
  // vs its eager twin, bitwise, when the batch fills its bucket).
  std::vector<int32_t> probe(batch);  // fixed input tokens: every compared step sees the same
  for (int b = 0; b < batch; ++b)
    probe[b] = static_cast<int32_t>((int64_t{b} * 7919 + 11) % cfg.vocab);
  auto one_step = [&](gpu::StepVariant v) {
    e.rewind(context);
    e.step(probe, v, smp);
    return e.logits();
  };
  const gpu::StepVariant base_v = variant == gpu::StepVariant::kEagerUnfused
                                      ? gpu::StepVariant::kEagerFused
                                      : gpu::StepVariant::kEagerUnfused;
  const std::vector<float> mine = one_step(variant), base = one_step(base_v);
  ErrorStats es;
  if (!check(mine.data(), base.data(), mine.size(), tol, &es))
    return Record::failed(p.str("variant") + " vs " + gpu::to_string(base_v) + ": " +
                          to_string(es));
  double bitwise = -1;
  if (gpu::is_graph(variant) && e.bucket_for(batch) == batch) {
    const std::vector<float> twin = one_step(
        gpu::is_fused(variant) ? gpu::StepVariant::kEagerFused : gpu::StepVariant::kEagerUnfused);
    bitwise = twin == mine ? 1 : 0;
    if (!bitwise)
      return Record::failed("a CUDA-graph replay differs from its eager twin (bitwise)");
  }

  // Timing: median of samples, each `steps` back-to-back steps from the same state, with the
  // harness's stopping rule.
  std::vector<float> samples;
  gpu::bench::Timing tm;
  if (ctx.timing) {
    const TimingConfig& t = ctx.timing_cfg;
    for (int i = 0; i < t.warmup; ++i) {
      e.rewind(context);
      e.time_steps(variant, smp, steps);
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      e.rewind(context);
      samples.push_back(static_cast<float>(1e3 * e.time_steps(variant, smp, steps)));
      const double el =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (gpu::bench::sampling_done(samples, el, t, &tm)) break;
    }
  }

  // Bytes and FLOPs of one step; the cost model's prediction.
  const double weight_bytes = 2.0 * step_weight_elements(cfg);
  const double kv_bytes = double(batch) * (context + 1) * kv_bytes_per_token(cfg, o.kv_format);
  double flops = 0;
  for (const auto& sh : linear_shapes(cfg)) flops += gemm_flops(batch, sh.n, sh.k) * sh.count;
  flops += 4.0 * batch * (context + 1) * cfg.q_heads * cfg.head_dim * cfg.layers;
  std::string gpu_used;
  const sim::GpuSpec g = gpu_spec_for(ctx, &gpu_used);
  sim::CostModelConfig mc;
  mc.launch = gpu::is_graph(variant) ? sim::LaunchMode::kCudaGraph : sim::LaunchMode::kEager;
  const sim::CostModel model(g, sim::model_stack_of(cfg), o.kv_format, mc);
  sim::StepShape shape;
  shape.num_decode_seqs = batch;
  shape.decode_context_tokens = int64_t{batch} * (context + 1);
  shape.num_sampled = batch;
  const sim::StepCost pc = model.step(shape);

  // How it was timed: no flush; a step whose bytes exceed the flush's own size streams
  // them between any two uses of a byte (cold by construction), a smaller one runs warm.
  tm.graph = gpu::is_graph(variant);
  tm.calls_per_sample = steps;
  tm.l2_bytes = gpu::bench::device_l2_bytes();
  const double step_bytes = weight_bytes + kv_bytes;
  tm.cold_l2 = step_bytes > static_cast<double>(gpu::bench::l2_flush_bytes(tm.l2_bytes));
  tm.flush = tm.cold_l2 ? gpu::bench::L2Flush::kSelf : gpu::bench::L2Flush::kNone;
  record_timing(&r, tm, {step_bytes, CeilingKind::kRead}, ctx);
  if (tm.reps > 0) {
    r.metric("step_us", tm.median_us);
    r.metric("step_us_q1", tm.q1_us);
    r.metric("step_us_q3", tm.q3_us);
    r.metric("samples", tm.reps);
    r.metric("tokens_per_s", tm.median_us > 0 ? batch / (tm.median_us * 1e-6) : NAN);
  }
  r.metric("weight_bytes", weight_bytes);
  r.metric("kv_bytes", kv_bytes);
  r.metric("flops", flops);
  r.metric("predicted_us", pc.total_s * 1e6);
  r.metric("predicted_gemm_us", pc.gemm_s * 1e6);
  r.metric("predicted_attention_us", pc.attention_s * 1e6);
  r.metric("attn_version_used", attn);
  r.metric("check_max_abs", es.max_abs);
  r.metric("check_nmse", es.nmse);
  r.metric("ref_max_abs", ref_es.max_abs);
  r.metric("ref_nmse", ref_nmse);
  r.metric("ref_rows", ref_rows);
  r.metric("ref_steps", rl.steps);
  r.metric("bitwise_eager_twin", bitwise);
  r.label("gpu_spec", gpu_used);
  r.label("buckets_graph", std::to_string(e.bucket_for(batch)));
  return r;
}

Record run_step_gemm(const Point& p, RunContext& ctx) {
  const DecoderConfig cfg = config_of(p);
  const Linear which = parse_linear(p.str("linear"));
  const int m = static_cast<int>(p.integer("batch"));
  int64_t n = 0, k = 0;
  for (const auto& sh : linear_shapes(cfg))
    if (sh.which == which) n = sh.n, k = sh.k;
  gpu::ExecutorOptions o;
  o.max_batch = m;
  o.max_context = 1;
  gpu::DecodeStepExecutor e(cfg, o);
  e.prepare_linear(which, m);
  int layer = 0;
  gpu::bench::TimingOptions to = to_harness(ctx.timing_cfg, false);
  to.cold_l2 = true;
  const gpu::bench::Timing tm = gpu::bench::time_kernel(
      [&](cudaStream_t) {
        e.enqueue_linear(which, m, layer);
        layer = (layer + 1) % cfg.layers;
      },
      to, e.stream());
  const double flops = gemm_flops(m, n, k), bytes = gemm_bytes(m, n, k, 4);
  std::string gpu_used;
  sim::GpuSpec g = gpu_spec_for(ctx, &gpu_used);
  const sim::CostModelConfig mc;
  const sim::OpCost pred = sim::gemm_cost(g, to_string(which), m, n, k, 16, mc);
  const double rate = measured_matmul_flops(ctx.timing_cfg);
  sim::GpuSpec gm = g;
  gm.bf16_flops = rate;
  const sim::OpCost pred_m = sim::gemm_cost(gm, to_string(which), m, n, k, 16, mc);
  const double s = tm.median_us * 1e-6;
  Record r;
  record_timing(&r, tm, {bytes, CeilingKind::kRead}, ctx);
  r.metric("time_us", tm.median_us);
  r.metric("gemm_n", double(n));
  r.metric("gemm_k", double(k));
  r.metric("flops", flops);
  r.metric("bytes", bytes);
  r.metric("tflops", s > 0 ? flops / s / 1e12 : NAN);
  r.metric("intensity", flops / bytes);
  r.metric("predicted_us", pred.seconds * 1e6);
  r.metric("predicted_us_measured_rate", pred_m.seconds * 1e6);
  r.metric("predicted_compute_bound", pred.bound() == sim::Bound::kCompute ? 1.0 : 0.0);
  r.metric("ridge_batch", double(ridge_batch(g, n, k)));
  r.metric("ridge_batch_measured_rate", double(ridge_batch(gm, n, k)));
  r.metric("matmul_tflops_measured", rate / 1e12);
  r.metric("read_ceiling", ctx.read_ceiling_bytes_per_s > 0 ? ctx.read_ceiling_bytes_per_s : NAN);
  r.label("gpu_spec", gpu_used);
  return r;
}

}  // namespace kvlab::exp
