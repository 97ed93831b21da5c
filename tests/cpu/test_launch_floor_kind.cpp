// test_launch_floor_kind.cpp: the CPU side of the launch_floor kind (experiments/kinds/
// launch_floor.cpp): its rows' names say what each row is, its records carry every timing
// column of record_timing, and its point check refuses what the axis rules cannot see (the
// kernels run in gpu_tests LaunchFloor.*; bad values through `kvlab sweep` in
// tests/python/test_launch_floor_kind.py).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "experiments/cli/registry.h"
#include "experiments/kinds/kinds.h"
#include "reference/core/error.h"

using namespace kvlab;
using namespace kvlab::exp;

namespace {

Point floor_point(const std::map<std::string, std::string>& set) {
  Point p;
  p.study = "t";
  p.kind = "launch_floor";
  for (const auto& a : find_bench("launch_floor").axes()) {
    auto it = set.find(a.name);
    p.axes.emplace_back(a.name, it == set.end() ? a.default_value : it->second);
  }
  return p;
}

}  // namespace

TEST(LaunchFloorKind, RowNamesSayWhatTheRowIs) {
  EXPECT_EQ(launch_floor_row_name(floor_point({})), "empty");
  EXPECT_EQ(launch_floor_row_name(floor_point({{"chain", "3"}})), "chain3");
  EXPECT_EQ(launch_floor_row_name(floor_point({{"chain", "1"}, {"tail_kib", "16"}})),
            "chain1_page16k");
  EXPECT_EQ(launch_floor_row_name(floor_point({{"tail_kib", "16"}})), "page16k");
  EXPECT_EQ(launch_floor_row_name(floor_point({{"chain", "3"}, {"primed", "lines"}})),
            "chain3_primed_lines");
  EXPECT_EQ(launch_floor_row_name(floor_point(
                {{"chain", "2"}, {"tail_kib", "16"}, {"primed", "pages"}, {"graph", "on"}})),
            "chain2_page16k_primed_pages");
}

TEST(LaunchFloorKind, RecordsEveryTimingColumnAndNeedsAGpu) {
  const Bench& b = find_bench("launch_floor");
  EXPECT_TRUE(b.needs_gpu());
  std::set<std::string> m;
  for (const auto& s : b.metrics()) m.insert(s.name);
  for (const char* want : {"median_us", "q1_us", "q3_us", "rel_iqr", "reps", "cold_l2", "excess_us",
                           "floor_us", "working_set_bytes", "timing_valid"})
    EXPECT_EQ(m.count(want), 1u) << want;
  // No bandwidth of a 16 KiB call: the kind's headline is its time.
  for (const char* not_here : {"bytes_per_s", "pct_read_ceiling", "pct_datasheet"})
    EXPECT_EQ(m.count(not_here), 0u) << not_here;
  std::map<std::string, std::string> defaults;
  for (const auto& a : b.axes()) defaults[a.name] = a.default_value;
  EXPECT_EQ(defaults.at("chain"), "0");
  EXPECT_EQ(defaults.at("tail_kib"), "0");
  EXPECT_EQ(defaults.at("primed"), "none");
  EXPECT_EQ(defaults.at("graph"), "off");
}

TEST(LaunchFloorKind, PointCheckRefusesAPageOtherThan16KiBAndPrimingNothing) {
  const Bench& b = find_bench("launch_floor");
  EXPECT_NO_THROW(
      b.check_point(floor_point({{"chain", "3"}, {"tail_kib", "16"}, {"primed", "lines"}})));
  EXPECT_NO_THROW(b.check_point(floor_point({{"tail_kib", "16"}, {"primed", "pages"}})));
  EXPECT_THROW(b.check_point(floor_point({{"tail_kib", "8"}})), InvalidArgument);
  EXPECT_THROW(b.check_point(floor_point({{"primed", "lines"}})), InvalidArgument);
  EXPECT_THROW(b.check_point(floor_point({{"primed", "pages"}})), InvalidArgument);
}
