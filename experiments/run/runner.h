// runner.h: `kvlab sweep` and `kvlab validate`: run the points of a sweep, write results.
//
// For every point of the (sharded) expansion that the output does not already hold:
// ask the bench whether it supports the point (else: skipped, with the reason), run it
// (Unsupported thrown while running: skipped; any other error: failed, with the message),
// and commit the record durably. GPU benches get the timing harness options and the
// ceilings measured once at the start of the run.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "experiments/sweep/spec.h"

namespace kvlab::exp {

struct SweepOptions {
  std::string out;                // result file ("" = the config's `out`)
  bool resume = false;            // continue an existing file, skipping finished points
  bool dry_run = false;           // list the points and an estimate, run nothing
  int shard_k = 0, shard_n = 1;   // run the points whose index % n == k
  std::string progress = "auto";  // auto | bar | plain | none
  bool fsync = true;
  bool timing = true;                    // false: validate only (kvlab validate)
  int workers = 1;                       // > 1: one child process per shard, merged at the end
  std::vector<std::string> gpus;         // a device per worker (CUDA_VISIBLE_DEVICES)
  std::vector<std::string> argv;         // this invocation (provenance)
  std::string self_exe;                  // for spawning workers
  std::vector<std::string> passthrough;  // options the workers repeat (--axis, --only, --seed, ...)
  std::string log_prefix;                // prepended to every output line (workers: "[worker k] ")
};

// Parses "k/N" (0 <= k < N); throws InvalidArgument naming the text.
void parse_shard(const std::string& text, int* k, int* n);

// Runs the points of `spec`, whose studies name kinds of `kinds`. Returns the process exit
// code: 0 all points ok or skipped, 1 some failed, 130/143 interrupted. Bad input throws
// (the caller maps it to exit code 2).
int run_sweep(const SweepSpec& spec, const KindList& kinds, const SweepOptions& opt,
              std::ostream& out);

}  // namespace kvlab::exp
