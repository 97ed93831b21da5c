// simulate.cpp: bench "simulate": one serving simulation (sim/engine) per point, and the
// shared code of `kvlab simulate` (one config -> one point -> HDF5).
//
// A point: a workload (data/workloads/*.cfg spec or data/traces/*.csv trace, optionally with
// another request count / arrival rate / seed) served by a model preset on a GPU of the table
// with a KV storage format, block size, KV budget, watermark, preemption mode, prefix caching
// and reservation policy; step durations come from the roofline cost model (sim/cost; its
// decode-attention terms from a `kvlab calibrate` file when the calibration axis names one)
// on the virtual clock. The record holds the summary (throughput, TTFT/TPOT percentiles,
// preemptions, prefix hits, ledger means: token / slack / reserved / cached / free slots and
// the waste fractions) and three traces:
//   steps     per recorded step: batch shape, queue sizes, preemptions, cost breakdown, and
//             the memory ledger at the end of the step (token + slack + reserved + cached +
//             free = capacity_slots in every row)
//   requests  per request: arrival, lengths, status, TTFT, TPOT, end-to-end, preemptions,
//             swaps, prefix-cache hits
// The engine records every step; long runs are thinned to at most `trace_rows` rows by a
// fixed stride (every k-th step, recorded as trace_stride); the summary always covers every
// step.
#include <algorithm>
#include <cmath>
#include <string>
#include <unistd.h>

#include "experiments/calibrate/calibrate.h"
#include "experiments/bench/table_trace.h"
#include "experiments/kinds/kinds.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "sim/core/text.h"
#include "sim/cost/gpu_spec.h"
#include "sim/cost/roofline.h"
#include "sim/engine/engine.h"
#include "sim/model/model_stack.h"
#include "sim/plan/capacity.h"
#include "sim/workload/trace_csv.h"
#include "sim/workload/workload.h"

namespace kvlab::exp {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "chat_poisson" -> data/workloads/chat_poisson.cfg; "synthetic_chat.csv" -> data/traces/...;
// a path that exists is taken as given. InvalidArgument naming the places tried.
std::string resolve_workload(const std::string& w) {
  if (w.empty()) throw InvalidArgument("workload: empty name");
  if (access(w.c_str(), R_OK) == 0) return w;
  if (!ends_with(w, ".cfg") && !ends_with(w, ".csv")) {
    try {
      return sim::find_data_file("workloads/" + w + ".cfg");
    } catch (const InvalidArgument&) {
      throw InvalidArgument(
          "workload '" + w +
          "' is neither a file nor a spec in data/workloads (shipped: bursty_zipf, chat_poisson, "
          "offline_batch, shared_prefix; or give a path to a .cfg spec or a .csv trace)");
    }
  }
  const std::string sub = ends_with(w, ".csv") ? "traces/" : "workloads/";
  try {
    return sim::find_data_file(w.find('/') == std::string::npos ? sub + w : w);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument("workload '" + w + "' not found: " + e.what());
  }
}

}  // namespace

// The requests of a simulate point (also checked by check_point before any run).
std::vector<sim::Request> simulate_requests(const Point& p, std::string* description) {
  const std::string path = resolve_workload(p.str("workload"));
  const int64_t n = p.integer("num_requests");
  const double rate = p.number("rate");
  const int64_t seed = p.integer("workload_seed");
  if (n < 0)
    throw InvalidArgument("num_requests must be >= 0 (0 = the workload's), got " +
                          std::to_string(n));
  if (!(rate >= 0))
    throw InvalidArgument("rate must be >= 0 (0 = the workload's), got " + p.str("rate"));
  if (seed < 0)
    throw InvalidArgument("workload_seed must be >= 0 (0 = the workload's), got " +
                          std::to_string(seed));
  std::vector<sim::Request> reqs;
  if (ends_with(path, ".csv")) {
    if (rate > 0 || seed > 0)
      throw InvalidArgument(
          "workload " + path +
          " is a trace: rate and workload_seed apply to generated workloads only");
    reqs = sim::load_trace_csv(path);
    if (n > 0) {
      if (n > static_cast<int64_t>(reqs.size()))
        throw InvalidArgument("num_requests " + std::to_string(n) + ": the trace " + path +
                              " holds only " + std::to_string(reqs.size()) + " requests");
      reqs.resize(static_cast<size_t>(n));
    }
    if (description)
      *description = "trace " + path + " (" + std::to_string(reqs.size()) + " requests)";
  } else {
    sim::WorkloadSpec w = sim::load_workload_spec(path);
    if (n > 0) w.num_requests = n;
    if (rate > 0) {
      if (w.arrival.kind == sim::ArrivalKind::kAllAtOnce)
        throw InvalidArgument("workload " + path +
                              " arrives all at once: it has no rate to override");
      w.arrival.rate = rate;
    }
    if (seed > 0) w.seed = static_cast<uint64_t>(seed);
    w.validate();
    reqs = sim::generate_workload(w);
    if (description)
      *description = path + ": " + std::to_string(w.num_requests) + " requests, " +
                     w.arrival.str() + ", prompt " + w.prompt.str() + ", output " + w.output.str() +
                     ", seed " + std::to_string(w.seed);
  }
  return reqs;
}

namespace {

class SimulateBench : public Bench {
 public:
  std::string name() const override { return "simulate"; }
  std::string summary() const override {
    return "serving simulation (sim/engine on the roofline clock): throughput, TTFT/TPOT, "
           "preemptions, memory ledger";
  }
  std::vector<AxisSpec> axes() const override {
    return {
        AxisSpec{"workload", AxisType::kString, "chat_poisson", {},
                 "data/workloads spec name, or a path to a .cfg spec or a .csv trace"}
            .checked_by(known_by(resolve_workload)),
        AxisSpec{"num_requests", AxisType::kInt, "0", {},
                 "requests (0 = the workload's; a trace is cut to its first N)"}
            .range(0, 1 << 24),
        AxisSpec{"rate", AxisType::kFloat, "0", {},
                 "arrival rate, requests/s (0 = the workload's)"}
            .real_range(0, 1e9),
        AxisSpec{"workload_seed", AxisType::kInt, "0", {}, "workload seed (0 = the workload's)"}
            .range(0, kMaxSeed),
        {"model", AxisType::kEnum, "llama3.1-8b", sim::model_preset_names(),
         "model preset (sim/model)"},
        AxisSpec{"gpu", AxisType::kString, "H100", {},
                 "GPU of data/gpus/gpus.csv (memory and roofline)"}
            .checked_by(known_by(sim::gpu_spec)),
        {"kv_format", AxisType::kEnum, "bf16", kv_format_names(), "KV storage format",
         format_name_aliases()},
        AxisSpec{"block_size", AxisType::kInt, "16", {}, "tokens per KV block"}.range(1, 1 << 16),
        AxisSpec{"kv_gib", AxisType::kFloat, "0", {},
                 "KV budget in GiB (0 = the GPU's memory x gpu_mem_util minus weights and 2 GiB "
                 "of activations)"}
            .real_range(0, 1 << 20),
        AxisSpec{"gpu_mem_util", AxisType::kFloat, "0.9", {},
                 "fraction of GPU memory the engine may use (kv_gib = 0)"}
            .real_range(0, 1, /*exclude_lo=*/true),
        AxisSpec{"watermark", AxisType::kFloat, "0.01", {},
                 "fraction of blocks an admission must leave free (below 1)"}
            .real_range(0, 1),
        {"preemption",
         AxisType::kEnum,
         "recompute",
         {"recompute", "swap"},
         "what a preempted request loses"},
        AxisSpec{"swap_gib", AxisType::kFloat, "16", {},
                 "host swap space in GiB (preemption = swap)"}
            .real_range(0, 1 << 20),
        {"prefix_caching",
         AxisType::kEnum,
         "off",
         {"off", "on"},
         "share full prompt blocks by content hash"},
        {"reserve",
         AxisType::kEnum,
         "on_demand",
         {"on_demand", "full_sequence"},
         "blocks as tokens arrive (vLLM), or all at admission (no preemption)"},
        AxisSpec{"max_num_seqs", AxisType::kInt, "256", {}, "running requests at most"}.range(
            1, 1 << 20),
        AxisSpec{"max_num_batched_tokens", AxisType::kInt, "8192", {}, "token budget per step"}
            .range(1, 1 << 30),
        {"chunked_prefill", AxisType::kEnum, "on", {"on", "off"}, "split prompts across steps"},
        {"launch",
         AxisType::kEnum,
         "graph",
         {"graph", "eager"},
         "launch model of the step cost (CUDA graph or eager)"},
        AxisSpec{"calibration", AxisType::kString, "none", {},
                 "decode-attention calibration: a `kvlab calibrate --out` file for this gpu "
                 "(none = uncalibrated roofline)"}
            .checked_by([](const std::string& v) -> std::string {
              if (v == "none") return "";
              try {
                read_decode_calibration(v);
              } catch (const std::exception& e) {
                return e.what();
              }
              return "";
            }),
        AxisSpec{"max_steps", AxisType::kInt, "0", {},
                 "stop after this many steps (0 = run to completion)"}
            .range(0, int64_t{1} << 40),
        AxisSpec{"trace_rows", AxisType::kInt, "1000", {},
                 "at most this many rows in the steps trace (0 = every step)"}
            .range(0, 1 << 30),
    };
  }
  std::vector<MetricSpec> metrics() const override {
    return {
        {"requests", "", "requests in the workload"},
        {"num_finished", "", "requests finished"},
        {"num_rejected", "", "requests that could never run with this configuration"},
        {"num_unfinished", "", "requests not finished when max_steps stopped the run"},
        {"num_steps", "", "engine steps"},
        {"sim_time_s", "s", "virtual time at the end"},
        {"output_tokens_per_s", "tok/s", "finished output tokens / sim_time_s"},
        {"mean_ttft_s", "s", "mean time to first token"},
        {"p50_ttft_s", "s", "median time to first token"},
        {"p99_ttft_s", "s", "99th percentile time to first token"},
        {"mean_tpot_s", "s", "mean time per output token after the first"},
        {"p50_tpot_s", "s", "median time per output token"},
        {"p99_tpot_s", "s", "99th percentile time per output token"},
        {"mean_e2e_s", "s", "mean end-to-end latency"},
        {"p99_e2e_s", "s", "99th percentile end-to-end latency"},
        {"num_preemptions", "", "recompute preemptions"},
        {"num_swaps", "", "swap-outs"},
        {"computed_tokens", "", "tokens computed (recomputation included)"},
        {"prefix_hit_rate", "",
         "prompt tokens served by the prefix cache / prompt tokens looked up"},
        {"num_evictions", "", "prefix-cache blocks evicted"},
        {"mean_running", "", "running requests, mean per step"},
        {"peak_running", "", "running requests, peak"},
        {"kv_budget_bytes", "B", "KV budget"},
        {"block_bytes", "B", "bytes per block (every layer, K and V, scales)"},
        {"num_blocks", "", "KV blocks"},
        {"capacity_slots", "", "token slots (num_blocks * block_size)"},
        {"mean_token_slots", "", "slots holding KV, mean per step"},
        {"mean_slack_slots", "", "empty slots of partly filled blocks, mean per step"},
        {"mean_reserved_slots", "", "slots of allocated blocks with no token yet, mean per step"},
        {"mean_cached_slots", "", "slots of evictable prefix-cache blocks, mean per step"},
        {"mean_free_slots", "", "slots of free blocks, mean per step"},
        {"peak_used_slots", "", "token + slack + reserved slots, peak"},
        {"mean_slack_per_seq", "",
         "slack slots per running request (PagedAttention: about (block_size-1)/2)"},
        {"slack_fraction", "",
         "mean slack / mean used slots (used = token + slack + reserved): last-block waste"},
        {"waste_fraction", "", "mean (slack + reserved) / mean used slots"},
        {"kv_utilization", "", "mean token slots / capacity slots"},
        {"trace_stride", "", "the steps trace holds every k-th step"}};
  }
  void check_point(const Point& p) const override {
    simulate_requests(p, nullptr);
    if (p.str("calibration") != "none")
      apply_decode_calibration(read_decode_calibration(p.str("calibration")),
                               sim::gpu_spec(p.str("gpu")), {});
    try {
      engine_config(p);  // the engine's own rules (blocks left after the watermark, swap space)
    } catch (const Unsupported&) {
      // the model does not fit this GPU or format: recorded as skipped when it runs
    }
  }
  double estimate_seconds(const Point& p, const RunContext&) const override {
    // About 1.5 us per request-step on this 2-core machine; a request lives for roughly
    // its output length in steps, and batches of up to max_num_seqs share a step.
    const double n =
        p.integer("num_requests") > 0 ? static_cast<double>(p.integer("num_requests")) : 2000.0;
    return 0.05 + 1.5e-4 * n;
  }
  // The engine configuration of a point (Unsupported: it cannot fit; InvalidArgument: the
  // engine's rules refuse it), with the budget and footprint it came from.
  struct Setup {
    sim::EngineConfig cfg;
    int64_t budget = 0;
    sim::KvFootprint fp;
  };
  static Setup engine_config(const Point& p) {
    const sim::ModelStack model = sim::model_preset(p.str("model"));
    const sim::GpuSpec gpu = sim::gpu_spec(p.str("gpu"));
    const KvFormat format = parse_kv_format(p.str("kv_format"));
    const int32_t block_size = static_cast<int32_t>(p.integer("block_size"));
    sim::KvFootprint fp;
    try {
      fp = sim::kv_footprint(model, block_size, format);
    } catch (const InvalidArgument& e) {
      throw Unsupported(e.what());  // e.g. a format whose groups the head_dim does not fill
    }
    int64_t budget = 0;
    if (p.number("kv_gib") > 0) {
      budget = static_cast<int64_t>(std::floor(p.number("kv_gib") * (1ull << 30)));
    } else {
      try {
        budget = sim::kv_budget_on_gpu(gpu, model, p.number("gpu_mem_util"), int64_t{2048} << 20);
      } catch (const InvalidArgument& e) {
        throw Unsupported(e.what());  // the model does not fit on the GPU
      }
    }
    sim::EngineConfig cfg;
    cfg.block_size = block_size;
    cfg.block_bytes = fp.block;
    cfg.per_request_bytes = fp.per_request_bytes;
    cfg.num_blocks = budget / fp.block.total();
    cfg.max_num_seqs = static_cast<int32_t>(p.integer("max_num_seqs"));
    cfg.max_num_batched_tokens = p.integer("max_num_batched_tokens");
    cfg.chunked_prefill = p.str("chunked_prefill") == "on";
    cfg.watermark = p.number("watermark");
    cfg.preemption = sim::parse_preemption_mode(p.str("preemption"));
    cfg.swap_blocks = cfg.preemption == sim::PreemptionMode::kSwap
                          ? static_cast<int64_t>(std::floor(p.number("swap_gib") * (1ull << 30))) /
                                fp.block.total()
                          : 0;
    cfg.reserve = sim::parse_reserve_policy(p.str("reserve"));
    cfg.prefix_caching = p.str("prefix_caching") == "on";
    cfg.max_steps = p.integer("max_steps");
    cfg.trace_every = 1;
    cfg.validate();
    return {cfg, budget, fp};
  }

  Record run(const Point& p, RunContext&) override {
    std::string workload_desc;
    const std::vector<sim::Request> reqs = simulate_requests(p, &workload_desc);
    const sim::ModelStack model = sim::model_preset(p.str("model"));
    const sim::GpuSpec gpu = sim::gpu_spec(p.str("gpu"));
    const KvFormat format = parse_kv_format(p.str("kv_format"));
    const Setup setup = engine_config(p);
    const sim::EngineConfig& cfg = setup.cfg;
    const int64_t budget = setup.budget;
    const sim::KvFootprint& fp = setup.fp;
    sim::CostModelConfig cc;
    cc.launch = p.str("launch") == "graph" ? sim::LaunchMode::kCudaGraph : sim::LaunchMode::kEager;
    if (p.str("calibration") != "none")
      cc = apply_decode_calibration(read_decode_calibration(p.str("calibration")), gpu, cc);
    auto timer = std::make_shared<sim::RooflineStepTime>(sim::CostModel(gpu, model, format, cc));
    const sim::SimResult res = sim::Engine(cfg, timer).run(reqs);
    const sim::SimSummary& s = res.summary;
    const sim::LedgerSummary& l = s.ledger;

    Record r;
    r.metric("requests", static_cast<double>(s.num_requests));
    r.metric("num_finished", static_cast<double>(s.num_finished));
    r.metric("num_rejected", static_cast<double>(s.num_rejected));
    r.metric("num_unfinished", static_cast<double>(s.num_unfinished));
    r.metric("num_steps", static_cast<double>(s.num_steps));
    r.metric("sim_time_s", s.sim_time_s);
    r.metric("output_tokens_per_s", s.output_tokens_per_s);
    r.metric("mean_ttft_s", s.mean_ttft_s);
    r.metric("p50_ttft_s", s.p50_ttft_s);
    r.metric("p99_ttft_s", s.p99_ttft_s);
    r.metric("mean_tpot_s", s.mean_tpot_s);
    r.metric("p50_tpot_s", s.p50_tpot_s);
    r.metric("p99_tpot_s", s.p99_tpot_s);
    r.metric("mean_e2e_s", s.mean_e2e_s);
    r.metric("p99_e2e_s", s.p99_e2e_s);
    r.metric("num_preemptions", static_cast<double>(s.num_preemptions));
    r.metric("num_swaps", static_cast<double>(s.num_swaps));
    r.metric("computed_tokens", static_cast<double>(s.computed_tokens));
    r.metric("prefix_hit_rate", s.prefix_query_tokens > 0
                                    ? static_cast<double>(s.prefix_hit_tokens) /
                                          static_cast<double>(s.prefix_query_tokens)
                                    : 0.0);
    r.metric("num_evictions", static_cast<double>(s.num_evictions));
    r.metric("mean_running", s.mean_running);
    r.metric("peak_running", s.peak_running);
    r.metric("kv_budget_bytes", static_cast<double>(budget));
    r.metric("block_bytes", static_cast<double>(fp.block.total()));
    r.metric("num_blocks", static_cast<double>(l.capacity_blocks));
    r.metric("capacity_slots", static_cast<double>(l.capacity_slots));
    r.metric("mean_token_slots", l.mean_token_slots);
    r.metric("mean_slack_slots", l.mean_slack_slots);
    r.metric("mean_reserved_slots", l.mean_reserved_slots);
    r.metric("mean_cached_slots", l.mean_cached_slots);
    r.metric("mean_free_slots", l.mean_free_slots);
    r.metric("peak_used_slots", static_cast<double>(l.peak_used_slots));
    r.metric("mean_slack_per_seq", l.mean_slack_per_seq);
    const double used = l.mean_token_slots + l.mean_slack_slots + l.mean_reserved_slots;
    r.metric("slack_fraction", used > 0 ? l.mean_slack_slots / used : 0.0);
    r.metric("waste_fraction",
             used > 0 ? (l.mean_slack_slots + l.mean_reserved_slots) / used : 0.0);
    r.metric("kv_utilization", l.capacity_slots > 0
                                   ? l.mean_token_slots / static_cast<double>(l.capacity_slots)
                                   : 0.0);
    r.label("workload_description", workload_desc);

    // Steps trace, thinned to at most trace_rows rows by a fixed stride.
    const sim::StepTrace& st = res.steps;
    const sim::LedgerTrace& lg = res.ledger;
    const int64_t rows = static_cast<int64_t>(st.size()), limit = p.integer("trace_rows");
    const int64_t stride = (limit > 0 && rows > limit) ? (rows + limit - 1) / limit : 1;
    r.metric("trace_stride", static_cast<double>(stride));
    auto thin = [&](const auto& v) {
      std::decay_t<decltype(v)> out;
      for (int64_t i = 0; i < static_cast<int64_t>(v.size()); i += stride)
        out.push_back(v[static_cast<size_t>(i)]);
      return out;
    };
    TableTrace steps(
        "steps",
        "per recorded step (every trace_stride-th): batch, queues, cost breakdown, memory ledger "
        "at the end of the step (token + slack + reserved + cached + free = capacity slots)");
    steps.add("step", thin(st.step), "", "step index")
        .add("time_s", thin(st.time_s), "s", "virtual time at the end of the step")
        .add("duration_s", thin(st.duration_s), "s", "step duration")
        .add("num_seqs", thin(st.num_seqs), "", "sequences scheduled")
        .add("num_decode_seqs", thin(st.num_decode_seqs), "", "sequences computing one token")
        .add("num_prefill_seqs", thin(st.num_prefill_seqs), "",
             "sequences computing a prompt chunk")
        .add("num_tokens", thin(st.num_tokens), "", "tokens computed")
        .add("decode_context_tokens", thin(st.decode_context_tokens), "",
             "keys attended by decode sequences")
        .add("num_running", thin(st.num_running), "", "running requests after the step")
        .add("num_waiting", thin(st.num_waiting), "", "waiting requests")
        .add("num_swapped", thin(st.num_swapped), "", "swapped-out requests")
        .add("num_preempted", thin(st.num_preempted), "", "preemptions in this step")
        .add("num_finished", thin(st.num_finished), "", "requests finished by this step")
        .add("gemm_s", thin(st.gemm_s), "s", "")
        .add("attention_s", thin(st.attention_s), "s", "")
        .add("other_s", thin(st.other_s), "s", "")
        .add("launch_s", thin(st.launch_s), "s", "")
        .add("swap_s", thin(st.swap_s), "s", "")
        .add("token_slots", thin(lg.token_slots), "", "slots holding KV")
        .add("slack_slots", thin(lg.slack_slots), "", "empty slots of used blocks with >= 1 token")
        .add("reserved_slots", thin(lg.reserved_slots), "",
             "slots of used blocks with no token yet")
        .add("cached_slots", thin(lg.cached_slots), "", "slots of evictable prefix-cache blocks")
        .add("free_slots", thin(lg.free_slots), "", "slots of free blocks")
        .add("logical_tokens", thin(lg.logical_tokens), "",
             "cached tokens of running requests (shared counted per sharer)");
    r.traces.push_back(steps.take());

    const sim::RequestResults& q = res.requests;
    TableTrace req("requests",
                   "per request, in workload order (status 0 finished, 1 rejected, 2 unfinished)");
    req.add("id", q.id)
        .add("arrival_s", q.arrival_s, "s")
        .add("prompt_tokens", q.prompt_tokens)
        .add("output_tokens", q.output_tokens)
        .add("status", q.status, "", "0 finished, 1 rejected, 2 unfinished")
        .add("ttft_s", q.ttft_s, "s", "NaN if no token")
        .add("tpot_s", q.tpot_s, "s", "NaN for one output token")
        .add("e2e_s", q.e2e_s, "s", "NaN unless finished")
        .add("num_preemptions", q.num_preemptions)
        .add("num_swaps", q.num_swaps)
        .add("prefix_hit_tokens", q.prefix_hit_tokens)
        .add("discarded_tokens", q.discarded_tokens);
    r.traces.push_back(req.take());
    return r;
  }
};

}  // namespace

std::unique_ptr<Bench> make_simulate_bench() {
  return std::make_unique<SimulateBench>();
}

}  // namespace kvlab::exp
