// identity.cpp: see identity.h.
#include "experiments/results/identity.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <random>
#include <set>

#include "experiments/bench/kind_list.h"
#include "experiments/results/integrity.h"
#include "experiments/sweep/spec.h"
#include "experiments/sweep/values.h"

namespace kvlab::exp {
namespace {

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex64(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::string first_few(const std::vector<std::string>& v, size_t n = 3) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < n; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > n) s += ", ... (" + std::to_string(v.size() - n) + " more)";
  return s;
}

}  // namespace

std::string SweepIdentity::canonical_text() const {
  return "kvlab.sweep_identity.v1\npoints " + points_fingerprint + " " +
         std::to_string(keys.size()) + "\nseed " + std::to_string(seed) + "\ntiming " + timing +
         "\nkinds " + kinds + "\n";
}

std::string SweepIdentity::digest() const {
  return hex64(fnv1a64(canonical_text()));
}

std::string timing_rules_text(const TimingConfig& t) {
  return "warmup=" + std::to_string(t.warmup) + " min_reps=" + std::to_string(t.min_reps) +
         " max_reps=" + std::to_string(t.max_reps) +
         " target_rel_iqr=" + canonical_number(t.target_rel_iqr) +
         " max_seconds=" + canonical_number(t.max_seconds) +
         " cold_l2=" + std::to_string(t.cold_l2 ? 1 : 0) +
         " graph=" + std::to_string(t.graph ? 1 : 0) +
         " graph_calls=" + std::to_string(t.graph_calls) +
         " hold_stream=" + std::to_string(t.hold_stream ? 1 : 0);
}

SweepIdentity make_identity(const SweepSpec& spec, const std::vector<Point>& all, bool timing,
                            const KindList& kinds) {
  SweepIdentity id;
  id.keys.reserve(all.size());
  for (const auto& p : all) id.keys.push_back(p.key());
  id.points_fingerprint = fingerprint(all);
  id.seed = spec.seed;
  id.timing = timing ? timing_rules_text(spec.timing) : "off";
  std::set<std::string> used;
  for (const auto& p : all) used.insert(p.kind);
  for (const auto& st : spec.studies) used.insert(st.kind);
  for (const auto& k : used)
    id.kinds += (id.kinds.empty() ? "" : ",") + k + "=" + kinds.find(k).version();
  return id;
}

void write_identity(h5::File& f, const SweepIdentity& id) {
  h5::Group g = f.require_group("sweep");
  g.set_attr("doc",
             "the sweep's identity: every point key, the seed, the timing rules and the kind "
             "versions; --resume and merge refuse files of another identity");
  g.set_attr("identity", id.digest());
  g.set_attr("points_fingerprint", id.points_fingerprint);
  g.set_attr("point_count", static_cast<int64_t>(id.keys.size()));
  g.set_attr("seed", static_cast<int64_t>(id.seed));
  g.set_attr("timing", id.timing);
  g.set_attr("kinds", id.kinds);
  if (!g.exists("keys")) {
    h5::Dataset d = g.write("keys", id.keys);
    d.set_attr("doc", "every point key of the whole sweep, in sweep order");
  }
  seal_group(g);
}

std::optional<SweepIdentity> read_identity(const h5::File& f) {
  if (!f.is_group("sweep")) return std::nullopt;
  const h5::Group g = f.open_group("sweep");
  SweepIdentity id;
  id.points_fingerprint = g.attr_string("points_fingerprint");
  id.seed = static_cast<uint64_t>(g.attr_int("seed"));
  id.timing = g.attr_string("timing");
  id.kinds = g.attr_string("kinds");
  id.keys = g.open_dataset("keys").read_strings();
  return id;
}

std::string identity_difference(const SweepIdentity& a, const SweepIdentity& b,
                                const std::string& la, const std::string& lb) {
  std::string d;
  auto line = [&](const std::string& what, const std::string& x, const std::string& y) {
    d += "  " + what + ": " + la + " has " + x + ", " + lb + " has " + y + "\n";
  };
  if (a.seed != b.seed) line("seed", std::to_string(a.seed), std::to_string(b.seed));
  if (a.timing != b.timing) line("timing rules", "'" + a.timing + "'", "'" + b.timing + "'");
  if (a.kinds != b.kinds) line("kind versions", "'" + a.kinds + "'", "'" + b.kinds + "'");
  if (a.points_fingerprint != b.points_fingerprint || a.keys != b.keys) {
    const std::set<std::string> sa(a.keys.begin(), a.keys.end()), sb(b.keys.begin(), b.keys.end());
    std::vector<std::string> only_a, only_b;
    for (const auto& k : a.keys)
      if (!sb.count(k)) only_a.push_back(k);
    for (const auto& k : b.keys)
      if (!sa.count(k)) only_b.push_back(k);
    std::string what = "points: " + la + " has " + std::to_string(a.keys.size()) + ", " + lb +
                       " has " + std::to_string(b.keys.size());
    if (only_a.empty() && only_b.empty()) what += " (the same points in another order)";
    d += "  " + what + "\n";
    if (!only_a.empty())
      d += "    " + std::to_string(only_a.size()) + " only in " + la + ": " + first_few(only_a) +
           "\n";
    if (!only_b.empty())
      d += "    " + std::to_string(only_b.size()) + " only in " + lb + ": " + first_few(only_b) +
           "\n";
  }
  return d;
}

std::string new_run_id() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y%m%dT%H%M%SZ", &tm);
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                     static_cast<uint64_t>(getpid()) ^
                     static_cast<uint64_t>(
                         std::chrono::steady_clock::now().time_since_epoch().count());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%08x", ts, static_cast<unsigned>(r ^ (r >> 32)));
  return buf;
}

}  // namespace kvlab::exp
