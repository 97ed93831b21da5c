// test_bench_kinds.cu: the driver's GPU benches (experiments/kinds/decode_attention.cpp,
// append.cpp) on small points: every decode version validates and times on a paged case,
// the record carries the error of the same configuration next to its timing, the subsample
// of large batches is the documented one, the append is byte-exact, and points a version
// cannot run are skipped with the registry's reason. Skips without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "experiments/cli/registry.h"
#include "experiments/device/device.h"
#include "gpu/attention/decode.h"
#include "gpu/core/device_info.h"
#include "reference/layout/layout_names.h"

namespace kvlab::test {
namespace {

using exp::Point;
using exp::Record;
using exp::RunContext;

#define KVLAB_SKIP_WITHOUT_GPU_KINDS()                                               \
  do {                                                                               \
    if (!::kvlab::gpu::device_available()) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)

Point point_of(const std::string& kind, const std::map<std::string, std::string>& set) {
  Point p;
  p.study = "t";
  p.kind = kind;
  for (const auto& a : exp::find_bench(kind).axes()) {
    auto it = set.find(a.name);
    p.axes.emplace_back(a.name, it == set.end() ? a.default_value : it->second);
  }
  return p;
}

double metric(const Record& r, const std::string& name) {
  for (const auto& [k, v] : r.metrics)
    if (k == name) return v;
  return NAN;
}

RunContext context() {
  RunContext ctx;
  ctx.seed = 20240601;
  exp::probe_device(&ctx);
  ctx.timing_cfg.min_reps = 5;
  ctx.timing_cfg.max_reps = 20;
  ctx.timing_cfg.max_seconds = 0.2;
  std::string note;
  exp::measure_ceilings(&ctx, &note);
  return ctx;
}

}  // namespace

// The registry's reason for a point of the kind's default shape (8 kv heads x GQA 4, head_dim
// 128, block 16, NHD) with `batch` sequences of at most `context` tokens ("" = supported).
// Pointers stay null: the reason depends on shapes and limits only.
std::string registry_reason(const std::string& fmt, int batch, int context, int version) {
  DecodeArgs a;
  a.q_dtype = DType::kBF16;
  a.kv.geom.layout = KvLayout::kNHD;
  a.kv.geom.format = parse_kv_format(fmt);
  a.kv.geom.head_dim = 128;
  a.kv.geom.block_size = 16;
  a.kv.geom.num_kv_heads = 8;
  a.kv.geom.num_blocks = int64_t{batch} * ((context + 15) / 16);
  a.num_seqs = batch;
  a.num_qo_heads = 32;
  a.max_blocks_per_seq = (context + 15) / 16;
  a.max_seq_len = context;
  return gpu::decode_unsupported_reason(a, version);
}

TEST(BenchKinds, DecodeEveryVersionValidatesThenTimes) {
  KVLAB_SKIP_WITHOUT_GPU_KINDS();
  RunContext ctx = context();
  exp::Bench& b = exp::find_bench("decode_attention");
  for (const char* fmt : {"bf16", "fp8_e4m3", "nvfp4"})
    for (const auto& v : gpu::decode_versions()) {
      const Point p = point_of("decode_attention", {{"kv_format", fmt},
                                                    {"batch", "3"},
                                                    {"context", "1031"},
                                                    {"lengths", "mixed"},
                                                    {"version", v.name}});
      const Record r = b.run(p, ctx);
      // A skip must be the version's own, declared limit for this shape (the registry
      // declines the same shape), never a failure to set the point up.
      if (r.status == exp::Status::kSkipped) {
        EXPECT_FALSE(registry_reason(fmt, 3, 1031, v.id).empty())
            << v.name << " " << fmt
            << " skipped although the registry supports the shape: " << r.reason;
        continue;
      }
      ASSERT_EQ(r.status, exp::Status::kOk) << v.name << " " << fmt << ": " << r.reason;
      EXPECT_EQ(metric(r, "validated_seqs"), 3) << v.name;
      EXPECT_EQ(metric(r, "violations"), 0) << v.name;
      EXPECT_EQ(metric(r, "nonfinite_out"), 0) << v.name;
      EXPECT_EQ(metric(r, "guards_intact"), 1) << v.name;
      EXPECT_GT(metric(r, "median_us"), 0) << v.name;
      EXPECT_GT(metric(r, "bytes_per_s"), 0) << v.name;
      EXPECT_NEAR(metric(r, "bytes_per_s") * metric(r, "median_us") * 1e-6, metric(r, "min_bytes"),
                  1e-9 * metric(r, "min_bytes"));
      EXPECT_GT(metric(r, "pct_read_ceiling"), 0) << v.name;
    }
}

TEST(BenchKinds, DecodeLargeBatchValidatesADocumentedSubsample) {
  KVLAB_SKIP_WITHOUT_GPU_KINDS();
  RunContext ctx = context();
  ctx.timing = false;  // validation only (kvlab validate)
  exp::Bench& b = exp::find_bench("decode_attention");
  std::string newest;  // the newest version built for every geometry (the kind's default: NHD)
  for (const auto& v : gpu::decode_versions())
    if (!v.in_scope) newest = v.name;
  const Record r = b.run(
      point_of("decode_attention", {{"batch", "37"}, {"context", "300"}, {"version", newest}}),
      ctx);
  ASSERT_EQ(r.status, exp::Status::kOk) << r.reason;
  EXPECT_EQ(metric(r, "validated_seqs"), 4);
  EXPECT_TRUE(std::isnan(metric(r, "median_us")));  // not timed
  bool documented = false;
  for (const auto& [k, v] : r.labels)
    if (k == "validation")
      documented = v.find("sequences 0 ") == 0 && v.find(" 36 of 37") != std::string::npos;
  EXPECT_TRUE(documented);
}

TEST(BenchKinds, AppendIsByteExactAndTimed) {
  KVLAB_SKIP_WITHOUT_GPU_KINDS();
  RunContext ctx = context();
  exp::Bench& b = exp::find_bench("append");
  for (const char* fmt : {"bf16", "fp8_e4m3_pt", "nvfp4", "mxfp4"})
    for (const char* layout : {"nhd", "split_x"}) {
      // 5000 tokens: larger than the validated case (4096), so both paths run.
      const Record r = b.run(
          point_of("append", {{"kv_format", fmt}, {"layout", layout}, {"tokens", "5000"}}), ctx);
      ASSERT_EQ(r.status, exp::Status::kOk) << fmt << " " << layout << ": " << r.reason;
      EXPECT_EQ(metric(r, "differing_bytes"), 0);
      EXPECT_EQ(metric(r, "validated_tokens"), 4096);
      EXPECT_GT(metric(r, "bytes_per_s"), 0);
      EXPECT_GT(metric(r, "pct_copy_ceiling"), 0);
    }
}

}  // namespace kvlab::test
