// v13_mma_decode_eight_warps.cu: v10 (v4's tensor-core decode, one TMA tensor copy per
// 16-token K and V tile, swizzled, HND and NHD pools, v4's merge kernel after a split) with
// 8 warps per block instead of 4: warp w owns the 16-token tiles w, w + 8, ... of the block's
// range and runs v10's own 3-stage pipeline; the 8 warps' states are merged by log-sum-exp
// at the end (mma::WarpMerge<F, D, 8>), and Q's fragments, the merge's combine and the stores
// stay with the first 128 threads (thread = one of 8 heads x 16 parts of its dims).
//
// What changed vs v10, and why (gpu/attention/TUNING.md, step 31):
//  * At batch 16 x 8 KV heads (128 items on 132 SMs) v10's FP8 blocks run one split at one
//    4-warp block per SM: one warp per scheduler, 48 KB of stages in flight per SM, and ncu
//    measured 77.6 % of DRAM bandwidth (104.0 us at 16 x 8k). Its plan therefore splits in two
//    (100.1 us in the fair run), paying the split merge (its kernel ends 2.7-3.2 us after the
//    last decode block) and a second block start-up per SM. 8 warps per block give one split
//    the warps and the bytes in flight of two 4-warp blocks, with no merge.
//  * Registers: the same cap per thread as v10 (FP8 and NVFP4 at head_dim 128: 128, from 2
//    resident blocks of 8 warps where v10 compiles for 4 of 4).
//  * Scope: v10's, except 16-bit rows at head_dim 256 (8 warps x 3 stages of 16 rows of 512
//    bytes of K and of V: 393 KB of shared memory), declined with the reason. BF16 at head_dim
//    128 takes 197 KB: one block per SM.
//  * Split plan: v10's rule over the resident blocks of this kernel, with splits starting on
//    whole 8-warp rounds of tiles (granule 128 tokens for 16-token tiles).
//  * Numerics: v10's tiles and mma sequence per warp; the warps hold other tiles and are
//    merged in another order, so the bits differ from v10's (the reference tolerances apply).
//
// Prediction (written before the first H100 run): 16 x 8k FP8 100.1 -> 93-95 us at one split
// (K4 there 1.93-1.97x); BF16 unchanged.
//
// Measured (H100, session 11 calls 1-2, data/perf/h100_decode_v13/; TUNING.md step 31): 16 x 8k
// FP8 NHD 100.38 us at one split against v10's 99.42 at two in the same sweep (HND 103.01 vs
// 100.98); NVFP4 68.66 at two splits against v10's 68.35 at three; BF16 batch 16 at one split
// 1-2.6 % slower than v10 at one split. ncu: the kernel alone takes 98.88 us at one split (DRAM
// 81.7 % of peak) against v10's 96.58 at two (83.7 %): both read 21.1-21.2 GB/s per SM, v13 on
// 128 SMs, v10 on all 132; the second warp quartet's bytes queue (4.6 us per request by
// Little's law against 2.4 us at 4 warps) instead of streaming. From block 32 on (longer page
// runs) v13 at one split is the fastest FP8 form at 16 x 8k (96.6-98.1 us); version auto picks it
// there and at NVFP4 32k-128k.
#include "gpu/attention/tma_pool_map.cuh"

namespace kvlab::gpu::detail {
namespace {

struct V13Name {
  static constexpr const char* kName = "v13_mma_decode_eight_warps";
};
// v10's copies, in blocks of 8 warps (mma_bulk_decode.cuh reads kWarps).
struct V13EightWarpCopy : TmaSwizzleCopy<V13Name> {
  static constexpr int kWarps = 8;
};

}  // namespace

DecodeVersionImpl make_v13_mma_decode_eight_warps() {
  return bulk_version<V13EightWarpCopy>(
      13,
      "v10 (one TMA tensor copy per 16-token K and V tile, swizzled, HND or NHD) in blocks of "
      "8 warps, each with its own pipeline, merged in the block: one split streams with the "
      "warps of two 4-warp blocks (bf16/fp16 at head_dim <= 128, fp8_e4m3 and nvfp4 at "
      "head_dim >= 128, block_size a multiple of 16)");
}

}  // namespace kvlab::gpu::detail
