// result_file.h: the kvlab result file (one per run or shard), HDF5 schema version 1.
//
//   /                      attributes: kvlab_schema = "kvlab.results", schema_version = 1,
//                          provenance (kvlab_version, git_commit, git_dirty, build_type,
//                          compiler, cuda, cuda_version, cuda_archs, host, device_*),
//                          created_utc, argv, config_path, config_text, sweep_name,
//                          sweep_fingerprint, shard ("k/N"), points_planned,
//                          read_ceiling_bytes_per_s / copy_ceiling_bytes_per_s (0 = not measured)
//   /index                 table (h5.h): one row per finished point:
//                          point (index in the sweep), key, study, kind, status (ok | skipped |
//                          failed), reason, seconds, group (the point's group), then one
//                          column per axis (float64 for numeric axes, else string), per
//                          summary metric (float64, NaN where not reported) and per label
//   /points/NNNNNN         one group per row (NNNNNN = the row): the same facts as
//                          attributes (axes typed) plus the bulk traces (tables/arrays)
//   /runs                  table: one row per invocation that wrote to the file (start,
//                          end, argv, resumed, points run/failed, host, git, ceilings)
// Every point is committed durably on its own (durable.h): a killed run loses at most the
// point in flight, and --resume skips every key already in /index.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "experiments/bench/bench.h"
#include "experiments/h5/durable.h"

namespace kvlab::exp {

constexpr int64_t kSchemaVersion = 1;
constexpr const char* kSchemaName = "kvlab.results";

// A result file that cannot be used (another schema, not HDF5, torn): exit code 2.
class ResultFileError : public kvlab::InvalidArgument {
 public:
  using kvlab::InvalidArgument::InvalidArgument;
};

struct RunMeta {
  std::vector<std::string> argv;
  std::string config_path;
  std::string config_text;
  std::string sweep_name;
  std::string fingerprint;
  std::string shard = "0/1";
  int64_t points_planned = 0;
};

class ResultFile {
 public:
  // A new file: an error if `path` exists or cannot be created.
  static std::unique_ptr<ResultFile> create(const std::string& path, const RunMeta& meta,
                                            h5::DurableFile::Options opt);
  // An existing file, for --resume: recovers an interrupted commit, checks the schema.
  static std::unique_ptr<ResultFile> open(const std::string& path, h5::DurableFile::Options opt,
                                          h5::Recovery* recovery = nullptr);
  // Throws ResultFileError unless `f` is a kvlab result file of this schema version.
  static void check_schema(const h5::File& f, const std::string& path);

  // Declares the columns of every bench of the sweep (before its first point).
  void declare(const std::vector<const Bench*>& benches);
  // Keys of the points already in the file (any status).
  std::set<std::string> finished_keys() const;
  int64_t rows() const { return static_cast<int64_t>(index_.rows()); }

  // Starts a /runs row for this invocation (committed).
  void begin_run(const RunMeta& meta, bool resumed);
  void set_ceilings(double read_bytes_per_s, double copy_bytes_per_s);
  // Appends the point's index row and group and commits them together; `kind` is the
  // point's bench (its axes type the index columns).
  void write_point(const Point& p, const Bench& kind, const Record& r);
  // Closes this invocation's /runs row (committed).
  void end_run(int64_t points_run, int64_t points_failed);

  h5::File& file() { return durable_->file(); }
  const std::string& path() const { return durable_->path(); }

 private:
  ResultFile() = default;
  void ensure_column(const std::string& name, h5::Type type, const std::string& unit,
                     const std::string& doc);

  std::unique_ptr<h5::DurableFile> durable_;
  h5::Table index_;
  h5::Table runs_;
  int64_t run_row_ = -1;
};

// Writes one point's facts and traces into `g` (also used by merge).
void write_point_group(h5::Group& g, const Point& p, const Record& r,
                       const std::vector<const Bench*>& benches);

}  // namespace kvlab::exp
