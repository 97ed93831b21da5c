// kinds.h: factories of the benches (one file per kind in experiments/kinds/).
#pragma once

#include <memory>

#include "experiments/bench/bench.h"

namespace kvlab::exp {

std::unique_ptr<Bench> make_format_error_bench();
std::unique_ptr<Bench> make_quant_error_bench();
std::unique_ptr<Bench> make_capacity_bench();

}  // namespace kvlab::exp
