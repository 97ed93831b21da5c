// workers.h: `kvlab sweep --workers N` / `--gpus LIST`: worker processes that take points
// from the parent one at a time, each into its own file, merged into --out at the end.
//
// Hand-out. The parent keeps the points still to run as chunks: consecutive points with the
// same case key (Bench::case_key: a decode case shared by every kernel version) form one
// chunk, so a worker builds each case once; chunks go longest-estimated first. A worker that
// finishes a point gets the next point of its chunk, or the next chunk: fast workers take more
// points, so uneven points do not leave a worker idle while another has a queue (as the static
// `index % N` split did).
//
// Processes. Workers are `kvlab sweep ... --serve-points ID` children in a process group of
// their own, with a parent-death signal (PR_SET_PDEATHSIG = SIGTERM): when the parent dies,
// even by SIGKILL, each worker finishes the point in flight, commits it and exits, releasing
// its file. SIGINT/SIGTERM to the parent stop the hand-out the same way. Each worker checks
// that its sweep identity equals the parent's before it runs anything.
//
// Files. Worker k writes `<out>.shards/worker-k.h5` (resumed when it exists). When every
// worker ended well, the parent merges --out (if any) and every worker file into --out
// (atomically, under --out's lock) and removes the worker files. When a worker fails (exits
// non-zero, is killed, its pipe breaks), the parent stops, leaves --out exactly as it was and
// exits non-zero; the finished points stay in the worker files, and --resume (with or without
// workers) counts them as done.
//
// Protocol (lines on the worker's stdin / stdout; its log goes to stderr):
//   worker -> parent: "ready"; "done <index> <status> <seconds> <reason>"; "bye"
//   parent -> worker: "run <index>" (the point's index in the whole sweep); "quit"
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "experiments/bench/bench.h"
#include "experiments/results/identity.h"
#include "experiments/run/runner.h"

namespace kvlab::exp {

// The worker files of `out` (existing ones, any worker count).
std::string shards_dir(const std::string& out);
std::vector<std::string> worker_files(const std::string& out);
// Removes the worker files and their folder (after they were merged into --out).
void remove_worker_files(const std::string& out);

// The parent: runs `todo` (indexes into `all`) on opt.workers workers. `out` is resolved.
int run_workers(const SweepSpec& spec, const std::vector<Point>& all, const SweepIdentity& id,
                const SweepOptions& opt, const std::string& out, std::ostream& os);

// A worker: serves "run" lines for the points of `all` into opt.out until "quit" or EOF.
int serve_points(const SweepSpec& spec, const std::vector<Point>& all, const SweepIdentity& id,
                 const SweepOptions& opt, std::ostream& log);

}  // namespace kvlab::exp
