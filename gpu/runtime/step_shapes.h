// step_shapes.h: the host-side shapes of the decode-step executor (CUDA-free, header-only).
//
// Everything here is plain host code that the GPU executor (decode_step_executor.cu,
// serving_executor.cu) uses and that a CPU test can run without a device: the executor's
// options, the KV cache geometry and block-table width they imply, the serving step's int32
// arena (layout and packing of a sim::StepBatch) and the decode / paged-prefill attention
// arguments the serving step builds over that arena. The GPU path and the CPU test build the
// arguments with the same functions, so the reference's argument validation
// (ref::validate_decode_args, ref::validate_paged_prefill_args: the same rules as the GPU
// registries' host validation) checks on the CPU what the GPU entry points will be given.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "reference/attention/args.h"
#include "reference/core/error.h"
#include "reference/layout/kv_layout.h"
#include "reference/step/decode_step.h"
#include "reference/step/decoder_config.h"
#include "sim/cost/serving_step_model.h"
#include "sim/serve/step_batch.h"

namespace kvlab::gpu {

struct ExecutorOptions {
  KvFormat kv_format = KvFormat::kBF16;
  KvLayout kv_layout = KvLayout::kNHD;
  int block_size = 16;
  int max_batch = 1;
  int max_context = 128;  // tokens per sequence, history and generated together
  // Decode-attention registry id; -1: `auto`, the version and split picked per batch size
  // from the measured calibration table (gpu/attention/decode_auto.h).
  int attn_version = -1;
  std::vector<int> graph_buckets;  // empty: 1, 2, 4, ... and max_batch
  float k_scale = 1.0f;            // pool scales of kFP8E4M3 / kFP8E5M2 / kNVFP4 caches
  float v_scale = 1.0f;
  // Per-layer pool scales (empty: k_scale / v_scale for every layer; else one per layer), e.g.
  // calibrated from a real model's K/V amax.
  std::vector<float> layer_k_scales, layer_v_scales;
  // Serving: > 0 makes the cache ONE pool of pool_blocks blocks whose block tables the caller
  // gives with every step (serving_step: the tables sim::Engine's allocator hands out), with
  // max_batch token rows per step and ceil(max_context / block_size) table columns. 0: every
  // sequence reserves ceil(max_context / block_size) blocks at start() (the decode benches).
  int pool_blocks = 0;
};

// Block-table columns: a sequence holds up to max_context tokens, in pool mode too (the pool's
// size and the rows per step say nothing about one sequence's length).
inline int table_columns(const ExecutorOptions& o) {
  return static_cast<int>((int64_t{o.max_context} + o.block_size - 1) / o.block_size);
}

// The KV cache of one layer: pool_blocks blocks (serving) or table_columns blocks per row.
inline PageGeometry cache_geometry(const DecoderConfig& c, const ExecutorOptions& o) {
  PageGeometry g;
  g.layout = o.kv_layout;
  g.format = o.kv_format;
  g.num_kv_heads = c.kv_heads;
  g.head_dim = c.head_dim;
  g.block_size = o.block_size;
  g.num_blocks =
      o.pool_blocks > 0 ? int64_t{o.pool_blocks} : int64_t{table_columns(o)} * o.max_batch;
  return g;
}

// The decode attention over `num_seqs` rows of a step (shape fields from the executor's
// options; the pointers are the caller's: device buffers on the GPU, host ones in a test).
inline DecodeArgs step_decode_args(const DecoderConfig& c, const ExecutorOptions& o,
                                   const KvCacheView& view, void* q, void* out,
                                   const int32_t* block_table, const int32_t* seq_lens,
                                   int num_seqs) {
  DecodeArgs a;
  a.q_dtype = DType::kBF16;
  a.q = q;
  a.o = out;
  a.lse = nullptr;
  a.kv = view;
  a.block_table = block_table;
  a.seq_lens = seq_lens;
  a.num_seqs = num_seqs;
  a.num_qo_heads = c.q_heads;
  a.max_blocks_per_seq = table_columns(o);
  a.max_seq_len = o.max_context;
  a.sm_scale = kvlab::ref::step_sm_scale(c);
  return a;
}

// The CUDA-graph bucket of a batch of `batch` rows: the smallest of o.graph_buckets holding it,
// or (no buckets given) the next power of two, capped at max_batch.
inline int graph_bucket(const ExecutorOptions& o, int batch) {
  KVLAB_REQUIRE(batch >= 1 && batch <= o.max_batch,
                "batch " << batch << " outside [1, max_batch " << o.max_batch << "]");
  if (!o.graph_buckets.empty()) {
    int best = -1;
    for (int b : o.graph_buckets)
      if (b >= batch && (best < 0 || b < best)) best = b;
    KVLAB_REQUIRE(best > 0, "batch " << batch << " is above every graph bucket");
    return best;
  }
  int b = 1;
  while (b < batch) b *= 2;
  return std::min(b, o.max_batch);
}

// ---------------------------------------------------------------------------- serving step
// The options of the GPU serving executor (serving_executor.h) and the executor options they
// make: one shared pool, max(max_rows, max_seqs) token rows, graph buckets up to max_seqs.
struct ServingExecutorOptions {
  int block_size = 16;
  int pool_blocks = 0;    // the engine's num_blocks (>= 1)
  int max_rows = 512;     // token rows per step at most (the engine's max_num_batched_tokens)
  int max_seqs = 64;      // sequences per step at most (the engine's max_num_seqs)
  int max_context = 0;    // tokens per sequence at most (prompt + output)
  bool graph = true;      // decode-only steps as CUDA graphs (buckets: default_graph_buckets)
  int attn_version = -1;  // decode-attention registry id (-1: auto, picked per batch size)
};

inline ExecutorOptions executor_options(const ServingExecutorOptions& s) {
  KVLAB_REQUIRE(s.pool_blocks >= 1,
                "serving executor: pool_blocks " << s.pool_blocks << " must be >= 1");
  KVLAB_REQUIRE(s.max_rows >= 1 && s.max_seqs >= 1 && s.max_context >= 1,
                "serving executor: max_rows " << s.max_rows << ", max_seqs " << s.max_seqs
                                              << ", max_context " << s.max_context
                                              << " must be >= 1");
  ExecutorOptions o;
  o.kv_format = KvFormat::kBF16;
  o.kv_layout = KvLayout::kNHD;
  o.block_size = s.block_size;
  o.max_batch = std::max(s.max_rows, s.max_seqs);
  o.max_context = s.max_context;
  o.attn_version = s.attn_version;
  o.pool_blocks = s.pool_blocks;
  if (s.graph)
    for (int32_t b : sim::default_graph_buckets(s.max_seqs)) o.graph_buckets.push_back(b);
  return o;
}

// A serving step's host inputs live in one int32 arena; its layout depends only on (rows,
// decode rows, prefill sequences, sampled rows, table columns), so a CUDA graph captured for a
// bucket (all rows decode, no gather) finds its inputs at the same addresses at every replay.
struct ServingLayout {
  int64_t tokens = 0, positions = 0, seq_lens = 0, table = 0, pf_q_start = 0, pf_seq_lens = 0,
          pf_table = 0, sample_rows = 0, slots = 0, total = 0;
};

inline ServingLayout serving_layout(int64_t rows, int64_t dec_rows, int64_t np, int64_t sampled,
                                    int64_t bps) {
  ServingLayout L;
  int64_t off = 0;
  auto take = [&](int64_t n) {
    const int64_t at = off;
    off += n;
    return at;
  };
  L.tokens = take(rows);
  L.positions = take(rows);
  L.seq_lens = take(dec_rows);
  L.table = take(dec_rows * bps);
  L.pf_q_start = take(np > 0 ? np + 1 : 0);
  L.pf_seq_lens = take(np);
  L.pf_table = take(np * bps);
  L.sample_rows = take(sampled);
  off = (off + 3) / 4 * 4;  // 16-byte aligned int64 slots
  L.slots = take(2 * rows);
  L.total = off;
  return L;
}

// What one serving step runs (host-known, fixed for a captured graph).
struct ServingDims {
  bool graph = false;  // a CUDA-graph bucket: every row decode, the LM head over every row
  int rows = 0;        // token rows through every layer
  int nd = 0;          // decode rows [0, nd) (graph: the bucket, padding rows included)
  int np = 0;          // prefill sequences (rows [nd, rows))
  int sampled = 0;     // gathered rows for the LM head (0: the LM head runs over every row)
  int max_q_len = 0;   // longest prefill chunk
  ServingLayout L;
};

// The dims of an eager step (graph == false) or of the graph bucket `bucket` (graph == true).
inline ServingDims serving_step_dims(const sim::StepBatch& b, int bps, bool graph, int bucket) {
  ServingDims d;
  d.graph = graph;
  if (graph) {
    d.rows = d.nd = bucket;
    d.L = serving_layout(d.rows, d.rows, 0, 0, bps);
  } else {
    d.rows = b.num_rows();
    d.nd = b.num_decode;
    d.np = b.num_seqs() - b.num_decode;
    d.sampled = static_cast<int>(b.sample_rows.size());
    d.max_q_len = b.max_q_len;
    d.L = serving_layout(d.rows, d.nd, d.np, d.sampled, bps);
  }
  return d;
}

// Writes the batch into the arena `h` (d.L.total words) in layout d.L (padding rows of a graph
// bucket: token 0, position -1, slot -1, length 0, table row of zeros).
inline void pack_serving(const sim::StepBatch& b, const ServingDims& d, int bps, int32_t* h) {
  const int rows = b.num_rows(), nd = b.num_decode;
  std::fill(h, h + d.L.total, 0);
  for (int i = 0; i < d.rows; ++i) {
    const bool real = i < rows;
    h[d.L.tokens + i] = real ? b.tokens[static_cast<size_t>(i)] : 0;
    h[d.L.positions + i] = real ? b.positions[static_cast<size_t>(i)] : -1;
    const int64_t slot = real ? b.slots[static_cast<size_t>(i)] : -1;
    std::memcpy(h + d.L.slots + 2 * i, &slot, 8);
  }
  for (int s = 0; s < nd; ++s) {
    h[d.L.seq_lens + s] = b.seq_lens[static_cast<size_t>(s)];
    std::copy(b.block_table.begin() + int64_t{s} * bps,
              b.block_table.begin() + int64_t{s + 1} * bps, h + d.L.table + int64_t{s} * bps);
  }
  for (int j = 0; j < d.np; ++j) {
    const int s = nd + j;
    h[d.L.pf_q_start + j] = b.q_start[static_cast<size_t>(s)] - nd;
    h[d.L.pf_seq_lens + j] = b.seq_lens[static_cast<size_t>(s)];
    std::copy(b.block_table.begin() + int64_t{s} * bps,
              b.block_table.begin() + int64_t{s + 1} * bps, h + d.L.pf_table + int64_t{j} * bps);
  }
  if (d.np > 0) h[d.L.pf_q_start + d.np] = rows - nd;
  for (int k = 0; k < d.sampled; ++k)
    h[d.L.sample_rows + k] = b.sample_rows[static_cast<size_t>(k)];
  // Table entries past a sequence's pages are -1 (never read): keep them in range anyway.
  for (int64_t i = d.L.table; i < d.L.table + int64_t{nd} * bps; ++i) h[i] = std::max(h[i], 0);
  for (int64_t i = d.L.pf_table; i < d.L.pf_table + int64_t{d.np} * bps; ++i)
    h[i] = std::max(h[i], 0);
}

// The decode attention of a serving step over the arena `arena` (laid out as d.L): the rows
// [0, d.nd), Q and O at q / out (the step's first rows).
inline DecodeArgs serving_decode_args(const DecoderConfig& c, const ExecutorOptions& o,
                                      const ServingDims& d, const int32_t* arena,
                                      const KvCacheView& view, void* q, void* out) {
  return step_decode_args(c, o, view, q, out, arena + d.L.table, arena + d.L.seq_lens, d.nd);
}

// The paged prefill attention of a serving step over the arena: the chunks of the d.np prefill
// sequences (rows [d.nd, d.rows)); q_all / out_all point at row 0 of the step's Q and O.
inline PagedPrefillArgs serving_prefill_args(const DecoderConfig& c, const ExecutorOptions& o,
                                             const ServingDims& d, const int32_t* arena,
                                             const KvCacheView& view, uint16_t* q_all,
                                             uint16_t* out_all) {
  PagedPrefillArgs p;
  p.q_dtype = DType::kBF16;
  p.q = q_all + int64_t{d.nd} * c.q_dim();
  p.o = out_all + int64_t{d.nd} * c.q_dim();
  p.kv = view;
  p.q_start = arena + d.L.pf_q_start;
  p.seq_lens = arena + d.L.pf_seq_lens;
  p.block_table = arena + d.L.pf_table;
  p.num_seqs = d.np;
  p.num_qo_heads = c.q_heads;
  p.max_blocks_per_seq = table_columns(o);
  p.max_q_len = d.max_q_len;
  p.max_seq_len = o.max_context;
  p.sm_scale = kvlab::ref::step_sm_scale(c);
  return p;
}

}  // namespace kvlab::gpu
