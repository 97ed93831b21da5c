// values.cpp: axis value lists and ranges (see values.h).
#include "experiments/sweep/values.h"

#include "reference/core/error.h"

namespace kvlab::exp {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

namespace {

long long range_int(const std::string& s, const std::string& item, const std::string& what) {
  long long v = 0;
  if (!parse_int(s, &v))
    throw InvalidArgument(what + ": malformed range '" + item + "': '" + s + "' is not an integer");
  return v;
}

void expand_range(const std::string& item, const std::string& what, std::vector<std::string>* out) {
  const auto parts = split(item, ':');
  const std::string kind = trim(parts[0]);
  const std::string forms = " (allowed: pow2:LO:HI, range:LO:HI[:STEP], geom:LO:HI:FACTOR)";
  constexpr size_t kMaxItems = 1000000;
  if (kind == "pow2") {
    if (parts.size() != 3) throw InvalidArgument(what + ": malformed range '" + item + "'" + forms);
    const long long lo = range_int(parts[1], item, what), hi = range_int(parts[2], item, what);
    if (lo < 0 || hi > 62 || lo > hi)
      throw InvalidArgument(what + ": malformed range '" + item + "': need 0 <= LO <= HI <= 62");
    for (long long e = lo; e <= hi; ++e) out->push_back(std::to_string(1LL << e));
  } else if (kind == "range") {
    if (parts.size() != 3 && parts.size() != 4)
      throw InvalidArgument(what + ": malformed range '" + item + "'" + forms);
    const long long lo = range_int(parts[1], item, what), hi = range_int(parts[2], item, what);
    const long long step = parts.size() == 4 ? range_int(parts[3], item, what) : 1;
    if (step <= 0)
      throw InvalidArgument(what + ": malformed range '" + item + "': STEP must be positive");
    if (lo > hi) throw InvalidArgument(what + ": empty range '" + item + "' (LO > HI)");
    if (static_cast<unsigned long long>(hi - lo) / step >= kMaxItems)
      throw InvalidArgument(what + ": range '" + item + "' has more than " +
                            std::to_string(kMaxItems) + " values");
    for (long long v = lo; v <= hi; v += step) out->push_back(std::to_string(v));
  } else if (kind == "geom") {
    if (parts.size() != 4) throw InvalidArgument(what + ": malformed range '" + item + "'" + forms);
    const long long lo = range_int(parts[1], item, what), hi = range_int(parts[2], item, what);
    const long long f = range_int(parts[3], item, what);
    if (lo <= 0 || f < 2 || lo > hi)
      throw InvalidArgument(what + ": malformed range '" + item +
                            "': need 0 < LO <= HI and FACTOR >= 2");
    for (long long v = lo; v <= hi; v *= f) {
      out->push_back(std::to_string(v));
      if (v > hi / f) break;
    }
  } else {
    throw InvalidArgument(what + ": unknown range kind '" + kind + "' in '" + item + "'" + forms);
  }
}

}  // namespace

std::vector<std::string> parse_value_list(const std::string& text, const std::string& what) {
  std::vector<std::string> out;
  if (trim(text).empty()) throw InvalidArgument(what + ": empty value list");
  for (const auto& raw : split(text, ',')) {
    const std::string item = trim(raw);
    if (item.empty()) throw InvalidArgument(what + ": empty item in '" + text + "'");
    if (item.find(':') != std::string::npos) {
      expand_range(item, what, &out);
    } else {
      out.push_back(item);
    }
  }
  return out;
}

std::pair<std::string, std::string> split_assignment(const std::string& text,
                                                     const std::string& what) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || trim(text.substr(0, eq)).empty())
    throw InvalidArgument(what + ": expected NAME=VALUES, got '" + text + "'");
  return {trim(text.substr(0, eq)), trim(text.substr(eq + 1))};
}

}  // namespace kvlab::exp
