// Diagnostic (not committed): the same cold read / copy timed by gpu/bench on four stream kinds,
// rounds interleaved, to test whether the stream kind moves a launch-bound time.
#include <cstdio>
#include <cuda_runtime.h>
#include "gpu/bench/harness.h"
using namespace kvlab::gpu::bench;
int main() {
  const size_t max_bytes = size_t{256} << 20;
  void *src = nullptr, *dst = nullptr; unsigned int* sink = nullptr;
  cudaMalloc(&src, max_bytes); cudaMalloc(&dst, max_bytes); cudaMalloc(&sink, 4);
  fill_words(src, max_bytes); cudaDeviceSynchronize();
  kvlab::TimingOptions o; o.warmup = 5; o.min_reps = 50; o.max_reps = 400; o.target_rel_iqr = 0.01;
  o.max_seconds = 1.0; o.cold_l2 = true;
  cudaStream_t blocking; cudaStreamCreate(&blocking);
  cudaStream_t nb; cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking);
  struct K { const char* name; cudaStream_t s; } kinds[] = {
      {"own_nonblocking(harness default)", nullptr}, {"legacy_default", cudaStreamLegacy},
      {"per_thread_default", cudaStreamPerThread}, {"created_blocking", blocking}, {"created_nonblocking", nb}};
  MemKernel rd; rd.op = MemOp::kRead; rd.load = MemLoad::kCg; rd.depth = 4; rd.blocks_per_sm = 8;
  MemKernel cp; cp.op = MemOp::kCopy; cp.load = MemLoad::kMemcpy;
  for (int round = 0; round < 4; ++round)
    for (size_t mib : {1, 4, 16})
      for (const K& k : kinds)
        for (int op = 0; op < 2; ++op) {
          if (op == 1 && mib != 4) continue;
          const MemKernel& m = op ? cp : rd;
          const uint64_t bytes = uint64_t{mib} << 20;
          kvlab::Timing t = time_kernel([&](cudaStream_t s) { launch_mem_kernel(m, src, dst, bytes, sink, s); }, o, k.s);
          std::printf("[stream_kind] round %d %s %2zu MiB %-34s median %.3f us iqr %.3f reps %d\n", round,
                      op ? "copy_memcpy" : "read_cg_d4_b8", mib, k.name, t.median_us, t.rel_iqr, t.reps);
        }
  return 0;
}
