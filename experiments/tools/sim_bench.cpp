// sim_bench.cpp (kvlab_sim_bench): speed of the serving simulation and its tables (waste,
// capacity), printed as plain text.
//
//   kvlab_sim_bench --speed          engine steps per second at batch 256 on one core
//   kvlab_sim_bench --waste          last-block waste vs block size (PagedAttention trend)
//   kvlab_sim_bench --capacity       capacity tables: plain stacks x formats x block sizes on an
//                                    H100, and the V4-Flash-like stack vs its BF16 dense baseline
//   kvlab_sim_bench --write-trace F --workload data/workloads/X.cfg   a synthetic CSV trace
//
// Speed method: a saturating offline workload (6000 requests at t = 0, outputs of 1k-4k
// tokens, 20000 steps: the queue never drains, so every step after the first few prefills
// runs 256 sequences, with continuous admissions as requests finish), the roofline step
// model (H100, llama3.1-8b, BF16 KV) as the clock, the O(1) ledger check every step, trace
// rows every step. Wall time by std::chrono::steady_clock around Engine::run only (workload
// generation excluded) and by the thread's CPU time (CLOCK_THREAD_CPUTIME_ID: what one core
// spends, unaffected by other processes on a shared machine), best of --repeats runs.
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>

#include "reference/layout/layout_names.h"
#include "sim/cost/gpu_spec.h"
#include "sim/cost/roofline.h"
#include "sim/engine/engine.h"
#include "sim/model/model_stack.h"
#include "sim/core/text.h"
#include "sim/dsv4/schema.h"
#include "sim/plan/capacity.h"
#include "sim/plan/dsv4_capacity.h"
#include "sim/workload/trace_csv.h"
#include "sim/workload/workload.h"

namespace po = boost::program_options;
using namespace kvlab;
using namespace kvlab::sim;

namespace {

// CPU time of this thread: on a shared machine the wall clock also counts other processes.
double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

int run_speed(int repeats, int64_t num_requests, int64_t max_steps, bool audit) {
  const GpuSpec gpu = gpu_spec("H100");
  const ModelStack model = model_preset("llama3.1-8b");
  auto timer = std::make_shared<RooflineStepTime>(CostModel(gpu, model, KvFormat::kBF16));
  WorkloadSpec w;
  w.seed = 1;
  w.num_requests = num_requests;
  w.arrival.kind = ArrivalKind::kAllAtOnce;
  w.prompt = LengthDist::uniform(64, 512);
  w.output = LengthDist::uniform(1024, 4096);
  const std::vector<Request> reqs = generate_workload(w);
  EngineConfig c;
  c.block_size = 16;
  c.num_blocks = 1 << 17;  // 2M token slots: the batch of 256 never runs out
  c.max_num_seqs = 256;
  c.max_num_batched_tokens = 8192;
  c.audit_every_step = audit;
  c.max_steps = max_steps;  // stop while the queue still keeps the batch full
  c.block_bytes = kv_footprint(model, c.block_size, KvFormat::kBF16).block;
  double best = 1e300, best_cpu = 1e300;
  SimResult r;
  for (int i = 0; i < repeats; ++i) {
    Engine e(c, timer);
    const double c0 = thread_cpu_s();
    const auto t0 = std::chrono::steady_clock::now();
    r = e.run(reqs);
    const auto t1 = std::chrono::steady_clock::now();
    best_cpu = std::min(best_cpu, thread_cpu_s() - c0);
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  int64_t batch256 = 0;
  for (int32_t n : r.steps.num_seqs) batch256 += n == 256 ? 1 : 0;
  const double steps = static_cast<double>(r.summary.num_steps);
  std::printf(
      "speed: %lld requests, %lld steps (%lld at batch 256, mean running %.1f), best of %d runs\n",
      static_cast<long long>(num_requests), static_cast<long long>(r.summary.num_steps),
      static_cast<long long>(batch256), r.summary.mean_running, repeats);
  std::printf("speed: %.0f engine steps/s by thread CPU time (%.2f us/step, %.3f s)\n",
              steps / best_cpu, 1e6 * best_cpu / steps, best_cpu);
  std::printf(
      "speed: %.0f engine steps/s by wall time (%.2f us/step, %.3f s; includes other processes' "
      "load)\n",
      steps / best, 1e6 * best / steps, best);
  std::printf("speed: simulated %.1f s of H100 time, %lld output tokens\n", r.summary.sim_time_s,
              static_cast<long long>(r.summary.output_tokens));
  return 0;
}

int run_waste(int64_t num_requests, int64_t kv_gib, double rate) {
  WorkloadSpec w;
  w.seed = 7;
  w.num_requests = num_requests;
  w.arrival.kind = ArrivalKind::kPoisson;
  w.arrival.rate = rate;
  w.prompt = LengthDist::lognormal(600, 0.8, 16, 8000);
  w.output = LengthDist::lognormal(200, 0.9, 4, 4000);
  const std::vector<Request> reqs = generate_workload(w);
  const ModelStack model = model_preset("llama3.1-8b");
  const GpuSpec gpu = gpu_spec("H100");
  std::printf(
      "waste vs block size: %s on %s, %lld requests, %s, prompt %s, output %s, %lld GiB KV\n",
      model.name.c_str(), gpu.name.c_str(), static_cast<long long>(num_requests),
      w.arrival.str().c_str(), w.prompt.str().c_str(), w.output.str().c_str(),
      static_cast<long long>(kv_gib));
  std::printf("%6s %10s %12s %14s %12s %10s %12s %10s\n", "block", "blocks", "slack/seq",
              "(block-1)/2", "slack %used", "preempt", "tok/s", "mean run");
  for (int32_t bs : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
    EngineConfig c;
    c.block_size = bs;
    c.block_bytes = kv_footprint(model, bs, KvFormat::kBF16).block;
    c.num_blocks = (kv_gib << 30) / c.block_bytes.total();
    auto timer = std::make_shared<RooflineStepTime>(CostModel(gpu, model, KvFormat::kBF16));
    const SimResult r = Engine(c, timer).run(reqs);
    const LedgerSummary& l = r.summary.ledger;
    const double used = l.mean_token_slots + l.mean_slack_slots + l.mean_reserved_slots;
    std::printf("%6d %10lld %12.2f %14.1f %11.2f%% %10lld %12.0f %10.1f\n", bs,
                static_cast<long long>(c.num_blocks), l.mean_slack_per_seq, (bs - 1) / 2.0,
                used > 0 ? 100.0 * l.mean_slack_slots / used : 0.0,
                static_cast<long long>(r.summary.num_preemptions), r.summary.output_tokens_per_s,
                r.summary.mean_running);
  }
  return 0;
}

int run_capacity(int64_t context) {
  const GpuSpec gpu = gpu_spec("H100");
  std::printf(
      "capacity on %s (90%% of memory minus weights minus 4 GiB activations), context %lld "
      "tokens\n",
      gpu.name.c_str(), static_cast<long long>(context));
  std::printf("%-14s %-12s %6s %14s %12s %12s %10s %10s\n", "model", "format", "block",
              "budget GiB", "bytes/token", "blocks", "max tokens", "max seqs");
  for (const std::string& name :
       {std::string("llama3.1-8b"), std::string("qwen2.5-7b"), std::string("llama3.1-70b")}) {
    const ModelStack m = model_preset(name);
    int64_t budget = 0;
    try {
      budget = kv_budget_on_gpu(gpu, m, 0.9, int64_t{4} << 30);
    } catch (const InvalidArgument& e) {
      std::printf("%-14s %s\n", name.c_str(), e.what());
      continue;
    }
    for (KvFormat f :
         {KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kFP8E4M3PerToken, KvFormat::kNVFP4})
      for (int32_t bs : {16, 128}) {
        CapacityQuery q;
        q.model = m;
        q.kv_budget_bytes = budget;
        q.block_size = bs;
        q.format = f;
        q.context_tokens = context;
        const CapacityResult r = plan_capacity(q);
        std::printf("%-14s %-12s %6d %14.2f %12.1f %12lld %10lld %10lld\n", name.c_str(),
                    to_string(f).c_str(), bs, budget / 1073741824.0, r.bytes_per_token,
                    static_cast<long long>(r.num_blocks), static_cast<long long>(r.max_tokens),
                    static_cast<long long>(r.max_seqs));
      }
  }
  return 0;
}

// V4-Flash-like stack (data/models/v4_flash_like.ini) in both storage variants vs the same
// stack storing every token's 512-dim latent in BF16 in every layer (the dense baseline).
int run_dsv4_capacity(int64_t budget_gib) {
  const Dsv4ModelStack st = load_dsv4_model_stack(find_data_file("models/v4_flash_like.ini"));
  const int64_t budget = budget_gib << 30;
  std::printf(
      "V4-Flash-like capacity, KV budget %lld GiB (paged pools + per-request state + block "
      "tables)\n",
      static_cast<long long>(budget_gib));
  std::printf("%-22s %9s %12s %14s %12s %10s %9s\n", "stack", "context", "bytes/token",
              "state B/seq", "max seqs", "vs bf16", "blocks");
  const ModelStack base = dsv4_bf16_dense_baseline(st);
  for (int64_t ctx : {int64_t{4096}, int64_t{32768}, int64_t{131072}, int64_t{1048576}}) {
    CapacityQuery q;
    q.model = base;
    q.kv_budget_bytes = budget;
    q.block_size = 128;
    q.format = KvFormat::kBF16;
    q.context_tokens = ctx;
    const CapacityResult b = plan_capacity(q);
    std::printf("%-22s %9lld %12.1f %14d %12lld %10s %9lld\n", "bf16 dense baseline",
                static_cast<long long>(ctx), b.bytes_per_token, 0,
                static_cast<long long>(b.max_seqs), "1.00x", static_cast<long long>(b.num_blocks));
    for (const auto& v :
         {std::make_pair("v4 per_token_scales variant", Dsv4Variant::per_token_scales()),
          std::make_pair("v4 public variant", Dsv4Variant::public_v4())}) {
      Dsv4CacheConfig cfg;
      cfg.variant = v.second;
      const Dsv4CacheSchema schema = build_dsv4_schema(st, cfg);
      const Dsv4Capacity c = plan_dsv4_capacity(schema, budget, ctx);
      char ratio[32];
      std::snprintf(ratio, sizeof ratio, "%.2fx",
                    b.max_seqs > 0 ? static_cast<double>(c.max_seqs) / b.max_seqs : 0.0);
      std::printf("%-22s %9lld %12.1f %14lld %12lld %10s %9lld\n", v.first,
                  static_cast<long long>(ctx), c.bytes_per_token,
                  static_cast<long long>(schema.state_bytes_per_slot()),
                  static_cast<long long>(c.max_seqs), b.max_seqs > 0 ? ratio : "inf",
                  static_cast<long long>(c.budget.num_blocks));
    }
  }
  return 0;
}

int write_trace(const std::string& path, const std::string& workload) {
  const WorkloadSpec w = load_workload_spec(workload);
  const std::vector<Request> reqs = generate_workload(w);
  std::ofstream out(path);
  if (!out) throw InvalidArgument("cannot write '" + path + "'");
  out << format_trace_csv(
      reqs, "Synthetic trace generated by kvlab_sim_bench --write-trace " + path + " --workload " +
                workload + "\nfrom " + workload + ": arrival " + w.arrival.str() + ", prompt " +
                w.prompt.str() + ", output " + w.output.str() + ", seed " + std::to_string(w.seed));
  std::printf("wrote %zu requests to %s\n", reqs.size(), path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description desc("kvlab_sim_bench options");
  desc.add_options()("help,h", "this help")("speed", "engine steps/s at batch 256")(
      "waste", "waste vs block size table")("capacity", "capacity table")(
      "repeats", po::value<int>()->default_value(3), "speed: runs (best is reported)")(
      "requests", po::value<int64_t>()->default_value(2000), "speed/waste: number of requests")(
      "max-steps", po::value<int64_t>()->default_value(20000),
      "speed: steps to run (0 = to completion)")(
      "audit", "speed: also audit the ledger every step (O(num_blocks), slow)")(
      "context", po::value<int64_t>()->default_value(32768),
      "capacity: context tokens per sequence")("kv-gib", po::value<int64_t>()->default_value(32),
                                               "waste: KV budget, GiB")(
      "rate", po::value<double>()->default_value(20), "waste: arrival rate, requests/s")(
      "budget-gib", po::value<int64_t>()->default_value(64),
      "capacity: KV budget of the V4-Flash-like table, GiB")(
      "write-trace", po::value<std::string>(), "write a synthetic trace CSV to this path")(
      "workload", po::value<std::string>(), "workload spec for --write-trace");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    bool any = false;
    if (vm.count("write-trace")) {
      if (!vm.count("workload")) throw InvalidArgument("--write-trace needs --workload");
      write_trace(vm["write-trace"].as<std::string>(), vm["workload"].as<std::string>());
      any = true;
    }
    if (vm.count("speed") || !(vm.count("waste") || vm.count("capacity") || any)) {
      run_speed(
          vm["repeats"].as<int>(),
          vm.count("requests") && !vm["requests"].defaulted() ? vm["requests"].as<int64_t>() : 6000,
          vm["max-steps"].as<int64_t>(), vm.count("audit") > 0);
    }
    if (vm.count("waste"))
      run_waste(vm["requests"].as<int64_t>(), vm["kv-gib"].as<int64_t>(), vm["rate"].as<double>());
    if (vm.count("capacity")) {
      run_capacity(vm["context"].as<int64_t>());
      run_dsv4_capacity(vm["budget-gib"].as<int64_t>());
    }
  } catch (const std::exception& e) {
    std::cerr << "kvlab_sim_bench: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
