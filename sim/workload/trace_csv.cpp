// trace_csv.cpp: CSV request traces (format in trace_csv.h).
#include "sim/workload/trace_csv.h"

#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>
#include <unordered_map>

#include "reference/core/error.h"
#include "sim/core/text.h"

namespace kvlab::sim {

namespace {

enum Col { kId, kArrival, kPrompt, kOutput, kGroup, kShared, kNumCols };
const char* const kColNames[kNumCols] = {"request_id",    "arrival_s",    "prompt_tokens",
                                         "output_tokens", "prefix_group", "shared_prefix_tokens"};

int32_t to_i32(int64_t v, int64_t lo, const TextLocation& loc) {
  KVLAB_REQUIRE(v >= lo && v <= std::numeric_limits<int32_t>::max(),
                loc.str() << " = " << v << " outside [" << lo << ", 2^31-1]");
  return static_cast<int32_t>(v);
}

}  // namespace

std::vector<Request> parse_trace_csv(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  std::string raw;
  int64_t line = 0;
  int pos[kNumCols];
  for (int& p : pos) p = -1;
  size_t num_fields = 0;
  bool have_header = false;
  std::vector<Request> out;
  std::unordered_map<int64_t, int64_t> id_line;
  double last_arrival = 0;
  while (std::getline(in, raw)) {
    ++line;
    const std::string s = trim(raw);
    if (s.empty() || s[0] == '#') continue;
    const std::vector<std::string> f = split_fields(s, ',');
    if (!have_header) {
      for (size_t i = 0; i < f.size(); ++i) {
        int c = 0;
        while (c < kNumCols && f[i] != kColNames[c]) ++c;
        KVLAB_REQUIRE(c < kNumCols,
                      source << ":" << line << ": unknown column '" << f[i]
                             << "' (allowed: request_id, arrival_s, prompt_tokens, output_tokens, "
                                "prefix_group, shared_prefix_tokens)");
        KVLAB_REQUIRE(pos[c] < 0,
                      source << ":" << line << ": column '" << f[i] << "' appears twice");
        pos[c] = static_cast<int>(i);
      }
      for (int c = kId; c <= kOutput; ++c)
        KVLAB_REQUIRE(pos[c] >= 0, source << ":" << line << ": header lacks the required column '"
                                          << kColNames[c] << "'");
      KVLAB_REQUIRE(
          (pos[kGroup] < 0) == (pos[kShared] < 0),
          source << ":" << line << ": columns prefix_group and shared_prefix_tokens come together");
      num_fields = f.size();
      have_header = true;
      continue;
    }
    KVLAB_REQUIRE(f.size() == num_fields, source << ":" << line << ": " << f.size()
                                                 << " fields, the header has " << num_fields);
    auto loc = [&](int c) { return TextLocation{source, line, kColNames[c]}; };
    Request r;
    r.id = parse_int(f[pos[kId]], loc(kId));
    r.arrival_s = parse_double(f[pos[kArrival]], loc(kArrival));
    KVLAB_REQUIRE(r.arrival_s >= 0, loc(kArrival).str() << " = " << r.arrival_s << " is negative");
    KVLAB_REQUIRE(r.arrival_s >= last_arrival, loc(kArrival).str()
                                                   << " = " << r.arrival_s
                                                   << " is earlier than the previous row's "
                                                   << last_arrival << " (rows must be sorted)");
    last_arrival = r.arrival_s;
    r.prompt_tokens = to_i32(parse_int(f[pos[kPrompt]], loc(kPrompt)), 1, loc(kPrompt));
    r.output_tokens = to_i32(parse_int(f[pos[kOutput]], loc(kOutput)), 1, loc(kOutput));
    if (pos[kGroup] >= 0) {
      r.prefix_group = to_i32(parse_int(f[pos[kGroup]], loc(kGroup)), 0, loc(kGroup));
      r.shared_prefix_tokens = to_i32(parse_int(f[pos[kShared]], loc(kShared)), 0, loc(kShared));
      KVLAB_REQUIRE(r.shared_prefix_tokens <= r.prompt_tokens,
                    loc(kShared).str() << " = " << r.shared_prefix_tokens
                                       << " exceeds prompt_tokens " << r.prompt_tokens);
      KVLAB_REQUIRE(r.prefix_group > 0 || r.shared_prefix_tokens == 0,
                    loc(kShared).str()
                        << " = " << r.shared_prefix_tokens << " needs prefix_group > 0");
    }
    const auto ins = id_line.emplace(r.id, line);
    KVLAB_REQUIRE(ins.second, loc(kId).str()
                                  << " = " << r.id << " repeats line " << ins.first->second);
    out.push_back(r);
  }
  KVLAB_REQUIRE(
      have_header,
      source << ": no header line (expected request_id,arrival_s,prompt_tokens,output_tokens)");
  validate_requests(out);  // belt and braces: the rules above are the same
  return out;
}

std::vector<Request> load_trace_csv(const std::string& path) {
  return parse_trace_csv(read_text_file(path), path);
}

std::string format_trace_csv(const std::vector<Request>& requests, const std::string& comment) {
  std::ostringstream os;
  if (!comment.empty()) {
    std::istringstream c(comment);
    std::string l;
    while (std::getline(c, l)) os << "# " << l << "\n";
  }
  os << "request_id,arrival_s,prompt_tokens,output_tokens,prefix_group,shared_prefix_tokens\n";
  os << std::setprecision(17);
  for (const Request& r : requests)
    os << r.id << "," << r.arrival_s << "," << r.prompt_tokens << "," << r.output_tokens << ","
       << r.prefix_group << "," << r.shared_prefix_tokens << "\n";
  return os.str();
}

}  // namespace kvlab::sim
