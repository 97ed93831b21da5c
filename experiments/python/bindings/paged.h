// paged.h: the paged-cache argument structs (reference/attention/args.h) built from arrays,
// once for kvlab.ref (host arrays) and kvlab.ops (CUDA arrays): the mirror contract of the
// C++ side, kept in Python.
//
// Pool shapes, in storage elements (reference/layout/kv_layout.h; D = head_dim, B =
// block_size, H = num_kv_heads, N = num_blocks; FP4 pools hold two codes per byte, so
// their innermost storage size is half the element count):
//   nhd      K, V  [N, B, H, D]            FP4: [N, B, H, D/2]
//   hnd      K, V  [N, H, B, D]            FP4: [N, H, B, D/2]
//   split_x  K     [N, H, D/x, B, x]       x = elements per 16 bytes (8 for 16-bit, 16 for
//                                          FP8, 32 for FP4; FP4 storage: [N, H, D/32, B, 16])
//            V     [N, H, D, B]            FP4: [N, H, D, B/2]
// Scales: fp8_e4m3_pt float32 [N, H, B]; nvfp4 (E4M3 codes) / mxfp4 (UE8M0 codes) uint8
// [N, H, B, D/g]. The geometry is read off the K pool's shape; V and the scales must match.
#pragma once

#include <string>

#include "experiments/python/bindings/arrays.h"
#include "reference/attention/args.h"

namespace kvlab::py {

struct CacheArrays {
  Array k_cache;
  Array v_cache;
  OptArray k_scales;
  OptArray v_scales;
  std::string layout;     // "nhd", "hnd", "split_x"
  std::string kv_format;  // layout_names.h spelling ("bf16", "fp8_e4m3", ...)
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// Checks the pools and scales (dtype per format, shapes per layout, placement) and returns
// the view.
KvCacheView cache_view(Checker& c, const CacheArrays& a);

// q, out [S, Hq, D]; lse [S, Hq] float32 (optional); block_table int32 [S, M]; seq_lens
// int32 [S]. sm_scale <= 0 means 1/sqrt(head_dim).
DecodeArgs decode_args(Checker& c, const Array& q, const Array& out, const OptArray& lse,
                       const CacheArrays& cache, const Array& block_table, const Array& seq_lens,
                       float sm_scale, int max_seq_len, const std::string& q_dtype);

// Paged (chunked) prefill: q, out [T, Hq, D] (T = q_start[S]); lse [T, Hq] float32
// (optional); q_start int32 [S + 1]; seq_lens int32 [S] (each sequence's tokens in the cache,
// its chunk included); block_table int32 [S, M]. max_q_len / max_seq_len: host-known bounds
// (0: the table's). sm_scale <= 0 means 1/sqrt(head_dim).
PagedPrefillArgs prefill_args(Checker& c, const Array& q, const Array& out, const OptArray& lse,
                              const CacheArrays& cache, const Array& block_table,
                              const Array& seq_lens, const Array& q_start, float sm_scale,
                              int max_q_len, int max_seq_len, const std::string& q_dtype);

// k, v [T, H, D] (float32, bfloat16 or float16; in_dtype names raw 16-bit codes);
// slot_mapping int64 [T].
AppendArgs append_args(Checker& c, const Array& k, const Array& v, const Array& slot_mapping,
                       const CacheArrays& cache, const std::string& in_dtype);

}  // namespace kvlab::py
