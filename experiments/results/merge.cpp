// merge.cpp: see merge.h.
#include "experiments/results/merge.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>

#include "experiments/h5/durable.h"
#include "experiments/h5/h5.h"
#include "experiments/results/provenance.h"
#include "experiments/results/result_file.h"

namespace kvlab::exp {
namespace {

struct Input {
  std::string path;
  h5::File file;
  h5::Table index;
  std::vector<int64_t> point;
  std::vector<std::string> key, group;
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

}  // namespace

int64_t merge_results(const std::vector<std::string>& inputs, const std::string& out,
                      const MergeOptions& opt) {
  if (inputs.empty()) throw ResultFileError("merge: no input files");
  if (access(out.c_str(), F_OK) == 0 && !opt.overwrite)
    throw ResultFileError("merge: output " + out + " exists (use --force to replace it)");
  for (const auto& in : inputs)
    if (in == out) throw ResultFileError("merge: output " + out + " is also an input");

  std::vector<std::unique_ptr<Input>> ins;
  for (const auto& path : inputs) {
    if (access(path.c_str(), R_OK) != 0) throw ResultFileError("merge: cannot read input " + path);
    if (access(h5::DurableFile::journal_path(path).c_str(), F_OK) == 0)
      throw ResultFileError("merge: " + path + " has an interrupted commit (" +
                            h5::DurableFile::journal_path(path) + "); run `kvlab recover " + path +
                            "` or resume its sweep first");
    if (!h5::File::is_hdf5(path))
      throw ResultFileError("merge: " + path + " is not an HDF5 file (corrupt or truncated)");
    auto in = std::make_unique<Input>();
    in->path = path;
    try {
      in->file = h5::File::open(path);
      ResultFile::check_schema(in->file, path);
      in->index = h5::Table::open(in->file, "index");
      in->point = in->index.read_ints("point");
      in->key = in->index.read_strings("key");
      in->group = in->index.read_strings("group");
      for (const auto& g : in->group)
        if (!in->file.is_group(g)) throw h5::Error("index row names missing group " + g);
    } catch (const ResultFileError&) {
      throw;
    } catch (const h5::Error& e) {
      throw ResultFileError("merge: " + path + " is damaged: " + e.what());
    }
    ins.push_back(std::move(in));
  }
  const std::string fp0 = attr_or(ins[0]->file, "sweep_fingerprint");
  for (const auto& in : ins) {
    const std::string fp = attr_or(in->file, "sweep_fingerprint");
    if (fp != fp0 && !opt.allow_mixed)
      throw ResultFileError("merge: " + in->path + " comes from another sweep (fingerprint " + fp +
                            " vs " + fp0 + " of " + ins[0]->path +
                            "); use --allow-mixed to merge anyway");
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

  const std::string tmp = out + ".merge-tmp" + std::to_string(getpid());
  unlink(tmp.c_str());
  try {
    h5::File f = h5::File::create(tmp);
    const h5::File& first = ins[0]->file;
    for (const auto& name : first.attr_names()) f.set_attr(name, first.attr(name));
    f.set_attr("shard", "merged");
    f.set_attr("merged_utc", utc_now());
    f.set_attr("merged_from", std::vector<std::string>(inputs.begin(), inputs.end()));
    int64_t planned = 0;
    for (const auto& in : ins)
      if (in->file.has_attr("points_planned")) planned += in->file.attr_int("points_planned");
    f.set_attr("points_planned", planned);

    h5::Group points = f.create_group("points");
    std::vector<std::pair<std::string, h5::ColumnData>> data;
    std::map<std::string, std::vector<h5::ColumnData>> src;  // column -> per input data
    for (const auto& c : cols) {
      std::vector<h5::ColumnData> per;
      for (const auto& in : ins) {
        if (in->index.has_column(c.name)) {
          h5::ColumnData d = in->index.read(c.name);
          per.push_back(std::move(d));
        } else {
          per.push_back(h5::ColumnData{});  // missing: filled below
        }
      }
      src[c.name] = std::move(per);
    }
    h5::Table index = h5::Table::create(f, "index", cols);
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
          d.str.push_back("/points/" + row_name(static_cast<int64_t>(n)));
        } else if (d.type == h5::Type::kString) {
          d.str.push_back(have ? s.str[r.row] : "");
        } else if (d.type == h5::Type::kFloat64) {
          d.f64.push_back(have ? (s.type == h5::Type::kFloat64 || s.type == h5::Type::kFloat32
                                      ? s.f64[r.row]
                                      : static_cast<double>(s.i64[r.row]))
                               : std::numeric_limits<double>::quiet_NaN());
        } else {
          d.i64.push_back(have ? s.i64[r.row] : 0);
        }
      }
      out_cols.emplace_back(c.name, std::move(d));
    }
    index.append(out_cols);
    for (size_t n = 0; n < rows.size(); ++n) {
      const Row& r = rows[n];
      const std::string& g = ins[r.input]->group[r.row];
      const auto slash = g.rfind('/');
      h5::Group parent = ins[r.input]->file.open_group(g.substr(0, slash));
      parent.copy(g.substr(slash + 1), points, row_name(static_cast<int64_t>(n)));
    }

    // /runs: concatenated, with the input each row came from.
    std::vector<h5::Table::Column> run_cols = {{"source", h5::Type::kString, "", "input file"}};
    std::vector<h5::Table> in_runs;
    for (const auto& in : ins) {
      in_runs.push_back(h5::Table::open(in->file, "runs"));
      for (const auto& c : in_runs.back().columns())
        if (std::none_of(run_cols.begin(), run_cols.end(),
                         [&](const auto& x) { return x.name == c.name; }))
          run_cols.push_back(c);
    }
    h5::Table runs = h5::Table::create(f, "runs", run_cols, 16);
    for (size_t i = 0; i < ins.size(); ++i) {
      std::vector<std::pair<std::string, h5::ColumnData>> rc;
      const size_t n = in_runs[i].rows();
      rc.emplace_back("source", h5::ColumnData::of(std::vector<std::string>(n, ins[i]->path)));
      for (const auto& c : in_runs[i].columns()) rc.emplace_back(c.name, in_runs[i].read(c.name));
      if (n > 0) runs.append(rc);
    }

    h5::Table inputs_t =
        h5::Table::create(f, "inputs",
                          {{"path", h5::Type::kString, "", ""},
                           {"shard", h5::Type::kString, "", ""},
                           {"rows", h5::Type::kInt64, "", ""},
                           {"host", h5::Type::kString, "", ""},
                           {"git_commit", h5::Type::kString, "", ""},
                           {"device_name", h5::Type::kString, "", ""},
                           {"read_ceiling_bytes_per_s", h5::Type::kFloat64, "B/s", ""},
                           {"copy_ceiling_bytes_per_s", h5::Type::kFloat64, "B/s", ""}},
                          16);
    for (const auto& in : ins)
      inputs_t.append_row(
          {{"path", in->path},
           {"shard", attr_or(in->file, "shard")},
           {"rows", static_cast<int64_t>(in->key.size())},
           {"host", attr_or(in->file, "host")},
           {"git_commit", attr_or(in->file, "git_commit")},
           {"device_name", attr_or(in->file, "device_name")},
           {"read_ceiling_bytes_per_s", attr_num_or(in->file, "read_ceiling_bytes_per_s")},
           {"copy_ceiling_bytes_per_s", attr_num_or(in->file, "copy_ceiling_bytes_per_s")}});
    f.close();
  } catch (const h5::Error& e) {
    unlink(tmp.c_str());
    throw ResultFileError(std::string("merge: cannot write ") + out + ": " + e.what());
  } catch (...) {
    unlink(tmp.c_str());
    throw;
  }
  if (rename(tmp.c_str(), out.c_str()) != 0) {
    unlink(tmp.c_str());
    throw ResultFileError("merge: cannot move the result into place at " + out);
  }
  return static_cast<int64_t>(rows.size());
}

}  // namespace kvlab::exp
