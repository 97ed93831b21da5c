// step_batch.h: one scheduled engine step as the inputs of a GPU step (CUDA-free).
//
// The engine (sim/engine) decides a step: which requests run, how many tokens each computes
// from which position, and their blocks. build_step_batch() turns that decision into the
// flat arrays a model executor consumes, with the token rows in execution order:
//
//   rows [0, num_decode)          one row per decode sequence (a request computing exactly one
//                                 token: the engine's num_tokens == 1, its StepShape "decode")
//   rows [num_decode, num_rows)   the prefill chunks, sequence after sequence (>= 2 tokens)
//
// so that decode attention reads the first rows and prefill attention the rest, while every
// other layer of the model treats the rows alike. Sequences keep the engine's batch order
// within each group. Per sequence: its first row (q_start), the tokens cached after the step
// (seq_lens) and its block-table row; per row: the input token, its position and its cache
// slot (the engine's slot mapping: block * block_size + offset, from the same allocator).
// A sequence whose last computed token is the last known one samples a token: its last row
// is listed in sample_rows.
//
// Token ids: a prompt token is a function of its content identity (shared-prefix tokens of a
// prefix group are identical across the group's requests, so prefix-cache hits reuse KV that
// the same tokens produced); a generated token is the one the executor sampled for that
// request at that position (the driver records them), so recomputing a preempted request
// replays its own history.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/cost/roofline.h"
#include "sim/engine/engine.h"
#include "sim/workload/workload.h"

namespace kvlab::sim {

struct StepBatch {
  int32_t num_decode = 0;            // decode sequences = rows [0, num_decode)
  std::vector<int32_t> seq_request;  // [num_seqs] engine request index, execution order
  std::vector<int32_t> q_start;      // [num_seqs + 1] first row of each sequence
  std::vector<int32_t> seq_lens;     // [num_seqs] tokens cached after the step
  int32_t max_blocks_per_seq = 0;    // columns of block_table
  std::vector<int32_t> block_table;  // [num_seqs, max_blocks_per_seq], -1 past the last page
  std::vector<int32_t> tokens;       // [num_rows] input token ids
  std::vector<int32_t> positions;    // [num_rows]
  std::vector<int64_t> slots;        // [num_rows] cache slot of each row's K/V
  std::vector<int32_t> sample_rows;  // rows whose logits are sampled, ascending
  std::vector<int32_t> sample_seqs;  // the sequence (execution-order index) of each
  int32_t max_q_len = 0;             // longest prefill chunk (0 without prefill)
  int32_t max_seq_len = 0;           // longest seq_lens entry
  StepShape shape;                   // the engine's shape of the same step

  int32_t num_seqs() const { return static_cast<int32_t>(seq_request.size()); }
  int32_t num_prefill() const { return num_seqs() - num_decode; }
  int32_t num_rows() const { return static_cast<int32_t>(tokens.size()); }
  bool decode_only() const { return num_decode == num_seqs(); }
};

// Token ids of the workload's requests (see the file header).
class TokenHistory {
 public:
  TokenHistory(const std::vector<Request>& requests, int32_t vocab);
  // Token at `position` of request index `r` (position < prompt + generated so far).
  int32_t token(int32_t r, int64_t position) const;
  int64_t known(int32_t r) const;  // prompt + generated
  void append_generated(int32_t r, int32_t token);
  const std::vector<int32_t>& generated(int32_t r) const { return gen_[static_cast<size_t>(r)]; }
  int32_t vocab() const { return vocab_; }

 private:
  const std::vector<Request>* reqs_;
  int32_t vocab_;
  std::vector<std::vector<int32_t>> gen_;
};

// The scheduled step of `engine` (between schedule() and complete()) as a StepBatch.
// InvalidArgument when a sequence needs more than max_blocks_per_seq blocks, or when the
// history disagrees with the engine (a sequence computing past its known tokens).
void build_step_batch(const Engine& engine, const TokenHistory& history, int32_t max_blocks_per_seq,
                      StepBatch* out);

}  // namespace kvlab::sim
