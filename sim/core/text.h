// text.h: strict text parsing for sim's data files (CSV traces, the GPU table, key = value
// workload specs) and locating files under data/.
//
// Every parse error names where it happened ("data/traces/x.csv:17: field 'prompt_tokens'
// = '12a' is not an integer"); nothing is silently defaulted, clamped or truncated. The
// parsers are hand-written because the errors must carry file, line and field, which the
// available libraries (Boost.Program_options config files) do not report.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "reference/core/strings.h"  // trim

namespace kvlab::sim {

// Where a value came from, for error messages: "file:line: field 'name'".
struct TextLocation {
  std::string file;
  int64_t line = 0;
  std::string field;
  std::string str() const;
};

// Splits on `sep` without quoting rules (sim's files never quote); fields are trimmed.
std::vector<std::string> split_fields(const std::string& line, char sep);

// Whole-string conversions; InvalidArgument "<loc>: '<text>' is not an integer" otherwise.
int64_t parse_int(const std::string& text, const TextLocation& loc);
double parse_double(const std::string& text, const TextLocation& loc);  // finite only
bool parse_bool(const std::string& text, const TextLocation& loc);      // true/false/1/0

// Reads a whole file; InvalidArgument naming the path when it cannot be opened.
std::string read_text_file(const std::string& path);

// "key = value" lines, '#' comments, blank lines skipped. Keys must be unique.
struct KeyValueFile {
  std::string source;                                             // file name for errors
  std::map<std::string, std::pair<std::string, int64_t>> values;  // key -> (value, line)
  // Removes and returns a key's value (so leftovers can be reported as unknown keys).
  bool take(const std::string& key, std::string* value, TextLocation* loc);
  // InvalidArgument naming every key no one took, with its line.
  void reject_unknown(const std::string& allowed) const;
};
KeyValueFile parse_key_value(const std::string& text, const std::string& source);

// Resolves a path relative to the repository's data/ folder: tries $KVLAB_DATA_DIR/<rel>,
// then ./data/<rel>, then <source tree>/data/<rel>; a path that exists as given is returned
// unchanged. InvalidArgument listing the places tried when none exists.
std::string find_data_file(const std::string& rel);

}  // namespace kvlab::sim
