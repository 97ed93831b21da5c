// values.h: axis value lists as written in sweep configs and on the command line.
//
//   block_size = 1,16,64          a list
//   context    = pow2:9:17        2^9, 2^10, ..., 2^17
//   batch      = range:1:8:2      1, 3, 5, 7 (inclusive end; step defaults to 1)
//   ratio      = geom:4:128:2     4, 8, 16, ..., 128 (multiply by the factor)
//   mixed      = 1, pow2:4:6, 100 items and ranges combine, in order
// Whitespace around items is ignored; an empty item, a malformed range or an empty range
// is an error naming the text.
#pragma once

#include <string>
#include <vector>

#include "experiments/bench/number_text.h"  // parse_int, parse_float, canonical_number
#include "reference/core/strings.h"         // trim

namespace kvlab::exp {

std::vector<std::string> parse_value_list(const std::string& text, const std::string& what);

// "name=values" -> (name, values text); throws naming the argument when '=' is missing.
std::pair<std::string, std::string> split_assignment(const std::string& text,
                                                     const std::string& what);

std::vector<std::string> split(const std::string& s, char sep);

}  // namespace kvlab::exp
