// bandwidth.cpp: bench "bandwidth": one bandwidth kernel of gpu/bench (a read of a buffer or
// a device-to-device copy) over a working set of `mib` MiB, timed by the harness like every
// other GPU point. Two uses:
//   - the ceilings as rows: the kernels the run's read ceiling R and copy ceiling C are the
//     best of (gpu::bench::ceiling_kernels), each with its bandwidth and % of the ceiling, so
//     a result file shows what R is and that it is the best of them;
//   - the two-timer cross-check: the same operation timed from C++ here and from Python by
//     experiments/peers/peer_timer.py (read, load cg, depth 4 is exactly the L2-flush kernel of
//     gpu/bench/l2_flush.cuh, which the Python timer compiles too; copy, load memcpy is
//     cudaMemcpyAsync, which torch's copy_ issues).
//   - the scattered-granule reads (order scatter): the buffer read as granules of `granule`
//     bytes in one seeded random permutation, the ceiling of a paged read with small pages
//     (R_scatter(G), gpu/bench/scatter_read.cuh); their bytes count the order's index words.
//     They are rows only, never candidates of R.
// The contiguous rows at working sets of 8 x L2 and more are the run's ceiling rows: one that beats
// the ceilings pass raises the run's R (C) rather than fail (experiments/bench/bench.h).
// Validation before timing (experiments/cuda/bandwidth.cpp, the GPU half): a copy's destination
// equals its source (the whole buffer up to 64 MiB, else its first and last 16 MiB); a read has no
// output (its loads are kept live through a never-taken store).
#include <algorithm>
#include <string>
#include <vector>

#include "experiments/device/device.h"
#include "experiments/kinds/kinds.h"
#include "reference/core/error.h"

namespace kvlab::exp {
namespace {

constexpr int64_t kMaxMib = 1 << 16;  // 64 GiB: larger is a typo

class BandwidthBench : public Bench {
 public:
  std::string name() const override { return "bandwidth"; }
  std::string summary() const override {
    return "GPU read / copy bandwidth kernels (the ceilings' candidates; the two-timer "
           "cross-check's reference operations), timed by the harness";
  }
  bool needs_gpu() const override { return true; }
  std::vector<AxisSpec> axes() const override {
    return {
        {"op", AxisType::kEnum, "read", {"read", "copy"}, "read a buffer, or copy it to another"},
        {"load",
         AxisType::kEnum,
         "nc",
         {"cg", "plain", "nc", "memcpy", "bulk"},
         "16-byte loads: cg (ld.global.cg, allocating in L2 only: depth 4 is the flush kernel), "
         "plain (ld.global; copies: + st.global), nc (ld.global.nc); memcpy: cudaMemcpyAsync "
         "(copies); bulk: cp.async.bulk global -> shared on an mbarrier (reads)"},
        {"depth",
         AxisType::kInt,
         "4",
         {},
         "16-byte loads in flight per thread (kernels); bulk: copies in flight per block"},
        {"blocks_per_sm", AxisType::kInt, "0", {}, "blocks per SM (0: as many as fit; bulk: 1)"},
        {"chunk_kib",
         AxisType::kInt,
         "0",
         {},
         "bulk reads: KiB per copy (a power of two in [1, 64]); 0 for the other loads"},
        {"order",
         AxisType::kEnum,
         "interleaved",
         {"interleaved", "ranges", "scatter"},
         "bulk reads: blocks interleave chunk by chunk, or each streams its own contiguous range; "
         "scatter: reads (nc, plain or bulk) of granules of `granule` bytes in one seeded random "
         "order (the permutation decode's page tables use), each byte once"},
        {"granule",
         AxisType::kInt,
         "0",
         {},
         "order scatter: bytes per granule (a multiple of 16, at most the working set; 256 is "
         "one d128 BF16 K or V row, a page of block_size 1); 0 for the other orders"},
        {"mib", AxisType::kInt, "1024", {}, "working set: MiB read (copies: read and written)"},
    };
  }
  std::vector<MetricSpec> metrics() const override {
    std::vector<MetricSpec> m = {
        {"differing_bytes", "", "copies: checked destination bytes unequal to the source"},
        {"checked_bytes", "", "copies: destination bytes compared with the source"}};
    for (auto& t : timing_metric_specs(CeilingKind::kRead)) m.push_back(std::move(t));
    for (auto& t : timing_metric_specs(CeilingKind::kCopy))
      if (t.name == "pct_copy_ceiling") m.push_back(std::move(t));
    return m;
  }
  void check_point(const Point& p) const override {
    if (p.integer("mib") < 1 || p.integer("mib") > kMaxMib)
      throw InvalidArgument("mib must be in [1, " + std::to_string(kMaxMib) + "], got " +
                            p.str("mib"));
    const int64_t g = p.integer("granule");
    if (p.str("order") == "scatter") {
      if (g <= 0 || g % 16 != 0)
        throw InvalidArgument("order scatter needs granule a positive multiple of 16 bytes, got " +
                              p.str("granule"));
      if (g > p.integer("mib") << 20)
        throw InvalidArgument("granule " + p.str("granule") + " bytes exceeds the working set of " +
                              p.str("mib") + " MiB");
      if (((p.integer("mib") << 20) / 16) >= (int64_t{1} << 32))
        throw InvalidArgument(
            "order scatter reads fewer than 2^32 16-byte vectors (mib < 65536), "
            "got mib " +
            p.str("mib"));
    } else if (g != 0) {
      throw InvalidArgument("granule is for order scatter only, got granule " + p.str("granule") +
                            " with order " + p.str("order"));
    }
    if (p.integer("depth") < 0 || p.integer("blocks_per_sm") < 0 || p.integer("chunk_kib") < 0)
      throw InvalidArgument("depth, blocks_per_sm and chunk_kib must be >= 0, got " +
                            p.str("depth") + ", " + p.str("blocks_per_sm") + " and " +
                            p.str("chunk_kib"));
  }
  std::string unsupported_reason(const Point& p, const RunContext&) const override {
    return bandwidth_kernel_unsupported(p);
  }
  double estimate_seconds(const Point& p, const RunContext& ctx) const override {
    const double bytes = static_cast<double>(p.integer("mib")) * (1 << 20);
    return 0.05 + std::min(ctx.timing_cfg.max_seconds, 30 * (bytes / 2.5e12 + 1e-4));
  }
  Record run(const Point& p, RunContext& ctx) override { return run_bandwidth(p, ctx); }
};

}  // namespace

std::unique_ptr<Bench> make_bandwidth_bench() {
  return std::make_unique<BandwidthBench>();
}

}  // namespace kvlab::exp
