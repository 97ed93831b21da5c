// trace_csv.h: request traces as CSV files (data/traces/*.csv).
//
// Format (documented in data/traces/README.md):
//   - '#' starts a comment line; blank lines are skipped;
//   - the first non-comment line is the header; required columns
//       request_id     integer, unique
//       arrival_s      seconds since the trace start, finite, >= 0, non-decreasing
//       prompt_tokens  integer >= 1
//       output_tokens  integer >= 1
//     optional columns (both or neither)
//       prefix_group          integer >= 0 (0 = no shared prefix)
//       shared_prefix_tokens  integer in [0, prompt_tokens]
//     columns may come in any order; an unknown column is an error;
//   - every row has exactly as many fields as the header.
// Every malformed line is an InvalidArgument naming the file, line and field.
#pragma once

#include <string>
#include <vector>

#include "sim/workload/workload.h"

namespace kvlab::sim {

std::vector<Request> parse_trace_csv(const std::string& text, const std::string& source);
std::vector<Request> load_trace_csv(const std::string& path);
// Writes the full six-column form (round-trips through parse_trace_csv exactly: arrival
// times with 17 significant digits).
std::string format_trace_csv(const std::vector<Request>& requests, const std::string& comment);

}  // namespace kvlab::sim
