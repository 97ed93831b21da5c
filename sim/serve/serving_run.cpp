// serving_run.cpp: see serving_run.h.
#include "sim/serve/serving_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>

#include "reference/core/error.h"
#include "reference/core/mix64.h"
#include "sim/alloc/block_table.h"

namespace kvlab::sim {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

uint64_t fold(uint64_t h, uint64_t v) {
  return mix64(h ^ mix64(v));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

uint64_t step_decision_hash(const Engine& engine, const std::vector<Request>& requests) {
  const int32_t bs = engine.config().block_size;
  uint64_t h = 0x6465636973696F6Eull;  // "decision"
  for (const ScheduledSeq& s : engine.batch()) {
    h = fold(h, static_cast<uint64_t>(requests[static_cast<size_t>(s.request)].id));
    h = fold(h, static_cast<uint64_t>(s.start));
    h = fold(h, static_cast<uint64_t>(s.num_tokens));
    const std::vector<int32_t>& blocks = engine.request_blocks(s.request);
    const int64_t used = blocks_for_tokens(s.start + s.num_tokens, bs);
    for (int64_t j = 0; j < used && j < static_cast<int64_t>(blocks.size()); ++j)
      h = fold(h, static_cast<uint64_t>(static_cast<uint32_t>(blocks[static_cast<size_t>(j)])));
  }
  return fold(h, static_cast<uint64_t>(engine.batch_shape().swap_bytes));
}

StepTiming ReplayExecutor::execute(const StepBatch& batch, std::vector<int32_t>* sampled) {
  KVLAB_REQUIRE(next_ < d_.size(), "ReplayExecutor: step " << next_ << " has no recorded duration ("
                                                           << d_.size() << " recorded)");
  sampled->assign(batch.sample_rows.size(), 0);
  return StepTiming{d_[next_++], -1};
}

ServingRun run_serving(const EngineConfig& cfg, const std::vector<Request>& requests,
                       StepExecutor* executor, std::shared_ptr<const StepTimeModel> model,
                       const ServingRunOptions& options) {
  KVLAB_REQUIRE(executor != nullptr || model != nullptr,
                "run_serving: give an executor (a real run) or a step-time model (a prediction)");
  KVLAB_REQUIRE(
      cfg.trace_every == 1,
      "run_serving: trace_every must be 1 (one trace row per step), got " << cfg.trace_every);
  Engine engine(cfg, model);
  engine.reset(requests);
  ServingRun run;
  TokenHistory history(requests, executor ? executor->vocab() : 1);
  StepBatch batch;
  std::vector<int32_t> sampled;
  for (;;) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!engine.schedule()) break;
    run.decision_hash.push_back(step_decision_hash(engine, requests));
    run.shapes.push_back(engine.batch_shape());
    if (executor == nullptr) {
      const double before = engine.now();
      engine.complete(-1);
      run.duration_s.push_back(engine.now() - before);
      run.exec_wall_s.push_back(kNaN);
      run.device_s.push_back(kNaN);
      run.host_s.push_back(kNaN);
      run.num_rows.push_back(static_cast<int32_t>(engine.batch_shape().total_tokens()));
      continue;
    }
    build_step_batch(engine, history, executor->max_blocks_per_seq(), &batch);
    const double host = seconds_since(t0);
    sampled.clear();
    const StepTiming tm = executor->execute(batch, &sampled);
    KVLAB_REQUIRE(sampled.size() == batch.sample_rows.size(),
                  "run_serving: the executor sampled " << sampled.size() << " tokens for "
                                                       << batch.sample_rows.size() << " rows");
    KVLAB_REQUIRE(std::isfinite(tm.wall_s) && tm.wall_s >= 0,
                  "run_serving: the executor reported a step time of " << tm.wall_s << " s");
    for (size_t k = 0; k < sampled.size(); ++k)
      history.append_generated(batch.seq_request[static_cast<size_t>(batch.sample_seqs[k])],
                               sampled[k]);
    const double duration = options.include_host_time ? seconds_since(t0) : tm.wall_s;
    engine.complete(duration);
    run.duration_s.push_back(duration);
    run.exec_wall_s.push_back(tm.wall_s);
    run.device_s.push_back(tm.device_s >= 0 ? tm.device_s : kNaN);
    run.host_s.push_back(host);
    run.num_rows.push_back(batch.num_rows());
  }
  run.result = engine.results();
  const StepTrace& st = run.result.steps;
  KVLAB_REQUIRE(
      st.size() == run.decision_hash.size(),
      "run_serving: " << st.size() << " trace rows for " << run.decision_hash.size() << " steps");
  for (size_t k = 0; k < st.size(); ++k)
    run.decision_hash[k] = fold(run.decision_hash[k], static_cast<uint64_t>(st.num_preempted[k]));
  if (executor != nullptr) {
    run.generated.resize(requests.size());
    for (size_t r = 0; r < requests.size(); ++r)
      run.generated[r] = history.generated(static_cast<int32_t>(r));
  }
  return run;
}

DecisionComparison compare_decisions(const ServingRun& a, const ServingRun& b,
                                     const std::vector<Request>& requests) {
  DecisionComparison c;
  c.steps_a = static_cast<int64_t>(a.decision_hash.size());
  c.steps_b = static_cast<int64_t>(b.decision_hash.size());
  const int64_t n = std::min(c.steps_a, c.steps_b);
  for (int64_t k = 0; k < n; ++k) {
    if (a.decision_hash[static_cast<size_t>(k)] == b.decision_hash[static_cast<size_t>(k)]) {
      ++c.identical_steps;
    } else if (c.first_divergence < 0) {
      c.first_divergence = k;
    }
  }
  if (c.first_divergence < 0 && c.steps_a != c.steps_b) c.first_divergence = n;
  if (c.first_divergence < 0) {
    c.explanation = "identical";
    return c;
  }
  const int64_t k = c.first_divergence;
  // The clock at which step k was scheduled (its end minus its duration); a run that ended
  // before step k is looked at after its last step.
  auto clock_at = [&](const ServingRun& r) {
    const StepTrace& st = r.result.steps;
    if (k < static_cast<int64_t>(st.size()))
      return st.time_s[static_cast<size_t>(k)] - st.duration_s[static_cast<size_t>(k)];
    return st.size() ? st.time_s.back() : 0.0;
  };
  auto arrived = [&](double t) {
    return static_cast<int64_t>(std::count_if(requests.begin(), requests.end(),
                                              [&](const Request& q) { return q.arrival_s <= t; }));
  };
  c.clock_a = clock_at(a);
  c.clock_b = clock_at(b);
  c.arrived_a = arrived(c.clock_a);
  c.arrived_b = arrived(c.clock_b);
  std::ostringstream os;
  os << "at step " << k << " run A's clock was " << c.clock_a << " s (" << c.arrived_a
     << " requests arrived), run B's " << c.clock_b << " s (" << c.arrived_b << " arrived)";
  if (c.arrived_a != c.arrived_b)
    c.explanation = "clock: " + os.str() + ": the runs saw different arrivals";
  else
    c.explanation = "unexplained: " + os.str() +
                    ": same arrivals, yet different decisions (the engine is not deterministic)";
  return c;
}

}  // namespace kvlab::sim
