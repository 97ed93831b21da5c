// v12_mma_decode_last_block_merge.cu: v10 (v4's tensor-core decode, one TMA tensor copy per
// 16-token K and V tile, swizzled, HND and NHD pools) with the KV splits of an item merged in
// the same launch by the item's last block: each split writes its partial to the workspace as
// v10's do and arrives on the item's word; the block whose arrival is the last merges the
// item (last_block_split_merge.cuh). No merge kernel.
//
// What changed vs v10, and why (gpu/attention/TUNING.md, step 29):
//  * Measured (H100, session 10 call 1): at 16 x 8k the split shapes' decode kernels alone
//    take 97.7 us (FP8 E4M3 NHD, 2 splits) and 64.7 us (NVFP4 HND, 4 splits) under ncu, where
//    the timed calls with v10's merge kernel take 100.2 and 68.6-68.9 us: the merge costs
//    2.5-4.4 us on the critical path although it is launched with programmatic dependent
//    launch (its blocks wait for the whole decode grid to complete and flush, then read the
//    partials: ncu puts the kernel alone at 5.2-5.6 us). K4 at 16 x 8k needs 98.9 us.
//  * v11 removed the merge kernel with thread-block clusters and lost more to the cluster
//    launch than it saved (TUNING.md step 18). Here nothing changes in how the blocks are
//    placed: v10's grid (split slowest), v10's blocks; at its end a block of a multi-split
//    item arrives on the item's word with acquire-release atomics (split_arrival.h: a 40-bit
//    launch tag and a count, so that whatever the workspace held on entry counts as no
//    arrival; the first arrival exchanges, the others add), and
//    the last of the item's blocks that hold tokens reads the item's partials from L2 (up to 4
//    splits in one round trip), merges them with v4's merge kernel's arithmetic in its order,
//    writes the rows and resets the word. The item finishes when its last split does, not
//    when the grid does.
//  * A sequence with a bad length (NaN rows) or none (zeros, lse -inf) has no split holding
//    tokens and so no arrival: split 0 writes its rows, as a single split does.
//  * Workspace: v10's partial rows, then one 8-byte word per (sequence, KV head, query tile).
//    The contents on entry do not matter; a launch leaves its words reset.
//  * Same plan, scope, instances and, for the same split, the same bits as v10 (outputs and
//    lse; the GPU suite checks them, DecodeV12/BulkCopyDecode). tuning.pdl does not apply
//    (no dependent kernel).
//
// Prediction (written before the first H100 run): at the split shapes the merge's 2.5-4.4 us
// shrink to the last block's arrival and merge, about 1 us (two L2 round trips for the
// compare-and-swap, one for the partials): 16 x 8k FP8 100.2 -> ~98.5 us (K4's 1.85x needs
// 98.9), 16 x 8k NVFP4 68.6 -> ~65.5 us (K5 2.65x -> ~2.8x), 1 x 32k BF16 54.2 -> ~52 us,
// 1 x 512 -1.5 to -3 us; unsplit shapes (batch >= 64 at 8k) unchanged (one split: v10's
// kernel path and rows, no arrival).
//
// Measured (H100, session 10 calls 2-4, data/perf/h100_decode_v12/; TUNING.md step 29): correct
// and bitwise v10 at the same split, and slower than v10 wherever it splits: +12 % at 1 x 8k
// BF16, +14 % at 1 x 32k FP8, +18 % at 1 x 32k NVFP4, +1.1-1.4 % at 16 x 8k FP8 / NVFP4; level
// where the plan does not split (64 x 8k). The merge kernel it removes costs well under 1 us
// of the critical path (its blocks wait resident, programmatic dependent launch), while here
// one block merges an item serially after two atomics, and the merge code changes the decode
// loop's schedule (4 % slower than v10 at one split, FP8 16 x 8k). A compare-and-swap loop in
// place of the exchange-then-add cost +46-73 % at batch 1 (contention). Version auto never
// picks v12; it is reachable as v12_mma_decode_last_block_merge (or 12).
#include "gpu/attention/tma_pool_map.cuh"

namespace kvlab::gpu::detail {
namespace {

struct V12Name {
  static constexpr const char* kName = "v12_mma_decode_last_block_merge";
};

}  // namespace

DecodeVersionImpl make_v12_mma_decode_last_block_merge() {
  return bulk_version<TmaSwizzleCopy<V12Name>, LastBlockSplitMerge>(
      12,
      "v10 (one TMA tensor copy per 16-token K and V tile, swizzled, HND or NHD) with the KV "
      "splits of an item merged by the item's last block in the same launch (an arrival count "
      "per item in the workspace): no merge kernel (bf16/fp16, fp8_e4m3 and nvfp4 at "
      "head_dim >= 128, block_size a multiple of 16)");
}

}  // namespace kvlab::gpu::detail
