// paged_attention.h: the params struct and launcher of the vLLM-style paged-attention
// kernel shared by v1 (single pass) and v2 (512-token partitions + reduce). The kernel and
// its curated instances live in v1_paged_attention.cu; v2 reuses them with a partition size
// and adds its reduce kernel, so the instances are compiled once.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/dispatch.cuh"
#include "reference/attention/args.h"

namespace kvlab::gpu::detail {

struct PagedParams {
  const void* q;  // [num_seqs, num_qo_heads, head_dim]  bf16/fp16
  void* o;        // [num_seqs, num_qo_heads, head_dim]  (partition_size == 0)
  float* lse;     // [num_seqs, num_qo_heads] or null    (partition_size == 0)
  bool q_bf16;
  const uint8_t* k;      // K pool (kv_layout.h)
  const uint8_t* v;      // V pool
  const void* k_scales;  // per-token float / block-scale codes, see kv_layout.h
  const void* v_scales;
  float k_pool_scale;  // kPool / kNvfp4 tensor scale (1 otherwise)
  float v_pool_scale;
  float out_scale;  // V pool scale for kPool formats (applied to the output), else 1
  PageGeometry geom;
  ScaleMode mode;
  const int32_t* block_table;  // [num_seqs, max_blocks_per_seq]
  const int32_t* seq_lens;     // [num_seqs]
  int num_qo_heads;
  int group_size;
  int max_blocks_per_seq;
  int seq_len_bound;
  float qk_scale;  // sm_scale (times the K pool scale for kPool)
  // 0: one pass over the whole sequence, output to o/lse (v1). >0: tokens per partition;
  // grid.z = max_num_partitions and the results go to the v2 workspace:
  int partition_size;
  int max_num_partitions;
  float* tmp_out;     // [num_seqs, num_qo_heads, max_num_partitions, head_dim] float
  float* max_logits;  // [num_seqs, num_qo_heads, max_num_partitions]
  float* exp_sums;    // [num_seqs, num_qo_heads, max_num_partitions]
};

// Fills the fields common to v1 and v2 from validated DecodeArgs.
PagedParams make_paged_params(const DecodeArgs& a);

// Dynamic shared memory of one block: logits of a partition (or the whole sequence),
// Q and the reduction buffers.
size_t paged_attention_smem_bytes(int head_dim, int64_t logits_tokens);

// grid (num_qo_heads, num_seqs, partitions); block 128 threads.
cudaError_t launch_paged_attention(const PagedParams& p, int num_seqs, cudaStream_t stream);

}  // namespace kvlab::gpu::detail
