// append.h: GPU append / quantize-on-write into the paged KV cache (vLLM's
// reshape_and_cache), byte-exact to kvlab::ref::append_kv (reference/quant/append.h).
//
//   kvlab::gpu::append_kv(args, stream);            // device buffers, same AppendArgs
//
// Token i of args.k / args.v [num_tokens, num_kv_heads, head_dim] (in_dtype bf16/f16/f32)
// goes to slot args.slot_mapping[i] (int64: page * block_size + offset; -1 = padding,
// skipped) for every KvFormat x KvLayout, with the reference's exact rule per format (the
// kernel calls the same KVLAB_HD functions of scale_rules.h / formats.h). The FP4 nibbles
// that two tokens share in the split-x V layout are merged with atomics on their 32-bit word,
// so concurrent tokens never overwrite each other's half byte.
#pragma once

#include <cuda_runtime_api.h>

#include "reference/attention/args.h"

namespace kvlab::gpu {

enum class SlotCheck {
  kValidate,  // check slot_mapping on the device first (range, duplicates); synchronizes
  kTrusted,   // no slot check (timed loops, CUDA-graph capture); the kernel still never
              // writes outside the pools: out-of-range slots are skipped
};

// Validates the host-visible arguments exactly as ref::validate_append(a, false) does
// (throws kvlab::InvalidArgument), then, with kValidate, the slots (validate_append_slots),
// then launches on `stream`. num_tokens == 0 launches nothing.
void append_kv(const AppendArgs& args, cudaStream_t stream, SlotCheck check = SlotCheck::kValidate);

// Device-side check of slot_mapping (Thrust: min/max and a sort for duplicates): every slot
// in [-1, num_blocks * block_size), no slot twice. Synchronizes `stream`; throws
// InvalidArgument naming the first offending token. Allocates a temporary copy.
void validate_append_slots(const AppendArgs& args, cudaStream_t stream);

}  // namespace kvlab::gpu
