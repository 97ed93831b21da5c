// roofline.cpp: bench "roofline": the cost model's prediction (sim/cost/roofline.h) of one
// operation on one GPU of the table (data/gpus/gpus.csv).
//
//   op = decode_attention   paged decode over batch x context tokens, GQA (num_kv_heads KV
//                           heads, gqa_group query heads each), head_dim, block size, KV format:
//                           bytes = Q + K/V at storage precision + scales + block table +
//                           seq_lens + O; flops = 4 * qo_heads * head_dim per attended token
//   op = gemm               [m = batch, k] x [k, n] with weight_bits weights
// Reported: bytes, FLOPs, arithmetic intensity against the GPU's ridge point, the memory
// and compute times, the predicted time (their max, no calibration) and whether the op is
// memory- or compute-bound. The shape axes are named as in the GPU decode_attention bench
// so that analysis can join predictions with measurements (figure "simulated vs measured").
// Axes of the other op must stay at their defaults (else the point is skipped, saying so:
// a sweep over them would repeat one prediction under different labels).
#include <cmath>
#include <string>

#include "experiments/bench/table_trace.h"
#include "experiments/kinds/kinds.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "sim/cost/gpu_spec.h"
#include "sim/cost/roofline.h"

namespace kvlab::exp {
namespace {

const std::vector<std::string> kDecodeOnly = {"context",  "num_kv_heads", "gqa_group",
                                              "head_dim", "block_size",   "kv_format"};
const std::vector<std::string> kGemmOnly = {"n", "k", "weight_bits"};

class RooflineBench : public Bench {
 public:
  std::string name() const override { return "roofline"; }
  std::string summary() const override {
    return "roofline predictions (sim/cost) of decode attention and GEMMs per GPU: bytes, FLOPs, "
           "intensity, bound";
  }
  std::vector<AxisSpec> axes() const override {
    return {
        AxisSpec{"gpu", AxisType::kString, "H100", {}, "GPU of data/gpus/gpus.csv"}.checked_by(
            known_by(sim::gpu_spec)),
        {"op", AxisType::kEnum, "decode_attention", {"decode_attention", "gemm"}, "operation"},
        {"ceiling",
         AxisType::kEnum,
         "measured",
         {"measured", "datasheet", "run"},
         "memory ceiling: the table's measured read figure (datasheet if none), the datasheet, or "
         "this run's "
         "measured read ceiling (skipped when the run measured none)"},
        AxisSpec{"batch", AxisType::kInt, "1", {}, "decode: sequences; gemm: rows m (tokens)"}
            .range(0, 1 << 24),
        AxisSpec{"context", AxisType::kInt, "4096", {}, "decode: tokens per sequence"}.range(
            0, 1 << 30),
        AxisSpec{"num_kv_heads", AxisType::kInt, "8", {}, "decode: KV heads"}.range(1, 1024),
        AxisSpec{"gqa_group", AxisType::kInt, "4", {}, "decode: query heads per KV head"}.range(
            1, 1024),
        AxisSpec{"head_dim", AxisType::kInt, "128", {}, "decode: head dimension"}.range(2, 1 << 16),
        AxisSpec{"block_size", AxisType::kInt, "16", {}, "decode: tokens per KV block"}.range(
            1, 1 << 20),
        {"kv_format", AxisType::kEnum, "bf16", kv_format_names(), "decode: KV storage format",
         format_name_aliases()},
        AxisSpec{"n", AxisType::kInt, "4096", {}, "gemm: output columns"}.range(1, 1 << 30),
        AxisSpec{"k", AxisType::kInt, "4096", {}, "gemm: reduction length"}.range(1, 1 << 30),
        AxisSpec{"weight_bits", AxisType::kInt, "16", {}, "gemm: bits per weight (4, 8, 16, 32)"}
            .range(4, 32)
            .powers_of_two(),
    };
  }
  std::vector<MetricSpec> metrics() const override {
    return {{"model_bytes", "B", "bytes the operation moves (roofline model)"},
            {"model_flops", "FLOP", "floating-point operations"},
            {"intensity", "FLOP/B", "arithmetic intensity"},
            {"ridge", "FLOP/B", "the GPU's ridge point for the op's rate: rate / memory ceiling"},
            {"memory_s", "s", "bytes / memory ceiling"},
            {"compute_s", "s", "FLOPs / compute rate"},
            {"predicted_s", "s", "max(memory_s, compute_s): the roofline prediction, uncalibrated"},
            {"predicted_bytes_per_s", "B/s", "model_bytes / predicted_s"},
            {"ceiling_bytes_per_s", "B/s", "memory ceiling used"},
            {"compute_bound", "", "1 when compute_s > memory_s"}};
  }
  std::string unsupported_reason(const Point& p, const RunContext& ctx) const override {
    const auto defaults = axes();
    const auto& other = p.str("op") == "gemm" ? kDecodeOnly : kGemmOnly;
    for (const auto& a : defaults)
      for (const auto& o : other)
        if (a.name == o && p.str(o) != a.default_value)
          return o + " does not apply to op=" + p.str("op") + " (leave it at its default " +
                 a.default_value + ")";
    if (p.str("ceiling") == "run" && ctx.read_ceiling_bytes_per_s <= 0)
      return "ceiling=run: this run measured no read ceiling (needs a device and a GPU study in "
             "the sweep)";
    return "";
  }
  double estimate_seconds(const Point&, const RunContext&) const override { return 2e-4; }
  Record run(const Point& p, RunContext& ctx) override {
    sim::GpuSpec gpu = sim::gpu_spec(p.str("gpu"));
    sim::CostModelConfig cfg;
    const std::string ceiling = p.str("ceiling");
    cfg.prefer_measured_ceiling = ceiling != "datasheet";
    if (ceiling == "run") gpu.measured_read_bytes_per_s = ctx.read_ceiling_bytes_per_s;
    cfg.validate();
    sim::OpCost c;
    if (p.str("op") == "decode_attention") {
      sim::DecodeAttentionShape s;
      s.batch = p.integer("batch");
      s.context = p.integer("context");
      s.num_kv_heads = static_cast<int32_t>(p.integer("num_kv_heads"));
      s.num_qo_heads = static_cast<int32_t>(p.integer("num_kv_heads") * p.integer("gqa_group"));
      s.head_dim = static_cast<int32_t>(p.integer("head_dim"));
      s.block_size = static_cast<int32_t>(p.integer("block_size"));
      s.format = parse_kv_format(p.str("kv_format"));
      try {
        s.validate();
      } catch (const InvalidArgument& e) {
        throw Unsupported(
            e.what());  // a geometry the format cannot lay out (head_dim vs its groups)
      }
      c = sim::decode_attention_cost(gpu, s, cfg);
    } else {
      c = sim::gemm_cost(gpu, "gemm", p.integer("batch"), p.integer("n"), p.integer("k"),
                         static_cast<int>(p.integer("weight_bits")), cfg);
    }
    Record r;
    const double bw = gpu.read_ceiling(cfg.prefer_measured_ceiling);
    const double rate = c.compute_s > 0 ? c.flops / c.compute_s : 0;
    r.metric("model_bytes", c.bytes);
    r.metric("model_flops", c.flops);
    r.metric("intensity", c.intensity());
    r.metric("ridge", bw > 0 ? rate / bw : 0);
    r.metric("memory_s", c.memory_s);
    r.metric("compute_s", c.compute_s);
    r.metric("predicted_s", c.seconds);
    r.metric("predicted_bytes_per_s", c.seconds > 0 ? c.bytes / c.seconds : 0);
    r.metric("ceiling_bytes_per_s", bw);
    r.metric("compute_bound", c.bound() == sim::Bound::kCompute ? 1.0 : 0.0);
    r.label("bound", sim::to_string(c.bound()));
    r.label("gpu_name", gpu.name);
    return r;
  }
};

}  // namespace

std::unique_ptr<Bench> make_roofline_bench() {
  return std::make_unique<RooflineBench>();
}

}  // namespace kvlab::exp
