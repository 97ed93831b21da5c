// ref.cpp: kvlab._kvlab.ref, the CPU reference on host arrays: decode and paged (chunked)
// prefill attention over a paged cache, append / quantize-on-write, quantize and dequantize of
// every scheme (reference/quant/schemes.h). The DSV4 substrate ops are in dsv4.cpp.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "experiments/python/bindings/paged.h"
#include "reference/attention/attention.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "reference/quant/append.h"
#include "reference/quant/schemes.h"

namespace kvlab::py {

namespace {

CacheArrays cache(const Array& k_cache, const Array& v_cache, const OptArray& k_scales,
                  const OptArray& v_scales, const std::string& layout,
                  const std::string& kv_format, float k_scale, float v_scale) {
  return CacheArrays{k_cache, v_cache, k_scales, v_scales, layout, kv_format, k_scale, v_scale};
}

void decode_attention(const Array& q, const Array& out, const OptArray& lse, const Array& k_cache,
                      const Array& v_cache, const OptArray& k_scales, const OptArray& v_scales,
                      const std::string& layout, const std::string& kv_format, float k_scale,
                      float v_scale, const Array& block_table, const Array& seq_lens,
                      float sm_scale, int max_seq_len, const std::string& q_dtype) {
  Checker c(Where::kHost);
  const DecodeArgs a = decode_args(
      c, q, out, lse, cache(k_cache, v_cache, k_scales, v_scales, layout, kv_format, k_scale, v_scale),
      block_table, seq_lens, sm_scale, max_seq_len, q_dtype);
  ref::validate_decode_args(a);
  nb::gil_scoped_release unlocked;
  ref::decode_attention(a);
}

// The unrounded float64 result: out_exact [S, Hq, D] float64, lse_exact [S, Hq] float64.
void decode_attention_exact(const Array& q, const Array& out_exact, const OptArray& lse_exact,
                            const Array& k_cache, const Array& v_cache, const OptArray& k_scales,
                            const OptArray& v_scales, const std::string& layout,
                            const std::string& kv_format, float k_scale, float v_scale,
                            const Array& block_table, const Array& seq_lens, float sm_scale,
                            int max_seq_len, const std::string& q_dtype) {
  Checker c(Where::kHost);
  // The struct needs an `o` of q's dtype for its checks; the exact path ignores it.
  const DecodeArgs a = decode_args(
      c, q, q, std::nullopt,
      cache(k_cache, v_cache, k_scales, v_scales, layout, kv_format, k_scale, v_scale),
      block_table, seq_lens, sm_scale, max_seq_len, q_dtype);
  double* o = static_cast<double*>(
      c.check(out_exact, "out", Elem::kF64, {a.num_seqs, a.num_qo_heads, a.kv.geom.head_dim}));
  double* l = static_cast<double*>(
      c.check_opt(lse_exact, "lse", Elem::kF64, {a.num_seqs, a.num_qo_heads}));
  ref::validate_decode_args(a);
  nb::gil_scoped_release unlocked;
  ref::decode_attention_exact(a, o, l);
}

void paged_prefill_attention(const Array& q, const Array& out, const OptArray& lse,
                             const Array& k_cache, const Array& v_cache, const OptArray& k_scales,
                             const OptArray& v_scales, const std::string& layout,
                             const std::string& kv_format, float k_scale, float v_scale,
                             const Array& block_table, const Array& seq_lens, const Array& q_start,
                             float sm_scale, int max_q_len, int max_seq_len,
                             const std::string& q_dtype) {
  Checker c(Where::kHost);
  const PagedPrefillArgs a =
      prefill_args(c, q, out, lse,
                   cache(k_cache, v_cache, k_scales, v_scales, layout, kv_format, k_scale, v_scale),
                   block_table, seq_lens, q_start, sm_scale, max_q_len, max_seq_len, q_dtype);
  ref::validate_paged_prefill_args(a);
  KVLAB_REQUIRE(a.q_start[a.num_seqs] == dim(q, 0),
                "q_start: the chunks end at row " << a.q_start[a.num_seqs] << " but q has "
                                                  << dim(q, 0) << " rows");
  nb::gil_scoped_release unlocked;
  ref::paged_prefill_attention(a);
}

void append_kv(const Array& k, const Array& v, const Array& slot_mapping, const Array& k_cache,
               const Array& v_cache, const OptArray& k_scales, const OptArray& v_scales,
               const std::string& layout, const std::string& kv_format, float k_scale,
               float v_scale, const std::string& in_dtype) {
  Checker c(Where::kHost);
  const AppendArgs a = append_args(
      c, k, v, slot_mapping,
      cache(k_cache, v_cache, k_scales, v_scales, layout, kv_format, k_scale, v_scale), in_dtype);
  nb::gil_scoped_release unlocked;
  ref::append_kv(a);  // validates everything (slots included) before writing
}

int64_t stream_bytes(const std::string& scheme, int64_t rows, int64_t cols, int page_block_size) {
  const ref::QuantScheme s = ref::make_scheme(scheme);
  s.check_cols(cols);
  KVLAB_REQUIRE(rows >= 0, "rows must be >= 0, got " << rows);
  KVLAB_REQUIRE(page_block_size >= 0, "page_block_size must be >= 0, got " << page_block_size);
  return page_block_size > 0 ? s.paged_bytes(rows, cols, page_block_size)
                             : s.stream_bytes(rows, cols);
}

void quantize(const Array& x, const Array& out, const std::string& scheme,
              std::optional<float> tensor_scale, int page_block_size) {
  Checker c(Where::kHost);
  const ref::QuantScheme s = ref::make_scheme(scheme);
  const float* in = static_cast<const float*>(c.check_rank(x, "x", Elem::kF32, 2));
  const int64_t rows = dim(x, 0), cols = dim(x, 1);
  const int64_t n = stream_bytes(scheme, rows, cols, page_block_size);
  uint8_t* o = static_cast<uint8_t*>(c.check(out, "out", Elem::kU8, {n}));
  std::vector<uint8_t> bytes;
  {
    nb::gil_scoped_release unlocked;
    const ref::QuantizedTensor qt = s.quantize(in, rows, cols, tensor_scale);
    bytes = page_block_size > 0 ? s.pack_pages(qt, page_block_size) : s.pack(qt);
  }
  KVLAB_REQUIRE(static_cast<int64_t>(bytes.size()) == n,
                "internal: stream of " << bytes.size() << " bytes, expected " << n);
  std::memcpy(o, bytes.data(), bytes.size());
}

void dequantize(const Array& in, const Array& out, const std::string& scheme, int page_block_size) {
  Checker c(Where::kHost);
  const ref::QuantScheme s = ref::make_scheme(scheme);
  float* o = static_cast<float*>(c.check_rank(out, "out", Elem::kF32, 2));
  const int64_t rows = dim(out, 0), cols = dim(out, 1);
  const int64_t n = stream_bytes(scheme, rows, cols, page_block_size);
  const uint8_t* b = static_cast<const uint8_t*>(c.check(in, "stream", Elem::kU8, {n}));
  std::vector<float> vals;
  {
    nb::gil_scoped_release unlocked;
    const ref::QuantizedTensor qt = page_block_size > 0
                                        ? s.unpack_pages(b, n, rows, cols, page_block_size)
                                        : s.unpack(b, n, rows, cols);
    vals = s.dequantize(qt);
  }
  std::memcpy(o, vals.data(), vals.size() * sizeof(float));
}

Op parse_op(const std::string& name) {
  std::string names;
  for (Op o : all_ops()) {
    if (to_string(o) == name) return o;
    names += (names.empty() ? "" : ", ") + to_string(o);
  }
  throw InvalidArgument("unknown operation '" + name + "' (the tolerance table has: " + names + ")");
}

nb::dict tolerance_of(const std::string& op, const std::string& kv_format, const std::string& out_dtype) {
  const Tolerance t = tolerance(parse_op(op), parse_kv_format(kv_format), parse_dtype(out_dtype));
  nb::dict d;
  d["atol"] = t.atol;
  d["rtol"] = t.rtol;
  d["nmse_max"] = t.nmse_max;
  // Units (checked arrays) of fewer than nmse_small_below elements are held to nmse_max_small
  // instead (0, 0: one bound for every size); check_close applies the same rule.
  d["nmse_max_small"] = t.nmse_max_small;
  d["nmse_small_below"] = t.nmse_small_below;
  d["allow_nonfinite"] = t.allow_nonfinite;
  d["why"] = std::string(t.why);
  return d;
}

// The tolerance table's verdict on float32 `out` against float32 `expected` (same size):
// (passed, explanation of a failure or "").
std::pair<bool, std::string> check_close(const Array& out, const Array& expected, const std::string& op,
                                         const std::string& kv_format, const std::string& out_dtype) {
  Checker c(Where::kHost);
  const float* o = static_cast<const float*>(c.check_rank(out, "out", Elem::kF32, out.ndim()));
  const float* e = static_cast<const float*>(c.check_rank(expected, "expected", Elem::kF32, expected.ndim()));
  KVLAB_REQUIRE(out.size() == expected.size(), "out has " << out.size() << " values, expected "
                                                          << expected.size());
  const DType dt = parse_dtype(out_dtype);
  const Tolerance t = tolerance(parse_op(op), parse_kv_format(kv_format), dt);
  ErrorStats s;
  const bool ok = check(o, e, out.size(), t, &s, dt);
  return {ok, ok ? std::string() : explain_failure(s, t)};
}

}  // namespace

#define KVLAB_PY_CACHE_ARGS                                                              \
  nb::arg("k_cache"), nb::arg("v_cache"), nb::arg("k_scales").none(),                   \
      nb::arg("v_scales").none(), nb::arg("layout"), nb::arg("kv_format"), nb::arg("k_scale"), \
      nb::arg("v_scale")

void bind_ref(nb::module_& m) {
  m.def("decode_attention", &decode_attention, nb::arg("q"), nb::arg("out"), nb::arg("lse").none(),
        KVLAB_PY_CACHE_ARGS, nb::arg("block_table"), nb::arg("seq_lens"), nb::arg("sm_scale"),
        nb::arg("max_seq_len"), nb::arg("q_dtype"));
  m.def("decode_attention_exact", &decode_attention_exact, nb::arg("q"), nb::arg("out"),
        nb::arg("lse").none(), KVLAB_PY_CACHE_ARGS, nb::arg("block_table"), nb::arg("seq_lens"),
        nb::arg("sm_scale"), nb::arg("max_seq_len"), nb::arg("q_dtype"));
  m.def("paged_prefill_attention", &paged_prefill_attention, nb::arg("q"), nb::arg("out"),
        nb::arg("lse").none(), KVLAB_PY_CACHE_ARGS, nb::arg("block_table"), nb::arg("seq_lens"),
        nb::arg("q_start"), nb::arg("sm_scale"), nb::arg("max_q_len"), nb::arg("max_seq_len"),
        nb::arg("q_dtype"));
  m.def("append_kv", &append_kv, nb::arg("k"), nb::arg("v"), nb::arg("slot_mapping"),
        KVLAB_PY_CACHE_ARGS, nb::arg("in_dtype"));
  m.def("quant_stream_bytes", &stream_bytes, nb::arg("scheme"), nb::arg("rows"), nb::arg("cols"),
        nb::arg("page_block_size"));
  m.def("quantize", &quantize, nb::arg("x"), nb::arg("out"), nb::arg("scheme"),
        nb::arg("tensor_scale").none(), nb::arg("page_block_size"));
  m.def("dequantize", &dequantize, nb::arg("stream"), nb::arg("out"), nb::arg("scheme"),
        nb::arg("page_block_size"));
  m.def("tolerance", &tolerance_of, nb::arg("op"), nb::arg("kv_format"), nb::arg("out_dtype"));
  m.def("check_close", &check_close, nb::arg("out"), nb::arg("expected"), nb::arg("op"),
        nb::arg("kv_format"), nb::arg("out_dtype"));
  m.def("scheme_names", []() { return ref::scheme_names(); });
  m.def("scheme_spec", [](const std::string& text) {
    return ref::to_string(ref::parse_scheme_spec(text));
  });
}

}  // namespace kvlab::py
