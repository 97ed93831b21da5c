// capacity.h: the capacity planner. How many sequences and tokens fit in a KV budget for a
// model stack x block size x storage format x compression ratios.
//
// Sizing follows the engines: per-request unpaged state (sliding-window rings) is reserved
// for the sequences that run, the rest of the budget becomes whole blocks, and a sequence
// of context L holds ceil(L / block_size) blocks:
//     max_seqs   = floor(budget / (ceil(L / block_size) * block_bytes + per_request_bytes))
//                  (capped by max_num_seqs when given: then that many state slots are
//                   reserved up front, as a static per-slot state cache does)
//     num_blocks = floor((budget - state_slots * per_request_bytes) / block_bytes)
//     max_tokens = num_blocks * block_size     (token slots: the most tokens in flight)
// Errors: a budget below one block (plus one state slot), a context of 0, a block size the
// compression ratios do not divide.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/cost/gpu_spec.h"
#include "sim/model/model_stack.h"

namespace kvlab::sim {

struct CapacityQuery {
  ModelStack model;
  int64_t kv_budget_bytes = 0;  // bytes for the KV cache: paged pools + per-request state
  int32_t block_size = 16;
  KvFormat format = KvFormat::kBF16;
  int64_t context_tokens = 0;  // per-sequence context for max_seqs (>= 1)
  int32_t max_num_seqs = 0;    // 0 = as many as fit; else state slots reserved up front
};

struct CapacityResult {
  KvFootprint footprint;  // bytes per block (raw / compressed / scales), per request
  int64_t num_blocks = 0;
  int64_t max_tokens = 0;      // num_blocks * block_size
  int64_t blocks_per_seq = 0;  // ceil(context / block_size)
  int64_t max_seqs = 0;        // concurrent sequences at context_tokens
  int64_t state_slots = 0;     // per-request state reserved for this many sequences
  int64_t used_bytes = 0;      // num_blocks * block bytes + state_slots * per_request_bytes
  double bytes_per_token = 0;  // at context_tokens, incl. last-block slack and state
  double slack_fraction =
      0;  // (blocks_per_seq * block_size - context) / (blocks_per_seq * block_size)
};

CapacityResult plan_capacity(const CapacityQuery& q);

// KV budget on a GPU: memory * gpu_memory_utilization - weights - activation_reserve_bytes
// (vLLM's gpu_memory_utilization convention). InvalidArgument when nothing is left.
int64_t kv_budget_on_gpu(const GpuSpec& gpu, const ModelStack& model, double gpu_memory_utilization,
                         int64_t activation_reserve_bytes);

}  // namespace kvlab::sim
