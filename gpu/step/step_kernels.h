// step_kernels.h: host launchers of the decode step's elementwise and normalization kernels.
//
// Host-includable (g++). Each launcher validates what it can on the host, launches on
// `stream`, allocates nothing (safe inside CUDA-graph capture) and checks the launch.
// Row-major shapes in brackets; M is the number of token rows (the batch of one decode step).
//
// Precision contract of the step (reference/step/decode_step.h mirrors it):
//   residual stream h: FP32; GEMM inputs: BF16; GEMM outputs: FP32; Q for attention and
//   the attention output: BF16; RMSNorm output: BF16 (normalized * gamma, rounded once).
//
// Fusion pairs (the fused kernel performs the same float operations in the same order as
// its unfused chain, so both produce the same bits; the tests assert it):
//   residual_add + rmsnorm        ->  add_rmsnorm
//   rope + cast_q + append_kv     ->  rope_append   (RoPE + KV append + quantize-on-write)
//   silu + mul                    ->  swiglu
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "reference/attention/args.h"

namespace kvlab::gpu::step {

// out[i] = synthetic_weight_bf16(seed, stream_id, i, scale, offset), i in [0, n): BF16 bits.
void fill_synthetic_bf16(uint16_t* out, int64_t n, uint64_t seed, uint64_t stream_id, float scale,
                         float offset, cudaStream_t stream);
// out[i] = uniform_pm1(hash3(seed, stream_id, i)) * scale as FP32 (synthetic activations).
void fill_synthetic_f32(float* out, int64_t n, uint64_t seed, uint64_t stream_id, float scale,
                        cudaStream_t stream);

// h[M, hidden] (FP32) = embedding[tokens[m], :] (BF16 [vocab, hidden]). Tokens must be in
// [0, vocab): the engine checks host-given tokens before upload; sampled ones always are.
void embed_gather(const int32_t* tokens, const uint16_t* embedding, float* h, int m, int hidden,
                  cudaStream_t stream);

// xn[M, hidden] (BF16) = h * rsqrt(mean(h^2) + eps) * gamma (gamma BF16 [hidden]).
void rmsnorm(const float* h, const uint16_t* gamma, uint16_t* xn, int m, int hidden, float eps,
             cudaStream_t stream);
// h += y (FP32 [M, hidden]).
void residual_add(float* h, const float* y, int m, int hidden, cudaStream_t stream);
// Fused: h += y, then xn = rmsnorm(h) as above (bitwise equal to residual_add; rmsnorm).
void add_rmsnorm(float* h, const float* y, const uint16_t* gamma, uint16_t* xn, int m, int hidden,
                 float eps, cudaStream_t stream);

// RoPE table: float2 (cos, sin) [max_pos, head_dim/2], computed on the host (rope_table()).
// In-place RoPE of x[M, heads, head_dim] (FP32, row stride ld elements) at positions[M]
// (a position < 0 marks a padding row: rotated as position 0, never appended).
void rope_inplace(float* x, int64_t ld, int heads, int head_dim, const int32_t* positions,
                  const float* rope_table, int max_pos, int m, cudaStream_t stream);
// out[M, cols] (BF16, dense) = in[M, cols] (FP32, row stride ld).
void cast_bf16(const float* in, int64_t ld, uint16_t* out, int m, int cols, cudaStream_t stream);

// Fused RoPE + append + quantize-on-write. qkv[M, (q_heads + 2 kv_heads) * head_dim] (FP32,
// row stride ld; q heads, then k heads, then v heads) -> q_out[M, q_heads, head_dim] (BF16,
// roped) and the K/V of each token (K roped) into the paged cache `kv` at slot_mapping[m]
// (-1 = padding, skipped), quantized as kvlab::ref::append_kv quantizes (byte-exact).
// q_out may be nullptr (synthetic fills).
void rope_append(const float* qkv, int64_t ld, int q_heads, const int32_t* positions,
                 const int64_t* slot_mapping, const float* rope_table, int max_pos, uint16_t* q_out,
                 const KvCacheView& kv, int m, cudaStream_t stream);
// "" when rope_append handles this cache format/layout, else the reason.
const char* rope_append_unsupported_reason(const KvCacheView& kv);

// s[M, F] = silu(g) (FP32); out = bf16(s * u). g and u have row stride ld (elements).
void silu(const float* g, int64_t ld, float* s, int m, int f, cudaStream_t stream);
void mul_bf16(const float* s, const float* u, int64_t ld_u, uint16_t* out, int m, int f,
              cudaStream_t stream);
// Fused: out[M, F] = bf16(silu(gu[:, :F]) * gu[:, F:]) for gu[M, 2F] (FP32).
void swiglu(const float* gu, uint16_t* out, int m, int f, cudaStream_t stream);

// Per-step bookkeeping on the device (so a captured graph needs no host input):
//   slot_mapping[m] = block_table[m][pos / bs] * bs + pos % bs, seq_lens[m] = pos + 1
//   for positions[m] >= 0; padding rows (pos < 0) get slot -1 and seq_len 0.
void step_prepare(const int32_t* positions, const int32_t* block_table, int max_blocks,
                  int block_size, int64_t* slot_mapping, int32_t* seq_lens, int m,
                  cudaStream_t stream);
// positions[m] += 1 for rows with positions[m] >= 0.
void step_advance(int32_t* positions, int m, cudaStream_t stream);

}  // namespace kvlab::gpu::step
