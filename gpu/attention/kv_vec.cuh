// kv_vec.cuh: device helpers shared by the decode-attention versions: vectorized decoding
// of stored KV elements, per-element scales, Q loads, O stores, warp reductions, cp.async.
//
// Exactness: every decoder here returns, for every code, the same float as the canonical
// scalar decoder in reference/formats/formats.h (which kv_access.h uses), so a kernel
// that applies the same scales sees exactly the reference's dequantized cache:
//   bf16      bits << 16
//   fp16      hardware half -> float (exact)
//   e4m3      cvt.rn.f16x2.e4m3x2 (every E4M3 value, NaN included, is a half) -> float
//   e5m2      the code is the upper byte of the equal half: (code << 8) -> float
//   e2m1      the 4-bit code placed in a half's sign/exponent/mantissa fields is the value
//             times 2^-14 (exponent bias 15 vs 1; the one subnormal 0.5 lands on a half
//             subnormal), so one exact multiply by 2^14 restores it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "gpu/attention/softmax_state.h"
#include "gpu/dispatch.cuh"
#include "reference/formats/formats.h"

namespace kvlab::gpu {

constexpr int kWarpSize = 32;

// Slack after every runtime-length shared-memory array. ptxas may merge the predicated
// scalar loads of a loop's remainder (e.g. w[i], w[i+1], w[i+2]) into one wider load that
// reads up to 3 floats past the last element used; the values are discarded, but
// compute-sanitizer memcheck rightly flags a read past the allocation. 4 floats of slack
// keep every such read inside the block's shared memory.
constexpr int kSmemSlackFloats = 4;

// ------------------------------------------------------------------ element decoding
__device__ __forceinline__ float2 bf16x2_bits_to_float2(uint32_t w) {
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xFFFF0000u));
}
__device__ __forceinline__ float2 fp16x2_bits_to_float2(uint32_t w) {
  __half2 h = *reinterpret_cast<__half2*>(&w);
  return __half22float2(h);
}
// Two E4M3 codes (low byte = first element) -> float2, exactly.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint16_t w) {
  __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w), __NV_E4M3);
  __half2 h = *reinterpret_cast<__half2*>(&hr);
  return __half22float2(h);
}
// Two E5M2 codes in the low 16 bits of w -> float2, exactly (E5M2 is the top half of FP16).
__device__ __forceinline__ float2 e5m2x2_to_float2(uint32_t w) {
  const uint32_t h2 = ((w & 0xFFu) << 8) | ((w & 0xFF00u) << 16);
  return fp16x2_bits_to_float2(h2);
}
// Two E2M1 codes in one byte (low nibble = first element) -> float2, exactly.
__device__ __forceinline__ float2 e2m1x2_to_float2(uint32_t byte) {
  const uint32_t lo = byte & 0xFu, hi = (byte >> 4) & 0xFu;
  const uint32_t h2 =
      (((lo & 8u) << 12) | ((lo & 7u) << 9)) | ((((hi & 8u) << 12) | ((hi & 7u) << 9)) << 16);
  __half2 h = *reinterpret_cast<const __half2*>(&h2);
  h = __hmul2(h, __float2half2_rn(16384.0f));  // exact: 2^14 times a value of <= 3 significant bits
  return __half22float2(h);
}

// Elements per 32-bit word of storage: 2 (16-bit), 4 (FP8), 8 (FP4).
template <KvElem E>
constexpr int kElemsPerWord = 32 / kv_elem_bits(E);

// One 32-bit word of stored elements (first element in the lowest bits) -> floats.
template <KvElem E>
__device__ __forceinline__ void decode_word(uint32_t w, float* out) {
  if constexpr (E == KvElem::kBF16 || E == KvElem::kFP16) {
    const float2 f = (E == KvElem::kBF16) ? bf16x2_bits_to_float2(w) : fp16x2_bits_to_float2(w);
    out[0] = f.x;
    out[1] = f.y;
  } else if constexpr (E == KvElem::kE4M3 || E == KvElem::kE5M2) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const uint32_t pair = (w >> (16 * j)) & 0xFFFFu;
      const float2 f = (E == KvElem::kE4M3) ? e4m3x2_to_float2(static_cast<uint16_t>(pair))
                                            : e5m2x2_to_float2(pair);
      out[2 * j] = f.x;
      out[2 * j + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = e2m1x2_to_float2((w >> (8 * j)) & 0xFFu);
      out[2 * j] = f.x;
      out[2 * j + 1] = f.y;
    }
  }
}

// kWords consecutive 32-bit words of storage (4-byte aligned, any memory space) -> floats.
template <KvElem E, int kWords>
__device__ __forceinline__ void decode_words(const uint32_t* src, float* out) {
  uint32_t w[kWords];
  if constexpr (kWords == 4) {
    const uint4 r = *reinterpret_cast<const uint4*>(src);
    w[0] = r.x, w[1] = r.y, w[2] = r.z, w[3] = r.w;
  } else if constexpr (kWords == 2) {
    const uint2 r = *reinterpret_cast<const uint2*>(src);
    w[0] = r.x, w[1] = r.y;
  } else {
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = src[i];
  }
#pragma unroll
  for (int i = 0; i < kWords; ++i) decode_word<E>(w[i], out + i * kElemsPerWord<E>);
}

// One stored element (scalar path; any element class) -> float, through formats.h.
template <KvElem E>
__device__ __forceinline__ float decode_one(const uint8_t* pool, int64_t idx) {
  if constexpr (E == KvElem::kBF16) {
    return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(pool)[idx]);
  } else if constexpr (E == KvElem::kFP16) {
    return fp16_bits_to_float(reinterpret_cast<const uint16_t*>(pool)[idx]);
  } else if constexpr (E == KvElem::kE4M3) {
    return e4m3_to_float(pool[idx]);
  } else if constexpr (E == KvElem::kE5M2) {
    return e5m2_to_float(pool[idx]);
  } else {
    const uint8_t b = pool[idx >> 1];
    return e2m1_to_float((idx & 1) ? fp4_hi(b) : fp4_lo(b));
  }
}

// The block scale multiplier of a (block, head, slot, group) under kNvfp4 / kMx (pool
// scale included for NVFP4: "scale product first", as kv_access.h does).
__device__ __forceinline__ float block_scale_value(ScaleMode mode, uint8_t code, float pool_scale) {
  return mode == ScaleMode::kNvfp4 ? e4m3_to_float(code) * pool_scale : ue8m0_to_float(code);
}

// ------------------------------------------------------------------ activations
// 8 consecutive Q elements (bf16 or fp16, 16-byte aligned) -> floats.
__device__ __forceinline__ void load_q8(const void* q, int64_t elem_offset, bool is_bf16,
                                        float (&out)[8]) {
  const uint4 r = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(q) + elem_offset);
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = is_bf16 ? bf16x2_bits_to_float2(w[i]) : fp16x2_bits_to_float2(w[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ float load_act(const void* p, int64_t idx, bool is_bf16) {
  const uint16_t b = static_cast<const uint16_t*>(p)[idx];
  return is_bf16 ? bf16_bits_to_float(b) : fp16_bits_to_float(b);
}

// Output rounding goes through formats.h (RNE, non-saturating: overflow becomes Inf, as the
// reference's float -> q_dtype conversion does), so O is bit-identical to a reference that
// rounds the same float.
__device__ __forceinline__ uint16_t round_act(float x, bool is_bf16) {
  return is_bf16 ? float_to_bf16_bits(x, Saturation::kNonSaturating)
                 : float_to_fp16_bits(x, Saturation::kNonSaturating);
}
__device__ __forceinline__ void store_act(void* p, int64_t idx, float x, bool is_bf16) {
  static_cast<uint16_t*>(p)[idx] = round_act(x, is_bf16);
}
__device__ __forceinline__ void store_act8(void* p, int64_t elem_offset, const float (&x)[8],
                                           bool is_bf16) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = static_cast<uint32_t>(round_act(x[2 * i], is_bf16)) |
           (static_cast<uint32_t>(round_act(x[2 * i + 1], is_bf16)) << 16);
  *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p) + elem_offset) =
      make_uint4(w[0], w[1], w[2], w[3]);
}

// ------------------------------------------------------------------ reductions
template <int kWidth>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int off = kWidth / 2; off > 0; off /= 2) x += __shfl_xor_sync(0xFFFFFFFFu, x, off);
  return x;
}
template <int kWidth>
__device__ __forceinline__ float group_max(float x) {
#pragma unroll
  for (int off = kWidth / 2; off > 0; off /= 2) x = fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, off));
  return x;
}

// exp_diff(x, m) = exp(x - m) for the online softmax lives in softmax_state.h (host/device).

// ------------------------------------------------------------------ cp.async
// 16-byte global -> shared copy; src_bytes == 0 writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace kvlab::gpu
