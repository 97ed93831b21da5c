// v10_mma_decode_tma_swizzle.cu: v8 (v4's tensor-core decode, 3 stages of one 16-token tile
// per warp, 2 blocks of 4 warps per SM for d128 16-bit, copies completing on a per-stage
// mbarrier) with each tile's K and V moved by ONE TMA tensor copy each
// (cp.async.bulk.tensor.4d through a CUtensorMap over the pool) that lands the 16 rows
// 128-byte swizzled, so the copy is as large as v8's and the shared-memory reads conflict no
// more than v4's / v9's; the same map form gathers the strided rows of NHD pages too.
//
// What changed vs v8 / v9, and why (gpu/attention/TUNING.md, steps 13-15; H100, 64 x 8k BF16
// HND block 16):
//  * Measured: v4 752 us, v8 738.5 us (one bulk copy per 4 KB page run of K and of V into
//    unpadded rows), v9 758 us (one bulk copy per 256-byte row into v4's 272-byte padded rows);
//    cuDNN on contiguous KV 697.7 us. ncu: L2 requests v4 66.1 M, v8 33.8 M, v9 65.0 M; shared
//    bank conflicts v4 8.7 M, v8 84.0 M, v9 8.5 M. Large copies halve the L2 requests (v8),
//    padded rows remove the conflicts (v9); neither has both. A bulk copy cannot pad or
//    permute; a TMA tensor copy can swizzle.
//  * The pool as a 4-D tensor of 16-bit elements {64, D/64, A, B} (innermost first), strides
//    {128 B, D*2 B, A's stride}; HND: A = slot, B = page * H + head (the slots of a (page, KV
//    head) are consecutive rows), box {64, D/64, 16, 1}; NHD: A = head, B = page * bs + slot
//    (the tile's rows are H * D elements apart), box {64, D/64, 1, 16} (TUNING.md step 16:
//    a TMA box gathers strided rows at the cost of one, so NHD loses nothing to HND);
//    CU_TENSOR_MAP_SWIZZLE_128B. One copy per
//    K tile and one per V tile lands the 16 rows as [row][part][128 B] = row * 2D + byte, with
//    the 16-byte chunk index inside each 128-byte line XORed by line % 8 (line = offset / 128
//    = row * D/64 + part). Stage buffers are 1024-byte aligned (the pattern's period; the
//    kernel rounds its shared-memory base up). One map per pool, built on the host with
//    cuTensorMapEncodeTiled (found through cudaGetDriverEntryPointByVersion: nothing links
//    libcuda), cached per (pool pointer, geometry), passed as a __grid_constant__ parameter.
//  * The loaders are v4's 16-bit loaders reading through mma::Swizzle128Rows, the one address
//    function (row, byte) -> offset of mma_operands.cuh; the values and the mma sequence are
//    v8's, so for the same split the output is bitwise v8's (and v4's / v5's).
//  * Bank conflicts of the reads (a 16-byte load or an ldmatrix row is served 8 lanes = 128
//    bytes per wavefront; ideal = 4 wavefronts per warp instruction):
//      K fragment loads (k_slices; lanes g = 2q, 2q+1, t = 0..3 of a phase read rows g at byte
//      t*D/2 + 16i): d64, d128, d256 conflict-free (the line index varies with g and with t's
//      part, so the 8 chunks land on 8 distinct bank groups); v8 4-way, v4 / v9 2-way at d128.
//      V ldmatrix.trans (8 consecutive rows at one byte offset per matrix): d64 conflict-free,
//      d128 2-way (rows r and r + 4 share line % 8 = 2r + part), d256 4-way; v8 8-way, v4 / v9
//      conflict-free. Per 16-token pass at d128: 32 + 64 = 96 wavefronts, v4's / v9's count
//      (v8: 128 + 256). The other box order {64, rows, D/64} ([part][row][128 B], line % 8 =
//      row % 8) makes V conflict-free and K 2-way at d128 (4-way at d256): the same 96, so the
//      suggested order stays. No order gives both: K needs the chunk XOR to vary with t's part,
//      V needs it to run through all 8 values over 8 consecutive rows, and the TMA's XOR is
//      line % 8 of a row-major line index.
//  * The copy is issued by one lane (one instruction per K and per V tile, as v8); the stage's
//    mbarrier expects the full box (a TMA box always writes its 16 rows). Rows past the
//    sequence's end hold whatever the pool has in those slots (NaN in the tests): K rows are
//    masked to -inf by a select in the tile compute, V rows are zeroed after the copy lands.
//    A tile is 16-aligned inside a page whose block_size is a multiple of 16, so the box never
//    leaves its page (HND: its (page, KV head) run); rows past the tensor's end would be zero-filled by TMA.
//  * Scope, split plan, merge: v8's (BF16 / FP16, block_size a multiple of 16; the rest
//    declined with a reason) in the HND and NHD layouts, plus FP8 E4M3 with a pool scale at
//    head_dim >= 128: an FP8 row of 128 elements is exactly one 128-byte swizzle line (map
//    {128, D/128, A, B} of bytes, box {128, D/128, 16, 1} or {128, D/128, 1, 16}), read by
//    v4's FP8 loaders (k_slices, v_ranges) through the same
//    address function. FP8 at d128: K loads conflict-free (lanes g = 2q, 2q+1 read chunks
//    2t + i XOR g), V ranges (8 bytes, half-warp phases) conflict-free (chunk g/2 XOR 2t);
//    compiled for 4 blocks per SM (<= 128 registers, v5's FP8 design point), and for the same
//    split bitwise v5's FP8 (the same 16-token tiles and mma sequence). FP8 at head_dim 64 (a
//    64-byte row, half a swizzle line) is declined. A pool the tensor map cannot describe
//    (address not 16-byte aligned, more than 2^31 rows) is declined with the encoder's
//    reason.
//  * NVFP4 at head_dim >= 128 (TUNING.md step 22). v5, the version that ran NVFP4, is issue-
//    bound there, not byte-bound (ncu at 64 x 8k: issue slots 63 % busy, DRAM 45 %), and of
//    its ~930 warp instructions per 16-token pass only ~290 are the dequantisation: the rest
//    is the per-chunk cp.async copy (16-byte pieces, a table load and 64-bit offsets per
//    token) and its bookkeeping. Here lane 0 moves a tile with two tensor copies of the
//    rows and two 1-D bulk copies of the block scales (the tile's 16 slots' E4M3 codes are
//    one contiguous run of D bytes of the scale array, 16-byte aligned), all on the stage's
//    mbarrier; the other 31 lanes only dequantise and multiply. A d128 NVFP4 row is 64 bytes,
//    so its map is one 64-byte line with CU_TENSOR_MAP_SWIZZLE_64B (chunk bits 4-5 XOR
//    offset bits 7-8; the loaders read through SwizzleRows<64>): K slices (lanes g = 2q,
//    2q+1 read the 16-byte chunk t of rows g: one 128-byte line) and V ranges (rows 2t.., 4
//    bytes at 4g: chunk g/4 XOR t) are conflict-free. head_dim 256 rows are one 128-byte line
//    (SWIZZLE_128B, as FP8 d128). The loaders and mma sequence are v5's NVFP4 ones, so for
//    the same split the bits are v5's at d256. Compiled for kBulkNvfp4Blocks (4) resident
//    blocks per SM at d128 (<= 128 registers, no spill). Prediction: ~1.3x fewer instructions
//    per byte than v5, so at the issue-bound shapes (batch >= 16 x >= 8k) 20-30 % faster.
//  * NVFP4 at head_dim 128 in 32-token warp tiles (TUNING.md step 24): two 16-row copies per
//    tile, each of its own page, on one barrier, and one wait and one online-softmax update
//    per 32 tokens, in two stages. The bits differ from v5's (another softmax blocking); v11
//    shares them.
//  * Steps 25-26 (TUNING.md): the NVFP4 loaders dequantise a word of 8 codes with 11
//    instructions instead of 16 (the same bits), and the block body fences and arrives once
//    per tile; NHD maps of 128-byte rows (FP8 at head_dim 128) promote 128 bytes in L2
//    instead of 256, measured 2 % faster there (NVFP4's 64-byte rows keep 256: less is 5-10 %
//    slower).
//  * Step 27 (TUNING.md): the NVFP4 loaders read the block scales in words (one load per K
//    row, one per V token pair) and keep them unscaled (operands K / V x 2^-14, on the f16
//    grid with subnormals; the same outputs): 1421 instructions per 32-token tile instead of
//    1462, 0.2-1.3 % faster on the A/B shapes. 5 resident blocks per SM (96 registers, a
//    56-byte spill) measured 6-9 % slower and were not taken.
//  * Step 28 (TUNING.md): the copies are issued under elect.sync, predicated, instead of under
//    lane == 0, where the compiler wrapped each in a loop over the active lanes: 1387
//    instructions per NVFP4 tile, 4.8-6.3 % faster at the K5 shapes, BF16 / FP8 unchanged.
//  * Step 35 (TUNING.md): the split merge's dependent launch is triggered when a block's stream
//    ends (mma_bulk_decode.cuh's bulk_block), not at the kernel's start: 1.4-2.2 % faster at
//    the batch-1 split shapes, level elsewhere.
#include "gpu/attention/tma_pool_map.cuh"

namespace kvlab::gpu::detail {
namespace {

// v10's copy policy: one elected lane copies the tile's 16 K rows with one tensor copy and its 16 V
// rows with another, 128-byte swizzled (tma_pool_map.cuh; the block body, the kernel and the
// host side are the bulk-copy family's: mma_bulk_decode.cuh, with the PDL split merge).
struct V10Name {
  static constexpr const char* kName = "v10_mma_decode_tma_swizzle";
};
using V10TensorCopy = TmaSwizzleCopy<V10Name>;

}  // namespace

DecodeVersionImpl make_v10_mma_decode_tma_swizzle() {
  return bulk_version<V10TensorCopy>(
      10,
      "v4's tensor-core decode loading each 16-token tile of an HND or NHD page (K and V) "
      "with one TMA tensor copy each, swizzled, on an mbarrier (bf16/fp16, fp8_e4m3 and "
      "nvfp4 at head_dim >= 128 (nvfp4's block scales by bulk copy), block_size a multiple "
      "of 16)");
}

}  // namespace kvlab::gpu::detail
