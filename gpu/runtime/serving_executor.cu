// serving_executor.cu: see serving_executor.h.
#include "gpu/runtime/serving_executor.h"

#include <algorithm>
#include <chrono>

#include "reference/core/error.h"
#include "sim/cost/serving_step_model.h"

namespace kvlab::gpu {

GpuServingExecutor::GpuServingExecutor(const DecoderConfig& cfg, const ServingExecutorOptions& opt)
    : opt_(opt) {
  KVLAB_REQUIRE(opt.pool_blocks >= 1,
                "serving executor: pool_blocks " << opt.pool_blocks << " must be >= 1");
  KVLAB_REQUIRE(opt.max_rows >= 1 && opt.max_seqs >= 1 && opt.max_context >= 1,
                "serving executor: max_rows " << opt.max_rows << ", max_seqs " << opt.max_seqs
                                              << ", max_context " << opt.max_context
                                              << " must be >= 1");
  ExecutorOptions o;
  o.kv_format = KvFormat::kBF16;
  o.kv_layout = KvLayout::kNHD;
  o.block_size = opt.block_size;
  o.max_batch = std::max(opt.max_rows, opt.max_seqs);
  o.max_context = opt.max_context;
  o.attn_version = opt.attn_version;
  o.pool_blocks = opt.pool_blocks;
  if (opt.graph) {
    buckets_ = sim::default_graph_buckets(opt.max_seqs);
    o.graph_buckets.assign(buckets_.begin(), buckets_.end());
  }
  exec_ = std::make_unique<DecodeStepExecutor>(cfg, o);
  exec_->warm_up_serving(opt.graph);
}

sim::StepTiming GpuServingExecutor::execute(const sim::StepBatch& batch,
                                            std::vector<int32_t>* sampled) {
  const auto t0 = std::chrono::steady_clock::now();
  const double device_ms = exec_->serving_step(batch, opt_.graph, sampled);
  sim::StepTiming t;
  t.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  t.device_s = device_ms * 1e-3;
  return t;
}

DecodeStepExecutor::ServingPartTimes GpuServingExecutor::time_parts(const sim::StepBatch& batch,
                                                                    int reps) {
  return exec_->time_serving_parts(batch, opt_.graph, reps);
}

}  // namespace kvlab::gpu
