// test_serving_step_args.cpp: the attention arguments the GPU serving path builds, checked on
// the CPU.
//
// The GPU serving executor builds its decode and paged-prefill attention arguments with host
// code (gpu/runtime/step_shapes.h: the executor options, table width and cache geometry of a
// serving configuration, the step arena's layout and packing, the arguments over it). Here the
// same functions build them over host buffers and the reference's argument validation
// (ref::validate_decode_args / ref::validate_paged_prefill_args, the rules the GPU registries'
// entry points apply on the host) must accept them:
//  - for every point of the shipped serving configs (serving_calibration.ini, serving.ini):
//    the arguments the executor builds at construction (every row count its workspace is
//    sized for, every graph bucket) and, for serving_step points, the step's own arguments
//    (eager, and as the CUDA-graph bucket of a decode-only step);
//  - for every step sim::Engine schedules in the GPU tests' serving runs (chunked prefill,
//    preemption, prefix-cache hits), where the packed arguments must also give the reference
//    attention exactly the outputs of arguments built straight from the step batch.
// A table narrower than max_context / block_size (the serving pool's blocks over its rows,
// an earlier bug) is refused, so the checks above can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "experiments/cli/registry.h"
#include "experiments/device/device.h"
#include "experiments/kinds/serving_common.h"
#include "experiments/sweep/spec.h"
#include "gpu/runtime/step_shapes.h"
#include "reference/attention/attention.h"
#include "reference/core/error.h"
#include "reference/step/decoder_config.h"
#include "sim/serve/serving_run.h"
#include "sim/serve/step_batch.h"
#include "sim/serve/synthetic_step.h"
#include "sim/workload/workload.h"

namespace kvlab::test {
namespace {

using gpu::ExecutorOptions;
using gpu::ServingDims;

// Host stand-ins for the executor's device buffers: Q/O of max_batch rows, a K/V pool
// (backed only when `backed`: the reference validation never reads the pool).
struct HostStep {
  std::vector<uint16_t> q, o;
  std::vector<uint8_t> k, v;
  KvCacheView view;
  HostStep(const DecoderConfig& c, const ExecutorOptions& opt, bool backed) {
    q.assign(static_cast<size_t>(opt.max_batch) * c.q_dim(), 0x3f80);  // bf16 1.0
    o.assign(q.size(), 0);
    view.geom = gpu::cache_geometry(c, opt);
    const size_t bytes = backed ? static_cast<size_t>(view.geom.bytes()) : 256;
    k.assign(bytes, 0);
    v.assign(bytes, 0);
    view.k = k.data();
    view.v = v.data();
  }
};

// The decode arguments DecodeStepExecutor builds when it picks its attention version and
// sizes the workspace (every row count 1, 2, 4, ..., max_batch and every graph bucket),
// over tables whose every sequence is max_context long.
void check_construction_args(const DecoderConfig& c, const ExecutorOptions& opt,
                             const std::string& what) {
  HostStep h(c, opt, false);
  const int bps = gpu::table_columns(opt);
  const std::vector<int32_t> table(static_cast<size_t>(opt.max_batch) * bps, 0);
  const std::vector<int32_t> lens(static_cast<size_t>(opt.max_batch), opt.max_context);
  std::set<int> rows(opt.graph_buckets.begin(), opt.graph_buckets.end());
  for (int m = 1; m < opt.max_batch; m *= 2) rows.insert(m);
  rows.insert(opt.max_batch);
  for (int m : rows) {
    const DecodeArgs a =
        gpu::step_decode_args(c, opt, h.view, h.q.data(), h.o.data(), table.data(), lens.data(), m);
    EXPECT_NO_THROW(ref::validate_decode_args(a)) << what << ", " << m << " rows";
  }
}

// The arguments of one serving step, packed as the executor packs it (host arena).
struct PackedStep {
  ServingDims d;
  std::vector<int32_t> arena;
};

PackedStep pack(const sim::StepBatch& b, const ExecutorOptions& opt, bool graph) {
  const int bps = gpu::table_columns(opt);
  PackedStep p;
  p.d = gpu::serving_step_dims(b, bps, graph, graph ? gpu::graph_bucket(opt, b.num_decode) : 0);
  p.arena.assign(static_cast<size_t>(p.d.L.total), -7);
  gpu::pack_serving(b, p.d, bps, p.arena.data());
  return p;
}

void check_step_args(const DecoderConfig& c, const ExecutorOptions& opt, const sim::StepBatch& b,
                     const std::string& what) {
  ASSERT_EQ(b.max_blocks_per_seq, gpu::table_columns(opt)) << what;
  HostStep h(c, opt, false);
  const bool graph = !opt.graph_buckets.empty() && b.decode_only() && b.num_decode > 0;
  for (bool g : {false, graph}) {
    const PackedStep p = pack(b, opt, g);
    if (p.d.nd > 0)
      EXPECT_NO_THROW(ref::validate_decode_args(
          gpu::serving_decode_args(c, opt, p.d, p.arena.data(), h.view, h.q.data(), h.o.data())))
          << what << (g ? " (graph)" : " (eager)");
    if (p.d.np > 0) {
      EXPECT_NO_THROW(ref::validate_paged_prefill_args(
          gpu::serving_prefill_args(c, opt, p.d, p.arena.data(), h.view, h.q.data(), h.o.data())))
          << what;
      // The GPU entry points also need 16-byte aligned Q/O: the chunks start nd rows in.
      EXPECT_EQ(int64_t{p.d.nd} * c.q_dim() * 2 % 16, 0) << what;
    }
    if (!graph) break;
  }
}

// The GPU serving executor's options of a serving point's executor axes, as the CUDA backend
// builds them (experiments/cuda/serving.cpp).
gpu::ServingExecutorOptions serving_options(const exp::ServingExecutorConfig& c) {
  gpu::ServingExecutorOptions o;
  o.block_size = c.block_size;
  o.pool_blocks = c.pool_blocks;
  o.max_rows = c.max_num_batched_tokens;
  o.max_seqs = c.max_num_seqs;
  o.max_context = c.max_context;
  o.graph = c.graph;
  return o;
}

// The synthetic step of a serving_step point (the kind's axes).
sim::SyntheticStep step_of(const exp::Point& p) {
  sim::SyntheticStep s;
  s.decode_seqs = static_cast<int32_t>(p.integer("decode_seqs"));
  s.decode_context = static_cast<int32_t>(p.integer("decode_context"));
  s.prefill_seqs = static_cast<int32_t>(p.integer("prefill_seqs"));
  s.prefill_tokens = s.prefill_seqs > 0 ? static_cast<int32_t>(p.integer("prefill_tokens")) : 0;
  s.prefill_context = static_cast<int32_t>(p.integer("prefill_context"));
  s.prefill_samples = p.str("prefill_samples") == "on";
  s.seed = 1;
  s.validate();
  return s;
}

TEST(ServingStepArgs, ShippedServingConfigsBuildArgumentsTheValidationAccepts) {
  for (const char* path :
       {"experiments/configs/serving_calibration.ini", "experiments/configs/serving.ini"}) {
    const std::vector<exp::Point> points =
        exp::expand(exp::load_sweep(path), exp::registered_kinds());
    std::set<std::string> executors;
    int steps = 0;
    for (const exp::Point& p : points) {
      if (p.kind != "serving_step" && p.kind != "serving") continue;
      const exp::ServingExecutorConfig c = exp::serving_executor_config(p);
      const ExecutorOptions opt = gpu::executor_options(serving_options(c));
      if (executors.insert(c.key()).second)
        check_construction_args(c.decoder, opt, std::string(path) + ": " + c.key());
      if (p.kind != "serving_step") continue;
      const sim::StepBatch b = sim::synthetic_step_batch(step_of(p), c.block_size, c.pool_blocks,
                                                         gpu::table_columns(opt), c.decoder.vocab);
      check_step_args(c.decoder, opt, b, p.key());
      ++steps;
    }
    EXPECT_FALSE(executors.empty()) << path << " has no serving point";
    if (std::string(path).find("calibration") != std::string::npos) EXPECT_GT(steps, 50) << path;
  }
}

TEST(ServingStepArgs, ATableNarrowerThanMaxContextIsRefused) {
  // The calibration's executor: 8192 pool blocks over 512 rows would give 16 columns
  // (256 tokens) for sequences of up to 2048 tokens.
  gpu::ServingExecutorOptions s;
  s.block_size = 16;
  s.pool_blocks = 8192;
  s.max_rows = 512;
  s.max_seqs = 64;
  s.max_context = 2048;
  const ExecutorOptions opt = gpu::executor_options(s);
  EXPECT_EQ(gpu::table_columns(opt), 128);
  const DecoderConfig c = decoder_preset("llama3-8b");
  HostStep h(c, opt, false);
  const std::vector<int32_t> table(static_cast<size_t>(opt.max_batch) * 128, 0);
  const std::vector<int32_t> lens(static_cast<size_t>(opt.max_batch), 1);
  DecodeArgs a =
      gpu::step_decode_args(c, opt, h.view, h.q.data(), h.o.data(), table.data(), lens.data(), 4);
  EXPECT_NO_THROW(ref::validate_decode_args(a));
  a.max_blocks_per_seq = s.pool_blocks / opt.max_batch;
  EXPECT_THROW(ref::validate_decode_args(a), InvalidArgument);
  // A pool smaller than the rows (the GPU tests' executors) gave 0 columns.
  s.pool_blocks = 64;
  s.max_rows = 96;
  s.max_context = 256;
  EXPECT_EQ(gpu::table_columns(gpu::executor_options(s)), 16);
}

// A fake GPU for sim::run_serving: every scheduled step packed as the executor packs it; the
// arguments must pass validation, and the reference attention over the packed arguments must
// give exactly what it gives over arguments built straight from the step batch.
class PackingExecutor : public sim::StepExecutor {
 public:
  PackingExecutor(const DecoderConfig& c, const ExecutorOptions& opt)
      : c_(c), opt_(opt), h_(c, opt, true) {
    // Pool contents: bf16 values in [-1, 1) (a fixed pattern; the comparison is exact).
    auto* k = reinterpret_cast<uint16_t*>(h_.k.data());
    auto* v = reinterpret_cast<uint16_t*>(h_.v.data());
    for (size_t i = 0; i < h_.k.size() / 2; ++i) {
      k[i] = static_cast<uint16_t>(0x3c00 + (i * 2654435761u >> 20) % 0x300);
      v[i] = static_cast<uint16_t>(0xbc00 + (i * 40503u >> 4) % 0x300);
    }
    for (size_t i = 0; i < h_.q.size(); ++i)
      h_.q[i] = static_cast<uint16_t>(0x3c00 + (i * 97u) % 0x380);
  }

  sim::StepTiming execute(const sim::StepBatch& b, std::vector<int32_t>* sampled) override {
    ++steps;
    EXPECT_EQ(b.max_blocks_per_seq, gpu::table_columns(opt_));
    const bool graph = !opt_.graph_buckets.empty() && b.decode_only() && b.num_decode > 0;
    graph_steps += graph;
    mixed_steps += b.num_decode > 0 && b.num_prefill() > 0;
    const PackedStep p = pack(b, opt_, graph);
    const int qd = c_.q_dim();
    if (p.d.nd > 0) {
      const DecodeArgs a = gpu::serving_decode_args(c_, opt_, p.d, p.arena.data(), h_.view,
                                                    h_.q.data(), h_.o.data());
      EXPECT_NO_THROW(ref::validate_decode_args(a));
      std::fill(h_.o.begin(), h_.o.end(), 0);
      ref::decode_attention(a);
      std::vector<uint16_t> direct(static_cast<size_t>(b.num_decode) * qd, 0);
      DecodeArgs d = a;
      d.o = direct.data();
      d.num_seqs = b.num_decode;
      d.block_table = b.block_table.data();  // rows [0, num_decode) of the batch's table
      d.seq_lens = b.seq_lens.data();
      ref::decode_attention(d);
      EXPECT_TRUE(std::equal(direct.begin(), direct.end(), h_.o.begin()))
          << "step " << steps << ": packed decode arguments read other pages or lengths";
      // Padding rows of a graph bucket attend to nothing.
      for (int r = b.num_decode; r < p.d.nd; ++r)
        EXPECT_EQ(p.arena[static_cast<size_t>(p.d.L.seq_lens + r)], 0);
    }
    if (p.d.np > 0) {
      const PagedPrefillArgs a = gpu::serving_prefill_args(c_, opt_, p.d, p.arena.data(), h_.view,
                                                           h_.q.data(), h_.o.data());
      EXPECT_NO_THROW(ref::validate_paged_prefill_args(a));
      std::fill(h_.o.begin(), h_.o.end(), 0);
      ref::paged_prefill_attention(a);
      // Straight from the batch: its sequences [num_decode, num_seqs), rows from q_start.
      std::vector<int32_t> q_start(b.q_start.begin() + b.num_decode, b.q_start.end());
      for (int32_t& x : q_start) x -= b.q_start[static_cast<size_t>(b.num_decode)];
      std::vector<uint16_t> direct(static_cast<size_t>(b.num_rows() - b.num_decode) * qd, 0);
      PagedPrefillArgs d = a;
      d.o = direct.data();
      d.q_start = q_start.data();
      d.seq_lens = b.seq_lens.data() + b.num_decode;
      d.block_table = b.block_table.data() + int64_t{b.num_decode} * b.max_blocks_per_seq;
      ref::paged_prefill_attention(d);
      EXPECT_TRUE(
          std::equal(direct.begin(), direct.end(), h_.o.begin() + int64_t{b.num_decode} * qd))
          << "step " << steps << ": packed prefill arguments read other rows, pages or lengths";
    }
    sampled->clear();
    for (size_t k = 0; k < b.sample_rows.size(); ++k)
      sampled->push_back(static_cast<int32_t>((b.positions[b.sample_rows[k]] * 31 + 7) % c_.vocab));
    return sim::StepTiming{1e-3 * (1 + b.num_rows() * 0.01), -1};
  }
  int32_t vocab() const override { return c_.vocab; }
  int32_t max_blocks_per_seq() const override { return gpu::table_columns(opt_); }

  int64_t steps = 0, graph_steps = 0, mixed_steps = 0;

 private:
  DecoderConfig c_;
  ExecutorOptions opt_;
  HostStep h_;
};

// The GPU tests' serving runs (tests/gpu/test_serving_executor.cu): tiny decoder, 4-token
// blocks, a 24-block pool (preemption), a 24-token budget (chunked prefill).
void serve(bool prefix, bool graph) {
  sim::WorkloadSpec w;
  w.seed = 77;
  w.num_requests = 16;
  w.arrival.kind = sim::ArrivalKind::kPoisson;
  w.arrival.rate = 4000;
  w.prompt = sim::LengthDist::uniform(3, 40);
  w.output = sim::LengthDist::uniform(1, 12);
  w.num_prefix_groups = prefix ? 2 : 0;
  w.shared_prefix_tokens = prefix ? 12 : 0;
  const std::vector<sim::Request> reqs = sim::generate_workload(w);
  int max_context = 0;
  for (const auto& q : reqs) max_context = std::max(max_context, q.prompt_tokens + q.output_tokens);
  sim::EngineConfig ec;
  ec.block_size = 4;
  ec.num_blocks = 24;
  ec.max_num_seqs = 8;
  ec.max_num_batched_tokens = 24;
  ec.watermark = 0;
  ec.prefix_caching = prefix;
  ec.audit_every_step = true;
  gpu::ServingExecutorOptions s;
  s.block_size = ec.block_size;
  s.pool_blocks = static_cast<int>(ec.num_blocks);
  s.max_rows = static_cast<int>(ec.max_num_batched_tokens);
  s.max_seqs = ec.max_num_seqs;
  s.max_context = max_context;
  s.graph = graph;
  const ExecutorOptions opt = gpu::executor_options(s);
  ASSERT_GT(gpu::table_columns(opt), opt.pool_blocks / opt.max_batch)
      << "a run whose table width the old rule got wrong";
  PackingExecutor ex(decoder_preset("tiny"), opt);
  sim::ServingRunOptions exact;
  exact.include_host_time = false;
  const sim::ServingRun run = sim::run_serving(ec, reqs, &ex, nullptr, exact);
  EXPECT_EQ(run.result.summary.num_finished + run.result.summary.num_rejected, 16);
  EXPECT_GT(run.result.summary.num_preemptions, 0);
  EXPECT_GT(ex.mixed_steps, 0);
  if (graph) EXPECT_GT(ex.graph_steps, 0);
  if (prefix) EXPECT_GT(run.result.summary.prefix_hit_tokens, 0);
}

TEST(ServingStepArgs, EngineScheduledStepsPackIntoValidArgumentsWithGraphs) {
  serve(false, true);
}

TEST(ServingStepArgs, EngineScheduledStepsPackIntoValidArgumentsWithPrefixHits) {
  serve(true, false);
}

}  // namespace
}  // namespace kvlab::test
