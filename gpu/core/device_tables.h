// device_tables.h: Thrust-built helpers on device buffers: paged block tables (scan + sort)
// and error metrics reduced on the device. Host-includable (g++): declarations only.
//
// Block tables: sequence s needs pages_s = ceil(seq_lens[s] / block_size) pages; an
// exclusive scan of pages_s gives each sequence its offset into a page list, and entry
// (s, e) of the table [num_seqs, max_blocks_per_seq] is page_list[offset_s + e] for
// e < pages_s and `fill` beyond. The page list is the identity (pages in order) or a seeded
// permutation of [0, num_blocks) made by sorting page ids on hashed keys, which scatters a
// sequence's pages over the pool the way a long-running allocator does.
//
// Device error metrics: one transform_reduce over (out, ref) pairs: the numbers of
// compare() (reference/metrics/metrics.h) that a sweep needs for large outputs without
// copying them to the host: max |out - ref| and relative L2 over finite pairs, and the
// non-finite counts. Summation order differs from the host's, so the relative L2 agrees
// with compare() to rounding, not bit for bit.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvlab::gpu {

// Fills table [num_seqs, max_blocks_per_seq] (device) from seq_lens [num_seqs] (device).
// page_list: num_blocks page ids (device) or nullptr for the identity. Returns the number
// of pages the sequences use (synchronizes `stream`). Throws InvalidArgument when a length
// is negative, needs more than max_blocks_per_seq pages, or the sequences need more pages
// than num_blocks.
int64_t build_block_tables(const int32_t* seq_lens, int32_t num_seqs, int32_t block_size,
                           int32_t max_blocks_per_seq, int64_t num_blocks, const int32_t* page_list,
                           int32_t fill, int32_t* table, cudaStream_t stream);

// Writes a seeded permutation of [0, num_blocks) into page_list (device; Thrust sort of the
// ids by a splitmix64 hash of (seed, id)). Deterministic for a seed.
void shuffled_page_list(int64_t num_blocks, uint64_t seed, int32_t* page_list, cudaStream_t stream);

struct DeviceErrorSummary {
  int64_t count = 0;
  double max_abs = 0;  // over pairs where both are finite
  double rel_l2 = 0;   // ||out - ref|| / ||ref|| over finite pairs (0 when both norms are 0)
  int64_t nonfinite_out = 0;
  int64_t nonfinite_ref = 0;
  int64_t nonfinite_mismatch = 0;  // exactly one side non-finite, or both but different
};

// out, ref: n floats each (device). Synchronizes `stream`.
DeviceErrorSummary device_error_summary(const float* out, const float* ref, int64_t n,
                                        cudaStream_t stream);

}  // namespace kvlab::gpu
