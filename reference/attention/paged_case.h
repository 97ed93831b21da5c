// paged_case.h: seeded random paged-attention test cases, built on the host.
//
// One PagedCase is everything a decode test needs, as raw host buffers a GPU test can
// cudaMemcpy verbatim (q, the K/V pools, their scales, block table, seq_lens) plus a
// DecodeArgs pointing at the host copies. The same builder serves the CPU tests, the GPU
// tests and the driver (`kvlab validate` / `sweep`), so all of them see the same cases.
//
// How a case is built (spec -> case):
//   1. Data. Q [num_seqs, num_qo_heads, head_dim] = q_scale * (q_mean + N(0,1)); raw K/V
//      [tokens, num_kv_heads, head_dim] = k_mean + N(0,1) and N(0,1); every value rounded
//      (RNE) to q_dtype (the activation dtype) BEFORE anything else sees it. Values come from
//      a counter-based generator (splitmix64 of seed, tensor, index), so a case is identical
//      whatever the thread count and the order it is built in.
//   2. Pages. num_blocks = pages needed + extra_blocks (over-provisioned); pages are handed
//      out in a seeded random permutation (shuffle_pages), so a sequence's pages are
//      scattered and interleaved with unused ones. The table has max pages + extra_table_columns
//      columns; entries no sequence reads hold kTableSentinel (out of range if ever read).
//   3. Poison. Before any token is written, every pool element is NaN in its format (bf16/fp16
//      0x7FFF, FP8 0x7F) and every scale is NaN (per-token FP32 NaN, NVFP4 E4M3 0x7F, MXFP4
//      UE8M0 0xFF). FP4 elements cannot hold NaN (they are 0x77 = +6,+6 there), so their slots
//      are poisoned through the block scales. Token writes then overwrite the used slots only:
//      a kernel that reads an unused slot (past seq_len in the last page, or an unused page)
//      gets NaN in its output.
//   4. Fill. Pool-scaled formats get k_scale/v_scale from the amax of the data (E4M3:
//      amax/448, E5M2: amax/57344, NVFP4 tensor scale: amax/(6*448)) unless the spec fixes
//      them. Tokens are written through kvlab::ref::append_kv (reference/quant/append.h, the
//      rule the GPU append kernels reproduce byte for byte), a page-aligned chunk at a time.
//   5. Original. With keep_original, the activation-dtype K/V values (before caching) are kept
//      in float64, token-major per sequence, for the loose vs-original comparison.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/attention/args.h"
#include "reference/core/dtype.h"
#include "reference/layout/kv_layout.h"

namespace kvlab::ref {

// Table entries that no sequence reads (far out of range: a read faults).
constexpr int32_t kTableSentinel = 0x7FFFFFFF;

struct PagedCaseSpec {
  std::vector<int32_t> seq_lens{1, 17, 100};  // one entry per sequence; 0 allowed
  int32_t num_qo_heads = 8;
  int32_t num_kv_heads = 2;  // GQA group = num_qo_heads / num_kv_heads
  int32_t head_dim = 128;
  int32_t block_size = 16;
  KvLayout layout = KvLayout::kNHD;
  KvFormat format = KvFormat::kBF16;
  DType q_dtype = DType::kBF16;  // bf16 or f16: Q/O and the raw K/V before caching
  float sm_scale = 0.0f;         // 0: 1/sqrt(head_dim)
  uint64_t seed = 20240229;
  int32_t extra_blocks = 3;         // pool pages beyond those needed (>= 0)
  int32_t extra_table_columns = 2;  // table columns beyond the longest sequence's (>= 0)
  bool shuffle_pages = true;
  bool poison_unused = true;  // NaN into every unused slot and scale (else zeros)
  bool keep_original = true;  // float64 copy of the activation-dtype K/V
  // Data shape: Q = q_scale * (q_mean + N(0,1)), K = k_mean + N(0,1), V = N(0,1). A large
  // q_scale with q_mean = -1, k_mean = 1 gives extremely negative logits (~ -q_scale *
  // sqrt(head_dim)) with a wide spread.
  double q_scale = 1.0, q_mean = 0.0, k_mean = 0.0;
  // Pool scales for fp8_e4m3 / fp8_e5m2 / nvfp4 (real = stored * scale); 0: from the amax.
  float k_scale = 0.0f, v_scale = 0.0f;
};

struct PagedCase {
  PagedCaseSpec spec;
  PageGeometry geom;      // layout, format, num_blocks (over-provisioned), heads, dims
  float sm_scale = 0.0f;  // resolved (spec value or 1/sqrt(head_dim))
  float k_scale = 1.0f, v_scale = 1.0f;     // pool scales (1 for formats without one)
  std::vector<uint16_t> q;                  // [num_seqs, num_qo_heads, head_dim] bits of q_dtype
  std::vector<uint8_t> k_pool, v_pool;      // geom.bytes() each
  std::vector<uint8_t> k_scales, v_scales;  // geom.scale_bytes() each (empty if none)
  std::vector<int32_t> block_table;         // [num_seqs, max_blocks_per_seq]
  std::vector<int32_t> seq_lens;            // [num_seqs]
  int32_t max_blocks_per_seq = 0;
  int32_t max_seq_len = 0;            // the longest sequence (DecodeArgs::max_seq_len)
  std::vector<int32_t> unused_pages;  // pool pages that no sequence uses
  // Original data (keep_original): [token_offset[s] + t, num_kv_heads, head_dim], float64.
  std::vector<int64_t> token_offset;  // [num_seqs + 1]
  std::vector<double> k_original, v_original;

  int32_t num_seqs() const { return static_cast<int32_t>(seq_lens.size()); }
  int64_t o_elements() const {
    return static_cast<int64_t>(num_seqs()) * spec.num_qo_heads * spec.head_dim;
  }
  int64_t lse_elements() const { return static_cast<int64_t>(num_seqs()) * spec.num_qo_heads; }
  // The cache view and decode arguments over THIS case's host buffers. o: o_elements() of
  // q_dtype; lse: lse_elements() floats or nullptr.
  KvCacheView kv_view();
  DecodeArgs decode_args(void* o, float* lse);
  // One line for logs and failure messages: shape, layout, format, lengths, seed.
  std::string describe() const;
};

// Builds the case (every KvFormat x KvLayout). Throws InvalidArgument for a bad spec
// (negative lengths or extras, q_dtype f32, a geometry validate() rejects, Q overflowing
// q_dtype, non-finite data parameters).
PagedCase make_paged_case(const PagedCaseSpec& spec);

// Reference outputs of a case, as floats (o decoded from q_dtype; lse natural log).
struct DecodeOutputs {
  std::vector<float> o;    // [num_seqs, num_qo_heads, head_dim]
  std::vector<float> lse;  // [num_seqs, num_qo_heads]
};
// ref::decode_attention over the cache as stored (the dequantized values): the tight reference.
DecodeOutputs reference_decode(PagedCase& c);
// The same attention over the ORIGINAL activation-dtype data (needs keep_original), output
// rounded once to q_dtype: the loose vs-original reference of quantized formats.
DecodeOutputs reference_decode_original(const PagedCase& c);

// Decodes n elements of a bf16/f16/f32 buffer to float.
std::vector<float> to_float(const void* data, DType dtype, size_t n);

// Awkward sequence lengths for block_size, all <= max_len: 0, 1, 2, block_size - 1,
// block_size, block_size + 1, 2 * block_size + 1, primes (7, 13, 31, 97, 257, 1031, 2053),
// and a few thousand (3001), deduplicated, ascending.
std::vector<int32_t> awkward_seq_lens(int32_t block_size, int32_t max_len);

}  // namespace kvlab::ref
