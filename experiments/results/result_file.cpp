// result_file.cpp: the kvlab result file (see result_file.h for the schema).
#include "experiments/results/result_file.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "experiments/h5/file_io.h"
#include "experiments/results/provenance.h"
#include "experiments/sweep/values.h"

namespace kvlab::exp {
namespace {

std::string row_name(int64_t row) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%06lld", static_cast<long long>(row));
  return buf;
}

const std::vector<h5::Table::Column> kIndexBase = {
    {"point", h5::Type::kInt64, "", "index of the point in its sweep's enumeration"},
    {"key", h5::Type::kString, "", "study/kind:axis=value,...: identifies the point across runs"},
    {"study", h5::Type::kString, "", "config section"},
    {"kind", h5::Type::kString, "", "bench (point kind)"},
    {"status", h5::Type::kString, "", "ok | skipped | failed"},
    {"reason", h5::Type::kString, "", "why skipped or failed"},
    {"seconds", h5::Type::kFloat64, "s", "wall time of the point"},
    {"group", h5::Type::kString, "", "HDF5 group with the point's attributes and traces"},
    {"run_id", h5::Type::kString, "", "the invocation that ran the point (a row of /runs)"},
    {"sweep_seed", h5::Type::kInt64, "", "the sweep seed in effect (config seed or --seed)"},
    {"row_crc", h5::Type::kInt64, "", "CRC-32 of the row's cells (result_file.h)"},
};

const std::vector<h5::Table::Column> kRunsColumns = {
    {"started_utc", h5::Type::kString, "", ""},
    {"finished_utc", h5::Type::kString, "", "empty when the run was killed"},
    {"argv", h5::Type::kString, "", ""},
    {"resumed", h5::Type::kInt64, "", "1 when the run resumed an existing file"},
    {"points_run", h5::Type::kInt64, "", ""},
    {"points_failed", h5::Type::kInt64, "", ""},
    {"host", h5::Type::kString, "", ""},
    {"pid", h5::Type::kInt64, "", ""},
    {"git_commit", h5::Type::kString, "", ""},
    {"git_dirty", h5::Type::kInt64, "", ""},
    {"device_name", h5::Type::kString, "", ""},
    {"read_ceiling_bytes_per_s", h5::Type::kFloat64, "B/s",
     "measured sequential read ceiling (NaN: not measured)"},
    {"copy_ceiling_bytes_per_s", h5::Type::kFloat64, "B/s",
     "measured device copy ceiling, read + write (NaN: not measured)"},
    {"run_id", h5::Type::kString, "", "id of the invocation, also in each row it wrote"},
    {"identity", h5::Type::kString, "", "digest of the invocation's sweep identity (/sweep)"},
    {"sweep_seed", h5::Type::kInt64, "", "the sweep seed in effect"},
    {"commits", h5::Type::kInt64, "", "durable commits made by the invocation"},
    {"bytes_written", h5::Type::kFloat64, "B",
     "bytes the invocation's commits wrote (data and rollback journals)"},
    {"row_crc", h5::Type::kInt64, "", "CRC-32 of the row's cells (result_file.h)"},
};

h5::Type axis_column_type(const AxisSpec& a) {
  return a.numeric() ? h5::Type::kFloat64 : h5::Type::kString;
}

const AxisSpec* find_axis(const std::vector<AxisSpec>& axes, const std::string& name) {
  for (const auto& a : axes)
    if (a.name == name) return &a;
  return nullptr;
}

}  // namespace

int64_t ResultFile::schema_version(const h5::File& f) {
  if (!f.has_attr("schema_version") || f.attr_type("schema_version") == h5::Type::kString)
    return 0;
  return f.attr_int("schema_version");
}

void ResultFile::check_schema(const h5::File& f, const std::string& path) {
  if (!f.has_attr("kvlab_schema") || f.attr_type("kvlab_schema") != h5::Type::kString ||
      f.attr_string("kvlab_schema") != kSchemaName)
    throw ResultFileError(path +
                          " is an HDF5 file but not a kvlab result file (no kvlab_schema = \"" +
                          std::string(kSchemaName) + "\" attribute)");
  if (!f.has_attr("schema_version") || f.attr_type("schema_version") == h5::Type::kString)
    throw ResultFileError(path + " has no integer schema_version attribute");
  const int64_t v = f.attr_int("schema_version");
  if (v < kOldestReadableSchema || v > kSchemaVersion)
    throw ResultFileError(path + " has schema_version " + std::to_string(v) +
                          "; this kvlab reads versions " + std::to_string(kOldestReadableSchema) +
                          " to " + std::to_string(kSchemaVersion) + " and writes " +
                          std::to_string(kSchemaVersion));
  if (!f.is_group("index"))
    throw ResultFileError(path + " lacks /index: not a complete kvlab result file");
}

std::string probe_result_file(const std::string& path) {
  const pid_t pid = fork();
  if (pid < 0) return "";  // no probe possible: the in-process check still runs
  if (pid == 0) {
    // The child reads only and leaves by _exit: no HDF5 close, no atexit handler, no core file.
    const struct rlimit no_core {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(SIGPIPE, SIG_DFL);
    try {
      const h5::File f = h5::File::open(path);
      (void)check_result_file(f, path);
    } catch (...) {
    }
    _exit(0);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return "";
  if (WIFSIGNALED(status))
    return std::string("the HDF5 library crashed reading it (signal ") +
           std::to_string(WTERMSIG(status)) + ", " + strsignal(WTERMSIG(status)) +
           "): its internal structures are damaged";
  return "";
}

FileCheck check_result_file(const h5::File& f, const std::string& path) {
  FileCheck c;
  c.path = path;
  Verification& v = c.verification;
  try {
    ResultFile::check_schema(f, path);
  } catch (const ResultFileError& e) {
    v.add(e.what());
    return c;
  }
  c.schema = ResultFile::schema_version(f);
  h5::Table index;
  std::vector<std::string> keys, groups;
  try {
    index = h5::Table::open(f, "index");
    c.rows = static_cast<int64_t>(index.rows());
    keys = index.read_strings("key");
    groups = index.read_strings("group");
  } catch (const h5::Error& e) {
    v.add("/index cannot be read (" + std::string(e.what()) + ")");
    return c;
  }
  std::set<std::string> seen;
  for (size_t r = 0; r < keys.size(); ++r)
    if (!seen.insert(keys[r]).second)
      v.add("/index row " + std::to_string(r) + ": point " + keys[r] + " appears twice");
  if (c.schema < 2) {
    c.notes.push_back("schema " + std::to_string(c.schema) +
                      " (written before checksums): the structure was read, the values cannot "
                      "be verified");
    for (size_t r = 0; r < groups.size(); ++r)
      if (!groups[r].empty() && !f.is_group(groups[r]))
        v.add("/index row " + std::to_string(r) + " names missing group " + groups[r]);
    return c;
  }
  try {
    if (!f.has_attr(kAttrsCrc))
      v.add("the root attributes have no attrs_crc");
    else if (f.attr_int(kAttrsCrc) != static_cast<int64_t>(attrs_checksum(f, kAttrsCrc)))
      v.add("the root attributes (provenance, config text) do not match their attrs_crc");
  } catch (const h5::Error& e) {
    v.add("the root attributes cannot be read (" + std::string(e.what()) + ")");
  }
  if (!f.is_group("sweep")) {
    v.add("/sweep (the sweep's identity) is missing");
  } else {
    verify_group(f.open_group("sweep"), "/sweep", &v);
    try {
      c.identity = read_identity(f);
    } catch (const h5::Error& e) {
      v.add("/sweep cannot be read (" + std::string(e.what()) + ")");
    }
    if (c.identity) {
      c.planned = static_cast<int64_t>(c.identity->keys.size());
      for (const auto& k : c.identity->keys)
        if (!seen.count(k)) {
          if (c.missing == 0) c.first_missing = k;
          ++c.missing;
        }
    }
  }
  verify_table(f, "index", &v);
  std::set<std::string> named;
  for (size_t r = 0; r < groups.size(); ++r) {
    if (groups[r].empty()) continue;  // a row without traces (peer files)
    named.insert(groups[r]);
    bool exists = false;
    try {
      exists = f.is_group(groups[r]);
    } catch (const h5::Error&) {
    }
    if (!exists) {
      v.add("/index row " + std::to_string(r) + " (" + keys[r] + ") names missing group " +
            groups[r]);
      continue;
    }
    verify_group(f.open_group(groups[r]), groups[r] + " (" + keys[r] + ")", &v);
  }
  if (f.is_group("points")) {
    try {
      for (const auto& child : f.open_group("points").children())
        if (!named.count("/points/" + child))
          v.add("/points/" + child + " is not named by any /index row");
    } catch (const h5::Error& e) {
      v.add("/points cannot be listed (" + std::string(e.what()) + ")");
    }
  }
  if (f.is_group("runs")) verify_table(f, "runs", &v);
  if (f.is_group("inputs")) verify_table(f, "inputs", &v);
  return c;
}

std::unique_ptr<ResultFile> ResultFile::create(const std::string& path, const RunMeta& meta,
                                               h5::DurableFile::Options opt) {
  std::unique_ptr<ResultFile> r(new ResultFile());
  // Everything a reader needs is in the first version of the file that reaches the disk.
  auto init = [&](h5::File& f) {
    f.set_attr("kvlab_schema", kSchemaName);
    f.set_attr("schema_version", kSchemaVersion);
    for (const auto& [k, v] : build_provenance()) f.set_attr(k, v);
    f.set_attr("created_utc", utc_now());
    f.set_attr("argv", join_argv(meta.argv));
    f.set_attr("config_path", meta.config_path);
    f.set_attr("config_text", meta.config_text);
    f.set_attr("sweep_name", meta.sweep_name);
    f.set_attr("sweep_fingerprint", meta.fingerprint);
    f.set_attr("shard", meta.shard);
    f.set_attr("points_planned", meta.points_planned);
    f.set_attr("read_ceiling_bytes_per_s", 0.0);
    f.set_attr("copy_ceiling_bytes_per_s", 0.0);
    write_identity(f, meta.identity);
    // Small chunks: appending a row rewrites one chunk of every column (result_file.h).
    r->index_ = h5::Table::create(f, "index", kIndexBase, 16);
    r->index_.group().set_attr("doc", "one row per finished sweep point");
    f.create_group("points");
    r->runs_ = h5::Table::create(f, "runs", kRunsColumns, 16);
    seal_root(f);
  };
  try {
    r->durable_ = h5::DurableFile::create(path, opt, init);
  } catch (const h5::Error& e) {
    throw ResultFileError(std::string("cannot write the result file: ") + e.what());
  }
  return r;
}

std::unique_ptr<ResultFile> ResultFile::open(const std::string& path, h5::DurableFile::Options opt,
                                             h5::Recovery* recovery) {
  if (access(path.c_str(), F_OK) != 0)
    throw ResultFileError("cannot resume " + path + ": it does not exist");
  require_regular_file(path, "cannot resume");
  // Roll back an interrupted commit before judging the file.
  try {
    const h5::Recovery rec = h5::DurableFile::recover(path);
    if (recovery) *recovery = rec;
  } catch (const h5::Error& e) {
    throw ResultFileError(std::string("cannot recover ") + path + ": " + e.what());
  }
  if (!h5::File::is_hdf5(path))
    throw ResultFileError(
        path + " is not an HDF5 file (corrupt or truncated header); it was left untouched");
  {
    const std::string crash = probe_result_file(path);
    if (!crash.empty())
      throw ResultFileError(path + " is damaged: " + crash + "; it was left untouched");
    // Read-only first: a file of another schema is never opened for writing.
    h5::File ro;
    try {
      ro = h5::File::open(path);
    } catch (const h5::Error& e) {
      throw ResultFileError(path + " cannot be opened (corrupt or truncated?): " + e.what() +
                            "; it was left untouched");
    }
    check_schema(ro, path);
    if (schema_version(ro) < kSchemaVersion)
      throw ResultFileError(path + " was written with result schema " +
                            std::to_string(schema_version(ro)) +
                            ", which has no sweep identity and no checksums, so it cannot be "
                            "resumed; start a new file (its rows can join one through `kvlab "
                            "merge --allow-mixed`)");
  }
  std::unique_ptr<ResultFile> r(new ResultFile());
  try {
    r->durable_ = h5::DurableFile::open(path, opt);
    // Everything is verified before anything is appended: a damaged file is never extended.
    const FileCheck c = check_result_file(r->durable_->file(), path);
    if (!c.ok()) {
      std::string why;
      for (const auto& p : c.verification.problems) why += "\n  " + p;
      if (c.verification.damaged > static_cast<int64_t>(c.verification.problems.size()))
        why += "\n  ... (" +
               std::to_string(c.verification.damaged -
                              static_cast<int64_t>(c.verification.problems.size())) +
               " more)";
      throw ResultFileError(path + " is damaged (" + std::to_string(c.verification.damaged) +
                            " problems; it was left untouched):" + why);
    }
    r->index_ = h5::Table::open(r->durable_->file(), "index");
    r->runs_ = h5::Table::open(r->durable_->file(), "runs");
  } catch (const h5::Error& e) {
    throw ResultFileError(path + " is damaged (" + std::string(e.what()) +
                          "); it was left untouched");
  }
  return r;
}

std::optional<SweepIdentity> ResultFile::identity() const {
  return read_identity(durable_->file());
}

void ResultFile::ensure_column(const std::string& name, h5::Type type, const std::string& unit,
                               const std::string& doc) {
  if (index_.has_column(name)) return;
  index_.add_column({name, type, unit, doc});
}

void ResultFile::declare(const std::vector<const Bench*>& benches) {
  for (const Bench* b : benches) {
    for (const auto& a : b->axes()) {
      const h5::Type t = axis_column_type(a);
      if (index_.has_column(a.name)) {
        const h5::Type have = index_.column(a.name).type;
        if (have != t && have != h5::Type::kString)
          throw ResultFileError(path() + ": axis '" + a.name + "' of kind " + b->name() + " is " +
                                (a.numeric() ? "numeric" : "text") +
                                " but the index column holds " + h5::to_string(have));
        continue;
      }
      ensure_column(a.name, t, "", "axis: " + a.doc);
    }
    for (const auto& m : b->metrics()) {
      if (index_.has_column(m.name) && index_.column(m.name).type != h5::Type::kFloat64)
        throw ResultFileError(path() + ": metric '" + m.name + "' of kind " + b->name() +
                              " collides with a text column");
      ensure_column(m.name, h5::Type::kFloat64, m.unit, m.doc);
    }
  }
  durable_->commit();
}

std::set<std::string> ResultFile::finished_keys() const {
  const auto keys = index_.read_strings("key");
  return std::set<std::string>(keys.begin(), keys.end());
}

void ResultFile::begin_run(const RunMeta& meta, bool resumed) {
  const DeviceSummary d = device_summary();
  run_id_ = meta.run_id.empty() ? new_run_id() : meta.run_id;
  sweep_seed_ = static_cast<int64_t>(meta.identity.seed);
  append_sealed_row(runs_, {{"started_utc", utc_now()},
                            {"argv", join_argv(meta.argv)},
                            {"resumed", int64_t{resumed ? 1 : 0}},
                            {"points_run", int64_t{0}},
                            {"points_failed", int64_t{0}},
                            {"host", hostname()},
                            {"pid", static_cast<int64_t>(getpid())},
                            {"git_commit", git_commit()},
                            {"git_dirty", int64_t{git_dirty() ? 1 : 0}},
                            {"device_name", d.present ? d.name : d.error},
                            {"run_id", run_id_},
                            {"identity", meta.identity.digest()},
                            {"sweep_seed", sweep_seed_}});
  run_row_ = static_cast<int64_t>(runs_.rows()) - 1;
  durable_->commit();
}

void ResultFile::set_ceilings(double read_bps, double copy_bps) {
  file().set_attr("read_ceiling_bytes_per_s", read_bps);
  file().set_attr("copy_ceiling_bytes_per_s", copy_bps);
  seal_root(file());
  if (run_row_ >= 0) {
    runs_.set(run_row_, "read_ceiling_bytes_per_s", read_bps);
    runs_.set(run_row_, "copy_ceiling_bytes_per_s", copy_bps);
    reseal_row(runs_, static_cast<uint64_t>(run_row_));
  }
  durable_->commit();
}

void ResultFile::end_run(int64_t points_run, int64_t points_failed) {
  if (run_row_ < 0) return;
  const h5::DurableFile::Stats& st = durable_->stats();
  runs_.set(run_row_, "finished_utc", utc_now());
  runs_.set(run_row_, "points_run", points_run);
  runs_.set(run_row_, "points_failed", points_failed);
  runs_.set(run_row_, "commits", static_cast<int64_t>(st.commits + 1));
  runs_.set(run_row_, "bytes_written", static_cast<double>(st.data_bytes + st.journal_bytes));
  reseal_row(runs_, static_cast<uint64_t>(run_row_));
  durable_->commit();
}

void write_point_group(h5::Group& g, const Point& p, const Record& r,
                       const std::vector<const Bench*>& benches) {
  std::vector<AxisSpec> axes;
  for (const Bench* b : benches)
    if (b->name() == p.kind) axes = b->axes();
  g.set_attr("point", p.index);
  g.set_attr("key", p.key());
  g.set_attr("study", p.study);
  g.set_attr("kind", p.kind);
  g.set_attr("status", to_string(r.status));
  g.set_attr("reason", r.reason);
  g.set_attr("seconds", r.seconds);
  for (const auto& [name, v] : p.axes) {
    const AxisSpec* a = find_axis(axes, name);
    long long i = 0;
    double d = 0;
    if (a && a->type == AxisType::kInt && parse_int(v, &i))
      g.set_attr(name, static_cast<int64_t>(i));
    else if (a && a->type == AxisType::kFloat && parse_float(v, &d))
      g.set_attr(name, d);
    else
      g.set_attr(name, v);
  }
  for (const auto& [name, v] : r.metrics) g.set_attr(name, v);
  for (const auto& [name, v] : r.labels) g.set_attr(name, v);
  for (const auto& t : r.traces) {
    if (!t.columns.empty()) {
      h5::Table tab = h5::write_table(g, t.name, t.columns);
      if (!t.doc.empty()) tab.group().set_attr("doc", t.doc);
    } else {
      h5::Dataset d = g.write(t.name, t.array, t.shape);
      if (!t.doc.empty()) d.set_attr("doc", t.doc);
    }
  }
}

void ResultFile::write_point(const Point& p, const Bench& b, const Record& r) {
  const std::vector<const Bench*> benches = {&b};
  const int64_t row = rows();
  const std::string group = "/points/" + row_name(row);
  h5::Group points = file().open_group("points");
  h5::Group g = points.create_group(row_name(row));
  write_point_group(g, p, r, benches);
  g.set_attr("run_id", run_id_);
  g.set_attr("sweep_seed", sweep_seed_);
  seal_group(g);

  std::vector<std::pair<std::string, h5::Value>> cells = {
      {"point", p.index},
      {"key", p.key()},
      {"study", p.study},
      {"kind", p.kind},
      {"status", to_string(r.status)},
      {"reason", r.reason},
      {"seconds", r.seconds},
      {"group", group},
      {"run_id", run_id_},
      {"sweep_seed", sweep_seed_},
  };
  const auto axes = b.axes();
  for (const auto& [name, v] : p.axes) {
    const AxisSpec* a = find_axis(axes, name);
    if (!index_.has_column(name))
      ensure_column(name, a ? axis_column_type(*a) : h5::Type::kString, "", "");
    double d = 0;
    if (index_.column(name).type == h5::Type::kFloat64 && parse_float(v, &d))
      cells.emplace_back(name, d);
    else
      cells.emplace_back(name, v);
  }
  for (const auto& [name, v] : r.metrics) {
    if (!index_.has_column(name)) ensure_column(name, h5::Type::kFloat64, "", "");
    if (index_.column(name).type != h5::Type::kFloat64)
      throw ResultFileError("metric '" + name + "' of " + p.key() + " collides with a text column");
    cells.emplace_back(name, v);
  }
  for (const auto& [name, v] : r.labels) {
    if (!index_.has_column(name)) ensure_column(name, h5::Type::kString, "", "");
    cells.emplace_back(name, v);
  }
  append_sealed_row(index_, cells);
  durable_->commit();
}

}  // namespace kvlab::exp
