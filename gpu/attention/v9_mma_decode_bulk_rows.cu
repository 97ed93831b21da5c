// v9_mma_decode_bulk_rows.cu: v8 (v4's tensor-core decode, 3 stages of one 16-token tile per
// warp, 2 blocks of 4 warps per SM for d128 16-bit, copies completing on a per-stage mbarrier)
// with each tile's K and V moved by one bulk copy PER ROW (32 per tile, one per lane) into
// v4's padded rows, instead of one bulk copy per 16-row page run into unpadded rows.
//
// What changed vs v8, and why (gpu/attention/TUNING.md, step 14):
//  * v8 measured (H100, 64 x 8k BF16 HND, ncu): L2 requests 33.8 M vs v4's 66.1 M (halved, as
//    predicted), but shared-memory bank conflicts 84.0 M vs 8.7 M and shared wavefronts
//    110.6 M vs 44.5 M: the unpadded tile (rows 256 bytes apart, every row on the same banks)
//    makes the K fragment loads 4-way and the V ldmatrix.trans 8-way conflicted, and v8 ran
//    741.9 vs v4's 750.7 us (1 %), not the 705-720 predicted.
//  * A bulk copy cannot pad, but it can be issued per row: lane r (r < 16) copies K row r and
//    lane 16 + r V row r, 256 bytes each at d128, to the row's padded place (row stride
//    kRowBytes + 16: rows start 4 banks apart, 16-byte aligned, as v4's cp.async tile). The
//    loaders are v4's (Operand16 over mma::PaddedRows<16>): v4's shared-memory access pattern, v4's
//    bank conflicts. Each copy is one TMA bulk request of a whole contiguous row (v6 copies
//    rows the same way), so the L2 sees row-sized requests, not v4's 16-byte cp.async chunks:
//    the L2 request count stays near v8's.
//  * Lane 0 announces the tile's bytes (expect_tx) and arrives before a __syncwarp; then the
//    lanes issue their row copies. Each issuing lane fences the async proxy after the
//    __syncwarp that ends the warp's reads of the stage.
//  * The cost: a bulk copy's operands are uniform registers (SASS UBLKCP), so 32 lanes with 32
//    addresses compile to an ELECT loop, one copy per turn (8 instructions: ELECT, 4 R2UR,
//    UBLKCP, branch): ~256 issued instructions per tile where v8 issues 2 copies. At 2 warps
//    per scheduler and v8's 10 cycles per issued instruction the issue slots are there; the
//    turns' latency (~400 cycles a tile) comes before the tile's compute, two tiles ahead of
//    its use (TUNING.md step 14 names it as the risk).
//  * Everything else is v8's: the page of a tile is one block-table load by lane 0, one tile
//    ahead (broadcast by a shuffle); only rows below the sequence's end are copied; V rows past
//    it are zeroed after the copy lands; a bad table entry makes the sequence's output NaN.
//  * Supported: BF16 and FP16 pools, HND layout, block_size a multiple of 16 (v8's scope).
// Numerics, the split plan (decode_plan.h) and the PDL merge kernel: v4's; for the same split
// the outputs are bitwise v4's / v5's / v8's (the same mma sequence over the same operands).
// The block body, kernel entry and host side are the bulk-copy family's
// (mma_bulk_decode.cuh); this file holds v9's copy policy, below.
#include "gpu/attention/mma_bulk_decode.cuh"

namespace kvlab::gpu::detail {
namespace {

// v9's copy policy: one bulk copy per row, lane r < 16 K row r and lane 16 + r V row r, each
// to its padded place (the block body, the kernel and the host side are the bulk-copy
// family's: mma_bulk_decode.cuh).
struct V9RowCopy {
  static constexpr const char* kName = "v9_mma_decode_bulk_rows";
  static constexpr const char* kCopies = "rows";
  template <KvFormat, int>
  using Rows = mma::PaddedRows<16>;  // v4's padded rows: v4's shared-memory access pattern
  static constexpr int kSmemAlign = 16;
  static constexpr bool kWarpIssues = true;  // every lane copies a row
  static constexpr bool kFP8 = false;        // 16-bit pools only
  static constexpr bool kNVFP4 = false;      // nor NVFP4
  static constexpr bool kNHD = false;        // HND rows (v8's scope)
  using Maps = NoMaps;

  // Only the rows below the sequence's end are copied.
  template <int D, KvFormat F>
  __device__ static constexpr uint32_t tx_bytes(int rows) {
    return static_cast<uint32_t>(2 * rows * D * 2);
  }
  // Called by the whole warp, after the block body's fence, lane 0's arrival with the bytes
  // and a __syncwarp.
  template <int D, KvFormat F>
  __device__ static void issue(const BulkTile& t, const Maps&) {
    static_assert(F == KvFormat::kBF16 || F == KvFormat::kFP16, "16-bit rows");
    constexpr int kRowBytes = D * 2;
    constexpr int kStride = Rows<F, D>::stride(kRowBytes);
    static_assert(kStride % 16 == 0 && kRowBytes % 16 == 0, "bulk copies: 16-byte units");
    const int r = t.lane & (kBulkTile - 1);
    if (r < t.rows) {
      const bool is_v = t.lane >= kBulkTile;
      const int64_t off = t.pools->geom.k_index(t.page, t.kv_head, t.slot + r, 0) * 2;
      uint8_t* dst = (is_v ? t.sv : t.sk) + r * kStride;
      mma::bulk_copy_g2s(dst, (is_v ? t.pools->v : t.pools->k) + off, kRowBytes, t.bar,
                         t.l2_policy);
    }
  }
  static std::string maps_reason(const DecodeArgs&) { return ""; }
  static Maps maps(const DecodeArgs&) { return {}; }
};

}  // namespace

DecodeVersionImpl make_v9_mma_decode_bulk_rows() {
  return bulk_version<V9RowCopy>(
      9,
      "v4's tensor-core decode loading each K and V row of a 16-token HND tile with one bulk "
      "copy (a lane per row) into padded rows, on an mbarrier (bf16/fp16, block_size a "
      "multiple of 16)");
}

}  // namespace kvlab::gpu::detail
