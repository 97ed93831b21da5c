// test_decode_cluster_plan.cpp: the host pieces of v11_mma_decode_cluster_merge's plan
// (gpu/attention/decode_plan.h) on the CPU: the cluster size chosen from an occupancy answer
// (the largest of 16 / 8 / 4 / 2 with at least one resident cluster), and what the plan does
// with a split count above it (the plan's own choice re-planned at the limit, a forced one
// declined), composed with the KV-split rule as bulk_make_plan composes them.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "gpu/attention/decode_plan.h"

namespace kvlab::gpu {
namespace {

TEST(DecodeClusterPlan, LargestResidentClusterFromTheOccupancyAnswer) {
  // Every size resident: 16.
  EXPECT_EQ(largest_resident_cluster([](int) { return 3; }), 16);
  // 16 not resident (e.g. 1 block per SM and GPCs of fewer usable SMs): 8.
  EXPECT_EQ(largest_resident_cluster([](int size) { return size > 8 ? 0 : 4; }), 8);
  // Only pairs fit.
  EXPECT_EQ(largest_resident_cluster([](int size) { return size == 2 ? 1 : 0; }), 2);
  // A failed query (reported as a negative or zero count) is "not resident".
  EXPECT_EQ(largest_resident_cluster([](int size) { return size >= 8 ? -1 : 2; }), 4);
  // Nothing fits: no cluster, so no split can be merged in one.
  EXPECT_EQ(largest_resident_cluster([](int) { return 0; }), 1);
  // Asked largest first, and not past the first size that fits.
  std::vector<int> asked;
  EXPECT_EQ(largest_resident_cluster([&](int size) {
              asked.push_back(size);
              return size <= 4 ? 1 : 0;
            }),
            4);
  EXPECT_EQ(asked, (std::vector<int>{16, 8, 4}));
}

TEST(DecodeClusterPlan, DecisionClampsThePlanAndDeclinesAForcedSplitAboveTheLimit) {
  for (int limit : {1, 2, 4, 8, 16})
    for (int planned = 1; planned <= 40; ++planned)
      for (bool forced : {false, true}) {
        const ClusterSplitDecision d = cluster_split_decision(planned, forced, limit);
        SCOPED_TRACE(testing::Message() << "planned " << planned << " forced " << forced
                                        << " limit " << limit);
        if (planned <= limit) {
          EXPECT_FALSE(d.decline);
          EXPECT_EQ(d.force_splits, 0);
        } else if (forced) {
          EXPECT_TRUE(d.decline);
          EXPECT_EQ(d.force_splits, 0);
        } else {
          EXPECT_FALSE(d.decline);
          EXPECT_EQ(d.force_splits, limit);
        }
      }
  // One split never needs a cluster, whatever the limit (even none).
  EXPECT_FALSE(cluster_split_decision(1, true, 1).decline);
  EXPECT_EQ(cluster_split_decision(1, false, 0).force_splits, 0);
  // No cluster at all (limit 1): the plan's own split falls back to one block per item.
  EXPECT_EQ(cluster_split_decision(7, false, 1).force_splits, 1);
}

// bulk_make_plan's composition over a grid of shapes: the plan's own split, then the
// decision, then (when clamped) the plan again at the forced limit. The result never
// exceeds the limit, a clamped plan covers the bound, and a forced split above the limit is
// declined only when its clamped count (plan_kv_splits clamps to the item's tiles) exceeds it.
TEST(DecodeClusterPlan, ComposedWithTheSplitRuleNeverExceedsTheLimit) {
  const int64_t granule = 64, token_bytes = 2 * 128 * 2;
  int clamped = 0, declined = 0;
  for (int limit : {2, 4, 8, 16})
    for (int64_t items : {1, 4, 8, 32, 128, 512})
      for (int64_t bound : {1, 17, 64, 512, 1000, 2048, 8192, 32768, 131072})
        for (int forced : {0, 2, 3, 5, 8, 16, 17, 47}) {
          SplitPlanInput in;
          in.items = items;
          in.seq_len_bound = bound;
          in.token_bytes = token_bytes;
          in.granule = granule;
          in.slots = 132 * 2;
          DecodeTuning tu;
          tu.num_splits = forced;
          SplitPlan pl = plan_kv_splits(in, tu);
          const ClusterSplitDecision d = cluster_split_decision(pl.num_splits, forced > 0, limit);
          SCOPED_TRACE(testing::Message() << items << " x " << bound << " forced " << forced
                                          << " limit " << limit);
          if (d.decline) {
            ++declined;
            EXPECT_GT(forced, limit);
            EXPECT_GT(pl.num_splits, limit);
            continue;
          }
          if (d.force_splits > 0) {
            ++clamped;
            EXPECT_EQ(forced, 0);
            DecodeTuning t = tu;
            t.num_splits = d.force_splits;
            pl = plan_kv_splits(in, t);
          }
          EXPECT_LE(pl.num_splits, limit);
          EXPECT_GE(pl.num_splits, 1);
          EXPECT_GE(pl.chunk_tokens * pl.num_splits, bound);  // every token has a split
          EXPECT_EQ(pl.grid, items * pl.num_splits);          // whole clusters
          EXPECT_EQ(pl.chunk_tokens % granule, 0);
        }
  // The grid reaches both branches (the test would pass vacuously otherwise).
  EXPECT_GT(clamped, 0);
  EXPECT_GT(declined, 0);
}

}  // namespace
}  // namespace kvlab::gpu
