// merge.h: `kvlab merge`: result files of shards, workers or separate runs into one file.
//
// Inputs are only read, and verified first: each must be a kvlab result file of a readable
// schema, with no interrupted commit and every checksum intact (integrity.h); all must come
// from the same sweep (the same identity, identity.h) unless allow_mixed. Schema 1 inputs
// (no identity, no checksums) are accepted only with allow_mixed, and their rows are sealed
// as read. Rows are ordered by their sweep point index; a point key present in two inputs is
// an error. Index rows and point groups are copied unchanged (their checksums with them); the
// output gets the first input's provenance and identity, an /inputs table (one row per input:
// path, shard, rows, identity, host, git commit, device, ceilings) and the concatenated /runs
// tables. It is written under `<out>.commit` (locked while written, removed on every failure
// path) and renamed over `out`, so it appears complete or not at all; an existing `out` that a
// kvlab writer holds is refused (its lock), never replaced under the writer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvlab::exp {

struct MergeOptions {
  bool overwrite = false;    // replace an existing output
  bool allow_mixed = false;  // inputs from different sweeps, or of schema 1
  bool fsync = true;
  int out_lock_fd = -1;  // the caller already holds out's lock through this descriptor
};

struct MergeResult {
  int64_t rows = 0;       // points in the output
  int64_t planned = 0;    // points of the sweep (its identity), 0 when unknown
  int64_t missing = 0;    // planned points the output lacks
  std::string first_missing;
  std::vector<std::string> notes;  // what could not be verified
};

// Errors: ResultFileError (exit code 2: bad or damaged input, another sweep, output busy),
// IoError (exit code 3: writing the output failed; nothing was replaced).
MergeResult merge_results(const std::vector<std::string>& inputs, const std::string& out,
                          const MergeOptions& opt);

}  // namespace kvlab::exp
