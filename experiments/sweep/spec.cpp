// spec.cpp: sweep config parsing (Boost.Program_options config-file syntax) and expansion.
#include "experiments/sweep/spec.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "experiments/h5/file_io.h"
#include "experiments/sweep/axis_rule.h"
#include "experiments/sweep/values.h"
#include "reference/core/error.h"

namespace po = boost::program_options;

namespace kvlab::exp {
namespace {

const std::set<std::string> kStudyKeys = {"kind", "description", "zip", "where"};

bool parse_bool(const std::string& v, const std::string& what) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  throw InvalidArgument(what + ": expected true/false, got '" + v + "'");
}

int to_int(const std::string& v, const std::string& what, long long lo, long long hi) {
  long long x = 0;
  if (!parse_int(v, &x) || x < lo || x > hi)
    throw InvalidArgument(what + ": expected an integer in [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "], got '" + v + "'");
  return static_cast<int>(x);
}

double to_double(const std::string& v, const std::string& what, double lo) {
  double x = 0;
  if (!parse_float(v, &x) || x < lo)
    throw InvalidArgument(what + ": expected a number >= " + canonical_number(lo) + ", got '" + v +
                          "'");
  return x;
}

void set_timing(TimingConfig* t, const std::string& key, const std::string& v,
                const std::string& origin) {
  const std::string what = origin + ": [timing] " + key;
  if (key == "warmup")
    t->warmup = to_int(v, what, 0, 1000);
  else if (key == "min_reps")
    t->min_reps = to_int(v, what, 3, 100000);
  else if (key == "max_reps")
    t->max_reps = to_int(v, what, 3, 1000000);
  else if (key == "target_rel_iqr")
    t->target_rel_iqr = to_double(v, what, 0);
  else if (key == "max_seconds")
    t->max_seconds = to_double(v, what, 0);
  else if (key == "cold_l2")
    t->cold_l2 = parse_bool(v, what);
  else if (key == "graph")
    t->graph = parse_bool(v, what);
  else if (key == "graph_calls")
    t->graph_calls = to_int(v, what, 1, 10000);
  else if (key == "hold_stream")
    t->hold_stream = parse_bool(v, what);
  else
    throw InvalidArgument(
        origin + ": unknown key '" + key +
        "' in [timing] (allowed: warmup, min_reps, max_reps, target_rel_iqr, max_seconds, "
        "cold_l2, graph, graph_calls, hold_stream)");
}

bool valid_study_name(const std::string& s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

std::string join(const std::vector<std::string>& v, const std::string& sep = ", ") {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

// Validates and canonicalizes the values of one axis (axis_rule.h: the same rule for every
// kind, declared by the kind's AxisSpec).
std::vector<std::string> axis_values(const AxisSpec& a, const std::string& text,
                                     const std::string& what) {
  std::vector<std::string> raw;
  if (a.type == AxisType::kEnum && trim(text) == "all") return a.choices;
  if (trim(text).empty())
    throw InvalidArgument(what + " = '': empty value (allowed: " + describe_rule(a) + ")");
  raw = parse_value_list(text, what);
  std::vector<std::string> out;
  for (const auto& v : raw) out.push_back(canonical_axis_value(a, v, what));
  // Duplicates would produce the same point twice.
  std::set<std::string> seen;
  for (const auto& v : out)
    if (!seen.insert(v).second) throw InvalidArgument(what + ": value '" + v + "' is listed twice");
  return out;
}

// Config text must be UTF-8: it is stored in every result file, whose readers decode it.
void require_utf8(const std::string& text, const std::string& origin) {
  const int64_t at = first_invalid_utf8(text);
  if (at < 0) return;
  const auto line = 1 + std::count(text.begin(), text.begin() + at, '\n');
  char byte[8];
  std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(text[static_cast<size_t>(at)]));
  throw InvalidArgument(origin + ": line " + std::to_string(line) + ": byte " + byte +
                        " at offset " + std::to_string(at) +
                        (text[static_cast<size_t>(at)] == '\0' ? " (NUL)" : "") +
                        " is not valid UTF-8 text; save the config as UTF-8");
}

}  // namespace

SweepSpec parse_sweep(const std::string& text, const std::string& origin) {
  require_utf8(text, origin);
  SweepSpec spec;
  spec.text = text;
  std::istringstream in(text);
  po::options_description none;
  po::parsed_options parsed(&none);
  try {
    parsed = po::parse_config_file(in, none, /*allow_unregistered=*/true);
  } catch (const po::error& e) {
    throw InvalidArgument(origin + ": malformed config: " + std::string(e.what()));
  }
  std::map<std::string, size_t> study_index;
  std::set<std::string> seen_top;
  for (const auto& o : parsed.options) {
    const std::string key = o.string_key;
    const std::string value = o.value.empty() ? "" : trim(o.value.front());
    const auto dot = key.rfind('.');
    if (dot == std::string::npos) {
      if (!seen_top.insert(key).second)
        throw InvalidArgument(origin + ": top-level key '" + key + "' given twice");
      if (key == "name")
        spec.name = value;
      else if (key == "description")
        spec.description = value;
      else if (key == "out")
        spec.out = value;
      else if (key == "seed") {
        long long s = 0;
        if (!parse_int(value, &s) || s < 0)
          throw InvalidArgument(origin + ": seed must be a non-negative integer, got '" + value +
                                "'");
        spec.seed = static_cast<uint64_t>(s);
      } else {
        throw InvalidArgument(
            origin + ": unknown top-level key '" + key +
            "' (allowed: name, description, out, seed; studies go in [sections])");
      }
      continue;
    }
    const std::string section = key.substr(0, dot), k = key.substr(dot + 1);
    if (section == "timing") {
      set_timing(&spec.timing, k, value, origin);
      continue;
    }
    if (!valid_study_name(section))
      throw InvalidArgument(origin + ": invalid section name '[" + section +
                            "]' (letters, digits, '_' and '-' only)");
    auto it = study_index.find(section);
    if (it == study_index.end()) {
      it = study_index.emplace(section, spec.studies.size()).first;
      spec.studies.push_back(StudySpec{});
      spec.studies.back().name = section;
    }
    StudySpec& st = spec.studies[it->second];
    const std::string what = origin + ": [" + section + "] " + k;
    if (k == "kind") {
      if (!st.kind.empty()) throw InvalidArgument(what + " given twice");
      st.kind = value;
    } else if (k == "description") {
      st.description = value;
    } else if (k == "zip") {
      std::vector<std::string> names;
      for (const auto& n : split(value, ',')) {
        if (trim(n).empty()) throw InvalidArgument(what + ": empty axis name in '" + value + "'");
        names.push_back(trim(n));
      }
      if (names.size() < 2)
        throw InvalidArgument(what + ": a zip needs at least two axes, got '" + value + "'");
      st.zips.push_back(names);
    } else if (k == "where") {
      st.constraints.push_back(Expr::parse(value));
    } else {
      for (const auto& a : st.axes)
        if (a.first == k) throw InvalidArgument(what + ": axis listed twice");
      if (value.empty()) throw InvalidArgument(what + " = '': empty value");
      st.axes.emplace_back(k, value);
    }
  }
  if (spec.timing.max_reps < spec.timing.min_reps)
    throw InvalidArgument(origin + ": [timing] max_reps (" + std::to_string(spec.timing.max_reps) +
                          ") is below min_reps (" + std::to_string(spec.timing.min_reps) + ")");
  if (spec.studies.empty()) throw InvalidArgument(origin + ": no study sections: nothing to run");
  return spec;
}

SweepSpec load_sweep(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument("cannot read sweep config '" + path + "' (missing or unreadable)");
  std::stringstream ss;
  ss << in.rdbuf();
  SweepSpec s = parse_sweep(ss.str(), path);
  s.path = path;
  if (s.name.empty()) {
    const auto slash = path.find_last_of('/');
    std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    const auto dot = base.rfind('.');
    s.name = dot == std::string::npos ? base : base.substr(0, dot);
  }
  return s;
}

void select_studies(SweepSpec* spec, const std::string& names) {
  std::vector<StudySpec> kept;
  for (const auto& raw : split(names, ',')) {
    const std::string n = trim(raw);
    auto it = std::find_if(spec->studies.begin(), spec->studies.end(),
                           [&](const StudySpec& s) { return s.name == n; });
    if (it == spec->studies.end()) {
      std::vector<std::string> all;
      for (const auto& s : spec->studies) all.push_back(s.name);
      throw InvalidArgument("--only: unknown study '" + n + "' (studies: " + join(all) + ")");
    }
    kept.push_back(*it);
  }
  spec->studies = kept;
}

std::vector<Point> expand(const SweepSpec& spec, const KindList& kinds) {
  const std::string origin = spec.path.empty() ? "sweep" : spec.path;
  for (const auto& st : spec.studies)
    if (st.kind.empty())
      throw InvalidArgument(origin + ": [" + st.name +
                            "] has no 'kind' (known kinds: " + join(kinds.names()) + ")");
  // Overrides: "[study.]axis=values", each must name an axis of at least one study's bench.
  std::vector<StudySpec> studies = spec.studies;
  for (const auto& ov : spec.overrides) {
    auto [name, values] = split_assignment(ov, "--axis");
    std::string only_study;
    if (const auto dot = name.find('.'); dot != std::string::npos) {
      only_study = name.substr(0, dot);
      name = name.substr(dot + 1);
    }
    bool used = false;
    std::set<std::string> known;
    for (auto& st : studies) {
      if (!only_study.empty() && st.name != only_study) continue;
      const Bench& b = kinds.find(st.kind);
      bool declared = false;
      for (const auto& a : b.axes()) {
        known.insert(a.name);
        declared |= a.name == name;
      }
      if (!declared) continue;
      used = true;
      auto it = std::find_if(st.axes.begin(), st.axes.end(),
                             [&](const auto& p) { return p.first == name; });
      if (it != st.axes.end())
        it->second = values;
      else
        st.axes.emplace_back(name, values);
    }
    if (!used) {
      if (!only_study.empty() &&
          std::none_of(studies.begin(), studies.end(),
                       [&](const StudySpec& s) { return s.name == only_study; }))
        throw InvalidArgument("--axis " + ov + ": unknown study '" + only_study + "'");
      std::vector<std::string> k(known.begin(), known.end());
      throw InvalidArgument("--axis " + ov + ": unknown axis '" + name +
                            "' (axes of the selected studies: " + join(k) + ")");
    }
  }

  std::vector<Point> points;
  int64_t next = 0;
  for (const auto& st : studies) {
    const Bench& b = kinds.find(st.kind);
    const auto specs = b.axes();
    const std::string where = origin + ": [" + st.name + "]";
    std::map<std::string, std::vector<std::string>> values;
    for (const auto& [name, text] : st.axes) {
      auto a = std::find_if(specs.begin(), specs.end(),
                            [&](const AxisSpec& s) { return s.name == name; });
      if (a == specs.end()) {
        std::vector<std::string> names;
        for (const auto& s : specs) names.push_back(s.name);
        throw InvalidArgument(where + ": unknown axis '" + name + "' for kind " + st.kind +
                              " (axes: " + join(names) + ")");
      }
      values[name] = axis_values(*a, text, where + " " + st.kind + " axis " + name);
    }
    for (const auto& a : specs)
      if (!values.count(a.name))
        values[a.name] = axis_values(a, a.default_value,
                                     where + " " + st.kind + " axis " + a.name + " (its default)");

    // Dimensions: one per axis, zipped axes share one (placed at their first axis).
    std::map<std::string, int> zip_of;
    for (size_t z = 0; z < st.zips.size(); ++z) {
      size_t len = 0;
      for (const auto& n : st.zips[z]) {
        if (std::none_of(specs.begin(), specs.end(),
                         [&](const AxisSpec& s) { return s.name == n; }))
          throw InvalidArgument(where + ": zip names unknown axis '" + n + "'");
        if (zip_of.count(n)) throw InvalidArgument(where + ": axis '" + n + "' is in two zips");
        zip_of[n] = static_cast<int>(z);
        const size_t l = values[n].size();
        if (len == 0)
          len = l;
        else if (l != len)
          throw InvalidArgument(where + ": zipped axes " + join(st.zips[z]) +
                                " have different lengths (" + std::to_string(len) + " vs " +
                                std::to_string(l) + " for " + n + ")");
      }
    }
    for (const auto& c : st.constraints)
      for (const auto& id : c.identifiers())
        if (std::none_of(specs.begin(), specs.end(),
                         [&](const AxisSpec& s) { return s.name == id; }))
          throw InvalidArgument(where + ": constraint '" + c.text() + "' names unknown axis '" +
                                id + "'");
    // The points hold each enum axis's canonical value: a constraint's text literals in an
    // older spelling (AxisSpec::aliases) compare as the value they name.
    std::map<std::string, std::string> alias_of;
    for (const auto& a : specs)
      for (const auto& [alias, canonical] : a.aliases) alias_of[alias] = canonical;
    std::vector<Expr> constraints;
    for (const auto& c : st.constraints)
      constraints.push_back(c.map_text([&](const std::string& t) {
        const auto it = alias_of.find(t);
        return it == alias_of.end() ? t : it->second;
      }));

    struct Dim {
      std::vector<std::string> axes;
      size_t len;
    };
    std::vector<Dim> dims;
    std::set<int> placed;
    for (const auto& a : specs) {
      auto z = zip_of.find(a.name);
      if (z == zip_of.end()) {
        dims.push_back({{a.name}, values[a.name].size()});
      } else if (placed.insert(z->second).second) {
        dims.push_back({st.zips[z->second], values[a.name].size()});
      }
    }
    std::vector<size_t> idx(dims.size(), 0);
    size_t total = 1;
    for (const auto& d : dims) total *= d.len;
    if (total > 10000000)
      throw InvalidArgument(where + ": " + std::to_string(total) +
                            " points is beyond the limit of 10^7");
    size_t kept = 0;
    for (size_t n = 0; n < total; ++n) {
      Point p;
      p.study = st.name;
      p.kind = st.kind;
      std::map<std::string, std::string> chosen;
      for (size_t d = 0; d < dims.size(); ++d)
        for (const auto& a : dims[d].axes) chosen[a] = values[a][idx[d]];
      for (const auto& a : specs) p.axes.emplace_back(a.name, chosen[a.name]);
      bool ok = true;
      for (const auto& c : constraints) {
        try {
        ok = c.eval([&](const std::string& id) -> ExprValue {
          auto a = std::find_if(specs.begin(), specs.end(),
                                [&](const AxisSpec& s) { return s.name == id; });
          if (a->numeric()) {
            double x = 0;
            parse_float(chosen[id], &x);
            return x;
          }
          return chosen[id];
        });
        } catch (const InvalidArgument& e) {
          throw InvalidArgument(where + ": " + e.what());
        }
        if (!ok) break;
      }
      if (ok) {
        p.index = next++;
        points.push_back(std::move(p));
        ++kept;
      }
      // Odometer: the last dimension varies fastest.
      for (size_t d = dims.size(); d-- > 0;) {
        if (++idx[d] < dims[d].len) break;
        idx[d] = 0;
      }
    }
    if (kept == 0) {
      std::string cs;
      for (const auto& c : st.constraints) cs += (cs.empty() ? "" : " and ") + c.text();
      throw InvalidArgument(where + ": no points: " +
                            (st.constraints.empty()
                                 ? std::string("an axis has no values")
                                 : "the constraint" + std::string(st.constraints.size() > 1 ? "s " : " ") +
                                       cs + " exclude" + (st.constraints.size() > 1 ? "" : "s") +
                                       " all " + std::to_string(total) + " combinations") +
                            " (an empty sweep is an error: check the where lines)");
    }
  }
  std::set<std::string> keys;
  for (const auto& p : points)
    if (!keys.insert(p.key()).second)
      throw InvalidArgument(origin + ": point " + p.key() + " appears twice");
  return points;
}

std::string fingerprint(const std::vector<Point>& points) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& p : points) {
    for (char c : p.key() + "\n") {
      h ^= static_cast<unsigned char>(c);
      h *= 1099511628211ull;
    }
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace kvlab::exp
