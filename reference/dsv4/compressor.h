// compressor.h: reference CSA / HCA compressors of the DSV4 substrate (Eigen-free scalar
// code: the math is compress_math.h, shared with the GPU).
//
//   dsv4_compress          streaming / chunked: token-by-token through the kept state
//                          (Dsv4StreamView), emitting each entry when its window completes.
//                          Decode is a call with one token per request; chunked prefill is a
//                          sequence of calls; every split gives the same entries and state.
//   dsv4_compress_oneshot  one-shot prefill from the whole projection arrays, no state: an
//                          independent path the tests compare the streaming one against.
//   dsv4_plan_entries      host planning of a call's output rows (entry_offsets, first_entry).
#pragma once

#include <cstdint>
#include <vector>

#include "reference/dsv4/args.h"
#include "reference/dsv4/views.h"

namespace kvlab::ref {

// entry_offsets[0] = 0, entry_offsets[r+1] = entry_offsets[r] + floor((start+n)/ratio) -
// floor(start/ratio); first_entry[r] = floor(start/ratio) (may be nullptr). Throws for a
// negative start, non-monotone token offsets or ratio < 1.
void dsv4_plan_entries(const int32_t* start_pos, const int32_t* token_offsets, int32_t num_requests,
                       int32_t ratio, int32_t* entry_offsets, int32_t* first_entry);

// Throws InvalidArgument for a slot outside the state, a width/ratio/dim mismatch, or
// entry_offsets that do not match dsv4_plan_entries. state.overlap selects CSA vs HCA.
void dsv4_compress(const Dsv4StreamView& state, const Dsv4CompressArgs& args);

// kv, gate [num_tokens, (overlap ? 2 : 1) * dim], ape [ratio, width] or nullptr;
// out [floor(num_tokens / ratio), dim].
void dsv4_compress_oneshot(const float* kv, const float* gate, const float* ape, int32_t num_tokens,
                           int32_t ratio, int32_t dim, bool overlap, float* out);

// The state rows a later call can still read after a request has seen `tokens` tokens
// (window w = the window of the next token, tokens / ratio):
//   lane a: rows of window w-1 (overlap only, needed by entry w) and of window w (rows
//           already written: tokens % ratio of them);
//   lane b / single lane: rows of window w already written.
// Returns float indices into ka (and kb) of the live rows, for tests comparing states.
struct Dsv4LiveRows {
  std::vector<int64_t> lane_a;  // offsets into ka / za (dim floats each)
  std::vector<int64_t> lane_b;  // offsets into kb / zb (overlap only)
};
Dsv4LiveRows dsv4_live_rows(const Dsv4StreamView& state, int64_t slot, int64_t tokens);

}  // namespace kvlab::ref
