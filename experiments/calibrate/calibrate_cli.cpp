// calibrate_cli.cpp: the `kvlab calibrate` subcommand (see calibrate.h): one point of the
// calibrate bench written through ResultFile (so the output has the result file's schema,
// provenance and crash-safe commit), then the fidelity table printed from what the file
// holds.
#include <sys/stat.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "experiments/calibrate/calibrate.h"
#include "experiments/h5/durable.h"
#include "experiments/h5/h5.h"
#include "experiments/results/result_file.h"
#include "experiments/sweep/spec.h"
#include "reference/core/error.h"

namespace po = boost::program_options;

namespace kvlab::exp {
namespace {

// mkdir -p of the output's directory; errors name it.
void make_parent_dirs(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos || slash == 0) return;
  const std::string dir = path.substr(0, slash);
  if (access(dir.c_str(), F_OK) == 0) return;
  make_parent_dirs(dir);
  if (mkdir(dir.c_str(), 0755) != 0 && access(dir.c_str(), F_OK) != 0)
    throw InvalidArgument("cannot create the output directory " + dir + ": " +
                          std::strerror(errno));
}

std::string pct(double x) {
  if (!std::isfinite(x)) return "      -";
  char b[32];
  std::snprintf(b, sizeof b, "%+6.1f%%", 100 * x);
  return b;
}

void print_table(const std::string& out_path, std::ostream& os, bool rows) {
  h5::File f = h5::File::open(out_path);
  const h5::Table index = h5::Table::open(f, "index");
  const auto kind = index.read_strings("kind");
  for (size_t i = 0; i < kind.size(); ++i) {
    if (kind[i] != "calibrate") continue;
    if (index.read_strings("status")[i] != "ok") {
      os << "calibrate: " << index.read_strings("status")[i] << ": "
         << index.read_strings("reason")[i] << "\n";
      continue;
    }
    auto num = [&](const char* c) { return index.read_doubles(c)[i]; };
    auto str = [&](const char* c) { return index.read_strings(c)[i]; };
    const h5::Group g = f.open_group(index.read_strings("group")[i]);
    const h5::Table t = h5::Table::open(g, "fidelity");
    const auto label = t.read_strings("label");
    const auto bytes = t.read_doubles("bytes");
    const auto meas = t.read_doubles("measured_s"), un = t.read_doubles("predicted_uncalibrated_s"),
               po_ = t.read_doubles("predicted_pooled_s"), ca = t.read_doubles("predicted_s"),
               loo = t.read_doubles("predicted_loo_s");
    const auto held = t.read_ints("heldout");
    char line[512];
    if (rows) {
      std::snprintf(line, sizeof line, "%-50s %10s %9s %9s %9s %9s %9s %7s %7s %7s %7s\n",
                    "record (version layout format shape)", "MB", "roof_us", "pooled_us",
                    "calib_us", "loo_us", "meas_us", "e_roof", "e_pool", "e_calib", "e_loo");
      os << line;
      for (size_t r = 0; r < label.size(); ++r) {
        const double m = meas[r];
        char loo_us[32] = "-";
        if (std::isfinite(loo[r])) std::snprintf(loo_us, sizeof loo_us, "%.2f", loo[r] * 1e6);
        std::snprintf(line, sizeof line,
                      "%-50s %10.3f %9.2f %9.2f %9.2f %9s %9.2f %7s %7s %7s %7s%s\n",
                      label[r].substr(0, 50).c_str(), bytes[r] / 1e6, un[r] * 1e6, po_[r] * 1e6,
                      ca[r] * 1e6, loo_us, m * 1e6, pct((un[r] - m) / m).c_str(),
                      pct((po_[r] - m) / m).c_str(), pct((ca[r] - m) / m).c_str(),
                      pct((loo[r] - m) / m).c_str(), held[r] ? "  [held out]" : "");
        os << line;
      }
    }
    std::snprintf(line, sizeof line, "fidelity: %.0f records (%s) on %s (%s), R = %.4g TB/s (%s)\n",
                  num("records"), str("selection").c_str(), str("gpu_name").c_str(),
                  str("device").c_str(), num("fit_read_ceiling_bytes_per_s") / 1e12,
                  str("ceiling_source").c_str());
    os << line;
    const int64_t fitted = static_cast<int64_t>(num("records") - num("heldout_records"));
    std::snprintf(line, sizeof line, "  %-38s %14s %12s\n",
                  ("fitted records (" + std::to_string(fitted) + ")").c_str(), "median |err|",
                  "max |err|");
    os << line;
    auto row = [&](const char* name, double med, double mx) {
      char max_s[32] = "-";
      if (std::isfinite(mx)) std::snprintf(max_s, sizeof max_s, "%.1f%%", 100 * mx);
      std::snprintf(line, sizeof line, "  %-38s %13.1f%% %11s\n", name, 100 * med, max_s);
      os << line;
    };
    row("uncalibrated roofline (bytes / R)", num("err_uncalibrated_median"),
        num("err_uncalibrated_max"));
    row("pooled (sim's 2-term model), in-sample", num("err_pooled_median"), num("err_pooled_max"));
    row("pooled, leave-one-out", num("err_pooled_loo_median"), NAN);
    row("calibrated, in-sample", num("err_median"), num("err_max"));
    row("calibrated, leave-one-out", num("err_loo_median"), num("err_loo_max"));
    if (num("heldout_records") > 0) {
      std::snprintf(
          line, sizeof line,
          "  held out (%.0f records, not fitted): median |err| uncalibrated %.1f%%, pooled %.1f%%, "
          "calibrated %.1f%% (max %.1f%%)\n",
          num("heldout_records"), 100 * num("test_err_uncalibrated_median"),
          100 * num("test_err_pooled_median"), 100 * num("test_err_median"),
          100 * num("test_err_max"));
      os << line;
    }
    std::snprintf(line, sizeof line, "calibrated terms: fixed %.2f us eager", num("fixed_us"));
    os << line;
    if (num("graph_fixed_fitted") != 0) {
      std::snprintf(line, sizeof line, ", %.2f us CUDA graph (%.0f records)", num("graph_fixed_us"),
                    num("graph_records"));
      os << line;
    }
    os << "; efficiency (achieved / R):";
    const h5::Table fm = h5::Table::open(g, "formats");
    const auto fname = fm.read_strings("kv_format");
    const auto feff = fm.read_doubles("efficiency");
    const auto frec = fm.read_ints("records");
    for (size_t k = 0; k < fname.size(); ++k) {
      std::snprintf(line, sizeof line, " %s %.3f (%lld)", fname[k].c_str(), feff[k],
                    static_cast<long long>(frec[k]));
      os << line;
    }
    std::snprintf(line, sizeof line, ", other formats %.3f\n", num("fallback_efficiency"));
    os << line;
    std::snprintf(line, sizeof line, "pooled terms: fixed %.2f us, efficiency %.3f\n",
                  num("pooled_fixed_us"), num("pooled_efficiency"));
    os << line;
    std::snprintf(line, sizeof line,
                  "fidelity target (median error <= 10 %%): calibrated leave-one-out %.1f %%: %s\n",
                  100 * num("err_loo_median"), num("err_loo_median") <= 0.10 ? "met" : "NOT met");
    os << line;
  }
}

}  // namespace

int cmd_calibrate(const std::vector<std::string>& args, const std::vector<std::string>& full_argv,
                  std::ostream& out) {
  po::options_description d("kvlab calibrate options");
  d.add_options()("help,h", "show this help")(
      "results", po::value<std::vector<std::string>>(),
      "kvlab result files with timed decode_attention points")(
      "gpu", po::value<std::string>()->default_value("auto"),
      "GPU of data/gpus/gpus.csv (auto: the files' device)")(
      "version", po::value<std::string>()->default_value("best"),
      "best: the fastest kvlab version per shape; or one version's name (peers too: "
      "peer:sdpa_cudnn)")(
      "holdout", po::value<std::string>()->default_value("none"),
      "test set left out of the fit: an expression over batch, context, kv_format, layout, "
      "lengths, graph, version, "
      "study, ... (e.g. \"kv_format == 'fp8_e4m3'\"); none = leave-one-out only")(
      "out,o", po::value<std::string>(),
      "write the calibration and the table here (for analysis/ and kvlab simulate)")(
      "no-rows", "print only the summary, not one line per record");
  po::positional_options_description pos;
  pos.add("results", -1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(d).positional(pos).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    out << "usage: kvlab calibrate RESULTS.h5 [more.h5 ...] [--gpu auto|NAME] [--version "
           "best|NAME] [--holdout EXPR] "
           "[--out CAL.h5]\n\n"
        << d
        << "\nexample: kvlab calibrate data/perf/h100_perf_sweep.h5 --out results/h100_cal.h5\n"
        << "         kvlab simulate experiments/configs/simulate_chat.ini --set "
           "calibration=results/h100_cal.h5 --out sim.h5\n";
    return 0;
  }
  if (!vm.count("results"))
    throw InvalidArgument(
        "kvlab calibrate: no result files (e.g. kvlab calibrate data/perf/h100_perf_sweep.h5)");
  std::string results;
  for (const auto& f : vm["results"].as<std::vector<std::string>>()) {
    if (f.find('+') != std::string::npos)
      throw InvalidArgument("result file name '" + f +
                            "' contains '+', which joins files in the results axis");
    results += (results.empty() ? "" : "+") + f;
  }
  // The point is built here, not from a config: version names (peer:...) and holdout
  // expressions (==, >=) use characters a sweep config reserves for its own syntax.
  Point p;
  p.index = 0;
  p.study = "calibrate";
  p.kind = "calibrate";
  p.axes = {{"results", results},
            {"gpu", vm["gpu"].as<std::string>()},
            {"version", vm["version"].as<std::string>()},
            {"holdout", vm["holdout"].as<std::string>()}};
  const std::unique_ptr<Bench> kind = make_calibrate_bench();
  Bench& bench = *kind;
  bench.check_point(p);  // every bad input: exit 2, nothing written

  std::string path, temp;
  h5::DurableFile::Options dopt;
  if (vm.count("out")) {
    path = vm["out"].as<std::string>();
    if (access(path.c_str(), F_OK) == 0)
      throw InvalidArgument("kvlab calibrate: " + path +
                            " exists; remove it or give another --out");
    make_parent_dirs(path);
  } else {
    temp = "/tmp/kvlab-calibrate-" + std::to_string(getpid()) + ".h5";
    unlink(temp.c_str());
    path = temp;
    dopt.fsync = false;
  }
  int rc = 0;
  try {
    RunMeta meta;
    meta.argv = full_argv;
    meta.sweep_name = "calibrate";
    meta.config_text = "kvlab calibrate: " + p.describe();
    meta.fingerprint = fingerprint({p});
    meta.points_planned = 1;
    auto rf = ResultFile::create(path, meta, dopt);
    rf->declare({&bench});
    rf->begin_run(meta, false);
    RunContext ctx;
    const auto t0 = std::chrono::steady_clock::now();
    Record r;
    try {
      r = bench.run(p, ctx);
    } catch (const std::exception& e) {
      r = Record::failed(e.what());
    }
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rf->write_point(p, bench, r);
    rf->end_run(1, r.status == Status::kFailed ? 1 : 0);
    rc = r.status == Status::kFailed ? 1 : 0;
    rf.reset();
    print_table(path, out, vm.count("no-rows") == 0);
  } catch (...) {
    if (!temp.empty()) unlink(temp.c_str());
    throw;
  }
  if (!temp.empty()) {
    unlink(temp.c_str());
    out << "(not kept: give --out CAL.h5 to keep the calibration for analysis/ and kvlab "
           "simulate)\n";
  } else {
    out << "calibration and table: " << path << "\n";
  }
  return rc;
}

}  // namespace kvlab::exp
