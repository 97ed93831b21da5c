// v7_mma_decode_l2_prefetch.cu: v4's tensor-core decode (v4_mma_decode.cuh) with every warp
// prefetching its stream into L2 two tiles beyond its shared-memory pipeline, at a design
// point of three cp.async stages of one 16-token tile per warp for every format.
//
// What changed vs v4/v5, and why (gpu/attention/TUNING.md, step 12):
//  * L2 prefetch. The first H100 runs put v4/v5 at 88-93 % of the read ceiling in steady
//    state (64 x 8k BF16: v4 751 us, ncu 85 % DRAM throughput, 2 blocks x 4 warps per SM)
//    while cuDNN's contiguous decode reads at 98-101 %, and the versions order by bytes in
//    flight: v4 (3 stages, 2 blocks: 16 tiles of 8 KB per SM queued) 751 us, v5 (2 stages,
//    3 blocks: 12 tiles) 767 us, v6 (2 stages, 2 blocks: 8 tiles) 768 us. Shared memory caps
//    the stages (v4's block takes 110 KB), so the extra bytes in flight go to L2 instead: one
//    cp.async.bulk.prefetch.L2 per K and V row of the tile two tiles past the last one the
//    pipeline has issued (mma_tile_copy.cuh, prefetch_rows_l2). A prefetch holds no shared
//    memory, no registers and nothing to wait for; when the pipeline later loads the tile,
//    its 16-byte cp.async chunks hit L2. Per SM this doubles the bytes in flight (2 blocks x
//    4 warps x (2 + 2) tiles of 8 KB for BF16). The table entries of the prefetched tile are
//    loaded before the compute of the current tile and used after it (no stall).
//  * Design point: 16-token tiles and 3 stages for every format (BF16 and FP16 are v4's
//    design point exactly; FP8 and FP4, whose v4 tiles of 32-64 tokens allowed one block per
//    SM, get three 16-token stages at 3 blocks per SM, v5's occupancy with one more stage).
//  * Split-x pools (V gathered per element) run without the prefetch.
// Numerics, split plan and merge: v4's (bitwise the same outputs for the same split).
#include "gpu/attention/v4_mma_decode.cuh"

namespace kvlab::gpu::detail {
namespace {

struct V7Config {
  static constexpr const char* kName = "v7_mma_decode_l2_prefetch";
  static constexpr int kStages = 3;
  static constexpr int kTileBytes = 0;  // 16-token warp tiles (the mma M) for every format
  static constexpr int kL2PrefetchTiles = 2;
  // The register cap: 2 blocks (no cap in effect) for 16-bit, whose 3 stages of 8 KB per warp
  // fill the shared memory at 2 blocks; 3 blocks (170 registers) for 8- and 4-bit formats;
  // head_dim 256: 1 (no cap).
  static constexpr int min_blocks(int d, KvFormat f) {
    return d > 128 ? 1 : ((f == KvFormat::kBF16 || f == KvFormat::kFP16) ? 2 : 3);
  }
};

}  // namespace

DecodeVersionImpl make_v7_mma_decode_l2_prefetch() {
  DecodeVersionImpl v;
  v.info = {7, "v7_mma_decode_l2_prefetch",
            "v4's tensor-core decode, each warp prefetching its K/V rows into L2 two tiles past "
            "its 3-stage cp.async pipeline (16-token tiles for every format)"};
  v.unsupported_reason = v4_unsupported_reason<V7Config>;
  v.workspace_bytes = v4_workspace_bytes<V7Config>;
  v.run = v4_run<V7Config>;
  return v;
}

}  // namespace kvlab::gpu::detail
