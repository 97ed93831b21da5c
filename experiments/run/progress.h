// progress.h: the sweep progress display: done/total, ETA and failures.
//
// On a terminal: one line redrawn in place (a bar, counts, ETA, the current point).
// Otherwise (CI logs, Slurm output files, pipes): plain lines, at most one per second
// plus one per failure, so logs stay readable. Mode "none" prints only failures.
//
// The ETA is learned per kind: the kinds' own estimates (Bench::estimate_seconds) are scaled
// by how long the finished points of the same kind really took against their estimates (a
// kind with no finished point yet uses the ratio of all finished points; before any point
// finishes, the estimates as they are), and the sum is divided by the workers running.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>

namespace kvlab::exp {

class Progress {
 public:
  enum class Mode { kBar, kPlain, kNone };
  // "auto" picks kBar when stdout is a terminal, else kPlain. Unknown: InvalidArgument.
  static Mode parse_mode(const std::string& s);

  Progress(Mode mode, std::ostream& os, std::string prefix = "", int workers = 1);
  // One call per point to run, before the first start_point.
  void plan(const std::string& kind, double estimate_seconds);
  void start_point(const std::string& what);
  // status: "ok" | "skipped" | "failed"; seconds: how long the point took.
  void finish_point(const std::string& status, const std::string& what, const std::string& reason,
                    const std::string& kind, double estimate_seconds, double seconds);
  void done();
  double elapsed() const;
  double eta() const;  // seconds
  int64_t total() const { return total_; }

 private:
  struct KindStats {
    int64_t planned = 0, done = 0;
    double planned_estimate = 0, done_estimate = 0, done_seconds = 0;
  };
  void draw(bool force);
  std::map<std::string, KindStats> kinds_;
  int64_t total_ = 0, done_ = 0, failed_ = 0, skipped_ = 0;
  int workers_ = 1;
  Mode mode_;
  std::ostream& os_;
  std::string prefix_, current_;
  std::chrono::steady_clock::time_point t0_, last_draw_;
  bool drew_ = false;
  int64_t last_drawn_done_ = -1;
};

std::string format_duration(double seconds);

}  // namespace kvlab::exp
