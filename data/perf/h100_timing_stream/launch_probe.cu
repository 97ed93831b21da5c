// Diagnostic: the cold 1 MiB read (the flush kernel, 256 blocks of 256 threads) timed by
// gpu/bench's time_kernel three ways in one process, rounds interleaved: (a) the runtime's
// <<<>>> launch of the kernel linked into kvlab_gpu (launch_mem_kernel), (b) cuLaunchKernel of
// the same source compiled by nvcc to a cubin and loaded with cuModuleLoad, (c) cuLaunchKernel of
// the cubin NVRTC makes of it (as the Python timer's CuPy RawModule does).
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include "gpu/bench/harness.h"
using namespace kvlab::gpu::bench;
#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { std::printf("driver error %d at %s\n", (int)r_, #x); return 1; } } while (0)
int main(int argc, char** argv) {
  const size_t bytes = size_t{1} << 20;
  void* src = nullptr; unsigned int* sink = nullptr;
  cudaMalloc(&src, bytes); cudaMalloc(&sink, 4); fill_words(src, bytes); cudaDeviceSynchronize();
  CUmodule mn, mr; CUfunction fn, fr;
  CK(cuModuleLoad(&mn, argv[1])); CK(cuModuleGetFunction(&fn, mn, "kvlab_l2_flush"));
  CK(cuModuleLoad(&mr, argv[2])); CK(cuModuleGetFunction(&fr, mr, "kvlab_l2_flush"));
  kvlab::TimingOptions o; o.warmup = 5; o.min_reps = 50; o.max_reps = 400; o.target_rel_iqr = 0.01;
  o.max_seconds = 1.0; o.cold_l2 = true;
  MemKernel rd; rd.op = MemOp::kRead; rd.load = MemLoad::kCg; rd.depth = 4; rd.blocks_per_sm = 8;
  unsigned long long n = bytes / 16;
  const void* p = src;
  void* args[] = {&p, &n, &sink};
  const unsigned grid = 256;  // min(n / 256 threads, 132 SMs x 8): what grid_for gives at 1 MiB
  for (int round = 0; round < 10; ++round) {
    double a = time_kernel([&](cudaStream_t s) { launch_mem_kernel(rd, src, nullptr, bytes, sink, s); }, o).median_us;
    double b = time_kernel([&](cudaStream_t s) { cuLaunchKernel(fn, grid, 1, 1, 256, 1, 1, 0, s, args, nullptr); }, o).median_us;
    double c = time_kernel([&](cudaStream_t s) { cuLaunchKernel(fr, grid, 1, 1, 256, 1, 1, 0, s, args, nullptr); }, o).median_us;
    std::printf("[launch] round %d: runtime <<<>>> %.3f us, driver nvcc cubin %.3f us, driver nvrtc cubin %.3f us\n", round, a, b, c);
  }
  return 0;
}
