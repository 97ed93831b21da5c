// append.cu: append / quantize-on-write kernel (vLLM's reshape_and_cache), byte-exact to
// kvlab::ref::append_kv for every KvFormat x KvLayout.
//
// Two paths. Contiguous-row layouts (NHD, HND) take the vector path (append_vec_kernel
// below: 16 elements (32 for FP4 from bf16) and 16-byte accesses per thread). Split-x and
// unaligned buffers take the row path: one thread block per token, one warp per (token,
// head, K or V) row, written by append_row() (append.cuh: the one row writer of the op,
// shared with the decode step's fused RoPE + append); lanes walk the row in rounds of 32
// consecutive dims (coalesced reads, and coalesced writes for the NHD/HND/split-x-K layouts).
// Both paths take every scale and element code from the KVLAB_HD functions the reference
// calls (scale_rules.h, formats.h) or from their division-free equivalents (append_encode.h,
// exhaustively checked against them), so the bytes match by construction.
// Row path: the input dtype (bf16 / f16 / f32) is the only template parameter (3 instances);
// vector path: input dtype x {16-bit, FP8, FP4} (9 instances) + FP4 from bf16 with 32
// elements per thread (head_dim % 32 == 0; 1 instance).
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/find.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <type_traits>

#include "gpu/core/cuda_check.h"
#include "gpu/dispatch.cuh"
#include "gpu/quant/append.cuh"
#include "gpu/quant/append.h"
#include "gpu/quant/append_encode.h"
#include "reference/layout/layout_names.h"
#include "reference/quant/append.h"
#include "reference/quant/scale_rules.h"

namespace kvlab::gpu {
namespace {

constexpr int kAppendThreads = 128;
constexpr int kAppendWarps = kAppendThreads / 32;

struct AppendParams {
  const void* k;  // [num_tokens, num_kv_heads, head_dim] in_dtype
  const void* v;
  const int64_t* slots;  // [num_tokens]
  KvCacheView kv;        // device pools (kv_layout.h)
};

__device__ __forceinline__ float load_in(const float* p, int64_t i) {
  return p[i];
}
__device__ __forceinline__ float load_in(const __nv_bfloat16* p, int64_t i) {
  return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
}
__device__ __forceinline__ float load_in(const __half* p, int64_t i) {
  return fp16_bits_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
}

// grid: num_tokens blocks; block: kAppendThreads (one warp per (head, K|V) row).
template <typename TIn>
__global__ void __launch_bounds__(kAppendThreads) append_kv_kernel(const AppendParams p) {
  const int token = blockIdx.x;
  const int64_t s = p.slots[token];
  const PageGeometry& g = p.kv.geom;
  if (s < 0 || s >= g.num_blocks * g.block_size)
    return;  // padding (-1); others: validate_append_slots
  const int64_t block = s / g.block_size;
  const int slot = static_cast<int>(s % g.block_size);
  const int H = g.num_kv_heads, D = g.head_dim;
  const int warp = threadIdx.x / 32;
  for (int r = warp; r < 2 * H; r += kAppendWarps) {
    const bool is_k = r < H;
    const int head = is_k ? r : r - H;
    const TIn* x =
        static_cast<const TIn*>(is_k ? p.k : p.v) + (static_cast<int64_t>(token) * H + head) * D;
    append_row(
        p.kv, !is_k, block, head, slot, [x](int d) { return load_in(x, d); }, threadIdx.x % 32);
  }
}

// ------------------------------------------------------------------ vector path (P9)
// Rows stored contiguously (NHD, HND: element d of a row at row base + d) take this path:
// a row of head_dim elements is handled by head_dim / 16 threads, 16 consecutive elements
// each: two 16-byte loads of bf16/f16 input (four of f32) in flight, one 32/16/8-byte store
// of the 16-bit / FP8 / FP4 codes. FP4 from bf16 with head_dim % 32 == 0 takes 32 elements
// per thread instead (kFp4Bf16x32: four 16-byte loads, one 16-byte store). One kernel per
// (input dtype, format class), so each class gets its own registers and no other class's code.
// The element codes are the reference's (quantize_element with kSatFinite / kEncoder)
// without its per-element IEEE division (append_encode.h says why each is exact):
//   FP8 (pool or per-token scale): RN(x / s) from x * RN(1/s) and two FMA correction steps
//     (Markstein), two codes per hardware cvt; a thread holding NaN / Inf / huge quotients
//     (or a scale outside [2^-70, 2^125]) redoes its 16 elements with the definition;
//   FP4 (NVFP4 16-element groups: one thread; MXFP4 32: two): the E2M1 code is the number of
//     the group's 7 thresholds RD(div * m_k) below |x| (no division); from bf16 input found
//     two elements at a time by a 3-compare binary search (ae::e2m1_codes_bf16x8).
// Scales come from the same scale_rules.h functions as the reference (kv_fp8_token_scale,
// kv_fp4_block_scale); the amax over a row's (per-token FP8: D/16 threads) or group's threads
// uses the order-independent amax_accumulate.
// Row r of the grid-stride loop: token r / (2H), K (r % 2H < H) or V, head r % H.
constexpr int kVecElems = 16;

// kFp4Bf16x32: FP4 from bf16 input with 32 elements per thread (two NVFP4 groups or one
// MXFP4 group: no shuffle; head_dim % 32 == 0): the per-row work (row -> token / slot, the
// pool index, the loop) is shared by twice the elements (TUNING.md step 9).
enum class VecClass { k16Bit, kFp8, kFp4, kFp4Bf16x32 };
template <VecClass C>
constexpr int vec_elems() {
  return C == VecClass::kFp4Bf16x32 ? 32 : kVecElems;
}

template <typename TIn>
__device__ __forceinline__ void load16(const TIn* x, float (&f)[kVecElems]) {
  if constexpr (sizeof(TIn) == 4) {
#pragma unroll
    for (int i = 0; i < kVecElems; i += 4) {
      const float4 a = *reinterpret_cast<const float4*>(x + i);
      f[i] = a.x, f[i + 1] = a.y, f[i + 2] = a.z, f[i + 3] = a.w;
    }
  } else {
    const uint4 r0 = *reinterpret_cast<const uint4*>(x),
                r1 = *reinterpret_cast<const uint4*>(x + 8);
    const uint32_t w[8] = {r0.x, r0.y, r0.z, r0.w, r1.x, r1.y, r1.z, r1.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint16_t lo = static_cast<uint16_t>(w[i] & 0xFFFFu),
                     hi = static_cast<uint16_t>(w[i] >> 16);
      if constexpr (std::is_same_v<TIn, __nv_bfloat16>)
        f[2 * i] = bf16_bits_to_float(lo), f[2 * i + 1] = bf16_bits_to_float(hi);
      else
        f[2 * i] = fp16_bits_to_float(lo), f[2 * i + 1] = fp16_bits_to_float(hi);
    }
  }
}

// bf16 input kept packed (FP4 class): the 8 words of 2 bf16 each, and their floats on demand.
__device__ __forceinline__ void load_raw16(const __nv_bfloat16* x, uint32_t (&w)[8]) {
  const uint4 r0 = *reinterpret_cast<const uint4*>(x), r1 = *reinterpret_cast<const uint4*>(x + 8);
  w[0] = r0.x, w[1] = r0.y, w[2] = r0.z, w[3] = r0.w, w[4] = r1.x, w[5] = r1.y, w[6] = r1.z,
  w[7] = r1.w;
}
__device__ __forceinline__ void raw16_to_float(const uint32_t (&w)[8], float (&f)[kVecElems]) {
#pragma unroll
  for (int i = 0; i < 8; ++i)
    f[2 * i] = __uint_as_float(w[i] << 16), f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
}

// ae::amax16 (folded over N / 8 of them: the same integer max) of the 2N packed bf16 values
// w[0..N), bit for bit.
template <int N>
__device__ __forceinline__ float amax_bf16_words(const uint32_t* w) {
  uint32_t lo = 0, hi = 0;
#pragma unroll
  for (int i = 0; i < N; ++i)
    lo = max(lo, (w[i] << 16) & 0x7FFF0000u), hi = max(hi, w[i] & 0x7FFF0000u);
  const uint32_t m = max(lo, hi);
  return m > 0x7F800000u ? scale_detail::nan_f32() : __uint_as_float(m);
}

// kv_fp4_block_scale(nv, amax, t), by the division-free NVFP4 rule where it applies.
__device__ __forceinline__ KvBlockScale fp4_block_scale(bool nv, float amax, float t,
                                                        const append_encode::Fp8Recip& rt) {
  KvBlockScale bs{};
  bool fast = nv;
  if (nv) bs = append_encode::nvfp4_block_scale_fast(amax, t, rt, fast);
  if (!fast) bs = kv_fp4_block_scale(nv, amax, t);  // MXFP4, NaN / Inf groups
  return bs;
}

// The E2M1 codes (element i in nibble i of word i / 8) of the 16 packed bf16 in w[0..8)
// under divisor div with thresholds th = e2m1_thresholds(div): the packed binary search
// where it applies, else the thresholds on floats, else (negative / infinite divisor) the
// definition itself.
__device__ __forceinline__ uint2 fp4_codes_bf16x16(const uint32_t* w, float div,
                                                   const append_encode::E2m1Thresholds& th) {
  namespace ae = append_encode;
  if (th.nan_codes == 0 && ae::e2m1_bf16_path_ok(div)) {
    const ae::E2m1Bf16Thresholds tb = ae::e2m1_bf16_thresholds(th);
    const uint32_t lo[4] = {w[0], w[1], w[2], w[3]}, hi[4] = {w[4], w[5], w[6], w[7]};
    return make_uint2(ae::e2m1_codes_bf16x8(lo, tb), ae::e2m1_codes_bf16x8(hi, tb));
  }
  uint32_t c[2] = {0, 0};
#pragma unroll
  for (int i = 0; i < kVecElems; ++i) {
    const float x = __uint_as_float(i % 2 ? (w[i / 2] & 0xFFFF0000u) : (w[i / 2] << 16));
    c[i / 8] |= (th.ok ? ae::e2m1_code(x, th)
                       : quantize_element(x, div, ElemFormat::kFP4E2M1, Saturation::kSatFinite,
                                          ElementClamp::kEncoder) &
                             0xFu)
                << (4 * (i % 8));
  }
  return make_uint2(c[0], c[1]);
}

// ae::amax16 of the 16 packed bf16 values, bit for bit: |x| bits of each half, integer max
// (a bf16's float bits are its 16 bits << 16), the canonical NaN above +Inf.
__device__ __forceinline__ float amax_bf16x16(const uint32_t (&w)[8]) {
  uint32_t lo = 0, hi = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    lo = max(lo, (w[i] << 16) & 0x7FFF0000u), hi = max(hi, w[i] & 0x7FFF0000u);
  const uint32_t m = max(lo, hi);
  return m > 0x7F800000u ? scale_detail::nan_f32() : __uint_as_float(m);
}

// The FP8 code of y under Saturation::kSatFinite: the hardware's RNE satfinite conversion
// for finite y (the same rounding as formats.h's encoder), formats.h itself for NaN / Inf.
__device__ __forceinline__ uint32_t fp8_code_satfinite(float y, bool e5m2) {
  if (!isfinite(y))
    return e5m2 ? float_to_e5m2(y, Saturation::kSatFinite)
                : float_to_e4m3(y, Saturation::kSatFinite);
  const __nv_fp8x2_storage_t c =
      __nv_cvt_float2_to_fp8x2(make_float2(y, 0.0f), __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3);
  return static_cast<uint32_t>(c) & 0xFFu;
}

// amax over the aligned group of `width` lanes (a power of two <= 32).
__device__ __forceinline__ float group_amax_n(float a, int width) {
  for (int off = 1; off < width; off *= 2)
    a = amax_accumulate(a, __shfl_xor_sync(0xFFFFFFFFu, a, off));
  return a;
}

// rows = num_tokens * 2 * num_kv_heads < 2^31 and num_blocks * block_size < 2^31 (checked
// by the launcher): 32-bit index division (a 64-bit one costs ~100 instructions a row).
template <typename TIn, VecClass C>
__global__ void __launch_bounds__(kAppendThreads)
    append_vec_kernel(const AppendParams p, int num_tokens, const append_encode::U32Div div_2h,
                      const append_encode::U32Div div_bs) {
  namespace ae = append_encode;
  const PageGeometry& g = p.kv.geom;
  const int D = g.head_dim, H = g.num_kv_heads;
  constexpr int kE = vec_elems<C>();  // elements per thread
  constexpr bool kWide = C == VecClass::kFp4Bf16x32;
  const int tpr = D / kE;  // threads per row: 1..32, a power of two
  const int rows_per_block = kAppendThreads / tpr;
  const int part = threadIdx.x % tpr;
  const int rows = num_tokens * 2 * H;
  const uint32_t num_slots = static_cast<uint32_t>(g.num_blocks * g.block_size);
  const uint32_t two_h = static_cast<uint32_t>(2 * H), bsz = static_cast<uint32_t>(g.block_size);
  const bool e5 = g.format == KvFormat::kFP8E5M2;
  const bool per_token = g.format == KvFormat::kFP8E4M3PerToken;
  const bool nv = g.format == KvFormat::kNVFP4;
  // Pool-scale FP8: the reciprocals of the K and V scales, once.
  const ae::Fp8Recip rk = ae::fp8_recip(p.kv.k_scale), rv = ae::fp8_recip(p.kv.v_scale);
  // Whole warps iterate together (the amax shuffles need every lane of a group).
  for (int r0 = blockIdx.x * rows_per_block; r0 < rows; r0 += gridDim.x * rows_per_block) {
    const int r = r0 + static_cast<int>(threadIdx.x) / tpr;
    const bool live = r < rows;
    const uint32_t ru = live ? static_cast<uint32_t>(r) : 0u;
    const uint32_t token = ae::u32div(ru, div_2h);
    const int rem = static_cast<int>(ru - token * two_h);
    const bool is_k = rem < H;
    const int head = is_k ? rem : rem - H;
    const int64_t s = live ? p.slots[token] : -1;
    const bool ok =
        live && s >= 0 && s < static_cast<int64_t>(num_slots);  // padding (-1) and others: skipped
    // The input row is loaded for every live row, padding included (its input exists; only
    // the stores below wait for the slot): the load does not wait for the slot's load, so
    // the two DRAM round trips overlap instead of following each other.
    // FP4 from bf16 keeps the input packed (raw); every other class converts to float.
    constexpr bool kRaw = C == VecClass::kFp4 && std::is_same_v<TIn, __nv_bfloat16>;
    float x[kVecElems];
    uint32_t raw[kWide ? 16 : 8];
    const TIn* src = static_cast<const TIn*>(is_k ? p.k : p.v) +
                     (static_cast<int64_t>(token) * H + head) * D + part * kE;
    if constexpr (kWide) {
      if (live) {
        load_raw16(reinterpret_cast<const __nv_bfloat16*>(src),
                   *reinterpret_cast<uint32_t(*)[8]>(raw));
        load_raw16(reinterpret_cast<const __nv_bfloat16*>(src) + 16,
                   *reinterpret_cast<uint32_t(*)[8]>(raw + 8));
      } else {
#pragma unroll
        for (int i = 0; i < 16; ++i) raw[i] = 0u;
      }
    } else if constexpr (kRaw) {
      if (live)
        load_raw16(reinterpret_cast<const __nv_bfloat16*>(src), raw);
      else {
#pragma unroll
        for (int i = 0; i < 8; ++i) raw[i] = 0u;
      }
    } else if (live) {
      load16<TIn>(src, x);
    } else {
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) x[i] = 0.0f;
    }
    const uint32_t su = ok ? static_cast<uint32_t>(s) : 0u;
    const int64_t block = ae::u32div(su, div_bs);
    const int slot = static_cast<int>(su - static_cast<uint32_t>(block) * bsz);
    const int d0 = part * kE;
    uint8_t* pool = static_cast<uint8_t*>(is_k ? p.kv.k : p.kv.v);
    void* scales = is_k ? p.kv.k_scales : p.kv.v_scales;
    const float pool_scale = is_k ? p.kv.k_scale : p.kv.v_scale;
    const int64_t idx =
        ok ? (is_k ? g.k_index(block, head, slot, d0) : g.v_index(block, head, slot, d0)) : 0;
    if constexpr (C == VecClass::k16Bit) {
      // Finite pairs: the hardware's RN conversion (overflow -> Inf, subnormals kept: the
      // non-saturating rule of formats.h); NaN / Inf through formats.h itself.
      const bool bf = g.format == KvFormat::kBF16;
      uint32_t w[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float a = x[2 * i], b = x[2 * i + 1];
        if (isfinite(a) && isfinite(b)) {
          if (bf) {
            const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
            w[i] = *reinterpret_cast<const uint32_t*>(&h);
          } else {
            const __half2 h = __floats2half2_rn(a, b);
            w[i] = *reinterpret_cast<const uint32_t*>(&h);
          }
        } else {
          const uint16_t lo = bf ? float_to_bf16_bits(a, Saturation::kNonSaturating)
                                 : float_to_fp16_bits(a, Saturation::kNonSaturating);
          const uint16_t hi = bf ? float_to_bf16_bits(b, Saturation::kNonSaturating)
                                 : float_to_fp16_bits(b, Saturation::kNonSaturating);
          w[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
        }
      }
      if (ok) {
        uint4* dst = reinterpret_cast<uint4*>(pool + idx * 2);
        dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
        dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
      }
    } else if constexpr (C == VecClass::kFp8) {
      float sc = pool_scale;
      ae::Fp8Recip rc = is_k ? rk : rv;
      if (per_token) {
        float amax = ae::amax16(x);
        amax = group_amax_n(amax, tpr);
        bool fast_scale = true;
        sc = ae::fp8_token_scale_fast(amax, fast_scale);
        if (!fast_scale) sc = kv_fp8_token_scale(amax);  // NaN / Inf rows
        rc = ae::fp8_recip(sc);
        if (ok && part == 0)
          static_cast<float*>(scales)[g.token_scale_index(block, head, slot)] = sc;
      }
      // RN(x / sc) by a reciprocal and two FMA corrections, one cvt per pair (append_encode.h).
      uint32_t w[4] = {0, 0, 0, 0};
      bool fast = rc.ok;
#pragma unroll
      for (int i = 0; i < kVecElems; i += 2)
        w[i / 4] |= ae::fp8x2_code_recip(x[i], x[i + 1], sc, rc.y, e5, fast) << (8 * (i % 4));
      if (!fast) {
        // Exact path (NaN / Inf, |x / s| >= 2^100, or a scale outside [2^-70, 2^125]):
        // quantize_element(x, sc, ef, kSatFinite, kEncoder), the encoder in hardware.
        const ElemFormat ef = e5 ? ElemFormat::kFP8E5M2 : ElemFormat::kFP8E4M3;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          uint32_t v = 0;
#pragma unroll
          for (int j = 0; j < 4; ++j)
            v |= fp8_code_satfinite(scale_for_encode(x[4 * q + j], sc, ef, ElementClamp::kEncoder),
                                    e5)
                 << (8 * j);
          w[q] = v;
        }
      }
      if (ok) *reinterpret_cast<uint4*>(pool + idx) = make_uint4(w[0], w[1], w[2], w[3]);
    } else if constexpr (kWide) {
      // 32 elements: NVFP4 two groups of 16 (one scale each), MXFP4 one group of 32.
      const ae::Fp8Recip rt = is_k ? rk : rv;
      uint32_t w[4];
      uint32_t scodes;
      if (nv) {
#pragma unroll
        for (int gi = 0; gi < 2; ++gi) {
          const KvBlockScale bs =
              fp4_block_scale(true, amax_bf16_words<8>(raw + 8 * gi), pool_scale, rt);
          const uint2 c = fp4_codes_bf16x16(raw + 8 * gi, bs.div, ae::e2m1_thresholds(bs.div));
          w[2 * gi] = c.x, w[2 * gi + 1] = c.y;
          if (gi == 0)
            scodes = bs.code;
          else
            scodes |= static_cast<uint32_t>(bs.code) << 8;
        }
      } else {
        const KvBlockScale bs = fp4_block_scale(false, amax_bf16_words<16>(raw), pool_scale, rt);
        const ae::E2m1Thresholds th = ae::e2m1_thresholds(bs.div);
        const uint2 c0 = fp4_codes_bf16x16(raw, bs.div, th),
                    c1 = fp4_codes_bf16x16(raw + 8, bs.div, th);
        w[0] = c0.x, w[1] = c0.y, w[2] = c1.x, w[3] = c1.y;
        scodes = bs.code;
      }
      if (ok) {
        *reinterpret_cast<uint4*>(pool + (idx >> 1)) =
            make_uint4(w[0], w[1], w[2], w[3]);  // idx % 32 == 0: 16 whole bytes
        // g.block_scale_index(block, head, slot, d0 [+ 16]) with the group size as a shift.
        uint8_t* sp = static_cast<uint8_t*>(scales);
        if (nv) {
          const int64_t si = g.token_scale_index(block, head, slot) * (D >> 4) + (d0 >> 4);
          sp[si] = static_cast<uint8_t>(scodes & 0xFFu);
          sp[si + 1] = static_cast<uint8_t>(scodes >> 8);
        } else {
          sp[g.token_scale_index(block, head, slot) * (D >> 5) + (d0 >> 5)] =
              static_cast<uint8_t>(scodes);
        }
      }
    } else {
      float amax;
      if constexpr (kRaw)
        amax = amax_bf16x16(raw);
      else
        amax = ae::amax16(x);
      if (!nv) amax = group_amax_n(amax, 2);  // MXFP4: 32 elements = 2 threads
      KvBlockScale bs;
      bool fast_scale = nv;
      if (nv) bs = ae::nvfp4_block_scale_fast(amax, pool_scale, is_k ? rk : rv, fast_scale);
      if (!fast_scale) bs = kv_fp4_block_scale(nv, amax, pool_scale);  // MXFP4, NaN / Inf groups
      const ae::E2m1Thresholds th = ae::e2m1_thresholds(bs.div);
      uint32_t w[2] = {0, 0};
      bool done = false;
      if constexpr (kRaw) {
        if (th.nan_codes == 0 && ae::e2m1_bf16_path_ok(bs.div)) {
          // Two elements per compare, 3 compares per pair (binary search; append_encode.h).
          const ae::E2m1Bf16Thresholds tb = ae::e2m1_bf16_thresholds(th);
          const uint32_t lo[4] = {raw[0], raw[1], raw[2], raw[3]},
                         hi[4] = {raw[4], raw[5], raw[6], raw[7]};
          w[0] = ae::e2m1_codes_bf16x8(lo, tb), w[1] = ae::e2m1_codes_bf16x8(hi, tb), done = true;
        } else {
          raw16_to_float(raw, x);  // NaN / tiny / bad divisors: the float paths below
        }
      }
      if (done) {
      } else if (th.ok) {
#pragma unroll
        for (int i = 0; i < kVecElems; ++i) w[i / 8] |= ae::e2m1_code(x[i], th) << (4 * (i % 8));
      } else {  // a negative or infinite divisor (pool scale): the definition itself
#pragma unroll
        for (int i = 0; i < kVecElems; ++i)
          w[i / 8] |= (quantize_element(x[i], bs.div, ElemFormat::kFP4E2M1, Saturation::kSatFinite,
                                        ElementClamp::kEncoder) &
                       0xFu)
                      << (4 * (i % 8));
      }
      if (ok) {
        *reinterpret_cast<uint2*>(pool + (idx >> 1)) =
            make_uint2(w[0], w[1]);  // idx % 16 == 0: 8 whole bytes
        // g.block_scale_index(block, head, slot, d0) with the group size 16 / 32 as a shift
        // (kv_layout.h divides by the runtime scale_group(): two integer divisions).
        const int gs = nv ? 4 : 5;
        if ((d0 & ((1 << gs) - 1)) == 0)
          static_cast<uint8_t*>(
              scales)[g.token_scale_index(block, head, slot) * (D >> gs) + (d0 >> gs)] = bs.code;
      }
    }
  }
}

template <typename TIn, VecClass C>
cudaError_t launch_append_vec(const AppendParams& p, int num_tokens, cudaStream_t stream) {
  auto kernel = append_vec_kernel<TIn, C>;
  const int64_t rows = static_cast<int64_t>(num_tokens) * 2 * p.kv.geom.num_kv_heads;
  const int rows_per_block = kAppendThreads / (p.kv.geom.head_dim / vec_elems<C>());
  // A grid of exactly the resident blocks (occupancy API) strides over the rows: every
  // block does the same work and none waits for a second wave.
  int dev = 0, sms = 0, per_sm = 0;
  KVLAB_CUDA_CHECK(cudaGetDevice(&dev));
  KVLAB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  KVLAB_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kAppendThreads, 0));
  const int64_t blocks = std::min<int64_t>((rows + rows_per_block - 1) / rows_per_block,
                                           int64_t{std::max(per_sm, 1)} * std::max(sms, 1));
  const auto div_2h = append_encode::u32div_make(static_cast<uint32_t>(2 * p.kv.geom.num_kv_heads));
  const auto div_bs = append_encode::u32div_make(static_cast<uint32_t>(p.kv.geom.block_size));
  kernel<<<static_cast<unsigned>(blocks), kAppendThreads, 0, stream>>>(p, num_tokens, div_2h,
                                                                       div_bs);
  return cudaGetLastError();
}

// Whether the vector path applies: contiguous rows, 16-byte aligned inputs and pools.
bool vec_path_ok(const AppendArgs& a) {
  const PageGeometry& g = a.kv.geom;
  auto al = [](const void* q, uintptr_t n) { return reinterpret_cast<uintptr_t>(q) % n == 0; };
  const int tpr = g.head_dim / kVecElems;  // threads per row: a power of two dividing the warp
  return g.layout != KvLayout::kSplitX && g.head_dim % kVecElems == 0 && tpr >= 1 && tpr <= 32 &&
         (tpr & (tpr - 1)) == 0 &&
         static_cast<int64_t>(a.num_tokens) * 2 * g.num_kv_heads < INT32_MAX &&
         g.num_blocks * g.block_size < INT32_MAX && al(a.k, 16) && al(a.v, 16) && al(a.kv.k, 16) &&
         al(a.kv.v, 16);
}

// Launcher: [num_tokens] blocks of kAppendThreads.
template <typename TIn>
cudaError_t launch_append(const AppendParams& p, int num_tokens, cudaStream_t stream) {
  append_kv_kernel<TIn><<<num_tokens, kAppendThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

struct SlotOutOfRange {
  int64_t num_slots;
  __device__ bool operator()(int64_t s) const { return s < -1 || s >= num_slots; }
};
// Sorted slots: position i repeats a real slot (>= 0) of position i + 1.
struct RepeatsNext {
  const int64_t* keys;
  __device__ bool operator()(int64_t i) const { return keys[i] == keys[i + 1] && keys[i] >= 0; }
};

}  // namespace

void validate_append_slots(const AppendArgs& a, cudaStream_t stream) {
  ref::validate_append(a, false);
  if (a.num_tokens == 0) return;
  const int64_t n = a.num_tokens;
  const int64_t num_slots = a.kv.geom.num_blocks * a.kv.geom.block_size;
  auto pol = thrust::cuda::par.on(stream);
  const int64_t bad =
      thrust::find_if(pol, a.slot_mapping, a.slot_mapping + n, SlotOutOfRange{num_slots}) -
      a.slot_mapping;
  if (bad < n) {
    int64_t s = 0;
    KVLAB_CUDA_CHECK(cudaMemcpy(&s, a.slot_mapping + bad, sizeof(s), cudaMemcpyDeviceToHost));
    std::ostringstream os;
    os << "append_kv: slot_mapping[" << bad << "] = " << s << " is outside [-1, " << num_slots
       << ") (num_blocks " << a.kv.geom.num_blocks << " x block_size " << a.kv.geom.block_size
       << "; -1 = padding)";
    throw InvalidArgument(os.str());
  }
  // Duplicates: sort (slot, token) pairs by slot, then look for equal neighbours >= 0.
  thrust::device_vector<int64_t> keys(n);
  thrust::device_vector<int32_t> tokens(n);
  thrust::copy(pol, a.slot_mapping, a.slot_mapping + n, keys.begin());
  thrust::sequence(pol, tokens.begin(), tokens.end());
  thrust::stable_sort_by_key(pol, keys.begin(), keys.end(), tokens.begin());
  const int64_t pos = *thrust::find_if(pol, thrust::counting_iterator<int64_t>(0),
                                       thrust::counting_iterator<int64_t>(n - 1),
                                       RepeatsNext{thrust::raw_pointer_cast(keys.data())});
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (pos < n - 1) {
    const int64_t s = keys[pos];
    const int32_t t0 = tokens[pos], t1 = tokens[pos + 1];
    std::ostringstream os;
    os << "append_kv: slot " << s << " is written twice (tokens " << t0 << " and " << t1
       << "); each slot may appear once per call";
    throw InvalidArgument(os.str());
  }
}

void append_kv(const AppendArgs& a, cudaStream_t stream, SlotCheck check) {
  ref::validate_append(a, false);
  if (a.num_tokens == 0) return;
  if (kv_format_bits(a.kv.geom.format) == 4)  // nibble atomics work on aligned 32-bit words
    KVLAB_REQUIRE(reinterpret_cast<uintptr_t>(a.kv.v) % 4 == 0 &&
                      reinterpret_cast<uintptr_t>(a.kv.k) % 4 == 0,
                  "append_kv: FP4 pools must be 4-byte aligned");
  if (kv_format_has_token_scales(a.kv.geom.format))
    KVLAB_REQUIRE(reinterpret_cast<uintptr_t>(a.kv.k_scales) % 4 == 0 &&
                      reinterpret_cast<uintptr_t>(a.kv.v_scales) % 4 == 0,
                  "append_kv: per-token scale arrays must be 4-byte aligned");
  if (check == SlotCheck::kValidate) validate_append_slots(a, stream);
  AppendParams p{a.k, a.v, a.slot_mapping, a.kv};
  const bool vec = vec_path_ok(a);
  const int bits = kv_format_bits(a.kv.geom.format);
  const cudaError_t e = KVLAB_DISPATCH_ACT_DTYPE(a.in_dtype, TIn, [&] {
    if (!vec) return launch_append<TIn>(p, a.num_tokens, stream);
    if (bits == 16) return launch_append_vec<TIn, VecClass::k16Bit>(p, a.num_tokens, stream);
    if (bits == 8) return launch_append_vec<TIn, VecClass::kFp8>(p, a.num_tokens, stream);
    if constexpr (std::is_same_v<TIn, __nv_bfloat16>)
      if (a.kv.geom.head_dim % 32 == 0)
        return launch_append_vec<TIn, VecClass::kFp4Bf16x32>(p, a.num_tokens, stream);
    return launch_append_vec<TIn, VecClass::kFp4>(p, a.num_tokens, stream);
  });
  KVLAB_CUDA_CHECK(e);
  KVLAB_CHECK_LAUNCH();
}

}  // namespace kvlab::gpu
