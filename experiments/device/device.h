// gpu_hooks.h: what the driver needs from the GPU side, callable from CUDA-free code.
// Without CUDA (or without a device) these report that and do nothing.
#pragma once

#include <string>

#include "experiments/bench/bench.h"

#if defined(KVLAB_HAVE_CUDA)
#include "gpu/bench/harness.h"
#endif

namespace kvlab::exp {

#if defined(KVLAB_HAVE_CUDA)
// The harness options of a sweep's [timing] section; graph: CUDA-graph replay.
gpu::bench::TimingOptions to_harness(const TimingConfig& t, bool graph);
#endif

// Fills ctx->device_present / device_name / peak_bytes_per_s.
void probe_device(RunContext* ctx);
// Measures the read and copy ceilings on the current device (GPU timing harness) into
// ctx; returns false (and why in *note) when there is no device.
bool measure_ceilings(RunContext* ctx, std::string* note);
// `kvlab info`'s GPU check: one decode version on a small paged case against the reference,
// through the tolerance table. 1 pass, 0 fail (why in *detail), -1 not run (why: built
// without CUDA, no device).
int gpu_self_check(std::string* detail);

}  // namespace kvlab::exp
