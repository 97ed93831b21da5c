#include "sim/dsv4/arena.h"

#include "reference/core/error.h"

namespace kvlab::sim {

namespace {

struct Planner {
  int64_t next = 0;
  int64_t take(int64_t bytes) {
    if (bytes <= 0) return -1;
    const int64_t at = next;
    next = (next + bytes + kDsv4ArenaAlign - 1) / kDsv4ArenaAlign * kDsv4ArenaAlign;
    return at;
  }
};

// The entry arrays of `rows_total` entries in `format`: (data, rope, inv) byte sizes.
void entry_arrays(Dsv4EntryFormat f, int64_t entries, int32_t nope, int32_t rope,
                  int32_t rows_per_page, int64_t* data, int64_t* rope_b, int64_t* inv) {
  if (f == Dsv4EntryFormat::kFp8PerToken) {
    *data = entries * nope;
    *rope_b = entries * rope * 2;
    *inv = entries * 4;
  } else {
    Dsv4EntryPages p;
    p.format = f;
    p.nope_dim = nope;
    p.rope_dim = rope;
    p.rows = rows_per_page;
    *data = entries / rows_per_page * p.page_bytes();
    *rope_b = *inv = 0;
  }
}

}  // namespace

Dsv4ArenaLayout plan_dsv4_arena(const Dsv4CacheSchema& schema, const Dsv4BlockBudget& budget) {
  Planner pl;
  Dsv4ArenaLayout out;
  const int64_t S = budget.max_requests, B = budget.num_blocks;
  out.block_table = pl.take(4 * S * budget.max_blocks_per_request);
  for (const auto& l : schema.layers) {
    Dsv4LayerOffsets o;
    const auto f = schema.config.variant.entry;
    int64_t d, r, i;
    entry_arrays(f, S * l.window, l.nope_dim, l.rope_dim, l.window, &d, &r, &i);
    o.ring_data = pl.take(d);
    o.ring_rope = pl.take(r);
    o.ring_inv = pl.take(i);
    o.ring_pos = pl.take(4 * S * l.window);
    o.ring_head = pl.take(4 * S);
    if (l.has_classical) {
      entry_arrays(f, B * l.entries_per_block, l.nope_dim, l.rope_dim, l.entries_per_block, &d, &r,
                   &i);
      o.pool_data = pl.take(d);
      o.pool_rope = pl.take(r);
      o.pool_inv = pl.take(i);
      const int64_t a = 4 * S * (l.overlap ? 2 : 1) * l.ratio * static_cast<int64_t>(l.head_dim);
      const int64_t b = l.overlap ? 4 * S * l.ratio * static_cast<int64_t>(l.head_dim) : 0;
      o.ka = pl.take(a);
      o.za = pl.take(a);
      o.kb = pl.take(b);
      o.zb = pl.take(b);
    }
    if (l.has_indexer) {
      const int g = schema.config.variant.indexer == Dsv4IndexerFormat::kNvfp4 ? 16 : 32;
      const int64_t n = B * l.indexer_entries_per_block;
      o.idx_codes = pl.take(n * l.indexer_dim / 2);
      o.idx_scales = pl.take(n * l.indexer_dim / g);
      const int64_t a = 4 * S * 2 * l.ratio * static_cast<int64_t>(l.indexer_dim);
      const int64_t b = 4 * S * l.ratio * static_cast<int64_t>(l.indexer_dim);
      o.ika = pl.take(a);
      o.iza = pl.take(a);
      o.ikb = pl.take(b);
      o.izb = pl.take(b);
    }
    out.layers.push_back(o);
  }
  out.total_bytes = pl.next;
  return out;
}

std::vector<Dsv4LayerViews> build_dsv4_views(const Dsv4CacheSchema& schema,
                                             const Dsv4BlockBudget& budget,
                                             const Dsv4ArenaLayout& layout, uint8_t* base) {
  KVLAB_REQUIRE(layout.layers.size() == schema.layers.size(),
                "arena layout does not match the schema");
  auto at = [&](int64_t off) -> uint8_t* { return off < 0 ? nullptr : base + off; };
  const int32_t* table = reinterpret_cast<const int32_t*>(at(layout.block_table));
  std::vector<Dsv4LayerViews> views;
  for (size_t i = 0; i < schema.layers.size(); ++i) {
    const auto& l = schema.layers[i];
    const auto& o = layout.layers[i];
    Dsv4LayerViews v;
    v.layer = l.layer;
    v.kind = l.kind;
    v.num_slots = budget.max_requests;
    Dsv4EntryPages ring;
    ring.format = schema.config.variant.entry;
    ring.nope_dim = l.nope_dim;
    ring.rope_dim = l.rope_dim;
    ring.rows = l.window;
    ring.num_pages = budget.max_requests;
    ring.data = at(o.ring_data);
    ring.rope = reinterpret_cast<uint16_t*>(at(o.ring_rope));
    ring.inv_scale = reinterpret_cast<float*>(at(o.ring_inv));
    v.swa.ring = ring;
    v.swa.pos = reinterpret_cast<int32_t*>(at(o.ring_pos));
    v.swa.head = reinterpret_cast<int32_t*>(at(o.ring_head));
    v.swa.mode = schema.config.variant.ring;
    if (l.has_classical) {
      Dsv4EntryPages pool = ring;
      pool.rows = l.entries_per_block;
      pool.num_pages = budget.num_blocks;
      pool.data = at(o.pool_data);
      pool.rope = reinterpret_cast<uint16_t*>(at(o.pool_rope));
      pool.inv_scale = reinterpret_cast<float*>(at(o.pool_inv));
      v.classical.pool = pool;
      v.classical.block_table = table;
      v.classical.max_blocks_per_request = budget.max_blocks_per_request;
      v.classical.ratio = l.ratio;
      v.stream.ratio = l.ratio;
      v.stream.dim = l.head_dim;
      v.stream.overlap = l.overlap;
      v.stream.num_slots = budget.max_requests;
      v.stream.ka = reinterpret_cast<float*>(at(o.ka));
      v.stream.za = reinterpret_cast<float*>(at(o.za));
      v.stream.kb = reinterpret_cast<float*>(at(o.kb));
      v.stream.zb = reinterpret_cast<float*>(at(o.zb));
    }
    if (l.has_indexer) {
      v.indexer.format = schema.config.variant.indexer;
      v.indexer.dim = l.indexer_dim;
      v.indexer.rows = l.indexer_entries_per_block;
      v.indexer.num_blocks = budget.num_blocks;
      v.indexer.codes = at(o.idx_codes);
      v.indexer.scales = at(o.idx_scales);
      v.indexer.tensor_scale = schema.config.indexer_tensor_scale;
      v.indexer.block_table = table;
      v.indexer.max_blocks_per_request = budget.max_blocks_per_request;
      v.indexer.ratio = l.ratio;
      v.indexer_stream.ratio = l.ratio;
      v.indexer_stream.dim = l.indexer_dim;
      v.indexer_stream.overlap = true;
      v.indexer_stream.num_slots = budget.max_requests;
      v.indexer_stream.ka = reinterpret_cast<float*>(at(o.ika));
      v.indexer_stream.za = reinterpret_cast<float*>(at(o.iza));
      v.indexer_stream.kb = reinterpret_cast<float*>(at(o.ikb));
      v.indexer_stream.zb = reinterpret_cast<float*>(at(o.izb));
    }
    views.push_back(v);
  }
  return views;
}

}  // namespace kvlab::sim
