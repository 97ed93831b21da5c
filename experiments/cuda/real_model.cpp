// real_model.cpp: the GPU engine of the real-model runs (experiments/model/model_eval.h,
// teacher_forced with engine gpu): the decode-step executor (gpu/runtime/
// decode_step_executor.h) over a model file's weights, one sequence fed one token per step.
#include <cuda_runtime_api.h>

#include "experiments/device/device.h"
#include "gpu/runtime/decode_step_executor.h"
#include "reference/core/error.h"

namespace kvlab::exp {

void decode_logits_on_device(const DecoderConfig& c, const DecoderWeights& w, KvFormat format,
                             const std::vector<float>& k_scales, const std::vector<float>& v_scales,
                             int max_context, const std::vector<int32_t>& tokens, int steps,
                             const std::function<void(int, const float*)>& row) {
  KVLAB_REQUIRE(
      steps >= 0 && steps <= static_cast<int>(tokens.size()),
      "decode_logits_on_device: " << steps << " steps for " << tokens.size() << " tokens");
  int count = 0;
  KVLAB_UNSUPPORTED_IF(cudaGetDeviceCount(&count) != cudaSuccess || count < 1, "no device");
  gpu::ExecutorOptions o;
  o.kv_format = format;
  o.block_size = 16;
  o.max_batch = 1;
  o.max_context = max_context;
  o.layer_k_scales = k_scales;
  o.layer_v_scales = v_scales;
  gpu::DecodeStepExecutor e(c, o, w);
  e.start(1);
  for (int i = 0; i < steps; ++i) {
    e.step(std::vector<int32_t>{tokens[i]}, gpu::StepVariant::kEagerFused, gpu::Sampling{});
    const std::vector<float> lg = e.logits();
    row(i, lg.data());
  }
}

}  // namespace kvlab::exp
