// number_text.h: numeric axis values as text. A point's axes are text (Point::axes); these
// read them as numbers and write numbers in the canonical form that identifies a point
// across runs (so "16", "16.0" and " 16" name the same point).
#pragma once

#include <string>

namespace kvlab::exp {

// Whole-string conversions of s without surrounding whitespace; false when s is not one
// number (empty, trailing characters, out of range; parse_float: not finite).
bool parse_int(const std::string& s, long long* out);
bool parse_float(const std::string& s, double* out);
// Integers (|v| < 9e15) without a decimal point, other values with 12 significant digits.
std::string canonical_number(double v);

}  // namespace kvlab::exp
