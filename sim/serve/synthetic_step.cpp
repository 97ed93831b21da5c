// synthetic_step.cpp: see synthetic_step.h.
#include "sim/serve/synthetic_step.h"

#include <algorithm>

#include "reference/core/error.h"
#include "sim/alloc/block_allocator.h"
#include "sim/alloc/block_table.h"
#include "sim/workload/random.h"

namespace kvlab::sim {

void SyntheticStep::validate() const {
  KVLAB_REQUIRE(
      decode_seqs >= 0 && prefill_seqs >= 0 && decode_context >= 0 && prefill_context >= 0,
      "synthetic step: negative count or context (decode " << decode_seqs << " x " << decode_context
                                                           << ", prefill " << prefill_seqs << " x "
                                                           << prefill_context << ")");
  KVLAB_REQUIRE(prefill_seqs == 0 || prefill_tokens >= 2,
                "synthetic step: prefill_tokens " << prefill_tokens
                                                  << " must be >= 2 (one token is a decode row)");
  KVLAB_REQUIRE(decode_seqs + prefill_seqs > 0, "synthetic step: no sequence");
}

int64_t synthetic_step_blocks(const SyntheticStep& s, int32_t block_size) {
  s.validate();
  return int64_t{s.decode_seqs} * blocks_for_tokens(int64_t{s.decode_context} + 1, block_size) +
         int64_t{s.prefill_seqs} *
             blocks_for_tokens(int64_t{s.prefill_context} + s.prefill_tokens, block_size);
}

StepBatch synthetic_step_batch(const SyntheticStep& s, int32_t block_size, int64_t pool_blocks,
                               int32_t max_blocks_per_seq, int32_t vocab) {
  s.validate();
  KVLAB_REQUIRE(block_size >= 1 && vocab >= 1,
                "synthetic step: block_size " << block_size << ", vocab " << vocab);
  const int64_t need = synthetic_step_blocks(s, block_size);
  KVLAB_REQUIRE(need <= pool_blocks,
                "synthetic step: needs " << need << " blocks, the pool has " << pool_blocks);
  BlockAllocator alloc(pool_blocks);
  Rng rng(s.seed ^ 0x5717E5CEull);
  StepBatch b;
  b.max_blocks_per_seq = max_blocks_per_seq;
  b.q_start.push_back(0);
  auto add = [&](int32_t cached, int32_t n, bool samples, int32_t index) {
    const int64_t len = int64_t{cached} + n;
    const int64_t blocks = blocks_for_tokens(len, block_size);
    KVLAB_REQUIRE(blocks <= max_blocks_per_seq, "synthetic step: a sequence of "
                                                    << len << " tokens needs " << blocks
                                                    << " blocks, the table has "
                                                    << max_blocks_per_seq << " columns");
    std::vector<int32_t> ids = alloc.acquire_n(blocks);
    ids.resize(static_cast<size_t>(max_blocks_per_seq), -1);
    b.block_table.insert(b.block_table.end(), ids.begin(), ids.end());
    b.seq_request.push_back(index);
    b.seq_lens.push_back(static_cast<int32_t>(len));
    for (int32_t t = 0; t < n; ++t) {
      const int32_t pos = cached + t;
      b.tokens.push_back(static_cast<int32_t>(rng.next_u64() % static_cast<uint64_t>(vocab)));
      b.positions.push_back(pos);
      b.slots.push_back(
          slot_of(ids[static_cast<size_t>(pos / block_size)], pos % block_size, block_size));
    }
    b.q_start.push_back(static_cast<int32_t>(b.tokens.size()));
    if (samples) {
      b.sample_rows.push_back(static_cast<int32_t>(b.tokens.size()) - 1);
      b.sample_seqs.push_back(static_cast<int32_t>(b.seq_request.size()) - 1);
    }
    b.max_seq_len = std::max(b.max_seq_len, static_cast<int32_t>(len));
    // The engine's shape of the same sequence (engine.cpp add_to_batch).
    StepShape& sh = b.shape;
    if (n == 1) {
      ++sh.num_decode_seqs;
      sh.decode_context_tokens += len;
    } else {
      ++sh.num_prefill_seqs;
      sh.prefill_tokens += n;
      sh.prefill_attn_pairs += static_cast<double>(n) * static_cast<double>(cached) +
                               0.5 * static_cast<double>(n) * (n + 1);
      sh.prefill_context_tokens += len;
      b.max_q_len = std::max(b.max_q_len, n);
    }
    if (samples) ++sh.num_sampled;
  };
  for (int32_t i = 0; i < s.decode_seqs; ++i) add(s.decode_context, 1, true, i);
  b.num_decode = s.decode_seqs;
  for (int32_t i = 0; i < s.prefill_seqs; ++i)
    add(s.prefill_context, s.prefill_tokens, s.prefill_samples, s.decode_seqs + i);
  return b;
}

}  // namespace kvlab::sim
