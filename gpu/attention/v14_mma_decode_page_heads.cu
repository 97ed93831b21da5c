// v14_mma_decode_page_heads.cu: v10's tensor-core decode (one TMA tensor copy per 16-token K
// and V tile, 128-byte swizzled, HND and NHD pools, v4's merge kernel after a split) with the
// work cut the other way: a block owns a (sequence, group of 8 KV heads, query tile, split)
// instead of a (sequence, KV head, query tile, split), and copies each 16-token tile of its
// token range for all 8 heads at once.
//
//   block = 9 warps: warps 0-7 consume (warp w = KV head 8 * group + w, v10's per-warp tile
//   compute over [start, end) in 16-token tiles), warp 8 produces (the block-table entries,
//   32 tiles per load, and one elected lane issuing the 8 heads' K and V tensor copies of a
//   tile into one pipeline stage).
//   stage s = [head 0: K rows | V rows] ... [head 7: ...], each head's tile exactly v10's
//   (16 rows, swizzled), so v10's operand loaders and tile compute read it unchanged.
//   full[s]: one arrival (the producer's, with the stage's bytes); empty[s]: one arrival per
//   live consumer warp, which the producer waits for before it refills the stage.
//   After the loop each warp is its own item: no merge between warps, each writes its KV
//   head's 8 query heads (or the split's partial rows, merged by v4's merge kernel).
//
// What changed vs v10, and why (gpu/attention/TUNING.md, step 32):
//  * FP8 at batch 16 x 8k reads 2 KB runs per (page, KV head): NHD's 16 rows of 128 bytes
//    1 KB apart, or HND's 16 contiguous rows. ncu measured v10 and v13 at 21 GB/s per SM and
//    78-84 % of DRAM peak there, and the page-size sweep measured 96.6-98.1 us at block 32-128
//    against 100.4 at block 16 (step 31): longer runs per request stream are faster. In NHD a
//    page's 8 KV heads are one 16 KB run of K and one of V; one block copying all 8 heads'
//    tiles back to back reads each page's runs whole, at block 16.
//  * The cost: 8x fewer work items (16 at batch 16 x 8 heads), so the plan splits each
//    sequence to fill the SMs (8 splits at 16 x 8k) and pays v4's merge kernel after it.
//  * A dedicated producer warp: the consumer warps share each stage, and the refill must
//    wait for the slowest of them; a consumer that issued it would stall its own tiles.
//  * Scope: v10's without NVFP4 (its 32-token tiles and block-scale copies are not built
//    here): bf16 / fp16 at head_dim <= 128 (8 heads x 3 stages of 16 rows of d256 would not
//    fit), fp8_e4m3 at head_dim >= 128, HND and NHD, block_size a multiple of 16. Any
//    num_kv_heads: a group of fewer than 8 heads leaves warps idle.
//  * Stages: as many (up to 4) as fit beside the 8 heads' Q fragments in 227 KB: FP8 d128
//    and 16-bit d64 4 (128 KB in flight per block), 16-bit d128 3, FP8 d256 2.
//  * Numerics: v10's tile compute, but one warp walks all of its head's tiles of the chunk
//    in order (v10's 4 warps take every 4th tile and are merged), and a split's chunk starts
//    on 16 tokens (v10's on 64): other bits than any older version's; the reference
//    tolerances apply.
//
// Prediction (written before the first H100 run): FP8 NHD 16 x 8k at ~88 % of DRAM peak
// (BF16's 4 KB runs): ~91.5 us of decode plus the merge, 95-96 us timed (v10's plan 99.4-100.2,
// v13 at one split 100.4); BF16 at 16 x 8k no better than v10 (its 4 KB runs already stream).
//
// Measured (H100, session 12 calls 1-2, data/perf/h100_decode_v14/; TUNING.md step 32):
// refuted. FP8 NHD 16 x 8k takes 100.5-101.1 us at its plan (8 splits, 128 blocks), 1.6-2.7 %
// under v10's plan in the same sweeps (102.9-104.0) and level with v10 at 2 splits in the fair
// run (100.2); 4 splits 129 us, 16 splits 104-105 (two waves). ncu: the kernel alone 100.2 us
// at 80.6 % of DRAM peak (v10 at 2 splits: 96.6 us, 83.7 %), 21 GB/s per SM on 128 SMs as v13's
// and v10's. Whole 16 KB page runs changed nothing measurable: v14 takes 100.6-101.1 us at
// block 16, 32, 64 and 128 and 99.1-99.8 on sequential pages. BF16: -0.3 to -1.4 % against
// v10's plan at batch 8-16 x 4k-32k, +1 to +3.5 % at 64 x 2k / 8k, +8 to +28 % at batch 1-4
// (a group of 8 heads per block leaves too few blocks there). Where it wins: FP8 on NHD pages
// at long streams (session 12 call 3, side by side with version auto's picks): 64 x 32k 1439.7
// against 1492.0 us, 256 x 2k -4.2 %, 256 x 8k -2.9 %, 4 x 128k -2.3 %, 8 x 32k -10 %; version
// auto picks it there (12 shapes, TUNING.md step 33).
#include "gpu/attention/tma_pool_map.cuh"

namespace kvlab::gpu::detail {
namespace {

struct V14Name {
  static constexpr const char* kName = "v14_mma_decode_page_heads";
};
// v10's tensor copies, rows and swizzle. The family's scope reasons read these: no NVFP4,
// and 16-bit rows at head_dim <= 128 as for a block of 8 warps.
struct V14PageHeadsCopy : TmaSwizzleCopy<V14Name> {
  static constexpr const char* kCopies = "16-row tensor tiles of all KV heads of a page";
  static constexpr bool kNVFP4 = false;
  static constexpr int kWarps = 8;
};
using PhCopy = V14PageHeadsCopy;

constexpr int kPhHeads = 8;                             // KV heads per block, a consumer warp each
constexpr int kPhConsumers = kPhHeads * kWarpSize;      // threads of the consumer warps
constexpr int kPhThreads = kPhConsumers + kWarpSize;    // + the producer warp
constexpr int kPhProducer = kPhHeads;                   // the producer's warp index
constexpr int kPhSmemLimit = 232448;                    // sm_90's opt-in shared memory per block

// Shared memory of a block (the base rounded up to 1024 bytes, the swizzle's period):
//   [stage 0: head 0 [K 16 rows | V 16 rows] ... head 7] ... [stage S-1]   (after the loop:
//   consumer warp w's merge area at w * merge_stride)
//   [Q^T fragments of head 0: hi | lo | column scales] ... [head 7]
//   [full barriers: S][empty barriers: S][bad-entry flag]
struct PhSmem {
  int row_stride, head_bytes, stage_bytes, stages, merge_stride, qfrag_bytes, qbase, bar_off,
      flag_off, total;
};
template <int D, KvFormat F>
KVLAB_HD constexpr PhSmem ph_smem() {
  using Op = BulkOperand<PhCopy, F, D>;
  PhSmem s{};
  s.row_stride = Op::kRowStride;
  s.head_bytes = 2 * kBulkTile * s.row_stride;
  s.stage_bytes = kPhHeads * s.head_bytes;
  s.merge_stride = (mma::WarpMerge<F, D, 1>::kBytes + 15) / 16 * 16;
  s.qfrag_bytes = (2 * (D / 16) * kWarpSize * 8 + mma::kHeadsPerTile * 4 + 15) / 16 * 16;
  const int fixed = kPhHeads * s.qfrag_bytes + 16 + 1024 - 16;  // Q, the flag, the base's slack
  s.stages = 4;
  while (s.stages > 2 && s.stages * s.stage_bytes + 16 * s.stages + fixed > kPhSmemLimit)
    --s.stages;
  s.qbase = s.stages * s.stage_bytes;
  s.bar_off = s.qbase + kPhHeads * s.qfrag_bytes;
  s.flag_off = s.bar_off + 2 * s.stages * 8;
  s.total = s.flag_off + 16 + 1024 - 16;
  return s;
}
static_assert(ph_smem<128, KvFormat::kFP8E4M3>().stages == 4 &&
                  ph_smem<128, KvFormat::kBF16>().stages == 3 &&
                  ph_smem<256, KvFormat::kFP8E4M3>().stages == 2,
              "the stage counts the header states");

// The consumer warps' barrier (named barrier 1; the producer warp does not take part).
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kPhConsumers) : "memory");
}

// Rows of a (sequence, KV-head group, query tile) with nothing to attend to (one split): NaN
// for a bad length, zeros and lse -inf for an empty sequence. Multi-split: the merge kernel
// writes them.
template <int D>
__device__ void ph_empty_rows(const V4Params& p, int seq, int h0, int heads, int qtile,
                              bool bad_len) {
  constexpr int kOE = D / 16;
  for (int u = threadIdx.x; u < heads * kV4Threads; u += kPhThreads) {
    const int h = u / kV4Threads, hl = (u >> 4) & 7, part = u & 15;
    const int gl = qtile * mma::kHeadsPerTile + hl;
    if (gl >= p.group_size) continue;
    const int64_t row =
        static_cast<int64_t>(seq) * p.num_qo_heads + (h0 + h) * p.group_size + gl;
    float x[kOE];
#pragma unroll
    for (int e = 0; e < kOE; ++e) x[e] = bad_len ? NAN : 0.0f;
    mma::store_act_n<kOE>(p.o, row * D + part * kOE, x, p.q_bf16);
    if (part == 0 && p.lse) p.lse[row] = bad_len ? NAN : -INFINITY;
  }
}

// grid: num_splits x num_seqs x ceil(num_kv_heads / 8) x num_qtiles blocks (split slowest),
// kPhThreads threads, dynamic shared memory ph_smem<D, F>().total.
template <int D, KvFormat F>
__global__ void __launch_bounds__(kPhThreads, 1)
    page_heads_decode_kernel(const V4Params p, const __grid_constant__ TmaPoolMaps maps) {
  using Op = BulkOperand<PhCopy, F, D>;
  using Merge = mma::WarpMerge<F, D, 1>;
  constexpr PhSmem kS = ph_smem<D, F>();
  constexpr int kStages = kS.stages;
  static_assert(kPhHeads * kS.merge_stride <= kS.qbase, "the merge areas fit in the stages");
  static_assert(kS.head_bytes % 1024 == 0, "every head's tile starts on the swizzle's period");
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + (1024 - mma::smem_addr(smem_raw) % 1024) % 1024;

  const int tid = threadIdx.x, warp = tid / kWarpSize, lane = tid % kWarpSize;
  const PageGeometry& geom = p.pools.geom;
  const int groups = (geom.num_kv_heads + kPhHeads - 1) / kPhHeads;
  int64_t b = blockIdx.x;
  const int qtile = static_cast<int>(b % p.num_qtiles);
  b /= p.num_qtiles;
  const int group = static_cast<int>(b % groups);
  b /= groups;
  const int seq = static_cast<int>(b % p.num_seqs);
  const int split = static_cast<int>(b / p.num_seqs);
  const int h0 = group * kPhHeads, heads = min(kPhHeads, geom.num_kv_heads - h0);
  const int start = split * p.chunk_tokens;
  const int32_t* table = p.block_table + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const PageSplit ps(geom.block_size);

  // ---- start-up loads, issued before the length is known (v4's order, TUNING.md step 7):
  // the consumers' Q slices (round r: heads 2r and 2r + 1, thread = (head, 16th of its dims)
  // of each 128), the producer's table entries of the first 64 tiles.
  mma::QSlice<D> qs[kPhHeads / 2];
#pragma unroll
  for (int r = 0; r < kPhHeads / 2; ++r) {
    const int h = 2 * r + tid / kV4Threads, hl = (tid >> 4) & 7, part = tid & 15;
    const int gl = qtile * mma::kHeadsPerTile + hl;
    const int64_t row = tid < kPhConsumers && h < heads && gl < p.group_size
                            ? static_cast<int64_t>(seq) * p.num_qo_heads +
                                  (h0 + h) * p.group_size + gl
                            : -1;
    mma::load_q_slice<D>(p.q, row, part, qs[r]);
  }
  // Entries are read only inside the table row and the split's chunk (past the length they
  // are never used).
  const int64_t limit =
      min(static_cast<int64_t>(start) + p.chunk_tokens,
          min(static_cast<int64_t>(p.seq_len_bound),
              static_cast<int64_t>(p.max_blocks_per_seq) * geom.block_size));
  auto table_entry = [&](int tile) {
    const int64_t tok = static_cast<int64_t>(start) + static_cast<int64_t>(tile) * kBulkTile;
    return tok < limit ? __ldg(table + ps.page(static_cast<int>(tok))) : -1;
  };
  int pg_cur = -1, pg_next = -1;  // producer lane j: the entries of tiles 32 k + j, 32 (k + 1) + j
  if (warp == kPhProducer) {
    pg_cur = table_entry(lane);
    pg_next = table_entry(kWarpSize + lane);
  }
  const int len = p.seq_lens[seq];
  const bool bad_len = len < 0 || len > p.seq_len_bound;
  const int end = bad_len ? 0 : min(len, start + p.chunk_tokens);
  if (bad_len || start >= end) {  // uniform over the block
    if (p.num_splits == 1) ph_empty_rows<D>(p, seq, h0, heads, qtile, bad_len);
    return;
  }
  const int num_tiles = (end - start + kBulkTile - 1) / kBulkTile;

  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kS.bar_off);
  uint64_t* empty = full + kStages;
  int* bad_flag = reinterpret_cast<int*>(smem + kS.flag_off);
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mma::mbarrier_init(&full[s], 1);
      mma::mbarrier_init(&empty[s], static_cast<uint32_t>(heads));  // the live consumers
    }
    *bad_flag = 0;
    mma::fence_barrier_init();
  }
  __syncthreads();  // the last block-wide barrier: the producer goes its own way from here

  if (warp == kPhProducer) {
    // ---- producer: tile i into stage i % S once its consumers released the stage's last
    // tile. A table entry outside the pool copies nothing (the stage's phase completes with
    // 0 bytes) and sets the flag that turns the block's rows into NaN; the flag is written
    // before the arrival, whose completion every consumer acquires.
    const uint64_t l2_policy = mma::l2_evict_first_policy();
    constexpr uint32_t kHeadTx = PhCopy::tx_bytes<D, F>(kBulkTile);
    for (int i = 0; i < num_tiles; ++i) {
      const int st = i % kStages;
      if (i >= kStages) mma::mbarrier_wait(&empty[st], static_cast<uint32_t>((i / kStages - 1) & 1));
      const int pg = __shfl_sync(0xFFFFFFFFu, pg_cur, i % kWarpSize);
      const bool ok = pg >= 0 && pg < geom.num_blocks;
      if (mma::elect_one_sync()) {
        if (!ok) *bad_flag = 1;
        mma::mbarrier_arrive_expect_tx(&full[st], ok ? static_cast<uint32_t>(heads) * kHeadTx : 0u);
        uint8_t* stage = smem + st * kS.stage_bytes;
        BulkTile t;
        t.pools = &p.pools;
        t.page = ok ? pg : 0;
        t.slot = ps.slot(start + i * kBulkTile);
        t.rows = kBulkTile;
        t.copy = ok;
        t.sks = t.svs = nullptr;  // no block scales (no NVFP4)
        t.bar = &full[st];
        t.l2_policy = l2_policy;
        t.lane = 0;
        for (int h = 0; h < heads; ++h) {
          t.kv_head = h0 + h;
          t.sk = stage + h * kS.head_bytes;
          t.sv = t.sk + kBulkTile * kS.row_stride;
          PhCopy::issue<D, F>(t, maps);
        }
      }
      __syncwarp();
      if (i % kWarpSize == kWarpSize - 1) {  // the next 32 tiles' entries are loaded; load 32 more
        pg_cur = pg_next;
        pg_next = table_entry(i + 1 + kWarpSize + lane);
      }
    }
    return;
  }

  // ---- consumers: Q fragments of every head of the group (round r: heads 2r, 2r + 1).
  auto qf_hi_of = [&](int h) { return reinterpret_cast<uint2*>(smem + kS.qbase + h * kS.qfrag_bytes); };
#pragma unroll
  for (int r = 0; r < kPhHeads / 2; ++r) {
    const int h = 2 * r + tid / kV4Threads;  // warp-uniform
    if (h < heads) {
      uint2* hi = qf_hi_of(h);
      uint2* lo = hi + (D / 16) * kWarpSize;
      mma::q_fragments_of<Op, D>(tid % kV4Threads, qs[r], p.q_bf16, p.qk_scale, hi, lo,
                                 reinterpret_cast<float*>(lo + (D / 16) * kWarpSize));
    }
  }
  consumers_sync();

  const bool live = warp < heads;
  mma::WarpAttention<F, D, kBulkTile, Op> wa;
  wa.reset();
  if (live) {
    const int t = lane & 3;
    const uint2* qf_hi = qf_hi_of(warp);
    const uint2* qf_lo = qf_hi + (D / 16) * kWarpSize;
    const float* colscale = reinterpret_cast<const float*>(qf_lo + (D / 16) * kWarpSize);
    const float cs0 = colscale[2 * t], cs1 = colscale[2 * t + 1];
    const bool q_lo = !Op::kQkF16 && !p.q_bf16;  // an f16 Q split into bf16 hi + lo
    for (int i = 0; i < num_tiles; ++i) {
      const int st = i % kStages;
      mma::mbarrier_wait(&full[st], static_cast<uint32_t>((i / kStages) & 1));
      uint8_t* sk = smem + st * kS.stage_bytes + warp * kS.head_bytes;
      uint8_t* sv = sk + kBulkTile * kS.row_stride;
      const int n_valid = end - (start + i * kBulkTile);
      if (n_valid < kBulkTile) {
        // The sequence's last tile (never refilled): zero the V rows past the end, whatever
        // the box copied there (stale rows, the pool's unused slots); K is masked by the
        // tile compute.
        constexpr int kChunksPerRow = Op::kRowBytes / 16;
        for (int c = n_valid * kChunksPerRow + lane; c < kBulkTile * kChunksPerRow; c += kWarpSize)
          *reinterpret_cast<uint4*>(sv + Op::at(c / kChunksPerRow, (c % kChunksPerRow) * 16)) =
              make_uint4(0u, 0u, 0u, 0u);
        __syncwarp();
      }
      wa.tile(sk, sv, sk, sv, n_valid, qf_hi, qf_lo, q_lo, cs0, cs1, lane);
      __syncwarp();  // every lane's reads of the stage are done
      if (lane == 0) mma::mbarrier_arrive(&empty[st]);
    }
    wa.reduce_sums();
  }
  // The split merge's dependent launch may start now that this warp's stream has ended (the
  // producer triggers by exiting; TUNING.md step 38).
  mma::pdl_launch_dependents();
  consumers_sync();  // every consumer is done with the stages (every copy was waited for)
  if (!live) return;

  // ---- this warp's KV head: its state into its merge area, then lane l writes (head,
  // 16th of its dims) units l, l + 32, l + 64, l + 96 of the 8 query heads.
  uint8_t* area = smem + warp * kS.merge_stride;
  Merge::store_warp(area, 0, lane, wa);
  __syncwarp();
  const bool bad = *reinterpret_cast<volatile int*>(bad_flag) != 0;
  const int kv_head = h0 + warp;
#pragma unroll
  for (int u = lane; u < kV4Threads; u += kWarpSize) {
    const int hl = u >> 4, part = u & 15;
    const int gl = qtile * mma::kHeadsPerTile + hl;
    if (gl >= p.group_size) continue;
    const int64_t row = static_cast<int64_t>(seq) * p.num_qo_heads + kv_head * p.group_size + gl;
    v4_combine_and_store<D, Op, Merge>(p, area, row, hl, part, bad, nullptr, V4SplitDest{split});
  }
}

// ------------------------------------------------------------------ host side
struct PhTag {};

V4Plan ph_make_plan(const DecodeArgs& a, const LaunchLimits& lim, const DecodeTuning& tu) {
  const PageGeometry& g = a.kv.geom;
  size_t smem = 0;
  bulk_dispatch<PhCopy>(g.head_dim, g.format, [&](auto d, auto fm) {
    smem = static_cast<size_t>(ph_smem<decltype(d)::value, decltype(fm)::value>().total);
    return cudaSuccess;
  });
  auto blocks = [&](size_t bytes) {
    return cached_blocks_per_sm<PhTag>(
        lim.device, g.head_dim, g.format, bytes,
        [&](auto&& fn) {
          return bulk_dispatch<PhCopy>(g.head_dim, g.format, [&](auto d, auto fm) {
            return fn(page_heads_decode_kernel<decltype(d)::value, decltype(fm)::value>);
          });
        },
        kPhThreads);
  };
  // 8 KV heads per block; every warp reads every 16-token tile of the chunk.
  return v4_family_plan(a, lim, tu, smem, kBulkTile, blocks, kPhThreads / kWarpSize, kPhHeads, 1);
}

std::string ph_unsupported_reason(const DecodeArgs& a, const DecodeTuning& tu) {
  const std::string layout = bulk_layout_reason<PhCopy>(a.kv.geom);
  if (!layout.empty()) return layout;
  const LaunchLimits lim = current_launch_limits();
  const std::string plan = v4_family_reason(PhCopy::kName, a, lim, ph_make_plan(a, lim, tu));
  if (!plan.empty()) return plan;
  return PhCopy::maps_reason(a);
}

size_t ph_workspace_bytes(const DecodeArgs& a, const DecodeTuning& tu) {
  return ph_make_plan(a, current_launch_limits(), tu).workspace;
}

void ph_run(const DecodeArgs& a, const DecodeTuning& tu, void* workspace, cudaStream_t stream) {
  const V4Plan pl = ph_make_plan(a, current_launch_limits(), tu);
  const PageGeometry& g = a.kv.geom;
  const V4Params p = v4_params(a, pl, workspace);
  const TmaPoolMaps maps = PhCopy::maps(a);
  cudaError_t e = bulk_dispatch<PhCopy>(g.head_dim, g.format, [&](auto d, auto fm) {
    auto kernel = page_heads_decode_kernel<decltype(d)::value, decltype(fm)::value>;
    cudaError_t r = allow_dynamic_smem(kernel, pl.smem);
    if (r != cudaSuccess) return r;
    kernel<<<static_cast<unsigned>(pl.split.grid), kPhThreads, pl.smem, stream>>>(p, maps);
    return cudaGetLastError();
  });
  KVLAB_CUDA_CHECK(e);
  v4_launch_merge(p, tu, stream);
  KVLAB_CHECK_LAUNCH();
}

}  // namespace

DecodeVersionImpl make_v14_mma_decode_page_heads() {
  DecodeVersionImpl v;
  v.info = {14, V14Name::kName,
            "v10's tensor copies and tile compute with a block per (sequence, 8 KV heads, "
            "split): a producer warp copies each 16-token tile of all 8 heads of a page into "
            "one stage, 8 consumer warps take a head each (bf16/fp16 at head_dim <= 128, "
            "fp8_e4m3 at head_dim >= 128, HND or NHD, block_size a multiple of 16)"};
  v.info.in_scope = [](const PageGeometry& g) { return bulk_layout_reason<PhCopy>(g).empty(); };
  v.unsupported_reason = ph_unsupported_reason;
  v.workspace_bytes = ph_workspace_bytes;
  v.run = ph_run;
  return v;
}

}  // namespace kvlab::gpu::detail
