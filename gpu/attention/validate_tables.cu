// validate_tables.cu: validate_decode_tables(), the device-side range check of seq_lens
// and of the block-table entries that sequences use (decode.h).
//
// One Thrust transform_reduce over the sequences: each sequence maps to the flat code of
// its first offending item (its length, or its first used table entry out of
// [0, num_blocks)), the reduction keeps the smallest code, so the error names the first
// offending sequence and entry. Kernels never read outside the pool even without this
// check (they turn such entries into NaN outputs); this names the cause.
#include <cuda_runtime.h>
#include <thrust/execution_policy.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform_reduce.h>

#include <cstdint>
#include <sstream>

#include "gpu/attention/decode.h"
#include "gpu/attention/decode_impl.h"
#include "gpu/core/cuda_check.h"

namespace kvlab::gpu {
namespace {

constexpr int64_t kNoError = INT64_MAX;

// code = seq * (max_blocks_per_seq + 1) + (0 for a bad length, 1 + entry for a bad entry)
struct FirstBadEntry {
  const int32_t* seq_lens;
  const int32_t* block_table;
  int64_t max_blocks_per_seq;
  int64_t block_size;
  int64_t num_blocks;
  int64_t bound;
  __device__ int64_t operator()(int64_t s) const {
    const int64_t len = seq_lens[s];
    const int64_t base = s * (max_blocks_per_seq + 1);
    if (len < 0 || len > bound) return base;
    const int64_t pages = (len + block_size - 1) / block_size;
    for (int64_t e = 0; e < pages; ++e) {
      const int64_t page = block_table[s * max_blocks_per_seq + e];
      if (page < 0 || page >= num_blocks) return base + 1 + e;
    }
    return kNoError;
  }
};

}  // namespace

void validate_decode_tables(const DecodeArgs& args, cudaStream_t stream) {
  detail::validate_decode_args(args);
  if (args.num_seqs == 0) return;
  FirstBadEntry f{args.seq_lens,           args.block_table,        args.max_blocks_per_seq,
                  args.kv.geom.block_size, args.kv.geom.num_blocks, detail::seq_len_bound64(args)};
  const int64_t code = thrust::transform_reduce(
      thrust::cuda::par.on(stream), thrust::counting_iterator<int64_t>(0),
      thrust::counting_iterator<int64_t>(args.num_seqs), f, kNoError, thrust::minimum<int64_t>());
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (code == kNoError) return;
  const int64_t per_seq = static_cast<int64_t>(args.max_blocks_per_seq) + 1;
  const int64_t s = code / per_seq, item = code % per_seq;
  int32_t len = 0;
  KVLAB_CUDA_CHECK(cudaMemcpy(&len, args.seq_lens + s, sizeof(len), cudaMemcpyDeviceToHost));
  std::ostringstream os;
  if (item == 0) {
    os << "seq_lens[" << s << "] = " << len << " is outside [0, " << detail::seq_len_bound64(args)
       << "] (max_seq_len, or max_blocks_per_seq * block_size)";
  } else {
    const int64_t e = item - 1;
    int32_t page = 0;
    KVLAB_CUDA_CHECK(cudaMemcpy(&page, args.block_table + s * args.max_blocks_per_seq + e,
                                sizeof(page), cudaMemcpyDeviceToHost));
    os << "block_table[" << s << "][" << e << "] = " << page
       << " is outside [0, num_blocks = " << args.kv.geom.num_blocks << ") (sequence " << s
       << " has length " << len << ", so it uses "
       << "entries 0.." << (len + args.kv.geom.block_size - 1) / args.kv.geom.block_size - 1 << ")";
  }
  throw InvalidArgument(os.str());
}

}  // namespace kvlab::gpu
