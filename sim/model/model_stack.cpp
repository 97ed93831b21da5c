// model_stack.cpp: model presets, parameter counts and KV footprints (see model_stack.h).
#include "sim/model/model_stack.h"

#include <sstream>

#include "reference/core/error.h"
#include "reference/layout/layout_names.h"

namespace kvlab::sim {

std::string to_string(CacheKind k) {
  switch (k) {
    case CacheKind::kFull:
      return "full";
    case CacheKind::kCompressed:
      return "compressed";
    case CacheKind::kSlidingWindow:
      return "sliding_window";
  }
  return "?";
}

void ModelStack::validate() const {
  const std::string w = "model '" + name + "': ";
  KVLAB_REQUIRE(num_layers >= 1, w << "num_layers " << num_layers << " must be >= 1");
  KVLAB_REQUIRE(hidden >= 1, w << "hidden " << hidden << " must be >= 1");
  KVLAB_REQUIRE(num_qo_heads >= 1 && num_kv_heads >= 1 && num_qo_heads % num_kv_heads == 0,
                w << "num_qo_heads " << num_qo_heads
                  << " must be a positive multiple of num_kv_heads " << num_kv_heads);
  KVLAB_REQUIRE(head_dim >= 2 && head_dim % 2 == 0,
                w << "head_dim " << head_dim << " must be even and >= 2");
  KVLAB_REQUIRE(intermediate >= 1, w << "intermediate " << intermediate << " must be >= 1");
  KVLAB_REQUIRE(vocab >= 1, w << "vocab " << vocab << " must be >= 1");
  KVLAB_REQUIRE(weight_bits == 4 || weight_bits == 8 || weight_bits == 16 || weight_bits == 32,
                w << "weight_bits " << weight_bits << " (allowed: 4, 8, 16, 32)");
  KVLAB_REQUIRE(kv_pools == 1 || kv_pools == 2,
                w << "kv_pools " << kv_pools << " (allowed: 1 shared latent, 2 K and V)");
  if (cache.empty()) return;
  int64_t total = 0;
  for (size_t i = 0; i < cache.size(); ++i) {
    const CacheLayerGroup& g = cache[i];
    KVLAB_REQUIRE(g.num_layers >= 1,
                  w << "cache group " << i << ": num_layers " << g.num_layers << " must be >= 1");
    if (g.kind == CacheKind::kCompressed)
      KVLAB_REQUIRE(g.ratio >= 2, w << "cache group " << i << ": compression ratio " << g.ratio
                                    << " must be >= 2");
    if (g.kind == CacheKind::kSlidingWindow)
      KVLAB_REQUIRE(g.window >= 1,
                    w << "cache group " << i << ": window " << g.window << " must be >= 1");
    total += g.num_layers;
  }
  KVLAB_REQUIRE(total == num_layers,
                w << "cache groups cover " << total << " layers, the model has " << num_layers);
}

std::vector<CacheLayerGroup> ModelStack::cache_groups() const {
  if (!cache.empty()) return cache;
  return {CacheLayerGroup{num_layers, CacheKind::kFull, 1, 0}};
}

int64_t ModelStack::num_params() const {
  const int64_t h = hidden, d = head_dim;
  const int64_t attn = h * (num_qo_heads * d) + 2 * h * (num_kv_heads * d) + (num_qo_heads * d) * h;
  const int64_t mlp = 3 * h * static_cast<int64_t>(intermediate);
  const int64_t norms = 2 * h;
  return 2 * static_cast<int64_t>(vocab) * h + num_layers * (attn + mlp + norms) + h;
}

ModelStack model_stack_of(const DecoderConfig& c) {
  ModelStack m;
  m.name = c.name;
  m.num_layers = c.layers;
  m.hidden = c.hidden;
  m.num_qo_heads = c.q_heads;
  m.num_kv_heads = c.kv_heads;
  m.head_dim = c.head_dim;
  m.intermediate = c.ffn;
  m.vocab = c.vocab;
  m.weight_bits = 16;
  m.kv_pools = 2;
  return m;
}

ModelStack model_preset(const std::string& name) {
  ModelStack m;
  m.name = name;
  if (name == "llama3.1-8b") {
    m.num_layers = 32;
    m.hidden = 4096;
    m.num_qo_heads = 32;
    m.num_kv_heads = 8;
    m.head_dim = 128;
    m.intermediate = 14336;
    m.vocab = 128256;
  } else if (name == "llama3.1-70b") {
    m.num_layers = 80;
    m.hidden = 8192;
    m.num_qo_heads = 64;
    m.num_kv_heads = 8;
    m.head_dim = 128;
    m.intermediate = 28672;
    m.vocab = 128256;
  } else if (name == "qwen2.5-7b") {
    m.num_layers = 28;
    m.hidden = 3584;
    m.num_qo_heads = 28;
    m.num_kv_heads = 4;
    m.head_dim = 128;
    m.intermediate = 18944;
    m.vocab = 152064;
  } else if (name == "opt-13b") {
    m.num_layers = 40;
    m.hidden = 5120;
    m.num_qo_heads = 40;
    m.num_kv_heads = 40;
    m.head_dim = 128;
    m.intermediate = 10240;
    m.vocab = 50272;
  } else {
    std::ostringstream os;
    os << "unknown model preset '" << name << "' (allowed:";
    for (const auto& n : model_preset_names()) os << " " << n;
    os << ")";
    throw InvalidArgument(os.str());
  }
  m.validate();
  return m;
}

std::vector<std::string> model_preset_names() {
  return {"llama3.1-8b", "llama3.1-70b", "qwen2.5-7b", "opt-13b"};
}

namespace {
// One pool (K or V) of one layer with `entries` slots per block: data and scale bytes.
PageGeometry pool_geometry(const ModelStack& m, KvFormat format, int32_t entries) {
  PageGeometry g;
  g.layout = KvLayout::kNHD;  // bytes do not depend on the element layout
  g.format = format;
  g.num_blocks = 1;
  g.num_kv_heads = m.num_kv_heads;
  g.head_dim = m.head_dim;
  g.block_size = entries;
  validate(g);
  return g;
}
}  // namespace

KvFootprint kv_footprint(const ModelStack& m, int32_t block_size, KvFormat format) {
  m.validate();
  KVLAB_REQUIRE(block_size >= 1, "kv_footprint: block_size " << block_size << " must be >= 1");
  KvFootprint f;
  f.block_size = block_size;
  f.format = format;
  for (const CacheLayerGroup& g : m.cache_groups()) {
    if (g.kind == CacheKind::kSlidingWindow) {
      const PageGeometry p = pool_geometry(m, format, g.window);
      f.per_request_bytes += m.kv_pools * (p.bytes() + p.scale_bytes()) * g.num_layers;
      continue;
    }
    const int32_t ratio = g.kind == CacheKind::kCompressed ? g.ratio : 1;
    KVLAB_REQUIRE(block_size % ratio == 0,
                  "model '" << m.name << "': block_size " << block_size
                            << " is not a multiple of compression ratio " << ratio
                            << " (a block must hold whole compressed entries)");
    const PageGeometry p = pool_geometry(m, format, block_size / ratio);
    const int64_t data = m.kv_pools * p.bytes() * g.num_layers;
    (g.kind == CacheKind::kFull ? f.block.raw_kv : f.block.compressed_kv) += data;
    f.block.scales += m.kv_pools * p.scale_bytes() * g.num_layers;
  }
  return f;
}

int64_t kv_layer_bytes(const ModelStack& m, KvFormat format, int64_t tokens) {
  PageGeometry g;
  g.format = format;
  g.num_blocks = tokens;
  g.num_kv_heads = m.num_kv_heads;
  g.head_dim = m.head_dim;
  g.block_size = 1;
  return m.kv_pools * (g.bytes() + g.scale_bytes());
}

}  // namespace kvlab::sim
