// cli.h: the `kvlab` command line (Boost.Program_options), callable in-process by tests.
//
//   kvlab info      build, git, devices, the benches and their axes, a reference self-check
//   kvlab validate  run a sweep's points without timing: validation only, pass/fail table
//   kvlab sweep     run a sweep config into an HDF5 result file (resume, shards, workers)
//   kvlab simulate  run one serving-simulation config into an HDF5 file
//   kvlab calibrate fit the decode-attention cost model to measured timings (experiments/calibrate)
//   kvlab merge     merge shard result files into one
//   kvlab check     verify result files (schema, sweep identity, every checksum)
//   kvlab recover   undo an interrupted commit of a result file, then check it
// Exit codes (file_io.h): 0 success; 1 some points failed (or the self-check failed, a checked
// file is damaged, `kvlab validate` validated nothing); 2 bad input (unknown subcommand/option/
// axis, a value outside its axis's rule, malformed config or range, an empty sweep, an output
// that is a FIFO or a directory, a file of another schema or sweep, a damaged file), with
// nothing already written touched; 3 I/O failure (disk full, quota, EIO, file size limit: the
// file keeps its last complete commit); 128+N stopped by signal N after a clean stop.
#pragma once

#include <iosfwd>

namespace kvlab::exp {

int cli_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

// The reference self-check of `kvlab info`; prints one line per check, returns all passed.
bool self_check(std::ostream& out);

}  // namespace kvlab::exp
