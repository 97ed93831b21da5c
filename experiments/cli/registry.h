// registry.h: every bench (point kind) the driver knows, in one list.
//
// Registration is explicit (registry.cpp calls each kind's factory): self-registering
// static objects would be dropped by the linker from the static library kvlab_exp.
// A kind appears here only once the code it measures exists on main (no stubs).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "experiments/bench/bench.h"

namespace kvlab::exp {

const std::vector<std::unique_ptr<Bench>>& benches();
// Throws InvalidArgument listing the known kinds.
Bench& find_bench(const std::string& name);
std::vector<std::string> bench_names();

}  // namespace kvlab::exp
