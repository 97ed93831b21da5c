// device.h: everything the driver does on a GPU, behind CUDA-free declarations.
//
// The driver's layers (kinds/, run/, results/, cli/, tools/) call only these and include
// nothing from gpu/. Two libraries implement them, and a build links exactly one:
//   experiments/cuda/  the CUDA backend (library kvlab_exp_cuda, CUDA builds): the kernels of
//                      gpu/ and the runtime layer gpu/runtime/;
//   experiments/stub/  the stub library (kvlab_exp_stub, CPU-only builds): every entry
//                      reports "built without CUDA" (the answers below say how).
// This is Ginkgo's model of a core above its backends with stubs for the backends not
// built, in place of #if blocks scattered over the driver.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "experiments/bench/bench.h"
#include "reference/dsv4/args.h"
#include "reference/dsv4/views.h"
#include "reference/formats/formats.h"
#include "reference/step/decoder_config.h"
#include "reference/step/decoder_weights.h"
#include "sim/serve/serving_run.h"
#include "sim/serve/synthetic_step.h"

namespace kvlab::exp {

// ---- the build and the device ----------------------------------------------------------
// Whether this binary has the CUDA backend (false: the stub library).
bool built_with_cuda();
// The CUDA runtime version the binary was built with ("13.0"; "" without CUDA).
std::string cuda_runtime_version();

struct DeviceSummary {
  bool present = false;
  std::string error;  // why there is none ("built without CUDA", the driver's message)
  int count = 0;
  std::string name;
  int sm_count = 0, sm_clock_khz = 0, mem_clock_khz = 0, mem_bus_bits = 0, l2_bytes = 0;
  double peak_bytes_per_s = 0;
  uint64_t global_mem_bytes = 0;
};
// The first device (present false and the reason in `error` when there is none).
DeviceSummary device_summary();

// Fills ctx->device_present / device_name / peak_bytes_per_s.
void probe_device(RunContext* ctx);
// Measures the read and copy ceilings on the current device (GPU timing harness) into
// ctx; returns false (and why in *note) when there is no device.
bool measure_ceilings(RunContext* ctx, std::string* note);
// `kvlab info`'s GPU check: one decode version on a small paged case against the reference,
// through the tolerance table. 1 pass, 0 fail (why in *detail), -1 not run (why: built
// without CUDA, no device).
int gpu_self_check(std::string* detail);

// ---- the GPU halves of the GPU kinds ---------------------------------------------------
// kinds/gpu_kinds.cpp declares the kinds (axes, metrics, checks, estimates); each run()
// calls its entry below, which validates the point against the CPU reference and then times
// it with ctx's [timing] options, as experiments/cuda/<kind>.cpp describes. The runner
// records points of GPU kinds as skipped without a device, so the stubs (which throw
// Unsupported("built without CUDA"): a skipped point) are reached only by direct calls.

// State a kind keeps from one point to the next (the decode_attention kind's device pools,
// reused by consecutive points that differ only in version or graph mode).
class DeviceState {
 public:
  virtual ~DeviceState() = default;
};

// The names of the registered GPU decode versions (gpu/attention/decode.h), oldest first;
// empty without CUDA.
std::vector<std::string> decode_version_names();
Record run_decode_attention(const Point& p, RunContext& ctx, std::unique_ptr<DeviceState>* state);
// At most this many tokens of an append point are checked byte for byte against the host
// reference (larger points check a case of this many tokens of the same shape class).
constexpr int64_t kAppendValidatedTokens = 4096;
Record run_append(const Point& p, RunContext& ctx);
Record run_decode_step(const Point& p, RunContext& ctx);
Record run_step_gemm(const Point& p, RunContext& ctx);
// The bandwidth kind: "" when the point's memory kernel (op, load, depth) is compiled, else why
// not; and the point itself: validates (a copy's destination equals its source) and times the
// kernel over `mib` MiB with ctx's [timing] options (Unsupported without device memory).
std::string bandwidth_kernel_unsupported(const Point& p);
Record run_bandwidth(const Point& p, RunContext& ctx);
// The launch_floor kind (kinds/launch_floor.cpp): validates the floor kernel of the point (chain,
// tail_kib) and times it, primed as the point says, with ctx's [timing] options.
Record run_launch_floor(const Point& p, RunContext& ctx);
// The prefill_attention kind: the registered GPU paged-prefill versions (empty without CUDA)
// and a point: validated against ref::paged_prefill_attention, then timed.
std::vector<std::string> prefill_version_names();
Record run_prefill_attention(const Point& p, RunContext& ctx);

// ---- the serving kinds (kinds/serving.cpp, kinds/serving_step.cpp) ---------------------
// What the GPU serving executor (gpu/runtime/serving_executor.h) is built for: the values of
// the kinds' executor axes (kinds/serving_common.h).
struct ServingExecutorConfig {
  DecoderConfig decoder;
  int32_t block_size = 16;
  int32_t pool_blocks = 0;
  int32_t max_num_seqs = 0;
  int32_t max_num_batched_tokens = 0;
  int32_t max_context = 0;
  bool graph = true;
  // "llama3-8b L32 ... bs16 pool4096 seqs64 rows512 ctx2048 graph"
  std::string key() const {
    return to_string(decoder) + " bs" + std::to_string(block_size) + " pool" +
           std::to_string(pool_blocks) + " seqs" + std::to_string(max_num_seqs) + " rows" +
           std::to_string(max_num_batched_tokens) + " ctx" + std::to_string(max_context) +
           (graph ? " graph" : " eager");
  }
};
// The process's GPU serving executor for c, built (or rebuilt when c differs from the last
// one), as the control plane's step executor (sim/serve/serving_run.h: the same engine drives
// it and the prediction).
sim::StepExecutor& serving_executor(const ServingExecutorConfig& c);
// serving_step's GPU half: the synthetic step s on c's executor, validated (the mixed step
// against its parts run alone, or a CUDA-graph replay against its eager twin), then timed.
Record run_serving_step(const Point& p, RunContext& ctx, const ServingExecutorConfig& c,
                        const sim::SyntheticStep& s);

// ---- real models (experiments/model/model_eval.h) ------------------------------------
// The GPU engine of a teacher-forced run: the decode-step executor (gpu/runtime/
// decode_step_executor.h) over the weights w, one sequence whose paged cache holds `format`
// (per-layer pool scales k_scales / v_scales, one per layer), fed tokens[0], tokens[1], ...
// one decode step each (eager, fused) for the first `steps` tokens; after token i it calls
// row(i, logits) with the step's [vocab] logits. Unsupported when there is no device.
void decode_logits_on_device(const DecoderConfig& c, const DecoderWeights& w, KvFormat format,
                             const std::vector<float>& k_scales, const std::vector<float>& v_scales,
                             int max_context, const std::vector<int32_t>& tokens, int steps,
                             const std::function<void(int, const float*)>& row);

// ---- tools ------------------------------------------------------------------------------
// kvlab_dsv4_report --gpu: the GPU append_swa kernel over a host ring. `ring` points at
// host arrays (its data, RoPE, inverse scales, positions and heads) and `args` at host raw
// tokens, slots and positions; they are copied to the device, appended there, and the
// ring's data, RoPE and inverse-scale arrays copied back over the host ones.
void dsv4_append_swa_on_device(const Dsv4SwaView& ring, const Dsv4AppendSwaArgs& args);

}  // namespace kvlab::exp
