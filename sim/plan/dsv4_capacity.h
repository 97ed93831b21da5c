// dsv4_capacity.h: the capacity planner for DeepSeek-V4-style stacks, on the dsv4 engineer's
// schema (sim/dsv4/schema.h) so that the plan and the real pools use the same bytes.
//
// A request of context L holds schema.blocks_for_tokens(L) blocks (one block id spans all
// compressed layers' pools; a block covers block_tokens original tokens) plus one state slot
// (SWA rings and compressor streams of every layer). max_seqs is the largest n for which
// compute_block_budget(schema, budget, n, L) succeeds and its pool holds n such requests:
// state, block table and arena alignment are sized exactly as the real cache sizes them.
#pragma once

#include <cstdint>

#include "sim/dsv4/schema.h"
#include "sim/model/model_stack.h"

namespace kvlab::sim {

struct Dsv4Capacity {
  int64_t context_tokens = 0;
  int64_t kv_budget_bytes = 0;
  int64_t blocks_per_seq = 0;  // schema.blocks_for_tokens(context)
  int64_t max_seqs = 0;        // concurrent requests of `context` tokens
  Dsv4BlockBudget budget;      // compute_block_budget at max_seqs (max_requests >= 1)
  KvFootprint footprint;       // per block split (compressed data / scales), per-request state
  double bytes_per_token = 0;  // (blocks_per_seq * block + state slot) / context
  int64_t max_tokens() const { return budget.num_blocks * footprint.block_size; }
};

// InvalidArgument when the budget cannot hold one request of `context_tokens`.
Dsv4Capacity plan_dsv4_capacity(const Dsv4CacheSchema& schema, int64_t kv_budget_bytes,
                                int64_t context_tokens);

// Bytes of one block split as the ledger reports them: compressed-entry data (FP8 NoPE +
// BF16 RoPE) and indexer-key data under compressed_kv, the entries' and keys' scales under
// scales; block_size = block_tokens; per_request_bytes = the state slot.
KvFootprint dsv4_footprint(const Dsv4CacheSchema& schema);

// The dense BF16 baseline of a V4-style stack as a plain stack: every layer stores every
// token's head_dim latent once (K = V, one pool) in BF16, paged. Only the cache shape is
// meaningful (hidden, intermediate and vocab are placeholders of 1: not for the cost model).
ModelStack dsv4_bf16_dense_baseline(const Dsv4ModelStack& stack);

}  // namespace kvlab::sim
