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
//    loaders are v4's (Operand16 at kRowPad = 16): v4's shared-memory access pattern, v4's
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
#include "gpu/attention/v4_mma_decode.cuh"
#include "reference/layout/layout_names.h"

namespace kvlab::gpu::detail {
namespace {

constexpr int kV9Tile = 16;    // tokens per warp tile: the mma M, one page run at block 16
constexpr int kV9Stages = 3;   // v4's pipeline depth: the same bytes in flight per SM

// What the shared start-up loads (v4_startup_loads) read of a design point: the tile size.
struct V9Config {
  static constexpr const char* kName = "v9_mma_decode_bulk_rows";
  static constexpr int kTileBytes = 0;  // 16-token tiles (v4_warp_tile clamps to 16)
};
static_assert(v4_warp_tile<V9Config, 128, KvFormat::kBF16>() == kV9Tile, "16-token tiles");

template <KvFormat F, int D>
using V9Operand = mma::Operand16<F, D, F == KvFormat::kFP16, 16>;  // v4's padded rows

// Shared memory of a block:
//   [warp 0: 3 stages of [K rows | V rows], 16 x row stride each (row bytes + 16)] ... [warp 3]  (reused by
//   the warp merge) [Q^T fragments hi | lo | column scales] [mbarriers: 4 warps x 3 stages]
struct V9Smem {
  int row_bytes, row_stride, stage_bytes, warp_bytes, qbase, qfrag_bytes, bar_off, total;
};
template <int D, KvFormat F>
KVLAB_HD constexpr V9Smem v9_smem() {
  V9Smem s{};
  s.row_bytes = D * 2;
  s.row_stride = D * 2 + 16;
  s.stage_bytes = 2 * kV9Tile * s.row_stride;
  s.warp_bytes = kV9Stages * s.stage_bytes;
  const int pipe = kV4Warps * s.warp_bytes;
  const int merge = mma::WarpMerge<F, D, kV4Warps>::kBytes;
  s.qbase = pipe > merge ? pipe : merge;
  s.qfrag_bytes = 2 * (D / 16) * kWarpSize * 8 + mma::kHeadsPerTile * 4;
  s.bar_off = (s.qbase + s.qfrag_bytes + 7) / 8 * 8;
  s.total = s.bar_off + kV4Warps * kV9Stages * 8;
  return s;
}

// The block body of one (sequence, KV head, query tile, split) over tokens [start, end):
// v4_block with the tile copy replaced by the page-run bulk copies.
template <int D, KvFormat F>
__device__ __forceinline__ void v9_block(const V4Params& p, uint8_t* smem, int seq, int kv_head,
                                         int qtile, int split, int start, int end,
                                         const V4Startup<V9Config, D, F>& su) {
  using Op = V9Operand<F, D>;
  constexpr V9Smem kS = v9_smem<D, F>();
  constexpr int kWT = kV9Tile;
  constexpr int kStages = kV9Stages;
  using Merge = mma::WarpMerge<F, D, kV4Warps>;
  static_assert(Op::kRowStride == kS.row_stride, "the loaders read the rows where the copies put them");
  static_assert(kS.row_stride % 16 == 0 && kS.row_bytes % 16 == 0, "bulk copies: 16-byte units");

  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const int t = lane & 3;
  const PageGeometry& geom = p.pools.geom;
  const int bs = geom.block_size;
  const int32_t* table = p.block_table + static_cast<int64_t>(seq) * p.max_blocks_per_seq;

  uint8_t* wbase = smem + warp * kS.warp_bytes;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + kS.bar_off) + warp * kStages;
  uint2* qf_hi = reinterpret_cast<uint2*>(smem + kS.qbase);  // [D/16][32] B fragments of Q^T
  uint2* qf_lo = qf_hi + (D / 16) * kWarpSize;
  float* colscale = reinterpret_cast<float*>(qf_lo + (D / 16) * kWarpSize);  // [8]

  // ---- this warp's tiles: every 4th 16-token tile of [start, end)
  const int num_tiles = (end - start + kWT - 1) / kWT;
  const int my_tiles = num_tiles > warp ? (num_tiles - warp + kV4Warps - 1) / kV4Warps : 0;
  auto first_token = [&](int i) { return start + (warp + kV4Warps * i) * kWT; };
  bool bad = false;  // lane 0: a table entry outside the pool (the output becomes NaN)
  int pf = su.pages[0];  // lane 0: the page of the next tile to load (first tile: start-up)
  const uint64_t l2_policy = mma::l2_evict_first_policy();

  if (lane == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) mma::mbarrier_init(&bars[s], 1);
    mma::fence_barrier_init();
  }
  __syncwarp();

  // Tile i's K and V rows below the end into stage st, one bulk copy per row: lane r < 16 K
  // row r, lane 16 + r V row r. Called by the whole warp; the stage's earlier readers (every
  // lane of this warp) are done: the caller passed a __syncwarp after their last read.
  auto load_tile = [&](int i, int st) {
    uint64_t* bar = &bars[st];
    const int f = first_token(i);
    const int n = min(kWT, end - f);
    const int64_t pg = __shfl_sync(0xFFFFFFFFu, pf, 0);  // lane 0's table entry
    if (pg < 0 || pg >= geom.num_blocks) {
      if (lane == 0) {
        bad = true;  // nothing copied: the phase completes on the arrival alone
        mma::mbarrier_arrive(bar);
      }
      return;
    }
    mma::fence_proxy_async_smem();  // this lane's generic accesses before its async writes
    if (lane == 0) {
      mma::mbarrier_expect_tx(bar, static_cast<uint32_t>(2 * n * kS.row_bytes));
      mma::mbarrier_arrive(bar);
    }
    __syncwarp();  // the bytes are announced before any copy can complete
    const int r = lane & (kWT - 1);
    if (r < n) {
      const bool is_v = lane >= kWT;
      const int64_t off = geom.k_index(pg, kv_head, f % bs + r, 0) * 2;
      uint8_t* dst = wbase + st * kS.stage_bytes + (is_v ? kWT : 0) * kS.row_stride +
                     r * kS.row_stride;
      mma::bulk_copy_g2s(dst, (is_v ? p.pools.v : p.pools.k) + off, kS.row_bytes, bar,
                         l2_policy);
    }
  };
  auto fetch_page = [&](int i) {  // lane 0: the table entry of tile i (-1 past the end)
    if (lane != 0) return;
    const int f = first_token(i);
    pf = f < end ? __ldg(table + f / bs) : -1;
  };

  // ---- pipeline prologue first: its copies fly while Q is prepared.
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < my_tiles) {
      load_tile(s, s);
      if (s + 1 < my_tiles) fetch_page(s + 1);
    }
  }

  mma::q_fragments<Op, D>(su.q, p.q_bf16, p.qk_scale, qf_hi, qf_lo, colscale);
  __syncthreads();
  const float cs0 = colscale[2 * t], cs1 = colscale[2 * t + 1];
  const bool q_lo = !Op::kQkF16 && !p.q_bf16;  // an f16 Q split into bf16 hi + lo

  mma::WarpAttention<F, D, kWT, Op> wa;
  wa.reset();

  // ---- main loop: wait for tile i, refill the stage tile i-1 used, compute tile i.
  for (int i = 0; i < my_tiles; ++i) {
    const int st = i % kStages;
    mma::mbarrier_wait(&bars[st], static_cast<uint32_t>((i / kStages) & 1));
    uint8_t* sk = wbase + st * kS.stage_bytes;
    uint8_t* sv = sk + kWT * kS.row_stride;
    const int n_valid = end - first_token(i);
    if (n_valid < kWT) {
      // The sequence's last tile: zero the V rows past the end (the copy did not touch them).
      constexpr int kChunksPerRow = kS.row_bytes / 16;
      for (int c = n_valid * kChunksPerRow + lane; c < kWT * kChunksPerRow; c += kWarpSize)
        *reinterpret_cast<uint4*>(sv + (c / kChunksPerRow) * kS.row_stride +
                                  (c % kChunksPerRow) * 16) = make_uint4(0u, 0u, 0u, 0u);
    }
    __syncwarp();  // every lane is done with tile i-1's stage and sees tile i's zeroed rows
    const int nxt = i + kStages - 1;
    if (nxt < my_tiles) {
      load_tile(nxt, nxt % kStages);
      if (nxt + 1 < my_tiles) fetch_page(nxt + 1);
    }
    wa.tile(sk, sv, nullptr, nullptr, n_valid, qf_hi, qf_lo, q_lo, cs0, cs1, lane);
  }

  // ---- merge the 4 warps by log-sum-exp through shared memory (the pipeline area; every
  // copy a warp issued was waited for in its loop).
  wa.reduce_sums();
  bad = __syncthreads_or(bad);  // also: every warp is done with its pipeline buffers
  Merge::store_warp(smem, warp, lane, wa);
  __syncthreads();

  const int hl = tid >> 4, part = tid & 15;
  const int gl = qtile * mma::kHeadsPerTile + hl;
  if (gl >= p.group_size) return;
  const int64_t row = static_cast<int64_t>(seq) * p.num_qo_heads + kv_head * p.group_size + gl;
  float o[Merge::kOE], mm, ll;
  Merge::combine(smem, hl, part, o, mm, ll);
  const float inv = p.out_scale * Op::kOutScale / ll;
#pragma unroll
  for (int e = 0; e < Merge::kOE; ++e) o[e] = bad ? NAN : o[e] * inv;
  const float lse = bad ? NAN : mm + logf(ll);
  if (p.num_splits == 1) {
    mma::store_act_n<Merge::kOE>(p.o, row * D + part * Merge::kOE, o, p.q_bf16);
    if (part == 0 && p.lse) p.lse[row] = lse;
  } else {
    const int64_t prow = row * p.num_splits + split;
    float4* dst = reinterpret_cast<float4*>(p.partial_o + prow * D + part * Merge::kOE);
#pragma unroll
    for (int e = 0; e < Merge::kOE; e += 4)
      dst[e / 4] = make_float4(o[e], o[e + 1], o[e + 2], o[e + 3]);
    if (part == 0) p.partial_lse[prow] = lse;
  }
}

// grid: num_splits x num_seqs x num_kv_heads x num_qtiles blocks (split slowest), 128
// threads; dynamic shared memory v9_smem<D, F>().total.
template <int D, KvFormat F>
__global__ void __launch_bounds__(kV4Threads, 1) v9_decode_kernel(const V4Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  mma::pdl_launch_dependents();  // the merge kernel may start launching (it waits for us)
  int64_t b = blockIdx.x;
  const int qtile = static_cast<int>(b % p.num_qtiles);
  b /= p.num_qtiles;
  const int kv_head = static_cast<int>(b % p.pools.geom.num_kv_heads);
  b /= p.pools.geom.num_kv_heads;
  const int seq = static_cast<int>(b % p.num_seqs);
  const int split = static_cast<int>(b / p.num_seqs);

  const int start = split * p.chunk_tokens;
  V4Startup<V9Config, D, F> su;
  v4_startup_loads<V9Config, D, F>(p, seq, kv_head, qtile, start, su);  // with the length
  const int len = p.seq_lens[seq];
  const bool bad_len = len < 0 || len > p.seq_len_bound;
  const int end = bad_len ? 0 : min(len, start + p.chunk_tokens);
  if (bad_len || start >= end) {
    // As v4: single split: NaN rows for a bad length, zero rows / -inf for an empty
    // sequence; multi-split: the merge kernel handles both.
    if (p.num_splits != 1) return;
    constexpr int kOE = D / 16;
    const int hl = threadIdx.x >> 4, part = threadIdx.x & 15;
    const int gl = qtile * mma::kHeadsPerTile + hl;
    if (gl >= p.group_size) return;
    const int64_t row = static_cast<int64_t>(seq) * p.num_qo_heads + kv_head * p.group_size + gl;
    float x[kOE];
#pragma unroll
    for (int e = 0; e < kOE; ++e) x[e] = bad_len ? NAN : 0.0f;
    mma::store_act_n<kOE>(p.o, row * D + part * kOE, x, p.q_bf16);
    if (part == 0 && p.lse) p.lse[row] = bad_len ? NAN : -INFINITY;
    return;
  }
  v9_block<D, F>(p, smem, seq, kv_head, qtile, split, start, end, su);
}

// ------------------------------------------------------------------ host side
// The (head_dim, format) instances: every compiled head_dim, BF16 and FP16 only.
template <class Fn>
cudaError_t v9_dispatch(int head_dim, KvFormat format, Fn&& fn) {
  return KVLAB_DISPATCH_HEAD_DIM(head_dim, kD, [&] {
    if (format == KvFormat::kBF16)
      return fn(std::integral_constant<int, kD>{},
                std::integral_constant<KvFormat, KvFormat::kBF16>{});
    if (format == KvFormat::kFP16)
      return fn(std::integral_constant<int, kD>{},
                std::integral_constant<KvFormat, KvFormat::kFP16>{});
    return cudaErrorInvalidValue;  // unreachable: v9_unsupported_reason rejects the format
  });
}

// "" when v9's copy scheme applies to the pool: 16-bit rows, HND, page runs of whole tiles.
std::string v9_layout_reason(const PageGeometry& g) {
  std::ostringstream os;
  if (g.format != KvFormat::kBF16 && g.format != KvFormat::kFP16)
    os << V9Config::kName << " copies 16-bit (bf16, fp16) rows, got " << to_string(g.format);
  else if (g.layout != KvLayout::kHND)
    os << V9Config::kName << " copies the rows of (page, KV head) runs of the HND layout, got "
       << to_string(g.layout);
  else if (g.block_size % kV9Tile != 0)
    os << V9Config::kName << " needs block_size a multiple of " << kV9Tile
       << " (a warp tile inside one page), got " << g.block_size;
  return os.str();
}

struct V9Plan {
  int num_qtiles = 1;
  SplitPlan split;
  size_t smem = 0, workspace = 0;
  int blocks_per_sm = 0;
};

V9Plan v9_make_plan(const DecodeArgs& a, const LaunchLimits& lim, const DecodeTuning& tu) {
  V9Plan pl;
  const PageGeometry& g = a.kv.geom;
  pl.num_qtiles = (a.group_size() + mma::kHeadsPerTile - 1) / mma::kHeadsPerTile;
  v9_dispatch(g.head_dim, g.format, [&](auto d, auto fm) {
    pl.smem = static_cast<size_t>(v9_smem<decltype(d)::value, decltype(fm)::value>().total);
    return cudaSuccess;
  });
  if (pl.smem > static_cast<size_t>(lim.smem_per_block_optin)) return pl;
  {  // resident blocks per SM (occupancy API), cached per device and instance
    static std::mutex mu;
    static std::map<std::tuple<int, int, int>, int> cache;
    const auto key = std::make_tuple(lim.device, g.head_dim, static_cast<int>(g.format));
    std::lock_guard<std::mutex> lock(mu);
    const auto it = cache.find(key);
    if (it != cache.end()) {
      pl.blocks_per_sm = it->second;
    } else {
      int n = 0;
      v9_dispatch(g.head_dim, g.format, [&](auto d, auto fm) {
        auto kernel = v9_decode_kernel<decltype(d)::value, decltype(fm)::value>;
        KVLAB_CUDA_CHECK(cudaFuncSetAttribute(
            kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(pl.smem)));
        KVLAB_CUDA_CHECK(
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kV4Threads, pl.smem));
        return cudaSuccess;
      });
      cache[key] = n;
      pl.blocks_per_sm = n;
    }
  }
  SplitPlanInput in;
  in.items = static_cast<int64_t>(a.num_seqs) * g.num_kv_heads * pl.num_qtiles;
  in.seq_len_bound = seq_len_bound64(a);
  in.token_bytes = 2 * static_cast<int64_t>(g.head_dim) * 2;
  in.granule = int64_t{kV9Tile} * kV4Warps;  // split starts stay 16-aligned: tiles in one page
  in.slots = static_cast<int64_t>(lim.sm_count) * std::max(1, pl.blocks_per_sm);
  pl.split = plan_kv_splits(in, tu);
  if (pl.split.num_splits > 1)
    pl.workspace = static_cast<size_t>(a.num_seqs) * a.num_qo_heads * pl.split.num_splits *
                   (g.head_dim + 1) * sizeof(float);
  return pl;
}

std::string v9_unsupported_reason(const DecodeArgs& a, const DecodeTuning& tu) {
  const std::string layout = v9_layout_reason(a.kv.geom);
  if (!layout.empty()) return layout;
  const LaunchLimits lim = current_launch_limits();
  const V9Plan pl = v9_make_plan(a, lim, tu);
  std::ostringstream os;
  if (pl.smem > static_cast<size_t>(lim.smem_per_block_optin)) {
    os << V9Config::kName << " needs " << pl.smem
       << " bytes of shared memory per block, the device allows " << lim.smem_per_block_optin;
    return os.str();
  }
  if (pl.blocks_per_sm < 1) {
    os << V9Config::kName << "'s block (" << kV4Threads << " threads, " << pl.smem
       << " bytes of shared memory) cannot be resident";
    return os.str();
  }
  if (static_cast<int64_t>(a.num_seqs) * a.num_qo_heads > INT32_MAX) {
    os << V9Config::kName << " merges one block per output row; "
       << static_cast<int64_t>(a.num_seqs) * a.num_qo_heads << " rows exceed the 1-D grid limit";
    return os.str();
  }
  if (pl.split.grid > INT32_MAX) {
    os << V9Config::kName << " grid of " << pl.split.grid << " blocks exceeds the 1-D grid limit";
    return os.str();
  }
  return "";
}

size_t v9_workspace_bytes(const DecodeArgs& a, const DecodeTuning& tu) {
  return v9_make_plan(a, current_launch_limits(), tu).workspace;
}

void v9_run(const DecodeArgs& a, const DecodeTuning& tu, void* workspace, cudaStream_t stream) {
  const V9Plan pl = v9_make_plan(a, current_launch_limits(), tu);
  const PageGeometry& g = a.kv.geom;
  V4Params p{};
  p.q = a.q;
  p.o = a.o;
  p.lse = a.lse;
  p.q_bf16 = a.q_dtype == DType::kBF16;
  p.pools.k = static_cast<const uint8_t*>(a.kv.k);
  p.pools.v = static_cast<const uint8_t*>(a.kv.v);
  p.pools.k_scales = nullptr;  // 16-bit pools: no scales
  p.pools.v_scales = nullptr;
  p.pools.geom = g;
  p.qk_scale = a.sm_scale;
  p.out_scale = 1.0f;
  p.block_table = a.block_table;
  p.seq_lens = a.seq_lens;
  p.num_seqs = a.num_seqs;
  p.num_qo_heads = a.num_qo_heads;
  p.group_size = a.group_size();
  p.max_blocks_per_seq = a.max_blocks_per_seq;
  p.seq_len_bound = static_cast<int>(seq_len_bound64(a));
  p.num_qtiles = pl.num_qtiles;
  p.num_splits = pl.split.num_splits;
  p.chunk_tokens = static_cast<int>(pl.split.chunk_tokens);
  if (pl.split.num_splits > 1) {
    const size_t rows = static_cast<size_t>(a.num_seqs) * a.num_qo_heads * pl.split.num_splits;
    p.partial_o = static_cast<float*>(workspace);
    p.partial_lse = p.partial_o + rows * g.head_dim;
  }
  cudaError_t e = v9_dispatch(g.head_dim, g.format, [&](auto d, auto fm) {
    auto kernel = v9_decode_kernel<decltype(d)::value, decltype(fm)::value>;
    cudaError_t r = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(pl.smem));
    if (r != cudaSuccess) return r;
    kernel<<<static_cast<unsigned>(pl.split.grid), kV4Threads, pl.smem, stream>>>(p);
    return cudaGetLastError();
  });
  KVLAB_CUDA_CHECK(e);
  if (pl.split.num_splits > 1) {
    const int64_t rows = static_cast<int64_t>(a.num_seqs) * a.num_qo_heads;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(rows));
    cfg.blockDim = dim3(kMergeWarps * kWarpSize);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = tu.pdl ? 1 : 0;
    KVLAB_CUDA_CHECK(cudaLaunchKernelEx(&cfg, v4_merge_kernel, p));
  }
  KVLAB_CHECK_LAUNCH();
}

}  // namespace

DecodeVersionImpl make_v9_mma_decode_bulk_rows() {
  DecodeVersionImpl v;
  v.info = {9, "v9_mma_decode_bulk_rows",
            "v4's tensor-core decode loading each K and V row of a 16-token HND tile with one bulk "
            "copy (a lane per row) into padded rows, on an mbarrier (bf16/fp16, block_size a "
            "multiple of 16)"};
  v.info.in_scope = [](const PageGeometry& g) { return v9_layout_reason(g).empty(); };
  v.unsupported_reason = v9_unsupported_reason;
  v.workspace_bytes = v9_workspace_bytes;
  v.run = v9_run;
  return v;
}

}  // namespace kvlab::gpu::detail
