// test_serving_executor.cu: the GPU serving run (gpu/runtime/serving_executor.h driven by
// sim::run_serving) against the CPU reference decoder.
//
// A tiny decoder serves a workload on a small pool with a small token budget, so the run has
// chunked prefill, mixed decode + prefill steps, CUDA-graph decode steps, recompute
// preemption and (in the second test) prefix-cache hits. Every sampled row's logits are
// compared with a CPU reference decoder (reference/step/decode_step.h) of that request alone,
// teacher-forced token by token on the same tokens (prompt, then what the GPU sampled): a
// chunked prefill must equal token-by-token decoding, a recomputed request its first
// computation, and a prefix-cache hit the KV its own tokens would have produced.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <vector>

#include "gpu/runtime/serving_executor.h"
#include "reference/metrics/tolerance.h"
#include "reference/step/decode_step.h"
#include "sim/serve/serving_run.h"
#include "sim/serve/synthetic_step.h"
#include "sim/workload/workload.h"
#include "tests/common/tolerance_check.h"
#include "tests/gpu/gpu_test_util.cuh"

namespace kvlab::test {
namespace {

// Wraps the GPU executor: after each step, checks the sampled rows against the reference.
class CheckedExecutor : public sim::StepExecutor {
 public:
  CheckedExecutor(gpu::GpuServingExecutor* gpu, const DecoderConfig& cfg,
                  const std::vector<sim::Request>& reqs, int block_size, int max_context)
      : gpu_(gpu), cfg_(cfg), reqs_(reqs), history_(reqs, cfg.vocab), max_context_(max_context) {
    cache_.format = KvFormat::kBF16;
    cache_.layout = KvLayout::kNHD;
    cache_.block_size = block_size;
  }

  sim::StepTiming execute(const sim::StepBatch& b, std::vector<int32_t>* sampled) override {
    const sim::StepTiming t = gpu_->execute(b, sampled);
    graph_steps += gpu_->executor().serving_graph_for(b, gpu_->options().graph) ? 1 : 0;
    mixed_steps += (b.num_decode > 0 && b.num_prefill() > 0) ? 1 : 0;
    const std::vector<float> logits = gpu_->executor().serving_logits(b);
    const size_t V = static_cast<size_t>(cfg_.vocab);
    for (size_t k = 0; k < b.sample_rows.size(); ++k) {
      const int32_t s = b.sample_seqs[k];
      const int32_t r = b.seq_request[static_cast<size_t>(s)];
      const int32_t pos = b.positions[static_cast<size_t>(b.sample_rows[k])];
      ref::DecoderRef& rf = ref_of(r);
      // Teacher-force the reference up to this position with the run's own tokens.
      while (fed_[r] <= pos) {
        const int32_t tok = fed_[r] < reqs_[static_cast<size_t>(r)].prompt_tokens
                                ? history_.token(r, fed_[r])
                                : generated_[r][static_cast<size_t>(
                                      fed_[r] - reqs_[static_cast<size_t>(r)].prompt_tokens)];
        rf.step({tok});
        ++fed_[r];
      }
      const std::vector<float> got(logits.begin() + static_cast<int64_t>(k * V),
                                   logits.begin() + static_cast<int64_t>((k + 1) * V));
      EXPECT_TRUE(
          within_tolerance(got, rf.logits(),
                           tolerance(Op::kDecodeStepLogits, KvFormat::kBF16, DType::kF32, cfg_.layers),
                           "decode_step_logits/bf16/f32",
                           "request " + std::to_string(r) + " position " + std::to_string(pos)));
      ++checked;
      generated_[r].push_back((*sampled)[k]);
    }
    return t;
  }
  int32_t vocab() const override { return gpu_->vocab(); }
  int32_t max_blocks_per_seq() const override { return gpu_->max_blocks_per_seq(); }

  int64_t checked = 0, graph_steps = 0, mixed_steps = 0;

 private:
  ref::DecoderRef& ref_of(int32_t r) {
    auto it = refs_.find(r);
    if (it != refs_.end()) return *it->second;
    auto rf = std::make_unique<ref::DecoderRef>(cfg_, cache_, 1, max_context_);
    std::vector<int32_t> table(static_cast<size_t>(rf->blocks_per_seq()));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    rf->start(1, table);
    return *refs_.emplace(r, std::move(rf)).first->second;
  }

  gpu::GpuServingExecutor* gpu_;
  DecoderConfig cfg_;
  const std::vector<sim::Request>& reqs_;
  sim::TokenHistory history_;  // prompt tokens (the same function the driver uses)
  int max_context_;
  ref::StepCacheOptions cache_;
  std::map<int32_t, std::unique_ptr<ref::DecoderRef>> refs_;
  std::map<int32_t, int32_t> fed_;
  std::map<int32_t, std::vector<int32_t>> generated_;
};

std::vector<sim::Request> workload(int n, int groups, int shared, uint64_t seed) {
  sim::WorkloadSpec w;
  w.seed = seed;
  w.num_requests = n;
  w.arrival.kind = sim::ArrivalKind::kPoisson;
  w.arrival.rate = 4000;  // all within a few GPU steps of the tiny decoder: they run together
  w.prompt = sim::LengthDist::uniform(3, 40);
  w.output = sim::LengthDist::uniform(1, 12);
  w.num_prefix_groups = groups;
  w.shared_prefix_tokens = shared;
  return sim::generate_workload(w);
}

void serve_and_check(bool prefix, bool graph) {
  const DecoderConfig cfg = decoder_preset("tiny");
  const std::vector<sim::Request> reqs = workload(16, prefix ? 2 : 0, prefix ? 12 : 0, 77);
  int max_context = 0;
  for (const auto& q : reqs) max_context = std::max(max_context, q.prompt_tokens + q.output_tokens);
  sim::EngineConfig ec;
  ec.block_size = 4;
  ec.num_blocks = 24;  // 96 slots for up to 8 running requests: preemption
  ec.max_num_seqs = 8;
  ec.max_num_batched_tokens = 24;  // chunked prefill
  ec.watermark = 0;
  ec.prefix_caching = prefix;
  ec.audit_every_step = true;
  gpu::ServingExecutorOptions o;
  o.block_size = ec.block_size;
  o.pool_blocks = static_cast<int>(ec.num_blocks);
  o.max_rows = static_cast<int>(ec.max_num_batched_tokens);
  o.max_seqs = ec.max_num_seqs;
  o.max_context = max_context;
  o.graph = graph;
  gpu::GpuServingExecutor gpu_exec(cfg, o);
  CheckedExecutor ex(&gpu_exec, cfg, reqs, ec.block_size, max_context);
  const sim::ServingRun run = sim::run_serving(ec, reqs, &ex);
  const auto& s = run.result.summary;
  EXPECT_EQ(s.num_finished + s.num_rejected, 16);
  EXPECT_GT(s.num_preemptions, 0);
  EXPECT_GT(ex.mixed_steps, 0);
  if (graph) EXPECT_GT(ex.graph_steps, 0);
  if (prefix) EXPECT_GT(s.prefix_hit_tokens, 0);
  EXPECT_EQ(ex.checked, s.output_tokens) << "every sampled token checked";
  std::printf(
      "[serving] prefix %d graph %d: %lld steps, %lld preemptions, %lld prefix-hit tokens, "
      "%lld graph steps, %lld mixed steps, %lld tokens checked\n",
      prefix, graph, static_cast<long long>(s.num_steps), static_cast<long long>(s.num_preemptions),
      static_cast<long long>(s.prefix_hit_tokens), static_cast<long long>(ex.graph_steps),
      static_cast<long long>(ex.mixed_steps), static_cast<long long>(ex.checked));
}

TEST(ServingExecutor, ChunkedPrefillPreemptionAndGraphsMatchTheReference) {
  KVLAB_SKIP_WITHOUT_GPU();
  serve_and_check(false, true);
}

TEST(ServingExecutor, PrefixCacheHitsMatchTheReferenceEager) {
  KVLAB_SKIP_WITHOUT_GPU();
  serve_and_check(true, false);
}

TEST(ServingExecutor, GraphAndEagerDecodeStepsAgreeAndPartsAreTimed) {
  KVLAB_SKIP_WITHOUT_GPU();
  const DecoderConfig cfg = decoder_preset("small");
  gpu::ServingExecutorOptions o;
  o.pool_blocks = 64;
  o.max_rows = 96;
  o.max_seqs = 12;
  o.max_context = 256;
  gpu::GpuServingExecutor ex(cfg, o);
  sim::SyntheticStep s;
  s.decode_seqs = 5;  // bucket 8: three padding rows
  s.decode_context = 70;
  const sim::StepBatch b =
      sim::synthetic_step_batch(s, o.block_size, o.pool_blocks, ex.max_blocks_per_seq(), cfg.vocab);
  std::vector<int32_t> t_graph, t_eager;
  EXPECT_GT(ex.executor().serving_step(b, true, &t_graph), 0.0);
  const std::vector<float> l_graph = ex.executor().serving_logits(b);
  ex.executor().serving_step(b, false, &t_eager);
  const std::vector<float> l_eager = ex.executor().serving_logits(b);
  EXPECT_TRUE(within_tolerance(l_graph, l_eager,
                               tolerance(Op::kDecodeStepLogits, KvFormat::kBF16, DType::kF32, cfg.layers),
                               "decode_step_logits/bf16/f32", "graph vs eager"));
  EXPECT_EQ(t_graph.size(), 5u);

  sim::SyntheticStep m;
  m.decode_seqs = 3;
  m.decode_context = 40;
  m.prefill_seqs = 2;
  m.prefill_tokens = 33;
  m.prefill_context = 50;
  const sim::StepBatch mb =
      sim::synthetic_step_batch(m, o.block_size, o.pool_blocks, ex.max_blocks_per_seq(), cfg.vocab);
  std::vector<int32_t> tok;
  ex.execute(mb, &tok);
  EXPECT_EQ(tok.size(), 5u);
  const auto parts = ex.time_parts(mb, 3);
  EXPECT_EQ(parts.rows, 69);
  EXPECT_EQ(parts.lm_rows, 5);
  EXPECT_GT(parts.gemm_ms, 0);
  EXPECT_GT(parts.lm_head_ms, 0);
  EXPECT_GT(parts.decode_attn_ms, 0);
  EXPECT_GT(parts.prefill_attn_ms, 0);
  const auto gparts = ex.time_parts(b, 3);
  EXPECT_EQ(gparts.rows, 8);
  EXPECT_EQ(gparts.prefill_attn_ms, 0);

  sim::StepBatch bad = mb;
  bad.slots[0] = int64_t{o.pool_blocks} * o.block_size;  // outside the pool
  EXPECT_THROW(ex.execute(bad, &tok), InvalidArgument);
  bad = mb;
  bad.max_blocks_per_seq += 1;
  EXPECT_THROW(ex.execute(bad, &tok), InvalidArgument);
}

}  // namespace
}  // namespace kvlab::test
