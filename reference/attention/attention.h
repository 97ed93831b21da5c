// attention.h: the reference attention (decode over a paged cache, contiguous prefill).
//
// These functions are THE definition every GPU kernel is validated against, so they are
// written to be obviously right rather than fast:
//   - every KV element is read through kv_access.h (load_k / load_v: the canonical
//     dequantization, identical on host and device), then the math runs in float64 with
//     Eigen: logits z_j = sm_scale * (q . k_j), softmax by the two-pass max/sum method,
//     o = sum_j softmax_j v_j, lse = max_j z_j + log(sum_j exp(z_j - max));
//   - outputs are rounded once, round-to-nearest-even, from the float64 result into the
//     output dtype. A float64 -> float (RNE) -> bf16 (RNE) chain would round twice; we round
//     float64 -> float with round-to-odd first, which makes the second RNE step exact
//     (float keeps >= 2 more bits than bf16/fp16). Non-saturating: a result beyond the
//     dtype's range becomes Inf, as the CUDA __float2bfloat16_rn / __float2half_rn do.
//   - an empty sequence (or a causal prefill row that sees no key) gives o = 0 and
//     lse = -inf (natural log, see reference/softmax/online_softmax.h);
//   - a NaN in a slot that is read (a used slot) propagates to the output; unused slots
//     are never read (paged_case.h poisons them to prove it).
// Sequences are spread over threads (std::thread) when the work is large; results do not
// depend on the thread count.
#pragma once

#include <cstdint>

#include "reference/attention/args.h"
#include "reference/core/dtype.h"

namespace kvlab::ref {

// Checks everything a host can check about decode arguments, table contents included, and
// throws InvalidArgument saying what was given and what is allowed:
//   q_dtype bf16/f16; num_seqs >= 0; non-null q, o, block_table, seq_lens (when
//   num_seqs > 0), K/V pools, and the scale arrays the format needs; a valid geometry
//   (layout_names.h validate()); num_qo_heads a positive multiple of num_kv_heads;
//   max_blocks_per_seq >= 0; 0 <= max_seq_len <= max_blocks_per_seq * block_size; sm_scale
//   finite and > 0 (0 is the unset default, never a meaningful scale); pool scales finite
//   and > 0 where the format uses them; every seq_lens[s] in [0, seq_len_bound()]; every
//   block-table entry that a sequence reads in [0, num_blocks). Entries beyond a sequence's
//   last page are never read and may hold anything.
void validate_decode_args(const DecodeArgs& args);

// Decode attention (one query token per sequence). Writes o [num_seqs, num_qo_heads,
// head_dim] in q_dtype and, if args.lse is set, lse [num_seqs, num_qo_heads] (float).
void decode_attention(const DecodeArgs& args);

// The same computation with unrounded float64 results: o [num_seqs * num_qo_heads *
// head_dim], lse [num_seqs * num_qo_heads] (nullable). args.o and args.lse are ignored.
void decode_attention_exact(const DecodeArgs& args, double* o, double* lse);

// Throws InvalidArgument for: non-null q/k/v/o where the sizes need them; num_q, num_kv >= 0;
// num_qo_heads a positive multiple of num_kv_heads > 0; head_dim > 0 (any value: the
// contiguous layout has no vector constraints); sm_scale finite and > 0.
void validate_prefill_args(const PrefillArgs& args);

// Contiguous full or causal attention (PrefillArgs, float32 buffers). Causal: query i sits
// at position num_kv - num_q + i and sees keys 0..that position (bottom-right aligned, as
// FlashAttention); rows that see no key (num_q > num_kv) get o = 0, lse = -inf.
void prefill_attention(const PrefillArgs& args);

// Unrounded float64 results: o [num_q * num_qo_heads * head_dim], lse [num_q *
// num_qo_heads] (nullable). args.o and args.lse are ignored.
void prefill_attention_exact(const PrefillArgs& args, double* o, double* lse);

// Throws InvalidArgument for everything a host can check about paged prefill arguments,
// table contents included: the decode rules for the cache, heads, table and scales (see
// validate_decode_args), q_dtype bf16/f16, q_start starting at 0 and non-decreasing,
// q_len <= max_q_len bound, q_len <= seq_lens[s] <= seq_len_bound(), and every table
// entry a sequence reads in [0, num_blocks).
void validate_paged_prefill_args(const PagedPrefillArgs& args);

// Paged (chunked) prefill attention: per sequence, the dequantized keys 0 .. seq_len - 1
// (kv_access.h) and the chunk's query rows through prefill_attention_exact (causal,
// bottom-right aligned), outputs rounded once to q_dtype (o) and float (lse).
void paged_prefill_attention(const PagedPrefillArgs& args);

// Rounds a float64 value once (RNE, non-saturating) into dtype's grid; returns the float
// value (exactly representable in dtype) and, for the 16-bit dtypes, its bits.
float round_to_dtype(double x, DType dtype);
uint16_t round_to_16bit_code(double x, DType dtype);  // dtype bf16 or f16

}  // namespace kvlab::ref
