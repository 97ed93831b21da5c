// prefill.h: host entry points of the GPU paged-prefill attention versions (the registry).
//
// Host-includable (g++): only the CUDA runtime API types. Every version takes the same
// PagedPrefillArgs as kvlab::ref::paged_prefill_attention, on device buffers: a batch of
// sequences, each computing a chunk of query tokens that sees its cached prefix plus the chunk
// causally (chunked prefill; a whole prompt is a chunk whose prefix is empty).
//
// Four layers per kernel: this entry point validates and dispatches -> a templated launcher
// returning cudaError_t -> the __global__ kernel with one params struct -> device helpers.
// The decode registry (decode.h) is separate: the two kernels differ in what they are
// optimized for (one query per sequence vs many), and a serving step calls both.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "reference/attention/args.h"

namespace kvlab::gpu {

struct PrefillVersionInfo {
  int id = 0;           // the N of prefill_paged_v<N>_<algorithm>.cu
  std::string name;     // e.g. "prefill_paged_v0_flash_mma"
  std::string summary;  // one line: the algorithm
};

// Every registered version, in id order.
const std::vector<PrefillVersionInfo>& prefill_versions();
const PrefillVersionInfo& prefill_version(int id);  // InvalidArgument for unknown ids

// "" when `version` handles this configuration, else the reason it does not (a sweep records
// the point as skipped with it). Never launches anything.
std::string prefill_unsupported_reason(const PagedPrefillArgs& args, int version);

// Validates what the host can see (null pointers, shapes, bounds, alignment: InvalidArgument;
// a configuration the version does not handle: Unsupported) and launches on `stream`.
// Allocates nothing. q_start, seq_lens and the block table live on the device and are
// checked by validate_prefill_tables().
void prefill_attention(const PagedPrefillArgs& args, int version, cudaStream_t stream);

// Copies q_start, seq_lens and the block table to the host, synchronizing `stream`, and runs
// the reference's argument checks on them (ref::validate_paged_prefill_args): InvalidArgument
// naming the first offending sequence / entry. Not for timed loops.
void validate_prefill_tables(const PagedPrefillArgs& args, cudaStream_t stream);

}  // namespace kvlab::gpu
