// decode_plan.h: the launch plans of the tensor-core decode versions (v4+), as host code.
//
// Header-only and g++-compilable (tests/cpu/test_decode_plan.cpp checks every rule here on
// the CPU); the stream-K partition functions are host/device so that the v6 kernel and the
// host agree on who owns which tile by calling the same code.
//
// Two plans:
//  * KV splits (v4, v5): the (sequence, KV head, query tile) work items are each cut into
//    `num_splits` equal token chunks; one block per (item, split), merged by log-sum-exp.
//    The split count comes from the SM count, the resident blocks per SM and the batch
//    (gpu/attention/TUNING.md, steps 2 and 4).
//  * Stream-K (v6): a persistent grid of at most one wave of blocks; the work, counted in
//    tiles of `tile_tokens` tokens of each item, is cut into equal contiguous ranges, one
//    per block, on the device from the real sequence lengths (so a skewed batch is balanced
//    as well as a uniform one). A block's range may start or end inside an item; such
//    partial results are merged by a second kernel (stream_k_split_merge.cuh).
//  * Stream-K over the bound (v15): the same partition of units over a persistent grid, the
//    units counted from the length bound on the host (below).
//
// DecodeTuning is what a caller may change (a value passed to gpu::decode_attention: there
// is no process-wide state); the defaults are the measured best.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "reference/core/hostdevice.h"

namespace kvlab::gpu {

struct DecodeTuning {
  // 0: the version's own plan. > 0: forced.
  //   v4, v5: KV splits per work item (clamped to [1, tiles per item]);
  //   v6: persistent blocks per work item (the grid is min(resident slots, items x this)).
  int num_splits = 0;
  // When the work items fill fewer than one wave of resident blocks, each sequence is split
  // so that at most `fill_waves` waves of blocks exist (v4, v5, v7, v8; below
  // `min_items_unsplit` items only).
  int fill_waves = 1;
  // No block reads more than this many bytes of K+V (v4, v5, v7, v8: bounds the tail of
  // skewed batches; a long sequence becomes several blocks). From `min_items_unsplit` items
  // on, the cap is `many_items_chunk_factor` times this.
  int64_t max_chunk_bytes = int64_t{4} << 20;
  // Split further while the last wave of blocks would be less than this full (v4, v5:
  // equal-work blocks finish together, so 1.3 waves take 2); 0 disables. From
  // `min_items_unsplit` items on, only while the unsplit grid is under
  // `max_wave_rule_waves` waves.
  double min_wave_efficiency = 0.9;
  // From this many (sequence, KV head, query tile) items on, the items are not split to
  // fill a wave, the byte cap is `many_items_chunk_factor` x max_chunk_bytes, and the
  // wave-efficiency split applies only below `max_wave_rule_waves` waves. Off by default
  // (kNeverUnsplit): step 12 measured one block per item 2-8 % faster for v4/v5 BF16 at
  // batch 16 and 256 and at 64 x 32k, but the fair run with 96 as the default (TUNING.md,
  // step 14) measured the same rule 1.3-2.2x slower for v7 at batch 16, for v5 FP8 / NVFP4
  // at batch 16 and for the skewed 32 x 64k batch. The shapes where it wins get their
  // forced split from auto's measured table instead. 0: every item count.
  static constexpr int64_t kNeverUnsplit = int64_t{1} << 62;
  int64_t min_items_unsplit = kNeverUnsplit;
  int many_items_chunk_factor = 4;
  double max_wave_rule_waves = 2.0;
  // Launch the dependent kernel of a version with programmatic dependent launch (v4, v5:
  // the split merge; v6: the block that zeroes the merge counters runs beside the decode).
  bool pdl = true;
  // v6: the fewest tiles a persistent block takes (0: the version's default). Fewer blocks
  // than slots are launched when the work is small, so that each block amortizes its
  // start-up and no item is merged from more partial results than necessary.
  int min_tiles_per_block = 0;
};

// ------------------------------------------------------------------ KV splits (v4, v5)
struct SplitPlanInput {
  int64_t items = 0;          // (sequence, KV head, query tile) work items
  int64_t seq_len_bound = 0;  // tokens (the longest a sequence may be)
  int64_t token_bytes = 0;    // K + V bytes of one token of one KV head
  int64_t granule = 1;        // tokens: chunks are whole tiles of every warp (warp tile x warps)
  int64_t slots = 1;          // resident blocks on the device (SMs x blocks per SM)
};

struct SplitPlan {
  int num_splits = 1;        // chunks per item (the last ones may be empty for short sequences)
  int64_t chunk_tokens = 0;  // tokens per chunk, a multiple of the granule
  int64_t grid = 0;          // blocks: items x num_splits
};

// The v4/v5 split rule (TUNING.md steps 2, 4, 13 and 14; the `min_items_unsplit` parts are
// off by default, see DecodeTuning):
//  1. no split while the items fill a wave; below that, splits for `fill_waves` waves
//     (floor: items x splits never spills into one more wave) -- only below
//     `min_items_unsplit` items;
//  2. at least ceil(bound / max_chunk) splits (the per-block byte cap; from
//     `min_items_unsplit` items on the cap is `many_items_chunk_factor` times larger, 16 MiB
//     by default: a 64 x 32k BF16 item stays whole, a 128k one still splits for skewed
//     batches whose short sequences finish early);
//  3. at most ceil(bound / (2 granules)) splits (every warp keeps >= 2 tiles: the pipeline
//     has work);
//  4. more splits (up to 16) while the last wave would be < min_wave_efficiency full -- from
//     `min_items_unsplit` items on only while the unsplit grid is under
//     `max_wave_rule_waves` waves (measured: 1.29 waves gained 11 %, 5.17 waves lost 2-16 %).
// A forced `num_splits` replaces 1-4 (clamped to [1, tiles per item]).
inline SplitPlan plan_kv_splits(const SplitPlanInput& in, const DecodeTuning& tu) {
  SplitPlan pl;
  const int64_t bound = in.seq_len_bound;
  const int64_t granule = std::max<int64_t>(1, in.granule);
  const int64_t slots = std::max<int64_t>(1, in.slots);
  const int64_t min_chunk = 2 * granule;
  const bool many = in.items >= tu.min_items_unsplit;
  const int64_t cap_bytes =
      many ? tu.max_chunk_bytes * std::max(1, tu.many_items_chunk_factor) : tu.max_chunk_bytes;
  const int64_t max_chunk = std::max(
      min_chunk, cap_bytes / std::max<int64_t>(1, in.token_bytes) / granule * granule);
  auto chunk_of = [&](int64_t sp) {
    const int64_t c = bound > 0 ? (bound + sp - 1) / sp : granule;
    return (c + granule - 1) / granule * granule;
  };
  int64_t splits = 1;
  if (tu.num_splits > 0) {
    splits = std::clamp<int64_t>(tu.num_splits, 1,
                                 std::max<int64_t>(1, (bound + granule - 1) / granule));
  } else {
    if (bound > 0 && in.items > 0) {
      if (in.items < slots && !many)
        splits = std::max<int64_t>(1, std::max(1, tu.fill_waves) * slots / in.items);
      splits = std::max(splits, (bound + max_chunk - 1) / max_chunk);
      splits = std::min(splits, (bound + min_chunk - 1) / min_chunk);
      splits = std::max<int64_t>(splits, 1);
    }
    const double unsplit_waves = static_cast<double>(in.items) / static_cast<double>(slots);
    const bool wave_rule = !many || (unsplit_waves >= 1.0 && unsplit_waves < tu.max_wave_rule_waves);
    if (bound > 0 && in.items > 0 && tu.min_wave_efficiency > 0 && wave_rule) {
      for (int64_t sp = splits; sp <= splits + 16; ++sp) {
        const int64_t c = chunk_of(sp);
        if (c < min_chunk && sp > splits) break;
        const int64_t blocks = in.items * ((bound + c - 1) / c);
        const double waves = static_cast<double>(blocks) / static_cast<double>(slots);
        if (waves / std::ceil(waves) >= tu.min_wave_efficiency) {
          splits = sp;
          break;
        }
      }
    }
  }
  const int64_t chunk = std::min<int64_t>(chunk_of(splits), INT32_MAX / 2 / granule * granule);
  pl.chunk_tokens = chunk;
  pl.num_splits = bound > 0 ? static_cast<int>((bound + chunk - 1) / chunk) : 1;
  pl.grid = in.items * pl.num_splits;
  return pl;
}

// ------------------------------------------------------------------ cluster split merge (v11)
// v11 launches the splits of one item as one thread-block cluster and merges them through
// distributed shared memory, so an item has at most as many splits as a cluster can hold
// blocks. The sizes tried, largest first: 16 (non-portable: the kernel must allow it), 8 (the
// portable limit), 4, 2.
constexpr int kClusterSizes[] = {16, 8, 4, 2};

// The largest size of kClusterSizes with at least one resident cluster; active(size) is the
// occupancy answer (cudaOccupancyMaxActiveClusters for a cluster of `size` blocks; <= 0 when
// the cluster cannot be resident or the query failed). 1 when no size fits: no split can
// then be merged in a cluster.
template <class ActiveClusters>
int largest_resident_cluster(ActiveClusters&& active) {
  for (int size : kClusterSizes)
    if (active(size) >= 1) return size;
  return 1;
}

// What v11 does with a plan of `planned` splits (after the plan's clamp to the item's tiles)
// and a cluster limit `limit` (largest_resident_cluster): run it as it is; the plan's own
// choice above the limit is re-planned at `limit` splits (force_splits); a forced split
// (tuning.num_splits > 0) above it is declined.
struct ClusterSplitDecision {
  bool decline = false;  // a forced split the clusters cannot hold
  int force_splits = 0;  // > 0: re-plan with tuning.num_splits = force_splits
};
inline ClusterSplitDecision cluster_split_decision(int planned, bool forced, int limit) {
  ClusterSplitDecision d;
  if (planned <= std::max(1, limit)) return d;
  if (forced)
    d.decline = true;
  else
    d.force_splits = std::max(1, limit);
  return d;
}

// ------------------------------------------------------------------ stream-K (v6)
// W work units (tiles) in item order over C blocks: block c owns [unit_begin(c), unit_begin(c+1)).
// The ranges differ in length by at most one unit; with W < C some are empty.
KVLAB_HD int64_t streamk_unit_begin(int64_t c, int64_t W, int64_t C) {
  return c * W / C;
}
// The block whose range holds unit u (0 <= u < W): the largest c with unit_begin(c) <= u.
KVLAB_HD int64_t streamk_block_of_unit(int64_t u, int64_t W, int64_t C) {
  return ((u + 1) * C - 1) / W;
}
// Tiles of one item of a sequence of `len` tokens.
KVLAB_HD int64_t streamk_tiles(int64_t len, int tile_tokens) {
  return len > 0 ? (len + tile_tokens - 1) / tile_tokens : 0;
}

// The partial-result slot a block writes for an item it shares with other blocks. A block
// has at most two: slot 0 for the first item of its range, slot 1 for the last one when the
// range holds more than one item. `item_first_unit` is the item's first unit, `c` the block.
KVLAB_HD int streamk_partial_slot(int64_t c, int64_t item_first_unit, int64_t W, int64_t C) {
  return item_first_unit > streamk_unit_begin(c, W, C) ? 1 : 0;
}

// Tiles of one item of sequence length `len`; 0 for an empty sequence or an invalid length
// (< 0 or > bound: its rows are written as NaN by whoever handles empty sequences).
KVLAB_HD int64_t streamk_seq_tiles(int64_t len, int64_t bound, int tile_tokens) {
  return (len < 1 || len > bound) ? 0 : streamk_tiles(len, tile_tokens);
}

// Walks the sequences in unit order: sequence `seq` owns units [first, first + hq * tiles)
// (hq = items per sequence: KV heads x query tiles), its item i the units
// [first + i * tiles, first + (i + 1) * tiles). `lens(s)` reads sequence s's length (the
// device reads seq_lens, the CPU tests an array). Sequences without tiles are skipped.
// seek(u) positions the cursor on unit u with one division; advance(k) moves it k units on
// without dividing (the v6 loader's per-tile step), and both keep (item, tile): the unit's
// item in its sequence and its tile in the item.
struct StreamKCursor {
  int seq = 0;        // the current sequence (num_seqs: past the end)
  int64_t first = 0;  // its first unit
  int64_t tiles = 0;  // tiles of each of its items
  int len = 0;        // its length
  int item = 0;       // the position's item in the sequence
  int64_t tile = 0;   // the position's tile in the item

  template <class Lens>
  KVLAB_HD void load_seq(const Lens& lens, int num_seqs, int64_t bound, int tile_tokens) {
    len = seq < num_seqs ? lens(seq) : 0;
    tiles = seq < num_seqs ? streamk_seq_tiles(len, bound, tile_tokens) : 0;
  }
  template <class Lens>
  KVLAB_HD void start(int seq0, int64_t first0, const Lens& lens, int num_seqs, int64_t bound,
                      int tile_tokens) {
    seq = seq0;
    first = first0;
    item = 0;
    tile = 0;
    load_seq(lens, num_seqs, bound, tile_tokens);
  }
  // Moves forward until unit u lies in the current sequence (u below the total), and
  // positions (item, tile) on it.
  template <class Lens>
  KVLAB_HD void seek(int64_t u, const Lens& lens, int num_seqs, int hq, int64_t bound,
                     int tile_tokens) {
    while (seq < num_seqs && u >= first + hq * tiles) {
      first += hq * tiles;
      ++seq;
      load_seq(lens, num_seqs, bound, tile_tokens);
    }
    if (tiles > 0) {
      item = static_cast<int>((u - first) / tiles);
      tile = (u - first) % tiles;
    }
  }
  // The position k units on (k >= 0; the result must lie below the total).
  template <class Lens>
  KVLAB_HD void advance(int k, const Lens& lens, int num_seqs, int hq, int64_t bound,
                        int tile_tokens) {
    tile += k;
    while (seq < num_seqs && tile >= tiles) {
      tile -= tiles;
      if (++item == hq) {
        item = 0;
        first += hq * tiles;
        ++seq;
        load_seq(lens, num_seqs, bound, tile_tokens);
        while (seq < num_seqs && tiles == 0) {
          ++seq;
          load_seq(lens, num_seqs, bound, tile_tokens);
        }
      }
    }
  }
  // The item of unit u (after seek(u)) and the unit's tile inside it.
  KVLAB_HD int item_in_seq(int64_t u) const { return static_cast<int>((u - first) / tiles); }
  KVLAB_HD int64_t tile_in_item(int64_t u) const { return (u - first) % tiles; }
};

// The partial results of an item with units [item_first, item_first + tiles) that spans
// more than one block: parts k = 0 .. parts - 1, held by block streamk_part_block(k). When
// there are fewer units than blocks (W < C), some blocks are empty and every block holds at
// most one unit, so the item has `tiles` parts; otherwise every block holds >= 1 unit and
// the parts are the consecutive blocks from the first to the last.
KVLAB_HD int64_t streamk_item_parts(int64_t item_first, int64_t tiles, int64_t W, int64_t C) {
  if (W < C) return tiles;
  return streamk_block_of_unit(item_first + tiles - 1, W, C) -
         streamk_block_of_unit(item_first, W, C) + 1;
}
KVLAB_HD int64_t streamk_part_block(int64_t k, int64_t item_first, int64_t W, int64_t C) {
  return W < C ? streamk_block_of_unit(item_first + k, W, C)
               : streamk_block_of_unit(item_first, W, C) + k;
}

struct StreamKPlanInput {
  int64_t items = 0;          // (sequence, KV head, query tile) work items
  int64_t seq_len_bound = 0;  // tokens
  int tile_tokens = 16;       // tokens per unit (a warp tile)
  int warps = 4;              // warps per block
  int64_t slots = 1;          // resident blocks on the device (SMs x blocks per SM)
};

struct StreamKPlan {
  int64_t blocks = 0;     // the persistent grid
  int64_t max_units = 0;  // units if every sequence had the bound's length
};

// The default fewest tiles per block: two per warp (a double-buffered pipeline has work).
constexpr int kStreamKDefaultMinTilesPerWarp = 2;

inline StreamKPlan plan_stream_k(const StreamKPlanInput& in, const DecodeTuning& tu) {
  StreamKPlan pl;
  const int64_t slots = std::max<int64_t>(1, in.slots);
  pl.max_units = in.items * streamk_tiles(in.seq_len_bound, std::max(1, in.tile_tokens));
  if (pl.max_units == 0) {
    pl.blocks = in.items > 0 ? 1 : 0;  // one block writes the empty outputs
    return pl;
  }
  if (tu.num_splits > 0) {
    pl.blocks = std::min(slots, in.items * tu.num_splits);
  } else {
    const int64_t min_tiles = tu.min_tiles_per_block > 0
                                  ? tu.min_tiles_per_block
                                  : int64_t{kStreamKDefaultMinTilesPerWarp} * std::max(1, in.warps);
    pl.blocks = std::min(slots, (pl.max_units + min_tiles - 1) / min_tiles);
  }
  pl.blocks = std::max<int64_t>(1, pl.blocks);
  return pl;
}

// ------------------------------------------------------------------ stream-K over the bound (v15)
// v15 cuts the units of every item as if each sequence had the bound's length (the host knows
// the partition before the launch, so a block's first loads need no scan of the lengths): item
// i owns units [i x T, (i + 1) x T), T = tiles of the bound (at least 1, so that an empty or
// invalid sequence's item still has an owner that writes its rows). The units past a shorter
// sequence's end are skipped by their owner, so a skewed batch is balanced as the bound's
// batch would be (the KV-split plan's balance), not by its real lengths (v6's).
struct StreamKBoundInput {
  int64_t items = 0;          // (sequence, KV head, query tile) work items
  int64_t seq_len_bound = 0;  // tokens
  int unit_tokens = 16;       // tokens per unit (the warp tile)
  int warps = 4;              // warps per block
  int sm_count = 1;
  int blocks_per_sm = 1;      // resident blocks per SM of the kernel
};

struct StreamKBoundPlan {
  int64_t item_tiles = 1;  // T: units per item
  int64_t units = 0;       // W = items x T
  int64_t blocks = 0;      // C: the persistent grid (1 <= C <= W)
};

// C: every resident slot (sm_count x blocks_per_sm), or with a forced num_splits > 0 that many
// blocks per SM (clamped to the resident ones); without a forced count, at most one block per
// `min_tiles_per_block` units (default: two per warp) so that small work is not spread thin.
// Never more blocks than units.
inline StreamKBoundPlan plan_stream_k_bound(const StreamKBoundInput& in, const DecodeTuning& tu) {
  StreamKBoundPlan pl;
  const int unit = std::max(1, in.unit_tokens);
  pl.item_tiles = std::max<int64_t>(1, streamk_tiles(in.seq_len_bound, unit));
  pl.units = std::max<int64_t>(0, in.items) * pl.item_tiles;
  if (pl.units == 0) return pl;
  const int64_t resident = std::max(1, in.blocks_per_sm);
  const int64_t per_sm = tu.num_splits > 0 ? std::min<int64_t>(tu.num_splits, resident) : resident;
  int64_t blocks = static_cast<int64_t>(std::max(1, in.sm_count)) * per_sm;
  if (tu.num_splits <= 0) {
    const int64_t min_tiles = tu.min_tiles_per_block > 0
                                  ? tu.min_tiles_per_block
                                  : int64_t{kStreamKDefaultMinTilesPerWarp} * std::max(1, in.warps);
    blocks = std::min(blocks, (pl.units + min_tiles - 1) / min_tiles);
  }
  pl.blocks = std::clamp<int64_t>(blocks, 1, pl.units);
  return pl;
}

// Whether some item's units are split between blocks (then the merge kernel runs): a range
// boundary streamk_unit_begin(c), 0 < c < C, that falls inside an item.
inline bool stream_k_bound_splits_items(const StreamKBoundPlan& pl) {
  for (int64_t c = 1; c < pl.blocks; ++c)
    if (streamk_unit_begin(c, pl.units, pl.blocks) % pl.item_tiles != 0) return true;
  return false;
}

// The parts of item `item_first / T` whose units start below `len` tokens (len >= 1): the
// consecutive blocks from the one holding the item's first unit to the one holding its unit
// ceil(len / unit_tokens) - 1 (W >= C: every block holds >= 1 unit).
KVLAB_HD int64_t stream_k_bound_used_parts(int64_t item_first, int64_t len, int unit_tokens,
                                           int64_t W, int64_t C) {
  const int64_t used_units = (len + unit_tokens - 1) / unit_tokens;
  const int64_t first_block = streamk_block_of_unit(item_first, W, C);
  return streamk_block_of_unit(item_first + used_units - 1, W, C) - first_block + 1;
}

}  // namespace kvlab::gpu
