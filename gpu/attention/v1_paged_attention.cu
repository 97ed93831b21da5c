// v1_paged_attention.cu: vLLM's paged-attention kernel (v1), single pass.
//
// What changed vs v0: the vLLM memory-access design. A thread block (128 threads, 4 warps)
// handles one (query head, sequence); warps take tiles of 16 consecutive tokens in turn;
// inside a warp, a *thread group* of 2 threads computes one token's q.k: each thread reads
// 8-byte *vecs* so that the group reads each 16-byte split-x chunk of a K row together
// (neighbouring threads, neighbouring addresses) and the group reduces by one shuffle.
// Q sits in shared memory (float), the logits of the whole sequence too; softmax across the
// block; then the V pass reads the token-minor V layout [.., head_dim, block_size] in
// 16-byte *V vecs* along tokens (V_VEC tokens of one row per load), each thread
// accumulating NUM_ROWS_PER_THREAD output rows; warp shuffles and a shared-memory tree
// across warps reduce the rows, as in vLLM.
// Why: reproduce vLLM's paged-attention v1 design, so its costs can be measured next to v0/v3.
//
// Generalizations (documented, not in vLLM): the block size is a runtime parameter. vLLM
// ties a warp to one page (BLOCK_SIZE template); here a warp's 16-token tile looks up each
// token's page, so any block size works with the same instance. V vecs need V_VEC
// consecutive tokens of one page: with the split-x layout and block_size % V_VEC == 0 they
// are one 16-byte load; otherwise (NHD/HND, or pages shorter than a V vec) the same loop
// gathers elements one by one (correct, slow). Quantized formats dequantize in the loop:
// pool scales fold into the qk scale and the output, per-token scales into the score and
// the probability, block scales per vec.
// Limits: the logits of a whole sequence live in shared memory (unsupported beyond what fits;
// v2 lifts it); not GQA-aware (each query head reads its KV head again).
#include <cuda_runtime.h>

#include <cmath>
#include <sstream>

#include "gpu/attention/decode_impl.h"
#include "gpu/attention/kv_vec.cuh"
#include "gpu/attention/paged_attention.h"
#include "gpu/core/cuda_check.h"
#include "gpu/core/device_info.h"
#include "gpu/dispatch.cuh"

namespace kvlab::gpu {
namespace detail {
namespace {

constexpr int kPaThreads = 128;
constexpr int kPaWarps = kPaThreads / kWarpSize;
constexpr int kThreadGroup = 2;                            // threads per token in q.k
constexpr int kTokensPerKTile = kWarpSize / kThreadGroup;  // 16 tokens per warp iteration

// Byte address of element `idx` of a pool of kBits-wide elements.
template <int kBits>
__device__ __forceinline__ const uint8_t* elem_ptr(const uint8_t* pool, int64_t idx) {
  return pool + idx * kBits / 8;
}

// Element scale other than a kPool scale (folded elsewhere): per token, or per block
// (NVFP4: E4M3 block scale times the tensor scale, in kv_access.h's order).
__device__ __forceinline__ float local_scale(const PagedParams& p, const void* scales,
                                             float tensor_scale, int64_t page, int head, int slot,
                                             int dim) {
  switch (p.mode) {
    case ScaleMode::kPerToken:
      return static_cast<const float*>(scales)[p.geom.token_scale_index(page, head, slot)];
    case ScaleMode::kNvfp4:
    case ScaleMode::kMx:
      return block_scale_value(
          p.mode,
          static_cast<const uint8_t*>(scales)[p.geom.block_scale_index(page, head, slot, dim)],
          tensor_scale);
    default:
      return 1.0f;
  }
}

template <int kHeadDim, KvElem kElem>
__global__ void __launch_bounds__(kPaThreads) paged_attention_kernel(const PagedParams p) {
  constexpr int kBits = kv_elem_bits(kElem);
  constexpr int kX = 128 / kBits;                  // elements per 16-byte chunk (split-x x)
  constexpr int kVec = kX / kThreadGroup;          // elements per thread per K vec (8 bytes)
  constexpr int kNumVecs = kHeadDim / kX;          // K vecs per thread per token
  constexpr int kVVec = kX;                        // tokens per V vec (16 bytes along tokens)
  constexpr int kVTile = kVVec > 16 ? kVVec : 16;  // tokens per warp per V iteration
  constexpr int kVecsPerRow = kVTile / kVVec;
  constexpr int kRowsPerIter = kWarpSize / kVecsPerRow;
  constexpr int kRowsPerThread = (kHeadDim + kRowsPerIter - 1) / kRowsPerIter;
  static_assert(kHeadDim % kX == 0, "head_dim must hold whole 16-byte chunks");
  // Scale modes by element class: only FP4 has block scales, only E4M3 per-token scales.
  constexpr bool kBlockScaled = kElem == KvElem::kE2M1;
  constexpr bool kMaybePerToken = kElem == KvElem::kE4M3;

  extern __shared__ float smem[];
  float* q_s = smem;                   // [kHeadDim]
  float* red = q_s + kHeadDim;         // [2 * kPaWarps]
  float* logits = red + 2 * kPaWarps;  // [partition tokens]; reused for the output reduction

  const int head = blockIdx.x, seq = blockIdx.y, part = blockIdx.z;
  const int kv_head = head / p.group_size;
  const int64_t row = static_cast<int64_t>(seq) * p.num_qo_heads + head;
  const int len = p.seq_lens[seq];
  const bool v2 = p.partition_size > 0;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int64_t part_row = row * p.max_num_partitions + part;

  if (len < 0 || len > p.seq_len_bound) {  // reported as NaN (v2: by the reduce kernel)
    if (!v2) {
      for (int d = threadIdx.x; d < kHeadDim; d += kPaThreads)
        store_act(p.o, row * kHeadDim + d, NAN, p.q_bf16);
      if (threadIdx.x == 0 && p.lse) p.lse[row] = NAN;
    }
    return;
  }
  const int start = v2 ? part * p.partition_size : 0;
  const int end = v2 ? min(len, start + p.partition_size) : len;
  if (start >= end) {
    if (!v2) {  // empty sequence: zero output, lse = -inf
      for (int d = threadIdx.x; d < kHeadDim; d += kPaThreads)
        store_act(p.o, row * kHeadDim + d, 0.0f, p.q_bf16);
      if (threadIdx.x == 0 && p.lse) p.lse[row] = -INFINITY;
    }
    return;  // v2: partitions past the end are never read by the reduce kernel
  }
  const int n_tokens = end - start;
  const int32_t* table = p.block_table + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const int bs = p.geom.block_size;
  const int64_t num_blocks = p.geom.num_blocks;

  for (int d = threadIdx.x; d < kHeadDim; d += kPaThreads)
    q_s[d] = load_act(p.q, row * kHeadDim + d, p.q_bf16);
  __syncthreads();

  // ---- q.k: warp w takes 16-token tiles w, w+4, ...; thread group g of the warp takes
  // token g of the tile; thread ti of the group reads the ti-th 8 bytes of every chunk.
  const int group = lane / kThreadGroup, ti = lane % kThreadGroup;
  bool bad = false;
  float qk_max = -INFINITY;
  const int num_ktiles = (n_tokens + kTokensPerKTile - 1) / kTokensPerKTile;
  for (int kt = warp; kt < num_ktiles; kt += kPaWarps) {
    const int t = start + kt * kTokensPerKTile + group;
    bool valid = t < end;
    int64_t page = 0;
    int slot = 0;
    float qk = 0.0f;
    if (valid) {
      page = table[t / bs];
      slot = t % bs;
      if (page < 0 || page >= num_blocks) {
        bad = true;
        valid = false;
      }
    }
    if (valid) {
#pragma unroll
      for (int j = 0; j < kNumVecs; ++j) {
        const int d0 = j * kX + ti * kVec;
        float kf[kVec];
        decode_words<kElem, 2>(reinterpret_cast<const uint32_t*>(
                                   elem_ptr<kBits>(p.k, p.geom.k_index(page, kv_head, slot, d0))),
                               kf);
        float part_dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kVec; ++e) part_dot += q_s[d0 + e] * kf[e];
        if constexpr (kBlockScaled)  // one block scale per vec
          part_dot *= local_scale(p, p.k_scales, p.k_pool_scale, page, kv_head, slot, d0);
        qk += part_dot;
      }
    }
    qk += __shfl_xor_sync(0xFFFFFFFFu, qk, 1);  // the thread group's two halves
    if (valid) {
      float s = qk * p.qk_scale;
      if (kMaybePerToken && p.mode == ScaleMode::kPerToken)
        s *= local_scale(p, p.k_scales, p.k_pool_scale, page, kv_head, slot, 0);
      if (ti == 0) logits[t - start] = s;
      qk_max = fmaxf(qk_max, s);
    }
  }

  // ---- softmax over the block: max, exp, sum, normalize.
  qk_max = group_max<kWarpSize>(qk_max);
  if (lane == 0) red[warp] = qk_max;
  __syncthreads();
  qk_max = red[0];
#pragma unroll
  for (int w = 1; w < kPaWarps; ++w) qk_max = fmaxf(qk_max, red[w]);
  float exp_sum = 0.0f;
  for (int i = threadIdx.x; i < n_tokens; i += kPaThreads) {
    const float e = expf(logits[i] - qk_max);
    logits[i] = e;
    exp_sum += e;
  }
  exp_sum = group_sum<kWarpSize>(exp_sum);
  if (lane == 0) red[kPaWarps + warp] = exp_sum;
  __syncthreads();
  exp_sum = 0.0f;
#pragma unroll
  for (int w = 0; w < kPaWarps; ++w) exp_sum += red[kPaWarps + w];  // >= 1 (the max term)
  const float inv_sum = 1.0f / exp_sum;
  for (int i = threadIdx.x; i < n_tokens; i += kPaThreads) logits[i] *= inv_sum;
  __syncthreads();

  // ---- V: warp w takes kVTile-token tiles; lane = (row group, vec in row). Each lane
  // accumulates kRowsPerThread rows r = lane / kVecsPerRow + i * kRowsPerIter.
  const int vi = lane % kVecsPerRow, row0 = lane / kVecsPerRow;
  const bool fast_v = p.geom.layout == KvLayout::kSplitX && bs % kVVec == 0;
  float acc[kRowsPerThread];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) acc[i] = 0.0f;
  const int num_vtiles = (n_tokens + kVTile - 1) / kVTile;
  for (int vt = warp; vt < num_vtiles; vt += kPaWarps) {
    const int t0 = start + vt * kVTile + vi * kVVec;
    if (t0 >= end) continue;
    if (fast_v) {
      // All kVVec tokens share one page and are contiguous per row: one 16-byte load.
      const int64_t page = table[t0 / bs];
      const int slot0 = t0 % bs;
      if (page < 0 || page >= num_blocks) continue;  // flagged by the q.k pass
      float lv[kVVec];
#pragma unroll
      for (int k = 0; k < kVVec; ++k) {
        lv[k] = (t0 + k < end) ? logits[t0 + k - start] : 0.0f;
        if (kMaybePerToken && p.mode == ScaleMode::kPerToken && t0 + k < end)
          lv[k] *= local_scale(p, p.v_scales, p.v_pool_scale, page, kv_head, slot0 + k, 0);
      }
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) {
        const int r = row0 + i * kRowsPerIter;
        if (r >= kHeadDim) continue;
        float vf[kVVec];
        decode_words<kElem, 4>(reinterpret_cast<const uint32_t*>(
                                   elem_ptr<kBits>(p.v, p.geom.v_index(page, kv_head, slot0, r))),
                               vf);
        float s = 0.0f;
        if constexpr (kBlockScaled) {
          // Block scales of tokens slot0.. for this row: stride head_dim / g codes apart.
          const uint8_t* sc = static_cast<const uint8_t*>(p.v_scales) +
                              p.geom.block_scale_index(page, kv_head, slot0, r);
          const int stride = kHeadDim / p.geom.scale_group();
#pragma unroll
          for (int k = 0; k < kVVec; ++k)
            if (t0 + k < end)
              s += lv[k] * block_scale_value(p.mode, sc[k * stride], p.v_pool_scale) * vf[k];
        } else {
#pragma unroll
          for (int k = 0; k < kVVec; ++k)
            if (t0 + k < end)
              s += lv[k] * vf[k];  // unused slots may hold NaN: skipped, not multiplied by 0
        }
        acc[i] += s;
      }
    } else {
      // Gather: the vec's tokens may sit in different pages / not be contiguous per row.
#pragma unroll 1
      for (int k = 0; k < kVVec; ++k) {
        const int t = t0 + k;
        if (t >= end) break;
        const int64_t page = table[t / bs];
        const int slot = t % bs;
        if (page < 0 || page >= num_blocks) continue;  // flagged by the q.k pass
        float w = logits[t - start];
        if (kMaybePerToken && p.mode == ScaleMode::kPerToken)
          w *= local_scale(p, p.v_scales, p.v_pool_scale, page, kv_head, slot, 0);
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
          const int r = row0 + i * kRowsPerIter;
          if (r >= kHeadDim) continue;
          float wr = w;
          if constexpr (kBlockScaled)
            wr *= local_scale(p, p.v_scales, p.v_pool_scale, page, kv_head, slot, r);
          acc[i] += wr * decode_one<kElem>(p.v, p.geom.v_index(page, kv_head, slot, r));
        }
      }
    }
  }

  // ---- reduce rows: across the vecs of a row inside the warp, then across warps.
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
#pragma unroll
    for (int mask = kVecsPerRow / 2; mask >= 1; mask /= 2)
      acc[i] += __shfl_xor_sync(0xFFFFFFFFu, acc[i], mask);
  }
  __syncthreads();  // logits are dead: reuse them as out_smem [kPaWarps / 2, kHeadDim]
  float* out_smem = logits;
  for (int i = kPaWarps; i > 1; i /= 2) {
    const int mid = i / 2;
    if (warp >= mid && warp < i && vi == 0) {
      float* dst = out_smem + (warp - mid) * kHeadDim;
#pragma unroll
      for (int j = 0; j < kRowsPerThread; ++j) {
        const int r = row0 + j * kRowsPerIter;
        if (r < kHeadDim) dst[r] = acc[j];
      }
    }
    __syncthreads();
    if (warp < mid && vi == 0) {
      const float* src = out_smem + warp * kHeadDim;
#pragma unroll
      for (int j = 0; j < kRowsPerThread; ++j) {
        const int r = row0 + j * kRowsPerIter;
        if (r < kHeadDim) acc[j] += src[r];
      }
    }
    __syncthreads();
  }

  bad = __syncthreads_or(bad);
  if (warp == 0 && vi == 0) {
#pragma unroll
    for (int j = 0; j < kRowsPerThread; ++j) {
      const int r = row0 + j * kRowsPerIter;
      if (r >= kHeadDim) continue;
      const float val = bad ? NAN : acc[j] * p.out_scale;
      if (v2)
        p.tmp_out[part_row * kHeadDim + r] = val;
      else
        store_act(p.o, row * kHeadDim + r, val, p.q_bf16);
    }
  }
  if (threadIdx.x == 0) {
    if (v2) {
      p.max_logits[part_row] = qk_max;
      p.exp_sums[part_row] = bad ? NAN : exp_sum;
    } else if (p.lse) {
      p.lse[row] = bad ? NAN : qk_max + logf(exp_sum);
    }
  }
}

template <int kHeadDim, KvElem kElem>
cudaError_t launch_paged_attention_t(const PagedParams& p, int num_seqs, cudaStream_t stream) {
  const int64_t logits_tokens = p.partition_size > 0 ? p.partition_size : p.seq_len_bound;
  const size_t smem = paged_attention_smem_bytes(kHeadDim, logits_tokens);
  auto kernel = paged_attention_kernel<kHeadDim, kElem>;
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  const dim3 grid(p.num_qo_heads, num_seqs, p.partition_size > 0 ? p.max_num_partitions : 1);
  kernel<<<grid, kPaThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

size_t v1_smem(const DecodeArgs& a) {
  return paged_attention_smem_bytes(a.kv.geom.head_dim, seq_len_bound64(a));
}

std::string v1_unsupported_reason(const DecodeArgs& a, const DecodeTuning&) {
  const LaunchLimits lim = current_launch_limits();
  if (v1_smem(a) > static_cast<size_t>(lim.smem_per_block_optin)) {
    std::ostringstream os;
    os << "v1 keeps the logits of a whole sequence in shared memory: sequence-length bound "
       << seq_len_bound64(a) << " needs " << v1_smem(a) << " bytes, the device allows "
       << lim.smem_per_block_optin << " per block (v2 partitions the sequence)";
    return os.str();
  }
  if (a.num_seqs > lim.max_grid_y) {
    std::ostringstream os;
    os << "v1 puts sequences on grid.y: num_seqs " << a.num_seqs << " exceeds " << lim.max_grid_y;
    return os.str();
  }
  return "";
}

size_t v1_workspace_bytes(const DecodeArgs&, const DecodeTuning&) {
  return 0;
}

void v1_run(const DecodeArgs& a, const DecodeTuning&, void*, cudaStream_t stream) {
  PagedParams p = make_paged_params(a);
  p.partition_size = 0;
  p.max_num_partitions = 1;
  KVLAB_CUDA_CHECK(launch_paged_attention(p, a.num_seqs, stream));
  KVLAB_CHECK_LAUNCH();
}

}  // namespace

size_t paged_attention_smem_bytes(int head_dim, int64_t logits_tokens) {
  // logits region doubles as the [kPaWarps / 2, head_dim] output-reduction buffer
  const int64_t logits =
      std::max<int64_t>(logits_tokens, static_cast<int64_t>(kPaWarps / 2) * head_dim);
  return static_cast<size_t>(head_dim + 2 * kPaWarps + logits + kSmemSlackFloats) * sizeof(float);
}

PagedParams make_paged_params(const DecodeArgs& a) {
  PagedParams p{};
  const PageGeometry& g = a.kv.geom;
  p.q = a.q;
  p.o = a.o;
  p.lse = a.lse;
  p.q_bf16 = a.q_dtype == DType::kBF16;
  p.k = static_cast<const uint8_t*>(a.kv.k);
  p.v = static_cast<const uint8_t*>(a.kv.v);
  p.k_scales = a.kv.k_scales;
  p.v_scales = a.kv.v_scales;
  p.mode = scale_mode_of(g.format);
  p.k_pool_scale = kv_format_has_pool_scale(g.format) ? a.kv.k_scale : 1.0f;
  p.v_pool_scale = kv_format_has_pool_scale(g.format) ? a.kv.v_scale : 1.0f;
  p.geom = g;
  p.block_table = a.block_table;
  p.seq_lens = a.seq_lens;
  p.num_qo_heads = a.num_qo_heads;
  p.group_size = a.group_size();
  p.max_blocks_per_seq = a.max_blocks_per_seq;
  p.seq_len_bound = static_cast<int>(seq_len_bound64(a));
  // The pool scale of kPool formats multiplies every k: fold it into the qk scale. NVFP4's
  // tensor scale belongs to its block-scale product (kv_access.h's order) and stays there.
  // Likewise the V pool scale of kPool formats multiplies the output once.
  p.qk_scale = a.sm_scale * (p.mode == ScaleMode::kPool ? p.k_pool_scale : 1.0f);
  p.out_scale = p.mode == ScaleMode::kPool ? p.v_pool_scale : 1.0f;
  return p;
}

cudaError_t launch_paged_attention(const PagedParams& p, int num_seqs, cudaStream_t stream) {
  return KVLAB_DISPATCH_HEAD_DIM(p.geom.head_dim, kHeadDim, [&] {
    return KVLAB_DISPATCH_KV_ELEM(p.geom.format, kElem, [&] {
      return launch_paged_attention_t<kHeadDim, kElem>(p, num_seqs, stream);
    });
  });
}

DecodeVersionImpl make_v1_paged_attention() {
  DecodeVersionImpl v;
  v.info = {1, "v1_paged_attention",
            "vLLM v1: thread groups, 8-byte K vecs over split-x chunks, whole-sequence "
            "logits in "
            "shared memory, 16-byte token-minor V vecs"};
  v.unsupported_reason = v1_unsupported_reason;
  v.workspace_bytes = v1_workspace_bytes;
  v.run = v1_run;
  return v;
}

}  // namespace detail
}  // namespace kvlab::gpu
