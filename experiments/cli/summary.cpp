// summary.cpp: see summary.h.
#include "experiments/cli/summary.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <ostream>
#include <set>
#include <sstream>

#include <unistd.h>

#include "experiments/h5/h5.h"
#include "experiments/results/result_file.h"
#include "reference/core/error.h"

namespace kvlab::exp {

namespace {

// Headline metrics, most telling first: the share of the measured ceiling says more than a
// raw bandwidth, which says more than a time; then the error and capacity metrics of the
// CPU kinds. A kind's headline is the first of these it reports on its ok points.
const char* const kHeadlines[] = {
    "pct_read_ceiling", "pct_copy_ceiling", "bytes_per_s",     "median_us",
    "step_us",          "time_us",          "rel_l2_mean",     "rel_l2",
    "attn_rel_l2",      "rel_l2_p99",       "max_seqs",        "slack_fraction",
    "output_tokens_per_s", "err_loo_median", "predicted_s",    "max_abs_err",
};

// Index columns that are not metrics.
const std::set<std::string> kIdentity = {"point", "key", "study", "kind", "status", "reason",
                                         "seconds", "group"};

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string fmt_num(double v) {
  char b[64];
  if (v != 0 && (std::fabs(v) >= 1e6 || std::fabs(v) < 1e-3))
    std::snprintf(b, sizeof b, "%.3g", v);
  else
    std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

// Bytes per second read as TB/s or GB/s, the way people quote bandwidth.
std::string with_unit(double v, const std::string& unit) {
  if (unit == "B/s") {
    if (std::fabs(v) >= 1e12) return fmt_num(v / 1e12) + " TB/s";
    return fmt_num(v / 1e9) + " GB/s";
  }
  if (unit.empty()) return fmt_num(v);
  if (unit == "%") return fmt_num(v) + " %";
  return fmt_num(v) + " " + unit;
}

std::string duration(double s) {
  char b[32];
  if (s < 60)
    std::snprintf(b, sizeof b, "%.1f s", s);
  else if (s < 3600)
    std::snprintf(b, sizeof b, "%.1f min", s / 60);
  else
    std::snprintf(b, sizeof b, "%.2f h", s / 3600);
  return b;
}

// Markdown table cells: no pipes or newlines inside.
std::string cell(std::string s) {
  for (char& c : s)
    if (c == '|' || c == '\n' || c == '\r') c = (c == '|') ? '/' : ' ';
  return s;
}

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o + "\"";
}

std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

void write_file(const std::string& path, const std::string& text, const char* what) {
  std::ofstream f(path);
  f << text;
  f.close();
  KVLAB_REQUIRE(f.good(), "cannot write the " << what << " summary to " << path);
}

}  // namespace

SweepSummary summarize(const std::string& path) {
  SweepSummary s;
  s.path = path;
  h5::File f = h5::File::open(path);
  ResultFile::check_schema(f, path);
  if (f.has_attr("sweep_name")) s.sweep_name = f.attr_string("sweep_name");
  const bool present = f.has_attr("device_present") && f.attr_double("device_present") != 0;
  if (present && f.has_attr("device_name")) s.device = f.attr_string("device_name");
  const h5::Table index = h5::Table::open(f, "index");
  const auto kinds = index.read_strings("kind");
  const auto status = index.read_strings("status");
  const auto reasons = index.read_strings("reason");
  const auto keys = index.read_strings("key");
  const auto seconds = index.read_doubles("seconds");
  s.points = static_cast<int64_t>(kinds.size());

  std::map<std::string, size_t> slot;
  std::map<std::string, size_t> reason_slot;
  for (size_t i = 0; i < kinds.size(); ++i) {
    auto it = slot.find(kinds[i]);
    if (it == slot.end()) {
      it = slot.emplace(kinds[i], s.kinds.size()).first;
      s.kinds.push_back(KindSummary{});
      s.kinds.back().kind = kinds[i];
    }
    KindSummary& k = s.kinds[it->second];
    ++k.points;
    k.seconds += std::isfinite(seconds[i]) ? seconds[i] : 0;
    if (status[i] == "ok") {
      ++k.ok;
    } else if (status[i] == "skipped") {
      ++k.skipped;
      auto r = reason_slot.find(reasons[i]);
      if (r == reason_slot.end()) {
        r = reason_slot.emplace(reasons[i], s.skipped.size()).first;
        s.skipped.push_back(ReasonCount{reasons[i], 0, {}});
      }
      ReasonCount& rc = s.skipped[r->second];
      ++rc.points;
      if (std::find(rc.kinds.begin(), rc.kinds.end(), kinds[i]) == rc.kinds.end())
        rc.kinds.push_back(kinds[i]);
    } else {
      ++k.failed;
      s.failures.push_back(Failure{keys[i], reasons[i]});
    }
  }
  std::stable_sort(s.skipped.begin(), s.skipped.end(),
                   [](const ReasonCount& a, const ReasonCount& b) { return a.points > b.points; });

  // Headlines: numeric columns only, read once each.
  std::map<std::string, std::vector<double>> cols;
  for (const char* name : kHeadlines) {
    if (!index.has_column(name) || kIdentity.count(name)) continue;
    if (index.column(name).type == h5::Type::kString) continue;
    cols[name] = index.read_doubles(name);
  }
  for (KindSummary& k : s.kinds) {
    for (const char* name : kHeadlines) {
      auto c = cols.find(name);
      if (c == cols.end()) continue;
      std::vector<double> v;
      for (size_t i = 0; i < kinds.size(); ++i)
        if (kinds[i] == k.kind && status[i] == "ok" && std::isfinite(c->second[i]))
          v.push_back(c->second[i]);
      if (v.empty()) continue;
      k.metric = name;
      k.unit = index.column(name).unit;
      k.n = static_cast<int64_t>(v.size());
      k.min = *std::min_element(v.begin(), v.end());
      k.max = *std::max_element(v.begin(), v.end());
      k.median = median_of(v);
      break;
    }
  }
  return s;
}

std::string to_markdown(const SweepSummary& s) {
  std::ostringstream o;
  int64_t ok = 0, sk = 0, fa = 0;
  for (const auto& k : s.kinds) ok += k.ok, sk += k.skipped, fa += k.failed;
  o << "### kvlab results: " << (s.sweep_name.empty() ? s.path : s.sweep_name) << " (" << s.path
    << ", " << s.points << " points, " << (s.device.empty() ? "no device" : s.device) << ")\n\n";
  o << "| kind | points | ok | skipped | failed | time | headline (median over ok points [min, max]) |\n";
  o << "|---|---:|---:|---:|---:|---:|---|\n";
  for (const auto& k : s.kinds) {
    std::string head = "-";
    if (!k.metric.empty()) {
      head = k.metric + " " + with_unit(k.median, k.unit);
      if (k.n > 1) head += " [" + with_unit(k.min, k.unit) + ", " + with_unit(k.max, k.unit) + "]";
    }
    o << "| " << cell(k.kind) << " | " << k.points << " | " << k.ok << " | " << k.skipped << " | "
      << k.failed << " | " << duration(k.seconds) << " | " << cell(head) << " |\n";
  }
  o << "| **all** | " << s.points << " | " << ok << " | " << sk << " | " << fa << " | | |\n";
  if (!s.skipped.empty()) {
    o << "\n| skip reason | points | kinds |\n|---|---:|---|\n";
    for (const auto& r : s.skipped) {
      std::string kinds;
      for (const auto& k : r.kinds) kinds += (kinds.empty() ? "" : ", ") + k;
      o << "| " << cell(r.reason.empty() ? "(none given)" : r.reason) << " | " << r.points << " | "
        << cell(kinds) << " |\n";
    }
  }
  if (!s.failures.empty()) {
    o << "\n" << s.failures.size() << " failed point" << (s.failures.size() > 1 ? "s" : "") << ":\n";
    for (size_t i = 0; i < s.failures.size() && i < static_cast<size_t>(kMaxFailuresShown); ++i)
      o << "- `" << s.failures[i].key << "`: " << cell(s.failures[i].reason) << "\n";
    if (s.failures.size() > static_cast<size_t>(kMaxFailuresShown))
      o << "- and " << (s.failures.size() - kMaxFailuresShown) << " more (kvlab.load(...)"
        << ".index, status failed)\n";
  }
  return o.str();
}

std::string to_json(const SweepSummary& s) {
  std::ostringstream o;
  o << "{\n  \"file\": " << json_str(s.path) << ",\n  \"sweep_name\": " << json_str(s.sweep_name)
    << ",\n  \"device\": " << json_str(s.device) << ",\n  \"points\": " << s.points
    << ",\n  \"kinds\": [";
  for (size_t i = 0; i < s.kinds.size(); ++i) {
    const auto& k = s.kinds[i];
    o << (i ? "," : "") << "\n    {\"kind\": " << json_str(k.kind) << ", \"points\": " << k.points
      << ", \"ok\": " << k.ok << ", \"skipped\": " << k.skipped << ", \"failed\": " << k.failed
      << ", \"seconds\": " << json_num(k.seconds) << ", \"headline\": ";
    if (k.metric.empty())
      o << "null}";
    else
      o << "{\"metric\": " << json_str(k.metric) << ", \"unit\": " << json_str(k.unit)
        << ", \"n\": " << k.n << ", \"median\": " << json_num(k.median)
        << ", \"min\": " << json_num(k.min) << ", \"max\": " << json_num(k.max) << "}}";
  }
  o << "\n  ],\n  \"skip_reasons\": [";
  for (size_t i = 0; i < s.skipped.size(); ++i) {
    const auto& r = s.skipped[i];
    o << (i ? "," : "") << "\n    {\"reason\": " << json_str(r.reason) << ", \"points\": " << r.points
      << ", \"kinds\": [";
    for (size_t j = 0; j < r.kinds.size(); ++j) o << (j ? ", " : "") << json_str(r.kinds[j]);
    o << "]}";
  }
  o << "\n  ],\n  \"failures\": [";
  for (size_t i = 0; i < s.failures.size(); ++i)
    o << (i ? "," : "") << "\n    {\"key\": " << json_str(s.failures[i].key)
      << ", \"reason\": " << json_str(s.failures[i].reason) << "}";
  o << "\n  ]\n}\n";
  return o.str();
}

void report_summary(const std::string& result_path, const std::string& markdown_path,
                    const std::string& json_path, std::ostream& out) {
  const SweepSummary s = summarize(result_path);
  const std::string md = to_markdown(s);
  out << "\n" << md;
  if (!markdown_path.empty()) write_file(markdown_path, md, "Markdown");
  if (!json_path.empty()) write_file(json_path, to_json(s), "JSON");
}

void check_summary_outputs(const std::string& markdown_path, const std::string& json_path) {
  for (const std::string* p : {&markdown_path, &json_path}) {
    if (p->empty()) continue;
    const size_t slash = p->rfind('/');
    const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : p->substr(0, slash));
    KVLAB_REQUIRE(access(dir.c_str(), W_OK) == 0,
                  "cannot write the summary to " << *p << ": directory " << dir
                                                 << " is missing or not writable");
  }
}

void summary_after_sweep(const std::string& result_path, const std::string& markdown_path,
                         const std::string& json_path, std::ostream& out) {
  try {
    report_summary(result_path, markdown_path, json_path, out);
  } catch (const std::exception& e) {
    out << "summary: not written: " << e.what() << "\n";
  }
}

int cmd_summary(const std::vector<std::string>& args, std::ostream& out) {
  namespace po = boost::program_options;
  po::options_description d("kvlab summary options");
  d.add_options()("help,h", "show this help")("file", po::value<std::string>(), "result file")(
      "markdown", po::value<std::string>(), "also write the Markdown summary to this file")(
      "json", po::value<std::string>(), "also write the summary as JSON to this file");
  po::positional_options_description pos;
  pos.add("file", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(d).positional(pos).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    out << "usage: kvlab summary FILE.h5 [--markdown FILE] [--json FILE]\n\n" << d << "\n";
    return 0;
  }
  if (!vm.count("file")) throw InvalidArgument("kvlab summary: missing FILE.h5 (a result file)");
  const std::string path = vm["file"].as<std::string>();
  report_summary(path, vm.count("markdown") ? vm["markdown"].as<std::string>() : "",
                 vm.count("json") ? vm["json"].as<std::string>() : "", out);
  return 0;
}

}  // namespace kvlab::exp
