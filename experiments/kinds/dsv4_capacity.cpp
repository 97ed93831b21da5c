// dsv4_capacity.cpp: bench "dsv4_capacity": capacity of a DeepSeek-V4-style stack
// (data/models/*.ini) vs its compression ratios and storage variant, on the dsv4 cache schema
// (sim/plan/dsv4_capacity.h: the same bytes the real pools are sized with).
//
// A point: a stack, optionally with other CSA / HCA ratios and window, a storage variant
// (with per-field overrides), a block size (original tokens; 0 = the smallest multiple of
// 128 and of both ratios), a KV budget and a context length. Reported: concurrent requests
// of that context (paged blocks + per-request state slot + block table), bytes per token,
// and the same for the dense BF16 baseline (every layer storing every token's latent in BF16,
// paged with the same block size), so that the capacity gain and the effective compression
// are in the record.
#include <cmath>
#include <string>
#include <unistd.h>

#include "experiments/kinds/dsv4_common.h"
#include "experiments/bench/table_trace.h"
#include "experiments/kinds/kinds.h"
#include "sim/core/text.h"
#include "sim/dsv4/dsv4_model_stack.h"
#include "sim/dsv4/schema.h"
#include "sim/plan/capacity.h"
#include "sim/plan/dsv4_capacity.h"

namespace kvlab::exp {

// A stack by name (data/models/<name>.ini) or path; InvalidArgument naming what was tried.
sim::Dsv4ModelStack load_dsv4_stack(const std::string& name) {
  if (access(name.c_str(), R_OK) == 0) return sim::load_dsv4_model_stack(name);
  const std::string rel =
      "models/" + name + (name.size() > 4 && name.substr(name.size() - 4) == ".ini" ? "" : ".ini");
  std::string path;
  try {
    path = sim::find_data_file(rel);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument("model stack '" + name +
                          "' is neither a file nor a stack in data/models (shipped: "
                          "v4_flash_like, test_mixed, test_tiny): " +
                          e.what());
  }
  return sim::load_dsv4_model_stack(path);
}

namespace {

struct Dsv4Setup {
  sim::Dsv4ModelStack stack;
  sim::Dsv4CacheConfig config;
  sim::Dsv4CacheSchema schema;
};

Dsv4Setup setup(const Point& p) {
  Dsv4Setup s;
  s.stack = load_dsv4_stack(p.str("model"));
  if (p.integer("csa_ratio") != 0) s.stack.csa_ratio = static_cast<int32_t>(p.integer("csa_ratio"));
  if (p.integer("hca_ratio") != 0) s.stack.hca_ratio = static_cast<int32_t>(p.integer("hca_ratio"));
  if (p.integer("window") != 0) s.stack.window = static_cast<int32_t>(p.integer("window"));
  sim::validate(s.stack);
  s.config.variant = dsv4_variant_of(p);
  s.config.block_tokens = p.integer("block_tokens") != 0
                              ? static_cast<int32_t>(p.integer("block_tokens"))
                              : dsv4_default_block_tokens(s.stack.csa_ratio, s.stack.hca_ratio);
  s.schema = sim::build_dsv4_schema(s.stack, s.config);
  return s;
}

class Dsv4CapacityBench : public Bench {
 public:
  std::string name() const override { return "dsv4_capacity"; }
  std::string summary() const override {
    return "DSV4-style capacity (sim/plan on the dsv4 schema) vs compression ratios and storage "
           "variant, "
           "against the dense BF16 baseline";
  }
  std::vector<AxisSpec> axes() const override {
    std::vector<AxisSpec> a = {
        AxisSpec{"model", AxisType::kString, "v4_flash_like", {},
                 "stack in data/models (name or path)"}
            .checked_by(known_by(load_dsv4_stack)),
        AxisSpec{"csa_ratio", AxisType::kInt, "0", {}, "CSA compression ratio (0 = the stack's)"}
            .range(0, 1 << 16),
        AxisSpec{"hca_ratio", AxisType::kInt, "0", {}, "HCA compression ratio (0 = the stack's)"}
            .range(0, 1 << 16),
        AxisSpec{"window", AxisType::kInt, "0", {}, "SWA window in tokens (0 = the stack's)"}
            .range(0, 1 << 24),
    };
    for (auto& v : dsv4_variant_axes()) a.push_back(v);
    a.push_back(AxisSpec{"block_tokens", AxisType::kInt, "0", {},
                         "original tokens per block (0 = the smallest multiple of 128 and of both "
                         "ratios)"}
                    .range(0, 1 << 24));
    a.push_back(AxisSpec{"kv_gib", AxisType::kFloat, "64", {},
                         "KV budget in GiB (pools + state + block tables)"}
                    .real_range(0, 1 << 20, /*exclude_lo=*/true));
    a.push_back(
        AxisSpec{"context", AxisType::kInt, "32768", {}, "tokens per request"}.range(1, 1 << 30));
    return a;
  }
  std::vector<MetricSpec> metrics() const override {
    return {{"csa_ratio_used", "", "CSA ratio of the point (the stack's when the axis is 0)"},
            {"hca_ratio_used", "", "HCA ratio of the point"},
            {"block_tokens_used", "", "original tokens per block"},
            {"max_seqs", "", "concurrent requests of `context` tokens"},
            {"blocks_per_seq", "", "blocks one request holds"},
            {"num_blocks", "", "blocks of the pools at max_seqs"},
            {"bytes_per_token", "B", "(blocks_per_seq * block bytes + state slot) / context"},
            {"block_bytes", "B", "bytes of one block id across every layer's pools"},
            {"state_bytes_per_seq", "B", "per-request state: SWA rings and compressor streams"},
            {"dense_bytes_per_token", "B",
             "dense BF16 baseline: every layer, every token's latent in BF16"},
            {"dense_max_seqs", "", "the baseline's concurrent requests in the same budget"},
            {"capacity_gain", "", "max_seqs / dense_max_seqs"},
            {"compression", "", "dense_bytes_per_token / bytes_per_token"}};
  }
  void check_point(const Point& p) const override {
    setup(p);  // the stack with its ratios, window, block size and variant, as the schema checks
  }
  double estimate_seconds(const Point&, const RunContext&) const override { return 3e-3; }
  Record run(const Point& p, RunContext&) override {
    const Dsv4Setup s = setup(p);
    const int64_t budget = static_cast<int64_t>(std::floor(p.number("kv_gib") * (1ull << 30)));
    const int64_t context = p.integer("context");
    sim::Dsv4Capacity c;
    try {
      c = sim::plan_dsv4_capacity(s.schema, budget, context);
    } catch (const InvalidArgument& e) {
      throw Unsupported(e.what());  // the budget cannot hold one request of this context
    }
    sim::CapacityQuery q;
    q.model = sim::dsv4_bf16_dense_baseline(s.stack);
    q.kv_budget_bytes = budget;
    q.block_size = s.config.block_tokens;
    q.format = KvFormat::kBF16;
    q.context_tokens = context;
    int64_t dense_seqs = 0;
    double dense_bpt = 2.0 * s.stack.num_layers() * s.stack.head_dim();
    try {
      const sim::CapacityResult b = sim::plan_capacity(q);
      dense_seqs = b.max_seqs;
      dense_bpt = b.bytes_per_token;
    } catch (const InvalidArgument&) {
      dense_seqs = 0;  // the baseline does not fit one request: gain is reported as NaN below
    }
    Record r;
    r.metric("csa_ratio_used", s.stack.csa_ratio);
    r.metric("hca_ratio_used", s.stack.hca_ratio);
    r.metric("block_tokens_used", s.config.block_tokens);
    r.metric("max_seqs", static_cast<double>(c.max_seqs));
    r.metric("blocks_per_seq", static_cast<double>(c.blocks_per_seq));
    r.metric("num_blocks", static_cast<double>(c.budget.num_blocks));
    r.metric("bytes_per_token", c.bytes_per_token);
    r.metric("block_bytes", static_cast<double>(s.schema.bytes_per_block()));
    r.metric("state_bytes_per_seq", static_cast<double>(s.schema.state_bytes_per_slot()));
    r.metric("dense_bytes_per_token", dense_bpt);
    r.metric("dense_max_seqs", static_cast<double>(dense_seqs));
    r.metric("capacity_gain",
             dense_seqs > 0 ? static_cast<double>(c.max_seqs) / dense_seqs : std::nan(""));
    r.metric("compression", c.bytes_per_token > 0 ? dense_bpt / c.bytes_per_token : std::nan(""));
    r.label("variant_name", to_string(s.config.variant));
    r.label("stack_name", s.stack.name);
    return r;
  }
};

}  // namespace

std::unique_ptr<Bench> make_dsv4_capacity_bench() {
  return std::make_unique<Dsv4CapacityBench>();
}

}  // namespace kvlab::exp
