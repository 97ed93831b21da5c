// Diagnostic: gpu/bench's time_kernel of the cold 1 MiB read (the flush kernel, b8), callable
// from Python through ctypes, to time it inside a torch + CuPy process.
#include <cuda_runtime.h>
#include "gpu/bench/harness.h"
using namespace kvlab::gpu::bench;
extern "C" double kvlab_time_read_1mib() {
  static void* src = nullptr; static unsigned int* sink = nullptr;
  const size_t bytes = size_t{1} << 20;
  if (!src) { cudaMalloc(&src, bytes); cudaMalloc(&sink, 4); fill_words(src, bytes); cudaDeviceSynchronize(); }
  kvlab::TimingOptions o; o.warmup = 5; o.min_reps = 50; o.max_reps = 400; o.target_rel_iqr = 0.01;
  o.max_seconds = 1.0; o.cold_l2 = true;
  MemKernel rd; rd.op = MemOp::kRead; rd.load = MemLoad::kCg; rd.depth = 4; rd.blocks_per_sm = 8;
  return time_kernel([&](cudaStream_t s) { launch_mem_kernel(rd, src, nullptr, bytes, sink, s); }, o).median_us;
}
