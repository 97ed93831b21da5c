// bench.cpp: Point accessors and status names.
#include "experiments/bench/bench.h"

#include "experiments/bench/number_text.h"
#include "reference/core/error.h"

namespace kvlab::exp {

std::string Point::key() const {
  std::string k = study + "/" + kind + ":";
  for (size_t i = 0; i < axes.size(); ++i)
    k += (i ? "," : "") + axes[i].first + "=" + axes[i].second;
  return k;
}

bool Point::has(const std::string& axis) const {
  for (const auto& a : axes)
    if (a.first == axis) return true;
  return false;
}

const std::string& Point::str(const std::string& axis) const {
  for (const auto& a : axes)
    if (a.first == axis) return a.second;
  throw InvalidArgument("point " + key() + " has no axis '" + axis + "'");
}

int64_t Point::integer(const std::string& axis) const {
  long long v = 0;
  if (!parse_int(str(axis), &v))
    throw InvalidArgument("axis " + axis + " = '" + str(axis) + "' is not an integer");
  return v;
}

double Point::number(const std::string& axis) const {
  double v = 0;
  if (!parse_float(str(axis), &v))
    throw InvalidArgument("axis " + axis + " = '" + str(axis) + "' is not a number");
  return v;
}

std::string Point::describe() const {
  std::string s;
  for (size_t i = 0; i < axes.size(); ++i)
    s += (i ? " " : "") + axes[i].first + "=" + axes[i].second;
  return s;
}

std::string to_string(Status s) {
  switch (s) {
    case Status::kOk:
      return "ok";
    case Status::kSkipped:
      return "skipped";
    case Status::kFailed:
      return "failed";
  }
  return "?";
}

}  // namespace kvlab::exp
