// cli.cpp: subcommand dispatch and options of `kvlab` (see cli.h).
#include "experiments/cli/cli.h"

#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <map>
#include <string>
#include <vector>

#include "experiments/cli/registry.h"
#include "experiments/results/build_info.h"
#include "experiments/calibrate/calibrate.h"
#include "experiments/cli/summary.h"
#include "experiments/h5/durable.h"
#include "experiments/h5/file_io.h"
#include "experiments/h5/h5.h"
#include "experiments/model/model_cli.h"
#include "experiments/results/merge.h"
#include "experiments/results/provenance.h"
#include "experiments/results/result_file.h"
#include "experiments/run/progress.h"
#include "experiments/run/runner.h"
#include "experiments/sweep/spec.h"
#include "experiments/sweep/values.h"
#include "reference/core/error.h"

namespace po = boost::program_options;

namespace kvlab::exp {
namespace {

// KVLAB_COMMIT=auto|journal|replace: how commits reach the disk (durable.h). "replace" rewrites
// the whole file at every commit, as kvlab did before the overlay: for measurements only.
h5::DurableFile::Commit commit_protocol_from_env() {
  const char* v = std::getenv("KVLAB_COMMIT");
  if (!v || !*v || std::string(v) == "auto") return h5::DurableFile::Commit::kAuto;
  if (std::string(v) == "journal") return h5::DurableFile::Commit::kJournal;
  if (std::string(v) == "replace") return h5::DurableFile::Commit::kReplace;
  throw InvalidArgument("KVLAB_COMMIT: unknown value '" + std::string(v) +
                        "' (allowed: auto, journal, replace)");
}

const char* kSubcommands[][2] = {
    {"info", "build, git, devices, benches and their axes, reference self-check"},
    {"validate", "run a sweep's points without timing (validation only)"},
    {"sweep", "run a sweep config into an HDF5 result file"},
    {"simulate", "run one serving-simulation config into an HDF5 result file"},
    {"calibrate", "fit the decode-attention cost model to measured timings: fidelity table"},
    {"merge", "merge shard result files into one"},
    {"check", "verify result files: schema, sweep identity, every checksum"},
    {"recover", "undo an interrupted commit of a result file, then check it"},
    {"model", "real models: import a GGUF, info, generate, dump K/V (kvlab model --help)"},
    {"summary", "the results of a file as a short table (Markdown, JSON)"},
};

void usage(std::ostream& os) {
  os << "usage: kvlab <subcommand> [options]   (kvlab <subcommand> --help for its "
        "options)\n\nsubcommands:\n";
  for (const auto& s : kSubcommands) {
    char line[160];
    std::snprintf(line, sizeof line, "  %-10s %s\n", s[0], s[1]);
    os << line;
  }
  os << "\nexit codes: 0 ok; 1 some points failed (check: a file is damaged; validate: nothing "
        "was validated);\n  2 bad input (nothing already written was touched); 3 I/O failure "
        "(disk full, quota, EIO:\n  the file holds its last complete commit); 128+N stopped by "
        "signal N after the point in flight\n";
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "kvlab";
  buf[n] = 0;
  return buf;
}

po::variables_map parse(const std::vector<std::string>& args, const po::options_description& desc,
                        const po::positional_options_description& pos) {
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
  po::notify(vm);
  return vm;
}

bool help_requested(const po::variables_map& vm, const std::string& cmd,
                    const std::string& synopsis, const po::options_description& desc,
                    std::ostream& out) {
  if (!vm.count("help")) return false;
  out << "usage: kvlab " << cmd << " " << synopsis << "\n\n" << desc << "\n";
  return true;
}

// A config argument: as given, else relative to the source tree (for `kvlab validate`).
std::string resolve_config(const std::string& path) {
  if (access(path.c_str(), F_OK) == 0) return path;
#ifdef KVLAB_SOURCE_DIR
  const std::string alt = std::string(KVLAB_SOURCE_DIR) + "/" + path;
  if (access(alt.c_str(), F_OK) == 0) return alt;
#endif
  return path;
}

void add_sweep_selection(po::options_description& d) {
  d.add_options()("axis,a", po::value<std::vector<std::string>>()->composing(),
                  "override an axis: [STUDY.]NAME=VALUES (lists 1,16,64; ranges pow2:9:17, "
                  "range:1:8:2, geom:4:128:2); repeatable")(
      "only", po::value<std::string>(), "run only these studies (comma-separated section names)")(
      "seed", po::value<std::string>(), "override the config's seed (a non-negative 64-bit integer)");
}

SweepSpec load_with_selection(const std::string& config, const po::variables_map& vm,
                              std::vector<std::string>* passthrough) {
  SweepSpec spec = load_sweep(config);
  if (vm.count("only")) {
    select_studies(&spec, vm["only"].as<std::string>());
    passthrough->push_back("--only");
    passthrough->push_back(vm["only"].as<std::string>());
  }
  if (vm.count("axis"))
    for (const auto& a : vm["axis"].as<std::vector<std::string>>()) {
      split_assignment(a, "--axis");  // malformed: error before anything runs
      spec.overrides.push_back(a);
      passthrough->push_back("--axis");
      passthrough->push_back(a);
    }
  if (vm.count("seed")) {
    const std::string text = vm["seed"].as<std::string>();
    long long s = 0;
    if (!parse_int(text, &s) || s < 0)
      throw InvalidArgument("--seed: expected a non-negative 64-bit integer, got '" + text + "'");
    spec.seed = static_cast<uint64_t>(s);
    passthrough->push_back("--seed");
    passthrough->push_back(std::to_string(s));
  }
  return spec;
}

int cmd_info(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description d("kvlab info options");
  d.add_options()("help,h", "show this help")("kinds", "also list every bench's axes and metrics")(
      "no-self-check", "skip the reference self-check");
  po::positional_options_description pos;
  const auto vm = parse(args, d, pos);
  if (help_requested(vm, "info", "[--kinds] [--no-self-check]", d, out)) return 0;
  const BuildInfo b = build_info();
  out << "kvlab " << b.version << " (" << b.build_type << ", " << b.compiler
      << (b.cuda ? ", CUDA " + b.cuda_version + " sm_" + b.cuda_archs : ", built without CUDA")
      << ")\n";
  out << "git " << git_commit() << (git_dirty() ? " (dirty)" : "") << "; host " << hostname()
      << "\n";
  out << "HDF5 result schema " << kSchemaName << " v" << kSchemaVersion << "\n";
  const DeviceSummary dev = device_summary();
  if (dev.present) {
    char line[256];
    std::snprintf(
        line, sizeof line,
        "device: %s (%d visible), %d SMs, %.0f MHz SM, L2 %d MiB, %.1f GiB, peak %.0f GB/s\n",
        dev.name.c_str(), dev.count, dev.sm_count, dev.sm_clock_khz / 1e3, dev.l2_bytes >> 20,
        dev.global_mem_bytes / double(1ull << 30), dev.peak_bytes_per_s / 1e9);
    out << line;
  } else {
    out << "device: " << dev.error << ": GPU points are recorded as skipped\n";
  }
  out << "benches:\n";
  for (const auto& bench : benches()) {
    out << "  " << bench->name() << (bench->needs_gpu() ? " [gpu]" : " [cpu]") << ": "
        << bench->summary() << "\n";
    if (!vm.count("kinds")) continue;
    for (const auto& a : bench->axes()) {
      out << "      axis " << a.name << " (default " << a.default_value;
      if (a.type == AxisType::kEnum) {
        out << "; one of";
        for (const auto& c : a.choices) out << " " << c;
      }
      out << "): " << a.doc << "\n";
    }
    for (const auto& m : bench->metrics())
      out << "      metric " << m.name << (m.unit.empty() ? "" : " [" + m.unit + "]") << ": "
          << m.doc << "\n";
  }
  if (vm.count("no-self-check")) return 0;
  out << "reference self-check:\n";
  const bool ok = self_check(out);
  out << "self-check: " << (ok ? "PASS" : "FAIL") << "\n";
  return ok ? 0 : 1;
}

int cmd_sweep(const std::vector<std::string>& args, const std::vector<std::string>& full_argv,
              std::ostream& out, bool validate_only) {
  const std::string cmd = validate_only ? "validate" : "sweep";
  po::options_description d("kvlab " + cmd + " options");
  d.add_options()("help,h", "show this help")("config", po::value<std::string>(),
                                              "sweep config (INI)")(
      "out,o", po::value<std::string>(),
      validate_only ? "also keep the records in this HDF5 file"
                    : "result file (default: the config's `out`)");
  add_sweep_selection(d);
  d.add_options()("markdown", po::value<std::string>(),
                  "also write the results summary (Markdown) here")(
      "json", po::value<std::string>(), "also write the results summary (JSON) here");
  d.add_options()("dry-run,n", "list the points and a time estimate; run nothing")(
      "progress", po::value<std::string>()->default_value("auto"), "auto | bar | plain | none")(
      "log-prefix", po::value<std::string>()->default_value(""),
      "prefix of every output line (workers)");
  if (!validate_only) {
    d.add_options()("resume", "continue an existing result file, skipping its finished points")(
        "allow-mixed",
        "resume a file of another sweep identity (points, seed, timing rules, kind versions)")(
        "shard", po::value<std::string>(), "run only shard K/N (points whose index % N == K)")(
        "workers,j", po::value<int>(),
        "run N worker processes, points handed out as they finish, merged into --out")(
        "gpus", po::value<std::string>(), "one worker per GPU: a list like 0,1,3 or 'all'")(
        "threads", po::value<int>(),
        "CPU threads of a point's reference computations (default: cores / workers)")(
        "no-fsync", "skip fsync in commits (still safe against process death, not power loss)");
  }
  po::options_description hidden;
  hidden.add_options()("serve-points", po::value<std::string>(),
                       "worker mode (workers.h): run the points named on stdin");
  po::positional_options_description pos;
  pos.add("config", 1);
  po::options_description all_opts;
  all_opts.add(d).add(hidden);
  const auto vm = parse(args, all_opts, pos);
  if (help_requested(vm, cmd,
                     validate_only
                         ? "[CONFIG] [options]   (default CONFIG: experiments/configs/validate.ini)"
                         : "CONFIG [options]",
                     d, out))
    return 0;
  std::string config;
  if (vm.count("config"))
    config = vm["config"].as<std::string>();
  else if (validate_only)
    config = "experiments/configs/validate.ini";
  else
    throw InvalidArgument(
        "kvlab sweep: missing CONFIG (an INI file, e.g. experiments/configs/default.ini)");
  config = resolve_config(config);

  SweepOptions opt;
  opt.argv = full_argv;
  opt.self_exe = self_exe();
  opt.progress = vm["progress"].as<std::string>();
  Progress::parse_mode(opt.progress);  // bad input before anything is read or written
  opt.commit = commit_protocol_from_env();
  SweepSpec spec = load_with_selection(config, vm, &opt.passthrough);
  opt.log_prefix = vm["log-prefix"].as<std::string>();
  opt.dry_run = vm.count("dry-run") > 0;
  opt.timing = !validate_only;
  if (vm.count("out")) opt.out = vm["out"].as<std::string>();
  std::string temp_out;
  if (validate_only) {
    if (opt.out.empty()) {
      temp_out = "/tmp/kvlab-validate-" + std::to_string(getpid()) + ".h5";
      unlink(temp_out.c_str());
      opt.out = temp_out;
    }
    opt.fsync = false;
  } else {
    opt.resume = vm.count("resume") > 0;
    opt.allow_mixed = vm.count("allow-mixed") > 0;
    opt.fsync = vm.count("no-fsync") == 0;
    if (vm.count("threads")) {
      const int t = vm["threads"].as<int>();
      if (t < 1 || t > 1024)
        throw InvalidArgument("--threads: expected 1..1024, got " + std::to_string(t));
      opt.cpu_threads = t;
    }
    if (vm.count("serve-points")) opt.serve_identity = vm["serve-points"].as<std::string>();
    if (vm.count("shard")) parse_shard(vm["shard"].as<std::string>(), &opt.shard_k, &opt.shard_n);
    if (vm.count("workers") && vm.count("gpus"))
      throw InvalidArgument("give --workers or --gpus, not both");
    if (vm.count("workers")) {
      const int n = vm["workers"].as<int>();
      if (n < 1 || n > 256)
        throw InvalidArgument("--workers: expected 1..256, got " + std::to_string(n));
      opt.workers = n;
    }
    if (vm.count("gpus")) {
      const std::string g = vm["gpus"].as<std::string>();
      const DeviceSummary dev = device_summary();
      if (g == "all") {
        if (dev.count == 0)
          throw InvalidArgument("--gpus all: no GPU is visible (" + dev.error + ")");
        for (int i = 0; i < dev.count; ++i) opt.gpus.push_back(std::to_string(i));
      } else {
        for (const auto& item : split(g, ',')) {
          long long id = 0;
          if (!parse_int(item, &id) || id < 0)
            throw InvalidArgument("--gpus: '" + item + "' is not a device index");
          if (id >= dev.count)
            throw InvalidArgument("--gpus: device " + std::to_string(id) + " does not exist (" +
                                  std::to_string(dev.count) + " visible" +
                                  (dev.present ? "" : ": " + dev.error) + ")");
          opt.gpus.push_back(std::to_string(id));
        }
      }
      opt.workers = static_cast<int>(opt.gpus.size());
    }
    if (opt.workers > 1 && vm.count("shard"))
      throw InvalidArgument("--shard and --workers/--gpus do not combine");
  }
  const std::string md = vm.count("markdown") ? vm["markdown"].as<std::string>() : "";
  const std::string js = vm.count("json") ? vm["json"].as<std::string>() : "";
  check_summary_outputs(md, js);
  const bool worker = !opt.serve_identity.empty() || !opt.log_prefix.empty();
  // A worker's stdout is its pipe to the parent: its log goes to stderr.
  const int rc = run_sweep(spec, registered_kinds(), opt, worker ? std::cerr : out);
  // Workers leave the summary to the parent, which reads the merged file; a run that was
  // refused or failed to write has no file to summarize.
  if (!opt.dry_run && !worker && rc != kExitBadInput && rc != kExitIoError)
    summary_after_sweep(opt.out.empty() ? spec.out : opt.out, md, js, out);
  if (!temp_out.empty()) unlink(temp_out.c_str());
  return rc;
}

// A simulation config: "key = value" lines (Boost.Program_options config syntax, no
// sections) naming the axes of the simulate bench, plus optional name / description / out /
// seed. It becomes a one-study sweep (so the result file, provenance, crash safety and
// --resume are the sweep's) that must hold exactly one point.
SweepSpec simulation_spec(const std::string& text, const std::string& origin) {
  std::istringstream in(text);
  po::options_description none;
  po::parsed_options parsed(&none);
  try {
    parsed = po::parse_config_file(in, none, /*allow_unregistered=*/true);
  } catch (const po::error& e) {
    throw InvalidArgument(origin + ": malformed config: " + std::string(e.what()));
  }
  std::string top, study;
  for (const auto& o : parsed.options) {
    const std::string& key = o.string_key;
    const std::string value = o.value.empty() ? "" : trim(o.value.front());
    if (key.find('.') != std::string::npos)
      throw InvalidArgument(
          origin + ": a simulation config has no [sections] (found '" + key +
          "'); sweeps of several simulations go through `kvlab sweep` with kind = simulate");
    if (key == "kind")
      throw InvalidArgument(origin + ": 'kind' is implied (simulate) and may not be given");
    if (key == "name" || key == "description" || key == "out" || key == "seed")
      top += key + " = " + value + "\n";
    else
      study += key + " = " + value + "\n";
  }
  SweepSpec spec = parse_sweep(top + "[simulate]\nkind = simulate\n" + study, origin);
  spec.text = text;
  return spec;
}

int cmd_simulate(const std::vector<std::string>& args, const std::vector<std::string>& full_argv,
                 std::ostream& out) {
  po::options_description d("kvlab simulate options");
  d.add_options()("help,h", "show this help")(
      "config", po::value<std::string>(),
      "simulation config: key = value lines of simulate axes (see kvlab info --kinds)")(
      "set,s", po::value<std::vector<std::string>>()->composing(),
      "set an axis: NAME=VALUE (repeatable; overrides the config)")(
      "out,o", po::value<std::string>(), "result file (default: the config's `out`)")(
      "resume", "continue an existing result file (a finished simulation is not run again)")(
      "progress", po::value<std::string>()->default_value("none"), "auto | bar | plain | none")(
      "no-fsync", "skip fsync in commits");
  po::positional_options_description pos;
  pos.add("config", 1);
  const auto vm = parse(args, d, pos);
  if (help_requested(vm, "simulate", "[CONFIG] [--set axis=value ...] --out OUT.h5", d, out)) {
    out << "example: kvlab simulate experiments/configs/simulate_chat.ini --set block_size=32 "
           "--out results/sim.h5\n";
    return 0;
  }
  SweepSpec spec;
  if (vm.count("config")) {
    const std::string path = resolve_config(vm["config"].as<std::string>());
    std::ifstream in(path);
    if (!in)
      throw InvalidArgument("cannot read simulation config '" + path + "' (missing or unreadable)");
    std::stringstream ss;
    ss << in.rdbuf();
    spec = simulation_spec(ss.str(), path);
    spec.path = path;
  } else {
    spec = simulation_spec("", "kvlab simulate");
  }
  if (spec.name.empty()) spec.name = "simulate";
  SweepOptions opt;
  opt.argv = full_argv;
  opt.self_exe = self_exe();
  if (vm.count("set"))
    for (const auto& a : vm["set"].as<std::vector<std::string>>()) {
      split_assignment(a, "--set");
      spec.overrides.push_back(a);
    }
  std::vector<Point> points;
  try {
    points = expand(spec, registered_kinds());
  } catch (const InvalidArgument& e) {
    std::string m = e.what();  // overrides are reported as --axis by expand(); here they are --set
    if (const auto at = m.find("--axis"); at != std::string::npos) m.replace(at, 6, "--set");
    throw InvalidArgument(m);
  }
  if (points.size() != 1) {
    std::string multi;
    for (size_t a = 0; !points.empty() && a < points.front().axes.size(); ++a)
      for (const auto& q : points)
        if (q.axes[a].second != points.front().axes[a].second) {
          multi += " " + q.axes[a].first;
          break;
        }
    throw InvalidArgument("kvlab simulate runs one simulation, but the config gives " +
                          std::to_string(points.size()) + " points (lists or ranges in:" +
                          (multi.empty() ? std::string(" ?") : multi) +
                          "); use `kvlab sweep` with kind = simulate for sweeps");
  }
  opt.out = vm.count("out") ? vm["out"].as<std::string>() : spec.out;
  if (opt.out.empty())
    throw InvalidArgument("kvlab simulate: missing --out OUT.h5 (or `out` in the config)");
  opt.resume = vm.count("resume") > 0;
  opt.fsync = vm.count("no-fsync") == 0;
  opt.progress = vm["progress"].as<std::string>();
  out << "simulate: " << points.front().describe() << "\n";
  const int rc = run_sweep(spec, registered_kinds(), opt, out);
  // The headline numbers, read back from the file (what a reader of the file sees).
  h5::File f = h5::File::open(opt.out);
  const h5::Table index = h5::Table::open(f, "index");
  const auto keys = index.read_strings("key");
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] != points.front().key()) continue;
    const std::string status = index.read_strings("status")[i];
    if (status != "ok") {
      out << "simulate: " << status << ": " << index.read_strings("reason")[i] << "\n";
      break;
    }
    auto num = [&](const char* c) { return index.read_doubles(c)[i]; };
    char line[512];
    std::snprintf(line, sizeof line,
                  "simulate: %.0f/%.0f requests finished (%.0f rejected) in %.1f s simulated, %.0f "
                  "steps; %.0f output "
                  "tok/s; TTFT mean %.3f s p99 %.3f s; TPOT p50 %.2f ms p99 %.2f ms; %.0f "
                  "preemptions; KV %.0f blocks, "
                  "utilization %.1f %%, slack %.2f %% of used\n",
                  num("num_finished"), num("requests"), num("num_rejected"), num("sim_time_s"),
                  num("num_steps"), num("output_tokens_per_s"), num("mean_ttft_s"),
                  num("p99_ttft_s"), 1e3 * num("p50_tpot_s"), 1e3 * num("p99_tpot_s"),
                  num("num_preemptions"), num("num_blocks"), 100 * num("kv_utilization"),
                  100 * num("slack_fraction"));
    out << line;
  }
  return rc;
}

int cmd_merge(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description d("kvlab merge options");
  d.add_options()("help,h", "show this help")("out,o", po::value<std::string>(),
                                              "merged result file")(
      "inputs", po::value<std::vector<std::string>>(), "shard result files")(
      "force,f", "replace an existing output (refused while a kvlab process writes it)")(
      "allow-mixed", "merge files of different sweeps, or of result schema 1 (unverifiable)")(
      "require-complete", "exit 1 unless the output holds every point of the sweep")(
      "no-fsync", "skip fsync of the output");
  po::positional_options_description pos;
  pos.add("inputs", -1);
  const auto vm = parse(args, d, pos);
  if (help_requested(vm, "merge", "--out OUT IN.h5 [IN.h5 ...]", d, out)) return 0;
  if (!vm.count("out")) throw InvalidArgument("kvlab merge: missing --out OUT");
  if (!vm.count("inputs")) throw InvalidArgument("kvlab merge: no input files");
  MergeOptions mo;
  mo.overwrite = vm.count("force") > 0;
  mo.allow_mixed = vm.count("allow-mixed") > 0;
  mo.fsync = vm.count("no-fsync") == 0;
  const auto inputs = vm["inputs"].as<std::vector<std::string>>();
  const MergeResult m = merge_results(inputs, vm["out"].as<std::string>(), mo);
  for (const auto& n : m.notes) out << "note: " << n << "\n";
  out << "merged " << inputs.size() << " files (" << m.rows << " points) -> "
      << vm["out"].as<std::string>();
  if (m.planned > 0) {
    out << "; " << (m.planned - m.missing) << " of the sweep's " << m.planned << " points";
    if (m.missing > 0) out << " (" << m.missing << " missing, e.g. " << m.first_missing << ")";
  }
  out << "\n";
  if (vm.count("require-complete") && (m.planned == 0 || m.missing > 0)) {
    out << "merge: incomplete: " << (m.planned == 0 ? std::string("the sweep's points are unknown")
                                                    : std::to_string(m.missing) + " points missing")
        << "\n";
    return kExitFailed;
  }
  return 0;
}

// Prints one file's check; returns whether it is intact (and, with require_complete, holds
// every point of its sweep).
bool print_check(const std::string& path, std::ostream& out, bool strict,
                 bool require_complete = false) {
  FileCheck c;
  std::string fatal;
  require_regular_file(path, "kvlab check:");
  if (h5::DurableFile::needs_recovery(path)) {
    fatal = "an interrupted commit or a killed writer's leftover is next to it (" +
            h5::DurableFile::journal_path(path) + " / " + h5::DurableFile::temp_path(path) +
            "): run `kvlab recover " + path + "`";
  } else if (!h5::File::is_hdf5(path)) {
    fatal = "not an HDF5 file (its header is damaged or it is not a result file)";
  } else if (const std::string crash = probe_result_file(path); !crash.empty()) {
    fatal = crash;
  } else {
    try {
      const h5::File f = h5::File::open(path);
      c = check_result_file(f, path);
    } catch (const h5::Error& e) {
      fatal = std::string("cannot be opened (") + e.what() + ")";
    }
  }
  // What a damaged file holds may be any bytes: printed as valid UTF-8 (file_io.h utf8_safe).
  if (!fatal.empty()) {
    out << path << ": DAMAGED: " << utf8_safe(fatal) << "\n";
    return false;
  }
  if (!c.ok()) {
    out << path << ": DAMAGED: " << c.verification.damaged << " problems\n";
    for (const auto& p : c.verification.problems) out << "  " << utf8_safe(p) << "\n";
    if (c.verification.damaged > static_cast<int64_t>(c.verification.problems.size()))
      out << "  ... (" << (c.verification.damaged - static_cast<int64_t>(c.verification.problems.size()))
          << " more)\n";
    return false;
  }
  out << path << ": " << (c.notes.empty() ? "intact" : "readable, NOT VERIFIED") << " (schema "
      << c.schema << ", " << c.rows << " points, " << c.verification.rows << " rows and "
      << c.verification.groups << " groups verified";
  if (c.identity) out << ", sweep identity " << c.identity->digest();
  out << ")\n";
  for (const auto& n : c.notes) out << "  note: " << n << "\n";
  if (c.missing > 0)
    out << "  " << (require_complete ? "INCOMPLETE" : "incomplete") << ": " << (c.planned - c.missing)
        << " of the sweep's " << c.planned << " points (" << c.missing << " missing, e.g. "
        << utf8_safe(c.first_missing) << "); `kvlab sweep CONFIG --out " << path
        << " --resume` runs the rest\n";
  else if (require_complete && c.planned == 0)
    out << "  INCOMPLETE: the sweep's points are unknown (no /sweep keys)\n";
  if (require_complete && !c.complete()) return false;
  return !(strict && !c.notes.empty());
}

int cmd_check(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description d("kvlab check options");
  d.add_options()("help,h", "show this help")("files", po::value<std::vector<std::string>>(),
                                              "result files")(
      "strict", "a file that cannot be verified (schema 1) counts as damaged")(
      "require-complete", "a file that lacks points of its sweep (an interrupted run, a shard) "
                          "counts as failed");
  po::positional_options_description pos;
  pos.add("files", -1);
  const auto vm = parse(args, d, pos);
  if (help_requested(vm, "check",
                     "FILE.h5 [...]   (exit 0 intact, 1 damaged or, with --require-complete, "
                     "incomplete, 2 not a result file)",
                     d, out))
    return 0;
  if (!vm.count("files")) throw InvalidArgument("kvlab check: no files given");
  const auto files = vm["files"].as<std::vector<std::string>>();
  for (const auto& f : files)
    if (access(f.c_str(), F_OK) != 0) throw InvalidArgument("kvlab check: " + f + " does not exist");
  bool all_ok = true;
  for (const auto& f : files)
    all_ok &= print_check(f, out, vm.count("strict") > 0, vm.count("require-complete") > 0);
  return all_ok ? kExitOk : kExitFailed;
}

int cmd_recover(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description d("kvlab recover options");
  d.add_options()("help,h", "show this help")("files", po::value<std::vector<std::string>>(),
                                              "result files");
  po::positional_options_description pos;
  pos.add("files", -1);
  const auto vm = parse(args, d, pos);
  if (help_requested(vm, "recover", "FILE.h5 [...]", d, out)) return 0;
  if (!vm.count("files")) throw InvalidArgument("kvlab recover: no files given");
  bool all_ok = true;
  for (const auto& f : vm["files"].as<std::vector<std::string>>()) {
    if (access(f.c_str(), F_OK) != 0)
      throw InvalidArgument("kvlab recover: " + f + " does not exist");
    require_regular_file(f, "kvlab recover:");
    const h5::Recovery r = h5::DurableFile::recover(f);
    if (r != h5::Recovery::kNone) out << f << ": " << h5::to_string(r) << "\n";
    // "clean" only for a file that verifies: a truncated or corrupted file is damaged even
    // when no commit was interrupted.
    std::ostringstream detail;
    const bool ok = print_check(f, detail, false);
    out << f << ": " << (ok ? "clean" : "damaged") << (r == h5::Recovery::kNone ? " (no interrupted commit)" : "")
        << "\n"
        << detail.str();
    all_ok &= ok;
  }
  return all_ok ? kExitOk : kExitFailed;
}

}  // namespace

int cli_main(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  std::vector<std::string> full(argv, argv + argc);
  if (argc < 2) {
    usage(err);
    return kExitBadInput;
  }
  const std::string cmd = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
      usage(out);
      return 0;
    }
    if (cmd == "info") return cmd_info(args, out);
    if (cmd == "sweep") return cmd_sweep(args, full, out, false);
    if (cmd == "validate") return cmd_sweep(args, full, out, true);
    if (cmd == "simulate") return cmd_simulate(args, full, out);
    if (cmd == "calibrate") return cmd_calibrate(args, full, out);
    if (cmd == "merge") return cmd_merge(args, out);
    if (cmd == "recover") return cmd_recover(args, out);
    if (cmd == "check") return cmd_check(args, out);
    if (cmd == "model") return cmd_model(args, out, err);
    if (cmd == "summary") return cmd_summary(args, out);
    err << "kvlab: unknown subcommand '" << cmd << "'\n";
    usage(err);
    return kExitBadInput;
  } catch (const IoError& e) {
    err << "kvlab " << cmd << ": I/O error: " << e.what() << "\n";
    return kExitIoError;
  } catch (const po::error& e) {
    err << "kvlab " << cmd << ": error: " << e.what() << " (see kvlab " << cmd << " --help)\n";
    return kExitBadInput;
  } catch (const InvalidArgument& e) {
    err << "kvlab " << cmd << ": error: " << utf8_safe(e.what()) << "\n";
    return kExitBadInput;
  } catch (const Unsupported& e) {
    err << "kvlab " << cmd << ": error: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const h5::Error& e) {
    err << "kvlab " << cmd << ": error: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    err << "kvlab " << cmd << ": failed: out of memory\n";
    return kExitFailed;
  } catch (const std::exception& e) {
    err << "kvlab " << cmd << ": failed: " << e.what() << "\n";
    return kExitFailed;
  }
}

}  // namespace kvlab::exp
