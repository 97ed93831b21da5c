// serving_run.h: one serving loop for both clocks (CUDA-free).
//
//   run_serving(cfg, requests, &executor)   a real run: every step the engine schedules
//                                           (sim::Engine::schedule: admission, batch, chunked
//                                           prefill, preemption, prefix hits, block tables) is
//                                           executed by `executor` (the GPU model in
//                                           gpu/runtime), and complete() gets the measured
//                                           step time: the engine's clock is the wall clock
//   run_serving(cfg, requests, nullptr, model)   the prediction: the same engine and the same
//                                           loop, complete() takes the step-time model's time
//
// Both record the decision sequence: one 64-bit hash per step of everything the scheduler
// decided (for each scheduled sequence in batch order: request id, first position, token
// count and the ids of the blocks it reads; the step's preemption count), so two runs can be
// compared step by step (compare_decisions). The engine is deterministic: two runs take
// different decisions only if, at some step, the sets of arrived requests differ (their
// clocks differ), which compare_decisions checks and reports.
//
// Idle time: when nothing is running or waiting, the engine jumps its clock to the next
// arrival; a real run does the same (the GPU would idle), so measured and predicted runs
// treat idle periods alike.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/engine/config.h"
#include "sim/engine/engine.h"
#include "sim/engine/results.h"
#include "sim/serve/step_batch.h"
#include "sim/workload/workload.h"

namespace kvlab::sim {

// What an executor measured for one step.
struct StepTiming {
  double wall_s = 0;     // host wall clock of the whole step (upload, launches, sync, download)
  double device_s = -1;  // device time between the step's first and last kernel (< 0: unknown)
};

// Executes scheduled steps (the GPU model; tests use fakes). Not thread-safe.
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // Runs the step; writes one sampled token per batch.sample_rows entry into *sampled.
  virtual StepTiming execute(const StepBatch& batch, std::vector<int32_t>* sampled) = 0;
  virtual int32_t vocab() const = 0;
  virtual int32_t max_blocks_per_seq() const = 0;
};

// Replays given step durations (e.g. a measured run's) with no model behind them: a run
// driven by it with include_host_time off takes exactly the decisions of the run the
// durations came from (the engine is deterministic); sampled tokens are 0.
class ReplayExecutor : public StepExecutor {
 public:
  ReplayExecutor(std::vector<double> durations_s, int32_t max_blocks_per_seq)
      : d_(std::move(durations_s)), max_blocks_(max_blocks_per_seq) {}
  StepTiming execute(const StepBatch& batch, std::vector<int32_t>* sampled) override;
  int32_t vocab() const override { return 1; }
  int32_t max_blocks_per_seq() const override { return max_blocks_; }

 private:
  std::vector<double> d_;
  size_t next_ = 0;
  int32_t max_blocks_;
};

struct ServingRunOptions {
  // Real runs: the engine's step duration is the host wall time of the whole step, the
  // scheduling and batch building included (what a client of the server sees). Off: the
  // executor's wall_s alone (tests with known step times).
  bool include_host_time = true;
};

struct ServingRun {
  SimResult result;                     // the engine's results on this run's clock
  std::vector<uint64_t> decision_hash;  // per step (see the file header)
  std::vector<StepShape> shapes;        // per step
  std::vector<double> duration_s;       // per step: what complete() was given
  std::vector<double> exec_wall_s;      // per step: the executor's wall time (NaN: model clock)
  std::vector<double> device_s;         // per step: the executor's device time (NaN: unknown)
  std::vector<double> host_s;           // per step: schedule() + build_step_batch (real runs)
  std::vector<int32_t> num_rows;        // per step: token rows executed
  std::vector<std::vector<int32_t>> generated;  // per request: the sampled tokens (real runs)
};

// See the file header. executor == nullptr: the step-time model's clock (model required).
// The config needs trace_every == 1 (one trace row per step). InvalidArgument for bad input.
ServingRun run_serving(const EngineConfig& cfg, const std::vector<Request>& requests,
                       StepExecutor* executor, std::shared_ptr<const StepTimeModel> model = nullptr,
                       const ServingRunOptions& options = {});

// The hash of the scheduled step (between schedule() and complete()); the preemption count
// is folded in by run_serving once the step completed.
uint64_t step_decision_hash(const Engine& engine, const std::vector<Request>& requests);

// Step-by-step comparison of two decision sequences.
struct DecisionComparison {
  int64_t steps_a = 0, steps_b = 0;
  int64_t identical_steps = 0;    // steps k with equal hashes (both runs long enough)
  int64_t first_divergence = -1;  // first step k with different hashes (or where one run
                                  // ended), -1 when the sequences are identical
  bool identical() const { return first_divergence < 0; }
  // At the first divergence: each run's clock when the step was scheduled and the number of
  // requests that had arrived by then.
  double clock_a = 0, clock_b = 0;
  int64_t arrived_a = 0, arrived_b = 0;
  // "identical", "clock: ..." (different arrivals visible: explained by the clocks) or
  // "unexplained: ..." (same arrivals, different decisions: an engine bug).
  std::string explanation;
  bool explained() const { return first_divergence < 0 || explanation.rfind("clock", 0) == 0; }
};
DecisionComparison compare_decisions(const ServingRun& a, const ServingRun& b,
                                     const std::vector<Request>& requests);

}  // namespace kvlab::sim
