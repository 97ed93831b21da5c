// prefill_case.h: seeded paged-prefill test cases (the PagedPrefillArgs twin of paged_case.h).
//
// A case is a paged cache built by make_paged_case (permuted pages in an over-provisioned
// pool, table columns past the end holding kTableSentinel, NaN in every unused slot) for the
// sequences' total lengths, plus the chunk's query rows: sequence s computes q_lens[s]
// queries at its last q_lens[s] positions, so its cached prefix is seq_lens[s] - q_lens[s]
// tokens. Q [sum(q_lens), num_qo_heads, head_dim] = q_scale * N(0, 1), rounded (RNE) to
// q_dtype before anything else sees it. The same builder serves the CPU tests, the GPU tests
// and the driver's prefill_attention kind.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/attention/args.h"
#include "reference/attention/paged_case.h"

namespace kvlab::ref {

struct PagedPrefillCaseSpec {
  PagedCaseSpec cache;          // cache.seq_lens: tokens per sequence after the chunk
  std::vector<int32_t> q_lens;  // chunk sizes, one per sequence, 0 <= q_len <= seq_len
  double q_scale = 1.0;
};

struct PagedPrefillCase {
  PagedCase cache;
  std::vector<int32_t> q_lens;
  std::vector<int32_t> q_start;  // [num_seqs + 1]
  std::vector<uint16_t> q;       // [q_start.back(), num_qo_heads, head_dim], bits of q_dtype
  int32_t max_q_len = 0;

  int32_t num_seqs() const { return cache.num_seqs(); }
  int64_t num_q_tokens() const { return q_start.empty() ? 0 : q_start.back(); }
  int64_t o_elements() const {
    return num_q_tokens() * cache.spec.num_qo_heads * cache.spec.head_dim;
  }
  int64_t lse_elements() const { return num_q_tokens() * cache.spec.num_qo_heads; }
  // Arguments over THIS case's host buffers (o: o_elements() of q_dtype; lse nullable).
  PagedPrefillArgs args(void* o, float* lse);
  std::string describe() const;
};

// InvalidArgument for a bad spec: a q_len count that differs from the sequence count, a
// q_len outside [0, seq_len], a non-finite q_scale, or anything make_paged_case rejects.
PagedPrefillCase make_paged_prefill_case(const PagedPrefillCaseSpec& spec);

}  // namespace kvlab::ref
