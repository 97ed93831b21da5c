// args.h: argument structs of the DSV4 data-plane kernels, shared by the reference
// (kvlab::ref::dsv4_*, host buffers) and the GPU (kvlab::gpu::dsv4_*, device buffers, plus
// a stream): the mirror contract (reference/README.md). The cache itself is passed as the views of
// views.h. Pointers are plain; sizes that launch grids are host integers.
#pragma once

#include <cstdint>

namespace kvlab {

// append_swa: write raw tokens into the SWA ring: quantized entry, BF16 RoPE, position.
//   raw_kv         [num_tokens, head_dim]  BF16 bits (NoPE dims first, then RoPE dims)
//   request_slots  [num_tokens] int32      ring page of each token, in [0, num_slots)
//   positions      [num_tokens] int32      absolute position of each token, >= 0
// Preconditions (checked by the reference; the GPU entry point checks the host-known ones):
// within one call a slot receives at most `window` tokens, with distinct positions.
struct Dsv4AppendSwaArgs {
  const uint16_t* raw_kv = nullptr;
  const int32_t* request_slots = nullptr;
  const int32_t* positions = nullptr;
  int32_t num_tokens = 0;
};

// Streaming / chunked / one-shot compression of the projection rows of one call.
// A call carries, for each of num_requests requests, the tokens at positions
// start_pos[r] .. start_pos[r] + n_r - 1 (n_r = token_offsets[r+1] - token_offsets[r]),
// continuing that request's earlier calls (start_pos[r] = tokens seen before). It emits
// every entry whose window completes inside the call: entries floor(start/ratio) ..
// floor((start+n)/ratio) - 1, written to out rows entry_offsets[r] ... (host-planned with
// dsv4_plan_entries()). Then the stream state keeps the rows later calls will need.
//   kv, gate    [num_tokens, width] FP32, width = 2*dim (overlap: lane a = first dim
//               columns, lane b = the last dim) or dim (single lane)
//   ape         [ratio, width] FP32 positional gate bias (row = position % ratio), nullptr = 0
//   out         [entry_offsets[num_requests], dim] FP32
// One-shot prefill is the call with start_pos = 0 and every token.
struct Dsv4CompressArgs {
  const float* kv = nullptr;
  const float* gate = nullptr;
  const float* ape = nullptr;
  const int32_t* request_slots = nullptr;  // [num_requests]
  const int32_t* start_pos = nullptr;      // [num_requests]
  const int32_t* token_offsets = nullptr;  // [num_requests + 1]
  const int32_t* entry_offsets = nullptr;  // [num_requests + 1]
  int32_t num_requests = 0;
  int32_t num_tokens = 0;   // token_offsets[num_requests]
  int32_t num_entries = 0;  // entry_offsets[num_requests]
  float* out = nullptr;
};

// Store FP32 entries into a paged pool (classical entries or indexer keys).
//   entries        [num_entries, dim] FP32 (dim = head_dim, or indexer_dim for keys)
//   request_slots  [num_requests]; first_entry [num_requests]: index of the request's first
//   entry in this call; entry_offsets [num_requests + 1]: its rows in `entries`.
// Entry e of the request in slot s goes to block block_table[s][e / rows], row e % rows.
struct Dsv4StoreArgs {
  const float* entries = nullptr;
  const int32_t* request_slots = nullptr;
  const int32_t* first_entry = nullptr;
  const int32_t* entry_offsets = nullptr;
  int32_t num_requests = 0;
  int32_t num_entries = 0;
};

// Decode attention of one query token per sequence over its compressed entries and its
// raw window. The latent is shared by K and V (MQA over one 512-dim latent, as in V4):
// key j and value j are the same dequantized entry.
//   q     [num_seqs, num_heads, head_dim] BF16 bits
//   o     [num_seqs, num_heads, head_dim] BF16 bits (RNE of the exact result; the GPU rounds
//         its FP32 online-softmax result once)
//   lse   [num_seqs, num_heads] FP32 natural-log log-sum-exp of the scaled logits, optional
// A query at position t = positions[s] sees compressed entries 0 .. (t+1)/ratio - 1 of its
// layer (none for SWA layers) and the ring rows whose position lies in [t - window + 1, t].
// Its own token must already be in the ring (append_swa first). No key: o = 0, lse = -inf.
struct Dsv4DecodeArgs {
  const uint16_t* q = nullptr;
  uint16_t* o = nullptr;
  float* lse = nullptr;
  const int32_t* request_slots = nullptr;  // [num_seqs]
  const int32_t* positions = nullptr;      // [num_seqs]
  int32_t num_seqs = 0;
  int32_t num_heads = 0;
  float sm_scale = 0.0f;
};

}  // namespace kvlab
