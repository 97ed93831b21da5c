// launch_floor.cpp: the GPU half of the kind "launch_floor" (declared in
// experiments/kinds/launch_floor.cpp; the kernels in gpu/bench/launch_floor.h).
#include "experiments/cuda/timing.h"
#include "experiments/device/device.h"
#include "gpu/bench/harness.h"
#include "gpu/bench/launch_floor.h"

namespace kvlab::exp {

Record run_launch_floor(const Point& p, RunContext& ctx) {
  gpu::bench::FloorKernel k;
  k.chain = static_cast<int>(p.integer("chain"));
  k.tail = p.integer("tail_kib") > 0;
  const std::string& primed = p.str("primed");
  const gpu::bench::FloorPrime prime = primed == "lines"       ? gpu::bench::FloorPrime::kLines
                                       : primed == "pages"     ? gpu::bench::FloorPrime::kPages
                                       : primed == "elsewhere" ? gpu::bench::FloorPrime::kElsewhere
                                                               : gpu::bench::FloorPrime::kNone;
  gpu::bench::LaunchFloorCase c(k, point_seed(ctx, p));
  Record r;
  const std::string wrong = c.validate();
  if (!wrong.empty()) {
    r.status = Status::kFailed;
    r.reason = "validation failed: " + wrong;
    return r;
  }
  if (!ctx.timing) return r;
  const gpu::bench::TimingOptions opt =
      to_harness(ctx.timing_cfg, p.str("graph") == "on" || ctx.timing_cfg.graph);
  gpu::bench::Timing t = gpu::bench::time_kernel(
      [&](cudaStream_t s) { c.launch(s); }, opt,
      opt.cold_l2 ? gpu::bench::L2Flush::kReadAllocate : gpu::bench::L2Flush::kNone, 0, nullptr,
      [&](cudaStream_t s) { c.prime(prime, s); });
  // Lines-primed: the call's bytes are in L2 by construction, whatever the flush did.
  if (prime == gpu::bench::FloorPrime::kLines) t.cold_l2 = false;
  record_timing(&r, t, {c.bytes(), CeilingKind::kRead}, ctx);
  r.label("primed", primed == "lines"   ? "after the flush, the call's words and page read "
                                          "(L2 and TLB warm)"
                    : primed == "pages" ? "after the flush, a word 32 KiB away in each page read "
                                          "(TLB warm, lines cold)"
                    : primed == "elsewhere"
                        ? "after the flush, as many reads of another allocation "
                          "(a kernel in between, nothing of the call warm)"
                        : "nothing: the call starts on the flush's state");
  return r;
}

}  // namespace kvlab::exp
