// config.cpp: engine configuration checks, step-time models, result helpers.
#include "sim/engine/config.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/core/error.h"
#include "sim/engine/results.h"

namespace kvlab::sim {

std::string to_string(PreemptionMode m) {
  return m == PreemptionMode::kSwap ? "swap" : "recompute";
}
std::string to_string(ReservePolicy p) {
  return p == ReservePolicy::kFullSequence ? "full_sequence" : "on_demand";
}

PreemptionMode parse_preemption_mode(const std::string& s) {
  if (s == "recompute") return PreemptionMode::kRecompute;
  if (s == "swap") return PreemptionMode::kSwap;
  throw InvalidArgument("unknown preemption mode '" + s + "' (allowed: recompute, swap)");
}

ReservePolicy parse_reserve_policy(const std::string& s) {
  if (s == "on_demand") return ReservePolicy::kOnDemand;
  if (s == "full_sequence") return ReservePolicy::kFullSequence;
  throw InvalidArgument("unknown reserve policy '" + s + "' (allowed: on_demand, full_sequence)");
}

int64_t EngineConfig::watermark_blocks() const {
  return static_cast<int64_t>(std::floor(watermark * static_cast<double>(num_blocks)));
}

void EngineConfig::validate() const {
  KVLAB_REQUIRE(block_size >= 1, "engine: block_size " << block_size << " must be >= 1");
  KVLAB_REQUIRE(num_blocks >= 1, "engine: num_blocks "
                                     << num_blocks
                                     << " (the KV budget must hold at least one block)");
  KVLAB_REQUIRE(num_blocks <= std::numeric_limits<int32_t>::max(),
                "engine: num_blocks " << num_blocks << " above 2^31-1 (block ids are int32)");
  KVLAB_REQUIRE(max_num_seqs >= 1, "engine: max_num_seqs " << max_num_seqs << " must be >= 1");
  KVLAB_REQUIRE(max_num_batched_tokens >= 1,
                "engine: max_num_batched_tokens " << max_num_batched_tokens << " must be >= 1");
  KVLAB_REQUIRE(std::isfinite(watermark) && watermark >= 0 && watermark < 1,
                "engine: watermark " << watermark << " must be in [0, 1)");
  KVLAB_REQUIRE(num_blocks - watermark_blocks() >= 1,
                "engine: watermark " << watermark << " of " << num_blocks
                                     << " blocks leaves no block to admit into");
  KVLAB_REQUIRE(swap_blocks >= 0, "engine: swap_blocks " << swap_blocks << " must be >= 0");
  KVLAB_REQUIRE(preemption != PreemptionMode::kSwap || swap_blocks > 0,
                "engine: preemption 'swap' needs swap_blocks > 0 (got " << swap_blocks << ")");
  KVLAB_REQUIRE(
      block_bytes.raw_kv >= 0 && block_bytes.compressed_kv >= 0 && block_bytes.scales >= 0,
      "engine: block_bytes must be >= 0");
  KVLAB_REQUIRE(per_request_bytes >= 0,
                "engine: per_request_bytes " << per_request_bytes << " must be >= 0");
  KVLAB_REQUIRE(max_steps >= 0,
                "engine: max_steps " << max_steps << " must be >= 0 (0 = unlimited)");
  KVLAB_REQUIRE(trace_every >= 0,
                "engine: trace_every " << trace_every << " must be >= 0 (0 = no trace rows)");
}

LinearStepTime::LinearStepTime(double base_s, double per_token_s, double per_context_token_s,
                               double swap_bytes_per_s)
    : base_s_(base_s),
      per_token_s_(per_token_s),
      per_context_token_s_(per_context_token_s),
      swap_bytes_per_s_(swap_bytes_per_s) {
  KVLAB_REQUIRE(
      base_s >= 0 && per_token_s >= 0 && per_context_token_s >= 0 && swap_bytes_per_s >= 0,
      "LinearStepTime: coefficients must be >= 0 (got base "
          << base_s << ", per token " << per_token_s << ", per context token "
          << per_context_token_s << ", swap " << swap_bytes_per_s << " B/s)");
}

StepCost LinearStepTime::step_cost(const StepShape& s) const {
  StepCost c;
  c.launch_s = base_s_;
  c.gemm_s = per_token_s_ * static_cast<double>(s.total_tokens());
  c.attention_s = per_context_token_s_ *
                  static_cast<double>(s.decode_context_tokens + s.prefill_context_tokens);
  KVLAB_REQUIRE(
      s.swap_bytes == 0 || swap_bytes_per_s_ > 0,
      "LinearStepTime: a step swaps " << s.swap_bytes << " bytes but no swap bandwidth was given");
  c.swap_s = s.swap_bytes > 0 ? static_cast<double>(s.swap_bytes) / swap_bytes_per_s_ : 0.0;
  c.total_s = c.launch_s + c.gemm_s + c.attention_s + c.swap_s;
  return c;
}

BlockBytes LedgerSummary::bytes_of_slots(double slots) const {
  BlockBytes b;
  if (block_size <= 0) return b;
  const double k = slots / block_size;
  b.raw_kv = std::llround(k * static_cast<double>(block_bytes.raw_kv));
  b.compressed_kv = std::llround(k * static_cast<double>(block_bytes.compressed_kv));
  b.scales = std::llround(k * static_cast<double>(block_bytes.scales));
  return b;
}

double percentile(std::vector<double> v, double p) {
  KVLAB_REQUIRE(p >= 0 && p <= 100, "percentile: p " << p << " outside [0, 100]");
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

}  // namespace kvlab::sim
