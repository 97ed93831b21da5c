#include "tests/common/tolerance_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "reference/layout/layout_names.h"

namespace kvlab::test {
namespace {

// KVLAB_TOLERANCE_LOG=<file>: every passing table check made through within_tolerance(op, ...)
// appends one CSV line (the columns of data/tolerance/cpu_measurements.csv, one case per
// line), so a test run is also a measurement of the error behind each row (failing checks
// are planted errors that a test expects to be rejected, or real failures: not data);
// tests/tolerance/summarize_log.py folds the lines per row.
void log_check(const std::vector<float>& out, const std::vector<float>& ref, Op op, KvFormat format,
               DType out_dtype, const Tolerance& tol, const ErrorStats& s) {
  const char* path = std::getenv("KVLAB_TOLERANCE_LOG");
  if (!path || !*path) return;
  double needed = 0;
  for (size_t i = 0; i < out.size() && i < ref.size(); ++i)
    if (std::isfinite(out[i]) && std::isfinite(ref[i]))
      needed = std::max(needed, std::fabs(double(out[i]) - ref[i]) - tol.rtol * std::fabs(ref[i]));
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string test = info ? std::string(info->test_suite_name()) + "." + info->name() : "?";
  for (char& c : test)
    if (c == ',') c = ';';
  static std::mutex m;
  std::lock_guard<std::mutex> lock(m);
  FILE* f = std::fopen(path, "a");
  if (!f) return;
  std::fprintf(f, "%s,%s,%s,0,%s,test check,1,%lld,%.6g,%.6g,%.6g,%.6g,check\n",
               to_string(op).c_str(), to_string(format).c_str(), to_string(out_dtype).c_str(),
               test.c_str(), static_cast<long long>(s.count), tol.rtol, s.max_abs, needed,
               std::isfinite(s.nmse) ? s.nmse : 0.0);
  std::fclose(f);
}

}  // namespace

::testing::AssertionResult within_tolerance(const std::vector<float>& out,
                                            const std::vector<float>& ref, const Tolerance& tol,
                                            const std::string& what, const std::string& context,
                                            ErrorStats* stats) {
  if (out.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": out has " << out.size()
                                         << " elements, ref has " << ref.size() << " | " << context;
  ErrorStats s;
  const bool ok = check(out, ref, tol, &s);
  if (stats) *stats = s;
  if (ok) return ::testing::AssertionSuccess() << what << " " << to_string(s);
  std::ostringstream os;
  os << what << " (atol=" << tol.atol << " rtol=" << tol.rtol << " nmse_max=" << tol.nmse_max
     << "): " << explain_failure(s, tol) << "\n  stats: " << to_string(s);
  if (s.worst_index >= 0)
    os << "\n  worst: index " << s.worst_index << " out=" << out[static_cast<size_t>(s.worst_index)]
       << " ref=" << ref[static_cast<size_t>(s.worst_index)];
  os << "\n  entry: " << tol.why << "\n  context: " << context;
  return ::testing::AssertionFailure() << os.str();
}

::testing::AssertionResult within_tolerance(const std::vector<float>& out,
                                            const std::vector<float>& ref, Op op, KvFormat format,
                                            DType out_dtype, const std::string& context,
                                            ErrorStats* stats) {
  const std::string what = to_string(op) + "/" + to_string(format) + "/" + to_string(out_dtype);
  const Tolerance tol = tolerance(op, format, out_dtype);
  ErrorStats s;
  ::testing::AssertionResult r = within_tolerance(out, ref, tol, what, context, &s);
  if (stats) *stats = s;
  if (r) log_check(out, ref, op, format, out_dtype, tol, s);
  return r;
}

}  // namespace kvlab::test
