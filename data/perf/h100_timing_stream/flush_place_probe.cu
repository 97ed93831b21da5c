// Diagnostic: does the flush buffer's place relative to the timed buffer move a launch-bound
// cold time? The cold 1 MiB read (the flush kernel, 256 blocks), flushed (a) by the harness's own
// flusher, (b) by the same flush (200 MiB window rotating by 1088 KiB over 32 MiB more, the
// flush kernel on 132 x 8 blocks) from a buffer allocated just before the timed buffer, (c) from
// a buffer allocated 16 GiB of address space away, (d) from a buffer allocated just after it.
// Ten rounds, interleaved.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#include "gpu/bench/harness.h"
using namespace kvlab::gpu::bench;
int main() {
  const size_t mib = size_t{1} << 20, fl = 200 * mib, span = 32 * mib, step = 1088 * 1024;
  unsigned int* sink = nullptr; cudaMalloc(&sink, 4);
  void *f_before = nullptr, *x = nullptr, *f_after = nullptr, *gap = nullptr, *f_far = nullptr, *x_far = nullptr;
  cudaMalloc(&f_before, fl + span); cudaMalloc(&x, mib); cudaMalloc(&f_after, fl + span);
  cudaMalloc(&f_far, fl + span); cudaMalloc(&gap, size_t{16} << 30); cudaMalloc(&x_far, mib);
  for (void* p : {f_before, f_after, f_far}) fill_words(p, fl + span);
  fill_words(x, mib); fill_words(x_far, mib); cudaDeviceSynchronize();
  std::printf("[place] x %p, flush before %p, after %p; far: flush %p, x %p (gap %p)\n", x, f_before, f_after, f_far, x_far, gap);
  kvlab::TimingOptions o; o.warmup = 5; o.min_reps = 50; o.max_reps = 400; o.target_rel_iqr = 0.01;
  o.max_seconds = 1.0; o.cold_l2 = true;
  MemKernel rd; rd.op = MemOp::kRead; rd.load = MemLoad::kCg; rd.depth = 4; rd.blocks_per_sm = 8;
  auto own_flush = [&](void* f) {
    size_t k = 0;
    return [&, f, k](cudaStream_t s) mutable {
      const size_t off = (k++ * step) % span;
      launch_mem_kernel(rd, static_cast<char*>(f) + off, nullptr, fl, sink, s);
    };
  };
  for (int round = 0; round < 10; ++round) {
    auto timed = [&](void* buf) { return [&, buf](cudaStream_t s) { launch_mem_kernel(rd, buf, nullptr, mib, sink, s); }; };
    double a = time_kernel(timed(x), o).median_us;
    double b = time_kernel(timed(x), o, L2Flush::kNone, 0, nullptr, own_flush(f_before)).median_us;
    double c = time_kernel(timed(x_far), o, L2Flush::kNone, 0, nullptr, own_flush(f_far)).median_us;
    double d = time_kernel(timed(x), o, L2Flush::kNone, 0, nullptr, own_flush(f_after)).median_us;
    std::printf("[place] round %d: harness flusher %.3f us, flush buffer just before %.3f, 16 GiB away %.3f, just after %.3f\n", round, a, b, c, d);
  }
  return 0;
}
