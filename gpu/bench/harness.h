// harness.h: the CUDA timing harness (host-includable: no device code here).
//
// How a kernel is timed (gpu/README.md, "Measuring"):
//   - CUDA events around each launch on one stream, after `warmup` untimed launches;
//   - cold L2: before every timed launch a flush kernel writes a buffer of max(2 x L2,
//     64 MiB) (the events bracket only the measured launch), so every launch reads its
//     bytes from DRAM; without cold_l2 the launches run back to back (warm L2);
//   - repetition until the relative IQR (IQR / median) is at most target_rel_iqr, with at
//     least min_reps and at most max_reps samples or max_seconds of wall time;
//   - reported: median, quartiles, IQR, min, mean and every sample;
//   - CUDA-graph replay (graph = true) for launch-bound points: `graph_calls` launches are
//     captured into one graph; each sample is one replay divided by graph_calls (warm L2:
//     a flush inside the graph would be timed too).
// Ceilings, measured on the device in the same run: a large sequential read (16-byte
// loads, grid-stride, a reduction kept live so nothing is optimized away) and a
// device-to-device copy counting read + write bytes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvlab::gpu::bench {

struct TimingOptions {
  int warmup = 3;
  int min_reps = 10;
  int max_reps = 200;
  double target_rel_iqr = 0.02;
  double max_seconds = 2.0;
  bool cold_l2 = true;
  bool graph = false;
  int graph_calls = 20;
};

struct Timing {
  double median_us = 0, q1_us = 0, q3_us = 0, iqr_us = 0, rel_iqr = 0;
  double min_us = 0, mean_us = 0;
  int reps = 0;
  bool converged = false;  // rel_iqr reached the target
  bool cold_l2 = false;
  bool graph = false;
  std::vector<float> samples_us;
};

// Times `launch` (which enqueues the work once on the given stream). Throws
// kvlab::CudaError on CUDA failures (including a launch error inside `launch`).
Timing time_kernel(const std::function<void(cudaStream_t)>& launch, const TimingOptions& opt,
                   cudaStream_t stream = nullptr);

// Summary statistics of samples (also used by tests and the CPU side).
Timing summarize(std::vector<float> samples_us, double target_rel_iqr);

struct Ceilings {
  uint64_t bytes = 0;           // buffer size used
  double read_bytes_per_s = 0;  // sequential read
  double copy_bytes_per_s = 0;  // device-to-device copy, (read + write) / time
  Timing read, copy;
};

// Measures both ceilings with buffers of `bytes` (0: min(1 GiB, free memory / 4)).
Ceilings measure_ceilings(const TimingOptions& opt, uint64_t bytes = 0);

}  // namespace kvlab::gpu::bench
