// bandwidth.cpp: the GPU half of the kind "bandwidth" (declared in
// experiments/kinds/bandwidth.cpp; the entries in experiments/device/device.h).
#include <cstdint>
#include <vector>

#include "experiments/cuda/timing.h"
#include "experiments/device/device.h"
#include "gpu/bench/harness.h"
#include "gpu/core/cuda_check.h"
#include "gpu/core/device_buffer.h"
#include "gpu/core/device_info.h"
#include "gpu/core/device_tables.h"
#include "reference/core/error.h"

namespace kvlab::exp {
namespace {

constexpr uint64_t kWholeCheckBytes = 64 << 20;  // copies up to this size: compared whole
constexpr uint64_t kEdgeCheckBytes = 16 << 20;   // else: the first and last 16 MiB

gpu::bench::MemKernel kernel_of(const Point& p) {
  gpu::bench::MemKernel k;
  k.op = p.str("op") == "copy" ? gpu::bench::MemOp::kCopy : gpu::bench::MemOp::kRead;
  const std::string& l = p.str("load");
  k.load = l == "cg"       ? gpu::bench::MemLoad::kCg
           : l == "nc"     ? gpu::bench::MemLoad::kNc
           : l == "memcpy" ? gpu::bench::MemLoad::kMemcpy
           : l == "bulk"   ? gpu::bench::MemLoad::kBulk
                           : gpu::bench::MemLoad::kPlain;
  k.depth = static_cast<int>(p.integer("depth"));
  k.blocks_per_sm = static_cast<int>(p.integer("blocks_per_sm"));
  k.chunk_kib = static_cast<int>(p.integer("chunk_kib"));
  k.ranges = p.str("order") == "ranges";
  k.granule = p.str("order") == "scatter" ? static_cast<int>(p.integer("granule")) : 0;
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

}  // namespace

std::string bandwidth_kernel_unsupported(const Point& p) {
  return gpu::bench::mem_kernel_unsupported(kernel_of(p));
}

Record run_bandwidth(const Point& p, RunContext& ctx) {
  const gpu::bench::MemKernel k = kernel_of(p);
  const uint64_t bytes = static_cast<uint64_t>(p.integer("mib")) << 20;
  const bool copy = k.op == gpu::bench::MemOp::kCopy;
  gpu::require_free_memory((copy ? 2.0 : 1.0) * static_cast<double>(bytes), 0.8,
                           copy ? "the copy's source and destination" : "the read buffer");
  gpu::DeviceBuffer src(bytes), dst(copy ? bytes : 16), sink(4);
  gpu::bench::fill_words(src.data(), bytes);
  // Scattered reads: the granules' order, one seeded permutation made by the function that
  // makes decode's page tables, before timing (its index words are read by the kernel and
  // counted in the row's bytes).
  const uint64_t granules = gpu::bench::scatter_granules(k, bytes);
  gpu::DeviceBuffer order(granules * 4 + 4);
  if (granules > 0)
    gpu::shuffled_page_list(static_cast<int64_t>(granules), ctx.seed ^ 0x5ca77e4ull,
                            order.as<int32_t>(), nullptr);
  const int32_t* ord = granules > 0 ? order.as<int32_t>() : nullptr;
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
  const Timing t = gpu::bench::time_kernel(
      [&](cudaStream_t s) {
        gpu::bench::launch_mem_kernel(k, src.data(), dst.data(), bytes, sink.as<unsigned int>(), s,
                                      ord);
      },
      to_harness(ctx.timing_cfg, false));
  const TimedBytes moved = {
      (copy ? 2.0 : 1.0) * static_cast<double>(bytes) + 4.0 * static_cast<double>(granules),
      copy ? CeilingKind::kCopy : CeilingKind::kRead};
  // A contiguous kernel (validated above) over a working set far above L2 is a ceiling row: it
  // raises the run's R or C when it beats it, rather than being judged by it (bench.h).
  if (k.granule == 0) raise_run_ceiling(t, moved, &ctx, nullptr);
  record_timing(&r, t, moved, ctx);
  r.label("kernel", k.name());
  return r;
}

}  // namespace kvlab::exp
