#include "tests/common/tolerance_check.h"

#include <sstream>

#include "reference/layout/layout_names.h"

namespace kvlab::test {

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
  return within_tolerance(out, ref, tolerance(op, format, out_dtype), what, context, stats);
}

}  // namespace kvlab::test
