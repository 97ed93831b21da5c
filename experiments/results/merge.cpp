// merge.cpp: see merge.h.
#include "experiments/results/merge.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "experiments/h5/durable.h"
#include "experiments/h5/file_io.h"
#include "experiments/h5/h5.h"
#include "experiments/results/provenance.h"
#include "experiments/results/result_file.h"

namespace kvlab::exp {
namespace {

struct Input {
  std::string path;
  h5::File file;
  h5::Table index;
  int64_t schema = 0;
  std::vector<int64_t> point;
  std::vector<std::string> key, group;
  std::optional<SweepIdentity> identity;
};

std::string row_name(int64_t row) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%06lld", static_cast<long long>(row));
  return buf;
}

std::string attr_or(const h5::File& f, const std::string& name, const std::string& dflt = "") {
  if (!f.has_attr(name)) return dflt;
  return h5::to_string(f.attr(name));
}

double attr_num_or(const h5::File& f, const std::string& name) {
  if (!f.has_attr(name) || f.attr_type(name) == h5::Type::kString) return 0.0;
  return f.attr_double(name);
}

// The point indexes of an index table as integers (peer files store them as float64).
std::vector<int64_t> read_points(const h5::Table& t) {
  const h5::ColumnData d = t.read("point");
  if (d.type == h5::Type::kString) throw h5::Error("/index/point is not numeric");
  if (d.type == h5::Type::kFloat64 || d.type == h5::Type::kFloat32) {
    std::vector<int64_t> v;
    for (double x : d.f64) v.push_back(std::isfinite(x) ? static_cast<int64_t>(x) : 0);
    return v;
  }
  return d.i64;
}

std::unique_ptr<Input> open_input(const std::string& path, const MergeOptions& opt,
                                  MergeResult* res) {
  if (access(path.c_str(), F_OK) != 0) throw ResultFileError("merge: input " + path + " does not exist");
  require_regular_file(path, "merge: input");
  if (access(path.c_str(), R_OK) != 0) throw ResultFileError("merge: cannot read input " + path);
  if (access(h5::DurableFile::journal_path(path).c_str(), F_OK) == 0)
    throw ResultFileError("merge: " + path + " has an interrupted commit (" +
                          h5::DurableFile::journal_path(path) + "); run `kvlab recover " + path +
                          "` or resume its sweep first");
  if (!h5::File::is_hdf5(path))
    throw ResultFileError("merge: " + path + " is not an HDF5 file (corrupt or truncated)");
  auto in = std::make_unique<Input>();
  in->path = path;
  const std::string crash = probe_result_file(path);
  if (!crash.empty()) throw ResultFileError("merge: " + path + " is damaged: " + crash);
  try {
    in->file = h5::File::open(path);
  } catch (const h5::Error& e) {
    throw ResultFileError("merge: " + path + " is damaged: " + e.what());
  }
  const FileCheck c = check_result_file(in->file, path);
  if (!c.ok()) {
    std::string why;
    for (const auto& p : c.verification.problems) why += "\n  " + p;
    throw ResultFileError("merge: " + path + " is damaged (" +
                          std::to_string(c.verification.damaged) + " problems):" + why);
  }
  in->schema = c.schema;
  if (c.schema < kSchemaVersion) {
    if (!opt.allow_mixed)
      throw ResultFileError("merge: " + path + " has result schema " + std::to_string(c.schema) +
                            " (no identity, no checksums): its rows cannot be verified; give "
                            "--allow-mixed to merge it anyway (its rows are sealed as read)");
    res->notes.push_back(path + ": schema " + std::to_string(c.schema) +
                         ", rows copied unverified and sealed as read");
  }
  in->identity = c.identity;
  try {
    in->index = h5::Table::open(in->file, "index");
    in->point = read_points(in->index);
    in->key = in->index.read_strings("key");
    in->group = in->index.read_strings("group");
  } catch (const h5::Error& e) {
    throw ResultFileError("merge: " + path + " is damaged: " + e.what());
  }
  return in;
}

}  // namespace

MergeResult merge_results(const std::vector<std::string>& inputs, const std::string& out_arg,
                          const MergeOptions& opt) {
  MergeResult res;
  if (inputs.empty()) throw ResultFileError("merge: no input files");
  const std::string out = resolve_output_path(out_arg, "merge: output");
  const bool out_exists = access(out.c_str(), F_OK) == 0;
  if (out_exists && !opt.overwrite)
    throw ResultFileError("merge: output " + out + " exists (use --force to replace it)");
  for (const auto& in : inputs)
    if (in == out && !opt.overwrite)
      throw ResultFileError("merge: output " + out + " is also an input");

  // Hold the output's lock for the whole merge: a kvlab process writing it makes the merge
  // fail here (never replaced under a writer), and no writer starts on it meanwhile.
  int out_fd = opt.out_lock_fd;
  bool own_lock = false;
  if (out_exists && out_fd < 0) {
    try {
      out_fd = open_locked(out, "to replace it");
    } catch (const h5::Error& e) {
      throw ResultFileError("merge: cannot replace " + out + ": " + e.what());
    }
    own_lock = true;
  }
  struct LockGuard {
    int fd;
    bool own;
    ~LockGuard() {
      if (own && fd >= 0) ::close(fd);
    }
  } lock_guard{out_fd, own_lock};

  std::vector<std::unique_ptr<Input>> ins;
  for (const auto& path : inputs) ins.push_back(open_input(path, opt, &res));

  // One sweep, unless mixing was asked for.
  const Input* ref = nullptr;
  for (const auto& in : ins)
    if (in->identity) {
      ref = in.get();
      break;
    }
  std::set<std::string> digests;
  for (const auto& in : ins) {
    if (!in->identity) continue;
    digests.insert(in->identity->digest());
    const std::string diff =
        identity_difference(*ref->identity, *in->identity, ref->path, in->path);
    if (!diff.empty() && !opt.allow_mixed)
      throw ResultFileError("merge: " + in->path + " comes from another sweep than " + ref->path +
                            ":\n" + diff + "give --allow-mixed to merge them anyway");
  }
  if (!opt.allow_mixed) {
    // Schema-2 inputs all share the identity; a same-sweep check of older files by fingerprint.
    const std::string fp0 = attr_or(ins[0]->file, "sweep_fingerprint");
    for (const auto& in : ins)
      if (attr_or(in->file, "sweep_fingerprint") != fp0)
        throw ResultFileError("merge: " + in->path + " comes from another sweep (fingerprint " +
                              attr_or(in->file, "sweep_fingerprint") + " vs " + fp0 + " of " +
                              ins[0]->path + "); use --allow-mixed to merge anyway");
  }

  // Rows in sweep order; duplicate keys are an error.
  struct Row {
    int64_t point;
    size_t input;
    size_t row;
  };
  std::vector<Row> rows;
  std::map<std::string, std::string> seen;
  for (size_t i = 0; i < ins.size(); ++i)
    for (size_t r = 0; r < ins[i]->key.size(); ++r) {
      auto [it, fresh] = seen.emplace(ins[i]->key[r], ins[i]->path);
      if (!fresh)
        throw ResultFileError("merge: point " + ins[i]->key[r] + " is in both " + it->second +
                              " and " + ins[i]->path);
      rows.push_back({ins[i]->point[r], i, r});
    }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.point < b.point; });

  // Union of the index columns (first appearance order; a type conflict is an error).
  std::vector<h5::Table::Column> cols;
  for (const auto& in : ins)
    for (const auto& c : in->index.columns()) {
      auto it = std::find_if(cols.begin(), cols.end(),
                             [&](const h5::Table::Column& x) { return x.name == c.name; });
      if (it == cols.end())
        cols.push_back(c);
      else if ((it->type == h5::Type::kString) != (c.type == h5::Type::kString))
        throw ResultFileError("merge: column '" + c.name +
                              "' is text in one input and numeric in another");
    }
  if (std::none_of(cols.begin(), cols.end(), [](const auto& c) { return c.name == kRowCrc; }))
    cols.push_back({kRowCrc, h5::Type::kInt64, "", "CRC-32 of the row's cells (result_file.h)"});

  // The output, under the temporary name (locked while written; a leftover is removed by the
  // next writer of `out`).
  const std::string tmp = h5::DurableFile::temp_path(out);
  if (access(tmp.c_str(), F_OK) == 0) {
    const int sfd = ::open(tmp.c_str(), O_RDWR | O_CLOEXEC);
    if (sfd >= 0 && !try_write_lock(sfd)) {
      ::close(sfd);
      throw ResultFileError("merge: " + tmp + " is being written by another kvlab process");
    }
    unlink(tmp.c_str());
    if (sfd >= 0) ::close(sfd);
  }
  const int tfd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (tfd < 0) throw_path_error("merge: cannot create " + tmp, errno);
  if (!try_write_lock(tfd)) {
    ::close(tfd);
    throw ResultFileError("merge: " + tmp + " is locked by another process");
  }
  auto fail_cleanup = [&]() {
    unlink(tmp.c_str());
    ::close(tfd);
  };
  try {
    h5::File f = h5::File::create(tmp, /*overwrite=*/true);
    const h5::File& first = ins[0]->file;
    for (const auto& name : first.attr_names())
      if (name != kAttrsCrc) first.copy_attr(name, f);
    f.set_attr("schema_version", kSchemaVersion);
    f.set_attr("shard", "merged");
    f.set_attr("merged_utc", utc_now());
    f.set_attr("merged_from", std::vector<std::string>(inputs.begin(), inputs.end()));
    if (digests.size() > 1) f.set_attr("identity_mixed", int64_t{1});
    int64_t planned = 0;
    for (const auto& in : ins)
      if (in->file.has_attr("points_planned") &&
          in->file.attr_type("points_planned") != h5::Type::kString)
        planned += static_cast<int64_t>(in->file.attr_double("points_planned"));
    f.set_attr("points_planned", planned);
    if (ref) ref->file.copy("sweep", f, "sweep");

    h5::Group points = f.create_group("points");
    std::map<std::string, std::vector<h5::ColumnData>> src;  // column -> per input data
    for (const auto& c : cols) {
      std::vector<h5::ColumnData> per;
      for (const auto& in : ins)
        per.push_back(in->index.has_column(c.name) ? in->index.read(c.name) : h5::ColumnData{});
      src[c.name] = std::move(per);
    }
    h5::Table index = h5::Table::create(f, "index", cols, 16);
    index.group().set_attr("doc", "one row per finished sweep point");
    std::vector<std::pair<std::string, h5::ColumnData>> out_cols;
    for (const auto& c : cols) {
      h5::ColumnData d;
      d.type = c.type == h5::Type::kString                                      ? h5::Type::kString
               : (c.type == h5::Type::kFloat64 || c.type == h5::Type::kFloat32) ? h5::Type::kFloat64
                                                                                : h5::Type::kInt64;
      for (size_t n = 0; n < rows.size(); ++n) {
        const Row& r = rows[n];
        const h5::ColumnData& s = src[c.name][r.input];
        const bool have = s.size() > 0;
        if (c.name == "group") {
          const bool traced = have && !s.str[r.row].empty();
          d.str.push_back(traced ? "/points/" + row_name(static_cast<int64_t>(n)) : "");
        } else if (d.type == h5::Type::kString) {
          d.str.push_back(have ? s.str[r.row] : "");
        } else if (d.type == h5::Type::kFloat64) {
          d.f64.push_back(have ? (s.type == h5::Type::kFloat64 || s.type == h5::Type::kFloat32
                                      ? s.f64[r.row]
                                      : static_cast<double>(s.i64[r.row]))
                               : std::numeric_limits<double>::quiet_NaN());
        } else {
          d.i64.push_back(have ? (s.type == h5::Type::kString ? 0
                                  : (s.type == h5::Type::kFloat64 || s.type == h5::Type::kFloat32)
                                      ? static_cast<int64_t>(s.f64[r.row])
                                      : s.i64[r.row])
                               : 0);
        }
      }
      out_cols.emplace_back(c.name, std::move(d));
    }
    // Rows of inputs without checksums (schema 1) are sealed here, as read.
    auto& crc_col = std::find_if(out_cols.begin(), out_cols.end(),
                                 [](const auto& x) { return x.first == kRowCrc; })
                        ->second;
    for (size_t n = 0; n < rows.size(); ++n) {
      if (ins[rows[n].input]->schema >= kSchemaVersion) continue;
      std::vector<std::pair<std::string, h5::Value>> cells;
      for (const auto& [name, d] : out_cols) {
        if (d.type == h5::Type::kString)
          cells.emplace_back(name, d.str[n]);
        else if (d.type == h5::Type::kFloat64)
          cells.emplace_back(name, d.f64[n]);
        else
          cells.emplace_back(name, d.i64[n]);
      }
      crc_col.i64[n] = static_cast<int64_t>(row_checksum(cells));
    }
    index.append(out_cols);
    for (size_t n = 0; n < rows.size(); ++n) {
      const Row& r = rows[n];
      const std::string& g = ins[r.input]->group[r.row];
      if (g.empty()) continue;
      const auto slash = g.rfind('/');
      h5::Group parent = ins[r.input]->file.open_group(g.substr(0, slash));
      parent.copy(g.substr(slash + 1), points, row_name(static_cast<int64_t>(n)));
      if (ins[r.input]->schema < kSchemaVersion) {
        h5::Group copied = points.open_group(row_name(static_cast<int64_t>(n)));
        seal_group(copied);
      }
    }

    // /runs: concatenated, with the input each row came from (resealed: a new column).
    std::vector<h5::Table::Column> run_cols = {{"source", h5::Type::kString, "", "input file"}};
    std::vector<h5::Table> in_runs;
    for (const auto& in : ins) {
      in_runs.push_back(in->file.is_group("runs") ? h5::Table::open(in->file, "runs") : h5::Table());
      if (!in->file.is_group("runs")) continue;
      for (const auto& c : in_runs.back().columns()) {
        auto it = std::find_if(run_cols.begin(), run_cols.end(),
                               [&](const auto& x) { return x.name == c.name; });
        if (it == run_cols.end()) {
          run_cols.push_back(c);
        } else if ((it->type == h5::Type::kString) != (c.type == h5::Type::kString)) {
          throw ResultFileError("merge: /runs column '" + c.name +
                                "' is text in one input and numeric in another");
        } else if (it->type != c.type && it->type != h5::Type::kString) {
          it->type = h5::Type::kFloat64;  // integers in one input, floats in another
        }
      }
    }
    if (std::none_of(run_cols.begin(), run_cols.end(),
                     [](const auto& c) { return c.name == kRowCrc; }))
      run_cols.push_back({kRowCrc, h5::Type::kInt64, "", "CRC-32 of the row's cells"});
    h5::Table runs = h5::Table::create(f, "runs", run_cols, 16);
    for (size_t i = 0; i < ins.size(); ++i) {
      if (!ins[i]->file.is_group("runs")) continue;
      std::vector<std::pair<std::string, h5::ColumnData>> rc;
      const size_t n = in_runs[i].rows();
      rc.emplace_back("source", h5::ColumnData::of(std::vector<std::string>(n, ins[i]->path)));
      for (const auto& c : in_runs[i].columns()) rc.emplace_back(c.name, in_runs[i].read(c.name));
      if (n > 0) runs.append(rc);
    }
    for (uint64_t r = 0; r < runs.rows(); ++r) reseal_row(runs, r);

    h5::Table inputs_t =
        h5::Table::create(f, "inputs",
                          {{"path", h5::Type::kString, "", ""},
                           {"shard", h5::Type::kString, "", ""},
                           {"rows", h5::Type::kInt64, "", ""},
                           {"schema_version", h5::Type::kInt64, "", ""},
                           {"identity", h5::Type::kString, "", "digest of the input's identity"},
                           {"host", h5::Type::kString, "", ""},
                           {"git_commit", h5::Type::kString, "", ""},
                           {"device_name", h5::Type::kString, "", ""},
                           {"read_ceiling_bytes_per_s", h5::Type::kFloat64, "B/s", ""},
                           {"copy_ceiling_bytes_per_s", h5::Type::kFloat64, "B/s", ""},
                           {kRowCrc, h5::Type::kInt64, "", ""}},
                          16);
    for (const auto& in : ins)
      append_sealed_row(
          inputs_t,
          {{"path", in->path},
           {"shard", attr_or(in->file, "shard")},
           {"rows", static_cast<int64_t>(in->key.size())},
           {"schema_version", in->schema},
           {"identity", in->identity ? in->identity->digest() : std::string()},
           {"host", attr_or(in->file, "host")},
           {"git_commit", attr_or(in->file, "git_commit")},
           {"device_name", attr_or(in->file, "device_name")},
           {"read_ceiling_bytes_per_s", attr_num_or(in->file, "read_ceiling_bytes_per_s")},
           {"copy_ceiling_bytes_per_s", attr_num_or(in->file, "copy_ceiling_bytes_per_s")}});
    seal_root(f);
    f.flush();
    f.close();
    sync_fd(tfd, opt.fsync, tmp);
    // What was written is read back and verified before it replaces anything: a write that
    // failed silently (a full disk seen only at close) never becomes the result.
    const h5::File back = h5::File::open(tmp);
    const FileCheck c = check_result_file(back, tmp);
    if (!c.ok())
      throw IoError("merge: the written output " + tmp + " does not verify (" +
                        (c.verification.problems.empty() ? std::string("?")
                                                         : c.verification.problems.front()) +
                        "); nothing was replaced",
                    EIO);
  } catch (const ResultFileError&) {
    fail_cleanup();
    throw;
  } catch (const h5::Error& e) {
    // The inputs were verified: what fails now is writing the output. HDF5 names the system's
    // errno when the disk refused (full, quota, size limit): an I/O failure.
    fail_cleanup();
    const std::string msg = e.what();
    const auto at = msg.find("errno = ");
    const std::string what = "merge: cannot write " + out + ": " + msg + " (nothing was replaced)";
    if (at != std::string::npos) throw IoError(what, std::atoi(msg.c_str() + at + 8));
    throw kvlab::Error(what);
  } catch (...) {
    fail_cleanup();
    throw;
  }
  if (rename(tmp.c_str(), out.c_str()) != 0) {
    const int e = errno;
    fail_cleanup();
    throw IoError("merge: cannot move the result into place at " + out + ": " + std::strerror(e),
                  e);
  }
  sync_dir_of(out, opt.fsync);
  ::close(tfd);

  res.rows = static_cast<int64_t>(rows.size());
  if (ref && !ref->identity->keys.empty()) {
    res.planned = static_cast<int64_t>(ref->identity->keys.size());
    for (const auto& k : ref->identity->keys)
      if (!seen.count(k)) {
        if (res.missing == 0) res.first_missing = k;
        ++res.missing;
      }
  }
  return res;
}

}  // namespace kvlab::exp
