// progress.cpp: see progress.h.
#include "experiments/run/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "reference/core/error.h"

namespace kvlab::exp {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  const long long t = static_cast<long long>(std::llround(s));
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, (t / 60) % 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%.1fs", s);
  return buf;
}

Progress::Mode Progress::parse_mode(const std::string& s) {
  if (s == "auto") return isatty(STDOUT_FILENO) ? Mode::kBar : Mode::kPlain;
  if (s == "bar") return Mode::kBar;
  if (s == "plain") return Mode::kPlain;
  if (s == "none") return Mode::kNone;
  throw InvalidArgument("--progress: unknown mode '" + s + "' (allowed: auto, bar, plain, none)");
}

Progress::Progress(Mode mode, std::ostream& os, std::string prefix, int workers)
    : workers_(std::max(1, workers)), mode_(mode), os_(os), prefix_(std::move(prefix)) {
  t0_ = std::chrono::steady_clock::now();
  last_draw_ = t0_ - std::chrono::seconds(10);
}

void Progress::plan(const std::string& kind, double estimate_seconds) {
  KindStats& k = kinds_[kind];
  ++k.planned;
  k.planned_estimate += std::max(0.0, estimate_seconds);
  ++total_;
}

double Progress::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

double Progress::eta() const {
  double all_est = 0, all_sec = 0;
  for (const auto& [name, k] : kinds_) {
    all_est += k.done_estimate;
    all_sec += k.done_seconds;
  }
  const double global = all_est > 0 ? all_sec / all_est : 1.0;
  double left = 0;
  for (const auto& [name, k] : kinds_) {
    const int64_t n_left = k.planned - k.done;
    if (n_left <= 0) continue;
    const double est_left = std::max(0.0, k.planned_estimate - k.done_estimate);
    if (k.done == 0)
      left += est_left * global;
    else if (k.done_estimate > 0)
      left += est_left * (k.done_seconds / k.done_estimate);
    else
      left += static_cast<double>(n_left) * (k.done_seconds / static_cast<double>(k.done));
  }
  return left / workers_;
}

void Progress::start_point(const std::string& what) {
  current_ = what;
  if (mode_ == Mode::kBar) draw(false);
}

void Progress::finish_point(const std::string& status, const std::string& what,
                            const std::string& reason, const std::string& kind,
                            double estimate_seconds, double seconds) {
  ++done_;
  if (status == "failed") ++failed_;
  if (status == "skipped") ++skipped_;
  KindStats& k = kinds_[kind];
  ++k.done;
  k.done_estimate += std::max(0.0, estimate_seconds);
  k.done_seconds += std::max(0.0, seconds);
  if (status == "failed") {
    if (mode_ == Mode::kBar && drew_) os_ << "\r\033[K";
    os_ << prefix_ << "FAILED " << what << ": " << reason << "\n";
    os_.flush();
  }
  draw(status == "failed" || done_ == total_);
}

void Progress::draw(bool force) {
  if (mode_ == Mode::kNone) return;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  const double pct = total_ > 0 ? 100.0 * done_ / total_ : 100.0;
  char head[160];
  std::snprintf(head, sizeof head, "%lld/%lld (%.0f%%) elapsed %s ETA %s failed %lld skipped %lld",
                static_cast<long long>(done_), static_cast<long long>(total_), pct,
                format_duration(elapsed()).c_str(), format_duration(eta()).c_str(),
                static_cast<long long>(failed_), static_cast<long long>(skipped_));
  if (mode_ == Mode::kBar) {
    if (!force && since < 0.1) return;
    constexpr int kWidth = 24;
    const int fill = total_ > 0 ? static_cast<int>(kWidth * done_ / total_) : kWidth;
    std::string bar(fill, '#');
    bar.resize(kWidth, '.');
    std::string cur = current_.size() > 60 ? current_.substr(0, 57) + "..." : current_;
    os_ << "\r\033[K" << prefix_ << "[" << bar << "] " << head
        << (done_ < total_ ? " | " + cur : "");
    os_.flush();
    drew_ = true;
  } else {
    if (!force && since < 1.0) return;
    os_ << prefix_ << "[progress] " << head << "\n";
    os_.flush();
  }
  last_draw_ = now;
  last_drawn_done_ = done_;
}

void Progress::done() {
  if (last_drawn_done_ != done_ || mode_ == Mode::kBar) draw(true);
  if (mode_ == Mode::kBar && drew_) os_ << "\n";
  os_.flush();
}

}  // namespace kvlab::exp
