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
// Validation before timing: a copy's destination equals its source (the whole buffer up to
// 64 MiB, else its first and last 16 MiB); a read has no output (its loads are kept live
// through a never-taken store).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "experiments/kinds/kinds.h"
#include "reference/core/error.h"

#if defined(KVLAB_HAVE_CUDA)
#include "experiments/run/gpu_hooks.h"
#include "gpu/bench/harness.h"
#include "gpu/core/cuda_check.h"
#include "gpu/core/device_buffer.h"
#endif

namespace kvlab::exp {
namespace {

constexpr int64_t kMaxMib = 1 << 16;             // 64 GiB: larger is a typo
constexpr uint64_t kWholeCheckBytes = 64 << 20;  // copies up to this size: compared whole
constexpr uint64_t kEdgeCheckBytes = 16 << 20;   // else: the first and last 16 MiB

#if defined(KVLAB_HAVE_CUDA)
gpu::bench::MemKernel kernel_of(const Point& p) {
  gpu::bench::MemKernel k;
  k.op = p.str("op") == "copy" ? gpu::bench::MemOp::kCopy : gpu::bench::MemOp::kRead;
  const std::string& l = p.str("load");
  k.load = l == "cg"       ? gpu::bench::MemLoad::kCg
           : l == "nc"     ? gpu::bench::MemLoad::kNc
           : l == "memcpy" ? gpu::bench::MemLoad::kMemcpy
                           : gpu::bench::MemLoad::kPlain;
  k.depth = static_cast<int>(p.integer("depth"));
  k.blocks_per_sm = static_cast<int>(p.integer("blocks_per_sm"));
  return k;
}

// Bytes of [off, off + n) that differ between two device buffers.
int64_t differing(const gpu::DeviceBuffer& a, const gpu::DeviceBuffer& b, uint64_t off,
                  uint64_t n) {
  std::vector<uint8_t> ha(n), hb(n);
  KVLAB_CUDA_CHECK(cudaMemcpy(ha.data(), a.as<uint8_t>() + off, n, cudaMemcpyDeviceToHost));
  KVLAB_CUDA_CHECK(cudaMemcpy(hb.data(), b.as<uint8_t>() + off, n, cudaMemcpyDeviceToHost));
  int64_t d = 0;
  for (uint64_t i = 0; i < n; ++i) d += ha[i] != hb[i];
  return d;
}
#endif

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
         {"cg", "plain", "nc", "memcpy"},
         "16-byte loads: cg (ld.global.cg, allocating in L2 only: depth 4 is the flush kernel), "
         "plain (ld.global; copies: + st.global), nc (ld.global.nc); memcpy: cudaMemcpyAsync "
         "(copies)"},
        {"depth", AxisType::kInt, "4", {}, "16-byte loads in flight per thread (kernels)"},
        {"blocks_per_sm", AxisType::kInt, "0", {}, "blocks per SM (0: as many as fit)"},
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
    if (p.integer("depth") < 0 || p.integer("blocks_per_sm") < 0)
      throw InvalidArgument("depth and blocks_per_sm must be >= 0, got " + p.str("depth") +
                            " and " + p.str("blocks_per_sm"));
  }
  std::string unsupported_reason(const Point& p, const RunContext&) const override {
#if defined(KVLAB_HAVE_CUDA)
    return gpu::bench::mem_kernel_unsupported(kernel_of(p));
#else
    (void)p;
    return "";
#endif
  }
  double estimate_seconds(const Point& p, const RunContext& ctx) const override {
    const double bytes = static_cast<double>(p.integer("mib")) * (1 << 20);
    return 0.05 + std::min(ctx.timing_cfg.max_seconds, 30 * (bytes / 2.5e12 + 1e-4));
  }
  Record run(const Point& p, RunContext& ctx) override {
#if defined(KVLAB_HAVE_CUDA)
    const gpu::bench::MemKernel k = kernel_of(p);
    const uint64_t bytes = static_cast<uint64_t>(p.integer("mib")) << 20;
    const bool copy = k.op == gpu::bench::MemOp::kCopy;
    size_t free_b = 0, total_b = 0;
    KVLAB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    if ((copy ? 2.0 : 1.0) * static_cast<double>(bytes) > 0.8 * static_cast<double>(free_b))
      throw Unsupported("the buffers need " + std::to_string((copy ? 2 : 1) * (bytes >> 20)) +
                        " MiB of device memory, " + std::to_string(free_b >> 20) +
                        " MiB are free");
    gpu::DeviceBuffer src(bytes), dst(copy ? bytes : 16), sink(4);
    gpu::bench::fill_words(src.data(), bytes);
    Record r;
    if (copy) {
      dst.fill_bytes(0xFF);
      gpu::bench::launch_mem_kernel(k, src.data(), dst.data(), bytes, sink.as<unsigned int>(),
                                    nullptr);
      KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
      int64_t diff = 0;
      uint64_t checked = 0;
      if (bytes <= kWholeCheckBytes) {
        diff = differing(src, dst, 0, bytes);
        checked = bytes;
      } else {
        diff = differing(src, dst, 0, kEdgeCheckBytes) +
               differing(src, dst, bytes - kEdgeCheckBytes, kEdgeCheckBytes);
        checked = 2 * kEdgeCheckBytes;
      }
      r.metric("differing_bytes", static_cast<double>(diff));
      r.metric("checked_bytes", static_cast<double>(checked));
      if (diff > 0) {
        r.status = Status::kFailed;
        r.reason = std::to_string(diff) + " of " + std::to_string(checked) +
                   " checked destination bytes differ from the source";
        return r;
      }
    }
    if (!ctx.timing) return r;
    const gpu::bench::Timing t = gpu::bench::time_kernel(
        [&](cudaStream_t s) {
          gpu::bench::launch_mem_kernel(k, src.data(), dst.data(), bytes, sink.as<unsigned int>(),
                                        s);
        },
        to_harness(ctx.timing_cfg, false));
    record_timing(&r, t,
                  {(copy ? 2.0 : 1.0) * static_cast<double>(bytes),
                   copy ? CeilingKind::kCopy : CeilingKind::kRead},
                  ctx);
    r.label("kernel", k.name());
    return r;
#else
    (void)p;
    (void)ctx;
    throw Unsupported("built without CUDA");
#endif
  }
};

}  // namespace

std::unique_ptr<Bench> make_bandwidth_bench() {
  return std::make_unique<BandwidthBench>();
}

}  // namespace kvlab::exp
