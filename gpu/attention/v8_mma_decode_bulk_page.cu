// v8_mma_decode_bulk_page.cu: v4's tensor-core decode at v4's design point (3 stages of one
// 16-token tile per warp, 2 blocks of 4 warps per SM for d128 16-bit), with each tile's K and
// V loaded by ONE bulk copy each (cp.async.bulk, completion counted on an mbarrier per stage)
// instead of 2 x 256 cp.async 16-byte chunks.
//
// What changed vs v4/v7, and why (gpu/attention/TUNING.md, step 13):
//  * The limit at 64 x 8k BF16 is the L2's request rate, not DRAM: ncu put v7 at DRAM 87.9 %
//    and L2 throughput 95.7 % (v4: 86.0 / 88.1 %). v4 moves a 16-token tile of K and V with
//    512 cp.async of 16 bytes (32 warp instructions, each a set of L2 requests); v7's extra L2
//    prefetch per row raised the L2 load further and gained only 1-2 %.
//  * HND pages with block_size a multiple of 16 hold a (page, KV head) run of 16 consecutive
//    slots as one contiguous range: 16 x head_dim x 2 bytes (4 KB at d128). A warp tile
//    (16 tokens, 16-aligned in the sequence) therefore lies in one page, and lane 0 copies its
//    K rows and its V rows with one cp.async.bulk each into the stage, counting the bytes on
//    the stage's mbarrier (expect_tx, then the copies' complete_tx). Only the rows below the
//    sequence's end are copied; V rows past it are zeroed after the copy lands (P is 0 there,
//    but 0 x NaN garbage would not be), K rows past it are masked to -inf by the tile compute.
//  * The rows land back to back (a bulk copy cannot pad), so the shared tile has no 16-byte
//    row padding: the loaders are v4's 16-bit loaders over mma::PaddedRows<0>. This
//    costs bank conflicts (K fragment loads 4-way, V ldmatrix.trans 8-way instead of 2-way /
//    none); at v4's 2 blocks per SM the shared-memory pipe has room for them at the HBM rate
//    (about 450 of ~630 cycles per 8 KB tile per SM at 3 TB/s), and the step's ncu reports
//    them (TUNING.md's prediction names the risk).
//  * The block-table entry of a tile is one load by lane 0, one tile ahead (v4: one per token).
//  * Supported: BF16 and FP16 pools, HND layout, block_size a multiple of 16. Other formats,
//    layouts and block sizes are reported unsupported, so auto and sweeps never pick v8 there.
// Numerics, the split plan (decode_plan.h) and the PDL merge kernel: v4's; for the same split
// the outputs are bitwise v4's (the same mma sequence over the same operand values).
// The block body, kernel entry and host side are the bulk-copy family's
// (mma_bulk_decode.cuh); this file holds v8's copy policy, below.
#include "gpu/attention/mma_bulk_decode.cuh"

namespace kvlab::gpu::detail {
namespace {

// v8's copy policy: one elected lane copies the tile's K rows below the end with one bulk copy
// and its V rows with another, back to back into the stage (the block body, the kernel and the
// host side are the bulk-copy family's: mma_bulk_decode.cuh).
struct V8PageRunCopy {
  static constexpr const char* kName = "v8_mma_decode_bulk_page";
  static constexpr const char* kCopies = "page runs";
  template <KvFormat, int>
  using Rows = mma::PaddedRows<0>;  // rows back to back, as one bulk copy lands them
  static constexpr int kSmemAlign = 16;
  static constexpr bool kWarpIssues = false;  // one elected lane
  static constexpr bool kFP8 = false;         // 16-bit pools only
  static constexpr bool kNVFP4 = false;       // nor NVFP4
  static constexpr bool kNHD = false;         // a page run is contiguous in HND only
  using Maps = NoMaps;

  // Only the rows below the sequence's end are copied.
  template <int D, KvFormat F>
  __device__ static constexpr uint32_t tx_bytes(int rows) {
    return static_cast<uint32_t>(2 * rows * D * 2);
  }
  template <int D, KvFormat F>
  __device__ static void issue(const BulkTile& t, const Maps&) {
    static_assert(F == KvFormat::kBF16 || F == KvFormat::kFP16, "16-bit rows");
    const PageGeometry& geom = t.pools->geom;
    const int64_t off = geom.k_index(t.page, t.kv_head, t.slot, 0) * 2;
    const uint32_t bytes = static_cast<uint32_t>(t.rows * D * 2);
    mma::bulk_copy_g2s(t.sk, t.pools->k + off, bytes, t.bar, t.l2_policy, t.copy);
    mma::bulk_copy_g2s(t.sv, t.pools->v + off, bytes, t.bar, t.l2_policy, t.copy);
  }
  static std::string maps_reason(const DecodeArgs&) { return ""; }
  static Maps maps(const DecodeArgs&) { return {}; }
};

}  // namespace

DecodeVersionImpl make_v8_mma_decode_bulk_page() {
  return bulk_version<V8PageRunCopy>(
      8,
      "v4's tensor-core decode loading each 16-token tile of an HND page (K and V) with one "
      "bulk copy each on an mbarrier (bf16/fp16, block_size a multiple of 16)");
}

}  // namespace kvlab::gpu::detail
