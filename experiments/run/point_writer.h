// point_writer.h: one process writing sweep points into one result file: the part the
// single-process sweep and a worker (workers.h) share.
//
// Opening: a new file is created with the sweep's identity; an existing one (resume) is
// recovered, verified (every checksum) and its identity compared with this run's (a
// difference is ResultFileError spelling it out, unless allow_mixed). Running: each point is
// run, its record committed durably with the run id and seed, and returned.
#pragma once

#include <iosfwd>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "experiments/bench/bench.h"
#include "experiments/results/result_file.h"
#include "experiments/run/runner.h"

namespace kvlab::exp {

class PointWriter {
 public:
  // `shard`: the label stored in the file ("k/N", "worker"); `planned`: points it will hold.
  PointWriter(const SweepSpec& spec, const SweepIdentity& id, const SweepOptions& opt,
              const std::string& out, const std::string& shard, int64_t planned,
              std::ostream& log);
  ~PointWriter();

  const std::set<std::string>& finished() const { return finished_; }
  bool resumed() const { return resumed_; }
  int64_t rows() const { return rf_->rows(); }
  RunContext& context() { return ctx_; }

  // Starts this invocation's /runs row; measures the ceilings when a point of `todo` needs
  // the GPU and timing is on.
  void begin(const std::vector<const Point*>& todo);
  // Runs the point and commits its record (with r.seconds set).
  Record run(const Point& p);
  void end(int64_t points_run, int64_t points_failed);
  // "N commits, X MB written (Y KB per point)" for the log.
  std::string io_summary(int64_t points) const;

 private:
  const KindList& kinds_;
  std::unique_ptr<ResultFile> rf_;
  RunMeta meta_;
  RunContext ctx_;
  std::set<std::string> finished_;
  bool resumed_ = false;
  std::string prefix_;
  std::ostream& log_;
};

// The exact estimate a point's ETA starts from (no device: GPU points skip at once).
double estimate_point(const KindList& kinds, const Point& p, const RunContext& ctx);

}  // namespace kvlab::exp
