// mma_ptx.cuh: the PTX the tensor-core decode versions (v4, v5, v6) are built from:
// mma.sync m16n8k16 (f16 and bf16 operands, f32 accumulators), ldmatrix.trans,
// movmatrix.trans, 4-byte cp.async, packing helpers, programmatic dependent launch, and
// Hopper's bulk copies completing on shared-memory barriers (mbarrier).
//
// Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4; each 32-bit register
// holds two 16-bit elements, the lower-indexed one in the low half):
//   A [16 x 16] row:  a0 (row g,   k 2t..2t+1)   a1 (row g+8, k 2t..2t+1)
//                     a2 (row g,   k 2t+8..+9)   a3 (row g+8, k 2t+8..+9)
//   B [16 x 8] col:   b0 (k 2t..2t+1, col g)     b1 (k 2t+8..+9, col g)
//   C [16 x 8] f32:   c0 (row g, col 2t) c1 (row g, col 2t+1) c2 (row g+8, col 2t) c3 (row g+8, col
//   2t+1)
// The k index of A and B is contracted, so any bijection between k and the stored
// dimension works as long as A and B use the same one: the decode kernels exploit this to
// read K rows with wide loads (see v4_mma_decode.cu and mma_operands.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <utility>

namespace kvlab::gpu::mma {

// D = A * B + D, f16 operands.
__device__ __forceinline__ void mma_f16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// D = A * B + D, bf16 operands.
__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
template <bool kF16>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  if constexpr (kF16)
    mma_f16(c, a[0], a[1], a[2], a[3], b0, b1);
  else
    mma_bf16(c, a[0], a[1], a[2], a[3], b0, b1);
}

// Four 8x8 b16 matrices from shared memory, each transposed: lane l gives the address of
// row (l % 8) of matrix l / 8 (16-byte aligned); register i receives matrix i.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem_row) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// Transposes an 8x8 b16 matrix held in the fragment layout (lane: row g, columns 2t, 2t+1).
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// 4-byte global -> shared copy (L1-allocating); src_bytes == 0 writes zeros, reads nothing.
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, int src_bytes) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem),
               "r"(src_bytes));
}

// ------------------------------------------------------------------ packing (RN)
__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}
template <bool kF16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (kF16)
    return pack_f16x2(lo, hi);
  else
    return pack_bf16x2(lo, hi);
}
// The two 16-bit values of a packed word back to float (exact).
template <bool kF16>
__device__ __forceinline__ float2 unpack2(uint32_t w) {
  if constexpr (kF16) {
    __half2 h = *reinterpret_cast<const __half2*>(&w);
    return __half22float2(h);
  } else {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xFFFF0000u));
  }
}
// x = hi + lo with hi = RN16(x), lo = RN16(x - hi): 2 x 11 (f16) or 2 x 8 (bf16) significant
// bits; x - hi is exact in f32.
template <bool kF16>
__device__ __forceinline__ void split2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  hi = pack2<kF16>(x0, x1);
  const float2 h = unpack2<kF16>(hi);
  lo = pack2<kF16>(x0 - h.x, x1 - h.y);
}

// Two E4M3 codes (low byte first) -> f16x2, exactly (every E4M3 value, NaN included, is a
// half): one cvt.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two_codes) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes & 0xFFFFu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// Packed f16x2 product (RN; exact whenever the product is representable).
__device__ __forceinline__ uint32_t hmul2_bits(uint32_t a, uint32_t b) {
  const __half2 r =
      __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// ------------------------------------------------------------------ programmatic dependent launch
// The primary grid lets its dependent grid start launching (its blocks then wait in
// pdl_wait() until this grid has completed and its writes are visible).
__device__ __forceinline__ void pdl_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::);
}
__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}
// Host: kernel<<<grid, block, 0, stream>>>(args...), launched as the programmatic dependent of
// the stream's previous kernel when `pdl` (its blocks may start while that kernel finishes
// and wait in pdl_wait()), as an ordinary launch otherwise.
template <class... Params, class... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), unsigned grid, unsigned block, bool pdl,
                             cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// ------------------------------------------------------------------ mbarrier + bulk copies (sm_90)
// A shared-memory barrier (8 bytes, 8-byte aligned) counts arrivals and transaction bytes;
// a phase completes when the expected arrivals have arrived AND the expected bytes have
// landed. Phases alternate parity 0, 1, 0, ...; a waiter names the parity it waits for.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals)
               : "memory");
}
// Makes barrier initializations visible to the async proxy (bulk copies) before first use.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Adds `bytes` to the transaction bytes the current phase waits for (no arrival).
__device__ __forceinline__ void mbarrier_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// One arrival that first adds `bytes` to the transaction bytes the current phase waits for
// (expect_tx and arrive as one instruction).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}
// The executing thread's earlier cp.async copies become one arrival of the barrier's current
// phase when they have landed. .noinc: the arrival is one of the count the barrier was
// initialised with (the form without it adds a pending arrival of its own, which
// compute-sanitizer's synccheck reports as a barrier overflow).
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar))
               : "memory");
}
// Blocks until the phase with parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t a = smem_addr(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
  } while (!done);
}
// Bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to
// shared memory, completing `bytes` transaction bytes on `bar`. L2 evict-first: the KV
// stream is read once, so it should not push the merge partials out of L2.
__device__ __forceinline__ void bulk_copy_g2s(void* smem_dst, const void* gmem_src, uint32_t bytes,
                                              uint64_t* bar, uint64_t l2_policy, bool pred = true) {
  // `pred` false: no copy (a predicated instruction, not a branch: see elect_one_sync)
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
      " @p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
      "[%1], %2, [%3], %4;\n}\n" ::"r"(smem_addr(smem_dst)),
      "l"(gmem_src), "r"(bytes), "r"(smem_addr(bar)), "l"(l2_policy),
      "r"(static_cast<uint32_t>(pred))
      : "memory");
}
// Prefetches [gmem_src, gmem_src + bytes) from DRAM into L2 (bytes a multiple of 16, the
// address 16-byte aligned): a hint with no completion to wait for and no shared memory or
// registers held, so a warp can have more of its stream in flight than its pipeline stages
// hold (v7). The copy that later reads the bytes finds them in L2.
__device__ __forceinline__ void bulk_prefetch_l2(const void* gmem_src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(gmem_src), "r"(bytes)
               : "memory");
}
// TMA tensor copy of one box of a 4-D tensor map (a CUtensorMap in param/const/global
// memory, e.g. a __grid_constant__ kernel parameter) at coordinates {c0, c1, c2, c3}
// (innermost first) into shared memory, completing the box's bytes on `bar`; L2 hint as
// bulk_copy_g2s. The box lands in the map's shared-memory layout (swizzled if the map says
// so); elements outside the tensor are filled with zeros.
__device__ __forceinline__ void tensor_copy_4d_g2s(void* smem_dst, const void* tensor_map, int c0,
                                                   int c1, int c2, int c3, uint64_t* bar,
                                                   uint64_t l2_policy, bool pred = true) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %8, 0;\n"
      " @p cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".L2::cache_hint [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n}\n" ::"r"(smem_addr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(tensor_map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
      "r"(smem_addr(bar)), "l"(l2_policy), "r"(static_cast<uint32_t>(pred))
      : "memory");
}
// true on one lane of the full warp (elect.sync; call it converged). Code under it runs on a
// single thread the compiler knows of, so the operands of its TMA / bulk copies go to uniform
// registers without a loop over the active lanes.
__device__ __forceinline__ bool elect_one_sync() {
  uint32_t elected;
  asm volatile("{\n .reg .pred P;\n elect.sync _|P, 0xffffffff;\n selp.u32 %0, 1, 0, P;\n}\n"
               : "=r"(elected));
  return elected != 0;
}
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
  return pol;
}
// Orders this thread's earlier generic-proxy writes to shared memory (st.shared, cp.async)
// before later async-proxy accesses (bulk copies) of the same bytes.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

}  // namespace kvlab::gpu::mma
