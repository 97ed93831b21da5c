// engine.h: the serving engine: continuous batching over the block pool, on a virtual clock
// (simulation) or on a caller's clock (a real GPU run hands the scheduled batch's block
// table and slot mapping to its kernels and reports the measured step time).
//
// Token accounting (vLLM's): a request with prompt P has `known` = P + generated tokens and
// `computed` tokens whose KV is cached. A step computes n = min(known - computed, budget
// left) tokens of it (1 while decoding); when computed reaches known the step samples a new
// token (the first one ends the prefill: TTFT). A request with output O finishes after
// computing P + O - 1 tokens, holding ceil((P + O - 1) / block_size) blocks at most.
//
// One step:
//   1. arrivals up to the clock join the waiting queue (FCFS). A request is rejected at
//      arrival (RequestStatus::kRejected, never silently) when ceil((P + O - 1) / block) >
//      num_blocks - watermark_blocks, or with chunked prefill off when P + O - 1 >
//      max_num_batched_tokens (its recompute could never be scheduled).
//   2. running requests in admission order get their tokens; when blocks run out the last
//      running request is preempted (recompute: blocks released, request to the front of
//      the waiting queue; swap: blocks copied to host, request to the swapped queue; swap
//      space full -> recompute), possibly the request itself.
//   3. if nothing was preempted: swapped requests are swapped back in, then waiting ones
//      admitted (prefix-cache hits first), while running < max_num_seqs, budget remains and
//      available blocks minus the new ones stay >= the watermark.
//   4. the step's duration (StepTimeModel or given) advances the clock; computed tokens fill
//      their blocks; full blocks are registered in the prefix cache; finished requests
//      release their blocks tail-first (cached prefix blocks stay cached); the ledger is
//      checked (always) and audited (audit_every_step) and a trace row is recorded.
// Prefix cache keys: block j of a request hashes (parent hash, content of block j), where
// the content is (prefix_group, j) when the block lies inside the shared prefix, else
// (request id, j). At most (known - 1) / block_size blocks hit so that >= 1 token is computed.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "sim/engine/block_pool.h"
#include "sim/engine/config.h"
#include "sim/engine/results.h"
#include "sim/workload/workload.h"

namespace kvlab::sim {

// One scheduled sequence of the current step.
struct ScheduledSeq {
  int32_t request = 0;  // index into the workload
  int64_t start = 0;    // first token position computed this step
  int32_t num_tokens = 0;
};

class Engine {
 public:
  // timer may be null only when every step's duration is given to complete().
  Engine(EngineConfig cfg, std::shared_ptr<const StepTimeModel> timer);

  // Loads a workload (validated) and resets all state to time 0.
  void reset(const std::vector<Request>& requests);
  // Schedules the next step at the current clock; false when the run is over (everything
  // finished or rejected, or max_steps reached).
  bool schedule();
  const std::vector<ScheduledSeq>& batch() const { return batch_; }
  const StepShape& batch_shape() const { return shape_; }
  // Completes the scheduled step: duration_s < 0 takes the StepTimeModel's prediction.
  void complete(double duration_s = -1);
  // reset + schedule/complete until over + results.
  SimResult run(const std::vector<Request>& requests);
  SimResult results() const;  // results so far (finalized after the last step)

  // For real runs: the scheduled batch's int32 block table [batch, max_blocks_per_seq]
  // (padded with -1), int32 seq_lens (tokens cached after this step), and int64 slot mapping
  // of the tokens computed this step (AppendArgs::slot_mapping), in batch order.
  void batch_block_table(int32_t max_blocks_per_seq, std::vector<int32_t>* table,
                         std::vector<int32_t>* seq_lens) const;
  void batch_slot_mapping(std::vector<int64_t>* slots) const;
  const std::vector<int32_t>& request_blocks(int32_t request) const;

  double now() const { return now_; }
  int64_t num_steps() const { return steps_; }
  const BlockPool& pool() const { return *pool_; }
  const EngineConfig& config() const { return cfg_; }
  // Recounts references from every request's block list against the pool and audits the
  // pool; throws kvlab::Error on a mismatch. O(num_blocks + held blocks).
  void audit() const;

 private:
  enum State : int8_t { kPending, kWaiting, kRunning, kSwapped, kDone, kRejectedState };
  // Hot fields (touched by every step of a running request) share the first cache line.
  struct alignas(64) Req {
    int64_t known = 0;     // prompt + generated
    int64_t computed = 0;  // tokens with cached KV
    int32_t generated = 0;
    int32_t output = 0;
    int32_t fill_block = 0;   // index in blocks of the block receiving the next token
    int32_t fill_offset = 0;  // its fill
    int32_t cur_block = -1;   // blocks[fill_block], or -1 past the end (saves a load per token)
    State state = kPending;
    bool has_first_scheduled = false, has_first_token = false;
    std::vector<int32_t> blocks;
    // Cold fields.
    uint64_t last_hash = 0;
    int32_t hashed_blocks = 0;
    int32_t swapped_blocks = 0;
    double first_scheduled = 0, first_token = 0, finish = 0;
    int32_t preemptions = 0, swaps = 0;
    int64_t hit_tokens = 0, discarded_tokens = 0;
  };

  void admit_arrivals();
  bool try_schedule();
  // Blocks for `tokens` cached tokens: the common case (they fit) inline, else
  // allocate_blocks (false, with nothing allocated, when the pool cannot supply them).
  bool ensure_blocks(Req& r, int64_t tokens) {
    return tokens <= static_cast<int64_t>(r.blocks.size()) * cfg_.block_size ||
           allocate_blocks(r, tokens);
  }
  bool allocate_blocks(Req& r, int64_t tokens);
  static void sync_cursor(Req& r) {
    r.cur_block = static_cast<size_t>(r.fill_block) < r.blocks.size()
                      ? r.blocks[static_cast<size_t>(r.fill_block)]
                      : -1;
  }
  void add_to_batch(int32_t idx, int64_t n);
  void preempt(int32_t idx);
  void release_blocks(Req& r);
  int64_t prefix_hits(int32_t idx, std::vector<int32_t>* hit_blocks);
  uint64_t block_hash(int32_t idx, uint64_t parent, int64_t j) const;
  void record_step(const StepCost& cost, int32_t finished);
  void finalize_summary(SimResult* r) const;

  EngineConfig cfg_;
  std::shared_ptr<const StepTimeModel> timer_;
  std::unique_ptr<BlockPool> pool_;
  std::vector<Request> reqs_;
  std::vector<Req> state_;
  size_t next_arrival_ = 0;
  std::deque<int32_t> waiting_, swapped_;
  std::vector<int32_t> running_;
  std::vector<ScheduledSeq> batch_;
  std::vector<int32_t> hit_scratch_;
  StepShape shape_;
  bool scheduled_ = false, over_ = false;
  double now_ = 0;
  int64_t steps_ = 0;
  int32_t step_preempted_ = 0;
  int64_t step_swap_out_ = 0, step_swap_in_ = 0;
  int64_t swap_used_ = 0;
  int64_t watermark_blocks_ = 0;
  int64_t logical_tokens_ = 0;  // sum of computed over running requests
  // Accumulated results.
  SimResult res_;
  int64_t num_done_ = 0;
  double acc_tok = 0, acc_slack = 0, acc_res = 0, acc_cached = 0, acc_free = 0, acc_logical = 0;
  double tacc_tok = 0, tacc_slack = 0, tacc_res = 0, tacc_cached = 0, tacc_free = 0;
  double acc_running = 0, acc_holding = 0;
  int64_t peak_tok = 0, peak_used = 0, min_free = 0;
  int32_t peak_running = 0;
  int64_t computed_total_ = 0;
};

}  // namespace kvlab::sim
