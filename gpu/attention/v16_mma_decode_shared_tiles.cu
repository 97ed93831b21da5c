// v16_mma_decode_shared_tiles.cu: v10 (v4's tensor-core decode, one TMA tensor copy per
// 16-token K and V tile, swizzled, HND and NHD pools; 4 warps with their own pipelines) whose
// KV splits share the tiles of their item instead of each owning a fixed chunk: every warp of
// the item's splits takes a few static tiles, then claims the item's further tiles one at a
// time from a counter per item, so the item's blocks end together whatever their speeds.
//
// What changed vs v10, and why (gpu/attention/TUNING.md, step 37):
//  * Measured (the per-block %globaltimer stamps of TUNING.md step 30, H100, v10 at 16 x 8k):
//    the blocks of one launch end far apart although they hold the same tokens. NVFP4 at 4
//    splits: split 0's blocks take 48.0 us on average, split 1's 51.7, split 2's 56.2, split 3's
//    62.0 (the launch's blocks start within 0.2 us; the block scheduler puts split s's blocks on
//    each SM after split s - 1's, and an SM's older blocks issue first), so the kernel ends at
//    63.5 us where its blocks end at 54.5 on average. FP8 at 2 splits: 86-95.6 us per block,
//    by the item (the same (sequence, split) on every head within 0.16 us, 0.58 us between
//    them: which pages it reads), kernel 93.9 against 90.7 on average; BF16 1 x 32k at 32
//    splits 47.9 against 44.5.
//  * Here an item's tiles [0, length) are shared by its num_splits blocks: split s, warp w takes
//    the item's tiles s x 4 + w + num_splits x 4 x k for k = 0..kStages (the pipeline's first
//    tiles, whose copies go out at the block's start as v10's do), then claims tile indices from
//    the item's 64-bit word in the workspace ([launch tag | claims], split_arrival.h's
//    shared_tile_claim_*: an atomic add per tile, issued one tile before the tile's table entry
//    is fetched, so its round trip hides behind the tile in flight). A faster block takes more
//    tiles; every block of an item ends within about one tile of the others.
//  * The split merge is v10's kernel (programmatic dependent launch; the partials are v10's
//    layout, each split's covering the tiles it took), which also resets the items' words for
//    the next launch once the decode grid has completed. The words' contents on entry do not
//    matter (a tag per launch; decode.h's contract).
//  * Outputs are not bitwise v10's nor the same from call to call at more than one split: which
//    split takes which tile depends on timing, so the partials' sums round differently (the
//    tolerance table's bound holds, the GPU suite checks it). At one split every tile is
//    static, v10's order and bits.
//  * Same plan (the splits of v10's plan or the forced num_splits), scope and instances as v10.
//
// Prediction (written before the first H100 run; TUNING.md step 37): from the stamps, with each
// item's blocks ending together the kernels end at 56.3 us (NVFP4 16 x 8k, 4 splits; was 63.5),
// 92.8 (FP8 16 x 8k, 2 splits; 93.9) and 45.1 (BF16 1 x 32k, 32 splits; 47.9): timed NVFP4 16 x
// 8k ~69 -> ~62-63 us (K5 ~2.9x), FP8 16 x 8k ~99.4 -> ~98.4 us (K4 1.86x), BF16 1 x 32k ~53.7 ->
// ~51.5 us; level where the plan does not split.
//
// Measured (H100, session 14 calls 1-2, data/perf/h100_decode_shared_tiles/; TUNING.md step 37):
// correct, and slower than v10 wherever the claims run: FP8 16 x 8k at 2 splits +4.0 / +6.2 %
// (HND / NHD), NVFP4 16 x 8k at 4 splits +5.5 % (HND), 16 x 32k NHD +17 %, BF16 -1.9 to +3.4 %.
// Blocks that end early hand their DRAM share (FP8) or issue slots (NVFP4) to the others, so
// ending together bought nothing; the claims cost ~14 % more instructions (FP8, ncu), which
// NVFP4's issue-bound loop pays in time; interleaving the splits' tiles alone costs 1.5-6 % at
// FP8 16 x 8k (a scratch build with every tile static). Version auto never picks v16; it is
// reachable as v16_mma_decode_shared_tiles (or 16).
#include "gpu/attention/tma_pool_map.cuh"

namespace kvlab::gpu::detail {
namespace {

struct V16Name {
  static constexpr const char* kName = "v16_mma_decode_shared_tiles";
};

}  // namespace

DecodeVersionImpl make_v16_mma_decode_shared_tiles() {
  return bulk_version<TmaSwizzleCopy<V16Name>, SharedTilesMerge>(
      16,
      "v10 (one TMA tensor copy per 16-token K and V tile, swizzled, HND or NHD) whose KV "
      "splits share their item's tiles: a few static tiles per warp, then tiles claimed one at "
      "a time from a counter per item (bf16/fp16, fp8_e4m3 and nvfp4 at head_dim >= 128, "
      "block_size a multiple of 16)");
}

}  // namespace kvlab::gpu::detail
