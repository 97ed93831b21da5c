// test_dsv4_common.h: shared helpers of the DSV4 substrate tests (CPU and GPU).
//
// Deterministic inputs: every tensor comes from a named seed (kvlab::test::seed_for) that
// failure messages print. Raw tokens are BF16 (what append_swa takes); projection rows are
// FP32 rounded to BF16 values (what a BF16 model would produce) with gates in a range where
// the softmax is well conditioned.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "reference/dsv4/cache_ops.h"
#include "reference/dsv4/compressor.h"
#include "reference/formats/formats.h"
#include "sim/dsv4/host_backend.h"
#include "sim/dsv4/manager.h"
#include "tests/common/test_env.h"

namespace kvlab::test::dsv4 {

// data/models/<name> of the source tree this binary was built from, or, when that tree is
// not there (a gpu_tests binary carried to the GPU machine), of the working directory.
inline std::string model_path(const char* name) {
  const std::string built = std::string(KVLAB_SOURCE_DIR) + "/data/models/" + name;
  if (std::ifstream(built).good()) return built;
  return std::string("data/models/") + name;
}

// Gaussian floats rounded to BF16 values, scale `std`.
inline std::vector<float> bf16_gaussian(size_t n, uint64_t seed, float std = 1.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (auto& x : v) x = bf16_bits_to_float(float_to_bf16_bits(d(g), Saturation::kSatFinite));
  return v;
}
inline std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = float_to_bf16_bits(v[i], Saturation::kSatFinite);
  return b;
}

// The raw token of (request id, position) of a layer: head_dim BF16 values, deterministic.
inline std::vector<float> raw_token(int64_t request, int64_t pos, int layer, int head_dim) {
  return bf16_gaussian(
      head_dim, seed_for("dsv4.raw_token") ^ (request * 1000003u + pos * 7919u + layer * 31u));
}
// Projection rows (kv, gate) of a token for a compressor of `width` columns.
inline std::vector<float> proj_row(const char* what, int64_t request, int64_t pos, int layer,
                                   int width) {
  return bf16_gaussian(width, seed_for(what) ^ (request * 1000003u + pos * 7919u + layer * 31u),
                       1.0f);
}

// A manager over the host backend.
struct HostCache {
  sim::Dsv4CacheSchema schema;
  sim::Dsv4BlockBudget budget;
  std::unique_ptr<sim::KVCacheManager> mgr;
  sim::Dsv4HostBackend* host = nullptr;
};

inline HostCache make_host_cache(const char* stack, Dsv4Variant variant, int32_t block_tokens,
                                 int32_t slots, int64_t max_ctx, int64_t extra_blocks = 8) {
  // Blocks: every slot at max_ctx, plus extra_blocks (negative: fewer, exhaustion reachable).
  HostCache c;
  sim::Dsv4CacheConfig cfg;
  cfg.block_tokens = block_tokens;
  cfg.variant = variant;
  c.schema = sim::build_dsv4_schema(sim::load_dsv4_model_stack(model_path(stack)), cfg);
  const auto probe = sim::compute_block_budget(c.schema, int64_t{1} << 40, slots, max_ctx);
  const int64_t fixed = probe.state_bytes + probe.block_table_bytes + probe.align_slack_bytes;
  const int64_t blocks = slots * c.schema.blocks_for_tokens(max_ctx) + extra_blocks;
  c.budget = sim::compute_block_budget(c.schema, fixed + blocks * c.schema.bytes_per_block(), slots,
                                       max_ctx);
  auto backend = std::make_unique<sim::Dsv4HostBackend>();
  c.host = backend.get();
  c.mgr = std::make_unique<sim::KVCacheManager>(c.schema, c.budget, std::move(backend));
  return c;
}

// One batch of tokens for one layer (host arrays), built from the deterministic generators.
struct LayerBatch {
  std::vector<int32_t> slots, positions;  // per token
  std::vector<uint16_t> raw;              // [tokens, head_dim] BF16
  // compressor inputs, grouped by request (one contiguous run per request)
  std::vector<int32_t> req_slots, start_pos, token_offsets{0}, entry_offsets, first_entry;
  std::vector<float> kv, gate;    // [tokens, 2*head_dim or head_dim]
  std::vector<float> ikv, igate;  // indexer [tokens, 2*indexer_dim]
  int32_t num_entries = 0;
};

// Tokens [start, start + n) of each (request id, slot) pair; layer kind decides the widths.
inline LayerBatch make_batch(const sim::Dsv4LayerSchema& l, const std::vector<int64_t>& ids,
                             const std::vector<int32_t>& slots, const std::vector<int64_t>& starts,
                             const std::vector<int64_t>& counts) {
  LayerBatch b;
  const int width = l.overlap ? 2 * l.head_dim : l.head_dim;
  for (size_t r = 0; r < ids.size(); ++r) {
    b.req_slots.push_back(slots[r]);
    b.start_pos.push_back(static_cast<int32_t>(starts[r]));
    for (int64_t p = starts[r]; p < starts[r] + counts[r]; ++p) {
      b.slots.push_back(slots[r]);
      b.positions.push_back(static_cast<int32_t>(p));
      const auto t = raw_token(ids[r], p, l.layer, l.head_dim);
      const auto bits = to_bf16_bits(t);
      b.raw.insert(b.raw.end(), bits.begin(), bits.end());
      if (l.has_classical) {
        const auto kv = proj_row("dsv4.kv", ids[r], p, l.layer, width);
        const auto g = proj_row("dsv4.gate", ids[r], p, l.layer, width);
        b.kv.insert(b.kv.end(), kv.begin(), kv.end());
        b.gate.insert(b.gate.end(), g.begin(), g.end());
      }
      if (l.has_indexer) {
        const auto kv = proj_row("dsv4.ikv", ids[r], p, l.layer, 2 * l.indexer_dim);
        const auto g = proj_row("dsv4.igate", ids[r], p, l.layer, 2 * l.indexer_dim);
        b.ikv.insert(b.ikv.end(), kv.begin(), kv.end());
        b.igate.insert(b.igate.end(), g.begin(), g.end());
      }
    }
    b.token_offsets.push_back(static_cast<int32_t>(b.slots.size()));
  }
  if (l.has_classical) {
    b.entry_offsets.resize(ids.size() + 1);
    b.first_entry.resize(ids.size());
    ref::dsv4_plan_entries(b.start_pos.data(), b.token_offsets.data(),
                           static_cast<int32_t>(ids.size()), l.ratio, b.entry_offsets.data(),
                           b.first_entry.data());
    b.num_entries = b.entry_offsets.back();
  }
  return b;
}

inline Dsv4AppendSwaArgs swa_args(const LayerBatch& b) {
  Dsv4AppendSwaArgs a;
  a.raw_kv = b.raw.data();
  a.request_slots = b.slots.data();
  a.positions = b.positions.data();
  a.num_tokens = static_cast<int32_t>(b.slots.size());
  return a;
}
inline Dsv4CompressArgs compress_args(const LayerBatch& b, bool indexer, float* out) {
  Dsv4CompressArgs a;
  a.kv = indexer ? b.ikv.data() : b.kv.data();
  a.gate = indexer ? b.igate.data() : b.gate.data();
  a.request_slots = b.req_slots.data();
  a.start_pos = b.start_pos.data();
  a.token_offsets = b.token_offsets.data();
  a.entry_offsets = b.entry_offsets.data();
  a.num_requests = static_cast<int32_t>(b.req_slots.size());
  a.num_tokens = b.token_offsets.back();
  a.num_entries = b.num_entries;
  a.out = out;
  return a;
}
inline Dsv4StoreArgs store_args(const LayerBatch& b, const float* entries) {
  Dsv4StoreArgs a;
  a.entries = entries;
  a.request_slots = b.req_slots.data();
  a.first_entry = b.first_entry.data();
  a.entry_offsets = b.entry_offsets.data();
  a.num_requests = static_cast<int32_t>(b.req_slots.size());
  a.num_entries = b.num_entries;
  return a;
}

// Reference step of one layer on the host: ring append, then compression and stores.
inline void host_layer_step(const sim::LayerCacheHandle& h, const sim::Dsv4LayerSchema& l,
                            const LayerBatch& b) {
  h.write_swa(swa_args(b));
  if (!l.has_classical) return;
  std::vector<float> out(static_cast<size_t>(b.num_entries) * l.head_dim);
  ref::dsv4_compress(h.stream_view(), compress_args(b, false, out.data()));
  ref::dsv4_store_entries(h.read_classical_view(), h.num_slots(), store_args(b, out.data()));
  if (!l.has_indexer) return;
  std::vector<float> keys(static_cast<size_t>(b.num_entries) * l.indexer_dim);
  ref::dsv4_compress(h.indexer_stream_view(), compress_args(b, true, keys.data()));
  ref::dsv4_store_indexer_keys(h.read_indexer_view(), h.num_slots(), store_args(b, keys.data()));
}

}  // namespace kvlab::test::dsv4
