// bench.h: the timing options and results of gpu/bench's harness as Python dicts (bench.cpp),
// shared by the bindings that time something (bench.cpp's bandwidth kernels, gpu.cpp's
// PreparedDecode.time).
#pragma once

#include <nanobind/nanobind.h>

#include "reference/core/timing.h"

namespace kvlab::py {

namespace nb = nanobind;

// TimingOptions from a dict of its field names (warmup, min_reps, max_reps, target_rel_iqr,
// max_seconds, cold_l2, graph, graph_calls, hold_stream); fields not given keep timing.h's
// defaults.
// An unknown name or an impossible value: InvalidArgument.
TimingOptions timing_options(const nb::dict& d);

// Every field of a Timing (samples_us as a list, flush by name).
nb::dict timing_dict(const Timing& t);

void bind_bench(nb::module_& m);

}  // namespace kvlab::py
