// v0_cached_attention.cu: the textbook cached-attention kernel (one block per sequence and head)
// over the paged cache.
//
// What: one thread block per (sequence, query head). Q goes to shared memory; pass 1
// computes every score q.k_t (one warp per token, lanes over head_dim) into a shared-memory
// array as long as the sequence; softmax in shared memory (block max, exp, block sum);
// pass 2 streams V (one thread per output dimension) and sums p_t * v_t.
// Why: the baseline the other versions are measured against. It reads every element through
// the canonical scalar accessors of reference/attention/kv_access.h (load_k / load_v), so
// it supports every KvFormat and KvLayout with the reference's exact dequantization, and it
// is simple enough to be obviously right.
// Costs / limits: not GQA-aware (each query head re-reads its KV head); scalar loads; the
// score array limits the sequence length to what fits in shared memory (reported by
// decode_unsupported_reason); head_dim, block size, layout, format and Q dtype are all
// runtime parameters, so this file holds exactly one kernel instance.
#include <cuda_runtime.h>

#include <cmath>
#include <sstream>

#include "gpu/attention/decode_impl.h"
#include "gpu/attention/kv_vec.cuh"
#include "gpu/core/cuda_check.h"
#include "gpu/core/device_info.h"
#include "reference/attention/kv_access.h"

namespace kvlab::gpu {
namespace {

constexpr int kV0Threads = 128;
constexpr int kV0Warps = kV0Threads / kWarpSize;

struct V0Params {
  const void* q;  // [num_seqs, num_qo_heads, head_dim]  bf16/fp16
  void* o;        // [num_seqs, num_qo_heads, head_dim]  bf16/fp16
  float* lse;     // [num_seqs, num_qo_heads] or null
  bool q_bf16;
  KvCacheView kv;              // device pools, see kv_layout.h
  const int32_t* block_table;  // [num_seqs, max_blocks_per_seq]
  const int32_t* seq_lens;     // [num_seqs]
  int num_qo_heads;
  int group_size;
  int max_blocks_per_seq;
  int seq_len_bound;
  float sm_scale;
};

// Block-wide reduction of one float (max or sum) through `red` [kV0Warps].
template <bool kMax>
__device__ float block_reduce(float x, float* red) {
  x = kMax ? group_max<kWarpSize>(x) : group_sum<kWarpSize>(x);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  __syncthreads();  // `red` may still be read from a previous reduction
  if (lane == 0) red[warp] = x;
  __syncthreads();
  x = red[0];
#pragma unroll
  for (int w = 1; w < kV0Warps; ++w) x = kMax ? fmaxf(x, red[w]) : x + red[w];
  return x;
}

// grid: num_seqs * num_qo_heads blocks; block: kV0Threads.
// shared: q [head_dim] float, scores [seq_len_bound] float, red [kV0Warps] float.
__global__ void __launch_bounds__(kV0Threads) v0_cached_attention_kernel(const V0Params p) {
  extern __shared__ float smem[];
  const int D = p.kv.geom.head_dim;
  float* q_s = smem;
  float* red = q_s + D;
  float* scores = red + kV0Warps;

  const int seq = blockIdx.x / p.num_qo_heads;
  const int head = blockIdx.x % p.num_qo_heads;
  const int kv_head = head / p.group_size;
  const int64_t row = static_cast<int64_t>(seq) * p.num_qo_heads + head;
  const int len = p.seq_lens[seq];
  const int32_t* table = p.block_table + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const int bs = p.kv.geom.block_size;

  // A length outside [0, bound] or a page outside the pool is reported as NaN output
  // (validate_decode_tables() names it); nothing outside the pool is ever read.
  if (len < 0 || len > p.seq_len_bound) {
    for (int d = threadIdx.x; d < D; d += blockDim.x) store_act(p.o, row * D + d, NAN, p.q_bf16);
    if (threadIdx.x == 0 && p.lse) p.lse[row] = NAN;
    return;
  }
  if (len == 0) {  // empty sequence: zero output, lse = -inf
    for (int d = threadIdx.x; d < D; d += blockDim.x) store_act(p.o, row * D + d, 0.0f, p.q_bf16);
    if (threadIdx.x == 0 && p.lse) p.lse[row] = -INFINITY;
    return;
  }

  for (int d = threadIdx.x; d < D; d += blockDim.x) q_s[d] = load_act(p.q, row * D + d, p.q_bf16);
  __syncthreads();

  // Pass 1: scores. One warp per token; lanes stride over head_dim (coalesced in NHD/HND).
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  bool bad = false;
  float local_max = -INFINITY;
  for (int t = warp; t < len; t += kV0Warps) {
    const int64_t page = table[t / bs];
    const int slot = t % bs;
    float dot = 0.0f;
    if (page >= 0 && page < p.kv.geom.num_blocks) {
      for (int d = lane; d < D; d += kWarpSize)
        dot += q_s[d] * load_k(p.kv, page, kv_head, slot, d);
    } else {
      bad = true;
    }
    dot = group_sum<kWarpSize>(dot);
    const float s = dot * p.sm_scale;
    if (lane == 0) scores[t] = s;
    local_max = fmaxf(local_max, s);
  }
  const float m = block_reduce<true>(local_max, red);

  // Softmax numerators in place; every thread sees all scores after the barrier in
  // block_reduce.
  float local_sum = 0.0f;
  for (int t = threadIdx.x; t < len; t += blockDim.x) {
    const float e = expf(scores[t] - m);
    scores[t] = e;
    local_sum += e;
  }
  const float l = block_reduce<false>(local_sum, red);  // >= 1: the max term is exp(0)

  // Pass 2: o[d] = sum_t p_t v_t[d] / l. One thread per dimension, tokens in order.
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int t = 0; t < len; ++t) {
      const int64_t page = table[t / bs];
      if (page < 0 || page >= p.kv.geom.num_blocks) continue;  // flagged in pass 1
      acc += scores[t] * load_v(p.kv, page, kv_head, t % bs, d);
    }
    store_act(p.o, row * D + d, acc / l, p.q_bf16);
  }
  if (__syncthreads_or(bad)) {
    for (int d = threadIdx.x; d < D; d += blockDim.x) store_act(p.o, row * D + d, NAN, p.q_bf16);
    if (threadIdx.x == 0 && p.lse) p.lse[row] = NAN;
    return;
  }
  if (threadIdx.x == 0 && p.lse) p.lse[row] = m + logf(l);
}

size_t v0_smem_bytes(const DecodeArgs& a) {
  return (static_cast<size_t>(a.kv.geom.head_dim) + kV0Warps +
          static_cast<size_t>(detail::seq_len_bound64(a)) + kSmemSlackFloats) *
         sizeof(float);
}

// Launcher: [num_seqs * num_qo_heads] blocks of kV0Threads.
cudaError_t launch_v0(const V0Params& p, int num_seqs, size_t smem, cudaStream_t stream) {
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(v0_cached_attention_kernel,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  const int64_t blocks = static_cast<int64_t>(num_seqs) * p.num_qo_heads;
  v0_cached_attention_kernel<<<static_cast<unsigned>(blocks), kV0Threads, smem, stream>>>(p);
  return cudaGetLastError();
}

std::string v0_unsupported_reason(const DecodeArgs& a, const DecodeTuning&) {
  const size_t smem = v0_smem_bytes(a);
  const int optin = current_launch_limits().smem_per_block_optin;
  if (smem > static_cast<size_t>(optin)) {
    std::ostringstream os;
    os << "v0 keeps all scores of a sequence in shared memory: sequence-length bound "
       << detail::seq_len_bound64(a) << " needs " << smem << " bytes, the device allows " << optin
       << " per block (use a split-KV version)";
    return os.str();
  }
  if (static_cast<int64_t>(a.num_seqs) * a.num_qo_heads > INT32_MAX)
    return "v0 launches one block per (sequence, head): num_seqs * num_qo_heads exceeds the grid";
  return "";
}

size_t v0_workspace_bytes(const DecodeArgs&, const DecodeTuning&) {
  return 0;
}

void v0_run(const DecodeArgs& a, const DecodeTuning&, void*, cudaStream_t stream) {
  V0Params p{};
  p.q = a.q;
  p.o = a.o;
  p.lse = a.lse;
  p.q_bf16 = a.q_dtype == DType::kBF16;
  p.kv = a.kv;
  p.block_table = a.block_table;
  p.seq_lens = a.seq_lens;
  p.num_qo_heads = a.num_qo_heads;
  p.group_size = a.group_size();
  p.max_blocks_per_seq = a.max_blocks_per_seq;
  p.seq_len_bound = static_cast<int>(detail::seq_len_bound64(a));
  p.sm_scale = a.sm_scale;
  KVLAB_CUDA_CHECK(launch_v0(p, a.num_seqs, v0_smem_bytes(a), stream));
  KVLAB_CHECK_LAUNCH();
}

}  // namespace

namespace detail {
DecodeVersionImpl make_v0_cached_attention() {
  DecodeVersionImpl v;
  v.info = {
      0, "v0_cached_attention",
      "textbook: block per (seq, head), scores in shared memory, softmax, then the V pass; scalar "
      "canonical loads (every format/layout)"};
  v.unsupported_reason = v0_unsupported_reason;
  v.workspace_bytes = v0_workspace_bytes;
  v.run = v0_run;
  return v;
}
}  // namespace detail

}  // namespace kvlab::gpu
