// dsv4_kernels.h: host entry points of the DSV4 substrate's GPU kernels (host-includable).
//
// Each mirrors a reference function of reference/dsv4 with the same views and args, on
// device buffers, plus a stream:
//   gpu::dsv4_append_swa          <-> ref::dsv4_append_swa          (append_swa.cu)
//   gpu::dsv4_compress            <-> ref::dsv4_compress            (compressor.cu)
//   gpu::dsv4_store_entries       <-> ref::dsv4_store_entries       (store.cu)
//   gpu::dsv4_store_indexer_keys  <-> ref::dsv4_store_indexer_keys  (store.cu)
//   gpu::dsv4_decode_attention    <-> ref::dsv4_decode_attention    (decode_attention.cu)
// Four layers per kernel (gpu/README.md): these entry points validate what the host knows
// (shapes, null pointers, counts; throwing InvalidArgument / Unsupported) and launch; a
// launcher returns cudaError_t; one __global__ kernel per operation takes one params
// struct; device helpers live in entry_store.cuh. Nothing allocates: every entry point is
// safe inside CUDA-graph capture.
//
// Device-resident indices (slots, positions, block-table entries) are not read back. A
// block id outside [0, num_blocks) or a slot outside the state makes the kernel trap
// (the launch fails loudly at the next synchronization) instead of writing out of bounds;
// the manager and the reference checks keep well-formed runs away from that.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "reference/dsv4/args.h"
#include "reference/dsv4/views.h"

namespace kvlab::gpu {

// One thread block of 128 threads per token; warp-level amax; FP8 bytes identical to the
// reference. kAtomicHead: rows in arrival order (atomicAdd on the head): with several
// tokens of one slot in one call the row order of those tokens is the scheduling order
// (their set, positions and contents match the reference; their rows may be permuted).
void dsv4_append_swa(const Dsv4SwaView& swa, const Dsv4AppendSwaArgs& args, cudaStream_t stream);

// Two launches: emit the entries completed in the call (reading the state for earlier
// positions and the call's rows for later ones), then keep the rows later calls need.
// entry_offsets must come from ref::dsv4_plan_entries on the host copies of start_pos and
// token_offsets (args.num_entries sizes the grid).
void dsv4_compress(const Dsv4StreamView& state, const Dsv4CompressArgs& args, cudaStream_t stream);

void dsv4_store_entries(const Dsv4ClassicalView& pool, int64_t num_slots, const Dsv4StoreArgs& args,
                        cudaStream_t stream);
void dsv4_store_indexer_keys(const Dsv4IndexerView& keys, int64_t num_slots,
                             const Dsv4StoreArgs& args, cudaStream_t stream);

// One thread block (4 warps) per (head, sequence); head_dim must be a multiple of 32 and
// at most 512 (else Unsupported). Online softmax in FP32.
void dsv4_decode_attention(const Dsv4SwaView& swa, const Dsv4ClassicalView* classical,
                           const Dsv4DecodeArgs& args, cudaStream_t stream);

}  // namespace kvlab::gpu
