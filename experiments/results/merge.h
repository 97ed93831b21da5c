// merge.h: `kvlab merge`: result files of shards (or of separate runs) into one file.
//
// Inputs are only read. Each must be a kvlab result file of this schema with no
// interrupted commit; shards must come from the same sweep (same sweep_fingerprint)
// unless allow_mixed. Rows are ordered by their sweep point index; a point key present in
// two inputs is an error. The output is written under a temporary name and renamed, so
// it appears complete or not at all. The output carries the first input's provenance, an
// /inputs table (one row per input: path, shard, host, git commit, device, ceilings) and
// the concatenated /runs tables.
#pragma once

#include <string>
#include <vector>

namespace kvlab::exp {

struct MergeOptions {
  bool overwrite = false;    // replace an existing output
  bool allow_mixed = false;  // inputs from different sweeps
};

// Returns the number of rows written. Errors: ResultFileError (exit code 2).
int64_t merge_results(const std::vector<std::string>& inputs, const std::string& out,
                      const MergeOptions& opt);

}  // namespace kvlab::exp
