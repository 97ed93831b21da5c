// bench.cpp: kvlab._kvlab.gpu's timing functions: gpu/bench's harness (time_kernel, the timer of
// every `kvlab sweep` point) called from Python, so that the C++ timer can run in the same
// process as a Python timer or a PyTorch peer. Built with CUDA only.
//
//   time_bandwidth(op, load, depth, blocks_per_sm, chunk_kib, mib, options)
//       the kind "bandwidth" of a sweep (experiments/cuda/bandwidth.cpp) without its copy
//       check: buffers of `mib` MiB allocated per call, filled with distinct words, one kernel
//       of gpu/bench timed on the harness's stream;
//   PreparedDecode.time(options)
//       a prepared decode (gpu.cpp) timed the same way (its launch alone per call).
// `options` are reference/core/timing.h's TimingOptions fields by name; every timing returns
// the Timing fields as a dict (samples in microseconds, in call order).
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "experiments/python/bindings/bench.h"
#include "gpu/bench/harness.h"
#include "gpu/core/cuda_check.h"
#include "gpu/core/device_buffer.h"
#include "reference/core/error.h"

namespace kvlab::py {

TimingOptions timing_options(const nb::dict& d) {
  TimingOptions o;
  for (auto [key, value] : d) {
    const std::string k = nb::cast<std::string>(key);
    if (k == "warmup")
      o.warmup = nb::cast<int>(value);
    else if (k == "min_reps")
      o.min_reps = nb::cast<int>(value);
    else if (k == "max_reps")
      o.max_reps = nb::cast<int>(value);
    else if (k == "target_rel_iqr")
      o.target_rel_iqr = nb::cast<double>(value);
    else if (k == "max_seconds")
      o.max_seconds = nb::cast<double>(value);
    else if (k == "cold_l2")
      o.cold_l2 = nb::cast<bool>(value);
    else if (k == "graph")
      o.graph = nb::cast<bool>(value);
    else if (k == "graph_calls")
      o.graph_calls = nb::cast<int>(value);
    else if (k == "hold_stream")
      o.hold_stream = nb::cast<bool>(value);
    else
      KVLAB_REQUIRE(false, "timing option '" << k
                                             << "' is not one of warmup, min_reps, max_reps, "
                                                "target_rel_iqr, max_seconds, cold_l2, graph, "
                                                "graph_calls, hold_stream");
  }
  KVLAB_REQUIRE(o.warmup >= 0 && o.min_reps >= 1 && o.max_reps >= o.min_reps,
                "timing options: need warmup >= 0 and 1 <= min_reps <= max_reps (got warmup "
                    << o.warmup << ", min_reps " << o.min_reps << ", max_reps " << o.max_reps
                    << ")");
  KVLAB_REQUIRE(o.max_seconds > 0 && o.target_rel_iqr >= 0 && o.graph_calls >= 1,
                "timing options: need max_seconds > 0, target_rel_iqr >= 0, graph_calls >= 1");
  return o;
}

nb::dict timing_dict(const Timing& t) {
  nb::dict d;
  d["median_us"] = t.median_us;
  d["q1_us"] = t.q1_us;
  d["q3_us"] = t.q3_us;
  d["iqr_us"] = t.iqr_us;
  d["rel_iqr"] = t.rel_iqr;
  d["min_us"] = t.min_us;
  d["mean_us"] = t.mean_us;
  d["reps"] = t.reps;
  d["converged"] = t.converged;
  d["cold_l2"] = t.cold_l2;
  d["graph"] = t.graph;
  d["calls_per_sample"] = t.calls_per_sample;
  d["held"] = t.held;
  d["flush"] = std::string(to_string(t.flush));
  d["flush_bytes"] = t.flush_bytes;
  d["l2_bytes"] = t.l2_bytes;
  nb::list samples;
  for (float s : t.samples_us) samples.append(static_cast<double>(s));
  d["samples_us"] = samples;
  return d;
}

namespace {

gpu::bench::MemKernel mem_kernel(const std::string& op, const std::string& load, int depth,
                                 int blocks_per_sm, int chunk_kib) {
  gpu::bench::MemKernel k;
  KVLAB_REQUIRE(op == "read" || op == "copy", "op '" << op << "' is not one of read, copy");
  k.op = op == "copy" ? gpu::bench::MemOp::kCopy : gpu::bench::MemOp::kRead;
  if (load == "cg")
    k.load = gpu::bench::MemLoad::kCg;
  else if (load == "plain")
    k.load = gpu::bench::MemLoad::kPlain;
  else if (load == "nc")
    k.load = gpu::bench::MemLoad::kNc;
  else if (load == "memcpy")
    k.load = gpu::bench::MemLoad::kMemcpy;
  else if (load == "bulk")
    k.load = gpu::bench::MemLoad::kBulk;
  else
    KVLAB_REQUIRE(false, "load '" << load << "' is not one of cg, plain, nc, memcpy, bulk");
  k.depth = depth;
  k.blocks_per_sm = blocks_per_sm;
  k.chunk_kib = chunk_kib;
  const std::string why = gpu::bench::mem_kernel_unsupported(k);
  KVLAB_REQUIRE(why.empty(), "bandwidth kernel " << op << " " << load << " depth " << depth
                                                 << ": " << why);
  return k;
}

nb::dict time_bandwidth(const std::string& op, const std::string& load, int depth,
                        int blocks_per_sm, int chunk_kib, int64_t mib, const nb::dict& options) {
  const gpu::bench::MemKernel k = mem_kernel(op, load, depth, blocks_per_sm, chunk_kib);
  KVLAB_REQUIRE(mib >= 1 && mib <= (int64_t{1} << 16), "mib " << mib << " is outside [1, 65536]");
  const TimingOptions o = timing_options(options);
  const uint64_t bytes = static_cast<uint64_t>(mib) << 20;
  const bool copy = k.op == gpu::bench::MemOp::kCopy;
  gpu::DeviceBuffer src(bytes), dst(copy ? bytes : 16), sink(4);
  gpu::bench::fill_words(src.data(), bytes);
  KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
  Timing t;
  {
    nb::gil_scoped_release release;  // a timing takes up to max_seconds of the host
    t = gpu::bench::time_kernel(
        [&](cudaStream_t s) {
          gpu::bench::launch_mem_kernel(k, src.data(), dst.data(), bytes, sink.as<unsigned int>(),
                                        s);
        },
        o);
  }
  nb::dict d = timing_dict(t);
  d["kernel"] = k.name();
  d["bytes_moved"] = (copy ? 2.0 : 1.0) * static_cast<double>(bytes);
  return d;
}

}  // namespace

void bind_bench(nb::module_& m) {
  m.def("time_bandwidth", &time_bandwidth, nb::arg("op"), nb::arg("load"), nb::arg("depth"),
        nb::arg("blocks_per_sm"), nb::arg("chunk_kib"), nb::arg("mib"), nb::arg("options"),
        "time one gpu/bench bandwidth kernel over fresh buffers of `mib` MiB with the C++ "
        "harness (the sweep's timer); returns the Timing fields as a dict");
}

}  // namespace kvlab::py
