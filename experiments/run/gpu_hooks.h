// gpu_hooks.h: what the driver needs from the GPU side, callable from CUDA-free code.
// Without CUDA (or without a device) these report that and do nothing.
#pragma once

#include <string>

#include "experiments/bench/bench.h"

namespace kvlab::exp {

// Fills ctx->device_present / device_name / peak_bytes_per_s.
void probe_device(RunContext* ctx);
// Measures the read and copy ceilings on the current device (GPU timing harness) into
// ctx; returns false (and why in *note) when there is no device.
bool measure_ceilings(RunContext* ctx, std::string* note);

}  // namespace kvlab::exp
