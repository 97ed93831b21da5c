// decoder_config.h: the synthetic decoder whose full decode step kvlab runs on the GPU
// (gpu/step/) and in Eigen on the CPU (reference/step/decode_step.h).
//
// A Llama-style pre-norm decoder: embedding, L x [RMSNorm, QKV projection, RoPE, paged KV
// append, cached GQA attention, output projection, residual, RMSNorm, SwiGLU MLP, residual],
// final RMSNorm, LM head, sampling. Weights are synthetic and seeded (synthetic_weights.h)
// so that a model of any shape exists without a checkpoint, identically on host and device.
//
// Weight tensors (BF16, row-major [out, in] as PyTorch's nn.Linear stores them):
//   embedding   [vocab, hidden]
//   per layer:  attn_norm [hidden], wqkv [(q_heads + 2 kv_heads) * head_dim, hidden]
//               (rows: q heads, then k heads, then v heads), wo [hidden, q_heads * head_dim],
//               mlp_norm [hidden], w_gate_up [2 * ffn, hidden] (rows: gate, then up),
//               w_down [hidden, ffn]
//   final_norm  [hidden], lm_head [vocab, hidden]
//
// The accounting functions (parameters, bytes, FLOPs per linear layer) feed the roofline
// prediction of the GEMM crossover and the bench's byte/FLOP declarations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/layout/kv_layout.h"

namespace kvlab {

struct DecoderConfig {
  std::string name = "custom";
  int32_t layers = 0;
  int32_t hidden = 0;
  int32_t q_heads = 0;
  int32_t kv_heads = 0;
  int32_t head_dim = 0;
  int32_t ffn = 0;
  int32_t vocab = 0;
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;
  uint64_t seed = 0x5EEDull;  // weights: synthetic_weight(seed, tensor, index)

  int32_t q_dim() const { return q_heads * head_dim; }
  int32_t kv_dim() const { return kv_heads * head_dim; }
  int32_t qkv_dim() const { return q_dim() + 2 * kv_dim(); }
};

// Named shapes: "tiny" (tests), "small" (CPU reference vs GPU over a few layers),
// "llama3-8b" (the H100 bench: 32 layers, hidden 4096, 32/8 heads of 128, FFN 14336,
// vocab 128256). Throws InvalidArgument listing the names for an unknown one.
DecoderConfig decoder_preset(const std::string& name);
const std::vector<std::string>& decoder_preset_names();

// Throws InvalidArgument naming the field and the allowed range when the config cannot run:
// non-positive sizes, q_heads not a multiple of kv_heads, odd head_dim (RoPE rotates pairs),
// hidden != q_heads * head_dim is allowed (wo maps q_dim back to hidden).
void validate(const DecoderConfig& c);

// One line: "llama3-8b L32 H4096 q32/kv8x128 F14336 V128256".
std::string to_string(const DecoderConfig& c);

// The linear layers of one decode step, in execution order. For each: y[M, n] = x[M, k] W^T.
enum class Linear : int32_t { kQkv = 0, kO = 1, kGateUp = 2, kDown = 3, kLmHead = 4 };
constexpr int kNumLinears = 5;
const char* to_string(Linear l);  // "qkv", "o", "gate_up", "down", "lm_head"

struct LinearShape {
  Linear which = Linear::kQkv;
  int64_t n = 0;      // output features
  int64_t k = 0;      // input features
  int64_t count = 0;  // how many per step (layers, or 1 for the LM head)
};
std::vector<LinearShape> linear_shapes(const DecoderConfig& c);

// Parameters (elements) of the whole model, and of the weights one step reads (everything but
// the embedding table, of which a step gathers only `batch` rows).
int64_t parameter_count(const DecoderConfig& c);
int64_t step_weight_elements(const DecoderConfig& c);

// Bytes and FLOPs of one GEMM y[M, n] = x[M, k] W^T with BF16 x and W and an `out_bytes`
// output element (4 for FP32): weights read once, activations read once, output written once.
double gemm_bytes(int64_t m, int64_t n, int64_t k, int out_bytes);
double gemm_flops(int64_t m, int64_t n, int64_t k);

// KV-cache bytes per token (all layers, K and V, storage format incl. scales).
double kv_bytes_per_token(const DecoderConfig& c, KvFormat f);

}  // namespace kvlab
