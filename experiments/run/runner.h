// runner.h: `kvlab sweep` and `kvlab validate`: run the points of a sweep, write results.
//
// Before anything is written: every value of every axis passes the kinds' declared rules
// (axis_rule.h), every point the kind's cross-axis check (Bench::check_point), the sweep is
// not empty, the output path is a regular file or new (a symlink is followed). Bad input
// throws (exit code 2) with nothing touched.
//
// For every point of the (sharded) expansion that the output does not already hold: ask the
// bench whether it supports the point (else: skipped, with the reason), run it (Unsupported
// thrown while running: skipped; any other error: failed, with the message), and commit the
// record durably. GPU benches get the timing harness options and the ceilings measured once at
// the start of the run.
//
// --resume verifies the file (every checksum) and its sweep identity (identity.h) against this
// run's before appending: a mismatch is exit code 2 with the differences, unless allow_mixed.
// With workers (workers.h) the points are handed out dynamically and the worker files merged
// into the output at the end; a resume counts the points of both.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "experiments/bench/kind_list.h"
#include "experiments/h5/durable.h"
#include "experiments/sweep/spec.h"

namespace kvlab::exp {

struct SweepOptions {
  const KindList* kinds = nullptr;  // the kinds the studies name (run_sweep sets it)
  std::string out;                // result file ("" = the config's `out`)
  bool resume = false;            // continue an existing file, skipping finished points
  bool dry_run = false;           // list the points and an estimate, run nothing
  bool allow_mixed = false;       // resume a file of another sweep identity
  int shard_k = 0, shard_n = 1;   // run the points whose index % n == k (Slurm arrays)
  std::string progress = "auto";  // auto | bar | plain | none
  bool fsync = true;
  h5::DurableFile::Commit commit = h5::DurableFile::Commit::kAuto;  // KVLAB_COMMIT
  bool timing = true;                    // false: validate only (kvlab validate)
  int workers = 1;                       // > 1: worker processes, points handed out dynamically
  std::vector<std::string> gpus;         // a device per worker (CUDA_VISIBLE_DEVICES)
  int cpu_threads = 0;                   // reference threads per point (0: cores / workers)
  std::vector<std::string> argv;         // this invocation (provenance)
  std::string self_exe;                  // for spawning workers
  std::vector<std::string> passthrough;  // options the workers repeat (--axis, --only, --seed, ...)
  std::string log_prefix;                // prepended to every output line (workers: "[worker k] ")
  std::string serve_identity;            // worker mode: run points named on stdin (workers.h)
};

// Parses "k/N" (0 <= k < N); throws InvalidArgument naming the text.
void parse_shard(const std::string& text, int* k, int* n);

// Runs the points of `spec`, whose studies name kinds of `kinds`. Returns the process exit
// code: 0 all points ok or skipped, 1 some failed (or `kvlab validate` validated nothing),
// 130/143 interrupted. Bad input throws (exit code 2), I/O failures throw IoError (exit code 3).
int run_sweep(const SweepSpec& spec, const KindList& kinds, const SweepOptions& opt,
              std::ostream& out);

}  // namespace kvlab::exp
