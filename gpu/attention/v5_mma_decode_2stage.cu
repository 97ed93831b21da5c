// v5_mma_decode_2stage.cu: v4's tensor-core decode (v4_mma_decode.cuh) at a
// higher-occupancy design point: 2 cp.async stages of one 16-token tile per warp and a
// register cap, so 3 (16-bit, MXFP4, per-token FP8), 4 (FP8 with a pool scale) or 5 (NVFP4)
// blocks of 4 warps are resident per SM (d <= 128) instead of v4's 2 (16-bit) or 1 (FP8,
// FP4: v4's 8 KB tiles of 32-64 tokens take 121-141 KB of shared memory per block). Every
// format runs at this design point (each has its own operand loader, mma_operands.cuh).
//
// What changed vs v4, and why (gpu/attention/TUNING.md, step 3): v4 reached 93 % of the
// read ceiling with BF16 but 70 % with FP8 on the same shape, and its layout did not
// matter (NHD = HND), so the FP8 path is not limited by DRAM access patterns but by how
// fast each warp gets through its instruction stream: with 8 warps per SM (2 per
// scheduler) a warp's dependent chain (shared loads -> conversions -> mma -> softmax
// shuffles -> mma) leaves the schedulers mostly idle. v5 trades pipeline depth per warp for
// more warps per SM: bytes in flight stay far above what HBM needs (12-16 warps x 1 tile of
// 4-8 KB ahead), while three or four times as many instruction streams hide each other's
// latencies. Per-token FP8, E5M2 and MXFP4 used to run v4's design point under v5's name;
// they now run v5's own (TUNING.md, step 10).
#include "gpu/attention/v4_mma_decode.cuh"

namespace kvlab::gpu::detail {
namespace {

struct V5Config {
  static constexpr const char* kName = "v5_mma_decode_2stage";
  static constexpr int kStages = 2;
  static constexpr int kTileBytes = 0;  // 16-token warp tiles (the mma M) for every format
  // The register cap: 4 blocks (128 registers) for FP8 with a pool scale (f16 operands both
  // ways, the cheapest conversions); 5 (96 registers, an 8-byte spill) for NVFP4, whose
  // decode is issue- and latency-bound (TUNING.md step 21: measured against 3, 4 and 6 blocks
  // on the H100, 5 is the fastest on every K5 shape but 4 x 32k, 3.0-8.4 % faster than 3);
  // 3 (170) for the others; head_dim 256 needs its registers (1 block: no cap).
  static constexpr int min_blocks(int d, KvFormat f) {
    if (d > 128) return 1;
    if (f == KvFormat::kFP8E4M3 || f == KvFormat::kFP8E5M2) return 4;
    return f == KvFormat::kNVFP4 ? 5 : 3;
  }
};

}  // namespace

DecodeVersionImpl make_v5_mma_decode_2stage() {
  DecodeVersionImpl v;
  v.info = {5, "v5_mma_decode_2stage",
            "v4's tensor-core decode with 2-stage 16-token warp tiles and a register cap (3-4 "
            "resident blocks per SM), every format at this design point"};
  v.unsupported_reason = v4_unsupported_reason<V5Config>;
  v.workspace_bytes = v4_workspace_bytes<V5Config>;
  v.run = v4_run<V5Config>;
  return v;
}

}  // namespace kvlab::gpu::detail
