// test_tolerance_data.cpp: the tolerance table against the measurements it names.
//
// data/tolerance/*.csv hold measured errors (tests/tolerance/tolerance_data.cpp writes
// cpu_measurements.csv; tests/tolerance/summarize_log.py writes cpu_checks.csv from a logged
// test run), one line per (op, format, dtype, layers, dataset). For every line, the row the
// table returns for its key must hold the measurement (fit: needed atol <= atol at the same
// rtol, worst NMSE <= the NMSE bound for the line's unit size: nmse_bound() of the elements per
// case), whichever file holds the line. For the empirical rows (data = cpu_measurements.csv or
// h100_step_logits.csv) the bound must also bite against the lines of that file: at
// most 4x the worst needed atol and 16x (4x in amplitude) the worst NMSE of their lines (a
// row with a small-unit NMSE bound: each of its two bounds against the lines of its units),
// so a bound cannot drift far above what the data supports.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"

namespace kvlab {
namespace {

constexpr double kMaxAtolMargin = 4.0;   // bound / worst needed atol
constexpr double kMaxNmseMargin = 16.0;  // bound / worst NMSE (4x in amplitude)

struct Line {
  std::string file;
  int number = 0;
  std::string op, format, dtype, subject, dataset;
  int layers = 0;
  int64_t cases = 0, elements = 0;
  double rtol = 0, max_abs = 0, needed_atol = 0, worst_nmse = 0;
  // Elements per case: the unit an NMSE bound is chosen for (each line of the tool measures
  // cases of one unit size class).
  int64_t unit() const { return cases > 0 ? elements / cases : elements; }
  std::string where() const {
    return file + ":" + std::to_string(number) + " (" + op + " " + format + " " + dtype + " " +
           subject + "; " + dataset + ")";
  }
};

std::vector<Line> read_csv(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path << " is missing (tests run from the repository root)";
  std::vector<Line> out;
  std::string line;
  int n = 0;
  bool header = false;
  while (std::getline(f, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> p;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) p.push_back(x);
    if (!header) {
      header = true;
      EXPECT_EQ(p.size(), 13u) << path << ": header " << line;
      continue;
    }
    if (p.size() != 13u) {
      ADD_FAILURE() << path << ":" << n << ": " << p.size() << " fields";
      continue;
    }
    Line l;
    l.file = path;
    l.number = n;
    l.op = p[0];
    l.format = p[1];
    l.dtype = p[2];
    l.layers = std::stoi(p[3]);
    l.subject = p[4];
    l.dataset = p[5];
    l.cases = std::stoll(p[6]);
    l.elements = std::stoll(p[7]);
    l.rtol = std::stod(p[8]);
    l.max_abs = std::stod(p[9]);
    l.needed_atol = std::stod(p[10]);
    l.worst_nmse = std::stod(p[11]);
    out.push_back(l);
  }
  return out;
}

Op parse_op(const std::string& s) {
  for (Op op : all_ops())
    if (to_string(op) == s) return op;
  throw InvalidArgument("unknown op '" + s + "'");
}

DType parse_dtype(const std::string& s) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16})
    if (to_string(d) == s) return d;
  throw InvalidArgument("unknown dtype '" + s + "'");
}

// The table row a lookup returns for a key (its index in tolerance_rows()).
int row_of(Op op, KvFormat f, DType d, int layers) {
  const Tolerance t = tolerance(op, f, d, layers);
  const auto& rows = tolerance_rows();
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].tol.why == t.why && rows[i].tol.atol == t.atol && rows[i].op == op &&
        (rows[i].format < 0 || rows[i].format == static_cast<int>(f)) &&
        (rows[i].dtype < 0 || rows[i].dtype == static_cast<int>(d)) &&
        (rows[i].max_layers == 0 || (layers >= rows[i].min_layers && layers <= rows[i].max_layers)))
      return static_cast<int>(i);
  return -1;
}

struct Worst {
  int lines = 0;
  double needed_atol = 0, nmse = 0;
  int small_lines = 0;    // lines of units under the row's nmse_small_below
  double nmse_small = 0;  // their worst NMSE
};

TEST(ToleranceData, EveryMeasurementFitsItsRowAndEmpiricalRowsBite) {
  std::map<std::string, std::vector<Line>> files;
  for (const ToleranceRow& r : tolerance_rows()) {
    const std::string data = r.tol.data;
    if (data.size() > 4 && data.substr(data.size() - 4) == ".csv" && !files.count(data))
      files[data] = read_csv(data);
  }
  ASSERT_FALSE(files.empty());
  std::map<int, Worst> worst;
  int checked = 0;
  for (const auto& [path, lines] : files)
    for (const Line& l : lines) {
      const Op op = parse_op(l.op);
      const KvFormat f = parse_kv_format(l.format);
      const DType d = parse_dtype(l.dtype);
      const int layers = l.layers > 0 ? l.layers : 0;
      const int ri = row_of(op, f, d, layers);
      ASSERT_GE(ri, 0) << l.where() << ": no row";
      const ToleranceRow& r = tolerance_rows()[static_cast<size_t>(ri)];
      // Every measurement fits the row its key selects, whichever file holds it (the step
      // rows' CPU float- vs double-accumulation lines live in cpu_measurements.csv, their GPU
      // lines in h100_step_logits.csv); the bite below counts the row's own file only.
      ++checked;
      EXPECT_NEAR(l.rtol, r.tol.rtol, 1e-5 * r.tol.rtol + 1e-300)
          << l.where() << ": measured at another rtol than the row's (regenerate the file)";
      if (std::isfinite(r.tol.atol))
        EXPECT_LE(l.needed_atol, r.tol.atol) << l.where() << ": the bound does not hold";
      EXPECT_LE(l.worst_nmse, nmse_bound(r.tol, l.unit()))
          << l.where() << ": the NMSE bound does not hold (" << l.unit() << " elements a case)";
      if (std::string(r.tol.data) != path) continue;  // measured for another row's source
      Worst& w = worst[ri];
      ++w.lines;
      w.needed_atol = std::max(w.needed_atol, l.needed_atol);
      if (r.tol.nmse_max_small > 0 && l.unit() < r.tol.nmse_small_below) {
        ++w.small_lines;
        w.nmse_small = std::max(w.nmse_small, l.worst_nmse);
      } else {
        w.nmse = std::max(w.nmse, l.worst_nmse);
      }
    }
  EXPECT_GT(checked, 40);

  // The empirical rows: measured on the CPU, and the decode-step rows measured on the H100.
  const std::vector<std::string> empirical = {"data/tolerance/cpu_measurements.csv",
                                              "data/tolerance/h100_step_logits.csv"};
  const auto& rows = tolerance_rows();
  for (size_t i = 0; i < rows.size(); ++i) {
    const ToleranceRow& r = rows[i];
    const std::string data = r.tol.data;
    if (data.empty() || data.substr(data.size() - 4) != ".csv") continue;
    const std::string name = to_string(r.op) + "/" +
                             (r.format < 0 ? "any" : to_string(static_cast<KvFormat>(r.format))) +
                             "/" + (r.dtype < 0 ? "any" : to_string(static_cast<DType>(r.dtype)));
    const Worst& w = worst[static_cast<int>(i)];
    EXPECT_GT(w.lines, 0) << name << " names " << data << " but no line of it measures the row";
    if (std::find(empirical.begin(), empirical.end(), data) == empirical.end()) continue;
    // A measured zero is a lossless combination whose bound is the GPU's rounding: nothing
    // to bite into on the CPU.
    if (w.needed_atol > 0 && std::isfinite(r.tol.atol) && r.tol.atol > 0)
      EXPECT_LE(r.tol.atol, kMaxAtolMargin * w.needed_atol)
          << name << ": atol " << r.tol.atol << " is more than " << kMaxAtolMargin
          << "x the worst measured need " << w.needed_atol;
    if (w.nmse > 0 && r.tol.nmse_max > 0)
      EXPECT_LE(r.tol.nmse_max, kMaxNmseMargin * w.nmse)
          << name << ": nmse_max " << r.tol.nmse_max << " is more than " << kMaxNmseMargin
          << "x the worst measured " << w.nmse;
    if (r.tol.nmse_max_small > 0) {
      EXPECT_GT(w.small_lines, 0) << name << " has a small-unit NMSE bound but no line measures "
                                  << "units under " << r.tol.nmse_small_below << " elements";
      EXPECT_GT(w.nmse_small, 0) << name;
      EXPECT_LE(r.tol.nmse_max_small, kMaxNmseMargin * w.nmse_small)
          << name << ": nmse_max_small " << r.tol.nmse_max_small << " is more than "
          << kMaxNmseMargin << "x the worst measured " << w.nmse_small;
      std::printf("%-44s small units (< %lld elements): nmse %-9.3g (worst %-9.3g) %d lines\n",
                  name.c_str(), static_cast<long long>(r.tol.nmse_small_below),
                  r.tol.nmse_max_small, w.nmse_small, w.small_lines);
    }
    std::printf("%-44s atol %-9.3g (need %-9.3g) nmse %-9.3g (worst %-9.3g) %d lines\n",
                name.c_str(), r.tol.atol, w.needed_atol, r.tol.nmse_max, w.nmse, w.lines);
  }
}

}  // namespace
}  // namespace kvlab
