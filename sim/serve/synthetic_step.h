// synthetic_step.h: a made-up engine step for calibration and warm-up (CUDA-free).
//
// `decode_seqs` sequences with `decode_context` cached tokens each compute one token, and
// `prefill_seqs` sequences each compute a chunk of `prefill_tokens` tokens after
// `prefill_context` cached ones (sampling at the chunk's end when prefill_samples). Blocks
// come from a sim::BlockAllocator over the pool (the serving engine's allocator semantics),
// token ids from a seeded generator. The StepShape is exactly the one sim::Engine records for
// a step of these sequences (engine.cpp add_to_batch), so a measurement of this batch is a
// record the serving step model can be fitted to.
#pragma once

#include <cstdint>

#include "sim/serve/step_batch.h"

namespace kvlab::sim {

struct SyntheticStep {
  int32_t decode_seqs = 0;
  int32_t decode_context = 0;  // cached tokens before the decoded one
  int32_t prefill_seqs = 0;
  int32_t prefill_tokens = 0;   // chunk size (>= 2: a one-token chunk is a decode row)
  int32_t prefill_context = 0;  // cached tokens before the chunk
  bool prefill_samples = true;  // the chunk ends its prompt (samples a token)
  uint64_t seed = 1;
  void validate() const;  // InvalidArgument naming the field
};

// Blocks the step's sequences hold (its pool must have at least this many).
int64_t synthetic_step_blocks(const SyntheticStep& s, int32_t block_size);

// InvalidArgument when the pool or the table columns are too small for the step.
StepBatch synthetic_step_batch(const SyntheticStep& s, int32_t block_size, int64_t pool_blocks,
                               int32_t max_blocks_per_seq, int32_t vocab);

}  // namespace kvlab::sim
