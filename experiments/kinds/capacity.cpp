// capacity.cpp: bench "capacity": the capacity planner of sim/plan/capacity.h.
//
// A point: a model preset on a GPU of the table (data/gpus/gpus.csv), with
// gpu_mem_util of its memory minus the weights and an activation reserve as KV budget,
// a block size, a KV storage format and a per-sequence context. Reports how many blocks,
// tokens and concurrent sequences fit, bytes per token and the last-block slack.
#include <string>

#include "experiments/bench/table_trace.h"
#include "experiments/kinds/kinds.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "sim/cost/gpu_spec.h"
#include "sim/model/model_stack.h"
#include "sim/plan/capacity.h"

namespace kvlab::exp {
namespace {

class CapacityBench : public Bench {
 public:
  std::string name() const override { return "capacity"; }
  std::string summary() const override {
    return "capacity planner (sim/plan): blocks, tokens and sequences that fit per model x GPU x "
           "block x format";
  }
  std::vector<AxisSpec> axes() const override {
    return {
        {"model", AxisType::kEnum, "llama3.1-8b", sim::model_preset_names(),
         "model preset (sim/model)"},
        AxisSpec{"gpu", AxisType::kString, "H100", {}, "GPU of data/gpus/gpus.csv"}.checked_by(
            known_by(sim::gpu_spec)),
        {"kv_format", AxisType::kEnum, "bf16", kv_format_names(), "KV storage format",
         format_name_aliases()},
        AxisSpec{"block_size", AxisType::kInt, "16", {}, "tokens per KV block"}.range(1, 1 << 20),
        AxisSpec{"context", AxisType::kInt, "4096", {}, "tokens per sequence"}.range(1, 1 << 30),
        AxisSpec{"gpu_mem_util", AxisType::kFloat, "0.9", {},
                 "fraction of GPU memory the engine may use"}
            .real_range(0, 1, /*exclude_lo=*/true),
        AxisSpec{"activation_reserve_mib", AxisType::kInt, "2048", {},
                 "memory kept for activations"}
            .range(0, 1 << 24),
    };
  }
  std::vector<MetricSpec> metrics() const override {
    return {
        {"kv_budget_bytes", "B", "KV budget after weights and activations"},
        {"num_blocks", "", "KV blocks that fit"},
        {"max_tokens", "", "token slots (num_blocks * block_size)"},
        {"max_seqs", "", "concurrent sequences at the context length"},
        {"bytes_per_token", "B", "KV bytes per token at the context (slack and state included)"},
        {"slack_fraction", "", "unused slots of a sequence's last block / its slots"}};
  }
  double estimate_seconds(const Point&, const RunContext&) const override { return 1e-3; }
  Record run(const Point& p, RunContext&) override {
    const sim::ModelStack model = sim::model_preset(p.str("model"));
    const sim::GpuSpec gpu = sim::gpu_spec(p.str("gpu"));
    sim::CapacityQuery q;
    q.model = model;
    try {
      q.kv_budget_bytes = sim::kv_budget_on_gpu(gpu, model, p.number("gpu_mem_util"),
                                                p.integer("activation_reserve_mib") << 20);
    } catch (const InvalidArgument& e) {
      throw Unsupported(e.what());  // the model does not fit: a skipped point, not a failure
    }
    q.block_size = static_cast<int32_t>(p.integer("block_size"));
    q.format = parse_kv_format(p.str("kv_format"));
    q.context_tokens = p.integer("context");
    sim::CapacityResult c;
    try {
      c = sim::plan_capacity(q);
    } catch (const InvalidArgument& e) {
      throw Unsupported(e.what());  // not even one block fits the budget: skipped
    }
    Record r;
    r.metric("kv_budget_bytes", static_cast<double>(q.kv_budget_bytes));
    r.metric("num_blocks", static_cast<double>(c.num_blocks));
    r.metric("max_tokens", static_cast<double>(c.max_tokens));
    r.metric("max_seqs", static_cast<double>(c.max_seqs));
    r.metric("bytes_per_token", c.bytes_per_token);
    r.metric("slack_fraction", c.slack_fraction);
    return r;
  }
};

}  // namespace

std::unique_ptr<Bench> make_capacity_bench() {
  return std::make_unique<CapacityBench>();
}

}  // namespace kvlab::exp
