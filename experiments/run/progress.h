// progress.h: the sweep progress display: done/total, ETA and failures.
//
// On a terminal: one line redrawn in place (a bar, counts, ETA, the current point).
// Otherwise (CI logs, Slurm output files, pipes): plain lines, at most one per second
// plus one per failure, so logs stay readable. Mode "none" prints only failures.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace kvlab::exp {

class Progress {
 public:
  enum class Mode { kBar, kPlain, kNone };
  // "auto" picks kBar when stdout is a terminal, else kPlain.
  static Mode parse_mode(const std::string& s);

  Progress(int64_t total, double estimated_seconds, Mode mode, std::ostream& os,
           std::string prefix = "");
  void start_point(const std::string& what, double estimate_seconds);
  // status: "ok" | "skipped" | "failed"
  void finish_point(const std::string& status, const std::string& what, const std::string& reason,
                    double estimate_seconds);
  void done();
  double elapsed() const;
  double eta() const;  // seconds

 private:
  void draw(bool force);
  int64_t total_, done_ = 0, failed_ = 0, skipped_ = 0;
  double remaining_estimate_, done_estimate_ = 0;
  Mode mode_;
  std::ostream& os_;
  std::string prefix_, current_;
  std::chrono::steady_clock::time_point t0_, last_draw_;
  bool drew_ = false;
  int64_t last_drawn_done_ = -1;
};

std::string format_duration(double seconds);

}  // namespace kvlab::exp
