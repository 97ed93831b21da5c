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
        {"gpu", AxisType::kString, "H100", {}, "GPU of data/gpus/gpus.csv"},
        {"op", AxisType::kEnum, "decode_attention", {"decode_attention", "gemm"}, "operation"},
        {"ceiling",
         AxisType::kEnum,
         "measured",
         {"measured", "datasheet", "run"},
         "memory ceiling: the table's measured read figure (datasheet if none), the datasheet, or "
         "this run's "
         "measured read ceiling (skipped when the run measured none)"},
        {"batch", AxisType::kInt, "1", {}, "decode: sequences; gemm: rows m (tokens)"},
        {"context", AxisType::kInt, "4096", {}, "decode: tokens per sequence"},
        {"num_kv_heads", AxisType::kInt, "8", {}, "decode: KV heads"},
        {"gqa_group", AxisType::kInt, "4", {}, "decode: query heads per KV head"},
        {"head_dim", AxisType::kInt, "128", {}, "decode: head dimension"},
        {"block_size", AxisType::kInt, "16", {}, "decode: tokens per KV block"},
        {"kv_format", AxisType::kEnum, "bf16", kv_format_names(), "decode: KV storage format",
         format_name_aliases()},
        {"n", AxisType::kInt, "4096", {}, "gemm: output columns"},
        {"k", AxisType::kInt, "4096", {}, "gemm: reduction length"},
        {"weight_bits", AxisType::kInt, "16", {}, "gemm: bits per weight (16, 8, 4)"},
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
  void check_point(const Point& p) const override {
    sim::gpu_spec(p.str("gpu"));
    auto at_least = [&](const char* a, int64_t lo) {
      if (p.integer(a) < lo)
        throw InvalidArgument(std::string(a) + " must be >= " + std::to_string(lo) + ", got " +
                              p.str(a));
    };
    at_least("batch", 0);
    at_least("context", 0);
    at_least("num_kv_heads", 1);
    at_least("gqa_group", 1);
    at_least("head_dim", 2);
    at_least("block_size", 1);
    at_least("n", 1);
    at_least("k", 1);
    const int64_t wb = p.integer("weight_bits");
    if (wb != 4 && wb != 8 && wb != 16 && wb != 32)
      throw InvalidArgument("weight_bits " + p.str("weight_bits") + " (allowed: 4, 8, 16, 32)");
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
