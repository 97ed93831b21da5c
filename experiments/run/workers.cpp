// workers.cpp: see workers.h.
#include "experiments/run/workers.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <ostream>
#include <set>
#include <sstream>

#include "experiments/bench/kind_list.h"
#include "experiments/h5/durable.h"
#include "experiments/h5/file_io.h"
#include "experiments/results/merge.h"
#include "experiments/results/result_file.h"
#include "experiments/device/device.h"
#include "experiments/run/point_writer.h"
#include "experiments/run/progress.h"
#include "reference/core/error.h"

extern char** environ;

namespace kvlab::exp {
namespace {

std::atomic<int> g_stop{0};
void on_stop(int sig) {
  g_stop = sig;
}

// SIGINT / SIGTERM set g_stop without restarting system calls (a blocked read returns EINTR);
// SIGPIPE is ignored (a closed pipe is an EPIPE error, handled).
struct Signals {
  struct sigaction old_int {
  }, old_term{}, old_pipe{};
  Signals() {
    g_stop = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &old_pipe);
  }
  ~Signals() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGPIPE, &old_pipe, nullptr);
  }
};

bool exists(const std::string& p) {
  return access(p.c_str(), F_OK) == 0;
}

bool write_line(int fd, const std::string& line) {
  std::string s = line + "\n";
  const char* p = s.data();
  size_t n = s.size();
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

// Reads lines from a descriptor (no stdio buffering: signals interrupt the read).
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  // 1: a line; 0: end of file; -1: interrupted by a signal.
  int next(std::string* line) {
    for (;;) {
      const auto nl = buf_.find('\n');
      if (nl != std::string::npos) {
        *line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return 1;
      }
      char tmp[4096];
      const ssize_t r = ::read(fd_, tmp, sizeof tmp);
      if (r < 0) {
        if (errno == EINTR) return -1;
        return 0;
      }
      if (r == 0) return 0;
      buf_.append(tmp, static_cast<size_t>(r));
    }
  }
  // Appends what is readable now (poll said so); false at end of file.
  bool fill() {
    char tmp[4096];
    const ssize_t r = ::read(fd_, tmp, sizeof tmp);
    if (r < 0) return errno == EINTR || errno == EAGAIN;
    if (r == 0) return false;
    buf_.append(tmp, static_cast<size_t>(r));
    return true;
  }
  bool take(std::string* line) {
    const auto nl = buf_.find('\n');
    if (nl == std::string::npos) return false;
    *line = buf_.substr(0, nl);
    buf_.erase(0, nl + 1);
    return true;
  }

 private:
  int fd_;
  std::string buf_;
};

// A verified result file's keys; its identity must equal `id` unless allow_mixed.
std::set<std::string> verified_keys(const std::string& path, const SweepIdentity& id,
                                    bool allow_mixed) {
  const std::string crash = probe_result_file(path);
  if (!crash.empty())
    throw ResultFileError(path + " is damaged: " + crash + "; nothing was written");
  h5::File f;
  try {
    f = h5::File::open(path);
  } catch (const h5::Error& e) {
    throw ResultFileError(path + " cannot be opened (corrupt or truncated?): " + e.what() +
                          "; nothing was written");
  }
  const FileCheck c = check_result_file(f, path);
  if (!c.ok()) {
    std::string why;
    for (const auto& p : c.verification.problems) why += "\n  " + p;
    throw ResultFileError(path + " is damaged (" + std::to_string(c.verification.damaged) +
                          " problems; nothing was written):" + why);
  }
  if (c.schema < kSchemaVersion)
    throw ResultFileError(path + " has result schema " + std::to_string(c.schema) +
                          " (no identity, no checksums) and cannot be resumed");
  const std::string diff = c.identity ? identity_difference(*c.identity, id, path, "this run")
                                      : std::string("  no identity\n");
  if (!diff.empty() && !allow_mixed)
    throw ResultFileError(path + " holds another sweep than this run:\n" + diff +
                          "nothing was written; give --allow-mixed to continue anyway");
  const auto keys = h5::Table::open(f, "index").read_strings("key");
  return std::set<std::string>(keys.begin(), keys.end());
}

struct Worker {
  int k = 0;
  pid_t pid = -1;
  int to = -1;    // its stdin
  int from = -1;  // its stdout
  std::unique_ptr<LineReader> reader;
  bool said_bye = false, quit_sent = false, ended = false;
  int exit_code = 0;
  std::deque<const Point*> chunk;  // the rest of its current chunk
  const Point* running = nullptr;
  int64_t points = 0;
  double busy = 0;
};

// Kills and reaps the workers still running when the parent leaves by an exception.
struct Reaper {
  std::vector<Worker>& ws;
  pid_t pgid = 0;
  bool armed = true;
  ~Reaper() {
    if (!armed) return;
    if (pgid > 0) killpg(pgid, SIGTERM);
    for (auto& w : ws)
      if (w.pid > 0 && !w.ended) {
        int st = 0;
        while (waitpid(w.pid, &st, 0) < 0 && errno == EINTR) {
        }
      }
  }
};

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

std::string shards_dir(const std::string& out) {
  return out + ".shards";
}

std::vector<std::string> worker_files(const std::string& out) {
  std::vector<std::string> files;
  const std::string dir = shards_dir(out);
  DIR* d = opendir(dir.c_str());
  if (!d) return files;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind("worker-", 0) == 0 && n.size() > 3 && n.compare(n.size() - 3, 3, ".h5") == 0)
      files.push_back(dir + "/" + n);
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

void remove_worker_files(const std::string& out) {
  for (const auto& f : worker_files(out)) unlink(f.c_str());
  unlink((shards_dir(out) + "/.lock").c_str());
  rmdir(shards_dir(out).c_str());
}

int run_workers(const SweepSpec& spec, const std::vector<Point>& all, const SweepIdentity& id,
                const SweepOptions& opt, const std::string& out, std::ostream& os) {
  if (spec.path.empty()) throw InvalidArgument("--workers needs a config file");
  if (opt.shard_n > 1) throw InvalidArgument("--shard and --workers/--gpus do not combine");
  const std::string dir = shards_dir(out);
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw_path_error("cannot create " + dir, errno);
  // One --workers run per output at a time.
  const std::string lock_path = dir + "/.lock";
  const int run_lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (run_lock < 0) throw_path_error("cannot create " + lock_path, errno);
  struct CloseFd {
    int fd;
    ~CloseFd() {
      if (fd >= 0) ::close(fd);
    }
  } close_run_lock{run_lock};
  if (!try_write_lock(run_lock))
    throw ResultFileError(out + " is being written by another kvlab --workers run");

  // What is already done: --out and the worker files of an interrupted run, all verified.
  std::set<std::string> done;
  int out_fd = -1;
  if (exists(out)) {
    if (!opt.resume)
      throw ResultFileError(out + " exists: use --resume to continue it, or another --out");
    try {
      const h5::Recovery r = h5::DurableFile::recover(out);
      if (r != h5::Recovery::kNone) os << "[resume] " << out << ": " << h5::to_string(r) << "\n";
    } catch (const h5::Error& e) {
      throw ResultFileError("cannot recover " + out + ": " + e.what());
    }
    out_fd = open_locked(out, "to hold it during the run");  // no writer may start on it
    done = verified_keys(out, id, opt.allow_mixed);
  }
  CloseFd close_out{out_fd};
  std::vector<std::string> old = worker_files(out);
  if (!old.empty() && !opt.resume)
    throw ResultFileError(dir + " holds the worker files of an interrupted run: give --resume to " +
                          "continue it (their points count as done)");
  for (const auto& f : old) {
    try {
      const h5::Recovery r = h5::DurableFile::recover(f);
      if (r != h5::Recovery::kNone) os << "[resume] " << f << ": " << h5::to_string(r) << "\n";
    } catch (const h5::Error& e) {
      throw ResultFileError("cannot recover " + f + ": " + e.what());
    }
    for (const auto& k : verified_keys(f, id, opt.allow_mixed)) done.insert(k);
  }

  RunContext ctx;
  ctx.seed = spec.seed;
  ctx.timing = opt.timing;
  ctx.timing_cfg = spec.timing;
  probe_device(&ctx);
  std::vector<const Point*> todo;
  for (const auto& p : all)
    if (!done.count(p.key())) todo.push_back(&p);
  os << "[workers] " << all.size() << " points, " << (all.size() - todo.size()) << " already done ("
     << (exists(out) ? "in " + out : std::string("no ") + out)
     << (old.empty() ? "" : ", " + std::to_string(old.size()) + " worker files of an earlier run")
     << "), " << todo.size() << " to run\n";

  // Chunks: consecutive points sharing a case key stay together; longest first.
  struct Chunk {
    std::vector<const Point*> points;
    double estimate = 0;
  };
  std::vector<Chunk> chunks;
  std::string last_key;
  for (const Point* p : todo) {
    const std::string key = opt.kinds->find(p->kind).case_key(*p);
    if (chunks.empty() || key.empty() || key != last_key) chunks.push_back({});
    chunks.back().points.push_back(p);
    chunks.back().estimate += estimate_point(*opt.kinds, *p, ctx);
    last_key = key;
  }
  std::stable_sort(chunks.begin(), chunks.end(),
                   [](const Chunk& a, const Chunk& b) { return a.estimate > b.estimate; });
  std::deque<Chunk*> queue;
  for (auto& c : chunks) queue.push_back(&c);

  int64_t n_ok = 0, n_skip = 0, n_fail = 0;
  std::string failure;
  int failure_code = 0;
  const int n_workers = static_cast<int>(std::min<size_t>(opt.workers, chunks.size()));
  std::vector<Worker> ws(static_cast<size_t>(n_workers));
  Signals signals;
  Reaper reaper{ws};
  Progress progress(Progress::parse_mode(opt.progress), os, "", std::max(1, n_workers));
  std::map<const Point*, double> est;
  for (const Point* p : todo) {
    est[p] = estimate_point(*opt.kinds, *p, ctx);
    progress.plan(p->kind, est[p]);
  }

  // Start the workers (argv and environment built before fork: the child only calls
  // async-signal-safe functions until exec).
  const pid_t parent = getpid();
  pid_t pgid = 0;
  for (int k = 0; k < n_workers; ++k) {
    Worker& w = ws[static_cast<size_t>(k)];
    w.k = k;
    const std::string file = dir + "/worker-" + std::to_string(k) + ".h5";
    std::vector<std::string> args = {opt.self_exe, "sweep",   spec.path,
                                     "--out",      file,      "--progress",
                                     "none",       "--log-prefix", "[worker " + std::to_string(k) + "] ",
                                     "--serve-points", id.digest(), "--threads",
                                     std::to_string(opt.cpu_threads)};
    if (exists(file)) args.push_back("--resume");
    if (!opt.fsync) args.push_back("--no-fsync");
    if (opt.allow_mixed) args.push_back("--allow-mixed");
    for (const auto& a : opt.passthrough) args.push_back(a);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e)
      if (std::string(*e).rfind("CUDA_VISIBLE_DEVICES=", 0) != 0 || opt.gpus.empty())
        env_s.push_back(*e);
    if (!opt.gpus.empty()) env_s.push_back("CUDA_VISIBLE_DEVICES=" + opt.gpus[static_cast<size_t>(k)]);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);

    int to[2], from[2];
    if (pipe2(to, O_CLOEXEC) != 0) throw IoError("pipe: " + std::string(std::strerror(errno)), errno);
    if (pipe2(from, O_CLOEXEC) != 0) {
      ::close(to[0]);
      ::close(to[1]);
      throw IoError("pipe: " + std::string(std::strerror(errno)), errno);
    }
    const pid_t group = pgid;
    const pid_t pid = fork();
    if (pid < 0) throw IoError("cannot start worker " + std::to_string(k) + ": fork failed", errno);
    if (pid == 0) {
      // The child: die with the parent, join the workers' group, wire the pipes, exec.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(143);
      setpgid(0, group);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      sigaction(SIGPIPE, &dfl, nullptr);
      sigaction(SIGINT, &dfl, nullptr);
      sigaction(SIGTERM, &dfl, nullptr);
      dup2(to[0], 0);
      dup2(from[1], 1);
      execve(opt.self_exe.c_str(), argv.data(), envp.data());
      _exit(127);
    }
    setpgid(pid, group == 0 ? pid : group);  // also here: whichever runs first
    if (pgid == 0) pgid = pid;
    reaper.pgid = pgid;
    ::close(to[0]);
    ::close(from[1]);
    w.pid = pid;
    w.to = to[1];
    w.from = from[0];
    w.reader = std::make_unique<LineReader>(w.from);
    os << "[workers] worker " << k << " pid " << pid
       << (opt.gpus.empty() ? "" : " on GPU " + opt.gpus[static_cast<size_t>(k)]) << " -> " << file
       << "\n";
  }
  os.flush();

  auto stopping = [&]() { return g_stop != 0 || !failure.empty(); };
  auto send_next = [&](Worker& w) {
    if (w.quit_sent) return;
    if (!stopping()) {
      if (w.chunk.empty() && !queue.empty()) {
        Chunk* c = queue.front();
        queue.pop_front();
        w.chunk.assign(c->points.begin(), c->points.end());
      }
      if (!w.chunk.empty()) {
        w.running = w.chunk.front();
        w.chunk.pop_front();
        progress.start_point(w.running->study + " " + w.running->describe());
        if (write_line(w.to, "run " + std::to_string(w.running->index))) return;
        w.running = nullptr;  // its pipe is gone: noticed when its output ends
      }
    }
    write_line(w.to, "quit");
    w.quit_sent = true;
  };
  auto finish = [&](Worker& w) {
    if (w.ended) return;
    w.ended = true;
    if (w.from >= 0) ::close(w.from);
    if (w.to >= 0) ::close(w.to);
    w.from = w.to = -1;
    int st = 0;
    while (waitpid(w.pid, &st, 0) < 0 && errno == EINTR) {
    }
    w.exit_code = exit_code_of(st);
    if ((!w.said_bye || w.exit_code != 0) && failure.empty() && !g_stop) {
      failure = "worker " + std::to_string(w.k) + " (pid " + std::to_string(w.pid) + ") " +
                (WIFSIGNALED(st) ? "was killed by signal " + std::to_string(WTERMSIG(st))
                                 : "exited with code " + std::to_string(w.exit_code)) +
                (w.running ? " while running " + w.running->key() : std::string());
      failure_code = (w.exit_code == kExitBadInput || w.exit_code == kExitIoError) ? w.exit_code
                                                                                   : kExitFailed;
    }
  };

  bool told_stop = false;
  for (;;) {
    if (stopping() && !told_stop) {
      told_stop = true;
      for (auto& w : ws)
        if (!w.ended && !w.running) send_next(w);  // idle ones quit now, busy ones after their point
    }
    std::vector<pollfd> fds;
    std::vector<Worker*> who;
    for (auto& w : ws)
      if (!w.ended) {
        fds.push_back({w.from, POLLIN, 0});
        who.push_back(&w);
      }
    if (fds.empty()) break;
    const int r = poll(fds.data(), fds.size(), -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw IoError("poll: " + std::string(std::strerror(errno)), errno);
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      Worker& w = *who[i];
      const bool open = w.reader->fill();
      std::string line;
      while (w.reader->take(&line)) {
        std::istringstream in(line);
        std::string cmd;
        in >> cmd;
        if (cmd == "ready") {
          send_next(w);
        } else if (cmd == "done") {
          int64_t index = -1;
          std::string status;
          double seconds = 0;
          in >> index >> status >> seconds;
          std::string reason;
          std::getline(in, reason);
          if (!reason.empty() && reason[0] == ' ') reason.erase(0, 1);
          if (index < 0 || static_cast<size_t>(index) >= all.size()) continue;
          const Point& p = all[static_cast<size_t>(index)];
          (status == "ok" ? n_ok : status == "skipped" ? n_skip : n_fail) += 1;
          ++w.points;
          w.busy += seconds;
          progress.finish_point(status, p.key(), reason, p.kind, est[&p], seconds);
          w.running = nullptr;
          send_next(w);
        } else if (cmd == "bye") {
          w.said_bye = true;
        }
      }
      if (!open) finish(w);
    }
  }
  progress.done();
  reaper.armed = false;
  for (const auto& w : ws)
    os << "[workers] worker " << w.k << ": " << w.points << " points, busy "
       << format_duration(w.busy) << "\n";
  const int64_t n_run = n_ok + n_skip + n_fail;
  os << "[workers] " << n_run << " points run (ok " << n_ok << ", skipped " << n_skip << ", failed "
     << n_fail << ") in " << format_duration(progress.elapsed()) << "\n";

  if (!failure.empty() || g_stop) {
    os << "[workers] " << (failure.empty() ? "interrupted by signal " + std::to_string(g_stop.load())
                                           : failure)
       << ": " << out << " was left untouched; the " << n_run
       << " points run are kept in " << dir << " (continue with --resume)\n";
    if (!failure.empty()) return failure_code;
    return 128 + g_stop;
  }

  // Everything ran: --out and the worker files become --out, atomically.
  const std::vector<std::string> shards = worker_files(out);
  if (shards.empty()) return n_fail > 0 ? kExitFailed : kExitOk;  // nothing new to merge
  std::vector<std::string> inputs;
  if (exists(out)) inputs.push_back(out);
  inputs.insert(inputs.end(), shards.begin(), shards.end());
  MergeOptions mo;
  mo.overwrite = true;
  mo.allow_mixed = opt.allow_mixed;
  mo.fsync = opt.fsync;
  mo.out_lock_fd = out_fd;
  const MergeResult m = merge_results(inputs, out, mo);
  remove_worker_files(out);
  os << "[workers] merged " << inputs.size() << " files (" << m.rows << " points) -> " << out
     << "\n";
  return n_fail > 0 ? kExitFailed : kExitOk;
}

int serve_points(const SweepSpec& spec, const std::vector<Point>& all, const SweepIdentity& id,
                 const SweepOptions& opt, std::ostream& log) {
  Signals signals;
  PointWriter w(spec, id, opt, opt.out, "worker", 0, log);
  std::vector<const Point*> every;
  for (const auto& p : all) every.push_back(&p);
  w.begin(every);
  int64_t n_run = 0, n_fail = 0;
  LineReader in(0);
  bool parent_gone = !write_line(1, "ready");
  while (!parent_gone && !g_stop) {
    std::string line;
    const int got = in.next(&line);
    if (got <= 0) break;  // end of file (the parent is gone) or a signal
    std::istringstream cmd(line);
    std::string verb;
    int64_t index = -1;
    cmd >> verb >> index;
    if (verb == "quit") break;
    if (verb != "run" || index < 0 || static_cast<size_t>(index) >= all.size()) {
      log << opt.log_prefix << "unknown command '" << line << "'\n";
      break;
    }
    const Point& p = all[static_cast<size_t>(index)];
    Record r;
    if (w.finished().count(p.key())) {
      r = Record::skipped("already recorded in " + opt.out);
    } else {
      r = w.run(p);
      ++n_run;
      if (r.status == Status::kFailed) ++n_fail;
    }
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.6f", r.seconds);
    parent_gone = !write_line(1, "done " + std::to_string(index) + " " + to_string(r.status) +
                                     " " + secs + " " + one_line(r.reason));
  }
  w.end(n_run, n_fail);
  write_line(1, "bye");
  log << opt.log_prefix << "[io] " << w.io_summary(n_run) << "\n";
  return g_stop ? 128 + g_stop : kExitOk;
}

}  // namespace kvlab::exp
