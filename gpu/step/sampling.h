// sampling.h: greedy and top-k sampling of the decode step's logits on the device.
//
// Both mirror kvlab::ref::step sampling (reference/step/sampling.h) bit for bit on equal
// logits: the candidates are ordered by step::token_order_key (larger logit first, then the
// lower token id), and the top-k draw goes through step::sample_sorted with the uniform
// step::sampling_uniform(seed, row, position).
//
//   logits [M, vocab] FP32 (row stride ld), positions [M] int32 (the position of the token
//   whose logits these are; a padding row, position < 0, draws as position 0), tokens [M].
// Allocate nothing; safe inside CUDA-graph capture.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvlab::gpu::step {

constexpr int kMaxTopK = 1024;

void sample_greedy(const float* logits, int64_t ld, int vocab, int m, int32_t* tokens,
                   cudaStream_t stream);

// k in [1, min(kMaxTopK, vocab)], temperature finite and > 0.
void sample_top_k(const float* logits, int64_t ld, int vocab, int m, int k, float temperature,
                  uint64_t seed, const int32_t* positions, int32_t* tokens, cudaStream_t stream);

}  // namespace kvlab::gpu::step
