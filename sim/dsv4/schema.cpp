#include "sim/dsv4/schema.h"

#include <cmath>
#include <iomanip>
#include <sstream>

#include "reference/core/error.h"
#include "reference/dsv4/variant_names.h"
#include "reference/dsv4/views.h"

namespace kvlab::sim {

namespace {

int64_t indexer_entry_bytes(Dsv4IndexerFormat f, int32_t dim) {
  const int g = f == Dsv4IndexerFormat::kNvfp4 ? 16 : 32;
  return dim / 2 + dim / g;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

Dsv4CacheSchema build_dsv4_schema(const Dsv4ModelStack& stack, const Dsv4CacheConfig& config) {
  validate(stack);
  validate(config.variant);
  const int32_t bt = config.block_tokens;
  KVLAB_REQUIRE(bt > 0, "block_tokens (BLOCK_SIZE_ORIGINAL_TOKENS) must be positive, got " << bt);
  for (auto kind : {Dsv4LayerKind::kCSA, Dsv4LayerKind::kHCA}) {
    if (stack.count(kind) == 0) continue;
    const int32_t r = stack.ratio(kind);
    KVLAB_REQUIRE(bt % r == 0,
                  "ratio mismatch: block_tokens "
                      << bt << " is not a multiple of the " << to_string(kind)
                      << " compression ratio " << r << " of model stack '" << stack.name
                      << "' (use a multiple of the lcm of the ratios, e.g. 128 or 256)");
  }
  if (stack.count(Dsv4LayerKind::kCSA) > 0 &&
      config.variant.indexer == Dsv4IndexerFormat::kMxfp4Hadamard)
    KVLAB_REQUIRE(stack.indexer_dim % 128 == 0,
                  "the mxfp4_hadamard indexer rotates 128-wide blocks: indexer_dim must be a "
                  "multiple of 128, got "
                      << stack.indexer_dim);
  KVLAB_REQUIRE(
      std::isfinite(config.indexer_tensor_scale) && config.indexer_tensor_scale > 0,
      "indexer_tensor_scale must be finite and positive, got " << config.indexer_tensor_scale);

  Dsv4CacheSchema s;
  s.stack = stack;
  s.config = config;
  const int64_t entry = dsv4_entry_bytes(config.variant.entry, stack.nope_dim, stack.rope_dim);
  for (int32_t i = 0; i < stack.num_layers(); ++i) {
    Dsv4LayerSchema l;
    l.layer = i;
    l.kind = stack.layers[i];
    l.ratio = stack.ratio(l.kind);
    l.window = stack.window;
    l.nope_dim = stack.nope_dim;
    l.rope_dim = stack.rope_dim;
    l.head_dim = stack.head_dim();
    l.entry_bytes = entry;
    l.swa_bytes_per_slot = static_cast<int64_t>(l.window) * (entry + 4) + 4;
    if (l.kind != Dsv4LayerKind::kSWA) {
      l.has_classical = true;
      l.entries_per_block = bt / l.ratio;
      l.classical_bytes_per_block = l.entries_per_block * entry;
      l.overlap = l.kind == Dsv4LayerKind::kCSA;
      l.tail_tokens = l.ratio - 1;
      l.state_rows = (l.overlap ? 2 : 1) * l.ratio;
      // FP32 k and z rows: lane a (2 halves when overlapping) + lane b (overlap only).
      const int64_t rows = l.overlap ? 3 * l.ratio : l.ratio;
      l.stream_bytes_per_slot = 2 * 4 * rows * l.head_dim;
    }
    if (l.kind == Dsv4LayerKind::kCSA) {
      l.has_indexer = true;
      l.indexer_dim = stack.indexer_dim;
      l.indexer_entries_per_block = l.entries_per_block;
      l.indexer_entry_bytes = indexer_entry_bytes(config.variant.indexer, l.indexer_dim);
      l.indexer_bytes_per_block = l.indexer_entries_per_block * l.indexer_entry_bytes;
      l.stream_bytes_per_slot += 2 * 4 * 3 * static_cast<int64_t>(l.ratio) * l.indexer_dim;
    }
    s.layers.push_back(l);
  }
  return s;
}

const Dsv4LayerSchema& Dsv4CacheSchema::layer(int32_t i) const {
  KVLAB_REQUIRE(i >= 0 && i < num_layers(),
                "layer " << i << " out of range [0, " << num_layers() << ")");
  return layers[i];
}

bool Dsv4CacheSchema::has_paged_layers() const {
  for (const auto& l : layers)
    if (l.has_classical) return true;
  return false;
}

int64_t Dsv4CacheSchema::bytes_per_block() const {
  int64_t b = 0;
  for (const auto& l : layers) b += l.bytes_per_block();
  return b;
}

int64_t Dsv4CacheSchema::state_bytes_per_slot() const {
  int64_t b = 0;
  for (const auto& l : layers) b += l.state_bytes_per_slot();
  return b;
}

int64_t Dsv4CacheSchema::entries_for_tokens(int32_t i, int64_t tokens) const {
  const auto& l = layer(i);
  KVLAB_REQUIRE(tokens >= 0, "token count must be >= 0, got " << tokens);
  return l.ratio == 0 ? 0 : tokens / l.ratio;
}

int64_t Dsv4CacheSchema::blocks_for_tokens(int64_t tokens) const {
  KVLAB_REQUIRE(tokens >= 0, "token count must be >= 0, got " << tokens);
  int64_t blocks = 0;
  for (const auto& l : layers) {
    if (!l.has_classical) continue;
    const int64_t b = ceil_div(tokens / l.ratio, l.entries_per_block);
    if (b > blocks) blocks = b;
  }
  return blocks;
}

Dsv4BlockBudget compute_block_budget(const Dsv4CacheSchema& schema, int64_t memory_bytes,
                                     int32_t max_requests, int64_t max_context_tokens) {
  KVLAB_REQUIRE(max_requests >= 1, "max_requests must be >= 1, got " << max_requests);
  KVLAB_REQUIRE(max_context_tokens >= 1,
                "max_context_tokens must be >= 1, got " << max_context_tokens);
  KVLAB_REQUIRE(memory_bytes >= 0, "memory budget must be >= 0 bytes, got " << memory_bytes);
  Dsv4BlockBudget b;
  b.memory_bytes = memory_bytes;
  b.max_requests = max_requests;
  b.max_context_tokens = max_context_tokens;
  b.bytes_per_block = schema.bytes_per_block();
  const int64_t need_blocks = schema.blocks_for_tokens(max_context_tokens);
  KVLAB_REQUIRE(need_blocks < (int64_t{1} << 31),
                "max_context_tokens " << max_context_tokens << " needs " << need_blocks
                                      << " blocks per request, above the int32 block-table range");
  b.max_blocks_per_request = static_cast<int32_t>(need_blocks);
  b.block_table_bytes = 4 * static_cast<int64_t>(max_requests) * b.max_blocks_per_request;
  b.state_bytes = static_cast<int64_t>(max_requests) * schema.state_bytes_per_slot();
  b.align_slack_bytes = kDsv4ArenaAlign * (1 + kDsv4ArenaBuffersPerLayer * schema.num_layers());
  const int64_t fixed = b.state_bytes + b.block_table_bytes + b.align_slack_bytes;
  const int64_t one_request = fixed + need_blocks * b.bytes_per_block;
  KVLAB_REQUIRE(memory_bytes >= one_request,
                "memory budget of "
                    << memory_bytes << " bytes is too small for one request: " << max_requests
                    << " request slot(s) of state (" << b.state_bytes << " bytes) + block table ("
                    << b.block_table_bytes << " bytes) + alignment (" << b.align_slack_bytes
                    << " bytes) + " << need_blocks << " block(s) of " << b.bytes_per_block
                    << " bytes for a context of " << max_context_tokens << " tokens need "
                    << one_request << " bytes");
  b.num_blocks = b.bytes_per_block == 0 ? 0 : (memory_bytes - fixed) / b.bytes_per_block;
  KVLAB_REQUIRE(b.num_blocks < (int64_t{1} << 31),
                "the budget holds " << b.num_blocks << " blocks, above the int32 block-id range");
  b.pool_bytes = b.num_blocks * b.bytes_per_block;
  return b;
}

Dsv4BytesPerToken bytes_per_token(const Dsv4CacheSchema& schema, int64_t context_tokens) {
  KVLAB_REQUIRE(context_tokens >= 1, "context_tokens must be >= 1, got " << context_tokens);
  Dsv4BytesPerToken r;
  r.context_tokens = context_tokens;
  r.blocks = schema.blocks_for_tokens(context_tokens);
  for (const auto& l : schema.layers) {
    r.ring_bytes += l.swa_bytes_per_slot;
    r.stream_bytes += l.stream_bytes_per_slot;
    r.classical_bytes += r.blocks * l.classical_bytes_per_block;
    r.indexer_bytes += r.blocks * l.indexer_bytes_per_block;
  }
  r.paged_bytes = r.blocks * schema.bytes_per_block();
  r.per_token = static_cast<double>(r.paged_bytes + r.ring_bytes + r.stream_bytes) / context_tokens;
  r.bf16_dense_per_token = 2.0 * schema.num_layers() * schema.stack.head_dim();
  return r;
}

std::string describe(const Dsv4CacheSchema& s) {
  std::ostringstream o;
  o << "DSV4 cache schema: stack '" << s.stack.name << "' (" << s.num_layers()
    << " layers: " << s.stack.count(Dsv4LayerKind::kSWA) << " swa, "
    << s.stack.count(Dsv4LayerKind::kCSA) << " csa, " << s.stack.count(Dsv4LayerKind::kHCA)
    << " hca), variant " << to_string(s.config.variant) << ", block_tokens " << s.block_tokens()
    << "\n";
  for (auto kind : {Dsv4LayerKind::kSWA, Dsv4LayerKind::kCSA, Dsv4LayerKind::kHCA}) {
    for (const auto& l : s.layers) {
      if (l.kind != kind) continue;
      o << "  " << to_string(kind) << ": ratio " << l.ratio << ", entry " << l.entry_bytes << " B, "
        << l.entries_per_block << " entries/block, " << l.indexer_entries_per_block
        << " indexer entries/block (" << l.indexer_entry_bytes << " B), tail " << l.tail_tokens
        << ", state rows " << l.state_rows << ", block " << l.bytes_per_block() << " B, state/slot "
        << l.state_bytes_per_slot() << " B\n";
      break;
    }
  }
  o << "  total: " << s.bytes_per_block() << " B per block, " << s.state_bytes_per_slot()
    << " B state per slot\n";
  return o.str();
}

}  // namespace kvlab::sim
