// Diagnostic (not committed): the cold 1 MiB read timed 40 times in a row by gpu/bench's
// time_kernel with its own per-call stream (stream = nullptr), then 40 times on one reused
// non-blocking stream, then 40 more with per-call streams: does the per-call stream's time drift?
#include <cstdio>
#include <cuda_runtime.h>
#include "gpu/bench/harness.h"
using namespace kvlab::gpu::bench;
int main() {
  const size_t bytes = size_t{1} << 20;
  void* src = nullptr; unsigned int* sink = nullptr;
  cudaMalloc(&src, size_t{16} << 20); cudaMalloc(&sink, 4);
  fill_words(src, size_t{16} << 20); cudaDeviceSynchronize();
  kvlab::TimingOptions o; o.warmup = 5; o.min_reps = 50; o.max_reps = 400; o.target_rel_iqr = 0.01;
  o.max_seconds = 1.0; o.cold_l2 = true;
  MemKernel rd; rd.op = MemOp::kRead; rd.load = MemLoad::kCg; rd.depth = 4; rd.blocks_per_sm = 8;
  cudaStream_t nb; cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking);
  const char* names[] = {"per_call_stream", "reused_stream", "per_call_stream_again", "reused_stream_16MiB", "per_call_stream_16MiB"};
  for (int phase = 0; phase < 5; ++phase) {
    const size_t b = phase >= 3 ? (size_t{16} << 20) : bytes;
    std::printf("[drift] %s:", names[phase]);
    for (int i = 0; i < (phase >= 3 ? 20 : 40); ++i) {
      kvlab::Timing t = time_kernel([&](cudaStream_t s) { launch_mem_kernel(rd, src, nullptr, b, sink, s); }, o,
                                    (phase == 1 || phase == 3) ? nb : nullptr);
      std::printf(" %.3f", t.median_us);
    }
    std::printf("\n");
  }
  return 0;
}
