// v4_mma_decode.cu: tensor-core GQA decode: Q.K^T and P.V on mma.sync (tokens as M, the
// group's query heads as N), one cp.async pipeline per warp, a split-KV plan from the SM
// count and the batch, a programmatic-dependent-launch merge.
//
// What changed vs v3, and why (v3 measured 43-51 % of the read ceiling for BF16 and FP8 no
// faster than BF16: instruction-bound; gpu/attention/TUNING.md):
//  * The math moves to the tensor cores. For 16 tokens a warp computes
//      S^T [16 tokens x 8 heads] = K [16 x D] . Q^T [D x 8]        (D/16 mma per pass)
//      O^T [D x 8 heads]        += V^T [D x 16 tokens] . P^T [16 x 8] (D/16 mma per pass)
//    so the per-token shuffle trees, per-query-head re-decoding and the scalar FMA chains of
//    v3 disappear: a KV element is loaded from shared memory once, converted at most once
//    (by the one warp that owns its token) and used by all query heads of the group. The
//    group (<= 8 heads) is the mma's N; groups above 8 are split into query tiles of 8.
//  * Exact operands. A 16-bit mma operand is exact for every stored format, so only the
//    probabilities are rounded, and they are split in two (P = hi + lo, both 16-bit, two
//    mma): ~22 (f16) or ~16 (bf16) significant bits, far below the output rounding.
//      - "f16 flavour" (fp16, fp8 e4m3/e5m2 with a pool scale, NVFP4): K and V decode to
//        f16 exactly (e4m3 -> f16 is one cvt per pair; e5m2 is the top byte of f16; NVFP4
//        e2m1 x e4m3 has <= 6 significant bits and lies in [2^-10, 2688]). Q is scaled per
//        head by a power of two into f16 range (|q'| in [2^14, 2^15)), the power folded
//        into the softmax scale; P is scaled by 2^14 (subnormal-free), the 2^-14 folded
//        into the output scale.
//      - "bf16 flavour" (bf16, MXFP4, fp8 with per-token scales): K and V in bf16 (MXFP4's
//        e2m1 x 2^k and e4m3 are exact in bf16; bf16 has fp32's range, so per-token V
//        scales can be folded into P). An f16 Q is split into bf16 hi + lo (exact).
//  * Free dimension order: the mma contracts k, so a thread's K fragment may hold any
//    dims as long as Q's fragment holds the same. Thread (g, t) of a warp reads the dims
//    [t*D/4, (t+1)*D/4) of tokens g and g+8 with 16-byte loads (k-step s covers dims
//    t*D/4 + 4s .. +3), so an FP8 K row converts with one cvt per pair and no shuffles.
//    V: 16-bit formats use ldmatrix.trans; 8/4-bit ones give thread g the dims
//    [g*D/16, (g+1)*D/16) and [(g+8)*D/16, ...) and pair tokens with byte permutes; the
//    output dims are un-permuted when the accumulators are stored. Each format has its own
//    operand loader (mma_operands.cuh), a template parameter of the kernel.
//  * Memory: each of the 4 warps owns every 4th tile of the block's token range and runs
//    its own 3-stage cp.async pipeline (16-byte chunks, zero-fill past the end): no block
//    barrier in the main loop. The block table is read once per token, one tile ahead
//    (prefetched into registers), and page offsets are staged in shared memory for the
//    chunk copies (mma_tile_copy.cuh). Tiles hold 16-64 tokens (~8 KB of K+V per stage).
//  * Split-KV plan (decode_plan.h, plan_kv_splits), from the SM count, the resident blocks
//    per SM and the batch: no split while the (sequence, KV head, query tile) items fill a
//    wave of resident blocks; below that, splits for one wave (every block starts at once);
//    no block reads more than 4 MiB (skewed batches: a long sequence becomes several
//    blocks); and more splits while the last wave would be < 90 % full (equal-work blocks
//    finish together). Blocks are ordered split-major, so the late blocks are the long
//    sequences' equal-sized chunks; splits past a sequence's end exit at once (per-sequence
//    split counts on the device). The merge kernel (one block per output row) is launched
//    with programmatic dependent launch, so its launch overlaps the split kernel's tail.
//    The plan's knobs are a DecodeTuning passed by the caller (defaults: the measured best).
// The kernel body, the merge kernel and the launcher are in v4_mma_decode.cuh, templated on
// a design point (stages, tile size, register cap); v4's is V4Config below,
// v5_mma_decode_2stage.cu has another.
// Numerics as v3: natural-log logits, exp(s - m) formed before the base-2 scaling, the
// 4 warps and the splits merged by log-sum-exp; a bad table entry or length gives NaN rows.
#include "gpu/attention/v4_mma_decode.cuh"

namespace kvlab::gpu::detail {
namespace {

// v4's design point: 3 cp.async stages of ~8 KB (16-64 tokens) per warp, no register cap
// (2 blocks of 4 warps per SM for d128 16-bit, 1 for FP8 and FP4: TUNING.md step 3).
struct V4Config {
  static constexpr const char* kName = "v4_mma_decode";
  static constexpr int kStages = 3;
  static constexpr int kTileBytes = 8192;
  static constexpr int min_blocks(int, KvFormat) { return 1; }
};

}  // namespace

DecodeVersionImpl make_v4_mma_decode() {
  DecodeVersionImpl v;
  v.info = {
      4, "v4_mma_decode",
      "tensor-core GQA decode: mma.sync with tokens as M and the group's query heads as N, exact "
      "16-bit operands (P split hi+lo), per-warp cp.async pipelines, split-KV plan from SMs and "
      "batch, PDL merge"};
  v.unsupported_reason = v4_unsupported_reason<V4Config>;
  v.workspace_bytes = v4_workspace_bytes<V4Config>;
  v.run = v4_run<V4Config>;
  return v;
}

}  // namespace kvlab::gpu::detail
