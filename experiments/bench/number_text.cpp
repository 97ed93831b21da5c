// number_text.cpp: numeric axis values as text (see number_text.h).
#include "experiments/bench/number_text.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "reference/core/strings.h"

namespace kvlab::exp {

bool parse_int(const std::string& s, long long* out) {
  const std::string t = trim(s);
  if (t.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(t.c_str(), &end, 10);
  if (errno != 0 || end != t.c_str() + t.size()) return false;
  *out = v;
  return true;
}

bool parse_float(const std::string& s, double* out) {
  const std::string t = trim(s);
  if (t.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (errno != 0 || end != t.c_str() + t.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

std::string canonical_number(double v) {
  if (v == std::floor(v) && std::fabs(v) < 9.0e15) {
    std::ostringstream os;
    os << static_cast<long long>(v);
    return os.str();
  }
  std::ostringstream os;
  os.precision(12);
  os << v;
  return os.str();
}

}  // namespace kvlab::exp
