// harness.cu: the CUDA timing harness, the cold-L2 flush and the bandwidth ceilings (see
// harness.h, reference/core/timing.h and l2_flush.cuh).
#include "gpu/bench/harness.h"

#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/sequence.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>

#include "gpu/bench/bulk_read.cuh"
#include "gpu/bench/l2_flush.cuh"
#include "gpu/bench/scatter_read.cuh"
#include "gpu/core/cuda_check.h"

namespace kvlab::gpu::bench {
namespace {

constexpr int kThreads = KVLAB_L2_FLUSH_THREADS;

// Reads of the ceiling set: the body of l2_flush.cuh with another cache operator or depth.
template <int kLoad, int kDepth>
__global__ void __launch_bounds__(kThreads)
    read_kernel(const uint4* __restrict__ p, unsigned long long n,
                unsigned int* __restrict__ sink) {
  kvlab_read_body<kLoad, kDepth>(p, n, sink);
}

// dst[0, n) = src[0, n), grid-stride, kDepth 16-byte loads in flight per thread before
// their stores (plain cached loads and stores, as a kernel that writes its output would).
template <int kDepth>
__global__ void __launch_bounds__(kThreads)
    copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, unsigned long long n) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + (kDepth - 1) * stride < n; i += kDepth * stride) {
    uint4 v[kDepth];
#pragma unroll
    for (int u = 0; u < kDepth; ++u) v[u] = kvlab_load16<KVLAB_LOAD_PLAIN>(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < kDepth; ++u) dst[i + u * stride] = v[u];
  }
  for (; i < n; i += stride) dst[i] = kvlab_load16<KVLAB_LOAD_PLAIN>(src + i);
}

int sm_count() {
  int dev = 0, sms = 0;
  KVLAB_CUDA_CHECK(cudaGetDevice(&dev));
  KVLAB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

// Blocks for n vectors: blocks_per_sm per SM (0: as many as fit), never more than the work.
template <typename Kernel>
int grid_for(Kernel kernel, int blocks_per_sm, unsigned long long n) {
  int per_sm = blocks_per_sm;
  if (per_sm <= 0) {
    KVLAB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0));
    per_sm = std::max(per_sm, 1);
  }
  const unsigned long long want = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::max<unsigned long long>(
      1, std::min<unsigned long long>(want, static_cast<unsigned long long>(sm_count()) * per_sm)));
}

template <int kLoad>
void launch_read(int depth, int blocks_per_sm, const uint4* p, unsigned long long n,
                 unsigned int* sink, cudaStream_t s) {
  switch (depth) {
    case 2:
      read_kernel<kLoad, 2>
          <<<grid_for(read_kernel<kLoad, 2>, blocks_per_sm, n), kThreads, 0, s>>>(p, n, sink);
      break;
    case 4:
      read_kernel<kLoad, 4>
          <<<grid_for(read_kernel<kLoad, 4>, blocks_per_sm, n), kThreads, 0, s>>>(p, n, sink);
      break;
    case 8:
      read_kernel<kLoad, 8>
          <<<grid_for(read_kernel<kLoad, 8>, blocks_per_sm, n), kThreads, 0, s>>>(p, n, sink);
      break;
    default:
      throw Error("read kernel depth " + std::to_string(depth) + " is not compiled (2, 4, 8)");
  }
}

// The bulk-copy read (bulk_read.cuh): blocks_per_sm (0: 1) blocks of one warp per SM, each
// with a ring of depth x chunk bytes of shared memory.
void launch_bulk(const MemKernel& k, const void* p, uint64_t bytes, unsigned int* sink,
                 cudaStream_t s) {
  static bool opted_in = false;  // the ring may exceed the default 48 KiB of shared memory
  if (!opted_in) {
    KVLAB_CUDA_CHECK(cudaFuncSetAttribute(
        kvlab_read_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize, kBulkSmemPerSm));
    opted_in = true;
  }
  const unsigned chunk = static_cast<unsigned>(k.chunk_kib) << 10;
  const uint64_t chunks = (bytes + chunk - 1) / chunk;
  const int per_sm = std::max(k.blocks_per_sm, 1);
  const int blocks = static_cast<int>(std::max<uint64_t>(
      1, std::min<uint64_t>(chunks, static_cast<uint64_t>(sm_count()) * per_sm)));
  kvlab_read_bulk<<<blocks, 32, static_cast<size_t>(k.depth) * chunk, s>>>(
      static_cast<const unsigned char*>(p), bytes, chunk, static_cast<unsigned>(k.depth),
      k.ranges ? 1u : 0u, sink);
}

// Scattered-granule reads (scatter_read.cuh). kCheck: the tests' checking twin, which adds
// what it read into check[4]. 16-byte loads: blocks_per_sm blocks of KVLAB_L2_FLUSH_THREADS per
// SM (0: as many as fit); bulk: blocks_per_sm (0: 1) blocks of one warp, a ring of depth x G.
template <bool kCheck>
void launch_scatter(const MemKernel& k, const void* src, uint64_t bytes, const int32_t* order,
                    unsigned int* sink, unsigned long long* check, cudaStream_t s) {
  const auto granules = static_cast<unsigned>(scatter_granules(k, bytes));
  const auto* ord = reinterpret_cast<const unsigned*>(order);
  const unsigned g = static_cast<unsigned>(k.granule);
  if (k.load == MemLoad::kBulk) {
    static bool opted_in = false;  // the ring may exceed the default 48 KiB of shared memory
    if (!opted_in) {
      KVLAB_CUDA_CHECK(cudaFuncSetAttribute(kvlab_read_bulk_scatter<kCheck>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            kBulkSmemPerSm));
      opted_in = true;
    }
    const int per_sm = std::max(k.blocks_per_sm, 1);
    const int blocks = static_cast<int>(std::max<uint64_t>(
        1, std::min<uint64_t>(granules, static_cast<uint64_t>(sm_count()) * per_sm)));
    kvlab_read_bulk_scatter<kCheck><<<blocks, 32, static_cast<size_t>(k.depth) * g, s>>>(
        static_cast<const unsigned char*>(src), bytes, ord, granules, g,
        static_cast<unsigned>(k.depth), sink, check);
    return;
  }
  const uint4* p = static_cast<const uint4*>(src);
  const unsigned long long n = bytes / 16, total = uint64_t{granules} * (g / 16);
  auto go = [&](auto kernel) {
    kernel<<<grid_for(kernel, k.blocks_per_sm, total), kThreads, 0, s>>>(p, n, ord, granules,
                                                                         g / 16, sink, check);
  };
  if (kCheck) {  // one checking twin: what it proves (the indexing) is the same for every load
    go(kvlab_read_scatter<KVLAB_LOAD_NC, 4, true>);
  } else if (k.load == MemLoad::kNc) {
    if (k.depth == 4)
      go(kvlab_read_scatter<KVLAB_LOAD_NC, 4, false>);
    else
      go(kvlab_read_scatter<KVLAB_LOAD_NC, 8, false>);
  } else {
    if (k.depth == 4)
      go(kvlab_read_scatter<KVLAB_LOAD_PLAIN, 4, false>);
    else
      go(kvlab_read_scatter<KVLAB_LOAD_PLAIN, 8, false>);
  }
}

// A buffer of non-zero, distinct words (never time on zeros) and its sink word.
struct ReadBuffer {
  thrust::device_vector<unsigned int> words;
  thrust::device_vector<unsigned int> sink;
  explicit ReadBuffer(size_t bytes) : words(bytes / 4), sink(1) {
    thrust::sequence(words.begin(), words.end(), 1u);
  }
  const uint4* data() const {
    return reinterpret_cast<const uint4*>(thrust::raw_pointer_cast(words.data()));
  }
  unsigned int* sink_ptr() { return thrust::raw_pointer_cast(sink.data()); }
  unsigned long long vecs() const { return words.size() / 4; }
};

// Empties the L2 before a timed call (l2_flush.cuh says how and why): bytes_ per flush, from a
// window that rotates over the buffer's extra KVLAB_L2_FLUSH_ROTATE_SPAN_MIB MiB.
class L2Flusher {
 public:
  L2Flusher(L2Flush method, uint64_t bytes) : method_(method) {
    if (method == L2Flush::kNone || method == L2Flush::kSelf) return;
    bytes_ = (bytes ? bytes : l2_flush_bytes(device_l2_bytes())) / 16 * 16;
    buf_ = std::make_unique<ReadBuffer>(bytes_ + kSpan);
    blocks_ = static_cast<int>(std::min<unsigned long long>(
        (bytes_ / 16 + kThreads - 1) / kThreads,
        static_cast<unsigned long long>(sm_count()) * KVLAB_L2_FLUSH_BLOCKS_PER_SM));
    blocks_ = std::max(blocks_, 1);
  }
  uint64_t bytes() const { return bytes_; }
  void flush(cudaStream_t s) {
    if (!buf_) return;
    const uint64_t offset = (flushes_++ * kStep) % kSpan;  // a multiple of 16
    const uint4* p = buf_->data() + offset / 16;
    const unsigned long long n = bytes_ / 16;
    if (method_ == L2Flush::kReadStreaming)
      kvlab_l2_flush_streaming<<<blocks_, kThreads, 0, s>>>(p, n, buf_->sink_ptr());
    else
      kvlab_l2_flush<<<blocks_, kThreads, 0, s>>>(p, n, buf_->sink_ptr());
    KVLAB_CUDA_CHECK(cudaGetLastError());
  }

 private:
  static constexpr uint64_t kSpan = uint64_t{KVLAB_L2_FLUSH_ROTATE_SPAN_MIB} << 20;
  static constexpr uint64_t kStep = uint64_t{KVLAB_L2_FLUSH_ROTATE_STEP_KIB} << 10;
  L2Flush method_;
  uint64_t bytes_ = 0;
  uint64_t flushes_ = 0;
  int blocks_ = 1;
  std::unique_ptr<ReadBuffer> buf_;
};

// The stream hold of reference/core/timing.h (hold_stream): two words of mapped host memory,
// [0] the host's release and [1] the hold kernel's "gave up", and the hold kernel launched
// before each timed sample. Off (no words) when the options say so or after a hold gave up.
class StreamHold {
 public:
  explicit StreamHold(bool on) {
    if (!on) return;
    KVLAB_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&words_), 2 * sizeof(int),
                                   cudaHostAllocMapped));
    KVLAB_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_), words_, 0));
  }
  ~StreamHold() { off(); }
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;
  bool on() const { return words_ != nullptr; }
  // Enqueues the hold on s; the host enqueues the sample behind it, then calls release().
  void hold(cudaStream_t s) {
    if (!words_) return;
    __atomic_store_n(&words_[0], 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&words_[1], 0, __ATOMIC_SEQ_CST);
    kvlab_hold_stream<<<1, 1, 0, s>>>(dev_, KVLAB_HOLD_TIMEOUT_NS, dev_ + 1);
    KVLAB_CUDA_CHECK(cudaGetLastError());
  }
  void release() {
    if (words_) __atomic_store_n(&words_[0], 1, __ATOMIC_SEQ_CST);
  }
  // After the sample's stop event completed: did the hold give up waiting for release()?
  bool gave_up() const { return words_ && __atomic_load_n(&words_[1], __ATOMIC_SEQ_CST) != 0; }
  // Releases a hold still pending (an exception between hold() and release()) and frees the
  // words; cudaFreeHost waits for the device, by then the hold kernel has returned.
  void off() {
    if (!words_) return;
    release();
    cudaFreeHost(words_);
    words_ = nullptr;
    dev_ = nullptr;
  }

 private:
  int* words_ = nullptr;
  int* dev_ = nullptr;
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

struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

}  // namespace

cudaStream_t timing_stream() {
  // One per device (a stream belongs to the device current at its creation); never
  // destroyed: the driver releases it with the context at exit.
  static std::mutex mu;
  static std::map<int, cudaStream_t> streams;
  int dev = 0;
  KVLAB_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  cudaStream_t& s = streams[dev];
  if (!s) KVLAB_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

uint64_t device_l2_bytes() {
  int dev = 0, l2 = 0;
  KVLAB_CUDA_CHECK(cudaGetDevice(&dev));
  KVLAB_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  return static_cast<uint64_t>(l2);
}

uint64_t l2_flush_bytes(uint64_t l2_bytes) {
  return std::max<uint64_t>(uint64_t{KVLAB_L2_FLUSH_L2_MULTIPLE} * l2_bytes,
                            uint64_t{KVLAB_L2_FLUSH_MIN_MIB} << 20);
}

Timing time_kernel(const std::function<void(cudaStream_t)>& launch, const TimingOptions& opt,
                   cudaStream_t stream) {
  return time_kernel(launch, opt, opt.cold_l2 ? L2Flush::kReadAllocate : L2Flush::kNone, 0, stream);
}

Timing time_kernel(const std::function<void(cudaStream_t)>& launch, const TimingOptions& opt,
                   L2Flush flush, uint64_t flush_bytes, cudaStream_t stream,
                   const std::function<void(cudaStream_t)>& after_flush) {
  if (!opt.cold_l2 && flush != L2Flush::kSelf) flush = L2Flush::kNone;
  // Graph capture needs a real stream, never the legacy default stream: the caller's, or
  // the process's timing stream.
  cudaStream_t s = stream ? stream : timing_stream();
  L2Flusher flusher(flush, flush_bytes);
  // Cold: every timed call must start after a flush, so a graph holds one call; warm: a
  // graph of graph_calls back-to-back calls amortizes the replay's launch.
  const bool cold = flush != L2Flush::kNone;
  const int per_sample = opt.graph && !cold ? std::max(1, opt.graph_calls) : 1;

  Graph g;
  if (opt.graph) {
    launch(s);  // one eager call first: lazy module loading must not happen inside capture
    KVLAB_CUDA_CHECK(cudaStreamSynchronize(s));
    KVLAB_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    {
      // A launch that throws inside the capture must not leave the (process-wide) stream
      // capturing: end the capture and drop its graph before the exception leaves.
      struct EndCaptureOnThrow {
        cudaStream_t s;
        bool armed = true;
        ~EndCaptureOnThrow() {
          cudaGraph_t dropped = nullptr;
          if (armed && cudaStreamEndCapture(s, &dropped) == cudaSuccess && dropped)
            cudaGraphDestroy(dropped);
          if (armed) (void)cudaGetLastError();
        }
      } guard{s};
      for (int i = 0; i < per_sample; ++i) launch(s);
      guard.armed = false;
    }
    KVLAB_CUDA_CHECK(cudaStreamEndCapture(s, &g.graph));
    KVLAB_CUDA_CHECK(cudaGraphInstantiate(&g.exec, g.graph, 0));
  }
  auto run_once = [&]() {
    if (g.exec)
      KVLAB_CUDA_CHECK(cudaGraphLaunch(g.exec, s));
    else
      launch(s);
    KVLAB_CUDA_CHECK(cudaGetLastError());
  };

  Event start, stop;
  for (int i = 0; i < opt.warmup; ++i) {
    flusher.flush(s);
    if (after_flush) after_flush(s);
    run_once();
  }
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(s));

  std::vector<float> samples;
  auto t0 = std::chrono::steady_clock::now();
  Timing result;
  StreamHold hold(opt.hold_stream);
  for (;;) {
    // Held: the GPU starts the flush only once the whole sample is enqueued, so the host's
    // launch time is not between the events (timing.h, hold_stream).
    hold.hold(s);
    flusher.flush(s);
    if (after_flush) after_flush(s);
    KVLAB_CUDA_CHECK(cudaEventRecord(start.e, s));
    {
      struct ReleaseOnThrow {  // a launch that throws must not leave the hold spinning
        StreamHold& h;
        ~ReleaseOnThrow() { h.release(); }
      } releaser{hold};
      run_once();
      KVLAB_CUDA_CHECK(cudaEventRecord(stop.e, s));
    }
    KVLAB_CUDA_CHECK(cudaEventSynchronize(stop.e));
    if (hold.gave_up()) {
      // The call waited on its stream from the host, behind the hold: time it unheld, anew.
      hold.off();
      samples.clear();
      t0 = std::chrono::steady_clock::now();
      continue;
    }
    float ms = 0;
    KVLAB_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e, stop.e));
    samples.push_back(ms * 1000.0f / per_sample);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (sampling_done(samples, wall, opt, &result)) break;
  }
  result.cold_l2 = cold;
  result.graph = opt.graph;
  result.calls_per_sample = per_sample;
  result.held = hold.on();
  result.flush = flush;
  result.flush_bytes = flusher.bytes();
  result.l2_bytes = device_l2_bytes();
  return result;
}

// ------------------------------------------------------------------ bandwidth kernels

const char* to_string(MemOp op) {
  return op == MemOp::kRead ? "read" : "copy";
}

const char* to_string(MemLoad load) {
  switch (load) {
    case MemLoad::kCg:
      return "cg";
    case MemLoad::kPlain:
      return "plain";
    case MemLoad::kNc:
      return "nc";
    case MemLoad::kMemcpy:
      return "memcpy";
    case MemLoad::kBulk:
      return "bulk";
  }
  return "?";
}

std::string MemKernel::name() const {
  if (granule > 0)
    return std::string(to_string(op)) + "_scatter_g" + std::to_string(granule) + "_" +
           to_string(load) + "_d" + std::to_string(depth) + "_b" +
           (load == MemLoad::kBulk ? std::to_string(std::max(blocks_per_sm, 1))
            : blocks_per_sm > 0    ? std::to_string(blocks_per_sm)
                                   : std::string("max"));
  std::string n = std::string(to_string(op)) + "_" + to_string(load);
  if (load == MemLoad::kMemcpy) return n;
  if (load == MemLoad::kBulk)
    return n + (ranges ? "_ranges" : "") + "_c" + std::to_string(chunk_kib) + "k_d" +
           std::to_string(depth) + "_b" + std::to_string(std::max(blocks_per_sm, 1));
  return n + "_d" + std::to_string(depth) + "_b" +
         (blocks_per_sm > 0 ? std::to_string(blocks_per_sm) : std::string("max"));
}

std::string mem_kernel_unsupported(const MemKernel& k) {
  if (k.blocks_per_sm < 0) return "blocks_per_sm must be >= 0 (0: as many as fit)";
  if (k.granule < 0 || k.granule % 16 != 0)
    return "granule must be a positive multiple of 16 bytes, not " + std::to_string(k.granule);
  if (k.granule > 0) {
    if (k.op != MemOp::kRead) return "scattered granules are read, not copied";
    if (k.chunk_kib != 0 || k.ranges)
      return "scattered reads take no chunk_kib or ranges: a bulk copy per granule, blocks "
             "each reading a range of the permutation";
    if (k.load == MemLoad::kBulk) {
      if (k.depth < 1 || k.depth > KVLAB_BULK_MAX_STAGES)
        return "bulk reads keep 1 to " + std::to_string(KVLAB_BULK_MAX_STAGES) +
               " copies in flight per block (depth), not " + std::to_string(k.depth);
      if (k.blocks_per_sm > kScatterBulkBlocksPerSm)
        return "scattered bulk reads run at most " + std::to_string(kScatterBulkBlocksPerSm) +
               " blocks per SM, not " + std::to_string(k.blocks_per_sm);
      const int64_t ring = int64_t{std::max(k.blocks_per_sm, 1)} * k.depth * k.granule;
      if (ring > kBulkSmemPerSm)
        return "bulk rings of " + std::to_string(ring) + " bytes per SM (blocks_per_sm x depth " +
               "x granule) exceed " + std::to_string(kBulkSmemPerSm) + " bytes";
      return "";
    }
    if (k.load != MemLoad::kNc && k.load != MemLoad::kPlain)
      return std::string("scattered reads use nc or plain 16-byte loads or bulk copies, not ") +
             to_string(k.load);
    if (k.depth != 4 && k.depth != 8)
      return "scattered read kernels are compiled for depth 4 and 8, not " +
             std::to_string(k.depth);
    return "";
  }
  if (k.op == MemOp::kRead) {
    if (k.load == MemLoad::kMemcpy) return "memcpy is a copy, not a read";
    if (k.load == MemLoad::kBulk) {
      if (k.chunk_kib < 1 || k.chunk_kib > 64 || (k.chunk_kib & (k.chunk_kib - 1)) != 0)
        return "bulk reads need chunk_kib a power of two in [1, 64], not " +
               std::to_string(k.chunk_kib);
      if (k.depth < 1 || k.depth > KVLAB_BULK_MAX_STAGES)
        return "bulk reads keep 1 to " + std::to_string(KVLAB_BULK_MAX_STAGES) +
               " copies in flight per block (depth), not " + std::to_string(k.depth);
      const int64_t ring = int64_t{std::max(k.blocks_per_sm, 1)} * k.depth * (k.chunk_kib << 10);
      if (ring > kBulkSmemPerSm)
        return "bulk rings of " + std::to_string(ring >> 10) + " KiB per SM (blocks_per_sm x " +
               "depth x chunk_kib) exceed " + std::to_string(kBulkSmemPerSm >> 10) + " KiB";
      return "";
    }
    if (k.chunk_kib != 0 || k.ranges) return "chunk_kib and ranges are for bulk reads only";
    if (k.depth != 2 && k.depth != 4 && k.depth != 8)
      return "read kernels are compiled for depth 2, 4 and 8, not " + std::to_string(k.depth);
    return "";
  }
  if (k.chunk_kib != 0 || k.ranges) return "chunk_kib and ranges are for bulk reads only";
  if (k.load == MemLoad::kBulk) return "bulk is a read, not a copy";
  if (k.load == MemLoad::kCg || k.load == MemLoad::kNc)
    return std::string("copies use plain loads or cudaMemcpyAsync, not ") + to_string(k.load);
  if (k.load == MemLoad::kPlain && k.depth != 2 && k.depth != 4)
    return "copy kernels are compiled for depth 2 and 4, not " + std::to_string(k.depth);
  return "";
}

std::vector<MemKernel> ceiling_kernels(MemOp op) {
  // Contiguous kernels only (granule 0). Scattered-granule reads (scatter_read.cuh) are not
  // candidates: R is the best contiguous read, and each scattered row is its own ceiling
  // R_scatter(G), reported as a % of R. Physically they cannot move more than a contiguous read
  // of the same buffer (the same bytes plus the order's index words, in smaller DRAM bursts).
  std::vector<MemKernel> v;
  if (op == MemOp::kRead) {
    for (MemLoad l : {MemLoad::kPlain, MemLoad::kNc, MemLoad::kCg})
      for (int d : {2, 4, 8})
        for (int b : {1, 2, 4, 0}) v.push_back({MemOp::kRead, l, d, b});
    // Bulk copies, 16-128 KiB in flight per SM (experiments/configs/perf.ini lists the same
    // set as rows): chunks of 4-16 KiB x 4 or 8 in flight, 32 KiB x 2 or 4, 4 and 8 KiB x 16,
    // and two blocks per SM of 8 and 16 KiB x 4.
    std::vector<std::array<int, 3>> bulk;  // {chunk KiB, depth, blocks per SM}
    for (int chunk : {4, 8, 16})
      for (int depth : {4, 8}) bulk.push_back({chunk, depth, 1});
    for (int depth : {2, 4}) bulk.push_back({32, depth, 1});
    for (int chunk : {4, 8}) bulk.push_back({chunk, 16, 1});
    for (int chunk : {8, 16}) bulk.push_back({chunk, 4, 2});
    for (const auto& [chunk, depth, b] : bulk)
      v.push_back({MemOp::kRead, MemLoad::kBulk, depth, b, chunk});
    // The same copies, each block streaming its own contiguous range (as an attention CTA
    // streams its slice of the cache): 8-32 KiB chunks, one or two blocks per SM.
    for (const auto& [chunk, depth, b] : std::vector<std::array<int, 3>>{
             {8, 8, 1}, {16, 4, 1}, {16, 8, 1}, {32, 4, 1}, {8, 8, 2}, {16, 4, 2}})
      v.push_back({MemOp::kRead, MemLoad::kBulk, depth, b, chunk, true});
  } else {
    v.push_back({MemOp::kCopy, MemLoad::kMemcpy, 0, 0});
    for (int d : {2, 4})
      for (int b : {2, 4, 0}) v.push_back({MemOp::kCopy, MemLoad::kPlain, d, b});
  }
  return v;
}

uint64_t scatter_granules(const MemKernel& k, uint64_t bytes) {
  return k.granule > 0 ? (bytes + k.granule - 1) / k.granule : 0;
}

namespace {
void check_scatter(const MemKernel& k, uint64_t bytes, const int32_t* order) {
  if (bytes % 16 != 0 || static_cast<uint64_t>(k.granule) > bytes)
    throw Error("bandwidth kernel " + k.name() + ": " + std::to_string(bytes) +
                " bytes are not a multiple of 16 or smaller than one granule");
  if (scatter_granules(k, bytes) * (k.granule / 16) >= (uint64_t{1} << 32))
    throw Error("bandwidth kernel " + k.name() + ": 2^32 or more 16-byte vectors (32-bit index)");
  if (!order) throw Error("bandwidth kernel " + k.name() + ": no granule order given");
}
}  // namespace

std::array<uint64_t, 4> scatter_read_checksum(const MemKernel& k, const void* src, uint64_t bytes,
                                              const int32_t* order) {
  const std::string why = mem_kernel_unsupported(k);
  if (!why.empty()) throw Error("bandwidth kernel " + k.name() + ": " + why);
  if (k.granule <= 0) throw Error("scatter_read_checksum: " + k.name() + " is not scattered");
  check_scatter(k, bytes, order);
  thrust::device_vector<unsigned long long> check(4, 0ull);
  launch_scatter<true>(k, src, bytes, order, nullptr, thrust::raw_pointer_cast(check.data()),
                       nullptr);
  KVLAB_CUDA_CHECK(cudaGetLastError());
  KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
  std::array<uint64_t, 4> out{};
  thrust::copy(check.begin(), check.end(), out.begin());
  return out;
}

void launch_mem_kernel(const MemKernel& k, const void* src, void* dst, uint64_t bytes,
                       unsigned int* sink, cudaStream_t s, const int32_t* order) {
  const std::string why = mem_kernel_unsupported(k);
  if (!why.empty()) throw Error("bandwidth kernel " + k.name() + ": " + why);
  if (k.granule > 0) {
    check_scatter(k, bytes, order);
    launch_scatter<false>(k, src, bytes, order, sink, nullptr, s);
    KVLAB_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const unsigned long long n = bytes / 16;
  const uint4* p = static_cast<const uint4*>(src);
  if (k.op == MemOp::kCopy) {
    if (k.load == MemLoad::kMemcpy) {
      KVLAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * 16, cudaMemcpyDeviceToDevice, s));
    } else if (k.depth == 2) {
      copy_kernel<2><<<grid_for(copy_kernel<2>, k.blocks_per_sm, n), kThreads, 0, s>>>(
          p, static_cast<uint4*>(dst), n);
    } else {
      copy_kernel<4><<<grid_for(copy_kernel<4>, k.blocks_per_sm, n), kThreads, 0, s>>>(
          p, static_cast<uint4*>(dst), n);
    }
  } else if (k.load == MemLoad::kBulk) {
    launch_bulk(k, src, n * 16, sink, s);
  } else if (k.load == MemLoad::kCg && k.depth == KVLAB_L2_FLUSH_DEPTH) {
    // Exactly the flush kernel (what experiments/peers/peer_timer.py launches too).
    kvlab_l2_flush<<<grid_for(kvlab_l2_flush, k.blocks_per_sm, n), kThreads, 0, s>>>(p, n, sink);
  } else if (k.load == MemLoad::kCg) {
    launch_read<KVLAB_LOAD_CG>(k.depth, k.blocks_per_sm, p, n, sink, s);
  } else if (k.load == MemLoad::kNc) {
    launch_read<KVLAB_LOAD_NC>(k.depth, k.blocks_per_sm, p, n, sink, s);
  } else {
    launch_read<KVLAB_LOAD_PLAIN>(k.depth, k.blocks_per_sm, p, n, sink, s);
  }
  KVLAB_CUDA_CHECK(cudaGetLastError());
}

Timing time_read_stamped(const void* p, uint64_t bytes, int blocks_per_sm, const TimingOptions& opt,
                         std::vector<double>* kernel_us, cudaStream_t stream) {
  TimingOptions o = opt;
  o.graph = false;  // one stamp slot per eager call
  const size_t calls = static_cast<size_t>(std::max(o.warmup, 0) + std::max(o.max_reps, 1) + 1);
  thrust::device_vector<unsigned long long> stamps(2 * calls, 0ull);
  thrust::device_vector<unsigned int> sink(1);
  const unsigned long long n = bytes / 16;
  size_t call = 0;
  const Timing t = time_kernel(
      [&](cudaStream_t s) {
        if (call >= calls) throw Error("time_read_stamped: more calls than its stamp slots");
        kvlab_read_stamped<<<grid_for(kvlab_read_stamped, blocks_per_sm, n), kThreads, 0, s>>>(
            static_cast<const uint4*>(p), n, thrust::raw_pointer_cast(sink.data()),
            thrust::raw_pointer_cast(stamps.data()) + 2 * call);
        ++call;
      },
      o, stream);
  KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned long long> h(2 * call);
  thrust::copy(stamps.begin(), stamps.begin() + 2 * call, h.begin());
  kernel_us->clear();
  for (size_t i = 0; i < call; ++i)
    kernel_us->push_back(static_cast<double>(h[2 * i + 1] - ~h[2 * i]) * 1e-3);
  return t;
}

void fill_words(void* p, uint64_t bytes, cudaStream_t s) {
  unsigned int* w = static_cast<unsigned int*>(p);
  thrust::sequence(thrust::cuda::par.on(s), w, w + bytes / 4, 1u);
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(s));
}

Ceilings measure_ceilings(const TimingOptions& opt, uint64_t bytes) {
  if (bytes == 0) {
    size_t free_b = 0, total_b = 0;
    KVLAB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    bytes = std::min<uint64_t>(uint64_t{4} << 30, free_b / 4);
  }
  bytes = bytes / 64 * 64;
  Ceilings c;
  c.bytes = bytes;
  ReadBuffer src(bytes);
  thrust::device_vector<unsigned int> dst(bytes / 4);
  TimingOptions o = opt;
  o.cold_l2 = true;
  o.graph = false;
  o.max_reps = std::min(o.max_reps, 50);
  o.max_seconds = std::min(o.max_seconds, 0.5);
  for (MemOp op : {MemOp::kRead, MemOp::kCopy}) {
    for (const MemKernel& k : ceiling_kernels(op)) {
      KernelBandwidth kb;
      kb.kernel = k;
      kb.timing = time_kernel(
          [&](cudaStream_t s) {
            launch_mem_kernel(k, src.data(), thrust::raw_pointer_cast(dst.data()), bytes,
                              src.sink_ptr(), s);
          },
          o);
      const double moved = (op == MemOp::kCopy ? 2.0 : 1.0) * static_cast<double>(bytes);
      kb.bytes_per_s = kb.timing.median_us > 0 ? moved / (kb.timing.median_us * 1e-6) : 0;
      // The ceiling is taken at the fast edge of the kernel's noise band (its first-quartile
      // time), so that a later run of the same kernel does not beat it by noise alone.
      const double fast = kb.timing.q1_us > 0 ? moved / (kb.timing.q1_us * 1e-6) : 0;
      double& best = op == MemOp::kRead ? c.read_bytes_per_s : c.copy_bytes_per_s;
      if (fast > best) {
        best = fast;
        (op == MemOp::kRead ? c.read : c.copy) = kb.timing;
        (op == MemOp::kRead ? c.read_best : c.copy_best) = k;
      }
      c.kernels.push_back(std::move(kb));
    }
  }
  return c;
}

}  // namespace kvlab::gpu::bench
