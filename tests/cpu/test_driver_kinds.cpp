// test_driver_kinds.cpp: the CPU benches that compose sim/ and reference/dsv4 (simulate,
// roofline, dsv4_capacity, compression_error): their records against facts computed here by
// hand or by the library they wrap, their traces, and their bad-input errors.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>

#include "experiments/cli/registry.h"
#include "experiments/sweep/axis_rule.h"
#include "reference/core/error.h"
#include "sim/core/text.h"
#include "sim/cost/gpu_spec.h"
#include "sim/dsv4/schema.h"
#include "sim/plan/dsv4_capacity.h"
#include "tests/common/test_env.h"

using namespace kvlab;
using namespace kvlab::exp;

namespace {

// A point of `kind` with its defaults, some axes replaced (values in canonical text).
Point point_of(const std::string& kind, const std::map<std::string, std::string>& set) {
  Point p;
  p.study = "t";
  p.kind = kind;
  std::set<std::string> used;
  for (const auto& a : find_bench(kind).axes()) {
    auto it = set.find(a.name);
    p.axes.emplace_back(a.name, it == set.end() ? a.default_value : it->second);
    if (it != set.end()) used.insert(a.name);
  }
  for (const auto& [k, v] : set)
    if (!used.count(k)) ADD_FAILURE() << kind << " has no axis " << k;
  return p;
}

Record run(const std::string& kind, const std::map<std::string, std::string>& set,
           RunContext ctx = {}) {
  Bench& b = find_bench(kind);
  const Point p = point_of(kind, set);
  b.check_point(p);
  const std::string why = b.unsupported_reason(p, ctx);
  EXPECT_EQ(why, "") << p.describe();
  return b.run(p, ctx);
}

double metric(const Record& r, const std::string& name) {
  for (const auto& [k, v] : r.metrics)
    if (k == name) return v;
  ADD_FAILURE() << "no metric " << name;
  return NAN;
}

const Trace* trace(const Record& r, const std::string& name) {
  for (const auto& t : r.traces)
    if (t.name == name) return &t;
  return nullptr;
}

const h5::ColumnData* column(const Trace& t, const std::string& name) {
  for (const auto& [c, d] : t.columns)
    if (c.name == name) return &d;
  return nullptr;
}

// What a sweep answers before it writes anything: the axes' rules, then the point's check.
std::string check_error(const std::string& kind, const std::map<std::string, std::string>& set) {
  try {
    for (const auto& a : find_bench(kind).axes())
      if (set.count(a.name)) canonical_axis_value(a, set.at(a.name), kind + " axis " + a.name);
    find_bench(kind).check_point(point_of(kind, set));
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

// Every metric of every bench is its own index column: no metric shares a name with any
// bench's axis or with the index's base columns (a shared column would mix meanings).
TEST(DriverKinds, MetricNamesNeverCollideWithAxes) {
  std::set<std::string> axes = {"point",  "key",    "study",   "kind",
                                "status", "reason", "seconds", "group"};
  for (const auto& b : benches())
    for (const auto& a : b->axes()) axes.insert(a.name);
  for (const auto& b : benches())
    for (const auto& m : b->metrics())
      EXPECT_EQ(axes.count(m.name), 0u) << b->name() << " metric " << m.name;
}

TEST(DriverKinds, SimulateRecordsSummaryLedgerAndTraces) {
  const Record r = run("simulate", {{"workload", "chat_poisson"},
                                    {"num_requests", "60"},
                                    {"block_size", "32"},
                                    {"kv_gib", "1"},
                                    {"trace_rows", "50"}});
  ASSERT_EQ(r.status, Status::kOk) << r.reason;
  EXPECT_EQ(metric(r, "requests"), 60);
  EXPECT_EQ(metric(r, "num_finished") + metric(r, "num_rejected") + metric(r, "num_unfinished"),
            60);
  EXPECT_GT(metric(r, "output_tokens_per_s"), 0);
  // 1 GiB of BF16 llama3.1-8b KV: 128 KiB per token, 32 tokens per block -> 256 blocks.
  EXPECT_EQ(metric(r, "block_bytes"), 32.0 * 32 * 2 * 8 * 128 * 2);
  EXPECT_EQ(metric(r, "num_blocks"), 256);
  EXPECT_EQ(metric(r, "capacity_slots"), 256 * 32);
  const double used = metric(r, "mean_token_slots") + metric(r, "mean_slack_slots") +
                      metric(r, "mean_reserved_slots");
  EXPECT_NEAR(used + metric(r, "mean_cached_slots") + metric(r, "mean_free_slots"), 256 * 32,
              1e-6 * 256 * 32);
  EXPECT_NEAR(metric(r, "slack_fraction"), metric(r, "mean_slack_slots") / used, 1e-12);
  const Trace* steps = trace(r, "steps");
  ASSERT_NE(steps, nullptr);
  const h5::ColumnData* step = column(*steps, "step");
  ASSERT_NE(step, nullptr);
  const int64_t stride = static_cast<int64_t>(metric(r, "trace_stride"));
  EXPECT_LE(step->size(), 50u);
  EXPECT_EQ(static_cast<int64_t>(step->size()),
            (static_cast<int64_t>(metric(r, "num_steps")) + stride - 1) / stride);
  for (size_t i = 0; i < step->size(); ++i)
    EXPECT_EQ(step->i64[i], static_cast<int64_t>(i) * stride);
  // Ledger rows add up to the capacity in every recorded step.
  const auto* tok = column(*steps, "token_slots");
  const auto* slack = column(*steps, "slack_slots");
  const auto* res = column(*steps, "reserved_slots");
  const auto* cached = column(*steps, "cached_slots");
  const auto* fr = column(*steps, "free_slots");
  for (size_t i = 0; i < step->size(); ++i)
    EXPECT_EQ(tok->i64[i] + slack->i64[i] + res->i64[i] + cached->i64[i] + fr->i64[i], 256 * 32)
        << "row " << i;
  const Trace* reqs = trace(r, "requests");
  ASSERT_NE(reqs, nullptr);
  EXPECT_EQ(column(*reqs, "id")->size(), 60u);
  // Block size 1 has no last-block slack at all.
  const Record one =
      run("simulate", {{"num_requests", "30"}, {"block_size", "1"}, {"kv_gib", "1"}});
  EXPECT_EQ(metric(one, "mean_slack_slots"), 0);
  EXPECT_EQ(metric(one, "slack_fraction"), 0);
}

TEST(DriverKinds, SimulateBadInputIsAClearError) {
  EXPECT_NE(check_error("simulate", {{"workload", "no_such_workload"}})
                .find("neither a file nor a spec in data/workloads"),
            std::string::npos);
  EXPECT_NE(check_error("simulate", {{"workload", "missing.csv"}}).find("not found"),
            std::string::npos);
  EXPECT_NE(check_error("simulate", {{"gpu", "Z80"}}).find("Z80"), std::string::npos);
  EXPECT_NE(check_error("simulate", {{"workload", "offline_batch"}, {"rate", "3"}})
                .find("arrives all at once"),
            std::string::npos);
  EXPECT_NE(
      check_error("simulate", {{"workload", "synthetic_chat.csv"}, {"num_requests", "999999"}})
          .find("holds only"),
      std::string::npos);
  EXPECT_NE(check_error("simulate", {{"kv_gib", "-1"}}).find("kv_gib = '-1': out of range"),
            std::string::npos);
  EXPECT_EQ(check_error("simulate", {{"workload", "synthetic_chat.csv"}, {"num_requests", "10"}}),
            "<no error>");
}

TEST(DriverKinds, RooflineDecodeBytesByHand) {
  // batch 1 x 1024 tokens, 8 KV heads x 128 dims in BF16, 32 query heads, block 16:
  // K+V 1024*8*128*2*2, Q and O 32*128*2 each, 64 block-table entries and one seq_len (int32).
  const Record r = run("roofline", {{"batch", "1"}, {"context", "1024"}});
  const double bytes = 1024.0 * 8 * 128 * 2 * 2 + 2 * 32 * 128 * 2 + 64 * 4 + 4;
  EXPECT_EQ(metric(r, "model_bytes"), bytes);
  EXPECT_EQ(metric(r, "model_flops"), 4.0 * 32 * 128 * 1024);
  EXPECT_EQ(metric(r, "compute_bound"), 0);
  const double bw = sim::gpu_spec("H100").read_ceiling(true);
  EXPECT_DOUBLE_EQ(metric(r, "predicted_s"), bytes / bw);
  // FP8 halves the KV bytes; a large GEMM is compute-bound, a skinny one memory-bound.
  const Record f =
      run("roofline", {{"batch", "1"}, {"context", "1024"}, {"kv_format", "fp8_e4m3"}});
  EXPECT_LT(metric(f, "model_bytes"), 0.51 * bytes);
  EXPECT_EQ(metric(run("roofline", {{"op", "gemm"}, {"batch", "8192"}}), "compute_bound"), 1);
  EXPECT_EQ(metric(run("roofline", {{"op", "gemm"}, {"batch", "1"}}), "compute_bound"), 0);
}

TEST(DriverKinds, RooflineSkipsAxesOfTheOtherOpAndUnmeasuredCeilings) {
  Bench& b = find_bench("roofline");
  RunContext ctx;
  EXPECT_NE(b.unsupported_reason(point_of("roofline", {{"op", "gemm"}, {"head_dim", "64"}}), ctx)
                .find("head_dim does not apply"),
            std::string::npos);
  EXPECT_NE(b.unsupported_reason(point_of("roofline", {{"n", "8"}}), ctx).find("n does not apply"),
            std::string::npos);
  EXPECT_NE(b.unsupported_reason(point_of("roofline", {{"ceiling", "run"}}), ctx)
                .find("measured no read ceiling"),
            std::string::npos);
  ctx.read_ceiling_bytes_per_s = 1e12;
  const Record r = run("roofline", {{"ceiling", "run"}, {"context", "4096"}}, ctx);
  EXPECT_DOUBLE_EQ(metric(r, "ceiling_bytes_per_s"), 1e12);
  EXPECT_NE(check_error("roofline", {{"weight_bits", "5"}}).find("not a power of two"),
            std::string::npos);
  EXPECT_NE(check_error("roofline", {{"gqa_group", "0"}}).find("gqa_group = '0': out of range"),
            std::string::npos);
}

TEST(DriverKinds, Dsv4CapacityFollowsThePlanner) {
  const Record base = run("dsv4_capacity", {{"context", "32768"}});
  // The stack's own ratios (axis 0) and the same ratios given explicitly agree.
  const Record same =
      run("dsv4_capacity", {{"context", "32768"}, {"csa_ratio", "4"}, {"hca_ratio", "128"}});
  EXPECT_EQ(metric(base, "max_seqs"), metric(same, "max_seqs"));
  EXPECT_EQ(metric(base, "csa_ratio_used"), 4);
  EXPECT_GT(metric(base, "capacity_gain"), 1);
  // Stronger compression holds more requests; the dense baseline does not change.
  double last = 0;
  for (const char* ratio : {"2", "4", "8", "16"}) {
    const Record r = run("dsv4_capacity", {{"context", "32768"}, {"csa_ratio", ratio}});
    EXPECT_GT(metric(r, "max_seqs"), last) << "csa_ratio " << ratio;
    EXPECT_EQ(metric(r, "dense_max_seqs"), metric(base, "dense_max_seqs"));
    last = metric(r, "max_seqs");
  }
  // The record is the planner's answer for the same schema.
  sim::Dsv4CacheConfig c;
  c.variant = Dsv4Variant::public_v4();
  const auto st = sim::load_dsv4_model_stack(sim::find_data_file("models/v4_flash_like.ini"));
  const auto cap = sim::plan_dsv4_capacity(sim::build_dsv4_schema(st, c), int64_t{64} << 30, 32768);
  const Record pub = run("dsv4_capacity", {{"context", "32768"}, {"variant", "public_v4"}});
  EXPECT_EQ(metric(pub, "max_seqs"), cap.max_seqs);
  EXPECT_DOUBLE_EQ(metric(pub, "bytes_per_token"), cap.bytes_per_token);
  EXPECT_NE(check_error("dsv4_capacity", {{"model", "nope"}})
                .find("neither a file nor a stack in data/models"),
            std::string::npos);
  EXPECT_NE(check_error("dsv4_capacity", {{"csa_ratio", "1"}}).find("ratio"), std::string::npos);
  EXPECT_NE(check_error("dsv4_capacity", {{"csa_ratio", "3"}, {"block_tokens", "128"}}),
            "<no error>");
}

TEST(DriverKinds, CompressionErrorSeparatesCompressionAndStorage) {
  const uint64_t seed = kvlab::test::seed_for("driver.compression_error");
  SCOPED_TRACE("seed " + std::to_string(seed));
  RunContext ctx;
  ctx.seed = seed;
  auto pt = [&](const char* layer, const char* ratio, const char* variant) {
    return run("compression_error",
               {{"layer", layer},
                {"ratio", ratio},
                {"variant", variant},
                {"tokens", "1024"},
                {"dist", "ar1"},
                {"queries", "2"},
                {"heads", "4"}},
               ctx);
  };
  const Record r2 = pt("csa", "2", "seed004"), r16 = pt("csa", "16", "seed004"),
               pub = pt("csa", "4", "public_v4");
  EXPECT_EQ(metric(r2, "entries"), 512);
  // Coarser pooling of correlated tokens loses more.
  EXPECT_LT(metric(r2, "attn_rel_l2_fp32"), metric(r16, "attn_rel_l2_fp32"));
  // FP8 storage: small but real (E4M3 relative error ~2^-5 per element).
  for (const Record* r : {&r2, &r16, &pub}) {
    EXPECT_GT(metric(*r, "entry_rel_l2_mean"), 0);
    EXPECT_LT(metric(*r, "entry_rel_l2_mean"), 0.05);
    EXPECT_GT(metric(*r, "attn_storage_rel_l2"), 0);
    EXPECT_LT(metric(*r, "attn_storage_rel_l2"), 0.05);
    EXPECT_GT(metric(*r, "topk_recall"), 0.5);
    EXPECT_LE(metric(*r, "topk_recall"), 1.0);
  }
  ASSERT_NE(trace(r2, "entry_rel_l2"), nullptr);
  EXPECT_EQ(trace(r2, "entry_rel_l2")->array.size(), 512u);
  // HCA has no indexer; the byte count is the dsv4 schema's.
  const Record h = pt("hca", "128", "seed004");
  EXPECT_TRUE(std::isnan(metric(h, "key_rel_l2_mean")));
  EXPECT_TRUE(std::isnan(metric(h, "topk_recall")));
  EXPECT_EQ(metric(h, "entries"), 8);
  EXPECT_NE(check_error("compression_error", {{"ratio", "1"}}).find("ratio = '1': out of range"),
            std::string::npos);
  EXPECT_NE(check_error("compression_error", {{"nope_dim", "100"}}), "<no error>");
  EXPECT_NE(
      check_error("compression_error", {{"indexer", "mxfp4_hadamard"}, {"indexer_dim", "96"}}),
      "<no error>");
}
