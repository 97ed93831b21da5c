// progress.cpp: see progress.h.
#include "experiments/run/progress.h"

#include <unistd.h>

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

Progress::Progress(int64_t total, double estimated_seconds, Mode mode, std::ostream& os,
                   std::string prefix)
    : total_(total),
      remaining_estimate_(estimated_seconds),
      mode_(mode),
      os_(os),
      prefix_(std::move(prefix)) {
  t0_ = std::chrono::steady_clock::now();
  last_draw_ = t0_ - std::chrono::seconds(10);
}

double Progress::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

double Progress::eta() const {
  // Scale the remaining estimates by how the finished points compared with theirs.
  const double el = elapsed();
  const double ratio = done_estimate_ > 0 ? el / done_estimate_ : 1.0;
  return std::max(0.0, remaining_estimate_ * ratio);
}

void Progress::start_point(const std::string& what, double) {
  current_ = what;
  if (mode_ == Mode::kBar) draw(false);
}

void Progress::finish_point(const std::string& status, const std::string& what,
                            const std::string& reason, double estimate_seconds) {
  ++done_;
  if (status == "failed") ++failed_;
  if (status == "skipped") ++skipped_;
  done_estimate_ += estimate_seconds;
  remaining_estimate_ = std::max(0.0, remaining_estimate_ - estimate_seconds);
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
