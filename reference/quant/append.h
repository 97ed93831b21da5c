// append.h: the reference append / quantize-on-write (vLLM's reshape_and_cache).
//
//   void kvlab::ref::append_kv(const AppendArgs& a);
//
// Token i of a.k / a.v ([num_tokens, num_kv_heads, head_dim], a.in_dtype) is written to
// slot s = a.slot_mapping[i] of the paged cache a.kv: page s / block_size, slot
// s % block_size, for every head and dim, at the element indices of kv_layout.h
// (k_index / v_index). s = -1 is a padding token: nothing is written for it. Every other
// byte of the pools and scale arrays is left untouched (for FP4, the other nibble of a
// shared byte is preserved: a read-modify-write).
//
// The exact rule per KvFormat, which the GPU append kernels reproduce byte for byte (all
// functions are in scale_rules.h / formats.h; x is the input element converted exactly to
// float; "scale" below is the FP32 value that multiplies on read, kv_access.h):
//
//   kBF16              code = float_to_bf16_bits(x, kNonSaturating)   (a BF16 input is copied)
//   kFP16              code = float_to_fp16_bits(x, kNonSaturating)   (overflow -> ±Inf, the
//                                                                      __float2half_rn cast)
//   kFP8E4M3           code = quantize_element(x, k_scale, E4M3, kSatFinite, kEncoder)
//                      = float_to_e4m3(RN(x / k_scale), satfinite)    (V: v_scale)
//   kFP8E5M2           same with E5M2
//   kFP8E4M3PerToken   per (token, head): amax = amax_accumulate over the head_dim elements
//                      (NaN-propagating: a NaN or Inf element makes the scale NaN or Inf);
//                      scale = fp8_scale_from_amax(amax, E4M3, kDefaultAmaxFloor, kAmax)
//                            = RN(max(amax, 1e-4f) / 448);
//                      code  = float_to_e4m3(RN(x / scale), satfinite); the FP32 scale is
//                      stored at token_scale_index(block, head, slot).
//   kNVFP4             per 16 consecutive dims of one (token, head): amax as above;
//                      bcode = nvfp4_block_scale_code(amax, k_scale, kDefaultAmaxFloor, kAmax)
//                            = float_to_e4m3(RN(RN(max(amax, 1e-4f) / 6) / k_scale), satfinite)
//                              (NaN code 0x7F for a non-finite amax);
//                      div   = nvfp4_element_scale(bcode, k_scale) = RN(e4m3(bcode) * k_scale);
//                      code  = float_to_e2m1(x / div)  (div == 0: x * 0, i.e. code ±0);
//                      bcode stored at block_scale_index(block, head, slot, dim).
//   kMXFP4             per 32 consecutive dims: e = pow2_exp_ocp_floor(amax, 2,
//                      kDefaultAmaxFloor, kAmax) = floor_log2(max(amax, 1e-4f)) - 2 (NaN for a
//                      non-finite amax); scale code = e + 127 (UE8M0, 0xFF = NaN);
//                      code = float_to_e2m1(RN(x / 2^e)).
// FP4 codes are nibbles: pool element i lives in byte i / 2, low nibble for even i. In the
// split-x V pool ([.., head_dim, block_size]) consecutive slots share a byte, so two tokens
// of one page write the same byte: a GPU kernel must combine their nibbles (one thread per
// byte pair, or atomics), not store bytes independently.
//
// Validation (kvlab::InvalidArgument, naming the value and what is allowed): in_dtype in
// {f32, bf16, f16}; num_tokens >= 0; non-null k, v, slot_mapping when num_tokens > 0;
// validate(geom); non-null pools; non-null scale arrays for per-token and block-scaled
// formats; finite positive k_scale / v_scale for the pool-scaled formats (FP8, NVFP4);
// every slot in [-1, num_blocks * block_size); no slot written twice in one call (the GPU
// result would be a race).
#pragma once

#include "reference/attention/args.h"

namespace kvlab::ref {

void append_kv(const AppendArgs& a);

// Checks everything append_kv checks, without writing. The GPU entry point calls it with
// slots_on_host = false: the slot range and duplicate checks then need slot_mapping on
// the host and are skipped (the pointer is still required to be non-null).
void validate_append(const AppendArgs& a, bool slots_on_host = true);

}  // namespace kvlab::ref
