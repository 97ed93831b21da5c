// dsv4.cpp: the DeepSeek-V4-style substrate ops (reference/dsv4/cache_ops.h, compressor.h;
// GPU mirrors in gpu/dsv4/dsv4_kernels.h) on host arrays (kvlab._kvlab.ref) and CUDA arrays
// (kvlab._kvlab.gpu).
//
// The cache views of reference/dsv4/views.h are passed as Python objects whose attributes
// hold the arrays and sizes (kvlab.dsv4's SwaRing, CompressedPool, IndexerKeys,
// CompressorState); the views are built here from those attributes after the same checks
// for both sides:
//   entry pages  format "fp8_per_token": data uint8 [P, rows, nope], rope bf16 [P, rows,
//                rope], inv_scale float32 [P, rows]; "fp8_ds_mla": data uint8 [P, rows *
//                entry_bytes] (data rows then scale rows), rope = inv_scale = None
//   SwaRing      pages (P = request slots, rows = window) + pos int32 [P, window] + head
//                int32 [P] + ring_mode "atomic_head" | "pos_mod_window"
//   CompressedPool pages (P = blocks) + block_table int32 [R, M] + ratio
//   IndexerKeys  format "nvfp4" | "mxfp4_hadamard", codes uint8 [NB, rows, dim/2], scales
//                uint8 [NB, rows, dim/g], tensor_scale, block_table int32 [R, M], ratio
//   CompressorState ratio, dim, overlap, ka, za float32 [slots, (2,) ratio, dim], kb, zb
//                float32 [slots, ratio, dim] (overlap only)
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cmath>

#include "experiments/python/bindings/arrays.h"
#include "reference/dsv4/cache_ops.h"
#include "reference/dsv4/compressor.h"
#include "reference/dsv4/variant_names.h"
#if KVLAB_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "gpu/core/cuda_check.h"
#include "gpu/dsv4/dsv4_kernels.h"
#endif

namespace kvlab::py {

namespace {

Array arr(const nb::handle& obj, const char* attr) {
  nb::object v = obj.attr(attr);
  KVLAB_REQUIRE(!v.is_none(), attr << " is None");
  return nb::cast<Array>(v);
}
OptArray opt_arr(const nb::handle& obj, const char* attr) {
  nb::object v = obj.attr(attr);
  if (v.is_none()) return std::nullopt;
  return nb::cast<Array>(v);
}
template <typename T>
T val(const nb::handle& obj, const char* attr) {
  return nb::cast<T>(obj.attr(attr));
}

Dsv4EntryPages entry_pages(Checker& c, const nb::handle& obj, const std::string& what) {
  Dsv4EntryPages p;
  p.format = parse_dsv4_entry_format(val<std::string>(obj, "entry_format"));
  p.nope_dim = val<int32_t>(obj, "nope_dim");
  p.rope_dim = val<int32_t>(obj, "rope_dim");
  KVLAB_REQUIRE(p.nope_dim > 0 && p.rope_dim >= 0,
                what << ": nope_dim " << p.nope_dim << ", rope_dim " << p.rope_dim);
  const std::string dn = what + ".data";
  const Array data = arr(obj, "data");
  if (p.format == Dsv4EntryFormat::kFp8PerToken) {
    c.check_rank(data, dn.c_str(), Elem::kFP8E4M3, 3);
    p.num_pages = dim(data, 0);
    p.rows = static_cast<int32_t>(dim(data, 1));
    c.check(data, dn.c_str(), Elem::kFP8E4M3, {p.num_pages, p.rows, p.nope_dim});
    p.data = static_cast<uint8_t*>(data.data());
    const std::string rn = what + ".rope", sn = what + ".inv_scale";
    p.rope = static_cast<uint16_t*>(
        c.check(arr(obj, "rope"), rn.c_str(), Elem::kBF16, {p.num_pages, p.rows, p.rope_dim}));
    p.inv_scale = static_cast<float*>(
        c.check(arr(obj, "inv_scale"), sn.c_str(), Elem::kF32, {p.num_pages, p.rows}));
  } else {
    KVLAB_REQUIRE(p.nope_dim % kDsMlaTile == 0,
                  what << ": fp8_ds_mla needs nope_dim divisible by " << kDsMlaTile << ", got "
                       << p.nope_dim);
    c.check_rank(data, dn.c_str(), Elem::kU8, 2);
    const int64_t eb = dsv4_entry_bytes(p.format, p.nope_dim, p.rope_dim);
    KVLAB_REQUIRE(dim(data, 1) % eb == 0, dn << ": a page of fp8_ds_mla entries is rows x " << eb
                                             << " bytes, got " << dim(data, 1) << " bytes");
    p.num_pages = dim(data, 0);
    p.rows = static_cast<int32_t>(dim(data, 1) / eb);
    p.data = static_cast<uint8_t*>(data.data());
    KVLAB_REQUIRE(obj.attr("rope").is_none() && obj.attr("inv_scale").is_none(),
                  what << ": fp8_ds_mla keeps RoPE and scales inside the pages: rope and "
                          "inv_scale must be None");
  }
  KVLAB_REQUIRE(p.num_pages > 0 && p.rows > 0, what << ": empty pages " << shape_str(data));
  return p;
}

Dsv4SwaView swa_view(Checker& c, const nb::handle& ring) {
  Dsv4SwaView v;
  v.ring = entry_pages(c, ring, "ring");
  v.mode = parse_dsv4_ring_mode(val<std::string>(ring, "ring_mode"));
  v.pos = static_cast<int32_t*>(
      c.check(arr(ring, "pos"), "ring.pos", Elem::kI32, {v.ring.num_pages, v.ring.rows}));
  v.head = static_cast<int32_t*>(c.check(arr(ring, "head"), "ring.head", Elem::kI32, {v.ring.num_pages}));
  return v;
}

// Each attribute is read once: on the GPU side it holds a DLPack capsule, which can be
// consumed only once. num_slots: the block table's rows (requests), when asked for.
Dsv4ClassicalView pool_view(Checker& c, const nb::handle& pool, int64_t* num_slots = nullptr) {
  Dsv4ClassicalView v;
  v.pool = entry_pages(c, pool, "pool");
  const Array bt = arr(pool, "block_table");
  c.check_rank(bt, "pool.block_table", Elem::kI32, 2);
  if (num_slots) *num_slots = dim(bt, 0);
  v.block_table = static_cast<const int32_t*>(bt.data());
  v.max_blocks_per_request = static_cast<int32_t>(dim(bt, 1));
  v.ratio = val<int32_t>(pool, "ratio");
  KVLAB_REQUIRE(v.ratio >= 1, "pool.ratio must be >= 1, got " << v.ratio);
  return v;
}

Dsv4IndexerView indexer_view(Checker& c, const nb::handle& keys, int64_t* num_slots) {
  Dsv4IndexerView v;
  v.format = parse_dsv4_indexer_format(val<std::string>(keys, "indexer_format"));
  const Array codes = arr(keys, "codes");
  c.check_rank(codes, "keys.codes", Elem::kU8, 3);
  v.num_blocks = dim(codes, 0);
  v.rows = static_cast<int32_t>(dim(codes, 1));
  v.dim = static_cast<int32_t>(2 * dim(codes, 2));
  KVLAB_REQUIRE(v.dim % v.group() == 0, "keys: dim " << v.dim << " is not a multiple of the "
                                                     << v.group() << "-element scale group");
  v.codes = static_cast<uint8_t*>(codes.data());
  const Elem se = v.format == Dsv4IndexerFormat::kNvfp4 ? Elem::kFP8E4M3 : Elem::kUE8M0;
  v.scales = static_cast<uint8_t*>(
      c.check(arr(keys, "scales"), "keys.scales", se, {v.num_blocks, v.rows, v.dim / v.group()}));
  v.tensor_scale = val<float>(keys, "tensor_scale");
  const Array bt = arr(keys, "block_table");
  c.check_rank(bt, "keys.block_table", Elem::kI32, 2);
  *num_slots = dim(bt, 0);
  v.block_table = static_cast<const int32_t*>(bt.data());
  v.max_blocks_per_request = static_cast<int32_t>(dim(bt, 1));
  v.ratio = val<int32_t>(keys, "ratio");
  return v;
}

Dsv4StreamView stream_view(Checker& c, const nb::handle& st) {
  Dsv4StreamView v;
  v.ratio = val<int32_t>(st, "ratio");
  v.dim = val<int32_t>(st, "dim");
  v.overlap = val<bool>(st, "overlap");
  KVLAB_REQUIRE(v.ratio >= 1 && v.dim >= 1, "state: ratio " << v.ratio << ", dim " << v.dim);
  const Array ka = arr(st, "ka");
  KVLAB_REQUIRE(ka.ndim() >= 1, "state.ka: no dimensions");
  v.num_slots = dim(ka, 0);
  const std::vector<int64_t> a_shape = v.overlap ? std::vector<int64_t>{v.num_slots, 2, v.ratio, v.dim}
                                                 : std::vector<int64_t>{v.num_slots, v.ratio, v.dim};
  v.ka = static_cast<float*>(c.check(ka, "state.ka", Elem::kF32, a_shape));
  v.za = static_cast<float*>(c.check(arr(st, "za"), "state.za", Elem::kF32, a_shape));
  if (v.overlap) {
    v.kb = static_cast<float*>(
        c.check(arr(st, "kb"), "state.kb", Elem::kF32, {v.num_slots, v.ratio, v.dim}));
    v.zb = static_cast<float*>(
        c.check(arr(st, "zb"), "state.zb", Elem::kF32, {v.num_slots, v.ratio, v.dim}));
  } else {
    KVLAB_REQUIRE(st.attr("kb").is_none() && st.attr("zb").is_none(),
                  "state: a single-lane (HCA) compressor has no lane b: kb = zb = None");
  }
  return v;
}

struct AppendSwa {
  Dsv4SwaView swa;
  Dsv4AppendSwaArgs args;
};
AppendSwa append_swa_args(Checker& c, const nb::handle& ring, const Array& raw_kv,
                          const Array& request_slots, const Array& positions) {
  AppendSwa r;
  r.swa = swa_view(c, ring);
  c.check_rank(raw_kv, "raw_kv", Elem::kBF16, 2);
  const int64_t T = dim(raw_kv, 0);
  c.check(raw_kv, "raw_kv", Elem::kBF16, {T, r.swa.ring.head_dim()});
  r.args.raw_kv = static_cast<const uint16_t*>(raw_kv.data());
  r.args.request_slots =
      static_cast<const int32_t*>(c.check(request_slots, "request_slots", Elem::kI32, {T}));
  r.args.positions = static_cast<const int32_t*>(c.check(positions, "positions", Elem::kI32, {T}));
  r.args.num_tokens = static_cast<int32_t>(T);
  return r;
}

struct Compress {
  Dsv4StreamView state;
  Dsv4CompressArgs args;
};
Compress compress_args(Checker& c, const nb::handle& state, const Array& kv, const Array& gate,
                       const OptArray& ape, const Array& request_slots, const Array& start_pos,
                       const Array& token_offsets, const Array& entry_offsets, const Array& out) {
  Compress r;
  r.state = stream_view(c, state);
  const int64_t width = (r.state.overlap ? 2 : 1) * r.state.dim;
  c.check_rank(kv, "kv", Elem::kF32, 2);
  const int64_t T = dim(kv, 0);
  r.args.kv = static_cast<const float*>(c.check(kv, "kv", Elem::kF32, {T, width}));
  r.args.gate = static_cast<const float*>(c.check(gate, "gate", Elem::kF32, {T, width}));
  r.args.ape =
      static_cast<const float*>(c.check_opt(ape, "ape", Elem::kF32, {r.state.ratio, width}));
  c.check_rank(request_slots, "request_slots", Elem::kI32, 1);
  const int64_t R = dim(request_slots, 0);
  r.args.request_slots = static_cast<const int32_t*>(request_slots.data());
  r.args.start_pos = static_cast<const int32_t*>(c.check(start_pos, "start_pos", Elem::kI32, {R}));
  r.args.token_offsets =
      static_cast<const int32_t*>(c.check(token_offsets, "token_offsets", Elem::kI32, {R + 1}));
  r.args.entry_offsets =
      static_cast<const int32_t*>(c.check(entry_offsets, "entry_offsets", Elem::kI32, {R + 1}));
  c.check_rank(out, "out", Elem::kF32, 2);
  const int64_t E = dim(out, 0);
  r.args.out = static_cast<float*>(c.check(out, "out", Elem::kF32, {E, r.state.dim}));
  r.args.num_requests = static_cast<int32_t>(R);
  r.args.num_tokens = static_cast<int32_t>(T);
  r.args.num_entries = static_cast<int32_t>(E);
  return r;
}

Dsv4StoreArgs store_args(Checker& c, const Array& entries, int64_t width,
                         const Array& request_slots, const Array& first_entry,
                         const Array& entry_offsets) {
  Dsv4StoreArgs a;
  c.check_rank(entries, "entries", Elem::kF32, 2);
  const int64_t E = dim(entries, 0);
  a.entries = static_cast<const float*>(c.check(entries, "entries", Elem::kF32, {E, width}));
  c.check_rank(request_slots, "request_slots", Elem::kI32, 1);
  const int64_t R = dim(request_slots, 0);
  a.request_slots = static_cast<const int32_t*>(request_slots.data());
  a.first_entry =
      static_cast<const int32_t*>(c.check(first_entry, "first_entry", Elem::kI32, {R}));
  a.entry_offsets =
      static_cast<const int32_t*>(c.check(entry_offsets, "entry_offsets", Elem::kI32, {R + 1}));
  a.num_requests = static_cast<int32_t>(R);
  a.num_entries = static_cast<int32_t>(E);
  return a;
}

struct Decode {
  Dsv4SwaView swa;
  std::optional<Dsv4ClassicalView> pool;
  Dsv4DecodeArgs args;
};
Decode decode_args(Checker& c, const nb::handle& ring, const nb::object& pool, const Array& q,
                   const Array& out, const OptArray& lse, const Array& request_slots,
                   const Array& positions, float sm_scale) {
  Decode d;
  d.swa = swa_view(c, ring);
  if (!pool.is_none()) {
    d.pool = pool_view(c, pool);
    KVLAB_REQUIRE(d.pool->pool.head_dim() == d.swa.ring.head_dim() &&
                      d.pool->pool.format == d.swa.ring.format,
                  "pool: entries of " << d.pool->pool.head_dim() << " dims ("
                                      << to_string(d.pool->pool.format) << ") but the ring holds "
                                      << d.swa.ring.head_dim() << " ("
                                      << to_string(d.swa.ring.format) << ")");
  }
  const int64_t D = d.swa.ring.head_dim();
  c.check_rank(q, "q", Elem::kBF16, 3);
  const int64_t S = dim(q, 0), H = dim(q, 1);
  c.check(q, "q", Elem::kBF16, {S, H, D});
  d.args.q = static_cast<const uint16_t*>(q.data());
  d.args.o = static_cast<uint16_t*>(c.check(out, "out", Elem::kBF16, {S, H, D}));
  d.args.lse = static_cast<float*>(c.check_opt(lse, "lse", Elem::kF32, {S, H}));
  d.args.request_slots =
      static_cast<const int32_t*>(c.check(request_slots, "request_slots", Elem::kI32, {S}));
  d.args.positions = static_cast<const int32_t*>(c.check(positions, "positions", Elem::kI32, {S}));
  d.args.num_seqs = static_cast<int32_t>(S);
  d.args.num_heads = static_cast<int32_t>(H);
  d.args.sm_scale = sm_scale > 0 ? sm_scale : 1.0f / std::sqrt(static_cast<float>(D));
  return d;
}

// ---- reference ---------------------------------------------------------------------------
void ref_plan_entries(const Array& start_pos, const Array& token_offsets, int32_t ratio,
                      const Array& entry_offsets, const OptArray& first_entry) {
  Checker c(Where::kHost);
  c.check_rank(start_pos, "start_pos", Elem::kI32, 1);
  const int64_t R = dim(start_pos, 0);
  c.check(token_offsets, "token_offsets", Elem::kI32, {R + 1});
  c.check(entry_offsets, "entry_offsets", Elem::kI32, {R + 1});
  int32_t* fe = static_cast<int32_t*>(c.check_opt(first_entry, "first_entry", Elem::kI32, {R}));
  ref::dsv4_plan_entries(static_cast<const int32_t*>(start_pos.data()),
                         static_cast<const int32_t*>(token_offsets.data()), static_cast<int32_t>(R),
                         ratio, static_cast<int32_t*>(entry_offsets.data()), fe);
}

}  // namespace

void bind_dsv4_ref(nb::module_& m) {
  m.def("dsv4_plan_entries", &ref_plan_entries, nb::arg("start_pos"), nb::arg("token_offsets"),
        nb::arg("ratio"), nb::arg("entry_offsets"), nb::arg("first_entry").none());
  m.def(
      "dsv4_append_swa",
      [](nb::handle ring, const Array& raw_kv, const Array& slots, const Array& positions) {
        Checker c(Where::kHost);
        const AppendSwa a = append_swa_args(c, ring, raw_kv, slots, positions);
        ref::dsv4_append_swa(a.swa, a.args);
      },
      nb::arg("ring"), nb::arg("raw_kv"), nb::arg("request_slots"), nb::arg("positions"));
  m.def(
      "dsv4_compress",
      [](nb::handle state, const Array& kv, const Array& gate, const OptArray& ape,
         const Array& slots, const Array& start_pos, const Array& token_offsets,
         const Array& entry_offsets, const Array& out) {
        Checker c(Where::kHost);
        const Compress a =
            compress_args(c, state, kv, gate, ape, slots, start_pos, token_offsets, entry_offsets, out);
        ref::dsv4_compress(a.state, a.args);
      },
      nb::arg("state"), nb::arg("kv"), nb::arg("gate"), nb::arg("ape").none(),
      nb::arg("request_slots"), nb::arg("start_pos"), nb::arg("token_offsets"),
      nb::arg("entry_offsets"), nb::arg("out"));
  m.def(
      "dsv4_store_entries",
      [](nb::handle pool, const Array& entries, const Array& slots, const Array& first_entry,
         const Array& entry_offsets) {
        Checker c(Where::kHost);
        int64_t num_slots = 0;
        const Dsv4ClassicalView v = pool_view(c, pool, &num_slots);
        const Dsv4StoreArgs a = store_args(c, entries, v.pool.head_dim(), slots, first_entry, entry_offsets);
        ref::dsv4_store_entries(v, num_slots, a);
      },
      nb::arg("pool"), nb::arg("entries"), nb::arg("request_slots"), nb::arg("first_entry"),
      nb::arg("entry_offsets"));
  m.def(
      "dsv4_store_indexer_keys",
      [](nb::handle keys, const Array& entries, const Array& slots, const Array& first_entry,
         const Array& entry_offsets) {
        Checker c(Where::kHost);
        int64_t num_slots = 0;
        const Dsv4IndexerView v = indexer_view(c, keys, &num_slots);
        const Dsv4StoreArgs a = store_args(c, entries, v.dim, slots, first_entry, entry_offsets);
        ref::dsv4_store_indexer_keys(v, num_slots, a);
      },
      nb::arg("keys"), nb::arg("entries"), nb::arg("request_slots"), nb::arg("first_entry"),
      nb::arg("entry_offsets"));
  m.def(
      "dsv4_decode_attention",
      [](nb::handle ring, nb::object pool, const Array& q, const Array& out, const OptArray& lse,
         const Array& slots, const Array& positions, float sm_scale) {
        Checker c(Where::kHost);
        const Decode d = decode_args(c, ring, pool, q, out, lse, slots, positions, sm_scale);
        ref::dsv4_decode_attention(d.swa, d.pool ? &*d.pool : nullptr, d.args);
      },
      nb::arg("ring"), nb::arg("pool").none(), nb::arg("q"), nb::arg("out"), nb::arg("lse").none(),
      nb::arg("request_slots"), nb::arg("positions"), nb::arg("sm_scale"));
}

#if KVLAB_HAVE_CUDA
namespace {
cudaStream_t as_stream(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }
struct Current {
  explicit Current(int device) {
    KVLAB_CUDA_CHECK(cudaGetDevice(&prev));
    if (device >= 0 && device != prev) {
      KVLAB_CUDA_CHECK(cudaSetDevice(device));
      restore = true;
    }
  }
  ~Current() {
    if (restore) cudaSetDevice(prev);
  }
  int prev = 0;
  bool restore = false;
};
}  // namespace

void bind_dsv4_gpu(nb::module_& m) {
  m.def(
      "dsv4_append_swa",
      [](nb::handle ring, const Array& raw_kv, const Array& slots, const Array& positions,
         uintptr_t stream) {
        Checker c(Where::kDevice);
        const AppendSwa a = append_swa_args(c, ring, raw_kv, slots, positions);
        Current dev(c.device_id());
        gpu::dsv4_append_swa(a.swa, a.args, as_stream(stream));
      },
      nb::arg("ring"), nb::arg("raw_kv"), nb::arg("request_slots"), nb::arg("positions"),
      nb::arg("stream"));
  m.def(
      "dsv4_compress",
      [](nb::handle state, const Array& kv, const Array& gate, const OptArray& ape,
         const Array& slots, const Array& start_pos, const Array& token_offsets,
         const Array& entry_offsets, const Array& out, uintptr_t stream) {
        Checker c(Where::kDevice);
        const Compress a =
            compress_args(c, state, kv, gate, ape, slots, start_pos, token_offsets, entry_offsets, out);
        Current dev(c.device_id());
        gpu::dsv4_compress(a.state, a.args, as_stream(stream));
      },
      nb::arg("state"), nb::arg("kv"), nb::arg("gate"), nb::arg("ape").none(),
      nb::arg("request_slots"), nb::arg("start_pos"), nb::arg("token_offsets"),
      nb::arg("entry_offsets"), nb::arg("out"), nb::arg("stream"));
  m.def(
      "dsv4_store_entries",
      [](nb::handle pool, const Array& entries, const Array& slots, const Array& first_entry,
         const Array& entry_offsets, uintptr_t stream) {
        Checker c(Where::kDevice);
        int64_t num_slots = 0;
        const Dsv4ClassicalView v = pool_view(c, pool, &num_slots);
        const Dsv4StoreArgs a = store_args(c, entries, v.pool.head_dim(), slots, first_entry, entry_offsets);
        Current dev(c.device_id());
        gpu::dsv4_store_entries(v, num_slots, a, as_stream(stream));
      },
      nb::arg("pool"), nb::arg("entries"), nb::arg("request_slots"), nb::arg("first_entry"),
      nb::arg("entry_offsets"), nb::arg("stream"));
  m.def(
      "dsv4_store_indexer_keys",
      [](nb::handle keys, const Array& entries, const Array& slots, const Array& first_entry,
         const Array& entry_offsets, uintptr_t stream) {
        Checker c(Where::kDevice);
        int64_t num_slots = 0;
        const Dsv4IndexerView v = indexer_view(c, keys, &num_slots);
        const Dsv4StoreArgs a = store_args(c, entries, v.dim, slots, first_entry, entry_offsets);
        Current dev(c.device_id());
        gpu::dsv4_store_indexer_keys(v, num_slots, a, as_stream(stream));
      },
      nb::arg("keys"), nb::arg("entries"), nb::arg("request_slots"), nb::arg("first_entry"),
      nb::arg("entry_offsets"), nb::arg("stream"));
  m.def(
      "dsv4_decode_attention",
      [](nb::handle ring, nb::object pool, const Array& q, const Array& out, const OptArray& lse,
         const Array& slots, const Array& positions, float sm_scale, uintptr_t stream) {
        Checker c(Where::kDevice);
        const Decode d = decode_args(c, ring, pool, q, out, lse, slots, positions, sm_scale);
        Current dev(c.device_id());
        gpu::dsv4_decode_attention(d.swa, d.pool ? &*d.pool : nullptr, d.args, as_stream(stream));
      },
      nb::arg("ring"), nb::arg("pool").none(), nb::arg("q"), nb::arg("out"), nb::arg("lse").none(),
      nb::arg("request_slots"), nb::arg("positions"), nb::arg("sm_scale"), nb::arg("stream"));
}
#endif

}  // namespace kvlab::py
