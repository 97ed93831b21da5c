// serving_executor.h: the GPU executor of a real serving run (sim::StepExecutor).
//
// sim::run_serving (sim/serve/serving_run.h) schedules every step with sim::Engine and hands
// the batch to this executor: a DecodeStepExecutor over ONE shared KV pool (the engine's
// blocks are the pool's blocks: one allocator, two clocks) runs the synthetic decoder's fused
// step (cuBLAS GEMMs, RoPE + append into the pool, decode attention from the registry over
// the decode rows, paged prefill attention over the chunks, LM head and greedy sampling over
// the sampled rows), decode-only steps as the CUDA graph of their batch bucket. The reported
// wall time covers the whole step on the host: upload, launches, the device work and the
// download of the sampled tokens (they feed the next step). warm_up() captures the graphs and
// launches every kernel once, so the measured run pays neither.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/runtime/decode_step_executor.h"
#include "reference/step/decoder_config.h"
#include "sim/serve/serving_run.h"

namespace kvlab::gpu {

// ServingExecutorOptions and the executor options they make: step_shapes.h.


class GpuServingExecutor : public sim::StepExecutor {
 public:
  // Validates, allocates (Unsupported when it does not fit the device) and warms up.
  GpuServingExecutor(const DecoderConfig& cfg, const ServingExecutorOptions& opt);
  sim::StepTiming execute(const sim::StepBatch& batch, std::vector<int32_t>* sampled) override;
  int32_t vocab() const override { return exec_->config().vocab; }
  int32_t max_blocks_per_seq() const override { return exec_->blocks_per_seq(); }

  // The graph buckets the executor captured (empty without graphs).
  const std::vector<int32_t>& graph_buckets() const { return buckets_; }
  const ServingExecutorOptions& options() const { return opt_; }
  DecodeStepExecutor& executor() { return *exec_; }
  // The parts of `batch` timed alone in its state (after execute(batch)).
  DecodeStepExecutor::ServingPartTimes time_parts(const sim::StepBatch& batch, int reps);

 private:
  ServingExecutorOptions opt_;
  std::vector<int32_t> buckets_;
  std::unique_ptr<DecodeStepExecutor> exec_;
};

}  // namespace kvlab::gpu
