// gpu.cpp: kvlab._kvlab.gpu, the GPU kernels on CUDA arrays (built with CUDA only): decode
// attention of every registered version, paged (chunked) prefill attention, append /
// quantize-on-write, quantize and dequantize. Each call launches on the stream it is given (an
// integer cudaStream_t, 0 = the legacy default stream), on the device its arrays live on, and
// allocates nothing: split-KV workspace comes from the caller (decode_workspace_bytes sizes it).
// The versions are read from the registries (gpu/attention/decode.h, prefill.h) at call time,
// so a newly registered version is callable without touching this file. Decode version
// kAutoVersion (-1, Python's "auto") is gpu::choose_decode's pick for the call's arguments on
// the arrays' device (version and plan knobs), the rule `kvlab sweep` applies to version = auto.
// A PreparedDecode also times its launch with gpu/bench's harness (bench.cpp).
#include <cuda_runtime_api.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "experiments/python/bindings/bench.h"
#include "experiments/python/bindings/paged.h"
#include "gpu/bench/harness.h"
#include "gpu/attention/decode.h"
#include "gpu/attention/decode_auto.h"
#include "gpu/attention/prefill.h"
#include "gpu/core/cuda_check.h"
#include "gpu/quant/append.h"
#include "gpu/quant/quantize.h"

namespace kvlab::py {

// Makes the arrays' device current for the call (kernels launch on the current device) and
// restores the caller's afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    KVLAB_CUDA_CHECK(cudaGetDevice(&prev_));
    if (device >= 0 && device != prev_) {
      KVLAB_CUDA_CHECK(cudaSetDevice(device));
      restore_ = true;
    }
  }
  ~DeviceGuard() {
    if (restore_) cudaSetDevice(prev_);
  }

 private:
  int prev_ = 0;
  bool restore_ = false;
};

namespace {

cudaStream_t as_stream(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

CacheArrays cache(const Array& k_cache, const Array& v_cache, const OptArray& k_scales,
                  const OptArray& v_scales, const std::string& layout,
                  const std::string& kv_format, float k_scale, float v_scale) {
  return CacheArrays{k_cache, v_cache, k_scales, v_scales, layout, kv_format, k_scale, v_scale};
}

DecodeArgs decode_args_of(Checker& c, const Array& q, const Array& out, const OptArray& lse,
                          const CacheArrays& cache, const Array& block_table,
                          const Array& seq_lens, float sm_scale, int max_seq_len,
                          const std::string& q_dtype) {
  return decode_args(c, q, out, lse, cache, block_table, seq_lens, sm_scale, max_seq_len, q_dtype);
}

std::vector<std::tuple<int, std::string, std::string>> versions() {
  std::vector<std::tuple<int, std::string, std::string>> out;
  for (const auto& v : gpu::decode_versions()) out.emplace_back(v.id, v.name, v.summary);
  return out;
}

#define KVLAB_PY_DECODE_PARAMS                                                                    \
  const Array &q, const Array &out, const OptArray &lse, const Array &k_cache,                  \
      const Array &v_cache, const OptArray &k_scales, const OptArray &v_scales,                 \
      const std::string &layout, const std::string &kv_format, float k_scale, float v_scale,    \
      const Array &block_table, const Array &seq_lens, float sm_scale, int max_seq_len,         \
      const std::string &q_dtype
#define KVLAB_PY_DECODE_BUILD                                                                     \
  Checker c(Where::kDevice);                                                                      \
  const DecodeArgs a = decode_args_of(                                                            \
      c, q, out, lse,                                                                             \
      cache(k_cache, v_cache, k_scales, v_scales, layout, kv_format, k_scale, v_scale),           \
      block_table, seq_lens, sm_scale, max_seq_len, q_dtype)

constexpr int kAutoVersion = -1;

// The version and plan knobs one call runs: `version` as given (the version's own plan), or
// for kAutoVersion gpu::choose_decode's pick on the current device (throws Unsupported when
// no version handles the arguments).
struct Resolved {
  int version = 0;
  gpu::DecodeTuning tuning;
  std::string basis;  // how auto chose ("" for an explicit version)
};

Resolved resolve(const DecodeArgs& a, int version) {
  Resolved r;
  if (version == kAutoVersion) {
    const gpu::DecodeChoice ch = gpu::choose_decode(a);
    r.version = ch.version;
    r.tuning = ch.tuning;
    r.basis = ch.basis;
  } else {
    gpu::decode_version(version);  // unknown ids: InvalidArgument naming the registered ones
    r.version = version;
  }
  return r;
}

std::tuple<int, int, std::string> choose(KVLAB_PY_DECODE_PARAMS) {
  KVLAB_PY_DECODE_BUILD;
  DeviceGuard guard(c.device_id());  // the device whose calibration rows apply
  const Resolved r = resolve(a, kAutoVersion);
  return {r.version, r.tuning.num_splits, r.basis};
}

size_t workspace_bytes(KVLAB_PY_DECODE_PARAMS, int version) {
  KVLAB_PY_DECODE_BUILD;
  DeviceGuard guard(c.device_id());
  const Resolved r = resolve(a, version);
  return gpu::decode_workspace_bytes(a, r.version, r.tuning);
}

std::string unsupported_reason(KVLAB_PY_DECODE_PARAMS, int version) {
  KVLAB_PY_DECODE_BUILD;
  DeviceGuard guard(c.device_id());
  Resolved r;
  try {
    r = resolve(a, version);
  } catch (const Unsupported& e) {
    return e.what();  // auto: no version handles the arguments
  }
  return gpu::decode_unsupported_reason(a, r.version, r.tuning);
}

void* checked_workspace(Checker& c, const OptArray& workspace, const DecodeArgs& a,
                        const Resolved& r, size_t* bytes) {
  const size_t need = gpu::decode_workspace_bytes(a, r.version, r.tuning);
  void* ws = nullptr;
  *bytes = 0;
  if (workspace) {
    ws = c.check_rank(*workspace, "workspace", Elem::kU8, 1);
    *bytes = workspace->nbytes();
  }
  KVLAB_REQUIRE(*bytes >= need, "version " << gpu::decode_version(r.version).name << " needs a "
                                           << need << "-byte workspace for this shape, got "
                                           << *bytes
                                           << " (size it with decode_workspace_bytes)");
  return ws;
}

// Returns the version id that ran.
int decode_attention(KVLAB_PY_DECODE_PARAMS, int version, const OptArray& workspace,
                     uintptr_t stream) {
  KVLAB_PY_DECODE_BUILD;
  DeviceGuard guard(c.device_id());
  const Resolved r = resolve(a, version);
  size_t ws_bytes = 0;
  void* ws = checked_workspace(c, workspace, a, r, &ws_bytes);
  gpu::decode_attention(a, r.version, r.tuning, ws, ws_bytes, as_stream(stream));
  return r.version;
}

// A decode call checked once and launched many times (timed loops, CUDA-graph capture):
// holds its arrays (so the tensors stay alive) and the argument struct; run() only launches.
struct PreparedDecode {
  std::vector<Array> keep;
  DecodeArgs args;
  int version = 0;
  gpu::DecodeTuning tuning;
  std::string basis;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  uintptr_t stream = 0;
  int device = -1;

  // On `on` when given (the stream current at run time), else on the stream of preparation.
  void run(std::optional<uintptr_t> on) const {
    DeviceGuard guard(device);
    gpu::decode_attention(args, version, tuning, workspace, workspace_bytes,
                          as_stream(on ? *on : stream));
  }
  int num_splits() const { return tuning.num_splits; }

  // The launch timed by gpu/bench's harness (time_kernel on its own stream, the rules of
  // `options`), as a `kvlab sweep` point times it: the C++ timer inside the caller's process.
  nb::dict time(const nb::dict& options) const {
    const TimingOptions o = timing_options(options);
    DeviceGuard guard(device);
    Timing t;
    {
      nb::gil_scoped_release release;
      t = gpu::bench::time_kernel(
          [&](cudaStream_t s) {
            gpu::decode_attention(args, version, tuning, workspace, workspace_bytes, s);
          },
          o);
    }
    return timing_dict(t);
  }
};

PreparedDecode prepare_decode(KVLAB_PY_DECODE_PARAMS, int version, const OptArray& workspace,
                              uintptr_t stream) {
  KVLAB_PY_DECODE_BUILD;
  DeviceGuard guard(c.device_id());
  const Resolved r = resolve(a, version);
  PreparedDecode p;
  p.args = a;
  p.version = r.version;
  p.tuning = r.tuning;
  p.basis = r.basis;
  p.stream = stream;
  p.device = c.device_id();
  p.workspace = checked_workspace(c, workspace, a, r, &p.workspace_bytes);
  if (workspace) p.keep.push_back(*workspace);
  const std::string why = gpu::decode_unsupported_reason(a, r.version, r.tuning);
  KVLAB_UNSUPPORTED_IF(!why.empty(), why);
  for (const Array* x : {&q, &out, &k_cache, &v_cache, &block_table, &seq_lens}) p.keep.push_back(*x);
  for (const OptArray* x : {&lse, &k_scales, &v_scales})
    if (*x) p.keep.push_back(**x);
  return p;
}

void validate_tables(KVLAB_PY_DECODE_PARAMS, uintptr_t stream) {
  KVLAB_PY_DECODE_BUILD;
  DeviceGuard guard(c.device_id());
  gpu::validate_decode_tables(a, as_stream(stream));
}

#define KVLAB_PY_PREFILL_PARAMS                                                                   \
  const Array &q, const Array &out, const OptArray &lse, const Array &k_cache,                  \
      const Array &v_cache, const OptArray &k_scales, const OptArray &v_scales,                 \
      const std::string &layout, const std::string &kv_format, float k_scale, float v_scale,    \
      const Array &block_table, const Array &seq_lens, const Array &q_start, float sm_scale,    \
      int max_q_len, int max_seq_len, const std::string &q_dtype
#define KVLAB_PY_PREFILL_BUILD                                                                    \
  Checker c(Where::kDevice);                                                                      \
  const PagedPrefillArgs a = prefill_args(                                                        \
      c, q, out, lse,                                                                             \
      cache(k_cache, v_cache, k_scales, v_scales, layout, kv_format, k_scale, v_scale),           \
      block_table, seq_lens, q_start, sm_scale, max_q_len, max_seq_len, q_dtype)

std::vector<std::tuple<int, std::string, std::string>> prefill_versions() {
  std::vector<std::tuple<int, std::string, std::string>> out;
  for (const auto& v : gpu::prefill_versions()) out.emplace_back(v.id, v.name, v.summary);
  return out;
}

std::string prefill_unsupported_reason(KVLAB_PY_PREFILL_PARAMS, int version) {
  KVLAB_PY_PREFILL_BUILD;
  gpu::prefill_version(version);
  return gpu::prefill_unsupported_reason(a, version);
}

// validate_tables: the device tables through the reference's checks (synchronizes), plus the
// one relation only the caller's q shows: the chunks end at q's last row.
void prefill_attention(KVLAB_PY_PREFILL_PARAMS, int version, bool validate_tables,
                       uintptr_t stream) {
  KVLAB_PY_PREFILL_BUILD;
  gpu::prefill_version(version);  // unknown ids: InvalidArgument naming the registered ones
  DeviceGuard guard(c.device_id());
  if (validate_tables) {
    gpu::validate_prefill_tables(a, as_stream(stream));
    int32_t end = 0;
    KVLAB_CUDA_CHECK(cudaMemcpy(&end, a.q_start + a.num_seqs, sizeof end, cudaMemcpyDeviceToHost));
    KVLAB_REQUIRE(end == dim(q, 0), "q_start: the chunks end at row " << end << " but q has "
                                                                      << dim(q, 0) << " rows");
  }
  gpu::prefill_attention(a, version, as_stream(stream));
}

void append_kv(const Array& k, const Array& v, const Array& slot_mapping, const Array& k_cache,
               const Array& v_cache, const OptArray& k_scales, const OptArray& v_scales,
               const std::string& layout, const std::string& kv_format, float k_scale,
               float v_scale, const std::string& in_dtype, bool check_slots, uintptr_t stream) {
  Checker c(Where::kDevice);
  const AppendArgs a = append_args(
      c, k, v, slot_mapping,
      cache(k_cache, v_cache, k_scales, v_scales, layout, kv_format, k_scale, v_scale), in_dtype);
  DeviceGuard guard(c.device_id());
  gpu::append_kv(a, as_stream(stream), check_slots ? gpu::SlotCheck::kValidate
                                                   : gpu::SlotCheck::kTrusted);
}

void quantize(const Array& x, const Array& out, const std::string& scheme,
              std::optional<float> tensor_scale, int page_block_size, uintptr_t stream) {
  Checker c(Where::kDevice);
  const ref::QuantScheme s = ref::make_scheme(scheme);
  const float* in = static_cast<const float*>(c.check_rank(x, "x", Elem::kF32, 2));
  const int64_t rows = dim(x, 0), cols = dim(x, 1);
  s.check_cols(cols);
  const int64_t n = gpu::quant_stream_bytes(s, rows, cols, page_block_size);
  uint8_t* o = static_cast<uint8_t*>(c.check(out, "out", Elem::kU8, {n}));
  DeviceGuard guard(c.device_id());
  gpu::quantize(s, in, rows, cols, o, static_cast<size_t>(n), as_stream(stream), tensor_scale,
                page_block_size);
}

void dequantize(const Array& in, const Array& out, const std::string& scheme, int page_block_size,
                uintptr_t stream) {
  Checker c(Where::kDevice);
  const ref::QuantScheme s = ref::make_scheme(scheme);
  float* o = static_cast<float*>(c.check_rank(out, "out", Elem::kF32, 2));
  const int64_t rows = dim(out, 0), cols = dim(out, 1);
  s.check_cols(cols);
  const int64_t n = gpu::quant_stream_bytes(s, rows, cols, page_block_size);
  const uint8_t* b = static_cast<const uint8_t*>(c.check(in, "stream", Elem::kU8, {n}));
  DeviceGuard guard(c.device_id());
  gpu::dequantize(s, b, static_cast<size_t>(n), rows, cols, o, as_stream(stream), page_block_size);
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver / no device: clear the sticky-free error, report none
    return 0;
  }
  return n;
}

}  // namespace

#define KVLAB_PY_CACHE_ARGS                                                              \
  nb::arg("k_cache"), nb::arg("v_cache"), nb::arg("k_scales").none(),                   \
      nb::arg("v_scales").none(), nb::arg("layout"), nb::arg("kv_format"), nb::arg("k_scale"), \
      nb::arg("v_scale")
#define KVLAB_PY_DECODE_ARGS                                                              \
  nb::arg("q"), nb::arg("out"), nb::arg("lse").none(), KVLAB_PY_CACHE_ARGS,              \
      nb::arg("block_table"), nb::arg("seq_lens"), nb::arg("sm_scale"), nb::arg("max_seq_len"), \
      nb::arg("q_dtype")

void bind_gpu(nb::module_& m) {
  m.def("device_count", &device_count);
  bind_bench(m);
  m.def("decode_versions", &versions);
  m.attr("AUTO_VERSION") = kAutoVersion;
  m.def("choose_decode", &choose, KVLAB_PY_DECODE_ARGS);
  m.def("decode_workspace_bytes", &workspace_bytes, KVLAB_PY_DECODE_ARGS, nb::arg("version"));
  m.def("decode_unsupported_reason", &unsupported_reason, KVLAB_PY_DECODE_ARGS,
        nb::arg("version"));
  m.def("decode_attention", &decode_attention, KVLAB_PY_DECODE_ARGS, nb::arg("version"),
        nb::arg("workspace").none(), nb::arg("stream"));
  nb::class_<PreparedDecode>(m, "PreparedDecode")
      .def("run", &PreparedDecode::run, nb::arg("stream").none() = nb::none(),
           "launch the prepared decode on `stream` (default: the stream of preparation)")
      .def_ro("version", &PreparedDecode::version)
      .def_prop_ro("num_splits", &PreparedDecode::num_splits)
      .def_ro("basis", &PreparedDecode::basis)
      .def_ro("stream", &PreparedDecode::stream)
      .def("time", &PreparedDecode::time, nb::arg("options"),
           "time the launch with gpu/bench's harness (the sweep's timer) in this process; "
           "returns the Timing fields as a dict");
  m.def("prepare_decode_attention", &prepare_decode, KVLAB_PY_DECODE_ARGS, nb::arg("version"),
        nb::arg("workspace").none(), nb::arg("stream"));
  m.def("validate_decode_tables", &validate_tables, KVLAB_PY_DECODE_ARGS, nb::arg("stream"));
  m.def("append_kv", &append_kv, nb::arg("k"), nb::arg("v"), nb::arg("slot_mapping"),
        KVLAB_PY_CACHE_ARGS, nb::arg("in_dtype"), nb::arg("check_slots"), nb::arg("stream"));
#define KVLAB_PY_PREFILL_ARGS                                                                \
  nb::arg("q"), nb::arg("out"), nb::arg("lse").none(), KVLAB_PY_CACHE_ARGS,                 \
      nb::arg("block_table"), nb::arg("seq_lens"), nb::arg("q_start"), nb::arg("sm_scale"),  \
      nb::arg("max_q_len"), nb::arg("max_seq_len"), nb::arg("q_dtype")
  m.def("prefill_versions", &prefill_versions);
  m.def("prefill_unsupported_reason", &prefill_unsupported_reason, KVLAB_PY_PREFILL_ARGS,
        nb::arg("version"));
  m.def("prefill_attention", &prefill_attention, KVLAB_PY_PREFILL_ARGS, nb::arg("version"),
        nb::arg("validate_tables"), nb::arg("stream"));

  m.def("quantize", &quantize, nb::arg("x"), nb::arg("out"), nb::arg("scheme"),
        nb::arg("tensor_scale").none(), nb::arg("page_block_size"), nb::arg("stream"));
  m.def("dequantize", &dequantize, nb::arg("stream_bytes"), nb::arg("out"), nb::arg("scheme"),
        nb::arg("page_block_size"), nb::arg("stream"));
}

}  // namespace kvlab::py
