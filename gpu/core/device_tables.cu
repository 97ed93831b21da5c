// device_tables.cu: Thrust implementations of device_tables.h (block tables by scan and
// sort, error metrics by transform_reduce).
#include <cuda_runtime.h>
#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/scan.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/transform.h>
#include <thrust/transform_reduce.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "gpu/core/cuda_check.h"
#include "gpu/core/device_tables.h"
#include "reference/core/error.h"
#include "reference/core/mix64.h"

namespace kvlab::gpu {
namespace {

struct PagesOf {
  int64_t block_size;
  __device__ int64_t operator()(int32_t len) const {
    return len < 0 ? -1 : (len + block_size - 1) / block_size;
  }
};

struct MinMax {
  int64_t lo, hi;
};
struct ToMinMax {
  __device__ MinMax operator()(int64_t x) const { return {x, x}; }
};
struct CombineMinMax {
  __host__ __device__ MinMax operator()(const MinMax& a, const MinMax& b) const {
    return {a.lo < b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi};
  }
};

struct FillEntry {
  const int64_t* pages;
  const int64_t* offsets;
  const int32_t* page_list;  // nullptr: identity
  int32_t* table;
  int64_t max_blocks_per_seq;
  int32_t fill;
  __device__ void operator()(int64_t i) const {
    const int64_t s = i / max_blocks_per_seq, e = i % max_blocks_per_seq;
    int32_t v = fill;
    if (e < pages[s]) {
      const int64_t k = offsets[s] + e;
      v = page_list ? page_list[k] : static_cast<int32_t>(k);
    }
    table[i] = v;
  }
};

struct HashKey {
  uint64_t seed;
  __device__ uint64_t operator()(int64_t i) const {  // SplitMix64's output i from state seed
    return mix64(seed + kGolden64 * static_cast<uint64_t>(i));
  }
};

struct ErrAcc {
  double max_abs, d2, r2;
  int64_t count, nf_out, nf_ref, mismatch;
};
struct PairError {
  const float* out;
  const float* ref;
  __device__ ErrAcc operator()(int64_t i) const {
    const float o = out[i], r = ref[i];
    ErrAcc a{0, 0, 0, 1, 0, 0, 0};
    const bool fo = isfinite(o), fr = isfinite(r);
    a.nf_out = !fo;
    a.nf_ref = !fr;
    if (fo && fr) {
      const double d = static_cast<double>(o) - static_cast<double>(r);
      a.max_abs = fabs(d);
      a.d2 = d * d;
      a.r2 = static_cast<double>(r) * r;
    } else if (fo != fr) {
      a.mismatch = 1;
    } else if (!(isnan(o) && isnan(r)) && o != r) {
      a.mismatch = 1;  // NaN vs Inf, +Inf vs -Inf
    }
    return a;
  }
};
struct CombineErr {
  __host__ __device__ ErrAcc operator()(const ErrAcc& a, const ErrAcc& b) const {
    return {a.max_abs > b.max_abs ? a.max_abs : b.max_abs,
            a.d2 + b.d2,
            a.r2 + b.r2,
            a.count + b.count,
            a.nf_out + b.nf_out,
            a.nf_ref + b.nf_ref,
            a.mismatch + b.mismatch};
  }
};

}  // namespace

int64_t build_block_tables(const int32_t* seq_lens, int32_t num_seqs, int32_t block_size,
                           int32_t max_blocks_per_seq, int64_t num_blocks, const int32_t* page_list,
                           int32_t fill, int32_t* table, cudaStream_t stream) {
  KVLAB_REQUIRE(num_seqs >= 0, "build_block_tables: num_seqs must be >= 0, got " << num_seqs);
  KVLAB_REQUIRE(block_size > 0,
                "build_block_tables: block_size must be positive, got " << block_size);
  KVLAB_REQUIRE(
      max_blocks_per_seq > 0,
      "build_block_tables: max_blocks_per_seq must be positive, got " << max_blocks_per_seq);
  KVLAB_REQUIRE(num_blocks >= 0 && num_blocks <= INT32_MAX,
                "build_block_tables: num_blocks " << num_blocks << " is outside [0, 2^31)");
  if (num_seqs == 0) return 0;
  KVLAB_REQUIRE(seq_lens != nullptr && table != nullptr,
                "build_block_tables: seq_lens and table must be non-null");
  auto pol = thrust::cuda::par.on(stream);
  thrust::device_vector<int64_t> pages(num_seqs), offsets(num_seqs);
  thrust::transform(pol, seq_lens, seq_lens + num_seqs, pages.begin(), PagesOf{block_size});
  const MinMax mm =
      thrust::transform_reduce(pol, pages.begin(), pages.end(), ToMinMax{},
                               MinMax{std::numeric_limits<int64_t>::max(), -1}, CombineMinMax{});
  KVLAB_REQUIRE(mm.lo >= 0, "build_block_tables: a sequence length is negative");
  KVLAB_REQUIRE(mm.hi <= max_blocks_per_seq, "build_block_tables: a sequence needs "
                                                 << mm.hi << " pages of " << block_size
                                                 << " tokens, the table has " << max_blocks_per_seq
                                                 << " columns");
  thrust::exclusive_scan(pol, pages.begin(), pages.end(), offsets.begin());
  KVLAB_CUDA_CHECK(
      cudaStreamSynchronize(stream));  // the element reads below use the default stream
  const int64_t total =
      static_cast<int64_t>(offsets[num_seqs - 1]) + static_cast<int64_t>(pages[num_seqs - 1]);
  KVLAB_REQUIRE(total <= num_blocks, "build_block_tables: the sequences need "
                                         << total << " pages, the pool has " << num_blocks);
  const int64_t entries = static_cast<int64_t>(num_seqs) * max_blocks_per_seq;
  thrust::for_each(
      pol, thrust::counting_iterator<int64_t>(0), thrust::counting_iterator<int64_t>(entries),
      FillEntry{thrust::raw_pointer_cast(pages.data()), thrust::raw_pointer_cast(offsets.data()),
                page_list, table, max_blocks_per_seq, fill});
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(stream));
  return total;
}

void shuffled_page_list(int64_t num_blocks, uint64_t seed, int32_t* page_list,
                        cudaStream_t stream) {
  KVLAB_REQUIRE(num_blocks >= 0 && num_blocks <= INT32_MAX,
                "shuffled_page_list: num_blocks " << num_blocks << " is outside [0, 2^31)");
  if (num_blocks == 0) return;
  KVLAB_REQUIRE(page_list != nullptr, "shuffled_page_list: page_list is null");
  auto pol = thrust::cuda::par.on(stream);
  thrust::device_vector<uint64_t> keys(num_blocks);
  thrust::transform(pol, thrust::counting_iterator<int64_t>(0),
                    thrust::counting_iterator<int64_t>(num_blocks), keys.begin(), HashKey{seed});
  thrust::sequence(pol, page_list, page_list + num_blocks);
  thrust::sort_by_key(pol, keys.begin(), keys.end(), page_list);
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(stream));
}

DeviceErrorSummary device_error_summary(const float* out, const float* ref, int64_t n,
                                        cudaStream_t stream) {
  KVLAB_REQUIRE(n >= 0, "device_error_summary: n must be >= 0, got " << n);
  DeviceErrorSummary s;
  if (n == 0) return s;
  KVLAB_REQUIRE(out != nullptr && ref != nullptr, "device_error_summary: null buffer");
  const ErrAcc a =
      thrust::transform_reduce(thrust::cuda::par.on(stream), thrust::counting_iterator<int64_t>(0),
                               thrust::counting_iterator<int64_t>(n), PairError{out, ref},
                               ErrAcc{0, 0, 0, 0, 0, 0, 0}, CombineErr{});
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(stream));
  s.count = a.count;
  s.max_abs = a.max_abs;
  s.rel_l2 = a.r2 > 0 ? std::sqrt(a.d2) / std::sqrt(a.r2) : (a.d2 > 0 ? INFINITY : 0.0);
  s.nonfinite_out = a.nf_out;
  s.nonfinite_ref = a.nf_ref;
  s.nonfinite_mismatch = a.mismatch;
  return s;
}

}  // namespace kvlab::gpu
