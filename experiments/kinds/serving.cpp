// serving.cpp: bench "serving": a real serving run on the GPU and the simulator's prediction
// of it (see serving_common.h).
//
// A point: the executor axes, a workload (data/workloads spec with overrides: requests,
// rate, seed, length_scale), the engine's limits (kv_blocks of the pool, watermark, prefix
// caching; max_num_seqs and max_num_batched_tokens are executor axes) and a calibration file
// (a result file with serving_step points of the same executor). Four runs of one engine:
//   measured    sim::run_serving with the GPU executor: every step's decisions from
//               sim::Engine::schedule(), executed on the GPU, complete(measured wall seconds)
//   replay      the engine again, fed the measured step durations: its decisions must be the
//               measured run's, step for step (the engine is deterministic; else the point
//               fails)
//   predicted   the engine on the serving step model's clock, fitted to the calibration file
//               (never to this run), with leave-one-out errors on the calibration steps
//   per step    the model's time for every measured step's own shape (the step residual)
// Record: measured vs predicted mean TTFT, TPOT, end-to-end latency, throughput (finished
// output tokens / makespan), preemption counts, with relative errors and the fidelity targets
// (TPOT and throughput within 5 %, TTFT within 10 %, preemptions within 10 %); the decision
// comparison (identical steps, first divergence and whether the clocks explain it); traces
// `requests` (per request, both runs), `steps` (per measured step: shape, measured and
// predicted time, host/device split, decision hash), `steps_predicted` and `calibration`.
// executor = roofline runs the "measured" run on sim's roofline clock instead of the GPU: a
// pipeline test for machines without one, labelled as such, never a measurement.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <unistd.h>

#include "experiments/bench/table_trace.h"
#include "experiments/kinds/serving_common.h"
#include "reference/core/error.h"
#include "sim/core/text.h"
#include "sim/cost/calibration.h"
#include "sim/cost/gpu_spec.h"
#include "sim/cost/roofline.h"
#include "sim/serve/serving_run.h"
#include "sim/workload/workload.h"

namespace kvlab::exp {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<sim::Request> serving_requests(const Point& p, std::string* desc) {
  std::string w = p.str("workload");
  if (w.empty()) throw InvalidArgument("workload: empty name");
  std::string path;
  if (access(w.c_str(), R_OK) == 0) {
    path = w;
  } else {
    try {
      path = sim::find_data_file("workloads/" + (ends_with(w, ".cfg") ? w : w + ".cfg"));
    } catch (const InvalidArgument&) {
      throw InvalidArgument("workload '" + w +
                            "' is neither a file nor a spec in data/workloads (shipped: "
                            "bursty_zipf, chat_poisson, offline_batch, shared_prefix)");
    }
  }
  if (!ends_with(path, ".cfg"))
    throw InvalidArgument("workload " + path + ": the serving kind takes .cfg specs");
  sim::WorkloadSpec spec = sim::load_workload_spec(path);
  const int64_t n = p.integer("num_requests");
  const double rate = p.number("rate");
  const int64_t seed = p.integer("workload_seed");
  if (n < 0) throw InvalidArgument("num_requests must be >= 0 (0 = the workload's)");
  if (!(rate >= 0)) throw InvalidArgument("rate must be >= 0 (0 = the workload's)");
  if (seed < 0) throw InvalidArgument("workload_seed must be >= 0 (0 = the workload's)");
  if (n > 0) spec.num_requests = n;
  if (rate > 0) {
    if (spec.arrival.kind == sim::ArrivalKind::kAllAtOnce)
      throw InvalidArgument("workload " + path + " arrives all at once: it has no rate");
    spec.arrival.rate = rate;
  }
  if (seed > 0) spec.seed = static_cast<uint64_t>(seed);
  spec = sim::scale_lengths(spec, p.number("length_scale"));
  spec.validate();
  if (desc)
    *desc = path + ": " + std::to_string(spec.num_requests) + " requests, " + spec.arrival.str() +
            ", prompt " + spec.prompt.str() + ", output " + spec.output.str() +
            (spec.num_prefix_groups > 0
                 ? ", " + std::to_string(spec.num_prefix_groups) + " prefix groups of " +
                       std::to_string(spec.shared_prefix_tokens) + " tokens"
                 : std::string()) +
            ", seed " + std::to_string(spec.seed) + ", length_scale " + p.str("length_scale");
  return sim::generate_workload(spec);
}

sim::EngineConfig engine_config(const Point& p, const ServingExecutorConfig& c) {
  sim::EngineConfig e;
  e.block_size = c.block_size;
  e.num_blocks = p.integer("kv_blocks");
  if (e.num_blocks < 1 || e.num_blocks > c.pool_blocks)
    throw InvalidArgument("kv_blocks " + p.str("kv_blocks") + " outside [1, pool_blocks " +
                          std::to_string(c.pool_blocks) + "]");
  e.max_num_seqs = c.max_num_seqs;
  e.max_num_batched_tokens = c.max_num_batched_tokens;
  e.chunked_prefill = true;
  e.watermark = p.number("watermark");
  e.prefix_caching = p.str("prefix_caching") == "on";
  e.preemption = sim::PreemptionMode::kRecompute;
  e.trace_every = 1;
  e.validate();
  return e;
}

std::shared_ptr<const sim::StepTimeModel> roofline(const DecoderConfig& d, sim::LaunchMode mode) {
  sim::CostModelConfig cc;
  cc.launch = mode;
  return std::make_shared<sim::RooflineStepTime>(
      sim::CostModel(sim::gpu_spec("H100"), sim::model_stack_of(d), KvFormat::kBF16, cc));
}

// Another model's time times a factor: the prediction's sensitivity to a clock error.
class ScaledStepTime : public sim::StepTimeModel {
 public:
  ScaledStepTime(std::shared_ptr<const sim::StepTimeModel> base, double f)
      : base_(std::move(base)), f_(f) {}
  sim::StepCost step_cost(const sim::StepShape& s) const override {
    sim::StepCost c = base_->step_cost(s);
    for (double* x : {&c.total_s, &c.gemm_s, &c.attention_s, &c.other_s, &c.launch_s, &c.swap_s})
      *x *= f_;
    return c;
  }

 private:
  std::shared_ptr<const sim::StepTimeModel> base_;
  double f_;
};

double rel(double predicted, double measured) {
  return measured != 0 && std::isfinite(measured) ? (predicted - measured) / measured : kNaN;
}
double mean_finite(const std::vector<double>& v) {
  double s = 0;
  int64_t n = 0;
  for (double x : v)
    if (std::isfinite(x)) s += x, ++n;
  return n ? s / static_cast<double>(n) : kNaN;
}

class ServingBench : public Bench {
 public:
  std::string name() const override { return "serving"; }
  std::string summary() const override {
    return "a real serving run on the GPU driven by sim::Engine, the simulator's prediction of it "
           "(serving step model fitted to serving_step points), and the comparison";
  }
  std::vector<AxisSpec> axes() const override {
    std::vector<AxisSpec> a = serving_executor_axes();
    a.push_back({"workload",
                 AxisType::kString,
                 "chat_poisson",
                 {},
                 "data/workloads spec name or a path to a .cfg spec"});
    a.push_back({"load",
                 AxisType::kString,
                 "-",
                 {},
                 "the load level's name (tables and figures group by it; no effect on the run)"});
    a.push_back({"num_requests", AxisType::kInt, "0", {}, "requests (0 = the workload's)"});
    a.push_back(AxisSpec{"rate", AxisType::kFloat, "0", {},
                         "arrival rate, requests/s (0 = the workload's)"}
                    .real_range(0, 1e9));
    a.push_back({"workload_seed", AxisType::kInt, "0", {}, "workload seed (0 = the workload's)"});
    a.push_back(AxisSpec{"length_scale", AxisType::kFloat, "1", {},
                         "every token length of the workload times this (a smaller replica)"}
                    .real_range(0, 1e3, /*exclude_lo=*/true));
    a.push_back({"kv_blocks",
                 AxisType::kInt,
                 "4096",
                 {},
                 "the engine's KV blocks (<= pool_blocks): the capacity that causes preemption"});
    a.push_back(AxisSpec{"watermark", AxisType::kFloat, "0.01", {},
                         "fraction of blocks an admission must leave free"}
                    .real_range(0, 1));
    a.push_back({"prefix_caching",
                 AxisType::kEnum,
                 "off",
                 {"off", "on"},
                 "share full prompt blocks by content hash"});
    a.push_back({"calibration",
                 AxisType::kString,
                 "none",
                 {},
                 "result file with serving_step points of this executor (the prediction's model); "
                 "none: sim's roofline (graph launch model)"});
    a.push_back({"executor",
                 AxisType::kEnum,
                 "gpu",
                 {"gpu", "roofline"},
                 "gpu: the measured run; roofline: sim's roofline clock stands in for the GPU (a "
                 "pipeline test without a GPU, not a measurement)"});
    return a;
  }
  std::vector<MetricSpec> metrics() const override {
    std::vector<MetricSpec> m = {
        {"requests", "", "requests in the workload"},
        {"num_finished", "", "finished in the measured run"},
        {"num_rejected", "", "could never run with this configuration (both runs)"},
        {"steps_measured", "", "engine steps of the measured run"},
        {"steps_predicted", "", "engine steps of the prediction"},
        {"makespan_measured_s", "s", "measured engine clock at the end"},
        {"makespan_predicted_s", "s", "predicted engine clock at the end"},
    };
    for (const char* k : {"mean_ttft_s", "mean_tpot_s", "mean_e2e_s", "throughput_tok_s",
                          "p50_ttft_s", "p99_ttft_s", "p50_tpot_s", "p99_tpot_s", "preemptions"}) {
      const std::string unit = std::string(k) == "preemptions"        ? ""
                               : std::string(k) == "throughput_tok_s" ? "tok/s"
                                                                      : "s";
      m.push_back({std::string("measured_") + k, unit, "measured run"});
      m.push_back({std::string("predicted_") + k, unit, "predicted run"});
      m.push_back({std::string("error_") + k, "", "(predicted - measured) / measured"});
    }
    for (const auto& x : std::vector<MetricSpec>{
             {"target_tpot_held", "", "1 when |error of mean TPOT| <= 5 %"},
             {"target_throughput_held", "", "1 when |error of throughput| <= 5 %"},
             {"target_ttft_held", "", "1 when |error of mean TTFT| <= 10 %"},
             {"target_preemptions_held", "",
              "1 when the preemption counts agree within 10 % (both 0 counts as held)"},
             {"decisions_identical_steps", "", "steps with equal decision hashes (same index)"},
             {"decisions_first_divergence", "", "first step that differs (-1: identical)"},
             {"decisions_explained", "",
              "1 when identical or the runs had seen different arrivals at the divergence"},
             {"replay_identical", "", "1: the engine fed the measured durations decided alike"},
             {"step_residual_median", "", "median |model(step) - measured| / measured"},
             {"step_residual_mean", "", "mean (model(step) - measured) / measured (bias)"},
             {"step_residual_mean_graph", "", "the same over CUDA-graph steps"},
             {"step_residual_mean_eager", "", "the same over eager (mixed) steps"},
             {"mean_host_us", "us", "mean host time of scheduling + batch building per step"},
             {"mean_device_fraction", "", "mean device time / step duration (measured run)"},
             {"graph_steps", "", "measured steps replayed as CUDA graphs"},
             {"prefix_hit_rate_measured", "", "prompt tokens from the prefix cache / looked up"},
             {"elasticity_mean_ttft", "",
              "d ln(predicted mean TTFT) / d ln(step time), from the model's clock x 0.99 and "
              "x 1.01: the TTFT error a 1 % step-time error causes (queueing amplifies it)"},
             {"elasticity_mean_tpot", "", "the same for mean TPOT"},
             {"elasticity_throughput", "", "the same for throughput"},
             {"preemptions_band_min", "",
              "fewest predicted preemptions with the model's clock x 0.98, 0.99, 1, 1.01, 1.02"},
             {"preemptions_band_max", "", "most predicted preemptions over the same clocks"},
             {"calibration_records", "", "serving_step records the model was fitted to"},
             {"calibration_median_error_loo", "",
              "leave-one-out median |error| of the model on its calibration steps"},
             {"calibration_max_error_loo", "", "leave-one-out max |error|"}})
      m.push_back(x);
    return m;
  }
  bool needs_gpu() const override { return false; }  // executor = roofline runs without one
  void check_point(const Point& p) const override {
    const ServingExecutorConfig c = serving_executor_config(p);
    const std::vector<sim::Request> reqs = serving_requests(p, nullptr);
    engine_config(p, c);
    for (const auto& q : reqs)
      if (int64_t{q.prompt_tokens} + q.output_tokens > c.max_context)
        throw InvalidArgument("request " + std::to_string(q.id) + " holds " +
                              std::to_string(q.prompt_tokens + q.output_tokens) +
                              " tokens, above max_context " + std::to_string(c.max_context));
    if (p.str("calibration") != "none") read_serving_step_records(p.str("calibration"), c);
  }
  std::string unsupported_reason(const Point& p, const RunContext& ctx) const override {
    if (p.str("executor") != "gpu") return "";
    if (!built_with_cuda()) return "built without CUDA";
    return ctx.device_present ? "" : "no device";
  }
  double estimate_seconds(const Point& p, const RunContext&) const override {
    const double n = p.integer("num_requests") > 0 ? double(p.integer("num_requests")) : 500.0;
    return p.str("executor") == "gpu" ? 2.0 + 0.05 * n : 0.05 + 2e-3 * n;
  }
  Record run(const Point& p, RunContext& ctx) override;
};

Record ServingBench::run(const Point& p, RunContext&) {
  const ServingExecutorConfig c = serving_executor_config(p);
  std::string desc;
  const std::vector<sim::Request> reqs = serving_requests(p, &desc);
  const sim::EngineConfig ec = engine_config(p, c);
  const bool on_gpu = p.str("executor") == "gpu";

  // The prediction's model, fitted to the calibration file alone.
  std::shared_ptr<const sim::StepTimeModel> model;
  sim::ServingStepFit fit;
  std::vector<sim::StepPartsRecord> cal;
  std::string model_desc;
  if (p.str("calibration") != "none") {
    cal = read_serving_step_records(p.str("calibration"), c);
    sim::ServingStepModelConfig mc;
    mc.graph_decode = c.graph;
    mc.graph_buckets = sim::default_graph_buckets(c.max_num_seqs);
    fit = sim::fit_serving_step_model(cal, mc);
    model = std::make_shared<sim::ServingStepModel>(fit.model);
    model_desc = "serving step model fitted to " + std::to_string(cal.size()) +
                 " serving_step points of " + p.str("calibration") + ": " + fit.model.describe();
  } else {
    model = roofline(c.decoder, c.graph ? sim::LaunchMode::kCudaGraph : sim::LaunchMode::kEager);
    model_desc = "sim roofline (uncalibrated), " + std::string(c.graph ? "graph" : "eager");
  }

  // The measured run.
  sim::ServingRun meas;
  std::string clock;
  int32_t max_blocks = 0;
  if (on_gpu) {
    sim::StepExecutor& ex = serving_executor(c);  // Unsupported without CUDA: skipped
    max_blocks = ex.max_blocks_per_seq();
    meas = sim::run_serving(ec, reqs, &ex);
    clock = "GPU wall clock (" + c.key() + ")";
  } else {
    // Eager launch model on the "measured" side, so the two clocks differ.
    meas = sim::run_serving(ec, reqs, nullptr, roofline(c.decoder, sim::LaunchMode::kEager));
    max_blocks = static_cast<int32_t>((c.max_context + c.block_size - 1) / c.block_size);
    clock =
        "sim roofline, eager launch model (executor = roofline: a pipeline test, not a "
        "measurement)";
  }
  // Replay: the engine fed the measured durations must decide exactly alike.
  sim::ReplayExecutor replay_ex(meas.duration_s, max_blocks);
  sim::ServingRunOptions exact;
  exact.include_host_time = false;
  const sim::ServingRun replay = sim::run_serving(ec, reqs, &replay_ex, nullptr, exact);
  const sim::DecisionComparison rc = sim::compare_decisions(meas, replay, reqs);
  // The prediction.
  const sim::ServingRun pred = sim::run_serving(ec, reqs, nullptr, model);
  const sim::DecisionComparison dc = sim::compare_decisions(meas, pred, reqs);

  const sim::SimSummary& ms = meas.result.summary;
  const sim::SimSummary& ps = pred.result.summary;
  Record r;
  r.metric("requests", static_cast<double>(ms.num_requests));
  r.metric("num_finished", static_cast<double>(ms.num_finished));
  r.metric("num_rejected", static_cast<double>(ms.num_rejected));
  r.metric("steps_measured", static_cast<double>(ms.num_steps));
  r.metric("steps_predicted", static_cast<double>(ps.num_steps));
  r.metric("makespan_measured_s", ms.sim_time_s);
  r.metric("makespan_predicted_s", ps.sim_time_s);
  auto pair = [&](const std::string& k, double mv, double pv) {
    r.metric("measured_" + k, mv);
    r.metric("predicted_" + k, pv);
    r.metric("error_" + k, rel(pv, mv));
  };
  pair("mean_ttft_s", ms.mean_ttft_s, ps.mean_ttft_s);
  pair("mean_tpot_s", ms.mean_tpot_s, ps.mean_tpot_s);
  pair("mean_e2e_s", ms.mean_e2e_s, ps.mean_e2e_s);
  pair("throughput_tok_s", ms.output_tokens_per_s, ps.output_tokens_per_s);
  pair("p50_ttft_s", ms.p50_ttft_s, ps.p50_ttft_s);
  pair("p99_ttft_s", ms.p99_ttft_s, ps.p99_ttft_s);
  pair("p50_tpot_s", ms.p50_tpot_s, ps.p50_tpot_s);
  pair("p99_tpot_s", ms.p99_tpot_s, ps.p99_tpot_s);
  pair("preemptions", static_cast<double>(ms.num_preemptions),
       static_cast<double>(ps.num_preemptions));
  auto held = [](double err, double bound) { return std::fabs(err) <= bound ? 1.0 : 0.0; };
  r.metric("target_tpot_held", held(rel(ps.mean_tpot_s, ms.mean_tpot_s), 0.05));
  r.metric("target_throughput_held",
           held(rel(ps.output_tokens_per_s, ms.output_tokens_per_s), 0.05));
  r.metric("target_ttft_held", held(rel(ps.mean_ttft_s, ms.mean_ttft_s), 0.10));
  r.metric("target_preemptions_held", ms.num_preemptions == 0 && ps.num_preemptions == 0
                                          ? 1.0
                                          : held(rel(static_cast<double>(ps.num_preemptions),
                                                     static_cast<double>(ms.num_preemptions)),
                                                 0.10));
  r.metric("decisions_identical_steps", static_cast<double>(dc.identical_steps));
  r.metric("decisions_first_divergence", static_cast<double>(dc.first_divergence));
  r.metric("decisions_explained", dc.explained() ? 1.0 : 0.0);
  r.metric("replay_identical", rc.identical() ? 1.0 : 0.0);

  // Sensitivity of the prediction to its own clock (the chaos band of a serving run).
  {
    std::map<double, sim::SimSummary> band;
    for (double f : {0.98, 0.99, 1.01, 1.02})
      band[f] = sim::run_serving(ec, reqs, nullptr, std::make_shared<ScaledStepTime>(model, f))
                    .result.summary;
    band[1.0] = ps;
    auto elasticity = [&](double sim::SimSummary::*field) {
      const double lo = band[0.99].*field, hi = band[1.01].*field, mid = band[1.0].*field;
      return mid != 0 ? (hi - lo) / (0.02 * mid) : kNaN;
    };
    r.metric("elasticity_mean_ttft", elasticity(&sim::SimSummary::mean_ttft_s));
    r.metric("elasticity_mean_tpot", elasticity(&sim::SimSummary::mean_tpot_s));
    r.metric("elasticity_throughput", elasticity(&sim::SimSummary::output_tokens_per_s));
    int64_t lo = ps.num_preemptions, hi = ps.num_preemptions;
    for (const auto& [f, s] : band)
      lo = std::min(lo, s.num_preemptions), hi = std::max(hi, s.num_preemptions);
    r.metric("preemptions_band_min", static_cast<double>(lo));
    r.metric("preemptions_band_max", static_cast<double>(hi));
  }

  // Per measured step: the model's time for the same shape.
  const size_t n = meas.shapes.size();
  std::vector<double> pstep(n), resid(n), abs_resid(n);
  std::vector<int32_t> graph_flag(n);
  std::vector<double> rg, re;
  for (size_t k = 0; k < n; ++k) {
    pstep[k] = model->step_cost(meas.shapes[k]).total_s;
    resid[k] = rel(pstep[k], meas.duration_s[k]);
    abs_resid[k] = std::fabs(resid[k]);
    const bool g =
        c.graph && meas.shapes[k].prefill_tokens == 0 && meas.shapes[k].num_decode_seqs > 0;
    graph_flag[k] = g ? 1 : 0;
    (g ? rg : re).push_back(resid[k]);
  }
  r.metric("step_residual_median", sim::median(abs_resid));
  r.metric("step_residual_mean", mean_finite(resid));
  r.metric("step_residual_mean_graph", mean_finite(rg));
  r.metric("step_residual_mean_eager", mean_finite(re));
  r.metric("mean_host_us", 1e6 * mean_finite(meas.host_s));
  std::vector<double> devfrac(n);
  for (size_t k = 0; k < n; ++k) devfrac[k] = meas.device_s[k] / meas.duration_s[k];
  r.metric("mean_device_fraction", mean_finite(devfrac));
  r.metric("graph_steps",
           static_cast<double>(std::accumulate(graph_flag.begin(), graph_flag.end(), 0)));
  r.metric("prefix_hit_rate_measured", ms.prefix_query_tokens > 0
                                           ? static_cast<double>(ms.prefix_hit_tokens) /
                                                 static_cast<double>(ms.prefix_query_tokens)
                                           : 0.0);
  r.metric("calibration_records", static_cast<double>(cal.size()));
  r.metric("calibration_median_error_loo", cal.empty() ? kNaN : fit.median_abs_rel_error_loo);
  r.metric("calibration_max_error_loo", cal.empty() ? kNaN : fit.max_abs_rel_error_loo);
  r.label("workload_description", desc);
  r.label("clock_measured", clock);
  r.label("model", model_desc);
  r.label("decisions", dc.explanation);
  r.label("replay", rc.explanation);

  // Traces.
  const sim::RequestResults& mq = meas.result.requests;
  const sim::RequestResults& pq = pred.result.requests;
  TableTrace rq("requests",
                "per request, workload order: the measured run and the prediction (status 0 "
                "finished, 1 rejected, 2 unfinished)");
  rq.add("id", mq.id)
      .add("arrival_s", mq.arrival_s, "s")
      .add("prompt_tokens", mq.prompt_tokens)
      .add("output_tokens", mq.output_tokens)
      .add("status", mq.status)
      .add("ttft_measured_s", mq.ttft_s, "s")
      .add("ttft_predicted_s", pq.ttft_s, "s")
      .add("tpot_measured_s", mq.tpot_s, "s", "NaN for one output token")
      .add("tpot_predicted_s", pq.tpot_s, "s")
      .add("e2e_measured_s", mq.e2e_s, "s")
      .add("e2e_predicted_s", pq.e2e_s, "s")
      .add("preemptions_measured", mq.num_preemptions)
      .add("preemptions_predicted", pq.num_preemptions)
      .add("prefix_hit_tokens_measured", mq.prefix_hit_tokens);
  r.traces.push_back(rq.take());

  const sim::StepTrace& st = meas.result.steps;
  auto col = [&](auto get) {
    std::vector<decltype(get(meas.shapes[0]))> v;
    for (const auto& s : meas.shapes) v.push_back(get(s));
    return v;
  };
  auto hashes = [](const std::vector<uint64_t>& h) {
    return std::vector<int64_t>(h.begin(), h.end());  // bit pattern kept (two's complement)
  };
  TableTrace steps("steps",
                   "per measured step: shape, measured duration (what complete() got), the "
                   "model's time for the same shape, host/device split, decision hash");
  steps.add("step", st.step)
      .add("time_s", st.time_s, "s", "engine clock at the end of the step")
      .add("duration_s", meas.duration_s, "s", "measured step time fed to complete()")
      .add("predicted_s", pstep, "s", "the model's time for this step's shape")
      .add("residual", resid, "", "(predicted - measured) / measured")
      .add("exec_wall_s", meas.exec_wall_s, "s", "executor wall time (upload to download)")
      .add("device_s", meas.device_s, "s", "device time of the step")
      .add("host_s", meas.host_s, "s", "scheduling + batch building")
      .add("graph", graph_flag, "", "1: CUDA-graph replay")
      .add("rows", meas.num_rows, "", "token rows")
      .add("num_decode_seqs", col([](const sim::StepShape& s) { return s.num_decode_seqs; }))
      .add("decode_context_tokens",
           col([](const sim::StepShape& s) { return s.decode_context_tokens; }))
      .add("num_prefill_seqs", col([](const sim::StepShape& s) { return s.num_prefill_seqs; }))
      .add("prefill_tokens", col([](const sim::StepShape& s) { return s.prefill_tokens; }))
      .add("prefill_attn_pairs", col([](const sim::StepShape& s) { return s.prefill_attn_pairs; }))
      .add("num_sampled", col([](const sim::StepShape& s) { return s.num_sampled; }))
      .add("num_running", st.num_running)
      .add("num_waiting", st.num_waiting)
      .add("num_preempted", st.num_preempted)
      .add("decision_hash", hashes(meas.decision_hash), "", "64-bit hash of the step's decisions");
  r.traces.push_back(steps.take());

  const sim::StepTrace& pt = pred.result.steps;
  TableTrace psteps("steps_predicted", "per predicted step: clock, duration, decision hash");
  psteps.add("step", pt.step)
      .add("time_s", pt.time_s, "s")
      .add("duration_s", pt.duration_s, "s")
      .add("num_tokens", pt.num_tokens)
      .add("num_decode_seqs", pt.num_decode_seqs)
      .add("num_prefill_seqs", pt.num_prefill_seqs)
      .add("num_preempted", pt.num_preempted)
      .add("decision_hash", hashes(pred.decision_hash));
  r.traces.push_back(psteps.take());

  if (!cal.empty()) {
    std::vector<double> tot, graph, rows, nd, np, ptok;
    for (const auto& x : cal) {
      tot.push_back(x.total_s);
      graph.push_back(x.graph ? 1 : 0);
      rows.push_back(static_cast<double>(x.rows));
      nd.push_back(static_cast<double>(x.shape.num_decode_seqs));
      np.push_back(static_cast<double>(x.shape.num_prefill_seqs));
      ptok.push_back(static_cast<double>(x.shape.prefill_tokens));
    }
    TableTrace ct("calibration",
                  "the serving_step records the model was fitted to: measured step time, the "
                  "model's (in sample) and the model refitted without the record (leave-one-out)");
    ct.add("measured_s", tot, "s")
        .add("predicted_s", fit.predicted_s, "s")
        .add("predicted_loo_s", fit.predicted_loo_s, "s")
        .add("graph", graph)
        .add("rows", rows)
        .add("num_decode_seqs", nd)
        .add("num_prefill_seqs", np)
        .add("prefill_tokens", ptok);
    r.traces.push_back(ct.take());
  }
  if (!rc.identical()) {
    r.status = Status::kFailed;
    r.reason = "replaying the measured step durations changed the engine's decisions (" +
               rc.explanation + "): the engine is not deterministic";
  }
  return r;
}

}  // namespace

std::unique_ptr<Bench> make_serving_bench() {
  return std::make_unique<ServingBench>();
}

}  // namespace kvlab::exp
