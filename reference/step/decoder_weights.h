// decoder_weights.h: the weights of a DecoderConfig, whatever their source.
//
// One struct for both weight sources of the decode step: synthetic_weights() generates the
// seeded BF16 bits of step_math.h (what a model of any shape uses without a checkpoint), and a
// model file reader (experiments/model/model_file.h) fills the same struct from a real
// checkpoint. The CPU reference (decode_step.h) and the GPU executor
// (gpu/runtime/decode_step_executor.h) take it as it is, so a real model runs through exactly the
// code a synthetic one does.
//
// Every tensor is BF16 bits, row-major [out, in] (PyTorch nn.Linear order):
//   embedding   [vocab, hidden]
//   per layer:  attn_norm [hidden], wqkv [q_dim + 2 kv_dim, hidden] (q rows, then k, then v;
//               q and k heads in the NeoX-halves RoPE pairing: row h*D + i pairs with
//               h*D + i + D/2), wo [hidden, q_dim], mlp_norm [hidden],
//               w_gate_up [2 ffn, hidden] (gate rows, then up rows), w_down [hidden, ffn]
//   final_norm  [hidden]
//   lm_head     [vocab, hidden], or empty: tied to the embedding (the same matrix)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/step/decoder_config.h"

namespace kvlab {

struct DecoderWeights {
  struct Layer {
    std::vector<uint16_t> attn_norm, wqkv, wo, mlp_norm, w_gate_up, w_down;
  };
  std::string source;  // "synthetic (seed 0x5eed)" or the model file it was read from
  std::vector<uint16_t> embedding;
  std::vector<Layer> layers;
  std::vector<uint16_t> final_norm;
  std::vector<uint16_t> lm_head;  // empty: tied to the embedding
  bool tied() const { return lm_head.empty(); }
  // The LM head's bits (the embedding when tied).
  const std::vector<uint16_t>& lm_head_bits() const { return tied() ? embedding : lm_head; }
};

// The seeded synthetic weights of c (the same bits the GPU generates on the device).
DecoderWeights synthetic_weights(const DecoderConfig& c);

// Throws InvalidArgument naming the tensor and both sizes unless every tensor has the size
// c gives it (and there is one Layer per layer).
void validate(const DecoderWeights& w, const DecoderConfig& c);

}  // namespace kvlab
