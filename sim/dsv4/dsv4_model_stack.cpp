#include "sim/dsv4/dsv4_model_stack.h"

#include <fstream>
#include <map>
#include <sstream>

#include "reference/core/error.h"
#include "reference/core/strings.h"

namespace kvlab::sim {

std::string to_string(Dsv4LayerKind k) {
  switch (k) {
    case Dsv4LayerKind::kSWA:
      return "swa";
    case Dsv4LayerKind::kCSA:
      return "csa";
    case Dsv4LayerKind::kHCA:
      return "hca";
  }
  return "?";
}

Dsv4LayerKind parse_dsv4_layer_kind(const std::string& s) {
  std::string l;
  for (char c : s) l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (l == "swa") return Dsv4LayerKind::kSWA;
  if (l == "csa") return Dsv4LayerKind::kCSA;
  if (l == "hca") return Dsv4LayerKind::kHCA;
  throw InvalidArgument("unknown DSV4 layer kind '" + s + "' (allowed: swa, csa, hca)");
}

int32_t Dsv4ModelStack::count(Dsv4LayerKind k) const {
  int32_t n = 0;
  for (auto l : layers) n += (l == k);
  return n;
}

int32_t Dsv4ModelStack::ratio(Dsv4LayerKind k) const {
  switch (k) {
    case Dsv4LayerKind::kSWA:
      return 0;
    case Dsv4LayerKind::kCSA:
      return csa_ratio;
    case Dsv4LayerKind::kHCA:
      return hca_ratio;
  }
  throw InvalidArgument("invalid DSV4 layer kind value " + std::to_string(static_cast<int>(k)));
}

void validate(const Dsv4ModelStack& s) {
  const std::string where = "model stack '" + s.name + "' (" + s.source + ")";
  KVLAB_REQUIRE(!s.layers.empty(), where << ": no layers");
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const int k = static_cast<int>(s.layers[i]);
    KVLAB_REQUIRE(k >= 0 && k <= 2, where << ": layer " << i << " has invalid kind value " << k);
  }
  KVLAB_REQUIRE(s.nope_dim > 0 && s.nope_dim % 64 == 0,
                where << ": nope_dim must be a positive multiple of 64 (the FP8 64-tiles), got "
                      << s.nope_dim);
  KVLAB_REQUIRE(s.rope_dim > 0 && s.rope_dim % 2 == 0,
                where << ": rope_dim must be positive and even, got " << s.rope_dim);
  KVLAB_REQUIRE(s.window >= 1, where << ": window must be >= 1, got " << s.window);
  if (s.count(Dsv4LayerKind::kCSA) > 0) {
    KVLAB_REQUIRE(s.csa_ratio >= 2, where << ": csa_ratio must be >= 2, got " << s.csa_ratio);
    KVLAB_REQUIRE(s.indexer_dim > 0 && s.indexer_dim % 32 == 0,
                  where << ": indexer_dim must be a positive multiple of 32 (the MXFP4 group), got "
                        << s.indexer_dim);
  }
  if (s.count(Dsv4LayerKind::kHCA) > 0)
    KVLAB_REQUIRE(s.hca_ratio >= 2, where << ": hca_ratio must be >= 2, got " << s.hca_ratio);
}

namespace {

int32_t parse_int(const std::string& v, const std::string& where) {
  size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  KVLAB_REQUIRE(used == v.size() && !v.empty() && x >= INT32_MIN && x <= INT32_MAX,
                where << ": expected an integer, got '" << v << "'");
  return static_cast<int32_t>(x);
}

}  // namespace

Dsv4ModelStack parse_dsv4_model_stack(const std::string& text, const std::string& source) {
  Dsv4ModelStack s;
  s.source = source;
  std::map<std::string, int32_t*> int_keys{
      {"nope_dim", &s.nope_dim}, {"rope_dim", &s.rope_dim},   {"indexer_dim", &s.indexer_dim},
      {"window", &s.window},     {"csa_ratio", &s.csa_ratio}, {"hca_ratio", &s.hca_ratio}};
  std::map<std::string, bool> seen;
  std::istringstream in(text);
  std::string raw, section;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string where = source + ":" + std::to_string(line_no);
    const auto hash = raw.find_first_of("#;");
    const std::string line = trim(hash == std::string::npos ? raw : raw.substr(0, hash));
    if (line.empty()) continue;
    if (line.front() == '[') {
      KVLAB_REQUIRE(line.back() == ']', where << ": malformed section header '" << line << "'");
      section = trim(line.substr(1, line.size() - 2));
      KVLAB_REQUIRE(section == "model" || section == "layers",
                    where << ": unknown section [" << section << "] (allowed: [model], [layers])");
      continue;
    }
    if (section == "model") {
      const auto eq = line.find('=');
      KVLAB_REQUIRE(eq != std::string::npos,
                    where << ": expected 'key = value', got '" << line << "'");
      const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
      KVLAB_REQUIRE(!seen[key], where << ": key '" << key << "' given twice");
      seen[key] = true;
      if (key == "name") {
        s.name = value;
      } else if (int_keys.count(key)) {
        *int_keys[key] = parse_int(value, where + " (" + key + ")");
      } else {
        throw InvalidArgument(
            where + ": unknown key '" + key +
            "' in [model] (allowed: name, nope_dim, rope_dim, indexer_dim, window, "
            "csa_ratio, hca_ratio)");
      }
    } else if (section == "layers") {
      // "<kind> [<kind> ...] [x N]"
      std::istringstream words(line);
      std::vector<std::string> w;
      for (std::string t; words >> t;) w.push_back(t);
      int32_t repeat = 1;
      if (w.size() >= 2 && (w[w.size() - 2] == "x" || w[w.size() - 2] == "X")) {
        repeat = parse_int(w.back(), where + " (repeat count)");
        KVLAB_REQUIRE(repeat >= 1, where << ": repeat count must be >= 1, got " << repeat);
        w.resize(w.size() - 2);
      }
      KVLAB_REQUIRE(!w.empty(), where << ": no layer kinds on the line '" << line << "'");
      std::vector<Dsv4LayerKind> group;
      for (const auto& t : w) {
        try {
          group.push_back(parse_dsv4_layer_kind(t));
        } catch (const InvalidArgument& e) {
          throw InvalidArgument(where + ": " + e.what());
        }
      }
      for (int32_t r = 0; r < repeat; ++r)
        s.layers.insert(s.layers.end(), group.begin(), group.end());
    } else {
      throw InvalidArgument(where + ": content before the first section ([model] or [layers])");
    }
  }
  for (const char* key :
       {"name", "nope_dim", "rope_dim", "indexer_dim", "window", "csa_ratio", "hca_ratio"})
    KVLAB_REQUIRE(seen[key], source << ": missing required key '" << key << "' in [model]");
  validate(s);
  return s;
}

Dsv4ModelStack load_dsv4_model_stack(const std::string& path) {
  std::ifstream f(path);
  KVLAB_REQUIRE(f.good(), "cannot open DSV4 model stack file '" << path << "'");
  std::stringstream buf;
  buf << f.rdbuf();
  return parse_dsv4_model_stack(buf.str(), path);
}

std::string to_ini(const Dsv4ModelStack& s) {
  std::ostringstream o;
  o << "[model]\nname = " << s.name << "\nnope_dim = " << s.nope_dim
    << "\nrope_dim = " << s.rope_dim << "\nindexer_dim = " << s.indexer_dim
    << "\nwindow = " << s.window << "\ncsa_ratio = " << s.csa_ratio
    << "\nhca_ratio = " << s.hca_ratio << "\n[layers]\n";
  for (auto k : s.layers) o << to_string(k) << "\n";
  return o.str();
}

}  // namespace kvlab::sim
