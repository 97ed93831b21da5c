// summary.h: the short console summary of a result file, printed after every sweep and by
// `kvlab summary FILE.h5`, also written as Markdown (--markdown FILE) and JSON (--json FILE)
// for CI logs and papers.
//
// Read back from the file (what a reader of the file sees), one table row per point kind:
//   | kind | points | ok | skipped | failed | time | headline |
// where the headline is the kind's first reported metric in a fixed preference order
// (bandwidth as % of the measured ceiling before raw bandwidth before time before error
// before capacity...), as its median over the ok points with its range and unit, then the
// skip reasons counted, not listed (| reason | points | kinds |), most frequent first, and
// the failed points (at most kMaxFailuresShown named, the rest counted). The JSON holds the
// same facts with full precision.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace kvlab::exp {

struct KindSummary {
  std::string kind;
  int64_t points = 0, ok = 0, skipped = 0, failed = 0;
  double seconds = 0;  // wall time of its points
  // The headline metric over the ok points ("" when the kind reports none).
  std::string metric, unit;
  int64_t n = 0;  // ok points that report it (finite)
  double median = 0, min = 0, max = 0;
};

struct ReasonCount {
  std::string reason;
  int64_t points = 0;
  std::vector<std::string> kinds;
};

struct Failure {
  std::string key, reason;
};

struct SweepSummary {
  std::string path;
  std::string sweep_name;
  std::string device;  // "" when the run had none
  int64_t points = 0;
  std::vector<KindSummary> kinds;     // in the order kinds first appear in the file
  std::vector<ReasonCount> skipped;   // most frequent first
  std::vector<Failure> failures;      // every failed point
};

constexpr int kMaxFailuresShown = 5;

// Reads /index of a result file. Throws InvalidArgument for a file that cannot be read.
SweepSummary summarize(const std::string& path);

std::string to_markdown(const SweepSummary& s);
std::string to_json(const SweepSummary& s);

// Prints the Markdown summary to `out` and writes the files that are not "" (Markdown,
// JSON). Throws InvalidArgument when a file cannot be written.
void report_summary(const std::string& result_path, const std::string& markdown_path,
                    const std::string& json_path, std::ostream& out);

// Before a sweep: throws InvalidArgument when a summary file ("" = none) could not be
// written (its directory is missing or not writable), so bad input fails before any point runs.
void check_summary_outputs(const std::string& markdown_path, const std::string& json_path);

// After a sweep: report_summary, but a summary that cannot be made is reported on `out`
// without changing the sweep's exit code (its points are in the file either way).
void summary_after_sweep(const std::string& result_path, const std::string& markdown_path,
                         const std::string& json_path, std::ostream& out);

// `kvlab summary FILE.h5 [--markdown FILE] [--json FILE]`: returns the exit code.
int cmd_summary(const std::vector<std::string>& args, std::ostream& out);

}  // namespace kvlab::exp
