// cli.h: the `kvlab` command line (Boost.Program_options), callable in-process by tests.
//
//   kvlab info      build, git, devices, the benches and their axes, a reference self-check
//   kvlab validate  run a sweep's points without timing: validation only, pass/fail table
//   kvlab sweep     run a sweep config into an HDF5 result file (resume, shards, workers)
//   kvlab simulate  run one serving-simulation config into an HDF5 file
//   kvlab calibrate fit the decode-attention cost model to measured timings (experiments/calibrate)
//   kvlab merge     merge shard result files into one
//   kvlab recover   undo an interrupted commit of a result file
// Exit codes: 0 success; 1 some points failed (or the self-check failed); 2 bad input
// (unknown subcommand/option/axis, malformed config or range, unwritable output, a file
// of another schema, a damaged file); 128+N killed by signal N after a clean stop.
#pragma once

#include <iosfwd>

namespace kvlab::exp {

int cli_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

// The reference self-check of `kvlab info`; prints one line per check, returns all passed.
bool self_check(std::ostream& out);

}  // namespace kvlab::exp
