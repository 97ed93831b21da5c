// args.h: the argument structs shared by reference/ and gpu/ (the mirror contract).
//
//   kvlab::ref::decode_attention(const DecodeArgs&)                       host buffers
//   kvlab::gpu::decode_attention(const DecodeArgs&, version, ws, stream)  device buffers
//
// Tests build the same args twice over one shape and page table, once on host and once
// on device. Pointers are plain `void*` plus a dtype/format tag so that host code (g++)
// and kernels (nvcc) share the struct without either's vector types.
#pragma once

#include <cstdint>

#include "reference/core/dtype.h"
#include "reference/layout/kv_layout.h"

namespace kvlab {

// A paged KV cache: two pools with their scales. See kv_layout.h for every shape.
struct KvCacheView {
  PageGeometry geom;
  void* k = nullptr;  // K pool: geom.bytes() bytes
  void* v = nullptr;  // V pool: geom.bytes() bytes
  // kFP8E4M3PerToken: float [num_blocks, num_kv_heads, block_size]
  // kNVFP4 (E4M3 codes) / kMXFP4 (UE8M0 codes): uint8 [num_blocks, num_kv_heads, block_size,
  // head_dim/g] nullptr for every other format.
  void* k_scales = nullptr;
  void* v_scales = nullptr;
  // Pool-wide FP32 scales (kFP8E4M3, kFP8E5M2: real = fp8 * scale; kNVFP4: the tensor
  // scale, real = e2m1 * e4m3_block_scale * scale). Ignored by the other formats.
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// Decode attention: one query token per sequence over its paged KV history.
//   q     [num_seqs, num_qo_heads, head_dim]   q_dtype (kBF16 or kF16)
//   o     [num_seqs, num_qo_heads, head_dim]   q_dtype
//   lse   [num_seqs, num_qo_heads] float, optional (nullptr): natural-log log-sum-exp of
//         the scaled logits, lse = log(sum_j exp(sm_scale * q.k_j)); -inf for an empty
//         sequence (whose o is all zeros)
//   block_table [num_seqs, max_blocks_per_seq] int32, seq_lens [num_seqs] int32
// GQA: query head h reads KV head h / (num_qo_heads / num_kv_heads); num_qo_heads must be
// a multiple of num_kv_heads (MQA: num_kv_heads == 1).
struct DecodeArgs {
  DType q_dtype = DType::kBF16;
  const void* q = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  KvCacheView kv;
  const int32_t* block_table = nullptr;
  const int32_t* seq_lens = nullptr;
  int32_t num_seqs = 0;
  int32_t num_qo_heads = 0;
  int32_t max_blocks_per_seq = 0;
  // Host-known upper bound of seq_lens (kernels size split-KV plans from it; entries above
  // it are an error). 0 means max_blocks_per_seq * block_size.
  int32_t max_seq_len = 0;
  float sm_scale = 0.0f;  // typically 1/sqrt(head_dim)

  int group_size() const {
    return kv.geom.num_kv_heads > 0 ? num_qo_heads / kv.geom.num_kv_heads : 0;
  }
  int32_t seq_len_bound() const {
    return max_seq_len > 0 ? max_seq_len : max_blocks_per_seq * kv.geom.block_size;
  }
};

// Append / quantize-on-write (vLLM's reshape_and_cache): token i of k/v goes to
// slot_mapping[i] (page * block_size + offset; -1 = padding, skipped).
//   k, v          [num_tokens, num_kv_heads, head_dim]   in_dtype (kBF16, kF16 or kF32)
//   slot_mapping  [num_tokens] int64
// The destination's pool scales (kFP8E4M3/kFP8E5M2/kNVFP4) are inputs; per-token and block
// scales are computed and written per token.
struct AppendArgs {
  DType in_dtype = DType::kBF16;
  const void* k = nullptr;
  const void* v = nullptr;
  const int64_t* slot_mapping = nullptr;
  int32_t num_tokens = 0;
  KvCacheView kv;
};

// Paged prefill (chunked prefill) attention: several sequences, each computing a chunk of
// q_len consecutive query tokens whose K/V the append has already written into the paged
// cache. Sequence s owns query rows q_start[s] .. q_start[s+1] - 1; its cache holds
// seq_lens[s] tokens after the append, so its chunk sits at positions seq_lens[s] - q_len ..
// seq_lens[s] - 1 and row i sees keys 0 .. seq_lens[s] - q_len + i: the cached prefix plus
// the chunk causally (bottom-right aligned causal attention, as PrefillArgs with causal).
//   q     [num_q_tokens, num_qo_heads, head_dim]   q_dtype (kBF16 or kF16), num_q_tokens =
//         q_start[num_seqs]
//   o     [num_q_tokens, num_qo_heads, head_dim]   q_dtype
//   lse   [num_q_tokens, num_qo_heads] float, optional (natural log, as DecodeArgs::lse)
//   q_start [num_seqs + 1] int32 (0, non-decreasing); seq_lens [num_seqs] int32 with
//   q_len <= seq_lens[s] <= seq_len_bound(); block_table [num_seqs, max_blocks_per_seq] int32
// GQA as DecodeArgs. max_q_len / max_seq_len are host-known bounds (kernels size their
// grids from them; entries above them are an error); 0 means the table's bound
// max_blocks_per_seq * block_size.
struct PagedPrefillArgs {
  DType q_dtype = DType::kBF16;
  const void* q = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  KvCacheView kv;
  const int32_t* q_start = nullptr;
  const int32_t* seq_lens = nullptr;
  const int32_t* block_table = nullptr;
  int32_t num_seqs = 0;
  int32_t num_qo_heads = 0;
  int32_t max_blocks_per_seq = 0;
  int32_t max_q_len = 0;
  int32_t max_seq_len = 0;
  float sm_scale = 0.0f;

  int group_size() const {
    return kv.geom.num_kv_heads > 0 ? num_qo_heads / kv.geom.num_kv_heads : 0;
  }
  int32_t seq_len_bound() const {
    return max_seq_len > 0 ? max_seq_len : max_blocks_per_seq * kv.geom.block_size;
  }
  int32_t q_len_bound() const { return max_q_len > 0 ? max_q_len : seq_len_bound(); }
};

// Contiguous (prefill) attention, reference only: q [num_q, num_qo_heads, head_dim],
// k/v [num_kv, num_kv_heads, head_dim] (float32), o like q, lse [num_q, num_qo_heads].
// causal: query i sits at position (num_kv - num_q + i) and sees keys 0..that position.
struct PrefillArgs {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* o = nullptr;
  float* lse = nullptr;
  int32_t num_q = 0;
  int32_t num_kv = 0;
  int32_t num_qo_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  float sm_scale = 0.0f;
  bool causal = false;
};

}  // namespace kvlab
