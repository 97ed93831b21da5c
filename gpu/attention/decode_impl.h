// decode_impl.h: internals shared by the decode versions (host side, g++-compilable).
//
// Each v<N>_<algorithm>.cu defines one DecodeVersionImpl: its registry entry, the reason it
// declines a configuration, its workspace size and its run function, each given the
// caller's DecodeTuning (versions without plan knobs ignore it). decode_registry.cu
// collects them in id order; the public API (decode.h) validates the arguments once, asks
// the version whether it supports them, then runs it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "gpu/attention/decode.h"

namespace kvlab::gpu::detail {

struct DecodeVersionImpl {
  DecodeVersionInfo info;
  // "" when supported. Called only on arguments that passed validate_decode_args().
  std::string (*unsupported_reason)(const DecodeArgs&, const DecodeTuning&) = nullptr;
  size_t (*workspace_bytes)(const DecodeArgs&, const DecodeTuning&) = nullptr;
  // Launches (arguments validated and supported; workspace at least workspace_bytes()).
  void (*run)(const DecodeArgs&, const DecodeTuning&, void* workspace, cudaStream_t) = nullptr;
};

DecodeVersionImpl make_v0_cached_attention();
DecodeVersionImpl make_v1_paged_attention();
DecodeVersionImpl make_v2_paged_attention_partitioned();
DecodeVersionImpl make_v3_flash_decoding();
DecodeVersionImpl make_v4_mma_decode();
DecodeVersionImpl make_v5_mma_decode_2stage();
DecodeVersionImpl make_v6_stream_k_decode();
DecodeVersionImpl make_v7_mma_decode_l2_prefetch();
DecodeVersionImpl make_v8_mma_decode_bulk_page();
DecodeVersionImpl make_v9_mma_decode_bulk_rows();
DecodeVersionImpl make_v10_mma_decode_tma_swizzle();
DecodeVersionImpl make_v11_mma_decode_cluster_merge();
DecodeVersionImpl make_v12_mma_decode_last_block_merge();
DecodeVersionImpl make_v13_mma_decode_eight_warps();
DecodeVersionImpl make_v14_mma_decode_page_heads();
DecodeVersionImpl make_v15_mma_decode_stream_k();
DecodeVersionImpl make_v16_mma_decode_shared_tiles();

// Throws kvlab::InvalidArgument for malformed arguments: null pointers, geometry
// (validate(PageGeometry)), head counts, GQA divisibility, max_seq_len beyond the table,
// misaligned pointers, non-finite scales. num_seqs == 0 is a valid empty batch.
void validate_decode_args(const DecodeArgs& a);

// Throws kvlab::InvalidArgument for plan knobs out of range.
void validate_tuning(const DecodeTuning& t);

// "" or the reason no GPU version handles these arguments (Q/O dtype, head_dim).
std::string common_unsupported_reason(const DecodeArgs& a);

// Upper bound of seq_lens as int64 (DecodeArgs::seq_len_bound in int64 arithmetic).
inline int64_t seq_len_bound64(const DecodeArgs& a) {
  return a.max_seq_len > 0 ? a.max_seq_len
                           : static_cast<int64_t>(a.max_blocks_per_seq) * a.kv.geom.block_size;
}

// The parameters every tensor-core decode kernel (v4's family, v6) takes from the call
// (mma::CallParams, mma_tile_copy.cuh): Q / O / lse, the pools and their geometry, the softmax
// and output scales (a pool scale folded in), the table, the lengths and the head counts.
template <class P>
void set_call_params(P& p, const DecodeArgs& a) {
  const PageGeometry& g = a.kv.geom;
  p.q = a.q;
  p.o = a.o;
  p.lse = a.lse;
  p.q_bf16 = a.q_dtype == DType::kBF16;
  p.pools.k = static_cast<const uint8_t*>(a.kv.k);
  p.pools.v = static_cast<const uint8_t*>(a.kv.v);
  p.pools.k_scales = static_cast<const uint8_t*>(a.kv.k_scales);
  p.pools.v_scales = static_cast<const uint8_t*>(a.kv.v_scales);
  p.pools.geom = g;
  const bool pool = kv_format_has_pool_scale(g.format);  // kPool and NVFP4's tensor scale
  p.qk_scale = a.sm_scale * (pool ? a.kv.k_scale : 1.0f);
  p.out_scale = pool ? a.kv.v_scale : 1.0f;
  p.block_table = a.block_table;
  p.seq_lens = a.seq_lens;
  p.num_seqs = a.num_seqs;
  p.num_qo_heads = a.num_qo_heads;
  p.group_size = a.group_size();
  p.max_blocks_per_seq = a.max_blocks_per_seq;
  p.seq_len_bound = static_cast<int>(seq_len_bound64(a));
}

}  // namespace kvlab::gpu::detail
