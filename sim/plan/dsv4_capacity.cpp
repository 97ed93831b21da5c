// dsv4_capacity.cpp: capacity of DSV4-style stacks (see dsv4_capacity.h).
#include "sim/plan/dsv4_capacity.h"

#include <limits>

#include "reference/core/error.h"

namespace kvlab::sim {

namespace {
// compute_block_budget succeeds and its pool holds n requests of `context` tokens.
bool fits(const Dsv4CacheSchema& s, int64_t budget, int64_t n, int64_t context,
          Dsv4BlockBudget* out) {
  if (n > std::numeric_limits<int32_t>::max()) return false;
  try {
    const Dsv4BlockBudget b = compute_block_budget(s, budget, static_cast<int32_t>(n), context);
    if (b.num_blocks < n * s.blocks_for_tokens(context)) return false;
    if (out) *out = b;
    return true;
  } catch (const InvalidArgument&) {
    return false;  // the state of n slots plus one request does not fit
  }
}
}  // namespace

Dsv4Capacity plan_dsv4_capacity(const Dsv4CacheSchema& schema, int64_t kv_budget_bytes,
                                int64_t context_tokens) {
  KVLAB_REQUIRE(context_tokens >= 1,
                "dsv4 capacity: context_tokens " << context_tokens << " must be >= 1");
  KVLAB_REQUIRE(kv_budget_bytes >= 0,
                "dsv4 capacity: KV budget " << kv_budget_bytes << " bytes is negative");
  Dsv4Capacity c;
  c.context_tokens = context_tokens;
  c.kv_budget_bytes = kv_budget_bytes;
  c.blocks_per_seq = schema.blocks_for_tokens(context_tokens);
  c.footprint = dsv4_footprint(schema);
  // One request must fit: compute_block_budget's own error says what is missing.
  c.budget = compute_block_budget(schema, kv_budget_bytes, 1, context_tokens);
  if (!fits(schema, kv_budget_bytes, 1, context_tokens, nullptr)) {
    c.max_seqs = 0;
  } else {
    // fits() is monotone in n: exponential then binary search for the largest n.
    int64_t lo = 1, hi = 2;
    while (fits(schema, kv_budget_bytes, hi, context_tokens, nullptr)) lo = hi, hi *= 2;
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (fits(schema, kv_budget_bytes, mid, context_tokens, nullptr) ? lo : hi) = mid;
    }
    c.max_seqs = lo;
    fits(schema, kv_budget_bytes, lo, context_tokens, &c.budget);
  }
  c.bytes_per_token = static_cast<double>(c.blocks_per_seq * schema.bytes_per_block() +
                                          schema.state_bytes_per_slot()) /
                      context_tokens;
  return c;
}

KvFootprint dsv4_footprint(const Dsv4CacheSchema& schema) {
  KvFootprint f;
  f.block_size = schema.block_tokens();
  f.format = KvFormat::kFP8E4M3;  // the NoPE part; RoPE is BF16, keys FP4 (see the split)
  for (const Dsv4LayerSchema& l : schema.layers) {
    f.per_request_bytes += l.state_bytes_per_slot();
    if (l.has_classical) {
      const int64_t data = static_cast<int64_t>(l.nope_dim) + 2 * static_cast<int64_t>(l.rope_dim);
      KVLAB_REQUIRE(l.entry_bytes >= data, "dsv4 footprint: layer "
                                               << l.layer << " entry of " << l.entry_bytes
                                               << " bytes is below its " << data << " data bytes");
      f.block.compressed_kv += static_cast<int64_t>(l.entries_per_block) * data;
      f.block.scales += static_cast<int64_t>(l.entries_per_block) * (l.entry_bytes - data);
    }
    if (l.has_indexer) {
      const int64_t data = l.indexer_dim / 2;  // FP4: two elements per byte
      f.block.compressed_kv += static_cast<int64_t>(l.indexer_entries_per_block) * data;
      f.block.scales +=
          static_cast<int64_t>(l.indexer_entries_per_block) * (l.indexer_entry_bytes - data);
    }
  }
  KVLAB_REQUIRE(f.block.total() == schema.bytes_per_block(),
                "dsv4 footprint: split " << f.block.total() << " != schema bytes per block "
                                         << schema.bytes_per_block());
  return f;
}

ModelStack dsv4_bf16_dense_baseline(const Dsv4ModelStack& stack) {
  ModelStack m;
  m.name = stack.name + "-bf16-dense";
  m.num_layers = stack.num_layers();
  m.hidden = 1;
  m.num_qo_heads = 1;
  m.num_kv_heads = 1;
  m.head_dim = stack.head_dim();
  m.intermediate = 1;
  m.vocab = 1;
  m.kv_pools = 1;
  m.validate();
  return m;
}

}  // namespace kvlab::sim
