// point_writer.cpp: see point_writer.h.
#include "experiments/run/point_writer.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iomanip>
#include <ostream>

#include "experiments/bench/kind_list.h"
#include "experiments/device/device.h"
#include "reference/core/error.h"

namespace kvlab::exp {
namespace {

Record run_one(Bench& b, const Point& p, RunContext& ctx) {
  if (b.needs_gpu() && !ctx.device_present) {
    return Record::skipped(built_with_cuda() ? "no device" : "built without CUDA");
  }
  try {
    const std::string why = b.unsupported_reason(p, ctx);
    if (!why.empty()) return Record::skipped(why);
    return b.run(p, ctx);
  } catch (const Unsupported& e) {
    return Record::skipped(e.what());
  } catch (const std::exception& e) {
    return Record::failed(e.what());
  }
}

std::string megabytes(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  return buf;
}

}  // namespace

double estimate_point(const KindList& kinds, const Point& p, const RunContext& ctx) {
  Bench& b = kinds.find(p.kind);
  if (b.needs_gpu() && !ctx.device_present) return 1e-3;
  return b.estimate_seconds(p, ctx);
}

PointWriter::PointWriter(const SweepSpec& spec, const SweepIdentity& id, const SweepOptions& opt,
                         const std::string& out, const std::string& shard, int64_t planned,
                         std::ostream& log)
    : kinds_(*opt.kinds), prefix_(opt.log_prefix), log_(log) {
  ctx_.seed = spec.seed;
  ctx_.timing = opt.timing;
  ctx_.timing_cfg = spec.timing;
  ctx_.cpu_threads = std::max(1, opt.cpu_threads);
  probe_device(&ctx_);

  meta_.argv = opt.argv;
  meta_.config_path = spec.path;
  meta_.config_text = spec.text;
  meta_.sweep_name = spec.name;
  meta_.fingerprint = id.points_fingerprint;
  meta_.shard = shard;
  meta_.points_planned = planned;
  meta_.identity = id;
  meta_.run_id = new_run_id();

  h5::DurableFile::Options dopt;
  dopt.fsync = opt.fsync;
  dopt.protocol = opt.commit;
  if (access(out.c_str(), F_OK) == 0) {
    if (!opt.resume)
      throw ResultFileError(out + " exists: use --resume to continue it, or another --out");
    h5::Recovery rec = h5::Recovery::kNone;
    rf_ = ResultFile::open(out, dopt, &rec);
    if (rec != h5::Recovery::kNone) log_ << prefix_ << "[resume] " << out << ": " << h5::to_string(rec) << "\n";
    const auto have = rf_->identity();
    const std::string diff =
        have ? identity_difference(*have, id, out, "this run") : std::string("  no identity\n");
    if (!diff.empty()) {
      if (!opt.allow_mixed)
        throw ResultFileError(out + " holds another sweep than this run (its identity " +
                              (have ? have->digest() : std::string("-")) + ", this run's " +
                              id.digest() + "):\n" + diff +
                              "nothing was written; resume with the same config, --only, --axis "
                              "and --seed, write a new file, or give --allow-mixed to run only the "
                              "points the file lacks (the rows already in it stay as they ran; "
                              "each row records its run_id and sweep_seed)");
      log_ << prefix_ << "[resume] --allow-mixed: " << out
           << " holds another sweep; running only the points it lacks:\n"
           << diff;
      rf_->file().set_attr("identity_mixed", int64_t{1});
      seal_root(rf_->file());
    }
    resumed_ = true;
  } else {
    rf_ = ResultFile::create(out, meta_, dopt);
  }
  std::vector<const Bench*> kinds;
  std::set<std::string> seen;
  for (const auto& st : spec.studies)
    if (seen.insert(st.kind).second) kinds.push_back(&kinds_.find(st.kind));
  rf_->declare(kinds);
  finished_ = rf_->finished_keys();
}

PointWriter::~PointWriter() = default;

void PointWriter::begin(const std::vector<const Point*>& todo) {
  rf_->begin_run(meta_, resumed_);
  bool need_gpu = false;
  for (const Point* p : todo) need_gpu |= kinds_.find(p->kind).needs_gpu();
  if (need_gpu && ctx_.device_present && ctx_.timing) {
    std::string note;
    if (measure_ceilings(&ctx_, &note)) {
      // The pass's own figures stay beside the run's R and C, which the run's ceiling rows
      // may raise (bench.h raise_run_ceiling); set_ceilings seals and commits both.
      rf_->file().set_attr("ceilings_pass_read_bytes_per_s", ctx_.pass_read_ceiling_bytes_per_s);
      rf_->file().set_attr("ceilings_pass_copy_bytes_per_s", ctx_.pass_copy_ceiling_bytes_per_s);
      rf_->set_ceilings(ctx_.read_ceiling_bytes_per_s, ctx_.copy_ceiling_bytes_per_s);
      log_ << prefix_ << "[ceilings] " << ctx_.device_name << ": read " << std::fixed
           << std::setprecision(1) << ctx_.read_ceiling_bytes_per_s / 1e9 << " GB/s, copy "
           << ctx_.copy_ceiling_bytes_per_s / 1e9 << " GB/s (datasheet "
           << ctx_.peak_bytes_per_s / 1e9 << " GB/s)\n"
           << std::defaultfloat;
    } else {
      log_ << prefix_ << "[ceilings] not measured: " << note << "\n";
    }
  }
}

Record PointWriter::run(const Point& p) {
  Bench& b = kinds_.find(p.kind);
  const auto t0 = std::chrono::steady_clock::now();
  const double read_before = ctx_.read_ceiling_bytes_per_s;
  const double copy_before = ctx_.copy_ceiling_bytes_per_s;
  Record r = run_one(b, p, ctx_);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // A ceiling row beat the run's R or C and raised it: the file's root attributes and this
  // run's /runs row hold the run's ceilings, so they follow at once (a killed run keeps them).
  // Rows already written keep the ceiling they were judged against (their ceiling_bytes_per_s).
  if (ctx_.read_ceiling_bytes_per_s != read_before ||
      ctx_.copy_ceiling_bytes_per_s != copy_before) {
    rf_->set_ceilings(ctx_.read_ceiling_bytes_per_s, ctx_.copy_ceiling_bytes_per_s);
    const bool read = ctx_.read_ceiling_bytes_per_s != read_before;
    log_ << prefix_ << "[ceilings] " << (read ? "read ceiling R" : "copy ceiling C") << " raised "
         << std::fixed << std::setprecision(1) << (read ? read_before : copy_before) / 1e9
         << " -> "
         << (read ? ctx_.read_ceiling_bytes_per_s : ctx_.copy_ceiling_bytes_per_s) / 1e9
         << " GB/s by " << p.key() << " (a cold contiguous " << (read ? "read" : "copy")
         << " of >= " << kCeilingRowMinL2Multiple << " x L2; ceilings pass "
         << (read ? ctx_.pass_read_ceiling_bytes_per_s : ctx_.pass_copy_ceiling_bytes_per_s) / 1e9
         << " GB/s)\n"
         << std::defaultfloat;
  }
  rf_->write_point(p, b, r);
  finished_.insert(p.key());
  return r;
}

void PointWriter::end(int64_t points_run, int64_t points_failed) {
  rf_->end_run(points_run, points_failed);
}

std::string PointWriter::io_summary(int64_t points) const {
  const h5::DurableFile::Stats& s = rf_->io_stats();
  const double total = static_cast<double>(s.data_bytes + s.journal_bytes);
  std::string line = std::to_string(s.commits) + " commits wrote " + megabytes(total) + " (" +
                     megabytes(static_cast<double>(s.data_bytes)) + " data, " +
                     megabytes(static_cast<double>(s.journal_bytes)) + " journal)";
  if (points > 0) {
    char b[64];
    std::snprintf(b, sizeof b, "; %.1f KB per point", total / 1e3 / static_cast<double>(points));
    line += b;
  }
  if (s.replaced > 0)
    line += "; " + std::to_string(s.replaced) +
            " commits rewrote the whole file because a reader held it open";
  return line;
}

}  // namespace kvlab::exp
