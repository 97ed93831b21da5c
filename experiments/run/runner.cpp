// runner.cpp: see runner.h.
#include "experiments/run/runner.h"

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "experiments/h5/durable.h"
#include "experiments/results/merge.h"
#include "experiments/results/result_file.h"
#include "experiments/device/device.h"
#include "experiments/run/progress.h"
#include "experiments/sweep/values.h"
#include "reference/core/error.h"

extern char** environ;

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

std::string dir_of(const std::string& p) {
  const auto s = p.find_last_of('/');
  if (s == std::string::npos) return ".";
  return s == 0 ? "/" : p.substr(0, s);
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

Record run_one(Bench& b, const Point& p, RunContext& ctx) {
  if (b.needs_gpu() && !ctx.device_present) {
    return Record::skipped(built_with_cuda() ? "no device" : "built without CUDA");
  }
  try {
    const std::string why = b.unsupported_reason(p, ctx);
    if (!why.empty()) return Record::skipped(why);
    return b.run(p, ctx);
  } catch (const Unsupported& e) {
    return Record::skipped(e.what());
  } catch (const std::exception& e) {
    return Record::failed(e.what());
  }
}

int run_workers(const SweepSpec& spec, const SweepOptions& opt, const std::string& out,
                std::ostream& os) {
  const int n = opt.workers;
  if (spec.path.empty()) throw InvalidArgument("--workers needs a config file");
  if (file_exists(out)) {
    if (!opt.resume)
      throw ResultFileError(out + " exists: use --resume to continue it, or another --out");
    h5::File f = h5::File::open(out);
    if (!f.has_attr("shard") || f.attr_type("shard") != h5::Type::kString ||
        f.attr_string("shard") != "merged")
      throw ResultFileError(out +
                            " was written by a single process: resume it without --workers/--gpus");
  }
  const std::string shard_dir = out + ".shards";
  make_parent_dirs(shard_dir + "/x");
  std::vector<std::string> files;
  std::vector<pid_t> pids;
  for (int k = 0; k < n; ++k) {
    const std::string f =
        shard_dir + "/shard-" + std::to_string(k) + "-of-" + std::to_string(n) + ".h5";
    files.push_back(f);
    std::vector<std::string> args = {opt.self_exe,
                                     "sweep",
                                     spec.path,
                                     "--out",
                                     f,
                                     "--shard",
                                     std::to_string(k) + "/" + std::to_string(n),
                                     "--progress",
                                     "plain",
                                     "--log-prefix",
                                     "[worker " + std::to_string(k) + "] "};
    if (file_exists(f)) args.push_back("--resume");
    if (!opt.fsync) args.push_back("--no-fsync");
    for (const auto& a : opt.passthrough) args.push_back(a);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e)
      if (std::string(*e).rfind("CUDA_VISIBLE_DEVICES=", 0) != 0 || opt.gpus.empty())
        env_s.push_back(*e);
    if (!opt.gpus.empty()) env_s.push_back("CUDA_VISIBLE_DEVICES=" + opt.gpus[k]);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, opt.self_exe.c_str(), nullptr, nullptr, argv.data(), envp.data()) != 0)
      throw Error("cannot start worker " + std::to_string(k) + " (" + opt.self_exe + ")");
    os << "[workers] worker " << k << " pid " << pid
       << (opt.gpus.empty() ? "" : " on GPU " + opt.gpus[k]) << " -> " << f << "\n";
    pids.push_back(pid);
  }
  os.flush();
  int worst = 0;
  for (int k = 0; k < n; ++k) {
    int st = 0;
    while (waitpid(pids[k], &st, 0) < 0 && errno == EINTR) {
    }
    const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (code != 0) os << "[workers] worker " << k << " exited with code " << code << "\n";
    worst = std::max(worst, code);
  }
  std::vector<std::string> present;
  for (const auto& f : files)
    if (file_exists(f)) present.push_back(f);
  if (present.empty()) return worst == 0 ? 2 : worst;
  MergeOptions mo;
  mo.overwrite = true;
  const int64_t rows = merge_results(present, out, mo);
  os << "[workers] merged " << present.size() << " shard files (" << rows << " points) -> " << out
     << "\n";
  return worst;
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

int run_sweep(const SweepSpec& spec, const KindList& kinds, const SweepOptions& opt,
              std::ostream& os) {
  std::vector<Point> all = expand(spec, kinds);
  // Bad input of any point (every shard checks every point: the same verdict everywhere)
  // ends the run before the output is touched.
  for (const auto& p : all) {
    try {
      kinds.find(p.kind).check_point(p);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument("[" + p.study + "] " + p.kind + " point " + std::to_string(p.index) +
                            ": " + e.what());
    }
  }
  const std::string fp = fingerprint(all);
  std::vector<Point> points;
  for (const auto& p : all)
    if (p.index % opt.shard_n == opt.shard_k) points.push_back(p);
  std::string out = opt.out.empty() ? spec.out : opt.out;

  RunContext ctx;
  ctx.seed = spec.seed;
  ctx.timing = opt.timing;
  ctx.timing_cfg = spec.timing;
  probe_device(&ctx);

  if (opt.dry_run) {
    std::map<std::string, std::pair<int64_t, double>> per_study;
    double total = 0;
    for (const auto& p : points) {
      Bench& b = kinds.find(p.kind);
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
    os << "-- " << points.size() << " points";
    if (opt.shard_n > 1)
      os << " in shard " << opt.shard_k << "/" << opt.shard_n << " (of " << all.size() << ")";
    os << ", estimated " << format_duration(total) << " on this machine"
       << (ctx.device_present ? " (device: " + ctx.device_name + ")" : " (no GPU: GPU points skip)")
       << "\n";
    for (const auto& [study, v] : per_study)
      os << "   " << study << ": " << v.first << " points, ~" << format_duration(v.second) << "\n";
    if (!out.empty()) os << "-- output: " << out << (file_exists(out) ? " (exists)" : "") << "\n";
    return 0;
  }

  if (out.empty()) throw InvalidArgument("no output file: give --out or set `out` in the config");
  if (opt.workers > 1) return run_workers(spec, opt, out, os);

  RunMeta meta;
  meta.argv = opt.argv;
  meta.config_path = spec.path;
  meta.config_text = spec.text;
  meta.sweep_name = spec.name;
  meta.fingerprint = fp;
  meta.shard = std::to_string(opt.shard_k) + "/" + std::to_string(opt.shard_n);
  meta.points_planned = static_cast<int64_t>(points.size());

  h5::DurableFile::Options dopt;
  dopt.fsync = opt.fsync;
  std::unique_ptr<ResultFile> rf;
  bool resumed = false;
  if (file_exists(out)) {
    if (!opt.resume)
      throw ResultFileError(out + " exists: use --resume to continue it, or another --out");
    h5::Recovery rec = h5::Recovery::kNone;
    rf = ResultFile::open(out, dopt, &rec);
    if (rec != h5::Recovery::kNone)
      os << opt.log_prefix << "[resume] " << out << ": " << h5::to_string(rec) << "\n";
    resumed = true;
  } else {
    make_parent_dirs(out);
    rf = ResultFile::create(out, meta, dopt);
  }

  std::vector<const Bench*> used;
  std::set<std::string> seen;
  for (const auto& st : spec.studies)
    if (seen.insert(st.kind).second) used.push_back(&kinds.find(st.kind));
  rf->declare(used);

  const std::set<std::string> done = rf->finished_keys();
  std::vector<const Point*> todo;
  for (const auto& p : points)
    if (!done.count(p.key())) todo.push_back(&p);
  if (resumed)
    os << opt.log_prefix << "[resume] " << out << ": " << rf->rows() << " points already recorded, "
       << (points.size() - todo.size()) << " of this sweep's " << points.size() << " finished, "
       << todo.size() << " to run\n";

  rf->begin_run(meta, resumed);
  bool need_gpu = false;
  for (const Point* p : todo) need_gpu |= kinds.find(p->kind).needs_gpu();
  if (need_gpu && ctx.device_present && opt.timing) {
    std::string note;
    if (measure_ceilings(&ctx, &note)) {
      rf->set_ceilings(ctx.read_ceiling_bytes_per_s, ctx.copy_ceiling_bytes_per_s);
      os << opt.log_prefix << "[ceilings] " << ctx.device_name << ": read " << std::fixed
         << std::setprecision(1) << ctx.read_ceiling_bytes_per_s / 1e9 << " GB/s, copy "
         << ctx.copy_ceiling_bytes_per_s / 1e9 << " GB/s (datasheet " << ctx.peak_bytes_per_s / 1e9
         << " GB/s)\n"
         << std::defaultfloat;
    } else {
      os << opt.log_prefix << "[ceilings] not measured: " << note << "\n";
    }
  }

  double est_total = 0;
  std::vector<double> est(todo.size());
  for (size_t i = 0; i < todo.size(); ++i) {
    Bench& b = kinds.find(todo[i]->kind);
    est[i] = (b.needs_gpu() && !ctx.device_present) ? 1e-3 : b.estimate_seconds(*todo[i], ctx);
    est_total += est[i];
  }
  Progress progress(static_cast<int64_t>(todo.size()), est_total,
                    Progress::parse_mode(opt.progress), os, opt.log_prefix);
  SignalGuard guard;
  int64_t n_ok = 0, n_skip = 0, n_fail = 0, n_run = 0;
  for (size_t i = 0; i < todo.size(); ++i) {
    if (g_stop_signal) break;
    const Point& p = *todo[i];
    Bench& b = kinds.find(p.kind);
    const std::string what = p.study + " " + p.describe();
    progress.start_point(what, est[i]);
    const auto t0 = std::chrono::steady_clock::now();
    Record r = run_one(b, p, ctx);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rf->write_point(p, b, r);
    ++n_run;
    (r.status == Status::kOk ? n_ok : r.status == Status::kSkipped ? n_skip : n_fail) += 1;
    progress.finish_point(to_string(r.status), p.key(), r.reason, est[i]);
  }
  progress.done();
  rf->end_run(n_run, n_fail);
  const int sig = g_stop_signal;
  os << opt.log_prefix << "done: " << n_run << " points run (ok " << n_ok << ", skipped " << n_skip
     << ", failed " << n_fail << ") in " << format_duration(progress.elapsed()) << "; " << out
     << " holds " << rf->rows() << " points\n";
  if (sig) {
    os << opt.log_prefix << "interrupted by signal " << sig << ": " << (todo.size() - n_run)
       << " points not run; continue with --resume\n";
    return 128 + sig;
  }
  return n_fail > 0 ? 1 : 0;
}

}  // namespace kvlab::exp
