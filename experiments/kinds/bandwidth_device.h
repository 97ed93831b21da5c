// bandwidth_device.h: the GPU half of the "bandwidth" kind (experiments/kinds/bandwidth.cpp
// declares the kind: axes, metrics, checks). CUDA-free declarations; bandwidth_device.cpp
// implements them with gpu/bench, or reports "built without CUDA".
#pragma once

#include <string>

#include "experiments/bench/bench.h"

namespace kvlab::exp {

// "" when the point's kernel (op, load, depth) is compiled, else why not.
std::string bandwidth_kernel_unsupported(const Point& p);
// Validates (a copy's destination equals its source) and times the point's kernel over
// `mib` MiB with ctx's [timing] options. Throws Unsupported without CUDA or device memory.
Record run_bandwidth(const Point& p, RunContext& ctx);

}  // namespace kvlab::exp
