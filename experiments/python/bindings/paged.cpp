// paged.cpp: see paged.h.
#include "experiments/python/bindings/paged.h"

#include <cmath>
#include <type_traits>

#include "reference/layout/layout_names.h"

namespace kvlab::py {

namespace {

Elem pool_elem(KvFormat f) {
  switch (f) {
    case KvFormat::kBF16: return Elem::kBF16;
    case KvFormat::kFP16: return Elem::kF16;
    case KvFormat::kFP8E4M3:
    case KvFormat::kFP8E4M3PerToken: return Elem::kFP8E4M3;
    case KvFormat::kFP8E5M2: return Elem::kFP8E5M2;
    case KvFormat::kNVFP4:
    case KvFormat::kMXFP4: return Elem::kFP4Packed;
  }
  return Elem::kU8;
}

// Storage elements of `elements` values of the format along the innermost axis.
int64_t storage(KvFormat f, int64_t elements) {
  return kv_format_bits(f) == 4 ? elements / 2 : elements;
}

}  // namespace

KvCacheView cache_view(Checker& c, const CacheArrays& a) {
  KvCacheView view;
  PageGeometry& g = view.geom;
  g.layout = parse_kv_layout(a.layout);
  g.format = parse_kv_format(a.kv_format);
  const Elem e = pool_elem(g.format);
  const bool fp4 = kv_format_bits(g.format) == 4;
  const char* fmt = a.kv_format.c_str();

  // Geometry from the K pool.
  const size_t k_rank = g.layout == KvLayout::kSplitX ? 5 : 4;
  c.check_rank(a.k_cache, "k_cache", e, k_rank);
  const Array& k = a.k_cache;
  g.num_blocks = dim(k, 0);
  if (g.layout == KvLayout::kNHD) {
    g.block_size = static_cast<int32_t>(dim(k, 1));
    g.num_kv_heads = static_cast<int32_t>(dim(k, 2));
    g.head_dim = static_cast<int32_t>(fp4 ? 2 * dim(k, 3) : dim(k, 3));
  } else if (g.layout == KvLayout::kHND) {
    g.num_kv_heads = static_cast<int32_t>(dim(k, 1));
    g.block_size = static_cast<int32_t>(dim(k, 2));
    g.head_dim = static_cast<int32_t>(fp4 ? 2 * dim(k, 3) : dim(k, 3));
  } else {
    g.num_kv_heads = static_cast<int32_t>(dim(k, 1));
    g.block_size = static_cast<int32_t>(dim(k, 3));
    KVLAB_REQUIRE(dim(k, 4) == storage(g.format, g.x()),
                  "k_cache: split_x " << fmt << " pools end in x = " << g.x() << " elements ("
                                      << storage(g.format, g.x()) << " storage elements), got "
                                      << shape_str(k));
    g.head_dim = static_cast<int32_t>(dim(k, 2) * g.x());
  }
  validate(g);

  // V pool and the scale arrays must match.
  std::vector<int64_t> v_shape;
  const int64_t N = g.num_blocks, H = g.num_kv_heads, B = g.block_size, D = g.head_dim;
  if (g.layout == KvLayout::kNHD)
    v_shape = {N, B, H, storage(g.format, D)};
  else if (g.layout == KvLayout::kHND)
    v_shape = {N, H, B, storage(g.format, D)};
  else {
    KVLAB_REQUIRE(!fp4 || B % 2 == 0, "split_x " << fmt << " keeps two slots per byte in V "
                                                 "[N, H, D, B/2]: block_size must be even, got "
                                                 << B);
    v_shape = {N, H, D, storage(g.format, B)};
  }
  c.check(a.v_cache, "v_cache", e, v_shape);
  view.k = a.k_cache.data();
  view.v = a.v_cache.data();

  if (kv_format_has_token_scales(g.format)) {
    KVLAB_REQUIRE(a.k_scales && a.v_scales,
                  fmt << " needs k_scales and v_scales: float32 [num_blocks, num_kv_heads, "
                         "block_size]");
    view.k_scales = c.check(*a.k_scales, "k_scales", Elem::kF32, {N, H, B});
    view.v_scales = c.check(*a.v_scales, "v_scales", Elem::kF32, {N, H, B});
  } else if (kv_format_has_block_scales(g.format)) {
    const Elem se = g.format == KvFormat::kNVFP4 ? Elem::kFP8E4M3 : Elem::kUE8M0;
    KVLAB_REQUIRE(a.k_scales && a.v_scales,
                  fmt << " needs k_scales and v_scales: uint8 [num_blocks, num_kv_heads, "
                         "block_size, head_dim/"
                      << g.scale_group() << "]");
    view.k_scales = c.check(*a.k_scales, "k_scales", se, {N, H, B, D / g.scale_group()});
    view.v_scales = c.check(*a.v_scales, "v_scales", se, {N, H, B, D / g.scale_group()});
  } else {
    KVLAB_REQUIRE(!a.k_scales && !a.v_scales,
                  fmt << " has no scale arrays: pass k_scales=None and v_scales=None");
  }
  if (kv_format_has_pool_scale(g.format)) {
    KVLAB_REQUIRE(std::isfinite(a.k_scale) && a.k_scale > 0 && std::isfinite(a.v_scale) &&
                      a.v_scale > 0,
                  fmt << " multiplies every element by k_scale / v_scale: they must be finite "
                         "and positive, got "
                      << a.k_scale << " / " << a.v_scale);
  }
  view.k_scale = a.k_scale;
  view.v_scale = a.v_scale;
  return view;
}

namespace {

// The query side that decode and prefill share: q [rows, query heads, head_dim] in q_dtype, out
// in q's format and shape, lse [rows, query heads] FP32, the block table's row count (one per
// sequence), sm_scale (0: 1/sqrt(head_dim)) and query heads a positive multiple of the KV
// heads; decode also one block-table row per query row. `a` is a DecodeArgs or PagedPrefillArgs with its kv view already set.
template <class Args>
void query_side(Checker& c, Args& a, const Array& q, const Array& out, const OptArray& lse,
                const Array& block_table, const Array& seq_lens, float sm_scale,
                const std::string& q_dtype) {
  a.q_dtype = parse_q_dtype(q, q_dtype);
  const Elem qe = a.q_dtype == DType::kBF16 ? Elem::kBF16 : Elem::kF16;
  c.check_rank(q, "q", qe, 3);
  const int64_t rows = dim(q, 0), Hq = dim(q, 1);
  KVLAB_REQUIRE(dim(q, 2) == a.kv.geom.head_dim,
                "q: head_dim " << dim(q, 2) << " but the cache's head_dim is "
                               << a.kv.geom.head_dim << " (q " << shape_str(q) << ")");
  a.q = q.data();
  // out holds q's format (bfloat16 / float16, or 16-bit integers holding its bits): the same
  // rule as every other argument, so q as torch bfloat16 and out as int16 bits (or numpy
  // int16 q with uint16 out) are one call; float16 out for a bf16 q is refused.
  a.o = c.check(out, "out", qe, {rows, Hq, a.kv.geom.head_dim});
  a.lse = static_cast<float*>(c.check_opt(lse, "lse", Elem::kF32, {rows, Hq}));
  c.check_rank(block_table, "block_table", Elem::kI32, 2);
  const int64_t S = dim(block_table, 0);
  if constexpr (std::is_same_v<Args, DecodeArgs>)  // decode: one query row per sequence
    KVLAB_REQUIRE(S == rows, "block_table: " << S << " rows for " << rows << " sequences");
  a.block_table = static_cast<const int32_t*>(block_table.data());
  a.seq_lens = static_cast<const int32_t*>(c.check(seq_lens, "seq_lens", Elem::kI32, {S}));
  a.num_seqs = static_cast<int32_t>(S);
  a.num_qo_heads = static_cast<int32_t>(Hq);
  a.max_blocks_per_seq = static_cast<int32_t>(dim(block_table, 1));
  a.sm_scale = sm_scale > 0 ? sm_scale : 1.0f / std::sqrt(static_cast<float>(a.kv.geom.head_dim));
  KVLAB_REQUIRE(a.num_qo_heads > 0 && a.num_qo_heads % a.kv.geom.num_kv_heads == 0,
                "q: " << a.num_qo_heads << " query heads is not a positive multiple of the "
                      << a.kv.geom.num_kv_heads << " KV heads");
}

}  // namespace

DecodeArgs decode_args(Checker& c, const Array& q, const Array& out, const OptArray& lse,
                       const CacheArrays& cache, const Array& block_table, const Array& seq_lens,
                       float sm_scale, int max_seq_len, const std::string& q_dtype) {
  DecodeArgs a;
  a.kv = cache_view(c, cache);
  query_side(c, a, q, out, lse, block_table, seq_lens, sm_scale, q_dtype);
  a.max_seq_len = max_seq_len;
  return a;
}

PagedPrefillArgs prefill_args(Checker& c, const Array& q, const Array& out, const OptArray& lse,
                              const CacheArrays& cache, const Array& block_table,
                              const Array& seq_lens, const Array& q_start, float sm_scale,
                              int max_q_len, int max_seq_len, const std::string& q_dtype) {
  PagedPrefillArgs a;
  a.kv = cache_view(c, cache);
  query_side(c, a, q, out, lse, block_table, seq_lens, sm_scale, q_dtype);
  a.q_start = static_cast<const int32_t*>(
      c.check(q_start, "q_start", Elem::kI32, {int64_t{a.num_seqs} + 1}));
  a.max_q_len = max_q_len;
  a.max_seq_len = max_seq_len;
  return a;
}

AppendArgs append_args(Checker& c, const Array& k, const Array& v, const Array& slot_mapping,
                       const CacheArrays& cache, const std::string& in_dtype) {
  AppendArgs a;
  a.kv = cache_view(c, cache);
  const auto t = k.dtype();
  if (!in_dtype.empty()) {
    a.in_dtype = parse_dtype(in_dtype);
  } else if (dtype_matches(t, Elem::kF32)) {
    a.in_dtype = DType::kF32;
  } else if (t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat)) {
    a.in_dtype = DType::kBF16;
  } else if (t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float) && t.bits == 16) {
    a.in_dtype = DType::kF16;
  } else {
    throw InvalidArgument("k: dtype " + dtype_name(t) +
                          ", expected float32, bfloat16 or float16 (or 16-bit codes with "
                          "in_dtype='bf16' / 'f16')");
  }
  const Elem e = a.in_dtype == DType::kF32    ? Elem::kF32
                 : a.in_dtype == DType::kBF16 ? Elem::kBF16
                                              : Elem::kF16;
  c.check_rank(k, "k", e, 3);
  const int64_t T = dim(k, 0);
  const std::vector<int64_t> shape = {T, a.kv.geom.num_kv_heads, a.kv.geom.head_dim};
  a.k = c.check(k, "k", e, shape);
  a.v = c.check(v, "v", e, shape);  // v holds k's format (the rule of decode's out and q)
  a.slot_mapping =
      static_cast<const int64_t*>(c.check(slot_mapping, "slot_mapping", Elem::kI64, {T}));
  a.num_tokens = static_cast<int32_t>(T);
  return a;
}

}  // namespace kvlab::py
