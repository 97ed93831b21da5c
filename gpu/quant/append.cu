// append.cu: append / quantize-on-write kernel (vLLM's reshape_and_cache), byte-exact to
// kvlab::ref::append_kv for every KvFormat x KvLayout.
//
// Design: one thread block per token, one warp per (token, head, K or V) row; lanes walk
// the row in rounds of 32 consecutive dims (coalesced reads, and coalesced writes for the
// NHD/HND/split-x-K layouts). Every scale and element code comes from the same KVLAB_HD
// functions the reference calls (scale_rules.h, formats.h), so the bytes match by
// construction; the only cross-lane arithmetic is the amax, whose NaN-absorbing max
// (amax_accumulate) gives the same bits in any reduction order:
//   per-token FP8   amax over the whole row: warp shuffle reduction
//   NVFP4 (16)      amax over half a round: shuffles among 16 lanes
//   MXFP4 (32)      amax over one round: shuffles among the 32 lanes
// FP4 stores: where a byte holds two dims of one row (NHD, HND, split-x K) the even lane
// takes its neighbour's nibble by shuffle and writes the whole byte; in the split-x V pool
// ([.., head_dim, block_size]) a byte holds two *slots*, i.e. two tokens written by
// different blocks, so each lane clears and sets its own nibble with atomicAnd/atomicOr
// on the enclosing 32-bit word (the other nibble is never touched).
// Input dtype (bf16 / f16 / f32) is the only template parameter: 3 instances.
#include <cuda_runtime.h>
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/find.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include <cstdint>
#include <sstream>

#include "gpu/core/cuda_check.h"
#include "gpu/dispatch.cuh"
#include "gpu/quant/append.h"
#include "reference/layout/layout_names.h"
#include "reference/quant/append.h"
#include "reference/quant/scale_rules.h"

namespace kvlab::gpu {
namespace {

constexpr int kAppendThreads = 128;
constexpr int kAppendWarps = kAppendThreads / 32;

struct AppendParams {
  const void* k;          // [num_tokens, num_kv_heads, head_dim] in_dtype
  const void* v;
  const int64_t* slots;   // [num_tokens]
  KvCacheView kv;         // device pools (kv_layout.h)
};

__device__ __forceinline__ float load_in(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_in(const __nv_bfloat16* p, int64_t i) {
  return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
}
__device__ __forceinline__ float load_in(const __half* p, int64_t i) {
  return fp16_bits_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
}

// amax over `width` lanes (aligned groups), identical bits on every lane of the group.
template <int kWidth>
__device__ __forceinline__ float group_amax(float a) {
#pragma unroll
  for (int off = kWidth / 2; off > 0; off /= 2) a = amax_accumulate(a, __shfl_xor_sync(0xFFFFFFFFu, a, off));
  return a;
}

// NaN scales in the reference's bits: the host's division propagates the canonical NaN
// operand (0x7FC00000), the GPU's returns 0x7FFFFFFF; stored FP32 scales use the former
// (scale_detail::nan_f32(), also what amax_accumulate returns).
__device__ __forceinline__ float canonical_nan(float s) { return s != s ? scale_detail::nan_f32() : s; }

// Sets the nibble of pool element `idx` to `code` without touching the other nibble.
__device__ __forceinline__ void store_nibble_atomic(uint8_t* pool, int64_t idx, uint32_t code) {
  const uintptr_t byte = reinterpret_cast<uintptr_t>(pool + (idx >> 1));
  unsigned int* word = reinterpret_cast<unsigned int*>(byte & ~uintptr_t{3});
  const unsigned shift = static_cast<unsigned>((byte & 3u) * 8u + ((idx & 1) ? 4u : 0u));
  atomicAnd(word, ~(0xFu << shift));
  atomicOr(word, (code & 0xFu) << shift);
}

// One (token, head) row of K or V, by one warp. x: the input row [head_dim].
template <typename TIn>
__device__ void write_row(const AppendParams& p, bool is_k, const TIn* x, int64_t block, int head, int slot) {
  const PageGeometry& g = p.kv.geom;
  const int D = g.head_dim;
  const int lane = threadIdx.x % 32;
  uint8_t* pool = static_cast<uint8_t*>(is_k ? p.kv.k : p.kv.v);
  void* scales = is_k ? p.kv.k_scales : p.kv.v_scales;
  const float pool_scale = is_k ? p.kv.k_scale : p.kv.v_scale;
  auto index = [&](int d) { return is_k ? g.k_index(block, head, slot, d) : g.v_index(block, head, slot, d); };

  switch (g.format) {
    case KvFormat::kBF16:
    case KvFormat::kFP16:
      for (int d = lane; d < D; d += 32) {
        const float xv = load_in(x, d);
        reinterpret_cast<uint16_t*>(pool)[index(d)] = g.format == KvFormat::kBF16
                                                          ? float_to_bf16_bits(xv, Saturation::kNonSaturating)
                                                          : float_to_fp16_bits(xv, Saturation::kNonSaturating);
      }
      return;
    case KvFormat::kFP8E4M3:
    case KvFormat::kFP8E5M2: {
      const ElemFormat ef = g.format == KvFormat::kFP8E4M3 ? ElemFormat::kFP8E4M3 : ElemFormat::kFP8E5M2;
      for (int d = lane; d < D; d += 32)
        pool[index(d)] = static_cast<uint8_t>(
            quantize_element(load_in(x, d), pool_scale, ef, Saturation::kSatFinite, ElementClamp::kEncoder));
      return;
    }
    case KvFormat::kFP8E4M3PerToken: {
      float amax = 0.0f;
      for (int d = lane; d < D; d += 32) amax = amax_accumulate(amax, load_in(x, d));
      amax = group_amax<32>(amax);
      // A NaN amax gives a NaN scale; stored in the reference's bits (see canonical_nan).
      const float s = canonical_nan(fp8_scale_from_amax(amax, ElemFormat::kFP8E4M3, kDefaultAmaxFloor, AmaxFloorAt::kAmax));
      for (int d = lane; d < D; d += 32)
        pool[index(d)] = static_cast<uint8_t>(
            quantize_element(load_in(x, d), s, ElemFormat::kFP8E4M3, Saturation::kSatFinite, ElementClamp::kEncoder));
      if (lane == 0) static_cast<float*>(scales)[g.token_scale_index(block, head, slot)] = s;
      return;
    }
    case KvFormat::kNVFP4:
    case KvFormat::kMXFP4: {
      const bool nv = g.format == KvFormat::kNVFP4;
      const int G = g.scale_group();  // 16 or 32; head_dim is a multiple of it (validate())
      const bool atomic_nibbles = !is_k && g.layout == KvLayout::kSplitX;
      for (int d0 = 0; d0 < D; d0 += 32) {  // uniform trip count: shuffles below are warp-wide
        const int d = d0 + lane;
        const bool valid = d < D;
        const float xv = valid ? load_in(x, d) : 0.0f;
        float amax = amax_accumulate(0.0f, xv);
        amax = nv ? group_amax<16>(amax) : group_amax<32>(amax);
        uint8_t scode;
        float div;
        if (nv) {
          scode = nvfp4_block_scale_code(amax, pool_scale, kDefaultAmaxFloor, AmaxFloorAt::kAmax);
          div = nvfp4_element_scale(scode, pool_scale);
        } else {
          const int e = pow2_exp_ocp_floor(amax, elem_emax(ElemFormat::kFP4E2M1), kDefaultAmaxFloor, AmaxFloorAt::kAmax);
          scode = ue8m0_code_from_exp(e);
          div = pow2_scale_value(e);
        }
        const uint32_t code =
            quantize_element(xv, div, ElemFormat::kFP4E2M1, Saturation::kSatFinite, ElementClamp::kEncoder) & 0xFu;
        const uint32_t odd_code = __shfl_xor_sync(0xFFFFFFFFu, code, 1);
        if (valid) {
          const int64_t idx = index(d);
          if (atomic_nibbles) {
            store_nibble_atomic(pool, idx, code);
          } else if ((d & 1) == 0) {  // dims 2k, 2k+1 share byte idx / 2 (idx even)
            pool[idx >> 1] = pack_fp4x2(static_cast<uint8_t>(code), static_cast<uint8_t>(odd_code));
          }
          if (d % G == 0) static_cast<uint8_t*>(scales)[g.block_scale_index(block, head, slot, d)] = scode;
        }
      }
      return;
    }
  }
}

// grid: num_tokens blocks; block: kAppendThreads (one warp per (head, K|V) row).
template <typename TIn>
__global__ void __launch_bounds__(kAppendThreads) append_kv_kernel(const AppendParams p) {
  const int token = blockIdx.x;
  const int64_t s = p.slots[token];
  const PageGeometry& g = p.kv.geom;
  if (s < 0 || s >= g.num_blocks * g.block_size) return;  // padding (-1); others: validate_append_slots
  const int64_t block = s / g.block_size;
  const int slot = static_cast<int>(s % g.block_size);
  const int H = g.num_kv_heads, D = g.head_dim;
  const int warp = threadIdx.x / 32;
  for (int r = warp; r < 2 * H; r += kAppendWarps) {
    const bool is_k = r < H;
    const int head = is_k ? r : r - H;
    const TIn* x = static_cast<const TIn*>(is_k ? p.k : p.v) + (static_cast<int64_t>(token) * H + head) * D;
    write_row<TIn>(p, is_k, x, block, head, slot);
  }
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
  const int64_t bad = thrust::find_if(pol, a.slot_mapping, a.slot_mapping + n, SlotOutOfRange{num_slots}) - a.slot_mapping;
  if (bad < n) {
    int64_t s = 0;
    KVLAB_CUDA_CHECK(cudaMemcpy(&s, a.slot_mapping + bad, sizeof(s), cudaMemcpyDeviceToHost));
    std::ostringstream os;
    os << "append_kv: slot_mapping[" << bad << "] = " << s << " is outside [-1, " << num_slots << ") (num_blocks "
       << a.kv.geom.num_blocks << " x block_size " << a.kv.geom.block_size << "; -1 = padding)";
    throw InvalidArgument(os.str());
  }
  // Duplicates: sort (slot, token) pairs by slot, then look for equal neighbours >= 0.
  thrust::device_vector<int64_t> keys(n);
  thrust::device_vector<int32_t> tokens(n);
  thrust::copy(pol, a.slot_mapping, a.slot_mapping + n, keys.begin());
  thrust::sequence(pol, tokens.begin(), tokens.end());
  thrust::stable_sort_by_key(pol, keys.begin(), keys.end(), tokens.begin());
  const int64_t pos = *thrust::find_if(pol, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(n - 1),
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
    KVLAB_REQUIRE(reinterpret_cast<uintptr_t>(a.kv.v) % 4 == 0 && reinterpret_cast<uintptr_t>(a.kv.k) % 4 == 0,
                  "append_kv: FP4 pools must be 4-byte aligned");
  if (kv_format_has_token_scales(a.kv.geom.format))
    KVLAB_REQUIRE(reinterpret_cast<uintptr_t>(a.kv.k_scales) % 4 == 0 && reinterpret_cast<uintptr_t>(a.kv.v_scales) % 4 == 0,
                  "append_kv: per-token scale arrays must be 4-byte aligned");
  if (check == SlotCheck::kValidate) validate_append_slots(a, stream);
  AppendParams p{a.k, a.v, a.slot_mapping, a.kv};
  const cudaError_t e = KVLAB_DISPATCH_ACT_DTYPE(a.in_dtype, TIn, [&] { return launch_append<TIn>(p, a.num_tokens, stream); });
  KVLAB_CUDA_CHECK(e);
  KVLAB_CHECK_LAUNCH();
}

}  // namespace kvlab::gpu
