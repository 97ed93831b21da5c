// text.cpp: strict parsing helpers and data-file lookup (see text.h).
#include "sim/core/text.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include "reference/core/error.h"

#ifndef KVLAB_SIM_SOURCE_DIR
#define KVLAB_SIM_SOURCE_DIR "."
#endif

namespace kvlab::sim {

std::string TextLocation::str() const {
  std::ostringstream os;
  os << (file.empty() ? "<input>" : file);
  if (line > 0) os << ":" << line;
  if (!field.empty()) os << ": field '" << field << "'";
  return os.str();
}

std::vector<std::string> split_fields(const std::string& line, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t p = line.find(sep, start);
    out.push_back(trim(line.substr(start, p == std::string::npos ? std::string::npos : p - start)));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}

int64_t parse_int(const std::string& text, const TextLocation& loc) {
  const std::string t = trim(text);
  int64_t v = 0;
  const char* b = t.data();
  const char* e = t.data() + t.size();
  if (!t.empty() && *b == '+') ++b;
  const auto r = std::from_chars(b, e, v);
  KVLAB_REQUIRE(
      !t.empty() && r.ec == std::errc() && r.ptr == e,
      loc.str() << " = '" << text << "' is not an integer"
                << (r.ec == std::errc::result_out_of_range ? " (out of the int64 range)" : ""));
  return v;
}

double parse_double(const std::string& text, const TextLocation& loc) {
  const std::string t = trim(text);
  double v = 0;
  const char* b = t.data();
  const char* e = t.data() + t.size();
  if (!t.empty() && *b == '+') ++b;
  const auto r = std::from_chars(b, e, v);
  KVLAB_REQUIRE(!t.empty() && r.ec == std::errc() && r.ptr == e && std::isfinite(v),
                loc.str() << " = '" << text << "' is not a finite number");
  return v;
}

bool parse_bool(const std::string& text, const TextLocation& loc) {
  const std::string t = trim(text);
  if (t == "true" || t == "1") return true;
  if (t == "false" || t == "0") return false;
  throw InvalidArgument(loc.str() + " = '" + text +
                        "' is not a boolean (allowed: true, false, 1, 0)");
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KVLAB_REQUIRE(in.good(), "cannot open file '" << path << "'");
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

bool KeyValueFile::take(const std::string& key, std::string* value, TextLocation* loc) {
  auto it = values.find(key);
  if (it == values.end()) return false;
  *value = it->second.first;
  *loc = TextLocation{source, it->second.second, key};
  values.erase(it);
  return true;
}

void KeyValueFile::reject_unknown(const std::string& allowed) const {
  if (values.empty()) return;
  std::ostringstream os;
  for (const auto& kv : values)
    os << source << ":" << kv.second.second << ": unknown key '" << kv.first << "'; ";
  os << "allowed keys: " << allowed;
  throw InvalidArgument(os.str());
}

KeyValueFile parse_key_value(const std::string& text, const std::string& source) {
  KeyValueFile f;
  f.source = source;
  std::istringstream in(text);
  std::string raw;
  int64_t line = 0;
  while (std::getline(in, raw)) {
    ++line;
    const size_t hash = raw.find('#');
    const std::string s = trim(hash == std::string::npos ? raw : raw.substr(0, hash));
    if (s.empty()) continue;
    const size_t eq = s.find('=');
    KVLAB_REQUIRE(eq != std::string::npos,
                  source << ":" << line << ": expected 'key = value', got '" << s << "'");
    const std::string key = trim(s.substr(0, eq));
    const std::string value = trim(s.substr(eq + 1));
    KVLAB_REQUIRE(!key.empty(), source << ":" << line << ": empty key in '" << s << "'");
    auto it = f.values.find(key);
    KVLAB_REQUIRE(it == f.values.end(), source << ":" << line << ": key '" << key
                                               << "' repeats line "
                                               << (it == f.values.end() ? 0 : it->second.second));
    f.values[key] = {value, line};
  }
  return f;
}

namespace {
bool file_exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
}  // namespace

std::string find_data_file(const std::string& rel) {
  if (file_exists(rel)) return rel;
  std::vector<std::string> tried{rel};
  if (const char* env = std::getenv("KVLAB_DATA_DIR")) {
    const std::string p = std::string(env) + "/" + rel;
    if (file_exists(p)) return p;
    tried.push_back(p);
  }
  for (const std::string& base :
       {std::string("data"), std::string(KVLAB_SIM_SOURCE_DIR) + "/data"}) {
    const std::string p = base + "/" + rel;
    if (file_exists(p)) return p;
    tried.push_back(p);
  }
  std::ostringstream os;
  os << "data file '" << rel << "' not found; tried:";
  for (const auto& t : tried) os << " " << t;
  os << " (set KVLAB_DATA_DIR to the repository's data/ folder)";
  throw InvalidArgument(os.str());
}

}  // namespace kvlab::sim
