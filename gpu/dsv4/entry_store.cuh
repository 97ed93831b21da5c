// entry_store.cuh: device helpers shared by the DSV4 kernels: block-cooperative entry
// quantization (append_swa and store_entries), block-index lookups, request search.
//
// The quantization calls the same host/device functions as the reference
// (reference/dsv4/entry_quant.h), so the bytes match it exactly; only the amax reduction
// is parallel, and max is exact in any order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "reference/dsv4/entry_quant.h"
#include "reference/dsv4/views.h"

namespace kvlab::gpu::dsv4_detail {

constexpr int kThreads = 128;  // threads per block of every DSV4 kernel
constexpr int kMaxTiles = 64;  // nope_dim <= 64 * 64 = 4096
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

// Per-64-tile amax of the NoPE part of x (x(d) -> float), into s_tile[nope/64]. Each warp
// covers 32 consecutive elements, which lie in one tile (64 | nope_dim): warp reduction,
// then one atomicMax per warp on the float bits (amaxes are >= 0 and not NaN, so their bit
// patterns order like the values; +Inf included). Ends with __syncthreads().
template <class Load>
__device__ void block_tile_amax(int nope_dim, const Load& x, float* s_tile) {
  const int tiles = nope_dim / kDsMlaTile;
  for (int t = threadIdx.x; t < tiles; t += blockDim.x) s_tile[t] = 0.0f;
  __syncthreads();
  for (int base = 0; base < nope_dim; base += blockDim.x) {
    const int d = base + threadIdx.x;
    if (base + (threadIdx.x & ~31) >= nope_dim) break;  // whole warp past the end (warp-uniform)
    const float a = warp_max(amax_accumulate(0.0f, x(d)));
    if ((threadIdx.x & 31) == 0)
      atomicMax(reinterpret_cast<int*>(&s_tile[d / kDsMlaTile]), __float_as_int(a));
  }
  __syncthreads();
}

// Writes entry (page, row) from x and the tile amaxes (block_tile_amax). All threads.
template <class Load>
__device__ void block_write_entry(const Dsv4EntryPages& p, int64_t page, int row, const Load& x,
                                  const float* s_tile) {
  const int tiles = p.nope_dim / kDsMlaTile;
  if (p.format == Dsv4EntryFormat::kFp8PerToken) {
    float amax = 0.0f;
    for (int t = 0; t < tiles; ++t) amax = fmaxf(amax, s_tile[t]);
    const float s = dsv4_pt_scale(amax);
    if (threadIdx.x == 0) *p.pt_inv_scale(page, row) = s;
    uint8_t* codes = p.pt_nope(page, row);
    for (int d = threadIdx.x; d < p.nope_dim; d += blockDim.x) codes[d] = dsv4_fp8_code(x(d), s);
  } else {
    uint8_t* codes = p.mla_data_row(page, row);
    uint8_t* scales = p.mla_scale_row(page, row);
    for (int b = threadIdx.x; b < ds_mla_scale_row_bytes(p.nope_dim); b += blockDim.x)
      scales[b] = b < tiles ? ue8m0_code_from_exp(dsv4_mla_tile_exp(s_tile[b])) : 0;
    for (int d = threadIdx.x; d < p.nope_dim; d += blockDim.x)
      codes[d] = dsv4_fp8_code(x(d), pow2_scale_value(dsv4_mla_tile_exp(s_tile[d / kDsMlaTile])));
  }
  for (int j = threadIdx.x; j < p.rope_dim; j += blockDim.x)
    dsv4_put_rope(p, page, row, j, dsv4_rope_bits(x(p.nope_dim + j)));
}

// Index r with offsets[r] <= i < offsets[r+1] (offsets non-decreasing, n + 1 entries).
__device__ __forceinline__ int find_segment(const int32_t* offsets, int n, int i) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (offsets[mid] <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Block id of a slot's block-table index, trapping on an id outside [0, num_blocks): a
// corrupt table must fail the launch, not write elsewhere.
__device__ __forceinline__ int32_t checked_block(const int32_t* table, int32_t max_blocks,
                                                 int64_t slot, int64_t index, int64_t num_blocks) {
  if (index >= max_blocks) __trap();
  const int32_t b = table[slot * max_blocks + index];
  if (b < 0 || b >= num_blocks) __trap();
  return b;
}

}  // namespace kvlab::gpu::dsv4_detail
