// v11_mma_decode_cluster_merge.cu: v10 (v4's tensor-core decode, one TMA tensor copy per
// 16-token K and V tile, 128-byte swizzled, HND and NHD pools) with the KV splits of one
// (sequence, KV head, query tile) item merged inside ONE launch: the splits of an item run as
// one thread-block cluster and combine their partial results through distributed shared
// memory, instead of writing them to a workspace for a second (merge) kernel.
//
// What changed vs v10, and why (gpu/attention/TUNING.md, "K3 at 1 x 32k" and the split
// measurements of data/perf/h100_decode_splits_v10.h5):
//  * Measured (H100, fair run): 16 x 2k BF16 takes 51.8 us unsplit and 54.6 us at 2 splits
//    with v10; ncu put v10's merge kernel at ~5 us serialised, about one kernel's launch and
//    dependent-load latency (the launch_floor rows: 3.3-4.5 us). cuDNN also reduces in a
//    second kernel. Hopper can merge without one: the S blocks of an item form a cluster
//    (cluster dims S x 1 x 1; the grid puts the split fastest, so an item's splits are
//    consecutive blocks, rank = split).
//  * Each block ends as v10's does (4 warps merged by log-sum-exp), but its normalized partial
//    (lse[8], o[8][D]; 8 x (D + 1) floats) stays in its own shared memory: the pipeline area,
//    right after the warp merge's area (BulkSmem::partial_off; the stages are idle by then, and
//    the partial fits in every instance, so the block's shared memory is v10's). Cluster
//    barrier; then rank r combines its slice of the item's outputs (units of 4 dims of a
//    valid head, contiguous ranges, one per rank) by reading all S partials through
//    map_shared_rank, writes the final rows (and lse); a second cluster barrier keeps every
//    block resident until the others finished reading its shared memory
//    (cluster_split_merge.cuh). No workspace (0 bytes), no counter, no second kernel.
//  * Every block reaches both barriers (no early return while a cluster runs): a block
//    whose token range is empty (a short sequence: its split starts past the end) does no
//    copy and writes no partial; the merge reads the n = ceil(len / chunk) splits that hold
//    tokens, as v4's merge kernel. A table entry outside the pool turns that block's partial
//    into NaN (v10's rule), so the item's rows, and only its, become NaN; a bad length makes
//    the sequence's rows NaN, an empty sequence zeros with lse -inf.
//  * The merge arithmetic is v4's merge kernel's (merge_fold_batch, merge_weighted_sum:
//    softmax_state.h's LseAccumulator and combine_partials, the CPU-tested merge), replayed
//    warp after warp in the kernel's order, merge order split 0, 1, ..., S-1 in fixed batches:
//    the results are deterministic and, for the same split, bitwise v10's (and therefore
//    v5's); the GPU suite checks the bits (DecodeV11/BulkCopyDecode).
//  * Plan: v4_family_plan's splits (tuning.num_splits when forced), then the cluster limit:
//    the largest of 16 / 8 / 4 / 2 blocks with at least one resident cluster
//    (cudaOccupancyMaxActiveClusters; 16 needs cudaFuncAttributeNonPortableClusterSizeAllowed),
//    computed once per (device, head_dim, format) and cached. The plan's own choice above the
//    limit is re-planned at the limit; a forced split above it is declined with the reason.
//    One split: no cluster, v10's launch (one kernel) and its rows.
//  * Launch: cudaLaunchKernelEx with the cluster-dimension attribute. tuning.pdl does not
//    apply: it names how a version launches its dependent (merge) kernel, and v11 has none;
//    like v10's decode kernel, v11's is launched without the PDL attribute.
//  * Scope: v10's (BF16 / FP16 head_dim 64-256, FP8 E4M3 with a pool scale and NVFP4 at
//    head_dim >= 128, HND and NHD, block_size a multiple of 16), through the same copy policy
//    (tma_pool_map.cuh) and the same instances (one kernel per (head_dim, format)).
//
// Prediction (written before the first H100 run): at the split shapes (batch
// 1-4, 16 x 512 / 2k where v10's plan splits, 1 x 512 for the fixed cost) v11 saves the merge
// kernel's launch and its dependent-load chain, roughly 2-5 us per call (PDL already hides
// part of the launch, so likely nearer 2-3 us), e.g. 16 x 2k at 2 splits from 54.6 toward the
// unsplit 51.8 us or below; unsplit shapes (batch >= 64) are unchanged (same kernel, same
// launch). Why it may not: (1) clusters are placed whole inside one GPC: with 2 blocks per
// SM and clusters of 8-16 blocks, a GPC's SM count (16-18 on the H100) may not hold a whole
// number of clusters, leaving SMs idle and stretching a one-wave plan into two waves (the
// plan's wave arithmetic counts SMs x blocks per SM, not resident clusters); (2) every block
// of a cluster waits at the first barrier for the cluster's slowest split, so splits whose
// blocks start late (a cluster is launched only when all its blocks fit) delay the whole
// item; (3) the merge now runs on S blocks that stay resident through two barriers instead of
// a small separate grid, and reads remote shared memory (about L2 latency per round trip, S
// sequential batches per unit).
//
// Measured (H100 call P of session 4, main 493a0f2; data/perf/h100_decode_v11.h5; TUNING.md step
// 18): correct and bitwise v10 at the same split, and slower than v10 almost everywhere: +2-4 %
// at batch 1 with 2-8 splits (1 x 32k at 8 splits 75.2 vs 72.1 us), +14-53 % where the grid
// holds many or large clusters (1 x 32k at 16 splits 76.9 vs 53.7; 16 x 2k at 2 splits 61.4 vs
// 53.9; 64 x 8k at its plan 816.3 vs 709.6). The merge kernel it removes is worth less than what
// the cluster launch costs; why (placement of a cluster's blocks) is not measured yet. Version
// auto's table reads the file and never picks v11 (it is never the fastest row); v11 is
// reachable as version v11_mma_decode_cluster_merge (or 11).
#include "gpu/attention/tma_pool_map.cuh"

namespace kvlab::gpu::detail {
namespace {

struct V11Name {
  static constexpr const char* kName = "v11_mma_decode_cluster_merge";
};

}  // namespace

DecodeVersionImpl make_v11_mma_decode_cluster_merge() {
  return bulk_version<TmaSwizzleCopy<V11Name>, ClusterSplitMerge>(
      11,
      "v10 (one TMA tensor copy per 16-token K and V tile, swizzled, HND or NHD) with "
      "the KV splits of an item launched as one thread-block cluster and merged through "
      "distributed shared memory: one kernel, no workspace (bf16/fp16, fp8_e4m3 and nvfp4 at "
      "head_dim >= 128, block_size a multiple of 16, at most 16 splits per item)");
}

}  // namespace kvlab::gpu::detail
