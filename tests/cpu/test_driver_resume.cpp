// test_driver_resume.cpp: a sweep continued after an interruption, split into shards or
// merged back ends with every point of the sweep recorded exactly once.
//
// In-process runs of a small CPU-only sweep (roofline points, milliseconds each): a first
// run that records part of the sweep (one study, as a run killed after it would have), then
// `--resume` over the whole sweep; two shards and their merge. Each result must hold exactly
// the keys of expand(spec, registered_kinds()): a resume that skips an unfinished point, a shard split that
// drops or repeats points, or a merge that loses rows all fail here.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "experiments/cli/registry.h"
#include "experiments/results/merge.h"
#include "experiments/results/result_file.h"
#include "experiments/run/runner.h"
#include "experiments/sweep/spec.h"
#include "tests/common/test_env.h"

namespace kvlab::exp {
namespace {

const char* kConfig = R"(
name = resume_test
seed = 5

[first]
kind = roofline
op = gemm
gpu = H100
batch = 1, 2, 3

[second]
kind = roofline
op = gemm
gpu = A100
batch = 1, 2, 3, 4
)";

class DriverResume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvlab-resume-" + std::to_string(test::seed_for("resume.dir")) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const char* name) const { return (dir_ / name).string(); }

  static SweepOptions options(const std::string& out) {
    SweepOptions o;
    o.out = out;
    o.progress = "none";
    o.fsync = false;
    o.timing = false;
    return o;
  }
  static std::set<std::string> keys_of(const std::vector<Point>& pts) {
    std::set<std::string> k;
    for (const Point& p : pts) k.insert(p.key());
    return k;
  }
  static std::set<std::string> recorded(const std::string& file, int64_t* rows) {
    auto rf = ResultFile::open(file, h5::DurableFile::Options{});
    *rows = rf->rows();
    return rf->finished_keys();
  }
  std::filesystem::path dir_;
};

TEST_F(DriverResume, ResumeRunsExactlyThePointsTheFileLacks) {
  const SweepSpec all = parse_sweep(kConfig, "resume_test");
  const std::set<std::string> want = keys_of(expand(all, registered_kinds()));
  ASSERT_EQ(want.size(), 7u);
  SweepSpec part = all;
  select_studies(&part, "first");  // what a run killed after the first study left behind
  std::ostringstream log;
  const std::string out = path("r.h5");
  ASSERT_EQ(run_sweep(part, registered_kinds(), options(out), log), 0) << log.str();
  int64_t rows = 0;
  EXPECT_EQ(recorded(out, &rows).size(), 3u);
  SweepOptions resume = options(out);
  resume.resume = true;
  // The partial file was written by the first study alone, a sweep of another identity: a plain
  // resume refuses it (tested with the result identity), --allow-mixed runs what it lacks.
  EXPECT_THROW(run_sweep(all, registered_kinds(), resume, log), std::exception);
  resume.allow_mixed = true;
  ASSERT_EQ(run_sweep(all, registered_kinds(), resume, log), 0) << log.str();
  EXPECT_EQ(recorded(out, &rows), want) << log.str();
  EXPECT_EQ(rows, static_cast<int64_t>(want.size())) << "a point recorded twice or lost";
  // A second resume finds nothing to do and changes nothing.
  ASSERT_EQ(run_sweep(all, registered_kinds(), resume, log), 0) << log.str();
  EXPECT_EQ(recorded(out, &rows), want);
  EXPECT_EQ(rows, static_cast<int64_t>(want.size()));
}

TEST_F(DriverResume, ShardsPartitionTheSweepAndMergeBackWhole) {
  const SweepSpec all = parse_sweep(kConfig, "resume_test");
  const std::vector<Point> pts = expand(all, registered_kinds());
  const std::set<std::string> want = keys_of(pts);
  std::ostringstream log;
  std::vector<std::string> shards;
  std::set<std::string> seen;
  for (int k = 0; k < 2; ++k) {
    SweepOptions o = options(path(k == 0 ? "s0.h5" : "s1.h5"));
    o.shard_k = k;
    o.shard_n = 2;
    ASSERT_EQ(run_sweep(all, registered_kinds(), o, log), 0) << log.str();
    int64_t rows = 0;
    const std::set<std::string> got = recorded(o.out, &rows);
    std::set<std::string> expect;
    for (const Point& p : pts)
      if (p.index % 2 == k) expect.insert(p.key());
    EXPECT_EQ(got, expect) << "shard " << k << " must hold the points with index % 2 == " << k;
    for (const auto& key : got) EXPECT_TRUE(seen.insert(key).second) << key << " in both shards";
    shards.push_back(o.out);
  }
  EXPECT_EQ(seen, want);
  const std::string merged = path("merged.h5");
  EXPECT_EQ(merge_results(shards, merged, MergeOptions{}).rows, static_cast<int64_t>(want.size()));
  int64_t rows = 0;
  EXPECT_EQ(recorded(merged, &rows), want);
  EXPECT_EQ(rows, static_cast<int64_t>(want.size()));
}

}  // namespace
}  // namespace kvlab::exp
