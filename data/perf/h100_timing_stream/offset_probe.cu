// Diagnostic: the cold 1 MiB read (the flush kernel, b8) timed by gpu/bench at offsets 0, 0.5, 1
// and 1.5 MiB into a 2 MiB-aligned buffer (straddling a 2 MiB page boundary or not), each 8
// times, rounds interleaved; and a fresh 1 MiB cudaMalloc per timing (as the sweep allocates per
// point), with its address.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#include "gpu/bench/harness.h"
using namespace kvlab::gpu::bench;
int main() {
  const size_t mib = size_t{1} << 20;
  void* raw = nullptr; unsigned int* sink = nullptr;
  cudaMalloc(&raw, 10 * mib); cudaMalloc(&sink, 4);
  char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + 2 * mib - 1) & ~(2 * mib - 1));
  fill_words(raw, 10 * mib); cudaDeviceSynchronize();
  kvlab::TimingOptions o; o.warmup = 5; o.min_reps = 50; o.max_reps = 400; o.target_rel_iqr = 0.01;
  o.max_seconds = 1.0; o.cold_l2 = true;
  MemKernel rd; rd.op = MemOp::kRead; rd.load = MemLoad::kCg; rd.depth = 4; rd.blocks_per_sm = 8;
  std::printf("[probe] base %% 2 MiB = %zu\n", (size_t)(reinterpret_cast<uintptr_t>(raw) % (2 * mib)));
  const size_t offs[] = {0, mib / 2, mib, 3 * mib / 2};
  for (int round = 0; round < 8; ++round) {
    std::printf("[probe] round %d:", round);
    for (size_t off : offs) {
      kvlab::Timing t = time_kernel([&](cudaStream_t s) { launch_mem_kernel(rd, base + off, nullptr, mib, sink, s); }, o);
      std::printf(" off %.1f MiB %.3f", off / double(mib), t.median_us);
    }
    void* fresh = nullptr; cudaMalloc(&fresh, mib); fill_words(fresh, mib);
    kvlab::Timing t = time_kernel([&](cudaStream_t s) { launch_mem_kernel(rd, fresh, nullptr, mib, sink, s); }, o);
    std::printf(" | fresh 1 MiB alloc at %% 2 MiB = %.2f MiB: %.3f\n", (reinterpret_cast<uintptr_t>(fresh) % (2 * mib)) / double(mib), t.median_us);
    cudaFree(fresh);
  }
  return 0;
}
