// step_batch.cpp: see step_batch.h.
#include "sim/serve/step_batch.h"

#include <algorithm>

#include "reference/core/error.h"
#include "reference/core/mix64.h"

namespace kvlab::sim {

TokenHistory::TokenHistory(const std::vector<Request>& requests, int32_t vocab)
    : reqs_(&requests), vocab_(vocab), gen_(requests.size()) {
  KVLAB_REQUIRE(vocab >= 1, "TokenHistory: vocab " << vocab << " must be >= 1");
}

int64_t TokenHistory::known(int32_t r) const {
  return static_cast<int64_t>((*reqs_)[static_cast<size_t>(r)].prompt_tokens) +
         static_cast<int64_t>(gen_[static_cast<size_t>(r)].size());
}

int32_t TokenHistory::token(int32_t r, int64_t position) const {
  const Request& q = (*reqs_)[static_cast<size_t>(r)];
  KVLAB_REQUIRE(position >= 0 && position < known(r),
                "TokenHistory: request " << q.id << " has no token at position " << position << " ("
                                         << known(r) << " known)");
  if (position >= q.prompt_tokens)
    return gen_[static_cast<size_t>(r)][static_cast<size_t>(position - q.prompt_tokens)];
  // Shared-prefix content is identified by its group, the rest by the request id (the same
  // identity the engine's prefix-cache hashes use).
  const bool shared = position < q.shared_prefix_tokens;
  const uint64_t owner =
      shared ? (static_cast<uint64_t>(q.prefix_group) << 1) | 1u : static_cast<uint64_t>(q.id) << 1;
  return static_cast<int32_t>(mix64(owner ^ mix64(static_cast<uint64_t>(position))) %
                              static_cast<uint64_t>(vocab_));
}

void TokenHistory::append_generated(int32_t r, int32_t token) {
  KVLAB_REQUIRE(token >= 0 && token < vocab_,
                "TokenHistory: sampled token " << token << " outside [0, vocab " << vocab_ << ")");
  gen_[static_cast<size_t>(r)].push_back(token);
}

void build_step_batch(const Engine& engine, const TokenHistory& history, int32_t max_blocks_per_seq,
                      StepBatch* out) {
  KVLAB_REQUIRE(out != nullptr, "build_step_batch: null output");
  const std::vector<ScheduledSeq>& batch = engine.batch();
  std::vector<int32_t> table;
  std::vector<int32_t> lens;
  std::vector<int64_t> slots;
  engine.batch_block_table(max_blocks_per_seq, &table, &lens);
  engine.batch_slot_mapping(&slots);
  // Execution order: decode sequences (one token), then prefill chunks; batch order inside.
  std::vector<size_t> order;
  order.reserve(batch.size());
  for (size_t i = 0; i < batch.size(); ++i)
    if (batch[i].num_tokens == 1) order.push_back(i);
  const size_t nd = order.size();
  for (size_t i = 0; i < batch.size(); ++i)
    if (batch[i].num_tokens != 1) order.push_back(i);
  // Slot-mapping offset of each batch entry (the engine lists slots in batch order).
  std::vector<int64_t> slot_off(batch.size() + 1, 0);
  for (size_t i = 0; i < batch.size(); ++i) slot_off[i + 1] = slot_off[i] + batch[i].num_tokens;

  StepBatch& b = *out;
  b = StepBatch{};
  b.num_decode = static_cast<int32_t>(nd);
  b.max_blocks_per_seq = max_blocks_per_seq;
  b.shape = engine.batch_shape();
  b.q_start.push_back(0);
  b.block_table.reserve(batch.size() * static_cast<size_t>(max_blocks_per_seq));
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    const ScheduledSeq& s = batch[i];
    const int64_t known = history.known(s.request);
    KVLAB_REQUIRE(s.start + s.num_tokens <= known, "build_step_batch: request index "
                                                       << s.request << " computes tokens "
                                                       << s.start << ".." << s.start + s.num_tokens
                                                       << " but only " << known << " are known");
    b.seq_request.push_back(s.request);
    b.seq_lens.push_back(lens[i]);
    b.block_table.insert(b.block_table.end(),
                         table.begin() + static_cast<int64_t>(i) * max_blocks_per_seq,
                         table.begin() + static_cast<int64_t>(i + 1) * max_blocks_per_seq);
    for (int32_t t = 0; t < s.num_tokens; ++t) {
      b.tokens.push_back(history.token(s.request, s.start + t));
      b.positions.push_back(static_cast<int32_t>(s.start + t));
      b.slots.push_back(slots[static_cast<size_t>(slot_off[i] + t)]);
    }
    b.q_start.push_back(static_cast<int32_t>(b.tokens.size()));
    if (s.start + s.num_tokens == known) {
      b.sample_rows.push_back(static_cast<int32_t>(b.tokens.size()) - 1);
      b.sample_seqs.push_back(static_cast<int32_t>(k));
    }
    if (k >= nd) b.max_q_len = std::max(b.max_q_len, s.num_tokens);
    b.max_seq_len = std::max(b.max_seq_len, lens[i]);
  }
  KVLAB_REQUIRE(static_cast<int64_t>(b.sample_rows.size()) == b.shape.num_sampled,
                "build_step_batch: " << b.sample_rows.size()
                                     << " sequences sample by the token history, the engine says "
                                     << b.shape.num_sampled);
}

}  // namespace kvlab::sim
