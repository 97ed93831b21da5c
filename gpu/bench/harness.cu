// harness.cu: the CUDA timing harness and the bandwidth ceilings (see harness.h).
#include "gpu/bench/harness.h"

#include <thrust/device_vector.h>
#include <thrust/sequence.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "gpu/core/cuda_check.h"

namespace kvlab::gpu::bench {
namespace {

constexpr int kReadThreads = 256;
constexpr int kReadUnroll = 4;

// Sequential read of n 16-byte vectors. Each thread keeps kReadUnroll independent loads in
// flight per iteration (memory-level parallelism is what saturates HBM); the XOR of all
// loaded words stays live through a practically-never-taken store, so the compiler cannot
// drop the loads, and no write traffic competes with the reads.
__global__ void read_kernel(const uint4* __restrict__ p, size_t n,
                            unsigned int* __restrict__ sink) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned int acc = 0;
  for (; i + (kReadUnroll - 1) * stride < n; i += kReadUnroll * stride) {
    uint4 v[kReadUnroll];
#pragma unroll
    for (int u = 0; u < kReadUnroll; ++u)
      v[u] = __ldcs(p + i + u * stride);  // streaming: no L2 reuse intended
#pragma unroll
    for (int u = 0; u < kReadUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) sink[0] = acc;
}

int read_grid(size_t n) {
  int dev = 0, sms = 0, per_sm = 0;
  KVLAB_CUDA_CHECK(cudaGetDevice(&dev));
  KVLAB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  KVLAB_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, read_kernel, kReadThreads, 0));
  const size_t want = (n + kReadThreads - 1) / kReadThreads;
  return static_cast<int>(
      std::max<size_t>(1, std::min<size_t>(want, static_cast<size_t>(sms) * std::max(per_sm, 1))));
}

// A buffer of non-zero, distinct words (never time on zeros).
struct ReadBuffer {
  thrust::device_vector<unsigned int> words;
  thrust::device_vector<unsigned int> sink;
  explicit ReadBuffer(size_t bytes) : words(bytes / 4), sink(1) {
    thrust::sequence(words.begin(), words.end(), 1u);
  }
  const uint4* data() const {
    return reinterpret_cast<const uint4*>(thrust::raw_pointer_cast(words.data()));
  }
  size_t vecs() const { return words.size() / 4; }
  void read(cudaStream_t s) {
    const size_t n = vecs();
    read_kernel<<<read_grid(n), kReadThreads, 0, s>>>(data(), n,
                                                      thrust::raw_pointer_cast(sink.data()));
    KVLAB_CUDA_CHECK(cudaGetLastError());
  }
};

// Evicts the L2 by reading a buffer of twice its size (reads leave clean lines, so no
// write-back of flush data competes with the timed kernel).
class L2Flusher {
 public:
  L2Flusher() {
    int dev = 0, l2 = 0;
    KVLAB_CUDA_CHECK(cudaGetDevice(&dev));
    KVLAB_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    buf_ = std::make_unique<ReadBuffer>(
        std::max<size_t>(2 * static_cast<size_t>(l2), size_t{64} << 20));
  }
  void flush(cudaStream_t s) { buf_->read(s); }

 private:
  std::unique_ptr<ReadBuffer> buf_;
};

struct Event {
  cudaEvent_t e = nullptr;
  Event() { KVLAB_CUDA_CHECK(cudaEventCreate(&e)); }
  ~Event() {
    if (e) cudaEventDestroy(e);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

struct OwnedStream {
  cudaStream_t s = nullptr;
  bool owned = false;
  explicit OwnedStream(cudaStream_t given) : s(given) {
    // Graph capture needs a real stream, never the legacy default stream.
    if (!s) {
      KVLAB_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      owned = true;
    }
  }
  ~OwnedStream() {
    if (owned) cudaStreamDestroy(s);
  }
};

}  // namespace

Timing summarize(std::vector<float> samples, double target_rel_iqr) {
  Timing t;
  t.samples_us = samples;
  t.reps = static_cast<int>(samples.size());
  if (samples.empty()) return t;
  std::sort(samples.begin(), samples.end());
  // Quantiles by linear interpolation between order statistics (numpy's default).
  auto q = [&](double p) {
    const double pos = p * (samples.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(samples.size() - 1, lo + 1);
    return samples[lo] + (pos - lo) * (samples[hi] - samples[lo]);
  };
  t.median_us = q(0.5);
  t.q1_us = q(0.25);
  t.q3_us = q(0.75);
  t.iqr_us = t.q3_us - t.q1_us;
  t.rel_iqr = t.median_us > 0 ? t.iqr_us / t.median_us : 0;
  t.min_us = samples.front();
  double sum = 0;
  for (float s : samples) sum += s;
  t.mean_us = sum / samples.size();
  t.converged = t.rel_iqr <= target_rel_iqr;
  return t;
}

Timing time_kernel(const std::function<void(cudaStream_t)>& launch, const TimingOptions& opt,
                   cudaStream_t stream) {
  OwnedStream st(stream);
  cudaStream_t s = st.s;
  std::unique_ptr<L2Flusher> flusher;
  if (opt.cold_l2 && !opt.graph) flusher = std::make_unique<L2Flusher>();

  cudaGraphExec_t exec = nullptr;
  cudaGraph_t graph = nullptr;
  const int per_sample = opt.graph ? std::max(1, opt.graph_calls) : 1;
  if (opt.graph) {
    launch(s);  // one eager call first: lazy module loading must not happen inside capture
    KVLAB_CUDA_CHECK(cudaStreamSynchronize(s));
    KVLAB_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < per_sample; ++i) launch(s);
    KVLAB_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    KVLAB_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  }
  auto run_once = [&]() {
    if (exec)
      KVLAB_CUDA_CHECK(cudaGraphLaunch(exec, s));
    else
      launch(s);
    KVLAB_CUDA_CHECK(cudaGetLastError());
  };

  Event start, stop;
  for (int i = 0; i < opt.warmup; ++i) {
    if (flusher) flusher->flush(s);
    run_once();
  }
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(s));

  std::vector<float> samples;
  const auto t0 = std::chrono::steady_clock::now();
  Timing result;
  for (;;) {
    if (flusher) flusher->flush(s);
    KVLAB_CUDA_CHECK(cudaEventRecord(start.e, s));
    run_once();
    KVLAB_CUDA_CHECK(cudaEventRecord(stop.e, s));
    KVLAB_CUDA_CHECK(cudaEventSynchronize(stop.e));
    float ms = 0;
    KVLAB_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e, stop.e));
    samples.push_back(ms * 1000.0f / per_sample);
    const int n = static_cast<int>(samples.size());
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (n >= opt.min_reps && (n % 5 == 0 || n >= opt.max_reps || wall > opt.max_seconds)) {
      result = summarize(samples, opt.target_rel_iqr);
      if (result.converged || n >= opt.max_reps || wall > opt.max_seconds) break;
    }
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  result.cold_l2 = flusher != nullptr;
  result.graph = opt.graph;
  return result;
}

Ceilings measure_ceilings(const TimingOptions& opt, uint64_t bytes) {
  if (bytes == 0) {
    size_t free_b = 0, total_b = 0;
    KVLAB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    bytes = std::min<uint64_t>(uint64_t{1} << 30, free_b / 4);
  }
  bytes = bytes / 64 * 64;
  Ceilings c;
  c.bytes = bytes;
  ReadBuffer src(bytes);
  TimingOptions o = opt;
  o.cold_l2 = false;  // 1 GiB >> L2: the buffer itself is the cold working set
  o.graph = false;
  c.read = time_kernel([&](cudaStream_t s) { src.read(s); }, o);
  c.read_bytes_per_s = c.read.median_us > 0 ? bytes / (c.read.median_us * 1e-6) : 0;
  thrust::device_vector<unsigned int> dst(bytes / 4);
  unsigned int* d = thrust::raw_pointer_cast(dst.data());
  const unsigned int* sp = thrust::raw_pointer_cast(src.words.data());
  c.copy = time_kernel(
      [&](cudaStream_t s) {
        KVLAB_CUDA_CHECK(cudaMemcpyAsync(d, sp, bytes, cudaMemcpyDeviceToDevice, s));
      },
      o);
  c.copy_bytes_per_s = c.copy.median_us > 0 ? 2.0 * bytes / (c.copy.median_us * 1e-6) : 0;
  return c;
}

}  // namespace kvlab::gpu::bench
