// serving_executor.cu: see serving_executor.h.
#include "gpu/runtime/serving_executor.h"

#include <algorithm>
#include <chrono>

#include "reference/core/error.h"
#include "sim/cost/serving_step_model.h"

namespace kvlab::gpu {

GpuServingExecutor::GpuServingExecutor(const DecoderConfig& cfg, const ServingExecutorOptions& opt)
    : opt_(opt) {
  const ExecutorOptions o = executor_options(opt);
  if (opt.graph) buckets_.assign(o.graph_buckets.begin(), o.graph_buckets.end());
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
