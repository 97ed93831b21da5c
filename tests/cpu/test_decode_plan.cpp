// test_decode_plan.cpp: the launch plans of the tensor-core decode versions
// (gpu/attention/decode_plan.h) on the CPU: the KV-split rule of v4/v5 reproduces the
// plans gpu/attention/TUNING.md measured, keeps its invariants over a grid of shapes and
// honours a forced split count; the stream-K partition of v6 covers every tile exactly
// once, walks the segments of each block in item order, and assigns the partial-result
// slots and merge block sets the kernel relies on (the kernel calls the same functions).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "gpu/attention/decode_plan.h"
#include "tests/common/test_env.h"

namespace kvlab::gpu {
namespace {

SplitPlanInput split_input(int64_t items, int64_t bound, int64_t token_bytes, int64_t granule,
                           int64_t slots) {
  SplitPlanInput in;
  in.items = items;
  in.seq_len_bound = bound;
  in.token_bytes = token_bytes;
  in.granule = granule;
  in.slots = slots;
  return in;
}

// BF16, d 128: 512 bytes of K+V per token of a KV head; 8 KV heads x group 4 (1 query tile).
constexpr int64_t kBf16TokenBytes = 512;

TEST(DecodeSplitPlan, ReproducesTheMeasuredPlans) {
  const DecodeTuning tu;
  // v5 at 64 x 8k (3 blocks/SM: 396 slots, 16-token tiles x 4 warps): 512 items are 1.29
  // waves, so the wave rule splits until the last wave is >= 90 % full: 3 splits, 3.9 waves.
  const SplitPlan v5 = plan_kv_splits(split_input(512, 8192, kBf16TokenBytes, 64, 396), tu);
  EXPECT_EQ(v5.num_splits, 3);
  EXPECT_EQ(v5.grid, 512 * 3);
  // v4 at 64 x 8k (2 blocks/SM: 264 slots): 512 items = 1.94 waves, no split.
  const SplitPlan v4 = plan_kv_splits(split_input(512, 8192, kBf16TokenBytes, 64, 264), tu);
  EXPECT_EQ(v4.num_splits, 1);
  EXPECT_EQ(v4.chunk_tokens, 8192);
  // v4 at 1 x 32k: 8 items split for one wave of 264 slots (33 splits of 993 tokens, rounded
  // up to whole granules: 32 chunks of 1024 tokens, 256 blocks).
  const SplitPlan b1 = plan_kv_splits(split_input(8, 32768, kBf16TokenBytes, 64, 264), tu);
  EXPECT_EQ(b1.chunk_tokens, 1024);
  EXPECT_EQ(b1.num_splits, 32);
  EXPECT_LE(b1.grid, 264) << "one wave: every block starts at once";
  // The per-block byte cap: 2 items of 128k tokens with 16 slots would take one block
  // each; 4 MiB / 512 B = 8192 tokens per block at most.
  const SplitPlan cap = plan_kv_splits(split_input(2, 131072, kBf16TokenBytes, 64, 2), tu);
  EXPECT_LE(cap.chunk_tokens, 8192);
  EXPECT_GE(cap.num_splits, 16);
}

TEST(DecodeSplitPlan, InvariantsOverAGridOfShapes) {
  DecodeTuning many_rule;
  many_rule.min_items_unsplit = 96;
  int checked = 0;
  for (const DecodeTuning& tu : {DecodeTuning{}, many_rule})
  for (int64_t items : {1, 3, 8, 31, 64, 264, 512, 2048})
    for (int64_t bound : {0, 1, 15, 16, 17, 513, 4096, 32768, 131072})
      for (int64_t granule : {64, 128, 256})
        for (int64_t slots : {132, 264, 396, 528}) {
          const SplitPlanInput in = split_input(items, bound, kBf16TokenBytes, granule, slots);
          const SplitPlan pl = plan_kv_splits(in, tu);
          const std::string what = "items " + std::to_string(items) + " bound " +
                                   std::to_string(bound) + " granule " + std::to_string(granule) +
                                   " slots " + std::to_string(slots);
          ASSERT_GE(pl.num_splits, 1) << what;
          EXPECT_EQ(pl.chunk_tokens % granule, 0) << what;
          EXPECT_EQ(pl.grid, items * pl.num_splits) << what;
          if (bound > 0) {
            EXPECT_GE(pl.num_splits * pl.chunk_tokens, bound) << what << ": every token covered";
            EXPECT_LT((pl.num_splits - 1) * pl.chunk_tokens, bound) << what << ": no empty split";
            // Every warp keeps at least 2 tiles unless the sequence itself is shorter.
            if (bound >= 2 * granule) EXPECT_GE(pl.chunk_tokens, 2 * granule) << what;
            // The byte cap (4 MiB; 16 MiB from min_items_unsplit items on), unless a chunk of
            // 2 granules is already above it.
            const int64_t cap_tokens = items >= tu.min_items_unsplit ? 32768 : 8192;
            EXPECT_LE(pl.chunk_tokens, std::max<int64_t>(2 * granule, cap_tokens)) << what;
            // Many items below one wave are never split to fill it.
            if (items >= tu.min_items_unsplit && items < slots &&
                bound <= cap_tokens)
              EXPECT_EQ(pl.num_splits, 1) << what;
          } else {
            EXPECT_EQ(pl.num_splits, 1) << what;
          }
          ++checked;
        }
  std::printf("%d shapes checked\n", checked);
}

// The shapes where the fair sweep measured one block per item faster than the split rule
// (TUNING.md, step 12, H100: v4 2 blocks/SM = 264 slots, v5 3 = 396), the shapes where the
// splits won, and the knob that restores the old rule.
TEST(DecodeSplitPlan, ManyItemsAreNotSplitWhereOneBlockPerItemMeasuredFaster) {
  DecodeTuning tu;
  tu.min_items_unsplit = 96;  // the opt-in rule (off by default: TUNING.md step 14)
  // Batch 16 x 8 KV heads = 128 items on 264 slots (v4): the one-wave fill split them in two;
  // no split measured 2-8 % faster at 512 .. 128k tokens.
  for (int64_t bound : {512, 2048, 4096, 8192, 32768})
    EXPECT_EQ(plan_kv_splits(split_input(128, bound, kBf16TokenBytes, 64, 264), tu).num_splits, 1)
        << "batch 16 x " << bound;
  // Batch 256 = 2048 items on 396 slots (v5): 5.17 waves, the wave rule split them in two;
  // no split measured 2-16 % faster.
  for (int64_t bound : {512, 2048, 8192})
    EXPECT_EQ(plan_kv_splits(split_input(2048, bound, kBf16TokenBytes, 64, 396), tu).num_splits,
              1)
        << "batch 256 x " << bound;
  // 64 x 32k (512 items, 16 MiB each): the 4 MiB cap split them in four; no split measured
  // faster (v4).
  EXPECT_EQ(plan_kv_splits(split_input(512, 32768, kBf16TokenBytes, 64, 264), tu).num_splits, 1);
  // Still split: v5 at 64 x 8k (1.29 waves: the wave rule gained 11 %), batch 1-8.
  EXPECT_EQ(plan_kv_splits(split_input(512, 8192, kBf16TokenBytes, 64, 396), tu).num_splits, 3);
  EXPECT_GT(plan_kv_splits(split_input(64, 32768, kBf16TokenBytes, 64, 264), tu).num_splits, 1)
      << "batch 8 x 32k";
  EXPECT_EQ(plan_kv_splits(split_input(8, 32768, kBf16TokenBytes, 64, 264), tu).num_splits, 32)
      << "batch 1 x 32k";
  // A 128k bound with many items still splits at the 16 MiB cap (skewed batches).
  const SplitPlan skew = plan_kv_splits(split_input(256, 131072, kBf16TokenBytes, 64, 264), tu);
  EXPECT_EQ(skew.chunk_tokens, 32768);
  EXPECT_EQ(skew.num_splits, 4);
  // The default (min_items_unsplit off) is the old rule (fill, 4 MiB cap, waves): the fair
  // run measured the many-items rule 1.3-2.2x slower for v7, v5 FP8 / NVFP4 at batch 16.
  const DecodeTuning old;
  EXPECT_EQ(plan_kv_splits(split_input(128, 8192, kBf16TokenBytes, 64, 264), old).num_splits, 2);
  EXPECT_EQ(plan_kv_splits(split_input(2048, 2048, kBf16TokenBytes, 64, 396), old).num_splits, 2);
  EXPECT_EQ(plan_kv_splits(split_input(512, 32768, kBf16TokenBytes, 64, 264), old).num_splits, 4);
}

TEST(DecodeSplitPlan, ForcedSplitsAreHonouredAndClamped) {
  DecodeTuning tu;
  for (int forced : {1, 2, 7, 64, 100000}) {
    tu.num_splits = forced;
    const SplitPlan pl = plan_kv_splits(split_input(16, 10000, kBf16TokenBytes, 64, 264), tu);
    const int64_t max_splits = (10000 + 63) / 64;  // one granule per split at most
    const int64_t sp = std::min<int64_t>(forced, max_splits);
    const int64_t chunk = ((10000 + sp - 1) / sp + 63) / 64 * 64;  // whole granules
    EXPECT_EQ(pl.chunk_tokens, chunk) << forced;
    EXPECT_EQ(pl.num_splits, (10000 + chunk - 1) / chunk) << forced;
    EXPECT_LE(pl.num_splits, sp) << forced;
  }
}

// ------------------------------------------------------------------ stream-K
TEST(DecodeStreamK, RangesPartitionTheUnits) {
  for (int64_t W = 0; W <= 300; W += (W < 40 ? 1 : 13))
    for (int64_t C = 1; C <= 40; ++C) {
      ASSERT_EQ(streamk_unit_begin(0, W, C), 0);
      ASSERT_EQ(streamk_unit_begin(C, W, C), W);
      for (int64_t c = 0; c < C; ++c) {
        const int64_t n = streamk_unit_begin(c + 1, W, C) - streamk_unit_begin(c, W, C);
        ASSERT_GE(n, W / C) << W << " " << C;
        ASSERT_LE(n, (W + C - 1) / C) << W << " " << C;
      }
      for (int64_t u = 0; u < W; ++u) {
        const int64_t c = streamk_block_of_unit(u, W, C);
        ASSERT_GE(c, 0);
        ASSERT_LT(c, C);
        ASSERT_LE(streamk_unit_begin(c, W, C), u) << W << " " << C << " " << u;
        ASSERT_GT(streamk_unit_begin(c + 1, W, C), u) << W << " " << C << " " << u;
      }
    }
}

struct UnitOwner {
  int seq, item;
  int64_t tile;
};

// The block-by-block walk the v6 kernel performs, replayed with the header's cursor over
// random lengths (empty and invalid ones included), checked against a brute-force map.
TEST(DecodeStreamK, SegmentsSlotsAndMergeSetsMatchABruteForceMap) {
  const uint64_t seed = test::seed_for("decode_plan.streamk");
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  int cases = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int num_seqs = 1 + static_cast<int>(rng() % 40);
    const int hq = std::vector<int>{1, 2, 3, 8, 16}[rng() % 5];
    const int T = (rng() % 2) ? 16 : 32;
    const int64_t bound = 1 + static_cast<int64_t>(rng() % 3000);
    const int64_t C = 1 + static_cast<int64_t>(rng() % 300);
    std::vector<int> lens(num_seqs);
    for (int& l : lens) {
      const int r = static_cast<int>(rng() % 10);
      l = r == 0 ? 0
                 : (r == 1 ? -1
                           : (r == 2 ? static_cast<int>(bound) + 5
                                     : 1 + static_cast<int>(rng() % bound)));
    }
    auto len_of = [&](int s) { return lens[s]; };
    // Brute force: unit -> (seq, item, tile) in unit order.
    std::vector<UnitOwner> owner;
    std::vector<int64_t> item_first;  // by flat item index seq * hq + item
    item_first.assign(static_cast<size_t>(num_seqs) * hq, -1);
    for (int s = 0; s < num_seqs; ++s) {
      const int64_t tiles = streamk_seq_tiles(lens[s], bound, T);
      for (int i = 0; i < hq; ++i) {
        if (tiles > 0) item_first[s * hq + i] = static_cast<int64_t>(owner.size());
        for (int64_t t = 0; t < tiles; ++t) owner.push_back({s, i, t});
      }
    }
    const int64_t W = static_cast<int64_t>(owner.size());
    // Per item: the (block, slot) pairs of its partial results.
    std::map<int, std::vector<std::pair<int64_t, int>>> partials;
    std::vector<int64_t> covered(W, 0);
    for (int64_t c = 0; c < C; ++c) {
      const int64_t ub = streamk_unit_begin(c, W, C), ue = streamk_unit_begin(c + 1, W, C);
      if (ub == ue) continue;
      StreamKCursor cur;
      cur.start(0, 0, len_of, num_seqs, bound, T);
      cur.seek(ub, len_of, num_seqs, hq, bound, T);
      std::set<int> slots_used;
      int64_t u = ub;
      while (u < ue) {
        ASSERT_LT(cur.seq, num_seqs);
        const int item = cur.item_in_seq(u);
        const int64_t first = cur.first + item * cur.tiles;
        const int64_t seg_end = std::min(ue, first + cur.tiles);
        ASSERT_EQ(owner[u].seq, cur.seq);
        ASSERT_EQ(owner[u].item, item);
        ASSERT_EQ(owner[u].tile, cur.tile_in_item(u));
        ASSERT_EQ(item_first[cur.seq * hq + item], first);
        for (int64_t x = u; x < seg_end; ++x) covered[x]++;
        const bool whole = first >= ub && first + cur.tiles <= ue;
        if (!whole) {
          const int slot = streamk_partial_slot(c, first, W, C);
          ASSERT_TRUE(slots_used.insert(slot).second) << "block " << c << " reuses slot " << slot;
          partials[cur.seq * hq + item].push_back({c, slot});
        }
        u = seg_end;
        if (u < ue) cur.seek(u, len_of, num_seqs, hq, bound, T);
      }
    }
    for (int64_t x = 0; x < W; ++x) ASSERT_EQ(covered[x], 1) << "unit " << x;
    // The loader's walk: seek once, then advance by the warp count; the same position as a
    // fresh seek at every unit.
    for (int step : {1, 4}) {
      for (int64_t u0 = 0; u0 < std::min<int64_t>(W, 8); ++u0) {
        StreamKCursor a;
        a.start(0, 0, len_of, num_seqs, bound, T);
        a.seek(u0, len_of, num_seqs, hq, bound, T);
        for (int64_t u = u0; u < W; u += step) {
          if (u > u0) a.advance(step, len_of, num_seqs, hq, bound, T);
          ASSERT_EQ(a.seq, owner[u].seq) << "unit " << u << " step " << step;
          ASSERT_EQ(a.item, owner[u].item) << "unit " << u << " step " << step;
          ASSERT_EQ(a.tile, owner[u].tile) << "unit " << u << " step " << step;
          ASSERT_EQ(a.first + a.item * a.tiles + a.tile, u);
        }
      }
    }
    for (const auto& [flat, parts] : partials) {
      const int64_t tiles = streamk_seq_tiles(lens[flat / hq], bound, T);
      ASSERT_EQ(static_cast<int64_t>(parts.size()),
                streamk_item_parts(item_first[flat], tiles, W, C))
          << "W " << W << " C " << C;
      ASSERT_GE(parts.size(), 2u) << "a partial item is shared by >= 2 blocks";
      for (size_t k = 0; k < parts.size(); ++k) {
        ASSERT_EQ(parts[k].first,
                  streamk_part_block(static_cast<int64_t>(k), item_first[flat], W, C));
        ASSERT_EQ(parts[k].second, streamk_partial_slot(parts[k].first, item_first[flat], W, C));
      }
    }
    ++cases;
  }
  std::printf("%d random batches checked\n", cases);
}

TEST(DecodeStreamK, PlanUsesFewerBlocksForSmallWork) {
  DecodeTuning tu;
  StreamKPlanInput in;
  in.items = 8;
  in.tile_tokens = 16;
  in.warps = 4;
  in.slots = 396;
  in.seq_len_bound = 512;  // 8 x 32 = 256 tiles: 8 tiles (2 per warp) per block -> 32 blocks
  StreamKPlan pl = plan_stream_k(in, tu);
  EXPECT_EQ(pl.max_units, 256);
  EXPECT_EQ(pl.blocks, 32);
  in.seq_len_bound = 32768;  // 16384 tiles: every slot
  pl = plan_stream_k(in, tu);
  EXPECT_EQ(pl.blocks, 396);
  tu.num_splits = 3;  // forced: 3 blocks per item
  EXPECT_EQ(plan_stream_k(in, tu).blocks, 24);
  tu.num_splits = 1000;
  EXPECT_EQ(plan_stream_k(in, tu).blocks, 396);
  tu = DecodeTuning{};
  tu.min_tiles_per_block = 1000;
  EXPECT_EQ(plan_stream_k(in, tu).blocks, 17);
  in.seq_len_bound = 0;  // nothing to read: one block writes the empty outputs
  EXPECT_EQ(plan_stream_k(in, DecodeTuning{}).blocks, 1);
  in.items = 0;
  EXPECT_EQ(plan_stream_k(in, DecodeTuning{}).blocks, 0);
}

// v15's plan: every resident slot (or a forced count per SM, clamped), fewer blocks for small
// work, never more blocks than units, and an empty or invalid item still owning one unit.
TEST(DecodeStreamKBound, PlanFillsTheSlotsAndClamps) {
  DecodeTuning tu;
  StreamKBoundInput in;
  in.items = 16 * 8;  // FP8 16 x 8k: 128 items of 512 tiles
  in.seq_len_bound = 8192;
  in.unit_tokens = 16;
  in.warps = 4;
  in.sm_count = 132;
  in.blocks_per_sm = 4;
  StreamKBoundPlan pl = plan_stream_k_bound(in, tu);
  EXPECT_EQ(pl.item_tiles, 512);
  EXPECT_EQ(pl.units, 128 * 512);
  EXPECT_EQ(pl.blocks, 528);
  EXPECT_TRUE(stream_k_bound_splits_items(pl));
  for (int forced : {1, 2, 3, 4, 9}) {
    tu.num_splits = forced;
    EXPECT_EQ(plan_stream_k_bound(in, tu).blocks, 132 * std::min(forced, 4)) << forced;
  }
  tu.num_splits = 0;
  // Small work: 1 x 512 (8 items of 32 tiles) takes one block per 8 units (two per warp).
  in.items = 8;
  in.seq_len_bound = 512;
  pl = plan_stream_k_bound(in, tu);
  EXPECT_EQ(pl.units, 256);
  EXPECT_EQ(pl.blocks, 32);
  tu.min_tiles_per_block = 64;
  EXPECT_EQ(plan_stream_k_bound(in, tu).blocks, 4);
  tu.min_tiles_per_block = 0;
  // Forced above the units: one unit per block at most.
  in.seq_len_bound = 20;
  tu.num_splits = 4;
  pl = plan_stream_k_bound(in, tu);
  EXPECT_EQ(pl.item_tiles, 2);
  EXPECT_EQ(pl.blocks, 16);
  // A bound of 0: each item keeps one unit (its owner writes the empty rows).
  in.seq_len_bound = 0;
  pl = plan_stream_k_bound(in, tu);
  EXPECT_EQ(pl.item_tiles, 1);
  EXPECT_EQ(pl.units, 8);
  EXPECT_EQ(pl.blocks, 8);
  EXPECT_FALSE(stream_k_bound_splits_items(pl));
  in.items = 0;
  EXPECT_EQ(plan_stream_k_bound(in, tu).blocks, 0);
  // One block per item exactly: no item is split.
  StreamKBoundPlan whole{512, 264 * 512, 264};
  EXPECT_FALSE(stream_k_bound_splits_items(whole));
  whole.blocks = 132;
  EXPECT_FALSE(stream_k_bound_splits_items(whole));
  whole.blocks = 263;
  EXPECT_TRUE(stream_k_bound_splits_items(whole));
}

// The parts of an item that hold tokens (the merge kernel folds exactly these): against a brute
// force over the blocks' ranges, for random partitions and lengths.
TEST(DecodeStreamKBound, UsedPartsMatchABruteForceOverTheRanges) {
  std::mt19937 rng(20261127);
  int checked = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int unit = (trial % 2) ? 16 : 32;
    const int64_t T = 1 + rng() % 40, items = 1 + rng() % 12;
    const int64_t W = items * T;
    const int64_t C = 1 + rng() % W;  // W >= C
    const int64_t item = rng() % items, first = item * T;
    const int64_t len = 1 + rng() % (T * unit);
    // Brute force: the blocks whose range meets the item, in order; a part holds tokens when
    // its first unit inside the item starts below len.
    int64_t used = 0, parts = 0;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t b = streamk_unit_begin(c, W, C), e = streamk_unit_begin(c + 1, W, C);
      const int64_t lo = std::max(b, first), hi = std::min(e, first + T);
      if (lo >= hi) continue;
      ASSERT_EQ(streamk_part_block(parts, first, W, C), c);
      ++parts;
      if ((lo - first) * unit < len) ++used;
    }
    ASSERT_EQ(parts, streamk_item_parts(first, T, W, C));
    ASSERT_EQ(used, stream_k_bound_used_parts(first, len, unit, W, C))
        << "T " << T << " items " << items << " C " << C << " item " << item << " len " << len;
    checked += parts > 1;
  }
  EXPECT_GT(checked, 1000);  // most trials split their item
}

}  // namespace
}  // namespace kvlab::gpu
