// decoder_weights.cpp: synthetic weights and the size check (see decoder_weights.h).
#include "reference/step/decoder_weights.h"

#include <sstream>

#include "reference/core/error.h"
#include "reference/step/decode_step.h"

namespace kvlab {

DecoderWeights synthetic_weights(const DecoderConfig& c) {
  validate(c);
  using step::WeightTensor;
  DecoderWeights w;
  std::ostringstream os;
  os << "synthetic (seed 0x" << std::hex << c.seed << ")";
  w.source = os.str();
  auto gen = [&](WeightTensor t, int layer, int64_t n) {
    return ref::synthetic_tensor(c, t, layer, n);
  };
  w.embedding = gen(WeightTensor::kEmbedding, 0, int64_t{c.vocab} * c.hidden);
  for (int l = 0; l < c.layers; ++l) {
    DecoderWeights::Layer L;
    L.attn_norm = gen(WeightTensor::kAttnNorm, l, c.hidden);
    L.wqkv = gen(WeightTensor::kWqkv, l, int64_t{c.qkv_dim()} * c.hidden);
    L.wo = gen(WeightTensor::kWo, l, int64_t{c.hidden} * c.q_dim());
    L.mlp_norm = gen(WeightTensor::kMlpNorm, l, c.hidden);
    L.w_gate_up = gen(WeightTensor::kWGateUp, l, 2 * int64_t{c.ffn} * c.hidden);
    L.w_down = gen(WeightTensor::kWDown, l, int64_t{c.hidden} * c.ffn);
    w.layers.push_back(std::move(L));
  }
  w.final_norm = gen(WeightTensor::kFinalNorm, 0, c.hidden);
  w.lm_head = gen(WeightTensor::kLmHead, 0, int64_t{c.vocab} * c.hidden);
  return w;
}

void validate(const DecoderWeights& w, const DecoderConfig& c) {
  validate(c);
  auto need = [&](const std::vector<uint16_t>& v, int64_t n, const std::string& what) {
    KVLAB_REQUIRE(static_cast<int64_t>(v.size()) == n,
                  "decoder weights (" << w.source << "): " << what << " has " << v.size()
                                      << " values, " << to_string(c) << " needs " << n);
  };
  need(w.embedding, int64_t{c.vocab} * c.hidden, "embedding");
  KVLAB_REQUIRE(static_cast<int>(w.layers.size()) == c.layers,
                "decoder weights (" << w.source << "): " << w.layers.size() << " layers, "
                                    << to_string(c) << " needs " << c.layers);
  for (int l = 0; l < c.layers; ++l) {
    const auto& L = w.layers[l];
    const std::string p = "layer " + std::to_string(l) + " ";
    need(L.attn_norm, c.hidden, p + "attn_norm");
    need(L.wqkv, int64_t{c.qkv_dim()} * c.hidden, p + "wqkv");
    need(L.wo, int64_t{c.hidden} * c.q_dim(), p + "wo");
    need(L.mlp_norm, c.hidden, p + "mlp_norm");
    need(L.w_gate_up, 2 * int64_t{c.ffn} * c.hidden, p + "w_gate_up");
    need(L.w_down, int64_t{c.hidden} * c.ffn, p + "w_down");
  }
  need(w.final_norm, c.hidden, "final_norm");
  if (!w.tied()) need(w.lm_head, int64_t{c.vocab} * c.hidden, "lm_head");
}

}  // namespace kvlab
