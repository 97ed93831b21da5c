// timing.h: what a timing is and how it is taken: the options of the GPU timing harness and
// the statistics it reports. Plain C++ (no CUDA), here at the bottom of the layers so that the
// harness that takes timings (gpu/bench/harness.cu) and the driver that records them
// (experiments/bench/bench.h record_timing, a sweep's [timing] section) share one definition.
//
// The rules (the harness applies them; experiments/peers/peer_timer.py applies the same ones
// to the peers, so kvlab and its peers are timed alike):
//   - one stream for the flush, the two CUDA events and the timed call (the harness: the
//     process's timing stream, one non-blocking stream created once, unless the caller passes
//     one, every launch given that stream; the peer timer: the caller's current torch stream,
//     and it refuses a flush on another stream than its events; the stream kind does not
//     change a time: gpu/README.md, "Measuring"), after `warmup` untimed calls;
//   - the stream held (hold_stream): before each timed sample the stream is held by a one-thread
//     kernel (gpu/bench/l2_flush.cuh kvlab_hold_stream) that spins until the host has enqueued
//     the whole sample (flush, start event, call, stop event) and releases it through a word
//     of mapped host memory, so the events bracket the GPU's work only and never the host's
//     time to launch the call (nvbench's blocking kernel). Without it a call whose host part
//     outlasts the flush (PyTorch's cuDNN SDPA: 42-93 us of host time per call against a 102 us
//     flush on the H100, session 16) is timed with the GPU idle between the events, by a
//     different amount in each timing. A call that waits on its stream from the host (a
//     synchronizing copy) would wait for the hold: the hold gives up after KVLAB_HOLD_TIMEOUT_NS and
//     the timing is taken again without it (Timing::held false says so);
//   - cold L2 (cold_l2): before every call, warm-up included, the flush kernel of
//     gpu/bench/l2_flush.cuh reads a buffer of l2_flush_bytes(L2) with loads that allocate
//     in L2 (ld.global.cg). Reads leave clean lines, so no write-back of flush data lands in
//     the timed call, and the previous call's dirty lines are written back during the flush;
//   - repetition until the relative IQR (IQR / median) is at most target_rel_iqr, checked
//     once at least min_reps samples exist and then every 5 samples, stopping at max_reps
//     samples or after max_seconds of wall time;
//   - reported: median, quartiles (linear interpolation between order statistics, numpy's
//     default), IQR, min, mean and every sample;
//   - CUDA-graph replay (graph): cold -> a graph of ONE call, replayed after each flush (the
//     flush itself stays outside the graph, so the events bracket the replay only); warm
//     (cold_l2 off) -> a graph of graph_calls back-to-back calls, each sample one replay
//     divided by graph_calls. Rows say which (Timing::cold_l2, calls_per_sample).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace kvlab {

// The options of one timed configuration; a sweep's [timing] section sets them.
struct TimingOptions {
  int warmup = 3;
  int min_reps = 10;
  int max_reps = 200;
  double target_rel_iqr = 0.02;  // stop once IQR / median is at most this
  double max_seconds = 2.0;      // wall time per timed configuration
  bool cold_l2 = true;           // flush L2 before every call
  bool graph = false;            // CUDA-graph replay (launch-bound points)
  int graph_calls = 20;          // calls per replay when timing warm (cold: 1)
  bool hold_stream = true;       // hold the stream until each sample is enqueued (see above)
};

// How the L2 is emptied before a timed call.
enum class L2Flush {
  kNone,           // warm: nothing between calls
  kReadAllocate,   // the harness's flush: ld.global.cg reads of l2_flush_bytes(L2)
  kReadStreaming,  // ld.global.cs (evict-first) reads: leaves lines resident; the flush
                   // test's negative control only, never used for a result
  kSelf,           // no flush: the timed call itself streams several L2s of data between
                   // any two uses of a byte (e.g. a decode step's weights)
};

inline const char* to_string(L2Flush f) {
  switch (f) {
    case L2Flush::kNone:
      return "none";
    case L2Flush::kReadAllocate:
      return "read_allocate";
    case L2Flush::kReadStreaming:
      return "read_streaming";
    case L2Flush::kSelf:
      return "self";
  }
  return "?";
}

struct Timing {
  double median_us = 0, q1_us = 0, q3_us = 0, iqr_us = 0, rel_iqr = 0;
  double min_us = 0, mean_us = 0;
  int reps = 0;
  bool converged = false;  // rel_iqr reached the target
  // How it was timed.
  bool cold_l2 = false;      // no byte of the call was in L2 when it started
  bool graph = false;        // CUDA-graph replay
  int calls_per_sample = 1;  // calls bracketed by one pair of events (graph, warm: > 1)
  bool held = false;         // every sample's stream was held until the sample was enqueued
  L2Flush flush = L2Flush::kNone;
  uint64_t flush_bytes = 0;       // bytes the flush read before each call (0: none)
  uint64_t l2_bytes = 0;          // the device's L2 size
  std::vector<float> samples_us;  // per call
};

// Summary statistics of samples, with the same quantile rule as numpy.percentile's default.
inline Timing summarize(std::vector<float> samples, double target_rel_iqr) {
  Timing t;
  t.samples_us = samples;
  t.reps = static_cast<int>(samples.size());
  if (samples.empty()) return t;
  std::sort(samples.begin(), samples.end());
  auto q = [&](double p) {
    const double pos = p * static_cast<double>(samples.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(samples.size() - 1, lo + 1);
    return samples[lo] + (pos - static_cast<double>(lo)) * (samples[hi] - samples[lo]);
  };
  t.median_us = q(0.5);
  t.q1_us = q(0.25);
  t.q3_us = q(0.75);
  t.iqr_us = t.q3_us - t.q1_us;
  t.rel_iqr = t.median_us > 0 ? t.iqr_us / t.median_us : 0;
  t.min_us = samples.front();
  double sum = 0;
  for (float s : samples) sum += s;
  t.mean_us = sum / static_cast<double>(samples.size());
  t.converged = t.rel_iqr <= target_rel_iqr;
  return t;
}

// The stopping rule of the sampling loop, after n samples and `wall` seconds: true when
// the loop ends (converged, or out of samples or time).
inline bool sampling_done(const std::vector<float>& samples, double wall_seconds,
                          const TimingOptions& o, Timing* summary) {
  const int n = static_cast<int>(samples.size());
  const bool out = n >= o.max_reps || wall_seconds > o.max_seconds;
  if (n < o.min_reps || !(n % 5 == 0 || out)) return false;
  *summary = summarize(samples, o.target_rel_iqr);
  return summary->converged || out;
}

}  // namespace kvlab
