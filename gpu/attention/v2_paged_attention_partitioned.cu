// v2_paged_attention_partitioned.cu: vLLM's paged attention v2: 512-token
// partitions plus a reduce kernel.
//
// What changed vs v1: grid.z splits every sequence into partitions of 512 tokens. Each
// block runs v1's kernel body over its partition only and writes, instead of the output,
// the partition's normalized output (float), its max logit and its exp-sum to a workspace.
// A second kernel (one block per (head, sequence)) rescales the partitions' exp-sums to the
// global max and combines the partial outputs: o = sum_p tmp_out_p * exp_sum_p *
// exp(max_p - max) / sum_p exp_sum_p * exp(max_p - max), as vLLM's
// paged_attention_v2_reduce_kernel does.
// Why: v1's shared-memory logits bound the sequence length and a long sequence occupies a
// single SM; partitions lift the bound (the logits buffer is 512 floats) and spread one
// sequence over many SMs. The kernel instances are v1's (runtime partition size), so this
// file adds only the reduce kernel.
// Costs: the workspace round trip (num_partitions * (head_dim + 2) floats per head) and a
// second launch; still not GQA-aware.
#include <cuda_runtime.h>

#include <cmath>
#include <sstream>

#include "gpu/attention/decode_impl.h"
#include "gpu/attention/kv_vec.cuh"
#include "gpu/attention/paged_attention.h"
#include "gpu/core/cuda_check.h"
#include "gpu/core/device_info.h"

namespace kvlab::gpu {
namespace detail {
namespace {

constexpr int kPartitionSize = 512;
constexpr int kReduceThreads = 128;
constexpr int kReduceWarps = kReduceThreads / kWarpSize;

struct ReduceParams {
  void* o;     // [num_seqs, num_qo_heads, head_dim]  bf16/fp16
  float* lse;  // [num_seqs, num_qo_heads] or null
  bool q_bf16;
  const float* tmp_out;     // [num_seqs, num_qo_heads, max_num_partitions, head_dim]
  const float* max_logits;  // [num_seqs, num_qo_heads, max_num_partitions]
  const float* exp_sums;    // [num_seqs, num_qo_heads, max_num_partitions]
  const int32_t* seq_lens;  // [num_seqs]
  int num_qo_heads;
  int head_dim;
  int max_num_partitions;
  int seq_len_bound;
};

template <bool kMax>
__device__ float reduce_block(float x, float* red) {
  x = kMax ? group_max<kWarpSize>(x) : group_sum<kWarpSize>(x);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  __syncthreads();
  if (lane == 0) red[warp] = x;
  __syncthreads();
  x = red[0];
#pragma unroll
  for (int w = 1; w < kReduceWarps; ++w) x = kMax ? fmaxf(x, red[w]) : x + red[w];
  return x;
}

// grid (num_qo_heads, num_seqs); block kReduceThreads.
// shared: red [kReduceWarps], weights [max_num_partitions].
__global__ void __launch_bounds__(kReduceThreads)
    paged_attention_v2_reduce_kernel(const ReduceParams p) {
  extern __shared__ float smem[];
  float* red = smem;
  float* weights = red + kReduceWarps;
  const int head = blockIdx.x, seq = blockIdx.y;
  const int64_t row = static_cast<int64_t>(seq) * p.num_qo_heads + head;
  const int D = p.head_dim;
  const int len = p.seq_lens[seq];
  const float* ml = p.max_logits + row * p.max_num_partitions;
  const float* es = p.exp_sums + row * p.max_num_partitions;

  if (len < 0 || len > p.seq_len_bound) {
    for (int d = threadIdx.x; d < D; d += kReduceThreads)
      store_act(p.o, row * D + d, NAN, p.q_bf16);
    if (threadIdx.x == 0 && p.lse) p.lse[row] = NAN;
    return;
  }
  const int n_parts = (len + kPartitionSize - 1) / kPartitionSize;
  if (n_parts == 0) {
    for (int d = threadIdx.x; d < D; d += kReduceThreads)
      store_act(p.o, row * D + d, 0.0f, p.q_bf16);
    if (threadIdx.x == 0 && p.lse) p.lse[row] = -INFINITY;
    return;
  }
  float m = -INFINITY;
  bool bad = false;
  for (int i = threadIdx.x; i < n_parts; i += kReduceThreads) {
    m = fmaxf(m, ml[i]);
    bad |= isnan(es[i]);  // a partition that saw an out-of-range page
  }
  m = reduce_block<true>(m, red);
  bad = __syncthreads_or(bad);
  float sum = 0.0f;
  for (int i = threadIdx.x; i < n_parts; i += kReduceThreads) {
    const float w = es[i] * expf(ml[i] - m);
    weights[i] = w;
    sum += w;
  }
  sum = reduce_block<false>(sum, red);  // also orders the weights[] stores before the reads
  const float inv = 1.0f / sum;
  for (int d = threadIdx.x; d < D; d += kReduceThreads) {
    float acc = 0.0f;
    for (int i = 0; i < n_parts; ++i)
      acc += p.tmp_out[(row * p.max_num_partitions + i) * D + d] * weights[i];
    store_act(p.o, row * D + d, bad ? NAN : acc * inv, p.q_bf16);
  }
  if (threadIdx.x == 0 && p.lse) p.lse[row] = bad ? NAN : m + logf(sum);
}

cudaError_t launch_v2_reduce(const ReduceParams& p, int num_seqs, cudaStream_t stream) {
  const size_t smem =
      (kReduceWarps + static_cast<size_t>(p.max_num_partitions) + kSmemSlackFloats) * sizeof(float);
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(paged_attention_v2_reduce_kernel,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  paged_attention_v2_reduce_kernel<<<dim3(p.num_qo_heads, num_seqs), kReduceThreads, smem,
                                     stream>>>(p);
  return cudaGetLastError();
}

int max_partitions(const DecodeArgs& a) {
  return static_cast<int>((seq_len_bound64(a) + kPartitionSize - 1) / kPartitionSize);
}

std::string v2_unsupported_reason(const DecodeArgs& a, const DecodeTuning&) {
  const LaunchLimits lim = current_launch_limits();
  std::ostringstream os;
  if (a.num_seqs > lim.max_grid_y) {
    os << "v2 puts sequences on grid.y: num_seqs " << a.num_seqs << " exceeds " << lim.max_grid_y;
    return os.str();
  }
  if (max_partitions(a) > lim.max_grid_y) {
    os << "v2 puts partitions on grid.z: " << max_partitions(a) << " partitions exceed "
       << lim.max_grid_y;
    return os.str();
  }
  const size_t reduce_smem =
      (kReduceWarps + static_cast<size_t>(max_partitions(a)) + kSmemSlackFloats) * sizeof(float);
  if (reduce_smem > static_cast<size_t>(lim.smem_per_block_optin)) {
    os << "v2's reduce kernel keeps one weight per partition in shared memory: "
       << max_partitions(a) << " partitions need " << reduce_smem << " bytes";
    return os.str();
  }
  return "";
}

size_t v2_workspace_bytes(const DecodeArgs& a, const DecodeTuning&) {
  const size_t rows = static_cast<size_t>(a.num_seqs) * a.num_qo_heads * max_partitions(a);
  return rows * (a.kv.geom.head_dim + 2) * sizeof(float);
}

void v2_run(const DecodeArgs& a, const DecodeTuning&, void* workspace, cudaStream_t stream) {
  PagedParams p = make_paged_params(a);
  p.partition_size = kPartitionSize;
  p.max_num_partitions = max_partitions(a);
  if (p.max_num_partitions == 0) p.max_num_partitions = 1;  // bound 0: every length is 0
  const size_t rows = static_cast<size_t>(a.num_seqs) * a.num_qo_heads * p.max_num_partitions;
  p.tmp_out = static_cast<float*>(workspace);
  p.max_logits = p.tmp_out + rows * a.kv.geom.head_dim;
  p.exp_sums = p.max_logits + rows;
  KVLAB_CUDA_CHECK(launch_paged_attention(p, a.num_seqs, stream));
  KVLAB_CHECK_LAUNCH();

  ReduceParams r{};
  r.o = a.o;
  r.lse = a.lse;
  r.q_bf16 = p.q_bf16;
  r.tmp_out = p.tmp_out;
  r.max_logits = p.max_logits;
  r.exp_sums = p.exp_sums;
  r.seq_lens = a.seq_lens;
  r.num_qo_heads = a.num_qo_heads;
  r.head_dim = a.kv.geom.head_dim;
  r.max_num_partitions = p.max_num_partitions;
  r.seq_len_bound = p.seq_len_bound;
  KVLAB_CUDA_CHECK(launch_v2_reduce(r, a.num_seqs, stream));
  KVLAB_CHECK_LAUNCH();
}

}  // namespace

DecodeVersionImpl make_v2_paged_attention_partitioned() {
  DecodeVersionImpl v;
  v.info = {2, "v2_paged_attention_partitioned",
            "vLLM v2: v1's kernel over 512-token partitions, then a reduce kernel that "
            "merges the "
            "partitions by their max logits and exp-sums"};
  v.unsupported_reason = v2_unsupported_reason;
  v.workspace_bytes = v2_workspace_bytes;
  v.run = v2_run;
  return v;
}

}  // namespace detail
}  // namespace kvlab::gpu
