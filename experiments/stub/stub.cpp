// stub.cpp: the stub library (kvlab_exp_stub): experiments/device/device.h for builds without
// CUDA. Facts answer "no CUDA" (no device, no version, no decode versions, the GPU check not
// run); everything that would run on a device throws Unsupported("built without CUDA"),
// which the driver records as a skipped point (tools report it and exit 2).
#include "experiments/device/device.h"
#include "reference/core/error.h"

namespace kvlab::exp {
namespace {

constexpr const char* kNoCuda = "built without CUDA";

[[noreturn]] void not_built() {
  throw Unsupported(kNoCuda);
}

}  // namespace

bool built_with_cuda() {
  return false;
}

std::string cuda_runtime_version() {
  return "";
}

DeviceSummary device_summary() {
  DeviceSummary d;
  d.error = kNoCuda;
  return d;
}

void probe_device(RunContext* ctx) {
  ctx->device_present = false;
  ctx->device_name = kNoCuda;
  ctx->peak_bytes_per_s = 0;
}

bool measure_ceilings(RunContext*, std::string* note) {
  *note = kNoCuda;
  return false;
}

int gpu_self_check(std::string* detail) {
  *detail = kNoCuda;
  return -1;
}

std::vector<std::string> decode_version_names() {
  return {};
}

Record run_decode_attention(const Point&, RunContext&, std::unique_ptr<DeviceState>*) {
  not_built();
}
Record run_append(const Point&, RunContext&) {
  not_built();
}
Record run_decode_step(const Point&, RunContext&) {
  not_built();
}
Record run_step_gemm(const Point&, RunContext&) {
  not_built();
}
std::string bandwidth_kernel_unsupported(const Point&) {
  return "";  // the point is then skipped by run_bandwidth, with the reason
}
Record run_bandwidth(const Point&, RunContext&) {
  not_built();
}
Record run_launch_floor(const Point&, RunContext&) {
  not_built();
}
std::vector<std::string> prefill_version_names() {
  return {};
}
Record run_prefill_attention(const Point&, RunContext&) {
  not_built();
}
sim::StepExecutor& serving_executor(const ServingExecutorConfig&) {
  not_built();
}
Record run_serving_step(const Point&, RunContext&, const ServingExecutorConfig&,
                        const sim::SyntheticStep&) {
  not_built();
}

void decode_logits_on_device(const DecoderConfig&, const DecoderWeights&, KvFormat,
                             const std::vector<float>&, const std::vector<float>&, int,
                             const std::vector<int32_t>&, int,
                             const std::function<void(int, const float*)>&) {
  not_built();
}

void dsv4_append_swa_on_device(const Dsv4SwaView&, const Dsv4AppendSwaArgs&) {
  not_built();
}

}  // namespace kvlab::exp
