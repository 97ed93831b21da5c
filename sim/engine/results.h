// results.h: what a simulation run produces, as plain structs of vectors (one HDF5 dataset
// per field; the driver writes them in `kvlab simulate`). Units are in the names: _s
// seconds, _slots token slots (capacity = num_blocks * block_size), _blocks KV blocks,
// _tokens tokens, _bytes bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/model/model_stack.h"

namespace kvlab::sim {

// Per-step trace: one row per recorded step (every EngineConfig::trace_every steps).
struct StepTrace {
  std::vector<int64_t> step;                   // step index, 0-based
  std::vector<double> time_s;                  // virtual time at the END of the step
  std::vector<double> duration_s;              // step duration (total of the cost breakdown)
  std::vector<int32_t> num_seqs;               // sequences scheduled in the step
  std::vector<int32_t> num_decode_seqs;        // ... computing one token
  std::vector<int32_t> num_prefill_seqs;       // ... computing a prompt chunk of >= 2 tokens
  std::vector<int64_t> num_tokens;             // tokens computed (decode + prefill)
  std::vector<int64_t> decode_context_tokens;  // keys attended by the decode sequences
  std::vector<int32_t> num_running;            // running requests after the step
  std::vector<int32_t> num_waiting;            // waiting (arrived, not admitted or preempted)
  std::vector<int32_t> num_swapped;            // swapped out to host
  std::vector<int32_t> num_preempted;          // preemptions during this step's scheduling
  std::vector<int32_t> num_finished;           // requests finished by this step
  std::vector<int64_t> swap_out_blocks;        // blocks copied device -> host this step
  std::vector<int64_t> swap_in_blocks;         // blocks copied host -> device this step
  std::vector<double> gemm_s, attention_s, other_s, launch_s, swap_s;  // cost breakdown
  size_t size() const { return step.size(); }
};

// Memory-ledger time series, rows aligned with StepTrace (state at the end of the step).
// token + slack + reserved + cached + free = capacity_slots in every row (asserted).
struct LedgerTrace {
  std::vector<int64_t> token_slots;     // slots holding KV, each physical slot once
  std::vector<int64_t> slack_slots;     // empty slots of used blocks with >= 1 token
  std::vector<int64_t> reserved_slots;  // slots of used blocks with no token yet
  std::vector<int64_t> cached_slots;    // slots of evictable prefix-cache blocks
  std::vector<int64_t> free_slots;      // slots of free blocks
  std::vector<int64_t> logical_tokens;  // sum over running requests of their cached tokens
                                        // (a shared block counts once per sharer)
  std::vector<int32_t> used_blocks, cached_blocks, free_blocks;
  size_t size() const { return token_slots.size(); }
};

enum class RequestStatus : int32_t {
  kFinished = 0,
  kRejected = 1,    // could never run (see Engine: too many blocks or tokens for the config)
  kUnfinished = 2,  // the run stopped at max_steps first
};

// Per-request results, one row per request in workload order.
struct RequestResults {
  std::vector<int64_t> id;
  std::vector<double> arrival_s;
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> output_tokens;
  std::vector<int32_t> status;            // RequestStatus
  std::vector<double> first_scheduled_s;  // NaN if never scheduled
  std::vector<double> first_token_s;  // end of the step that sampled the first token; NaN if none
  std::vector<double> finish_s;       // NaN unless finished
  std::vector<double> ttft_s;         // first_token_s - arrival_s
  std::vector<double> tpot_s;  // (finish_s - first_token_s) / (output_tokens - 1); NaN if 1 token
  std::vector<double> e2e_s;   // finish_s - arrival_s
  std::vector<int32_t> num_preemptions;    // recompute preemptions
  std::vector<int32_t> num_swaps;          // swap-outs
  std::vector<int64_t> prefix_hit_tokens;  // tokens served from the prefix cache (all admissions)
  std::vector<int64_t> discarded_tokens;   // KV tokens dropped by recompute preemptions
  size_t size() const { return id.size(); }
};

// Ledger summary over every step (not only the recorded rows). Means are per step
// (each step weighs 1) and per second (weighted by step duration).
struct LedgerSummary {
  int64_t capacity_blocks = 0;
  int32_t block_size = 0;
  int64_t capacity_slots = 0;
  BlockBytes block_bytes;         // per block: raw KV, compressed KV, scales
  int64_t capacity_bytes = 0;     // capacity_blocks * block_bytes.total()
  int64_t per_request_bytes = 0;  // unpaged state per running request
  double mean_token_slots = 0, mean_slack_slots = 0, mean_reserved_slots = 0, mean_cached_slots = 0,
         mean_free_slots = 0;
  double time_mean_token_slots = 0, time_mean_slack_slots = 0, time_mean_reserved_slots = 0,
         time_mean_cached_slots = 0, time_mean_free_slots = 0;
  int64_t peak_token_slots = 0, peak_used_slots = 0;  // used = token + slack + reserved
  int64_t min_free_slots = 0;
  double mean_slack_per_seq = 0;  // slack slots per running request (PagedAttention: ~(block-1)/2)
  double mean_reserved_per_seq = 0;
  double mean_logical_tokens = 0;
  double mean_state_bytes = 0;  // mean running requests * per_request_bytes
  // Bytes of a number of slots, split as the block is (slots * block bytes / block_size).
  BlockBytes bytes_of_slots(double slots) const;
};

struct SimSummary {
  int64_t num_steps = 0;
  double sim_time_s = 0;   // virtual time at the end
  double busy_time_s = 0;  // sum of step durations
  int64_t num_requests = 0, num_finished = 0, num_rejected = 0, num_unfinished = 0;
  bool truncated = false;                        // stopped at max_steps
  int64_t prompt_tokens = 0, output_tokens = 0;  // of finished requests
  int64_t computed_tokens = 0;                   // tokens the engine computed (incl. recompute)
  double output_tokens_per_s = 0;                // finished output tokens / sim_time_s
  double mean_ttft_s = 0, p50_ttft_s = 0, p90_ttft_s = 0, p99_ttft_s = 0;
  double mean_tpot_s = 0, p50_tpot_s = 0, p90_tpot_s = 0, p99_tpot_s = 0;
  double mean_e2e_s = 0, p99_e2e_s = 0;
  int64_t num_preemptions = 0, num_swaps = 0, num_swap_fallbacks = 0;  // fallback: swap space full
  int64_t swap_out_blocks = 0, swap_in_blocks = 0;
  int64_t prefix_hit_tokens = 0, prefix_query_tokens = 0;  // hits / prompt tokens looked up
  int64_t num_evictions = 0;                               // prefix-cache blocks evicted
  double mean_running = 0;                                 // per step
  int32_t peak_running = 0;
  LedgerSummary ledger;
};

struct SimResult {
  StepTrace steps;
  LedgerTrace ledger;
  RequestResults requests;
  SimSummary summary;
};

// Percentile (linear interpolation between order statistics, p in [0, 100]) of the finite
// values; NaN when there are none.
double percentile(std::vector<double> v, double p);

}  // namespace kvlab::sim
