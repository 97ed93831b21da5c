// config.h: serving-engine configuration and the step-time interface.
//
// The engine is a deterministic discrete-event simulation of continuous batching (the
// vLLM v1 scheduler's structure): every step schedules the running requests first (one
// token each while decoding, prompt chunks while prefilling) under a token budget, preempts
// the lowest-priority running request when a block cannot be had, then admits swapped and
// waiting requests while the free-block watermark allows. Step durations come from a
// StepTimeModel (virtual clock) or are given by the caller (wall clock of a real run).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "sim/cost/roofline.h"
#include "sim/model/model_stack.h"

namespace kvlab::sim {

enum class PreemptionMode : int32_t {
  kRecompute = 0,  // drop the request's blocks; it is recomputed (prompt + generated) later
  kSwap = 1,       // copy its blocks to host swap space; swapped back in before waiting ones
};
enum class ReservePolicy : int32_t {
  kOnDemand = 0,      // blocks allocated as tokens are computed (vLLM)
  kFullSequence = 1,  // all blocks for prompt + output reserved at admission (no preemption;
                      // TensorRT-LLM's "guaranteed no evict"); output length = max_tokens
};
std::string to_string(PreemptionMode m);
std::string to_string(ReservePolicy p);
PreemptionMode parse_preemption_mode(const std::string& s);  // "recompute" | "swap"
ReservePolicy parse_reserve_policy(const std::string& s);    // "on_demand" | "full_sequence"

struct EngineConfig {
  int64_t num_blocks = 0;                 // GPU KV blocks (>= 1), e.g. from plan_capacity()
  int32_t block_size = 16;                // tokens per block (>= 1)
  int32_t max_num_seqs = 256;             // running requests at most (>= 1)
  int64_t max_num_batched_tokens = 8192;  // token budget per step (>= 1)
  bool chunked_prefill = true;            // split prompts across steps under the budget
  double watermark = 0.01;                // fraction of blocks an admission must leave free [0, 1)
  PreemptionMode preemption = PreemptionMode::kRecompute;
  int64_t swap_blocks = 0;  // host swap space, blocks (kSwap; full -> recompute)
  ReservePolicy reserve = ReservePolicy::kOnDemand;
  bool prefix_caching = false;    // share full blocks by content hash (ref-counted)
  BlockBytes block_bytes;         // bytes per block for the ledger (may be all zero)
  int64_t per_request_bytes = 0;  // unpaged per-request state (sliding-window rings)
  int64_t max_steps = 0;          // 0 = run to completion; else stop (summary.truncated)
  int32_t trace_every = 1;        // record trace/ledger rows every k steps (0 = none)
  bool audit_every_step = false;  // O(num_blocks) ledger recount each step (tests)

  int64_t watermark_blocks() const;  // floor(watermark * num_blocks)
  void validate() const;             // InvalidArgument naming the field
};

// Step duration for a batch shape. Implementations must be deterministic.
class StepTimeModel {
 public:
  virtual ~StepTimeModel() = default;
  virtual StepCost step_cost(const StepShape& s) const = 0;
};

// t = base_s + per_token_s * tokens + per_context_token_s * attended keys + swap_bytes /
// swap_bytes_per_s: hand-checkable, for tests and quick studies.
class LinearStepTime : public StepTimeModel {
 public:
  LinearStepTime(double base_s, double per_token_s, double per_context_token_s,
                 double swap_bytes_per_s = 0);
  StepCost step_cost(const StepShape& s) const override;

 private:
  double base_s_, per_token_s_, per_context_token_s_, swap_bytes_per_s_;
};

// The roofline cost model (roofline.h) as a step-time model.
class RooflineStepTime : public StepTimeModel {
 public:
  explicit RooflineStepTime(CostModel model) : model_(std::move(model)) {}
  StepCost step_cost(const StepShape& s) const override { return model_.step(s); }
  const CostModel& model() const { return model_; }

 private:
  CostModel model_;
};

}  // namespace kvlab::sim
