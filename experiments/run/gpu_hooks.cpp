// gpu_hooks.cpp: the driver's calls into the GPU side (see gpu_hooks.h).
#include "experiments/run/gpu_hooks.h"

#include "experiments/results/provenance.h"

#if defined(KVLAB_HAVE_CUDA)
#include "gpu/bench/harness.h"
#endif

namespace kvlab::exp {

#if defined(KVLAB_HAVE_CUDA)
gpu::bench::TimingOptions to_harness(const TimingConfig& t) {
  gpu::bench::TimingOptions o;
  o.warmup = t.warmup;
  o.min_reps = t.min_reps;
  o.max_reps = t.max_reps;
  o.target_rel_iqr = t.target_rel_iqr;
  o.max_seconds = t.max_seconds;
  o.cold_l2 = t.cold_l2;
  o.graph = t.graph;
  o.graph_calls = t.graph_calls;
  return o;
}
#endif

void probe_device(RunContext* ctx) {
  const DeviceSummary d = device_summary();
  ctx->device_present = d.present;
  ctx->device_name = d.present ? d.name : d.error;
  ctx->peak_bytes_per_s = d.peak_bytes_per_s;
}

bool measure_ceilings(RunContext* ctx, std::string* note) {
#if defined(KVLAB_HAVE_CUDA)
  if (!ctx->device_present) {
    *note = ctx->device_name;
    return false;
  }
  const gpu::bench::Ceilings c = gpu::bench::measure_ceilings(to_harness(ctx->timing_cfg));
  ctx->read_ceiling_bytes_per_s = c.read_bytes_per_s;
  ctx->copy_ceiling_bytes_per_s = c.copy_bytes_per_s;
  return true;
#else
  (void)ctx;
  *note = "built without CUDA";
  return false;
#endif
}

}  // namespace kvlab::exp
