// axis_rule.cpp: see axis_rule.h.
#include "experiments/sweep/axis_rule.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "experiments/sweep/values.h"
#include "reference/core/error.h"

namespace kvlab::exp {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

bool is_pow2(int64_t v) {
  return v > 0 && (v & (v - 1)) == 0;
}

}  // namespace

std::string describe_rule(const AxisSpec& a) {
  switch (a.type) {
    case AxisType::kInt:
      if (a.pow2)
        return std::string(a.min <= 0 ? "0 or " : "") + "a power of two in [" +
               std::to_string(std::max<int64_t>(a.min, 1)) + ", " + std::to_string(a.max) + "]";
      return "an integer in [" + std::to_string(a.min) + ", " + std::to_string(a.max) + "]";
    case AxisType::kFloat:
      return std::string("a finite number in ") + (a.lo_open ? "(" : "[") +
             canonical_number(a.lo) + ", " +
             (std::isinf(a.hi) ? std::string("inf)") : canonical_number(a.hi) + "]");
    case AxisType::kEnum:
      return "one of " + join(a.choices) + ", or all";
    case AxisType::kString:
      return "a non-empty name without control characters, '=', ',' or ';'";
  }
  return "?";
}

std::string canonical_axis_value(const AxisSpec& a, const std::string& raw,
                                 const std::string& what) {
  const std::string v = trim(raw);
  auto bad = [&](const std::string& why) -> InvalidArgument {
    return InvalidArgument(what + " = '" + raw + "': " + why + " (allowed: " + describe_rule(a) +
                           ")");
  };
  if (v.empty()) throw bad("empty value");
  std::string canon;
  switch (a.type) {
    case AxisType::kInt: {
      errno = 0;
      char* end = nullptr;
      const long long x = std::strtoll(v.c_str(), &end, 10);
      if (end != v.c_str() + v.size()) throw bad("not an integer");
      if (errno == ERANGE) throw bad("beyond the 64-bit integer range");
      if (x < a.min || x > a.max) throw bad("out of range");
      if (a.pow2 && !(is_pow2(x) || (x == 0 && a.min <= 0))) throw bad("not a power of two");
      canon = std::to_string(x);
      break;
    }
    case AxisType::kFloat: {
      errno = 0;
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (end != v.c_str() + v.size()) throw bad("not a number");
      if (!std::isfinite(x) || errno == ERANGE) throw bad("not a finite number");
      if (x < a.lo || (a.lo_open && x == a.lo) || x > a.hi) throw bad("out of range");
      canon = canonical_number(x);
      break;
    }
    case AxisType::kEnum:
      // An older spelling names its choice: the expanded point holds the one spelling.
      canon = v;
      for (const auto& [alias, choice] : a.aliases)
        if (v == alias) canon = choice;
      if (std::find(a.choices.begin(), a.choices.end(), canon) == a.choices.end())
        throw InvalidArgument(what + ": unknown value '" + v + "' (allowed: " + join(a.choices) +
                              ", or all)");
      break;
    case AxisType::kString:
      for (unsigned char c : v)
        if (c < 0x20 || c == 0x7F) throw bad("contains a control character");
      if (v.find_first_of("=,;") != std::string::npos)
        throw bad("may not contain '=', ',' or ';'");
      canon = v;
      break;
  }
  if (a.check) {
    const std::string why = a.check(canon);
    if (!why.empty()) throw InvalidArgument(what + " = '" + raw + "': " + why);
  }
  return canon;
}

}  // namespace kvlab::exp
