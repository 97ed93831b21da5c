// registry.h: every point kind (bench) the driver knows, in one list.
//
// Registration is explicit (registry.cpp calls each kind's factory): self-registering
// static objects would be dropped by the linker from the static library kvlab_exp.
// A kind appears here only once the code it measures exists on main (no stubs).
// The list sits beside the command line, the only layer above every kind: the layers
// below it (sweep expansion, the runner, the result file) receive it as a KindList.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "experiments/bench/kind_list.h"

namespace kvlab::exp {

const KindList& registered_kinds();

// registered_kinds().all() and .find(name) (InvalidArgument listing the known kinds).
const std::vector<std::unique_ptr<Bench>>& benches();
Bench& find_bench(const std::string& name);

}  // namespace kvlab::exp
