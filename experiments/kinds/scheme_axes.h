// scheme_axes.h: the override axes of the kinds that quantize with a scheme preset
// (quant_error, real_kv_error, model_quality), declared once so that every kind checks a
// group size, scale rule or Hadamard size the same way: a value no scheme can take is a bad
// config (exit 2 before anything runs), one that this preset cannot take is a skipped point.
#pragma once

#include <vector>

#include "experiments/bench/bench.h"
#include "reference/quant/schemes.h"

namespace kvlab::exp {

// group_size (0 or a power of two up to 4096), scale_rule (preset or a forced rule) and, when
// with_hadamard, hadamard (0 or a power of two in [2, 32768]).
std::vector<AxisSpec> scheme_override_axes(bool with_hadamard);
// The override a point's axes set (hadamard 0 where the kind has no such axis).
ref::SchemeOverride scheme_override(const Point& p);

}  // namespace kvlab::exp
