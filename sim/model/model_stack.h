// model_stack.h: the model shapes that the capacity planner, the memory ledger and the
// cost model need: attention/MLP dimensions and, per layer group, how the KV cache stores
// tokens (every token, one compressed entry per `ratio` tokens, or a sliding window).
//
// Bytes go through reference/layout/kv_layout.h (PageGeometry), the same header the kernels
// index with, so the simulator's byte accounting and the real pools agree by construction.
// This file covers the plain (vLLM-style) stacks; the DeepSeek-V4-style stack has its own
// schema (sim/dsv4) and is converted by the planner.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/layout/kv_layout.h"
#include "reference/step/decoder_config.h"

namespace kvlab::sim {

enum class CacheKind : int32_t {
  kFull = 0,           // one entry per token, paged
  kCompressed = 1,     // one entry per `ratio` tokens, paged (block_size % ratio == 0)
  kSlidingWindow = 2,  // the last `window` tokens in a per-request ring, not paged
};
std::string to_string(CacheKind k);

struct CacheLayerGroup {
  int32_t num_layers = 0;  // >= 1
  CacheKind kind = CacheKind::kFull;
  int32_t ratio = 1;   // kCompressed: >= 2
  int32_t window = 0;  // kSlidingWindow: >= 1
};

// A dense decoder-only transformer (GQA attention, SwiGLU MLP).
struct ModelStack {
  std::string name;
  int32_t num_layers = 0;
  int32_t hidden = 0;
  int32_t num_qo_heads = 0;
  int32_t num_kv_heads = 0;  // num_qo_heads % num_kv_heads == 0
  int32_t head_dim = 0;
  int32_t intermediate = 0;  // SwiGLU width (gate and up are hidden x intermediate each)
  int32_t vocab = 0;
  int32_t weight_bits = 16;  // bits per weight parameter (16 BF16, 8 FP8, 4 FP4)
  int32_t kv_pools =
      2;  // 2: separate K and V caches; 1: one shared latent per token (MLA-style, K = V)
  // KV-cache layer groups; their num_layers sum to num_layers. Empty = every layer kFull.
  std::vector<CacheLayerGroup> cache;

  void validate() const;                              // InvalidArgument naming the field
  std::vector<CacheLayerGroup> cache_groups() const;  // `cache`, or one kFull group
  int64_t num_params() const;                         // embeddings + layers + untied LM head
  int64_t weight_bytes() const { return num_params() * weight_bits / 8; }
  int group_size() const { return num_kv_heads > 0 ? num_qo_heads / num_kv_heads : 0; }
};

// Presets from the public model configs (HF config.json of each model):
//   "llama3.1-8b"   32 layers, hidden 4096, 32 q / 8 kv heads, d 128, MLP 14336, vocab 128256
//   "llama3.1-70b"  80 layers, hidden 8192, 64 q / 8 kv heads, d 128, MLP 28672, vocab 128256
//   "qwen2.5-7b"    28 layers, hidden 3584, 28 q / 4 kv heads, d 128, MLP 18944, vocab 152064
//   "opt-13b"       40 layers, hidden 5120, 40 q / 40 kv heads (MHA), d 128, MLP 20480 (OPT's
//                   MLP is not gated; modelled as SwiGLU of width 10240, same parameters),
//                   vocab 50272: the PagedAttention paper's model
ModelStack model_preset(const std::string& name);
// The stack of a decode-step decoder (reference/step/decoder_config.h): BF16 weights, separate
// K and V pools, every layer kFull. What the cost model predicts for the GPU executor's runs.
ModelStack model_stack_of(const DecoderConfig& c);
std::vector<std::string> model_preset_names();

// Bytes of one KV block (block_size tokens of every paged layer), split as the ledger
// reports them. Every pool counted (kv_pools: K and V, or one shared latent).
struct BlockBytes {
  int64_t raw_kv = 0;         // data of kFull layers
  int64_t compressed_kv = 0;  // data of kCompressed layers
  int64_t scales = 0;         // per-token / block scales of every paged layer
  int64_t total() const { return raw_kv + compressed_kv + scales; }
};

// KV storage of a stack in one format: what the planner sizes and the ledger counts.
struct KvFootprint {
  int32_t block_size = 0;
  KvFormat format = KvFormat::kBF16;
  BlockBytes block;               // per block
  int64_t per_request_bytes = 0;  // sliding-window rings (data + scales), not paged
  double bytes_per_token() const { return static_cast<double>(block.total()) / block_size; }
};

// InvalidArgument when the geometry cannot be laid out (head_dim vs split/scale groups) or
// a compressed group's ratio does not divide block_size.
KvFootprint kv_footprint(const ModelStack& m, int32_t block_size, KvFormat format);

// Bytes of K+V (data + scales) of `tokens` tokens of one layer in the format, at token
// granularity (what a decode kernel reads); used by the cost model for attention traffic.
// Pool-wide FP32 scales (a few bytes per layer) are not counted.
int64_t kv_layer_bytes(const ModelStack& m, KvFormat format, int64_t tokens);

}  // namespace kvlab::sim
