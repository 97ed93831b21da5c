// test_bench_harness.cu: the GPU timing harness (gpu/bench/harness.h) measures something
// sane: its statistics are numpy's, the ceilings are positive and physically plausible,
// the timing of a device copy of known size agrees with its bytes and scales with them, and
// CUDA-graph replay (cold: one call per replay; warm: graph_calls) and cold-L2 timing run,
// and each ceiling is the best of its kernels. GPU tests skip without a device; the statistics
// test runs everywhere.
//
// The plausibility bounds below are not accuracy tolerances (the tolerance table is for
// numerics): they state what any working harness on any supported GPU must satisfy.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <thrust/device_vector.h>
#include <thrust/sequence.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "gpu/bench/harness.h"
#include "gpu/core/cuda_check.h"
#include "gpu/core/device_info.h"

namespace kvlab::test {
namespace {

// Any sm_75+ GPU moves between 100 GB/s and 20 TB/s (H100: about 3 TB/s).
constexpr double kMinPlausibleBytesPerS = 1e11;
constexpr double kMaxPlausibleBytesPerS = 2e13;
// A measured bandwidth may exceed the datasheet figure only by measurement noise.
constexpr double kDatasheetSlack = 1.10;
// Copying twice the bytes takes between 1.5x and 2.5x the time (launch overhead and noise
// at 256 MiB are far below a quarter of the time on any such GPU).
constexpr double kMinScaling = 1.5, kMaxScaling = 2.5;
// A copy timed on its own moves its bytes at no more than the copy ceiling of the same run
// plus noise, and at no less than half of it (256 MiB and more: not launch-bound, and 5x
// the largest L2 of these GPUs, so no cache absorbs its writes).
constexpr double kCopyVsCeilingLow = 0.5, kCopyVsCeilingHigh = 1.15;

#define KVLAB_SKIP_WITHOUT_GPU_BENCH()                                               \
  do {                                                                               \
    if (!::kvlab::gpu::device_available()) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)

gpu::bench::TimingOptions quick() {
  gpu::bench::TimingOptions o;
  o.warmup = 2;
  o.min_reps = 10;
  o.max_reps = 60;
  o.max_seconds = 1.0;
  return o;
}

// A known-size device-to-device copy, timed; returns (read + write) bytes per second.
double timed_copy(size_t bytes, const gpu::bench::TimingOptions& opt,
                  gpu::bench::Timing* t = nullptr) {
  thrust::device_vector<unsigned int> src(bytes / 4), dst(bytes / 4);
  thrust::sequence(src.begin(), src.end(), 7u);  // never time on zeros
  const unsigned int* s = thrust::raw_pointer_cast(src.data());
  unsigned int* d = thrust::raw_pointer_cast(dst.data());
  const gpu::bench::Timing tm = gpu::bench::time_kernel(
      [&](cudaStream_t st) {
        KVLAB_CUDA_CHECK(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice, st));
      },
      opt);
  if (t) *t = tm;
  return 2.0 * static_cast<double>(bytes) / (tm.median_us * 1e-6);
}

}  // namespace

TEST(BenchHarness, SummaryStatisticsAreNumpys) {
  // numpy.percentile([9, 1, 3, 5, 4, 2, 8, 6], [25, 50, 75]) (linear
  // interpolation): 2.75, 4.5, 6.5.
  const gpu::bench::Timing t = gpu::bench::summarize({9, 1, 3, 5, 4, 2, 8, 6}, 0.5);
  EXPECT_FLOAT_EQ(t.median_us, 4.5);
  EXPECT_FLOAT_EQ(t.q1_us, 2.75);
  EXPECT_FLOAT_EQ(t.q3_us, 6.5);
  EXPECT_FLOAT_EQ(t.iqr_us, 3.75);
  EXPECT_FLOAT_EQ(t.min_us, 1);
  EXPECT_FLOAT_EQ(t.mean_us, 38.0 / 8);
  EXPECT_EQ(t.reps, 8);
  EXPECT_FALSE(t.converged);  // 3.75 / 4.5 > 0.5
  EXPECT_TRUE(gpu::bench::summarize({10, 10, 10, 10}, 0.01).converged);
  EXPECT_EQ(gpu::bench::summarize({}, 0.01).reps, 0);
}

TEST(BenchHarness, CeilingsArePositiveAndPlausible) {
  KVLAB_SKIP_WITHOUT_GPU_BENCH();
  const gpu::bench::Ceilings c = gpu::bench::measure_ceilings(quick(), size_t{256} << 20);
  EXPECT_EQ(c.bytes, size_t{256} << 20);
  for (double bw : {c.read_bytes_per_s, c.copy_bytes_per_s}) {
    EXPECT_GT(bw, kMinPlausibleBytesPerS);
    EXPECT_LT(bw, kMaxPlausibleBytesPerS);
  }
  EXPECT_GE(c.read.reps, quick().min_reps);
  EXPECT_GT(c.read.median_us, 0);
  EXPECT_LE(c.read.q1_us, c.read.median_us);
  EXPECT_LE(c.read.median_us, c.read.q3_us);
  const auto devs = gpu::list_devices();
  ASSERT_FALSE(devs.empty());
  const double sheet = devs[0].peak_bandwidth_bytes_per_s();
  if (sheet > 0) EXPECT_LT(c.read_bytes_per_s, kDatasheetSlack * sheet) << devs[0].name;
}

TEST(BenchHarness, CopyTimingMatchesItsBytes) {
  KVLAB_SKIP_WITHOUT_GPU_BENCH();
  const gpu::bench::TimingOptions opt = quick();
  const gpu::bench::Ceilings c = gpu::bench::measure_ceilings(opt, size_t{512} << 20);
  gpu::bench::Timing t1, t2;
  const double bw1 = timed_copy(size_t{256} << 20, opt, &t1);
  const double bw2 = timed_copy(size_t{512} << 20, opt, &t2);
  const double scaling = t2.median_us / t1.median_us;
  EXPECT_GT(scaling, kMinScaling) << t1.median_us << " us vs " << t2.median_us << " us";
  EXPECT_LT(scaling, kMaxScaling) << t1.median_us << " us vs " << t2.median_us << " us";
  for (double bw : {bw1, bw2}) {
    EXPECT_GT(bw, kCopyVsCeilingLow * c.copy_bytes_per_s) << "copy ceiling " << c.copy_bytes_per_s;
    EXPECT_LT(bw, kCopyVsCeilingHigh * c.copy_bytes_per_s) << "copy ceiling " << c.copy_bytes_per_s;
  }
  EXPECT_TRUE(t1.cold_l2);
  EXPECT_EQ(t1.samples_us.size(), static_cast<size_t>(t1.reps));
}

TEST(BenchHarness, GraphReplayTimesOneCall) {
  KVLAB_SKIP_WITHOUT_GPU_BENCH();
  gpu::bench::TimingOptions opt = quick();
  opt.graph = true;
  opt.graph_calls = 10;
  gpu::bench::Timing eager, graph_cold, graph_warm;
  // Cold: a graph of one call, replayed after each flush (outside the graph).
  const double bw_graph_cold = timed_copy(size_t{256} << 20, opt, &graph_cold);
  // Warm: a graph of graph_calls back-to-back calls.
  opt.cold_l2 = false;
  const double bw_graph_warm = timed_copy(size_t{256} << 20, opt, &graph_warm);
  opt.graph = false;
  const double bw_eager = timed_copy(size_t{256} << 20, opt, &eager);
  EXPECT_TRUE(graph_cold.graph);
  EXPECT_TRUE(graph_cold.cold_l2);
  EXPECT_EQ(graph_cold.calls_per_sample, 1);
  EXPECT_EQ(graph_cold.flush, gpu::bench::L2Flush::kReadAllocate);
  EXPECT_TRUE(graph_warm.graph);
  EXPECT_FALSE(graph_warm.cold_l2);
  EXPECT_EQ(graph_warm.calls_per_sample, 10);
  EXPECT_EQ(graph_warm.flush, gpu::bench::L2Flush::kNone);
  // Per-call time, not per replay: all time the same 256 MiB copy (within the scaling band).
  for (double bw : {bw_graph_cold, bw_graph_warm}) {
    EXPECT_GT(bw, bw_eager / (kMaxScaling / kMinScaling));
    EXPECT_LT(bw, bw_eager * (kMaxScaling / kMinScaling));
  }
}

// The read ceiling is the best of its kernels: every kernel measured, the best one named.
TEST(BenchHarness, CeilingsAreTheBestOfSeveralKernels) {
  KVLAB_SKIP_WITHOUT_GPU_BENCH();
  const gpu::bench::Ceilings c = gpu::bench::measure_ceilings(quick(), size_t{256} << 20);
  const size_t n_read = gpu::bench::ceiling_kernels(gpu::bench::MemOp::kRead).size();
  const size_t n_copy = gpu::bench::ceiling_kernels(gpu::bench::MemOp::kCopy).size();
  ASSERT_EQ(c.kernels.size(), n_read + n_copy);
  for (const auto& k : c.kernels) {
    EXPECT_GT(k.bytes_per_s, 0) << k.kernel.name();
    EXPECT_TRUE(k.timing.cold_l2) << k.kernel.name();
    const double best =
        k.kernel.op == gpu::bench::MemOp::kRead ? c.read_bytes_per_s : c.copy_bytes_per_s;
    EXPECT_LE(k.bytes_per_s, best) << k.kernel.name();
  }
  EXPECT_EQ(c.read_best.op, gpu::bench::MemOp::kRead);
  EXPECT_EQ(c.copy_best.op, gpu::bench::MemOp::kCopy);
  std::printf("[ceilings] read %.4g TB/s (%s), copy %.4g TB/s (%s)\n", c.read_bytes_per_s / 1e12,
              c.read_best.name().c_str(), c.copy_bytes_per_s / 1e12, c.copy_best.name().c_str());
}

// The ceiling set is well formed (host only, runs everywhere): every kernel exists, names are
// unique, bulk rings fit their SM, and the rules reject what is not compiled.
TEST(BenchHarness, CeilingKernelSetIsValid) {
  std::set<std::string> names;
  int bulk = 0;
  for (gpu::bench::MemOp op : {gpu::bench::MemOp::kRead, gpu::bench::MemOp::kCopy})
    for (const auto& k : gpu::bench::ceiling_kernels(op)) {
      EXPECT_EQ(gpu::bench::mem_kernel_unsupported(k), "") << k.name();
      EXPECT_TRUE(names.insert(k.name()).second) << "duplicate " << k.name();
      if (k.load == gpu::bench::MemLoad::kBulk) {
        ++bulk;
        EXPECT_LE(int64_t{std::max(k.blocks_per_sm, 1)} * k.depth * (k.chunk_kib << 10),
                  gpu::bench::kBulkSmemPerSm)
            << k.name();
      }
    }
  EXPECT_GE(bulk, 16);
  using gpu::bench::MemKernel;
  using gpu::bench::MemLoad;
  using gpu::bench::MemOp;
  EXPECT_NE(gpu::bench::mem_kernel_unsupported({MemOp::kRead, MemLoad::kBulk, 4, 1, 3}), "");
  EXPECT_NE(gpu::bench::mem_kernel_unsupported({MemOp::kRead, MemLoad::kBulk, 17, 1, 4}), "");
  EXPECT_NE(gpu::bench::mem_kernel_unsupported({MemOp::kRead, MemLoad::kBulk, 8, 2, 32}), "");
  EXPECT_NE(gpu::bench::mem_kernel_unsupported({MemOp::kRead, MemLoad::kNc, 4, 0, 16}), "");
  EXPECT_NE(gpu::bench::mem_kernel_unsupported({MemOp::kCopy, MemLoad::kBulk, 4, 1, 16}), "");
  EXPECT_NE(gpu::bench::mem_kernel_unsupported({MemOp::kRead, MemLoad::kNc, 16, 0, 0}), "");
  EXPECT_NE(gpu::bench::mem_kernel_unsupported({MemOp::kRead, MemLoad::kNc, 4, 0, 0, true}), "");
  EXPECT_EQ((MemKernel{MemOp::kRead, MemLoad::kBulk, 8, 0, 16}).name(), "read_bulk_c16k_d8_b1");
  EXPECT_EQ((MemKernel{MemOp::kRead, MemLoad::kBulk, 4, 2, 32, true}).name(),
            "read_bulk_ranges_c32k_d4_b2");
}

// The bulk-copy read moves the bytes it claims: twice the bytes take about twice the time,
// and no kernel of the ceiling set runs faster than the datasheet allows (a kernel that
// skipped part of its buffer would).
TEST(BenchHarness, BulkReadMovesItsBytes) {
  KVLAB_SKIP_WITHOUT_GPU_BENCH();
  const gpu::bench::MemKernel k{gpu::bench::MemOp::kRead, gpu::bench::MemLoad::kBulk, 8, 1, 16};
  thrust::device_vector<unsigned int> buf((size_t{512} << 20) / 4), sink(1);
  thrust::sequence(buf.begin(), buf.end(), 1u);
  auto timed = [&](size_t bytes) {
    gpu::bench::TimingOptions o = quick();
    o.cold_l2 = true;
    return gpu::bench::time_kernel(
               [&](cudaStream_t st) {
                 gpu::bench::launch_mem_kernel(k, thrust::raw_pointer_cast(buf.data()), nullptr,
                                               bytes, thrust::raw_pointer_cast(sink.data()), st);
               },
               o)
        .median_us;
  };
  const double t1 = timed(size_t{256} << 20), t2 = timed(size_t{512} << 20);
  EXPECT_GT(t2 / t1, kMinScaling);
  EXPECT_LT(t2 / t1, kMaxScaling);
  const auto devs = gpu::list_devices();
  ASSERT_FALSE(devs.empty());
  const double sheet = devs[0].peak_bandwidth_bytes_per_s();
  const double bw = static_cast<double>(size_t{512} << 20) / (t2 * 1e-6);
  if (sheet > 0) EXPECT_LT(bw, kDatasheetSlack * sheet) << k.name();
  std::printf("[bulk] %s: 256 MiB %.2f us, 512 MiB %.2f us (%.4g TB/s)\n", k.name().c_str(), t1, t2,
              bw / 1e12);
}

// A cold read's time does not depend on the kind of stream it is timed on (the harness's own
// non-blocking stream, the legacy default stream, the per-thread default stream): the Python
// peer timer and the C++ harness may then differ in stream without differing in time. The
// read is the flush kernel itself (load cg, depth 4, 8 blocks per SM), the two-timer
// cross-check's operation, at the cross-check's sizes.
//
// The bound: 2 % of the time, but never below 8 ticks of the event clock (8 x 32 ns), the
// eighth included. Nine H100 runs of this test (data/perf/h100_stream_kind.csv) put the spread of the four medians
// of one size (own, legacy, per-thread, own again) at up to 0.224 us, and a median's largest
// distance from the own stream's at 0.224 us (1 MiB: legacy 4.192 vs own 4.416 us, 5 %; the
// own stream measured again 4.288 us in the same run, so the spread is the own stream's noise,
// not the stream kind; those runs timed "own" on a stream created per timing, "own" is now the
// process's timing stream, whose 30 repeated timings still span 4-7 ticks at 1 MiB: session 15,
// gpu/README.md "Measuring"): below ~13 us a pure 2 % band fails on that noise alone (the first four
// runs' largest distance, 0.128 us, set 5 ticks; the sixth run failed it, and the ninth would
// have: 0.192 us at 1 and 4 MiB). Session 9's fair run reached the bound exactly: 1 MiB own
// 4.384, legacy 4.128 us (8 ticks; own again 4.288). The planted check
// below shows the bound still rejects a real stream-dependent error: a read timed without its
// flush lies far outside it at 1 and 4 MiB (1 MiB 7.17 / 7.65 / 7.74 us warm vs 4.42 / 4.22 /
// 4.35 cold; 4 MiB 7.87 / 7.82 vs 5.31 / 5.38: 8x the bound and more). At 16 MiB the warm read
// is no reliable plant: 9.20 vs 9.82 and 8.00 vs 9.76 us in two runs, but 9.872 vs 9.792 (call
// O of session 3) and 9.872 vs 9.840 (call Q of session 4) in two others, inside the bound, so
// the planted check is asserted at 1 and 4 MiB and only printed at 16.
TEST(BenchHarness, ColdReadTimeDoesNotDependOnTheStreamKind) {
  KVLAB_SKIP_WITHOUT_GPU_BENCH();
  const gpu::bench::MemKernel k{gpu::bench::MemOp::kRead, gpu::bench::MemLoad::kCg, 4, 8};
  thrust::device_vector<unsigned int> buf((size_t{16} << 20) / 4), sink(1);
  thrust::sequence(buf.begin(), buf.end(), 1u);
  gpu::bench::TimingOptions o;
  o.warmup = 5;
  o.min_reps = 50;
  o.max_reps = 400;
  o.target_rel_iqr = 0.01;
  o.max_seconds = 1.0;
  o.cold_l2 = true;
  constexpr double kRel = 0.02, kEventTickUs = 0.032, kTicks = 8;
  // Medians are whole (or half) ticks of the event clock: the bound includes its last tick
  // (a distance of exactly 8 ticks computed in floating point lands a rounding error above
  // 8 x 0.032; the fair run of c625b2d failed on that alone, 4.384 vs 4.128 us at 1 MiB).
  constexpr double kTickSlack = 1e-3 * kEventTickUs;
  auto same_time = [&](double a, double b) {
    return std::abs(a - b) <= std::max(kRel * b, kTicks * kEventTickUs) + kTickSlack;
  };
  for (size_t mib : {1, 4, 16}) {
    auto launch = [&](cudaStream_t st) {
      gpu::bench::launch_mem_kernel(k, thrust::raw_pointer_cast(buf.data()), nullptr, mib << 20,
                                    thrust::raw_pointer_cast(sink.data()), st);
    };
    auto timed = [&](cudaStream_t stream) {
      return gpu::bench::time_kernel(launch, o, stream).median_us;
    };
    const double own = timed(nullptr), legacy = timed(cudaStreamLegacy),
                 per_thread = timed(cudaStreamPerThread), own_again = timed(nullptr);
    const double warm =
        gpu::bench::time_kernel(launch, o, gpu::bench::L2Flush::kNone, 0, cudaStreamLegacy)
            .median_us;
    std::printf(
        "[streams] read_cg_d4_b8 %2zu MiB cold: own stream %.3f us, legacy %.3f us, per-thread "
        "%.3f us, own again %.3f us; planted warm (no flush) on legacy %.3f us\n",
        mib, own, legacy, per_thread, own_again, warm);
    EXPECT_TRUE(same_time(legacy, own)) << mib << " MiB: legacy " << legacy << " own " << own;
    EXPECT_TRUE(same_time(per_thread, own)) << mib << " MiB: per-thread " << per_thread;
    EXPECT_TRUE(same_time(own_again, own)) << mib << " MiB: own again " << own_again;
    if (mib <= 4) EXPECT_FALSE(same_time(warm, own)) << mib << " MiB: a warm read passes the bound";
  }
}

// time_kernel times on one stream per process when given none (gpu::bench::timing_stream()),
// and on the caller's stream when given one. A launch that throws inside a graph capture
// leaves that stream usable: not capturing, and the next timing on it runs.
TEST(BenchHarness, TimesOnTheProcessTimingStream) {
  KVLAB_SKIP_WITHOUT_GPU_BENCH();
  thrust::device_vector<unsigned int> a(1 << 16, 1u), b(1 << 16);
  gpu::bench::TimingOptions o;
  o.warmup = 1;
  o.min_reps = 3;
  o.max_reps = 3;
  o.cold_l2 = false;
  std::set<cudaStream_t> seen;
  auto copy = [&](cudaStream_t s) {
    seen.insert(s);
    KVLAB_CUDA_CHECK(cudaMemcpyAsync(thrust::raw_pointer_cast(b.data()),
                                     thrust::raw_pointer_cast(a.data()), a.size() * 4,
                                     cudaMemcpyDeviceToDevice, s));
  };
  const cudaStream_t ts = gpu::bench::timing_stream();
  ASSERT_NE(ts, nullptr);
  EXPECT_EQ(ts, gpu::bench::timing_stream());
  gpu::bench::time_kernel(copy, o);
  gpu::bench::time_kernel(copy, o);
  EXPECT_EQ(seen, std::set<cudaStream_t>{ts}) << "two timings, one stream: the process's";
  cudaStream_t mine = nullptr;
  KVLAB_CUDA_CHECK(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking));
  seen.clear();
  gpu::bench::time_kernel(copy, o, mine);
  EXPECT_EQ(seen, std::set<cudaStream_t>{mine}) << "a given stream is used as given";
  KVLAB_CUDA_CHECK(cudaStreamDestroy(mine));

  gpu::bench::TimingOptions g = o;
  g.graph = true;
  int calls = 0;
  auto throws_in_capture = [&](cudaStream_t s) {
    if (++calls == 2) throw Error("planted failure inside the capture");
    copy(s);
  };
  EXPECT_THROW(gpu::bench::time_kernel(throws_in_capture, g), Error);
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusActive;
  KVLAB_CUDA_CHECK(cudaStreamIsCapturing(ts, &st));
  EXPECT_EQ(st, cudaStreamCaptureStatusNone) << "the timing stream was left capturing";
  const gpu::bench::Timing t = gpu::bench::time_kernel(copy, g);
  EXPECT_GT(t.median_us, 0.0);
}

// The events bracket the kernel: a cold read's event time is never below its duration measured
// inside the kernel (%globaltimer, first block start to last block end); the difference is
// the timer's fixed cost (launch, event), printed with both for the two-timer cross-check
// (experiments/peers/decode_peers.py crosscheck --diagnose prints the Python timer's).
TEST(BenchHarness, EventsBracketTheKernel) {
  KVLAB_SKIP_WITHOUT_GPU_BENCH();
  thrust::device_vector<unsigned int> buf((size_t{256} << 20) / 4);
  thrust::sequence(buf.begin(), buf.end(), 1u);
  gpu::bench::TimingOptions o;
  o.warmup = 5;
  o.min_reps = 50;
  o.max_reps = 400;
  o.target_rel_iqr = 0.01;
  o.max_seconds = 1.0;
  o.cold_l2 = true;
  for (size_t mib : {1, 4, 16, 256}) {
    std::vector<double> k;
    const gpu::bench::Timing t =
        gpu::bench::time_read_stamped(thrust::raw_pointer_cast(buf.data()), mib << 20, 8, o, &k);
    ASSERT_GE(k.size(), static_cast<size_t>(t.reps));
    std::vector<double> timed(k.end() - t.reps, k.end());
    std::sort(timed.begin(), timed.end());
    const double kernel_median = timed[timed.size() / 2];
    std::printf(
        "[stamps] read_cg_d4_b8 %3zu MiB cold: events %.3f us, in-kernel %.3f us, events - "
        "kernel %.3f us\n",
        mib, t.median_us, kernel_median, t.median_us - kernel_median);
    EXPECT_GT(kernel_median, 0) << mib << " MiB";
    // 0.1 us: the two clocks' granularity.
    EXPECT_LE(kernel_median, t.median_us + 0.1) << mib << " MiB";
  }
}

// The stream hold keeps the host's launch time out of the events (timing.h, hold_stream): a
// launch whose host part takes 300 us before it enqueues a cold 1 MiB read (~4 us on an H100)
// times as the read when held, and as most of the host's 300 us when not (the 200 MiB flush
// covers only ~100 us of it). The planted slow host is what a library's heavy launch path is
// (PyTorch's cuDNN SDPA: 42-93 us per call, session 16).
TEST(BenchHarness, HeldStreamKeepsTheHostsLaunchTimeOutOfTheEvents) {
  KVLAB_SKIP_WITHOUT_GPU_BENCH();
  thrust::device_vector<unsigned int> buf((size_t{1} << 20) / 4), sink(1);
  thrust::sequence(buf.begin(), buf.end(), 1u);
  const gpu::bench::MemKernel k{gpu::bench::MemOp::kRead, gpu::bench::MemLoad::kCg, 4, 8};
  auto slow_host = [&](cudaStream_t st) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(300);
    while (std::chrono::steady_clock::now() < until) {
    }
    gpu::bench::launch_mem_kernel(k, thrust::raw_pointer_cast(buf.data()), nullptr, size_t{1} << 20,
                                  thrust::raw_pointer_cast(sink.data()), st);
  };
  gpu::bench::TimingOptions o = quick();
  o.cold_l2 = true;
  const gpu::bench::Timing held = gpu::bench::time_kernel(slow_host, o);
  o.hold_stream = false;
  const gpu::bench::Timing unheld = gpu::bench::time_kernel(slow_host, o);
  std::printf("[hold] 1 MiB cold read behind 300 us of host time: held %.3f us, not held %.3f us\n",
              held.median_us, unheld.median_us);
  EXPECT_TRUE(held.held);
  EXPECT_FALSE(unheld.held);
  EXPECT_LT(held.median_us, 50.0);
  EXPECT_GT(unheld.median_us, 150.0);
}

// A launch that waits on its own stream from the host would wait for the hold: the hold gives
// up after KVLAB_HOLD_TIMEOUT_NS, the timing starts again unheld and says so.
TEST(BenchHarness, ACallThatWaitsOnItsStreamIsTimedUnheld) {
  KVLAB_SKIP_WITHOUT_GPU_BENCH();
  thrust::device_vector<unsigned int> src((size_t{4} << 20) / 4), dst((size_t{4} << 20) / 4);
  thrust::sequence(src.begin(), src.end(), 3u);
  auto waits = [&](cudaStream_t st) {
    KVLAB_CUDA_CHECK(cudaMemcpyAsync(thrust::raw_pointer_cast(dst.data()),
                                     thrust::raw_pointer_cast(src.data()), size_t{4} << 20,
                                     cudaMemcpyDeviceToDevice, st));
    KVLAB_CUDA_CHECK(cudaStreamSynchronize(st));
  };
  gpu::bench::TimingOptions o = quick();
  o.cold_l2 = true;
  const auto t0 = std::chrono::steady_clock::now();
  const gpu::bench::Timing t = gpu::bench::time_kernel(waits, o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(t.held);
  EXPECT_GE(t.reps, o.min_reps);
  EXPECT_GT(t.median_us, 0.0);
  EXPECT_LT(s, 5.0);  // one hold's timeout (20 ms), not one per sample
}

}  // namespace kvlab::test
