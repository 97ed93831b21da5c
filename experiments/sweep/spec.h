// spec.h: sweep configs (INI files in Boost.Program_options config-file syntax) and their
// expansion into points.
//
//   name = default                 # top level: name, description, out, seed
//   [timing]                       # GPU timing harness: warmup, min_reps, max_reps,
//   max_seconds = 1.0              #   target_rel_iqr, max_seconds, cold_l2, graph, graph_calls
//   [quant]                        # a study: any other section
//   kind = quant_error             # the bench (kvlab info lists them)
//   scheme = all                   # axis = values (values.h: lists and ranges; "all" for enums)
//   group = 16,32,64
//   zip = context, batch           # these axes vary together (equal lengths), repeatable
//   where = group <= head_dim      # constraint (expr.h), repeatable; all must hold
// Axes a study does not list take the bench's default. Every study expands to the
// cartesian product of its axes (zipped axes as one dimension), filtered by its
// constraints; points are numbered across studies in file order.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "experiments/bench/bench.h"
#include "experiments/bench/kind_list.h"
#include "experiments/sweep/expr.h"

namespace kvlab::exp {

struct StudySpec {
  std::string name;
  std::string kind;
  std::string description;
  std::vector<std::pair<std::string, std::string>> axes;  // name -> values text, as written
  std::vector<std::vector<std::string>> zips;
  std::vector<Expr> constraints;
};

struct SweepSpec {
  std::string path;  // "" for a spec built on the command line
  std::string text;  // the config file's text (stored as provenance)
  std::string name;
  std::string description;
  std::string out;  // default output file
  uint64_t seed = 1;
  TimingConfig timing;
  std::vector<StudySpec> studies;
  std::vector<std::string> overrides;  // "[study.]axis=values", applied by expand()
};

// Parses a config file. Missing file, syntax errors, unknown keys: InvalidArgument naming
// the file (and the line where Boost reports one).
SweepSpec load_sweep(const std::string& path);
SweepSpec parse_sweep(const std::string& text, const std::string& origin);

// Keeps only the named studies (comma-separated); unknown names are an error.
void select_studies(SweepSpec* spec, const std::string& names);

// Validates every study against its kind in `kinds` (a study without a kind, unknown
// kind/axis, bad values, zips, constraints, overrides naming no axis) and enumerates the
// points.
std::vector<Point> expand(const SweepSpec& spec, const KindList& kinds);

// A short digest of the expanded point keys: shards of one sweep share it.
std::string fingerprint(const std::vector<Point>& points);

}  // namespace kvlab::exp
