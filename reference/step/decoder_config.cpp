// decoder_config.cpp: presets, validation and byte/FLOP accounting of the synthetic decoder.
#include "reference/step/decoder_config.h"

#include <sstream>

#include "reference/core/error.h"

namespace kvlab {

namespace {

DecoderConfig make(const char* name, int layers, int hidden, int q_heads, int kv_heads,
                   int head_dim, int ffn, int vocab, float theta) {
  DecoderConfig c;
  c.name = name;
  c.layers = layers;
  c.hidden = hidden;
  c.q_heads = q_heads;
  c.kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.ffn = ffn;
  c.vocab = vocab;
  c.rope_theta = theta;
  return c;
}

}  // namespace

const std::vector<std::string>& decoder_preset_names() {
  static const std::vector<std::string> names = {"tiny", "small", "llama3-8b"};
  return names;
}

DecoderConfig decoder_preset(const std::string& name) {
  // tiny: two layers, GQA group 2, a vocabulary that is no power of two.
  if (name == "tiny") return make("tiny", 2, 256, 4, 2, 64, 512, 1000, 10000.0f);
  // small: GQA group 4, head_dim 128, FFN and vocabulary of awkward sizes (not multiples of
  // a GEMM tile; 4099 is prime).
  if (name == "small") return make("small", 3, 512, 4, 1, 128, 1368, 4099, 10000.0f);
  // The shape of Llama-3-8B (weights synthetic): the bench model.
  if (name == "llama3-8b") return make("llama3-8b", 32, 4096, 32, 8, 128, 14336, 128256, 500000.0f);
  std::ostringstream os;
  os << "unknown decoder preset '" << name << "'; allowed:";
  for (const auto& n : decoder_preset_names()) os << " " << n;
  throw InvalidArgument(os.str());
}

void validate(const DecoderConfig& c) {
  KVLAB_REQUIRE(c.layers >= 1, "decoder layers " << c.layers << " must be >= 1");
  KVLAB_REQUIRE(c.hidden >= 1, "decoder hidden " << c.hidden << " must be >= 1");
  KVLAB_REQUIRE(c.q_heads >= 1 && c.kv_heads >= 1,
                "decoder heads q " << c.q_heads << " / kv " << c.kv_heads << " must be >= 1");
  KVLAB_REQUIRE(c.q_heads % c.kv_heads == 0, "decoder q_heads "
                                                 << c.q_heads << " must be a multiple of kv_heads "
                                                 << c.kv_heads);
  KVLAB_REQUIRE(c.head_dim >= 2 && c.head_dim % 2 == 0,
                "decoder head_dim " << c.head_dim << " must be even and >= 2 (RoPE rotates pairs)");
  KVLAB_REQUIRE(c.ffn >= 1, "decoder ffn " << c.ffn << " must be >= 1");
  KVLAB_REQUIRE(c.vocab >= 1, "decoder vocab " << c.vocab << " must be >= 1");
  KVLAB_REQUIRE(c.rope_theta > 1.0f, "decoder rope_theta " << c.rope_theta << " must be > 1");
  KVLAB_REQUIRE(c.rms_eps > 0.0f, "decoder rms_eps " << c.rms_eps << " must be > 0");
  // Every GEMM dimension and every per-row index must fit int32 (cuBLAS and kernel indices).
  const int64_t big = static_cast<int64_t>(c.vocab) * c.hidden;
  KVLAB_REQUIRE(big < (int64_t{1} << 40), "decoder vocab*hidden " << big << " is too large");
}

std::string to_string(const DecoderConfig& c) {
  std::ostringstream os;
  os << c.name << " L" << c.layers << " H" << c.hidden << " q" << c.q_heads << "/kv" << c.kv_heads
     << "x" << c.head_dim << " F" << c.ffn << " V" << c.vocab;
  return os.str();
}

const char* to_string(Linear l) {
  switch (l) {
    case Linear::kQkv:
      return "qkv";
    case Linear::kO:
      return "o";
    case Linear::kGateUp:
      return "gate_up";
    case Linear::kDown:
      return "down";
    case Linear::kLmHead:
      return "lm_head";
  }
  return "?";
}

std::vector<LinearShape> linear_shapes(const DecoderConfig& c) {
  return {
      {Linear::kQkv, c.qkv_dim(), c.hidden, c.layers},
      {Linear::kO, c.hidden, c.q_dim(), c.layers},
      {Linear::kGateUp, 2 * static_cast<int64_t>(c.ffn), c.hidden, c.layers},
      {Linear::kDown, c.hidden, c.ffn, c.layers},
      {Linear::kLmHead, c.vocab, c.hidden, 1},
  };
}

int64_t step_weight_elements(const DecoderConfig& c) {
  int64_t n = 0;
  for (const auto& s : linear_shapes(c)) n += s.n * s.k * s.count;
  n += static_cast<int64_t>(c.layers) * 2 * c.hidden + c.hidden;  // norms
  return n;
}

int64_t parameter_count(const DecoderConfig& c) {
  return step_weight_elements(c) + static_cast<int64_t>(c.vocab) * c.hidden;
}

double gemm_bytes(int64_t m, int64_t n, int64_t k, int out_bytes) {
  return 2.0 * n * k + 2.0 * m * k + static_cast<double>(out_bytes) * m * n;
}

double gemm_flops(int64_t m, int64_t n, int64_t k) {
  return 2.0 * m * n * k;
}

double kv_bytes_per_token(const DecoderConfig& c, KvFormat f) {
  double per_head = c.head_dim * kv_format_bits(f) / 8.0;
  if (kv_format_has_token_scales(f)) per_head += 4.0;
  if (kv_format_has_block_scales(f))
    per_head += static_cast<double>(c.head_dim) / kv_format_scale_group(f);
  return 2.0 * c.layers * c.kv_heads * per_head;
}

}  // namespace kvlab
