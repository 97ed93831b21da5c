// runner.cpp: see runner.h.
#include "experiments/run/runner.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "experiments/h5/file_io.h"
#include "experiments/results/merge.h"
#include "experiments/results/result_file.h"
#include "experiments/device/device.h"
#include "experiments/run/point_writer.h"
#include "experiments/run/progress.h"
#include "experiments/run/workers.h"
#include "experiments/sweep/values.h"
#include "reference/core/error.h"

namespace kvlab::exp {
namespace {

std::atomic<int> g_stop_signal{0};
void on_signal(int sig) {
  g_stop_signal = sig;
}

struct SignalGuard {
  struct sigaction old_int {
  }, old_term{};
  SignalGuard() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
  }
  ~SignalGuard() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  }
};

bool file_exists(const std::string& p) {
  return access(p.c_str(), F_OK) == 0;
}

// Creates missing parent directories of `path` (like mkdir -p); errors name the path.
void make_parent_dirs(const std::string& path) {
  const std::string dir = dir_of(path);
  if (dir == "." || dir == "/" || file_exists(dir)) return;
  make_parent_dirs(dir);
  if (mkdir(dir.c_str(), 0755) != 0 && !file_exists(dir))
    throw ResultFileError("cannot create the output directory " + dir + ": " +
                          std::strerror(errno));
}

// The output directory must be a directory this process can write (checked before anything
// is created: a bad --out is bad input, not an I/O failure later).
void check_output_dir(const std::string& out) {
  const std::string dir = dir_of(out);
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return;  // created later by make_parent_dirs
  if (!S_ISDIR(st.st_mode))
    throw ResultFileError("cannot write the result file " + out + ": its output directory " + dir +
                          " is not a directory");
  if (access(dir.c_str(), W_OK | X_OK) != 0)
    throw ResultFileError("cannot write the result file " + out + ": its output directory " + dir +
                          " is not writable");
}

int default_threads(int workers) {
  const unsigned hw = std::thread::hardware_concurrency();
  return std::max(1, static_cast<int>(hw == 0 ? 1 : hw) / std::max(1, workers));
}

// The points of a sweep that this invocation may run, validated; bad input throws.
std::vector<Point> validated_points(const SweepSpec& spec, const KindList& kinds) {
  std::vector<Point> all = expand(spec, kinds);
  if (all.empty()) throw InvalidArgument("the sweep has no points");
  // Cross-axis checks of every point (every shard checks every point: the same verdict
  // everywhere), before the output is touched.
  for (const auto& p : all) {
    try {
      kinds.find(p.kind).check_point(p);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument("[" + p.study + "] " + p.kind + " point " + std::to_string(p.index) +
                            " (" + p.describe() + "): " + e.what());
    }
  }
  return all;
}

int dry_run(const std::vector<Point>& all, const std::vector<const Point*>& points,
            const SweepOptions& opt, const std::string& out, const SweepSpec& spec,
            std::ostream& os) {
  RunContext ctx;
  ctx.seed = spec.seed;
  ctx.timing = opt.timing;
  ctx.timing_cfg = spec.timing;
  probe_device(&ctx);
  std::map<std::string, std::pair<int64_t, double>> per_study;
  double total = 0;
  for (const Point* pp : points) {
    const Point& p = *pp;
    Bench& b = opt.kinds->find(p.kind);
    std::string note;
    if (b.needs_gpu() && !ctx.device_present)
      note = built_with_cuda() ? " (skipped: no device)" : " (skipped: built without CUDA)";
    else if (auto why = b.unsupported_reason(p, ctx); !why.empty())
      note = " (skipped: " + why + ")";
    const double est = note.empty() ? b.estimate_seconds(p, ctx) : 0.0;
    total += est;
    per_study[p.study].first += 1;
    per_study[p.study].second += est;
    os << "[" << p.index << "] " << p.study << " " << p.kind << " " << p.describe() << note
       << "\n";
  }
  const int w = std::max(1, opt.workers);
  os << "-- " << points.size() << " points";
  if (opt.shard_n > 1)
    os << " in shard " << opt.shard_k << "/" << opt.shard_n << " (of " << all.size() << ")";
  os << ", estimated " << format_duration(total / w) << " on this machine"
     << (w > 1 ? " with " + std::to_string(w) + " workers" : std::string())
     << (ctx.device_present ? " (device: " + ctx.device_name + ")" : " (no GPU: GPU points skip)")
     << "\n";
  for (const auto& [study, v] : per_study)
    os << "   " << study << ": " << v.first << " points, ~" << format_duration(v.second) << "\n";
  if (!out.empty()) os << "-- output: " << out << (file_exists(out) ? " (exists)" : "") << "\n";
  return 0;
}

// A single-process resume that finds worker files of an interrupted `--workers` run folds
// them into --out first, so their points count as done (and are not run again).
void fold_worker_files(const std::string& out, const SweepOptions& opt, std::ostream& os) {
  const std::vector<std::string> shards = worker_files(out);
  if (shards.empty()) return;
  if (!opt.resume)
    throw ResultFileError(shards_dir(out) + " holds the worker files of an interrupted run: give " +
                          "--resume to continue it (their points count as done)");
  for (const auto& f : shards) {
    const h5::Recovery r = h5::DurableFile::recover(f);  // a worker killed mid-commit
    if (r != h5::Recovery::kNone) os << opt.log_prefix << "[resume] " << f << ": " << h5::to_string(r) << "\n";
  }
  if (file_exists(out)) h5::DurableFile::recover(out);
  std::vector<std::string> inputs;
  if (file_exists(out)) inputs.push_back(out);
  inputs.insert(inputs.end(), shards.begin(), shards.end());
  MergeOptions mo;
  mo.overwrite = true;
  mo.allow_mixed = opt.allow_mixed;
  mo.fsync = opt.fsync;
  const MergeResult m = merge_results(inputs, out, mo);
  os << opt.log_prefix << "[resume] folded " << shards.size() << " worker files of an interrupted "
     << "run into " << out << " (" << m.rows << " points)\n";
  remove_worker_files(out);
}

}  // namespace

void parse_shard(const std::string& text, int* k, int* n) {
  const auto slash = text.find('/');
  long long a = 0, b = 0;
  if (slash == std::string::npos || !parse_int(text.substr(0, slash), &a) ||
      !parse_int(text.substr(slash + 1), &b) || b < 1 || a < 0 || a >= b || b > 100000)
    throw InvalidArgument("--shard: expected K/N with 0 <= K < N, got '" + text + "'");
  *k = static_cast<int>(a);
  *n = static_cast<int>(b);
}

int run_sweep(const SweepSpec& spec, const KindList& kinds, const SweepOptions& in_opt,
              std::ostream& os) {
  SweepOptions opt = in_opt;
  opt.kinds = &kinds;
  Progress::parse_mode(opt.progress);  // a bad --progress is bad input, before anything else
  const std::vector<Point> all = validated_points(spec, kinds);
  const SweepIdentity id = make_identity(spec, all, opt.timing, kinds);
  if (opt.cpu_threads <= 0) opt.cpu_threads = default_threads(opt.workers);

  std::vector<const Point*> points;
  for (const auto& p : all)
    if (p.index % opt.shard_n == opt.shard_k) points.push_back(&p);
  std::string out = opt.out.empty() ? spec.out : opt.out;
  if (!out.empty()) out = resolve_output_path(out, "--out");

  if (opt.dry_run) return dry_run(all, points, opt, out, spec, os);
  if (out.empty()) throw InvalidArgument("no output file: give --out or set `out` in the config");
  check_output_dir(out);

  if (!opt.serve_identity.empty()) {
    if (opt.serve_identity != id.digest())
      throw InvalidArgument("worker: this sweep's identity " + id.digest() +
                            " differs from the parent's " + opt.serve_identity);
    return serve_points(spec, all, id, opt, os);
  }
  if (opt.workers > 1) {
    make_parent_dirs(out);
    return run_workers(spec, all, id, opt, out, os);
  }

  make_parent_dirs(out);
  fold_worker_files(out, opt, os);
  const std::string shard = std::to_string(opt.shard_k) + "/" + std::to_string(opt.shard_n);
  PointWriter w(spec, id, opt, out, shard, static_cast<int64_t>(points.size()), os);
  std::vector<const Point*> todo;
  for (const Point* p : points)
    if (!w.finished().count(p->key())) todo.push_back(p);
  if (w.resumed())
    os << opt.log_prefix << "[resume] " << out << ": " << w.rows() << " points already recorded, "
       << (points.size() - todo.size()) << " of this sweep's " << points.size() << " finished, "
       << todo.size() << " to run\n";

  w.begin(todo);
  Progress progress(Progress::parse_mode(opt.progress), os, opt.log_prefix);
  std::vector<double> est(todo.size());
  for (size_t i = 0; i < todo.size(); ++i) {
    est[i] = estimate_point(kinds, *todo[i], w.context());
    progress.plan(todo[i]->kind, est[i]);
  }
  SignalGuard guard;
  int64_t n_ok = 0, n_skip = 0, n_fail = 0, n_run = 0;
  std::map<std::string, int64_t> skip_reasons;
  for (size_t i = 0; i < todo.size(); ++i) {
    if (g_stop_signal) break;
    const Point& p = *todo[i];
    progress.start_point(p.study + " " + p.describe());
    const Record r = w.run(p);
    ++n_run;
    (r.status == Status::kOk ? n_ok : r.status == Status::kSkipped ? n_skip : n_fail) += 1;
    if (r.status == Status::kSkipped) ++skip_reasons[r.reason];
    progress.finish_point(to_string(r.status), p.key(), r.reason, p.kind, est[i], r.seconds);
  }
  progress.done();
  w.end(n_run, n_fail);
  const int sig = g_stop_signal;
  os << opt.log_prefix << "done: " << n_run << " points run (ok " << n_ok << ", skipped " << n_skip
     << ", failed " << n_fail << ") in " << format_duration(progress.elapsed()) << "; " << out
     << " holds " << w.rows() << " points\n";
  os << opt.log_prefix << "[io] " << w.io_summary(n_run) << "\n";
  if (sig) {
    os << opt.log_prefix << "interrupted by signal " << sig << ": " << (todo.size() - n_run)
       << " points not run; continue with --resume\n";
    return 128 + sig;
  }
  if (!opt.timing && n_run > 0 && n_ok == 0 && n_fail == 0) {
    // `kvlab validate` exists to validate: a run where nothing was validated is no success.
    os << opt.log_prefix << "validate: nothing was validated: all " << n_skip
       << " points were skipped:";
    for (const auto& [why, n] : skip_reasons) os << "\n  " << n << " x " << why;
    os << "\n";
    return kExitFailed;
  }
  return n_fail > 0 ? kExitFailed : kExitOk;
}

}  // namespace kvlab::exp
