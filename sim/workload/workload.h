// workload.h: request streams for the serving simulation.
//
// A workload is a list of requests sorted by arrival time. It comes either from a seeded
// synthetic generator (Poisson, bursty Gamma or all-at-once arrivals; prompt and output
// lengths from fixed, uniform, lognormal or Zipf distributions; optional shared prefixes
// for prefix caching) or from a CSV trace (trace_csv.h). Same spec + same seed = the same
// requests on every platform (random.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvlab::sim {

// One request. Tokens are abstract: token p of the prompt is "shared content" (identical
// across all requests of the same prefix_group) when p < shared_prefix_tokens, else unique
// to this request. Prefix caching keys blocks on exactly that identity.
struct Request {
  int64_t id = 0;                    // unique within a workload
  double arrival_s = 0;              // >= 0, non-decreasing along the workload
  int32_t prompt_tokens = 0;         // >= 1
  int32_t output_tokens = 0;         // >= 1 tokens to generate (the first comes from prefill)
  int32_t prefix_group = 0;          // 0 = no shared prefix; > 0 groups requests
  int32_t shared_prefix_tokens = 0;  // 0 <= x <= prompt_tokens; must be 0 when group is 0
};

// Throws InvalidArgument naming the request (index and id) and field that breaks a rule
// above: duplicate ids, arrival not finite or decreasing, non-positive lengths, ...
void validate_requests(const std::vector<Request>& requests);

enum class LengthDistKind { kFixed, kUniform, kLogNormal, kZipf };

// A token-length distribution on [min, max] (integers, 1 <= min <= max).
//   kFixed      always `value` (min/max ignored)
//   kUniform    uniform on [min, max]
//   kLogNormal  exp(N(log(median), sigma)) rounded to nearest, truncated to [min, max] by
//               rejection (InvalidArgument when less than 1/1000 of the mass lies inside)
//   kZipf       P(k) proportional to k^-s for k in [min, max], s > 0 (many short, few long)
struct LengthDist {
  LengthDistKind kind = LengthDistKind::kFixed;
  int64_t value = 0;
  int64_t min = 1, max = 1;
  double median = 0, sigma = 0;
  double s = 0;

  static LengthDist fixed(int64_t v);
  static LengthDist uniform(int64_t lo, int64_t hi);
  static LengthDist lognormal(double median, double sigma, int64_t lo, int64_t hi);
  static LengthDist zipf(double s, int64_t lo, int64_t hi);
  void validate(const std::string& what) const;  // what = "prompt" / "output" for errors
  std::string str() const;
};

enum class ArrivalKind { kPoisson, kBursty, kAllAtOnce };

// Arrival process.
//   kPoisson    exponential inter-arrival times with mean 1/rate
//   kBursty     Gamma inter-arrival times with mean 1/rate and shape `burstiness`
//               (vLLM benchmark_serving's convention: burstiness 1 = Poisson, < 1 burstier,
//               coefficient of variation 1/sqrt(burstiness))
//   kAllAtOnce  every request arrives at t = 0 (offline batch)
struct ArrivalProcess {
  ArrivalKind kind = ArrivalKind::kPoisson;
  double rate = 1.0;        // requests per second, > 0 (not used by kAllAtOnce)
  double burstiness = 1.0;  // > 0, kBursty only
  void validate() const;
  std::string str() const;
};

struct WorkloadSpec {
  uint64_t seed = 0;
  int64_t num_requests = 0;  // >= 0
  ArrivalProcess arrival;
  LengthDist prompt = LengthDist::fixed(128);
  LengthDist output = LengthDist::fixed(128);
  // Shared prefixes: with num_prefix_groups > 0 every request joins a group drawn uniformly
  // from 1..num_prefix_groups, and its prompt is shared_prefix_tokens of shared content
  // followed by a unique part drawn from `prompt`.
  int32_t num_prefix_groups = 0;
  int32_t shared_prefix_tokens = 0;
  void validate() const;
};

// The same workload with every token length scaled by `factor` (> 0): fixed values, the
// min/max of every distribution and lognormal medians are multiplied and rounded (at least
// 1 token; a shared prefix of s tokens becomes round(s * factor)). Shapes (sigma, Zipf s,
// arrivals) are unchanged: a smaller replica of the workload for short GPU runs.
// InvalidArgument for a factor that is not finite and > 0.
WorkloadSpec scale_lengths(WorkloadSpec spec, double factor);

// Generates the requests (ids 0..n-1 in arrival order). Independent streams per quantity
// (arrivals, prompt, output, group) so changing one distribution leaves the others' draws
// unchanged.
std::vector<Request> generate_workload(const WorkloadSpec& spec);

// Parses a workload spec from "key = value" text (data/workloads/*.cfg); `source` names the
// file in errors. Keys: seed, num_requests, arrival (poisson|bursty|all_at_once), rate,
// burstiness, prompt, output (fixed|uniform|lognormal|zipf), prompt_value, prompt_min,
// prompt_max, prompt_median, prompt_sigma, prompt_s (same with output_), num_prefix_groups,
// shared_prefix_tokens. Unknown or malformed keys: InvalidArgument with the line.
WorkloadSpec parse_workload_spec(const std::string& text, const std::string& source);
WorkloadSpec load_workload_spec(const std::string& path);

}  // namespace kvlab::sim
