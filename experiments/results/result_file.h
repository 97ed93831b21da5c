// result_file.h: the kvlab result file (one per run or shard), HDF5 schema version 2.
//
//   /                      attributes: kvlab_schema = "kvlab.results", schema_version = 2,
//                          provenance (kvlab_version, git_commit, git_dirty, build_type,
//                          compiler, cuda, cuda_version, cuda_archs, host, device_*),
//                          created_utc, argv, config_path, config_text, sweep_name,
//                          sweep_fingerprint, shard ("k/N", "merged", "worker"), points_planned,
//                          read_ceiling_bytes_per_s / copy_ceiling_bytes_per_s (0 = not
//                          measured; the last run's R and C: its ceilings pass raised by its
//                          ceiling rows, experiments/bench/bench.h), ceilings_pass_read_ /
//                          ceilings_pass_copy_bytes_per_s (the pass alone), attrs_crc
//   /sweep                 the sweep's identity (identity.h): attributes identity (digest),
//                          points_fingerprint, point_count, seed, timing, kinds, doc,
//                          content_crc; dataset keys (every point key of the whole sweep)
//   /index                 table (h5.h): one row per finished point:
//                          point (index in the sweep), key, study, kind, status (ok | skipped |
//                          failed), reason, seconds, group (the point's group; "" when the
//                          file holds no traces, as peer files), run_id (the invocation that
//                          ran it), sweep_seed (the seed in effect), row_crc, then one column
//                          per axis (float64 for numeric axes, else string), per summary metric
//                          (float64, NaN where not reported) and per label
//   /points/NNNNNN         one group per row (NNNNNN = the row): the same facts as attributes
//                          (axes typed; run_id, sweep_seed) plus the bulk traces
//                          (tables/arrays), and content_crc
//   /runs                  table: one row per invocation that wrote to the file (start, end,
//                          argv, resumed, points run/failed, host, git, ceilings, run_id,
//                          identity, sweep_seed, commits, bytes_written, row_crc)
// Every point is committed durably on its own (durable.h): a killed run loses at most the
// point in flight, and --resume skips every key already in /index.
//
// Integrity (integrity.h; analysis/result_integrity.py computes the same in Python). Every
// checksum is CRC-32 as zlib computes it (IEEE 802.3 polynomial, initial value 0), stored as
// an int64 holding the unsigned 32-bit value, over a byte stream built as follows (all
// integers and floats little-endian; names are UTF-8 bytes followed by one 0x00 byte):
//   row_crc (tables /index, /runs, /inputs): for each cell of the row in ascending byte order
//     of the column name, except the columns row_crc and group, and except cells holding the
//     fill value ("" for text; float64 whose bits are 0x7FF8000000000000):
//       name, then 's' + u32 byte length + the UTF-8 bytes (text), or
//                 'n' + the value as IEEE float64 (any number, integers converted).
//   content_crc (a group): the group's attributes, then its children, recursively:
//       attribute (ascending name, content_crc of the group itself excluded):
//         'a', name, then its class tag and elements: 'i' + u64 count + int64 each (integers),
//         'f' + u64 count + float64 each (floats), 's' + u64 count + (u32 length + bytes) each
//         (text); a scalar counts 1, an empty attribute 0;
//       child (ascending name): a group: 'G', name, its attributes and children, 'E';
//         a dataset: 'D', name, u32 rank, u64 per dimension, its attributes (as above), then
//         its values as an attribute's ('i' / 'f' / 's', count, elements, in C order).
//   attrs_crc (root): the root attributes as in content_crc ('a' entries), attrs_crc excluded.
//   identity digest (/sweep identity): FNV-1a 64 (offset basis 14695981039346656037, prime
//     1099511628211) over the UTF-8 text
//       "kvlab.sweep_identity.v1\npoints <points_fingerprint> <point_count>\nseed <seed>\n"
//       "timing <timing>\nkinds <kinds>\n"
//     printed as 16 lowercase hex digits; points_fingerprint is FNV-1a 64 over every key
//     followed by "\n", in sweep order (spec.h fingerprint()).
// `kvlab check FILE` verifies all of it; --resume and merge verify before they write.
// Schema 1 files (no identity, no checksums) are still read (merge --allow-mixed, analysis,
// calibrate); their content cannot be verified, and they cannot be resumed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "experiments/bench/bench.h"
#include "experiments/h5/durable.h"
#include "experiments/results/identity.h"
#include "experiments/results/integrity.h"

namespace kvlab::exp {

constexpr int64_t kSchemaVersion = 2;
constexpr int64_t kOldestReadableSchema = 1;
constexpr const char* kSchemaName = "kvlab.results";

// A result file that cannot be used (another schema, not HDF5, torn, damaged, another
// sweep): exit code 2, the file untouched.
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
  SweepIdentity identity;  // of the whole sweep; stored at creation, checked on resume
  std::string run_id;      // this invocation (new_run_id() when empty)
};

// What check_result_file found.
struct FileCheck {
  std::string path;
  int64_t schema = 0;
  int64_t rows = 0;
  Verification verification;
  std::optional<SweepIdentity> identity;
  // The sweep's points (its identity's keys; 0 when unknown) and those no /index row holds (an
  // interrupted sweep, a shard): not damage, the file is what was run.
  int64_t planned = 0, missing = 0;
  std::string first_missing;
  std::vector<std::string> notes;  // not damage: what could not be verified, and why
  bool ok() const { return verification.ok(); }
  bool complete() const { return planned > 0 && missing == 0; }
};
// Verifies a result file opened by the caller: the schema, the root attributes, the identity,
// every index row and the group it names, the /runs rows. Reports, never throws for damage.
FileCheck check_result_file(const h5::File& f, const std::string& path);
// Opens and checks the file at `path` in a forked child first: "" when the child finished
// (intact or not), else why it died. The HDF5 library can crash on damaged internal structures
// (seen: a SIGSEGV in its global heap reader on a few changed bytes), so every reader of an
// existing file (check, recover, --resume, merge, worker files) probes it before opening it
// in-process: a crash becomes a report of damage, never a crash of kvlab.
std::string probe_result_file(const std::string& path);

class ResultFile {
 public:
  // A new file: an error if `path` exists or cannot be created.
  static std::unique_ptr<ResultFile> create(const std::string& path, const RunMeta& meta,
                                            h5::DurableFile::Options opt);
  // An existing file, for --resume: recovers an interrupted commit, checks the schema and
  // verifies every checksum (ResultFileError naming the damage; the file untouched).
  static std::unique_ptr<ResultFile> open(const std::string& path, h5::DurableFile::Options opt,
                                          h5::Recovery* recovery = nullptr);
  // Throws ResultFileError unless `f` is a kvlab result file of a readable schema version.
  static void check_schema(const h5::File& f, const std::string& path);
  static int64_t schema_version(const h5::File& f);

  // Declares the columns of every bench of the sweep (before its first point).
  void declare(const std::vector<const Bench*>& benches);
  // Keys of the points already in the file (any status).
  std::set<std::string> finished_keys() const;
  int64_t rows() const { return static_cast<int64_t>(index_.rows()); }
  // The identity stored in the file.
  std::optional<SweepIdentity> identity() const;

  // Starts a /runs row for this invocation (committed). Its run id and seed go into every
  // row this invocation writes.
  void begin_run(const RunMeta& meta, bool resumed);
  void set_ceilings(double read_bytes_per_s, double copy_bytes_per_s);
  // Appends the point's index row and group and commits them together; `kind` is the
  // point's bench (its axes type the index columns).
  void write_point(const Point& p, const Bench& kind, const Record& r);
  // Closes this invocation's /runs row (committed).
  void end_run(int64_t points_run, int64_t points_failed);

  h5::File& file() { return durable_->file(); }
  const std::string& path() const { return durable_->path(); }
  const h5::DurableFile::Stats& io_stats() const { return durable_->stats(); }

 private:
  ResultFile() = default;
  void ensure_column(const std::string& name, h5::Type type, const std::string& unit,
                     const std::string& doc);

  std::unique_ptr<h5::DurableFile> durable_;
  h5::Table index_;
  h5::Table runs_;
  int64_t run_row_ = -1;
  std::string run_id_;
  int64_t sweep_seed_ = 0;
};

// Writes one point's facts and traces into `g` (also used by merge).
void write_point_group(h5::Group& g, const Point& p, const Record& r,
                       const std::vector<const Bench*>& benches);

}  // namespace kvlab::exp
