// sampling.cu: greedy and top-k sampling kernels (one thread block per row).
//
// Greedy: the maximum of token_order_key over the row (a CUB block reduction).
// Top-k: an exact radix select of the k-th largest 64-bit key (8-bit digits, most
// significant first, stopping as soon as the boundary bucket is taken whole), a gather of the
// k selected keys, a CUB block radix sort (descending) into the reference's order, then one
// thread runs step::sample_sorted over the k logits: the same float operations, in the same
// order, as the CPU reference, hence the same token.
// Cost: up to 8 passes over a row for the select (typically 3-4: the 32 value bits separate
// almost every logit); negligible next to the LM-head GEMM that produced the row.
#include "gpu/step/sampling.h"

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>

#include <cmath>

#include "gpu/core/cuda_check.h"
#include "reference/core/error.h"
#include "reference/step/step_math.h"

namespace kvlab::gpu::step {

namespace {

using kvlab::step::token_of_key;
using kvlab::step::token_order_key;

constexpr int kGreedyThreads = 512;
constexpr int kTopkThreads = 512;
constexpr int kTopkItems = kMaxTopK / kTopkThreads;  // 2 keys per thread in the sort

struct MaxKey {
  __device__ __forceinline__ uint64_t operator()(uint64_t a, uint64_t b) const {
    return a > b ? a : b;
  }
};

__global__ void __launch_bounds__(kGreedyThreads)
    greedy_kernel(const float* logits, int64_t ld, int vocab, int32_t* tokens) {
  using Reduce = cub::BlockReduce<uint64_t, kGreedyThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * ld;
  uint64_t best = 0;
  for (int i = threadIdx.x; i < vocab; i += kGreedyThreads) {
    const uint64_t key = token_order_key(row[i], static_cast<uint32_t>(i));
    best = key > best ? key : best;
  }
  best = Reduce(tmp).Reduce(best, MaxKey());
  if (threadIdx.x == 0) tokens[blockIdx.x] = static_cast<int32_t>(token_of_key(best));
}

struct TopkParams {
  const float* logits;
  int64_t ld;
  int vocab;
  int k;
  float inv_temperature;
  uint64_t seed;
  const int32_t* positions;
  int32_t* tokens;
};

__global__ void __launch_bounds__(kTopkThreads) topk_kernel(TopkParams p) {
  using Sort = cub::BlockRadixSort<uint64_t, kTopkThreads, kTopkItems>;
  __shared__ typename Sort::TempStorage sort_tmp;
  __shared__ unsigned int hist[256];
  __shared__ uint64_t cand[kMaxTopK];
  __shared__ float vals[kMaxTopK];
  __shared__ uint64_t s_prefix, s_mask;
  __shared__ int s_remaining, s_done, s_count;

  const float* row = p.logits + static_cast<int64_t>(blockIdx.x) * p.ld;
  if (threadIdx.x == 0) {
    s_prefix = 0;
    s_mask = 0;
    s_remaining = p.k;
    s_done = 0;
    s_count = 0;
  }
  __syncthreads();

  // Radix select: after the loop, the selected keys are exactly those with
  // (key & mask) >= prefix, k of them.
  for (int pass = 0; pass < 8; ++pass) {
    const int shift = 56 - 8 * pass;
    for (int i = threadIdx.x; i < 256; i += kTopkThreads) hist[i] = 0;
    __syncthreads();
    const uint64_t prefix = s_prefix, mask = s_mask;
    for (int i = threadIdx.x; i < p.vocab; i += kTopkThreads) {
      const uint64_t key = token_order_key(row[i], static_cast<uint32_t>(i));
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xFF], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int cum = 0;
      for (int d = 255; d >= 0; --d) {
        const int c = static_cast<int>(hist[d]);
        if (cum + c >= s_remaining) {
          s_prefix = prefix | (static_cast<uint64_t>(d) << shift);
          s_mask = mask | (uint64_t{0xFF} << shift);
          s_remaining -= cum;
          s_done = (c == s_remaining);
          break;
        }
        cum += c;
      }
    }
    __syncthreads();
    if (s_done) break;
  }

  const uint64_t prefix = s_prefix, mask = s_mask;
  for (int i = threadIdx.x; i < p.vocab; i += kTopkThreads) {
    const uint64_t key = token_order_key(row[i], static_cast<uint32_t>(i));
    if ((key & mask) >= prefix) cand[atomicAdd(&s_count, 1)] = key;
  }
  __syncthreads();

  uint64_t items[kTopkItems];
  for (int j = 0; j < kTopkItems; ++j) {
    const int idx = threadIdx.x * kTopkItems + j;
    items[j] = idx < p.k ? cand[idx] : 0;  // 0 is below every real key (see token_order_key)
  }
  __syncthreads();
  Sort(sort_tmp).SortDescending(items);
  for (int j = 0; j < kTopkItems; ++j) {
    const int idx = threadIdx.x * kTopkItems + j;
    if (idx < p.k) {
      cand[idx] = items[j];
      vals[idx] = row[token_of_key(items[j])];
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int32_t pos = p.positions[blockIdx.x];
    const float u =
        kvlab::step::sampling_uniform(p.seed, static_cast<int32_t>(blockIdx.x), pos < 0 ? 0 : pos);
    const int pick = kvlab::step::sample_sorted(vals, p.k, p.inv_temperature, u);
    p.tokens[blockIdx.x] = static_cast<int32_t>(token_of_key(cand[pick]));
  }
}

}  // namespace

void sample_greedy(const float* logits, int64_t ld, int vocab, int m, int32_t* tokens,
                   cudaStream_t stream) {
  KVLAB_REQUIRE(vocab >= 1 && ld >= vocab,
                "sample_greedy: vocab " << vocab << ", row stride " << ld);
  KVLAB_REQUIRE(m >= 1 && m <= 2147483647, "sample_greedy: rows " << m << " must be >= 1");
  greedy_kernel<<<m, kGreedyThreads, 0, stream>>>(logits, ld, vocab, tokens);
  KVLAB_CHECK_LAUNCH();
}

void sample_top_k(const float* logits, int64_t ld, int vocab, int m, int k, float temperature,
                  uint64_t seed, const int32_t* positions, int32_t* tokens, cudaStream_t stream) {
  KVLAB_REQUIRE(vocab >= 1 && ld >= vocab,
                "sample_top_k: vocab " << vocab << ", row stride " << ld);
  KVLAB_REQUIRE(m >= 1, "sample_top_k: rows " << m << " must be >= 1");
  KVLAB_REQUIRE(k >= 1 && k <= kMaxTopK && k <= vocab, "sample_top_k: k "
                                                           << k << " outside [1, min(" << kMaxTopK
                                                           << ", vocab " << vocab << ")]");
  KVLAB_REQUIRE(std::isfinite(temperature) && temperature > 0.0f,
                "sample_top_k: temperature " << temperature << " must be finite and > 0");
  TopkParams p{logits, ld, vocab, k, 1.0f / temperature, seed, positions, tokens};
  topk_kernel<<<m, kTopkThreads, 0, stream>>>(p);
  KVLAB_CHECK_LAUNCH();
}

}  // namespace kvlab::gpu::step
