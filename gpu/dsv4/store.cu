// store.cu: quantize FP32 compressed entries into the paged classical pool, and FP32
// indexer keys into FP4 (NVFP4, or MXFP4 after a 128-wide Hadamard rotation).
//
// store_entries_kernel  one block per entry: tile amaxes (warp reduction), then the same
//                       element encoders as the reference (byte-exact).
// store_keys_kernel     one block per key, the key staged in shared memory: the Hadamard
//                       butterflies run stage by stage (each pair (i, i+h) computes a+b and
//                       a-b, exactly the reference's float operations, so the rotated
//                       values are bit-identical), then one thread per scale group.
#include "gpu/core/cuda_check.h"
#include "gpu/dsv4/dsv4_kernels.h"
#include "gpu/dsv4/entry_store.cuh"
#include "reference/core/error.h"

namespace kvlab::gpu {

namespace {

using namespace dsv4_detail;

constexpr int kMaxKeyDim = 1024;

struct StoreEntriesParams {
  Dsv4ClassicalView v;
  Dsv4StoreArgs a;
  int64_t num_slots;
};

struct StoreKeysParams {
  Dsv4IndexerView v;
  Dsv4StoreArgs a;
  int64_t num_slots;
};

// (slot, entry index) of output row k.
__device__ __forceinline__ void locate(const Dsv4StoreArgs& a, int64_t num_slots, int k,
                                       int64_t* slot, int64_t* entry) {
  const int r = find_segment(a.entry_offsets, a.num_requests + 1, k);
  *slot = a.request_slots[r];
  if (*slot < 0 || *slot >= num_slots) __trap();
  *entry = static_cast<int64_t>(a.first_entry[r]) + (k - a.entry_offsets[r]);
}

__global__ void __launch_bounds__(kThreads) store_entries_kernel(const StoreEntriesParams p) {
  __shared__ float s_tile[kMaxTiles];
  const int k = blockIdx.x;
  int64_t slot, e;
  locate(p.a, p.num_slots, k, &slot, &e);
  const Dsv4EntryPages& pool = p.v.pool;
  const int32_t b = checked_block(p.v.block_table, p.v.max_blocks_per_request, slot, e / pool.rows,
                                  pool.num_pages);
  const float* src = p.a.entries + static_cast<int64_t>(k) * pool.head_dim();
  auto x = [src](int d) { return src[d]; };
  block_tile_amax(pool.nope_dim, x, s_tile);
  block_write_entry(pool, b, static_cast<int>(e % pool.rows), x, s_tile);
}

__global__ void __launch_bounds__(kThreads) store_keys_kernel(const StoreKeysParams p) {
  __shared__ float s_x[kMaxKeyDim];
  const int k = blockIdx.x;
  int64_t slot, e;
  locate(p.a, p.num_slots, k, &slot, &e);
  const Dsv4IndexerView& v = p.v;
  const int32_t b =
      checked_block(v.block_table, v.max_blocks_per_request, slot, e / v.rows, v.num_blocks);
  const int row = static_cast<int>(e % v.rows);
  const int D = v.dim;
  for (int d = threadIdx.x; d < D; d += blockDim.x)
    s_x[d] = p.a.entries[static_cast<int64_t>(k) * D + d];
  __syncthreads();
  if (v.format == Dsv4IndexerFormat::kMxfp4Hadamard) {
    constexpr int n = kDsv4HadamardSize;
    for (int h = 1; h < n; h <<= 1) {
      // D/2 butterflies per stage: pair index j -> i = the j-th index with (i & h) == 0.
      for (int j = threadIdx.x; j < D / 2; j += blockDim.x) {
        const int i = (j / h) * 2 * h + (j % h);
        const float x0 = s_x[i], x1 = s_x[i + h];
        s_x[i] = x0 + x1;
        s_x[i + h] = x0 - x1;
      }
      __syncthreads();
    }
    const float norm = dsv4_hadamard_norm(n);
    for (int d = threadIdx.x; d < D; d += blockDim.x) s_x[d] = scale_detail::mul_rn(s_x[d], norm);
    __syncthreads();
  }
  const int g = v.group();
  uint8_t* codes = v.entry_codes(b, row);
  uint8_t* scales = v.entry_scales(b, row);
  for (int grp = threadIdx.x; grp < D / g; grp += blockDim.x) {
    float amax = 0.0f;
    for (int d = grp * g; d < (grp + 1) * g; ++d) amax = amax_accumulate(amax, s_x[d]);
    const uint8_t code = dsv4_key_scale_code(v, amax);
    scales[grp] = code;
    const float s = dsv4_key_scale_value(v, code);
    for (int d = grp * g; d < (grp + 1) * g; d += 2)
      codes[d / 2] = pack_fp4x2(dsv4_fp4_code(s_x[d], s), dsv4_fp4_code(s_x[d + 1], s));
  }
}

void check_store_args(const Dsv4StoreArgs& a, const void* table, const char* what) {
  KVLAB_REQUIRE(a.num_requests >= 0 && a.num_entries >= 0, what << ": negative counts");
  if (a.num_entries == 0) return;
  KVLAB_REQUIRE(a.entries && a.request_slots && a.first_entry && a.entry_offsets && table,
                what << ": null pointer");
}

}  // namespace

void dsv4_store_entries(const Dsv4ClassicalView& v, int64_t num_slots, const Dsv4StoreArgs& a,
                        cudaStream_t stream) {
  check_store_args(a, v.block_table, "gpu::dsv4_store_entries");
  if (a.num_entries == 0) return;
  KVLAB_REQUIRE(
      v.pool.data && v.pool.rows >= 1 && v.pool.nope_dim > 0 && v.pool.nope_dim % kDsMlaTile == 0,
      "gpu::dsv4_store_entries: bad pool (null data, rows " << v.pool.rows << ", nope_dim "
                                                            << v.pool.nope_dim << ")");
  KVLAB_UNSUPPORTED_IF(v.pool.nope_dim > kMaxTiles * kDsMlaTile,
                       "gpu::dsv4_store_entries: nope_dim " << v.pool.nope_dim << " above "
                                                            << kMaxTiles * kDsMlaTile);
  store_entries_kernel<<<a.num_entries, kThreads, 0, stream>>>(StoreEntriesParams{v, a, num_slots});
  KVLAB_CHECK_LAUNCH();
}

void dsv4_store_indexer_keys(const Dsv4IndexerView& v, int64_t num_slots, const Dsv4StoreArgs& a,
                             cudaStream_t stream) {
  check_store_args(a, v.block_table, "gpu::dsv4_store_indexer_keys");
  if (a.num_entries == 0) return;
  KVLAB_REQUIRE(v.codes && v.scales && v.rows >= 1 && v.dim > 0 && v.dim % v.group() == 0,
                "gpu::dsv4_store_indexer_keys: bad key pool (dim " << v.dim << ", group "
                                                                   << v.group() << ")");
  if (v.format == Dsv4IndexerFormat::kMxfp4Hadamard)
    KVLAB_REQUIRE(
        v.dim % kDsv4HadamardSize == 0,
        "gpu::dsv4_store_indexer_keys: mxfp4_hadamard needs dim % 128 == 0, got " << v.dim);
  KVLAB_UNSUPPORTED_IF(v.dim > kMaxKeyDim,
                       "gpu::dsv4_store_indexer_keys: dim " << v.dim << " above " << kMaxKeyDim);
  store_keys_kernel<<<a.num_entries, kThreads, 0, stream>>>(StoreKeysParams{v, a, num_slots});
  KVLAB_CHECK_LAUNCH();
}

}  // namespace kvlab::gpu
