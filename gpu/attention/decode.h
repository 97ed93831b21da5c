// decode.h: host entry points of the GPU decode-attention versions (the registry).
//
// Host-includable (g++): only the CUDA runtime API types. Tests and experiments iterate
// over decode_versions(); every version takes the same DecodeArgs as
// kvlab::ref::decode_attention, on device buffers.
//
// Four layers per kernel (gpu/README.md): this entry point validates and dispatches ->
// a templated launcher returning cudaError_t -> the __global__ kernel with one params
// struct -> device helpers. Runtime->compile-time dispatch lives in gpu/dispatch.cuh.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/attention/decode_plan.h"
#include "reference/attention/args.h"

namespace kvlab::gpu {

struct DecodeVersionInfo {
  int id = 0;           // the N of v<N>_<algorithm>.cu
  std::string name;     // e.g. "v3_flash_decoding"
  std::string summary;  // one line: the algorithm
  // The page geometries the version is built for; null: every geometry (all formats, layouts
  // and block sizes). A version declines every geometry outside its scope with a reason (so
  // auto and sweeps never pick it there), and must handle every geometry inside it.
  bool (*in_scope)(const PageGeometry&) = nullptr;
};

// Every registered version, in id order.
const std::vector<DecodeVersionInfo>& decode_versions();
const DecodeVersionInfo& decode_version(int id);  // throws InvalidArgument for unknown ids
// Whether version `id` is built for geometry `g` (DecodeVersionInfo::in_scope; true when the
// version has no scope).
bool decode_version_in_scope(int id, const PageGeometry& g);

// "" when `version` handles this configuration (with these plan knobs), else the reason
// it does not (a sweep records the point as skipped with this text). Never launches
// anything.
std::string decode_unsupported_reason(const DecodeArgs& args, int version,
                                      const DecodeTuning& tuning = DecodeTuning{});

// Device workspace the version needs for these args and plan knobs (split-KV partials,
// merge counters); 0 if none.
size_t decode_workspace_bytes(const DecodeArgs& args, int version,
                              const DecodeTuning& tuning = DecodeTuning{});

// Validates the arguments (null pointers, shapes, formats: throws kvlab::InvalidArgument
// or kvlab::Unsupported with the reason) and launches on `stream`. Allocates nothing, so
// it is safe inside CUDA-graph capture. Block-table contents and seq_lens live on the
// device and are checked by validate_decode_tables(). The workspace's contents on entry
// do not matter. `tuning` (decode_plan.h) overrides the version's plan knobs; the
// overload without it uses the defaults (the measured best).
void decode_attention(const DecodeArgs& args, int version, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream);
void decode_attention(const DecodeArgs& args, int version, const DecodeTuning& tuning,
                      void* workspace, size_t workspace_bytes, cudaStream_t stream);

// Checks on the device that every seq_len is in [0, seq_len_bound()] and every block-table
// entry a sequence uses is in [0, num_blocks); synchronizes `stream` and throws
// InvalidArgument naming the first offending sequence/entry. Not for timed loops.
void validate_decode_tables(const DecodeArgs& args, cudaStream_t stream);

}  // namespace kvlab::gpu
