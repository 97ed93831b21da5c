// tma_pool_map.cuh: the TMA tensor-copy policy of the bulk-copy decode family
// (mma_bulk_decode.cuh), shared by v10_mma_decode_tma_swizzle,
// v11_mma_decode_cluster_merge and v12_mma_decode_last_block_merge: the pool as a 4-D tensor map (HND or NHD rows of a
// (page, KV head), 128-byte swizzle), the maps cached per (pool pointer, geometry), and the
// copy of one 16-token K and V tile with one tensor copy each. Why this copy and its bank
// conflicts: the header of v10_mma_decode_tma_swizzle.cu.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstring>

#include "gpu/attention/mma_bulk_decode.cuh"

namespace kvlab::gpu::detail {
namespace {


// The K and V tensor maps of one launch (kernel parameter, __grid_constant__: the TMA unit
// reads them where the launch put them).
struct TmaPoolMaps {
  CUtensorMap k;
  CUtensorMap v;
};

// ---- host: tensor maps, cached per (pool pointer, geometry)
using EncodeTiledFn = PFN_cuTensorMapEncodeTiled_v12000;

EncodeTiledFn encode_tiled_fn() {
  static const EncodeTiledFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return static_cast<EncodeTiledFn>(nullptr);
    return reinterpret_cast<EncodeTiledFn>(f);
  }();
  return fn;
}

// The swizzle span of a row of `row_bytes` bytes: whole 128-byte lines (16-bit rows, FP8 at
// head_dim >= 128, NVFP4 at head_dim 256) or one 64-byte half line (NVFP4 at head_dim 128),
// the TMA swizzle of the same width. The loaders read through SwizzleRows<span>.
__host__ __device__ constexpr int tma_swizzle_span(int row_bytes) { return row_bytes >= 128 ? 128 : 64; }

// The L2 promotion of a map: how much an L2 miss of the box fetches around the bytes asked
// for. An HND box is one contiguous run (16 rows), so 256 bytes fetch only its own rows. An
// NHD box's rows are num_kv_heads rows apart, so 256 bytes also fetch the neighbouring heads'
// rows of the same slots, which their own blocks read later. Chosen by measurement
// (TUNING.md step 26): FP8 at head_dim 128 (128-byte rows) promotes one row, 2 % faster at
// NHD than 256 bytes; NVFP4 at head_dim 128 (64-byte rows) keeps 256 bytes, 5-10 % faster at
// the large NHD shapes than promoting its own row (64 bytes) or nothing.
inline CUtensorMapL2promotion l2_promotion(bool hnd, int row_bytes) {
  return !hnd && row_bytes == 128 ? CU_TENSOR_MAP_L2_PROMOTION_L2_128B
                                  : CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
}

// The map of one pool: rows of head_dim elements as a 4-D tensor {line, lines per row, A, B}
// (line = the swizzle span: 16-bit 64 elements, D/64 lines; FP8 128 elements, D/128 lines;
// NVFP4 64 bytes at head_dim 128, 128 at head_dim 256, one line), box {line, lines, 16 rows
// along the slot axis}, swizzled over the span (128 or 64 bytes):
//   HND [page][head][slot][d]: A = slot (stride D), B = page * H + head (stride bs * D),
//       box {line, lines, 16, 1}
//   NHD [page][slot][head][d]: A = head (stride D), B = page * bs + slot (stride H * D),
//       box {line, lines, 1, 16}
// Both boxes land as [16 rows][lines][128 B] (the innermost box dimension first), so the
// loaders read either through the same SwizzleRows<span>. NVFP4's block scales are not in
// the map: each tile's run of them is one bulk copy (TmaSwizzleCopy::issue). Limits
// (cuTensorMapEncodeTiled): dims < 2^32 and coordinates < 2^31 (B <= rows, checked), strides
// multiples of 16 (row bytes >= 64) and < 2^40, box dims <= 256 (line <= 128, lines <= 4, 16).
// "" or why it cannot be built.
std::string encode_pool_map(const char* name, const void* pool, const PageGeometry& g,
                            CUtensorMap& map) {
  std::ostringstream os;
  const int64_t rows = g.num_blocks * g.num_kv_heads * static_cast<int64_t>(g.block_size);
  if (rows > INT32_MAX) {
    os << name << " addresses pool rows with 32-bit TMA coordinates; the pool "
          "has "
       << rows << " rows";
    return os.str();
  }
  if (reinterpret_cast<uintptr_t>(pool) % 16 != 0) {
    os << name << "'s tensor map needs a 16-byte aligned pool, got " << pool;
    return os.str();
  }
  const EncodeTiledFn encode = encode_tiled_fn();
  if (!encode)
    return std::string(name) + ": the driver has no cuTensorMapEncodeTiled (CUDA 12+)";
  const int d = g.head_dim;
  // 16-bit rows as uint16 elements; FP8 and NVFP4 rows as bytes (an NVFP4 byte holds two).
  const int elem_bytes = kv_format_bits(g.format) == 16 ? 2 : 1;
  const int row_bytes_i = d * kv_format_bits(g.format) / 8;
  const int span = tma_swizzle_span(row_bytes_i);  // bytes per line
  const int line = span / elem_bytes, lines = row_bytes_i / span;
  const bool hnd = g.layout == KvLayout::kHND;
  const cuuint64_t H = static_cast<cuuint64_t>(g.num_kv_heads);
  const cuuint64_t bs = static_cast<cuuint64_t>(g.block_size);
  const cuuint64_t row_bytes = static_cast<cuuint64_t>(row_bytes_i);
  const cuuint64_t pages = static_cast<cuuint64_t>(g.num_blocks);
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(line), static_cast<cuuint64_t>(lines),
                              hnd ? bs : H, hnd ? pages * H : pages * bs};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(span), row_bytes,
                                 (hnd ? bs : H) * row_bytes};  // dims 1, 2, 3
  const cuuint32_t box[4] = {static_cast<cuuint32_t>(line), static_cast<cuuint32_t>(lines),
                             hnd ? static_cast<cuuint32_t>(kBulkTile) : 1u,
                             hnd ? 1u : static_cast<cuuint32_t>(kBulkTile)};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode(&map, elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                                  : CU_TENSOR_MAP_DATA_TYPE_UINT8,
                            4, const_cast<void*>(pool), dims,
                            strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            span == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                            l2_promotion(hnd, row_bytes_i), CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    os << name << ": cuTensorMapEncodeTiled rejected the pool (CUresult "
       << static_cast<int>(r) << ", " << to_string(g.layout) << ", head_dim " << d << ", "
       << rows << " rows)";
    return os.str();
  }
  return "";
}

// The maps of (K pool, V pool, geometry), or the reason there are none. Entries never go
// stale: a map holds only the address and the geometry (layout included), both in the key. The cache is
// bounded (cleared past 256 entries: a sweep allocates a few pools per shape).
std::string pool_maps(const char* name, const DecodeArgs& a, TmaPoolMaps& out) {
  using Key = std::tuple<const void*, const void*, int64_t, int, int, int, int, int>;
  static std::mutex mu;
  static std::map<Key, TmaPoolMaps> cache;
  const PageGeometry& g = a.kv.geom;
  const Key key{a.kv.k, a.kv.v, g.num_blocks, g.num_kv_heads, g.block_size, g.head_dim,
                static_cast<int>(g.format), static_cast<int>(g.layout)};
  std::lock_guard<std::mutex> lock(mu);
  const auto it = cache.find(key);
  if (it != cache.end()) {
    out = it->second;
    return "";
  }
  TmaPoolMaps m;
  std::memset(&m, 0, sizeof(m));
  std::string why = encode_pool_map(name, a.kv.k, g, m.k);
  if (why.empty()) why = encode_pool_map(name, a.kv.v, g, m.v);
  if (!why.empty()) return why;
  if (cache.size() >= 256) cache.clear();
  cache.emplace(key, m);
  out = m;
  return "";
}

// The TMA-swizzle copy policy of the bulk-copy family (mma_bulk_decode.cuh): one elected
// lane copies the tile's 16 K rows with one tensor copy and its 16 V rows with another,
// swizzled over the row's span (128 or 64 bytes), and for NVFP4 the tile's K and V block
// scales with one bulk copy each (the 16 slots' codes are one contiguous run of the scale
// array: kv_layout.h).
// Version names the registry entry that uses it (Version::kName, in every reason); v10, v11
// and v12 share it (v11 and v12 differ in the split merge only).
template <class Version>
struct TmaSwizzleCopy {
  static constexpr const char* kName = Version::kName;
  static constexpr const char* kCopies = "16-row tensor tiles";
  // As CU_TENSOR_MAP_SWIZZLE_128B / _64B land the rows of a (format, head_dim).
  template <KvFormat F, int D>
  using Rows = mma::SwizzleRows<tma_swizzle_span(D * kv_elem_bits(kv_elem_of(F)) / 8)>;
  static constexpr int kSmemAlign = 1024;  // the 128-byte swizzle's period (the 64-byte one's 512)
  static constexpr bool kWarpIssues = false;  // one elected lane
  static constexpr bool kFP8 = true;  // FP8 E4M3 rows of >= 128 bytes: whole swizzle lines
  static constexpr bool kNVFP4 = true;  // NVFP4 rows of >= 64 bytes, block scales by bulk copy
  static constexpr bool kNHD = true;  // the 4-D map gathers NHD's strided rows
  using Maps = TmaPoolMaps;

  // The box always writes its 16 rows; the scale runs hold the same 16 slots' codes.
  template <int D, KvFormat F>
  __device__ static constexpr uint32_t tx_bytes(int) {
    using Op = BulkOperand<TmaSwizzleCopy, F, D>;
    return 2 * (kBulkTile * Op::kRowBytes + (F == KvFormat::kNVFP4 ? kBulkTile * Op::kScaleBytes : 0));
  }
  template <int D, KvFormat F>
  __device__ static void issue(const BulkTile& t, const Maps& maps) {
    using Op = BulkOperand<TmaSwizzleCopy, F, D>;
    // The box's coordinates {0, 0, A, B} (encode_pool_map). Every (page, head, slot) row index
    // is below the pool's rows < 2^31 (checked there), so 32-bit arithmetic holds.
    const PageGeometry& g = t.pools->geom;
    const bool hnd = g.layout == KvLayout::kHND;
    const int page_head = static_cast<int>(t.page) * g.num_kv_heads + t.kv_head;
    const int a = hnd ? t.slot : t.kv_head;
    const int b = hnd ? page_head : static_cast<int>(t.page) * g.block_size + t.slot;
    mma::tensor_copy_4d_g2s(t.sk, &maps.k, 0, 0, a, b, t.bar, t.l2_policy, t.copy);
    mma::tensor_copy_4d_g2s(t.sv, &maps.v, 0, 0, a, b, t.bar, t.l2_policy, t.copy);
    if constexpr (F == KvFormat::kNVFP4) {
      // [slot][D/16] codes of slots slot .. slot+15: 16 x kScaleBytes bytes, 16-byte aligned
      // (slot is a multiple of 16), at token_scale_index(page, head, slot) x D/16 (kv_layout.h).
      constexpr uint32_t kScaleRun = kBulkTile * Op::kScaleBytes;
      const int64_t run =
          static_cast<int64_t>(g.token_scale_index32(static_cast<int>(t.page), t.kv_head, t.slot)) *
          Op::kScaleBytes;
      mma::bulk_copy_g2s(t.sks, t.pools->k_scales + run, kScaleRun, t.bar, t.l2_policy, t.copy);
      mma::bulk_copy_g2s(t.svs, t.pools->v_scales + run, kScaleRun, t.bar, t.l2_policy, t.copy);
    }
  }
  static std::string maps_reason(const DecodeArgs& a) {
    if (a.num_seqs == 0) return "";  // an empty batch reads nothing (its pools may be null)
    TmaPoolMaps m;
    return pool_maps(kName, a, m);
  }
  static Maps maps(const DecodeArgs& a) {
    TmaPoolMaps m;
    const std::string why = pool_maps(kName, a, m);
    KVLAB_REQUIRE(why.empty(), why);
    return m;
  }
};

}  // namespace
}  // namespace kvlab::gpu::detail
