// capacity.cpp: capacity planner (see capacity.h).
#include "sim/plan/capacity.h"

#include <algorithm>
#include <cmath>

#include "reference/core/error.h"
#include "reference/layout/layout_names.h"

namespace kvlab::sim {

CapacityResult plan_capacity(const CapacityQuery& q) {
  KVLAB_REQUIRE(q.kv_budget_bytes >= 0,
                "capacity: KV budget " << q.kv_budget_bytes << " bytes is negative");
  KVLAB_REQUIRE(q.context_tokens >= 1,
                "capacity: context_tokens " << q.context_tokens << " must be >= 1");
  KVLAB_REQUIRE(q.max_num_seqs >= 0, "capacity: max_num_seqs "
                                         << q.max_num_seqs << " must be >= 0 (0 = as many as fit)");
  CapacityResult r;
  r.footprint = kv_footprint(q.model, q.block_size, q.format);
  const int64_t block = r.footprint.block.total();
  const int64_t state = r.footprint.per_request_bytes;
  KVLAB_REQUIRE(block > 0,
                "capacity: model '" << q.model.name << "' has no paged KV layer (block bytes 0)");
  KVLAB_REQUIRE(q.kv_budget_bytes >= block + state,
                "capacity: KV budget "
                    << q.kv_budget_bytes << " bytes is below one block (" << block << " bytes"
                    << (state > 0 ? " + " + std::to_string(state) + " bytes of per-request state"
                                  : "")
                    << ") for model '" << q.model.name << "', block_size " << q.block_size << ", "
                    << to_string(q.format));
  r.blocks_per_seq = (q.context_tokens + q.block_size - 1) / q.block_size;
  const int64_t per_seq = r.blocks_per_seq * block + state;
  const int64_t fit = q.kv_budget_bytes / per_seq;
  if (q.max_num_seqs > 0) {
    r.state_slots = q.max_num_seqs;
    KVLAB_REQUIRE(q.kv_budget_bytes >= r.state_slots * state + block,
                  "capacity: per-request state for "
                      << q.max_num_seqs << " sequences (" << r.state_slots * state
                      << " bytes) leaves less than one block of the " << q.kv_budget_bytes
                      << "-byte budget");
  } else {
    r.state_slots = state > 0 ? fit : 0;
  }
  r.num_blocks = (q.kv_budget_bytes - r.state_slots * state) / block;
  r.max_tokens = r.num_blocks * q.block_size;
  r.max_seqs = r.num_blocks / r.blocks_per_seq;
  // A sequence needs a state slot as well as its blocks.
  if (state > 0 || q.max_num_seqs > 0) r.max_seqs = std::min<int64_t>(r.max_seqs, r.state_slots);
  r.used_bytes = r.num_blocks * block + r.state_slots * state;
  r.bytes_per_token = static_cast<double>(per_seq) / static_cast<double>(q.context_tokens);
  r.slack_fraction = static_cast<double>(r.blocks_per_seq * q.block_size - q.context_tokens) /
                     static_cast<double>(r.blocks_per_seq * q.block_size);
  return r;
}

int64_t kv_budget_on_gpu(const GpuSpec& gpu, const ModelStack& model, double util,
                         int64_t activation_reserve_bytes) {
  KVLAB_REQUIRE(std::isfinite(util) && util > 0 && util <= 1,
                "kv budget: gpu_memory_utilization " << util << " must be in (0, 1]");
  KVLAB_REQUIRE(activation_reserve_bytes >= 0, "kv budget: activation reserve "
                                                   << activation_reserve_bytes
                                                   << " bytes is negative");
  const double usable = static_cast<double>(gpu.memory_bytes) * util;
  const int64_t weights = model.weight_bytes();
  const int64_t left =
      static_cast<int64_t>(std::floor(usable)) - weights - activation_reserve_bytes;
  KVLAB_REQUIRE(left > 0, "kv budget: " << gpu.name << " memory " << gpu.memory_bytes << " bytes x "
                                        << util << " leaves nothing for the KV cache after "
                                        << weights << " bytes of weights (" << model.name
                                        << ") and " << activation_reserve_bytes
                                        << " bytes of activations");
  return left;
}

}  // namespace kvlab::sim
