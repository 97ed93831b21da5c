// timing.h: the GPU timing harness's options from a sweep's [timing] section (the CUDA
// backend's kinds time through gpu/bench/harness.h).
#pragma once

#include "experiments/bench/bench.h"
#include "gpu/bench/harness.h"

namespace kvlab::exp {

// graph: CUDA-graph replay.
gpu::bench::TimingOptions to_harness(const TimingConfig& t, bool graph);

}  // namespace kvlab::exp
