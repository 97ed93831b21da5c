// cluster_split_merge.cuh: the split merge of v11_mma_decode_cluster_merge inside one
// thread-block cluster: the S blocks of an item (its splits, consecutive blocks, cluster
// dims S x 1 x 1) each leave their normalized partial (lse[8], o[8][D]) in their own shared
// memory, then every block combines a slice of the item's outputs by reading all S partials
// through distributed shared memory, and writes the final rows. No workspace, no counter, no
// second kernel.
//
//   partial (per block, floats): [lse: 8 heads][o: 8 heads][D]  (ClusterPartial<D>)
//   rank r (= the split) of the cluster takes units [r * per, (r + 1) * per) of the item's
//   valid heads x D/4 units (a unit: 4 consecutive dims of one head; per = ceil(units / S)),
//   one unit per thread at a time: consecutive threads read consecutive 16 bytes of a remote
//   partial and write consecutive 8 bytes of the output.
//
// The arithmetic is v4_merge_kernel's (mma::merge_fold_batch and merge_weighted_sum,
// softmax_state.h's LseAccumulator and combine_partials), replayed for the kernel's 4 warps one
// after the other in the kernel's order (warp w folds splits w, w + 4, ... as one batch of
// kMergeBatch, then the warps are combined in order 0..3): for the same split the output and lse are bitwise
// v10's (whose partials go through the workspace to that kernel), and deterministic.
//
// Barriers: every block of the cluster reaches both (the kernel has no early return while a
// cluster is launched): the first makes every partial visible cluster-wide (barrier.cluster
// arrive.release / wait.acquire), the second keeps each block's shared memory alive until
// the others finished reading it. A block without tokens (past the sequence's end) writes no
// partial: the merge reads only the n = ceil(len / chunk) splits that hold tokens (as the merge
// kernel), which are the cluster's ranks 0..n-1.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <utility>

#include "gpu/attention/v4_mma_decode.cuh"

namespace kvlab::gpu::detail {
namespace {

// The most splits a cluster merges (the largest of kClusterSizes, decode_plan.h).
constexpr int kClusterMaxSplits = kClusterSizes[0];
static_assert(kClusterMaxSplits <= kMergeWarps * kMergeBatch,
              "one batch of v4's merge kernel per warp holds every split of a cluster");

template <int D>
struct ClusterPartial {
  static constexpr int kFloats = mma::kHeadsPerTile * (D + 1);
  static constexpr int kBytes = kFloats * 4;
  __device__ static const float* lse(const float* part) { return part; }
  __device__ static const float* o(const float* part, int head) {
    return part + mma::kHeadsPerTile + head * D;
  }
};

// Called by every thread of every block of the cluster (S = p.num_splits > 1 blocks, rank =
// it.split), after the block's own partial is in `partial` (or the block had no tokens).
template <int D>
__device__ __forceinline__ void cluster_merge_splits(const V4Params& p, const V4Item& it,
                                                     float* partial) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int S = p.num_splits;
  const int rank = static_cast<int>(cluster.block_rank());
  const int n = merge_used_splits(p, p.seq_lens[it.seq]);  // the same in every block
  cluster.sync();  // every partial of the cluster written and visible

  constexpr int kUnitsPerHead = D / 4;
  const int heads = min(mma::kHeadsPerTile, p.group_size - it.qtile * mma::kHeadsPerTile);
  const int units = heads * kUnitsPerHead;
  const int per = (units + S - 1) / S;
  const int u_end = min(units, (rank + 1) * per);
  for (int u = rank * per + static_cast<int>(threadIdx.x); u < u_end; u += blockDim.x) {
    const int hl = u / kUnitsPerHead, d = (u % kUnitsPerHead) * 4;
    const int64_t row = static_cast<int64_t>(it.seq) * p.num_qo_heads +
                        it.kv_head * p.group_size + it.qtile * mma::kHeadsPerTile + hl;
    float out[4];
    float lse;
    if (n <= 0) {  // bad length (NaN) or an empty sequence (zeros, lse -inf): the merge kernel's
      const float v = n == -2 ? NAN : 0.0f;
      out[0] = out[1] = out[2] = out[3] = v;
      lse = n == -2 ? NAN : -INFINITY;
    } else {
      // The merge kernel's warp w: splits w, w + 4, ... (S <= 16 < kMergeWarps * kMergeBatch:
      // one batch per warp, of which entries b >= 4 never hold a split), each partial's lse and
      // o read from the block that holds it. The warps one after the other (not unrolled:
      // unrolled, the compiler hoisted every remote load and the merge set the whole kernel's
      // register count), their results in small arrays.
      float wm[kMergeWarps], ws[kMergeWarps];
      float4 y[kMergeWarps];
      bool any_bad = false;
#pragma unroll 1
      for (int w = 0; w < kMergeWarps; ++w) {
        LseAccumulator la;
        float4 acc[1] = {make_float4(0.0f, 0.0f, 0.0f, 0.0f)};
        float l[kMergeBatch];
        float4 x[kMergeBatch][1];
        bool use[kMergeBatch];
#pragma unroll
        for (int b = 0; b < kMergeBatch; ++b) {
          const int i = w + b * kMergeWarps;
          l[b] = -INFINITY;
          x[b][0] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          if (b < kClusterMaxSplits / kMergeWarps && i < n) {  // n <= S: split i holds tokens
            const float* part = cluster.map_shared_rank(partial, i);
            l[b] = ClusterPartial<D>::lse(part)[hl];
            x[b][0] = *reinterpret_cast<const float4*>(ClusterPartial<D>::o(part, hl) + d);
          }
          use[b] = b < kClusterMaxSplits / kMergeWarps && i < n &&
                   LseAccumulator::contributes(l[b]);
        }
        mma::merge_fold_batch(la, acc, l, x, use);
        wm[w] = la.m, ws[w] = la.s, y[w] = acc[0], any_bad |= la.bad;
      }
      mma::merge_unit_outputs(wm, ws, y, any_bad, out, lse);
    }
    mma::store_act_n<4>(p.o, row * D + d, out, p.q_bf16);
    if (d == 0 && p.lse) p.lse[row] = lse;
  }
  cluster.sync();  // the other blocks are done reading this block's partial
}

// ------------------------------------------------------------------ host side
// Lets a kernel take `smem` bytes of dynamic shared memory and clusters of up to 16 blocks
// (above 8, the portable limit, the kernel must allow non-portable sizes).
template <class Kernel>
cudaError_t allow_cluster_launch(Kernel kernel, size_t smem) {
  const cudaError_t e = allow_dynamic_smem(kernel, smem);
  if (e != cudaSuccess) return e;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
}

// The launch configuration of `grid` blocks in clusters of `cluster` blocks along x; `attr`
// (one attribute, the cluster dimension) must outlive the configuration.
inline cudaLaunchConfig_t cluster_config(unsigned grid, unsigned block, size_t smem, int cluster,
                                         cudaStream_t stream, cudaLaunchAttribute (&attr)[1]) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(cluster);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

// The largest cluster (16, 8, 4 or 2 blocks of kV4Threads threads and `smem` bytes) of which at
// least one can be resident (cudaOccupancyMaxActiveClusters), 1 when none: computed once per
// (device, head_dim, format) and cached per Tag (cached_per_instance). kernel_of(fn) calls
// fn(kernel) with the instance's kernel. A size the query rejects counts as not resident.
template <class Tag>
struct ClusterLimitOf {};
template <class Tag, class KernelOf>
int cached_cluster_limit(int device, int head_dim, KvFormat f, size_t smem, KernelOf&& kernel_of) {
  return cached_per_instance<ClusterLimitOf<Tag>>(device, head_dim, f, [&] {
    int limit = 1;
    kernel_of([&](auto kernel) {
      const bool non_portable = allow_cluster_launch(kernel, smem) == cudaSuccess;
      (void)cudaGetLastError();  // a refused attribute only rules out the sizes above 8
      limit = largest_resident_cluster([&](int size) {
        if (size > 8 && !non_portable) return 0;
        cudaLaunchAttribute attr[1];
        const cudaLaunchConfig_t cfg =
            cluster_config(static_cast<unsigned>(size), kV4Threads, smem, size, nullptr, attr);
        int clusters = 0;
        if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
          (void)cudaGetLastError();
          return 0;
        }
        return clusters;
      });
      return cudaSuccess;
    });
    return limit;
  });
}

// kernel<<<grid, block, smem, stream>>>(args...) as clusters of `cluster` blocks along x
// (grid a multiple of it). No programmatic-dependent-launch attribute: the kernel waits for
// nothing before it, and no kernel of its own follows it.
template <class... Params, class... Args>
cudaError_t launch_cluster(void (*kernel)(Params...), unsigned grid, unsigned block, size_t smem,
                           int cluster, cudaStream_t stream, Args&&... args) {
  const cudaError_t e = allow_cluster_launch(kernel, smem);
  if (e != cudaSuccess) return e;
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = cluster_config(grid, block, smem, cluster, stream, attr);
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

}  // namespace
}  // namespace kvlab::gpu::detail
