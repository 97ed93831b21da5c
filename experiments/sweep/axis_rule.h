// axis_rule.h: the one validation rule of sweep axis values, the same for every kind.
//
// Every value a sweep would run (config lists and ranges, --axis overrides, the kinds'
// defaults) passes through canonical_axis_value() while the sweep is expanded, before any
// output is touched. The rule is what the kind declares on its axes (bench.h AxisSpec: type,
// range, powers of two, an optional check), so a new kind gets it by declaring its axes.
#pragma once

#include <string>

#include "experiments/bench/bench.h"

namespace kvlab::exp {

// The canonical text of one value of axis `a` ("016" -> "16", "1e3" -> "1000"), or
// InvalidArgument "<what> = '<value>': <why> (allowed: ...)". `what` names where the value
// came from (config file, study, axis).
std::string canonical_axis_value(const AxisSpec& a, const std::string& value,
                                 const std::string& what);

// The rule of `a` in words ("an integer in [1, 4096]", "one of bf16, fp8, ...").
std::string describe_rule(const AxisSpec& a);

}  // namespace kvlab::exp
