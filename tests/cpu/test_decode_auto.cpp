// test_decode_auto.cpp: the lookup of `version = auto` (gpu/attention/decode_auto.h) on the
// CPU: the compiled-in calibration table (decode_auto_table.inc) is well formed and finds
// every measured shape as its own nearest row; the nearest-neighbour rule prefers the same
// layout / head_dim / group / block size, then the closest batch and context; another device
// or format has no candidate (the default rule takes over); a forced split applies only to
// its measured batch and context.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "gpu/attention/decode_auto.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"

namespace kvlab::gpu {
namespace {

const std::vector<DecodeAutoRow>& compiled_table() {
  static const std::vector<DecodeAutoRow> rows = {
#include "gpu/attention/decode_auto_table.inc"
  };
  return rows;
}

DecodeAutoQuery query_of(const DecodeAutoRow& r) {
  DecodeAutoQuery q;
  q.device = r.device, q.kv_format = r.kv_format, q.layout = r.layout;
  q.head_dim = r.head_dim, q.gqa_group = r.gqa_group, q.block_size = r.block_size;
  q.batch = r.batch, q.context = r.context;
  return q;
}

TEST(DecodeAuto, CompiledTableIsWellFormed) {
  const auto& t = compiled_table();
  ASSERT_FALSE(t.empty());
  std::set<std::string> shapes;
  for (const DecodeAutoRow& r : t) {
    const std::string what = std::string(r.kv_format) + " " + r.layout + " " +
                             std::to_string(r.batch) + "x" + std::to_string(r.context);
    EXPECT_NO_THROW(parse_kv_format(r.kv_format)) << what;
    EXPECT_NO_THROW(parse_kv_layout(r.layout)) << what;
    EXPECT_EQ(std::string(r.version).rfind('v', 0), 0u) << what << ": a registry name";
    EXPECT_NE(std::string(r.version), "auto") << what;
    EXPECT_GT(r.head_dim, 0) << what;
    EXPECT_GT(r.gqa_group, 0) << what;
    EXPECT_GT(r.block_size, 0) << what;
    EXPECT_GT(r.batch, 0) << what;
    EXPECT_GT(r.context, 0) << what;
    EXPECT_GE(r.num_splits, 0) << what;
    EXPECT_TRUE(std::isfinite(r.median_us) && r.median_us > 0) << what;
    EXPECT_TRUE(shapes
                    .insert(std::string(r.device) + "|" + what + "|" + std::to_string(r.head_dim) +
                            "|" + std::to_string(r.gqa_group) + "|" + std::to_string(r.block_size))
                    .second)
        << what << ": one row per shape";
  }
}

TEST(DecodeAuto, EveryMeasuredShapeFindsItself) {
  const auto& t = compiled_table();
  for (const DecodeAutoRow& r : t) {
    const DecodeAutoQuery q = query_of(r);
    const DecodeAutoRow* n = nearest_auto_row(t, q);
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n, &r) << r.kv_format << " " << r.batch << "x" << r.context;
    EXPECT_EQ(auto_row_distance(r, q), 0.0);
    EXPECT_EQ(auto_row_splits(*n, q), r.num_splits);
  }
}

std::vector<DecodeAutoRow> synthetic() {
  return {
      {"GPU A", "bf16", "nhd", 128, 4, 16, 1, 32768, "v4_mma_decode", 33, 58.0},
      {"GPU A", "bf16", "nhd", 128, 4, 16, 64, 8192, "v5_mma_decode_2stage", 0, 750.0},
      {"GPU A", "bf16", "hnd", 128, 4, 16, 64, 8192, "v6_stream_k_decode", 0, 700.0},
      {"GPU A", "bf16", "nhd", 64, 4, 16, 64, 8192, "v3_flash_decoding", 0, 900.0},
      {"GPU A", "fp8_e4m3", "nhd", 128, 4, 16, 64, 8192, "v5_mma_decode_2stage", 0, 400.0},
      {"GPU B", "bf16", "nhd", 128, 4, 16, 64, 8192, "v4_mma_decode", 0, 760.0},
  };
}

TEST(DecodeAuto, NearestPrefersTheSameCategoriesThenTheClosestSize) {
  const auto rows = synthetic();
  DecodeAutoQuery q;
  q.device = "GPU A", q.kv_format = "bf16", q.layout = "nhd";
  q.head_dim = 128, q.gqa_group = 4, q.block_size = 16;
  q.batch = 48, q.context = 8192;  // closest to 64 x 8k, NHD
  EXPECT_STREQ(nearest_auto_row(rows, q)->version, "v5_mma_decode_2stage");
  q.layout = "hnd";
  EXPECT_STREQ(nearest_auto_row(rows, q)->version, "v6_stream_k_decode");
  q.layout = "split_x";  // no split-x row: the nearest size among the rest, table order
  EXPECT_STREQ(nearest_auto_row(rows, q)->version, "v5_mma_decode_2stage");
  q.layout = "nhd", q.batch = 2, q.context = 65536;  // closest to 1 x 32k
  EXPECT_STREQ(nearest_auto_row(rows, q)->version, "v4_mma_decode");
  q.head_dim = 64, q.batch = 64, q.context = 8192;
  EXPECT_STREQ(nearest_auto_row(rows, q)->version, "v3_flash_decoding");
  q.kv_format = "fp8_e4m3", q.head_dim = 128;
  EXPECT_STREQ(nearest_auto_row(rows, q)->version, "v5_mma_decode_2stage");
  q.kv_format = "nvfp4";  // unmeasured format: no candidate
  EXPECT_EQ(nearest_auto_row(rows, q), nullptr);
  q.kv_format = "bf16", q.device = "GPU C";  // unmeasured device
  EXPECT_EQ(nearest_auto_row(rows, q), nullptr);
  q.device = "GPU B";
  EXPECT_STREQ(nearest_auto_row(rows, q)->version, "v4_mma_decode");
}

TEST(DecodeAuto, ForcedSplitsOnlyForTheMeasuredShape) {
  const auto rows = synthetic();
  DecodeAutoQuery q = query_of(rows[0]);  // 1 x 32k: measured best with 33 splits
  EXPECT_EQ(auto_row_splits(*nearest_auto_row(rows, q), q), 33);
  q.batch = 2;  // same nearest row, another batch: the version's own plan
  EXPECT_EQ(nearest_auto_row(rows, q), &rows[0]);
  EXPECT_EQ(auto_row_splits(rows[0], q), 0);
}

// The scopes the registry declares for the versions that decline some geometries
// (DecodeVersionInfo::in_scope of the bulk-copy family, gpu/attention/mma_bulk_decode.cuh;
// the GPU suites DecodeV8-14 check the real predicates against these declines): v8 / v9
// copy bf16 / fp16 HND, v10-v12 also NHD and fp8_e4m3 at head_dim >= 128, v13 and v14 as v10
// but bf16 / fp16 at head_dim <= 128 only (v14 also declines nvfp4, which these queries do
// not ask); all need block_size a multiple of 16. The other
// versions serve every geometry of these queries.
bool mirrored_scope(const std::string& version, const DecodeAutoQuery& q) {
  const bool b16 = q.kv_format == "bf16" || q.kv_format == "fp16";
  const bool tiles = q.block_size % 16 == 0;
  if (version == "v8_mma_decode_bulk_page" || version == "v9_mma_decode_bulk_rows")
    return b16 && q.layout == "hnd" && tiles;
  const bool tma = version == "v10_mma_decode_tma_swizzle" ||
                   version == "v11_mma_decode_cluster_merge" ||
                   version == "v12_mma_decode_last_block_merge";
  if (tma || version == "v13_mma_decode_eight_warps" || version == "v14_mma_decode_page_heads")
    return ((b16 && (tma || q.head_dim <= 128)) ||
            (q.kv_format == "fp8_e4m3" && q.head_dim >= 128)) &&
           (q.layout == "hnd" || q.layout == "nhd") && tiles;
  return true;
}

// Every version the compiled table names is one whose scope this file mirrors: a scoped
// version (mirrored_scope has its predicate) or one that serves every geometry of the queries
// below. A version new to the table with neither would pass the next test unchecked
// (mirrored_scope returns true for a name it does not know).
TEST(DecodeAuto, EveryVersionOfTheTableHasItsScopeMirrored) {
  const std::set<std::string> scoped = {
      "v8_mma_decode_bulk_page", "v9_mma_decode_bulk_rows", "v10_mma_decode_tma_swizzle",
      "v11_mma_decode_cluster_merge", "v12_mma_decode_last_block_merge",
      "v13_mma_decode_eight_warps", "v14_mma_decode_page_heads"};
  const std::set<std::string> serves_all = {"v3_flash_decoding", "v4_mma_decode",
                                            "v5_mma_decode_2stage", "v6_stream_k_decode",
                                            "v7_mma_decode_l2_prefetch"};
  for (const DecodeAutoRow& r : compiled_table())
    EXPECT_TRUE(scoped.count(r.version) || serves_all.count(r.version))
        << r.version << " (" << r.kv_format << " " << r.batch << "x" << r.context
        << "): add its scope to mirrored_scope, or to serves_all if it serves every geometry";
  // A scoped name declines something mirrored_scope can express; a serves-all name nothing.
  DecodeAutoQuery split_x;
  split_x.kv_format = "bf16", split_x.layout = "split_x", split_x.block_size = 16;
  split_x.head_dim = 128;
  for (const std::string& v : scoped) EXPECT_FALSE(mirrored_scope(v, split_x)) << v;
  for (const std::string& v : serves_all) EXPECT_TRUE(mirrored_scope(v, split_x)) << v;
}

// Unmeasured shapes (other layouts, block sizes, head_dims, groups, sizes) next to measured
// rows of scoped versions: the rule never returns a row whose version declines the query,
// and returns the nearest of those that serve it, or none when no row serves it (the caller then
// takes its default rule). Without the scope, some of these queries
// do land on a declining version's row (the test checks that it covers such cases).
TEST(DecodeAuto, UnmeasuredShapesNeverPickAVersionOutOfItsScope) {
  const auto& t = compiled_table();
  int landed_out_of_scope_unscoped = 0, queries = 0, no_usable_row = 0;
  for (const char* f : {"bf16", "fp16", "fp8_e4m3"})
    for (const char* l : {"hnd", "nhd", "split_x"})
      for (int bs : {1, 8, 16, 24, 32, 128})
        for (int d : {64, 128, 256})
          for (int g : {1, 4, 8})
            for (int64_t b : {1, 3, 64, 200})
              for (int64_t c : {512, 6000, 32768, 100000}) {
                DecodeAutoQuery q;
                q.device = t.front().device, q.kv_format = f, q.layout = l;
                q.block_size = bs, q.head_dim = d, q.gqa_group = g, q.batch = b, q.context = c;
                auto usable = [&](const DecodeAutoRow& r) { return mirrored_scope(r.version, q); };
                const DecodeAutoRow* plain = nearest_auto_row(t, q);
                const DecodeAutoRow* n = nearest_auto_row(t, q, usable);
                if (!plain) continue;  // an unmeasured format on this device
                ++queries;
                if (!mirrored_scope(plain->version, q)) ++landed_out_of_scope_unscoped;
                if (!n) {
                  // No row serves the query (e.g. fp8_e4m3 at page 1, where every row of the
                  // format is a version that needs pages of 16): the caller's default rule.
                  for (const DecodeAutoRow& r : t)  // a row of the query's device and format
                    ASSERT_FALSE(usable(r) && std::isfinite(auto_row_distance(r, q)))
                        << f << " " << l << " b" << bs << ": " << r.version
                        << " serves the query, none was returned";
                  ++no_usable_row;
                  continue;
                }
                const std::string what = std::string(f) + " " + l + " bs" + std::to_string(bs) +
                                         " d" + std::to_string(d) + " " + std::to_string(b) +
                                         "x" + std::to_string(c) + ": " + n->version;
                EXPECT_TRUE(mirrored_scope(n->version, q)) << what;
                double nearest_usable = INFINITY;
                for (const DecodeAutoRow& r : t)
                  if (usable(r)) nearest_usable = std::fmin(nearest_usable, auto_row_distance(r, q));
                EXPECT_EQ(auto_row_distance(*n, q), nearest_usable) << what;
              }
  EXPECT_GT(queries, 1000);
  EXPECT_LT(no_usable_row, queries / 2) << "most queries must find a row that serves them";
  EXPECT_GT(landed_out_of_scope_unscoped, 0)
      << "the table has no scoped version next to a declined geometry: the test proves nothing";
}

// The scope filter on a synthetic table: a declining version's exact row is passed over for
// the nearest row of a version that serves the query.
TEST(DecodeAuto, TheScopeFilterPassesOverDecliningVersions) {
  const auto rows = synthetic();
  DecodeAutoQuery q;
  q.device = "GPU A", q.kv_format = "bf16", q.layout = "hnd";
  q.head_dim = 128, q.gqa_group = 4, q.block_size = 16, q.batch = 64, q.context = 8192;
  EXPECT_STREQ(nearest_auto_row(rows, q)->version, "v6_stream_k_decode");
  auto no_v6 = [](const DecodeAutoRow& r) { return std::string(r.version) != "v6_stream_k_decode"; };
  EXPECT_STREQ(nearest_auto_row(rows, q, no_v6)->version, "v5_mma_decode_2stage");
  auto none = [](const DecodeAutoRow&) { return false; };
  EXPECT_EQ(nearest_auto_row(rows, q, none), nullptr);
}

}  // namespace
}  // namespace kvlab::gpu
