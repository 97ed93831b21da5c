#include "reference/dsv4/cache_ops.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "reference/attention/attention.h"
#include "reference/core/dtype.h"
#include "reference/core/error.h"
#include "reference/dsv4/entry_quant.h"

namespace kvlab::ref {

namespace {

void check_pages(const Dsv4EntryPages& p, const char* what) {
  KVLAB_REQUIRE(p.rows >= 1 && p.num_pages >= 0 && p.nope_dim > 0 && p.nope_dim % kDsMlaTile == 0 &&
                    p.rope_dim >= 0 && p.rope_dim % 2 == 0,
                what << ": bad shape (rows " << p.rows << ", pages " << p.num_pages << ", nope_dim "
                     << p.nope_dim << " (multiple of 64), rope_dim " << p.rope_dim << " (even))");
  KVLAB_REQUIRE(p.data, what << ": null data");
  if (p.format == Dsv4EntryFormat::kFp8PerToken)
    KVLAB_REQUIRE(p.inv_scale && (p.rope || p.rope_dim == 0),
                  what << ": null rope / inv_scale arrays");
}

}  // namespace

void dsv4_append_swa(const Dsv4SwaView& v, const Dsv4AppendSwaArgs& a) {
  check_pages(v.ring, "SWA ring");
  KVLAB_REQUIRE(v.pos && v.head, "SWA ring: null pos / head");
  KVLAB_REQUIRE(a.num_tokens >= 0, "append_swa: num_tokens must be >= 0, got " << a.num_tokens);
  if (a.num_tokens == 0) return;
  KVLAB_REQUIRE(a.raw_kv && a.request_slots && a.positions, "append_swa: null input pointer");
  const int32_t W = v.window();
  std::map<int32_t, std::set<int64_t>> per_slot;  // slot -> rows (pos mode) or positions (atomic)
  for (int32_t i = 0; i < a.num_tokens; ++i) {
    const int32_t s = a.request_slots[i], p = a.positions[i];
    KVLAB_REQUIRE(s >= 0 && s < v.num_slots(), "append_swa: token " << i << " has slot " << s
                                                                    << " outside [0, "
                                                                    << v.num_slots() << ")");
    KVLAB_REQUIRE(p >= 0, "append_swa: token " << i << " has negative position " << p);
    auto& seen = per_slot[s];
    const int64_t key = v.mode == Dsv4RingMode::kPosModWindow ? p % W : p;
    KVLAB_REQUIRE(!seen.count(key),
                  "append_swa: token "
                      << i << " (slot " << s << ", position " << p << ") "
                      << (v.mode == Dsv4RingMode::kPosModWindow ? "shares a ring row with"
                                                                : "repeats the position of")
                      << " an earlier token of the same call");
    seen.insert(key);
    KVLAB_REQUIRE(
        static_cast<int32_t>(seen.size()) <= W,
        "append_swa: slot " << s << " receives more than window=" << W << " tokens in one call");
  }
  const int D = v.ring.head_dim();
  std::vector<float> x(D);
  for (int32_t i = 0; i < a.num_tokens; ++i) {
    const int32_t s = a.request_slots[i], p = a.positions[i];
    int row;
    if (v.mode == Dsv4RingMode::kAtomicHead) {
      row = v.head[s] % W;
      v.head[s] += 1;
    } else {
      row = p % W;
      if (v.head[s] < p + 1) v.head[s] = p + 1;
    }
    v.pos_row(s)[row] = p;
    for (int d = 0; d < D; ++d)
      x[d] = bf16_bits_to_float(a.raw_kv[static_cast<int64_t>(i) * D + d]);
    dsv4_store_entry(v.ring, s, row, x.data());
  }
}

namespace {

// Validates the block lookups of a store call; returns nothing, throws on the first bad one.
template <class View>
void check_store(const View& v, int32_t rows, int64_t num_blocks, int64_t num_slots,
                 const Dsv4StoreArgs& a, const char* what) {
  KVLAB_REQUIRE(a.num_requests >= 0 && a.num_entries >= 0, what << ": negative counts");
  if (a.num_entries == 0) return;
  KVLAB_REQUIRE(a.entries && a.request_slots && a.first_entry && a.entry_offsets && v.block_table,
                what << ": null pointer");
  KVLAB_REQUIRE(a.entry_offsets[0] == 0 && a.entry_offsets[a.num_requests] == a.num_entries,
                what << ": entry_offsets must run from 0 to num_entries=" << a.num_entries);
  for (int32_t r = 0; r < a.num_requests; ++r) {
    const int32_t s = a.request_slots[r];
    KVLAB_REQUIRE(s >= 0 && s < num_slots, what << ": request " << r << " slot " << s
                                                << " outside [0, " << num_slots << ")");
    KVLAB_REQUIRE(a.first_entry[r] >= 0,
                  what << ": request " << r << " first entry " << a.first_entry[r] << " < 0");
    KVLAB_REQUIRE(a.entry_offsets[r + 1] >= a.entry_offsets[r],
                  what << ": entry_offsets decrease at " << r);
    for (int32_t k = a.entry_offsets[r]; k < a.entry_offsets[r + 1]; ++k) {
      const int64_t e = a.first_entry[r] + (k - a.entry_offsets[r]);
      KVLAB_REQUIRE(e / rows < v.max_blocks_per_request,
                    what << ": entry " << e << " of slot " << s << " needs block-table index "
                         << e / rows << " >= max_blocks_per_request " << v.max_blocks_per_request);
      const int32_t b =
          v.block_table[s * static_cast<int64_t>(v.max_blocks_per_request) + e / rows];
      KVLAB_REQUIRE(b >= 0 && b < num_blocks, what << ": entry " << e << " of slot " << s
                                                   << " maps to block " << b << " outside [0, "
                                                   << num_blocks
                                                   << ") (allocate the block before the flush)");
    }
  }
}

}  // namespace

void dsv4_store_entries(const Dsv4ClassicalView& v, int64_t num_slots, const Dsv4StoreArgs& a) {
  check_pages(v.pool, "classical pool");
  check_store(v, v.pool.rows, v.pool.num_pages, num_slots, a, "store_entries");
  if (a.num_entries == 0) return;
  const int D = v.pool.head_dim();
  for (int32_t r = 0; r < a.num_requests; ++r)
    for (int32_t k = a.entry_offsets[r]; k < a.entry_offsets[r + 1]; ++k) {
      const int64_t e = a.first_entry[r] + (k - a.entry_offsets[r]);
      dsv4_store_entry(v.pool, v.block_of(a.request_slots[r], e), static_cast<int>(e % v.pool.rows),
                       a.entries + static_cast<int64_t>(k) * D);
    }
}

void dsv4_store_indexer_keys(const Dsv4IndexerView& v, int64_t num_slots, const Dsv4StoreArgs& a) {
  KVLAB_REQUIRE(
      v.codes && v.scales && v.rows >= 1 && v.dim > 0 && v.dim % v.group() == 0,
      "indexer keys: null buffers or bad shape (dim " << v.dim << ", group " << v.group() << ")");
  if (v.format == Dsv4IndexerFormat::kMxfp4Hadamard)
    KVLAB_REQUIRE(v.dim % kDsv4HadamardSize == 0,
                  "mxfp4_hadamard keys need dim % 128 == 0, got " << v.dim);
  check_store(v, v.rows, v.num_blocks, num_slots, a, "store_indexer_keys");
  if (a.num_entries == 0) return;
  std::vector<float> x(v.dim);
  for (int32_t r = 0; r < a.num_requests; ++r)
    for (int32_t k = a.entry_offsets[r]; k < a.entry_offsets[r + 1]; ++k) {
      const int64_t e = a.first_entry[r] + (k - a.entry_offsets[r]);
      const int32_t s = a.request_slots[r];
      const int32_t b =
          v.block_table[s * static_cast<int64_t>(v.max_blocks_per_request) + e / v.rows];
      for (int d = 0; d < v.dim; ++d) x[d] = a.entries[static_cast<int64_t>(k) * v.dim + d];
      dsv4_store_key(v, b, static_cast<int>(e % v.rows), x.data());
    }
}

void dsv4_load_ring_entry(const Dsv4SwaView& v, int64_t slot, int row, float* out) {
  for (int d = 0; d < v.ring.head_dim(); ++d) out[d] = v.ring.load(slot, row, d);
}

void dsv4_load_compressed_entry(const Dsv4ClassicalView& v, int64_t slot, int64_t e, float* out) {
  const int32_t b = v.block_of(slot, e);
  for (int d = 0; d < v.pool.head_dim(); ++d)
    out[d] = v.pool.load(b, static_cast<int>(e % v.pool.rows), d);
}

void dsv4_decode_attention(const Dsv4SwaView& swa, const Dsv4ClassicalView* cl,
                           const Dsv4DecodeArgs& a) {
  check_pages(swa.ring, "SWA ring");
  KVLAB_REQUIRE(swa.pos, "SWA ring: null pos");
  if (cl) {
    check_pages(cl->pool, "classical pool");
    KVLAB_REQUIRE(cl->ratio >= 1 && cl->block_table,
                  "classical pool: ratio " << cl->ratio << " / null block table");
    KVLAB_REQUIRE(cl->pool.head_dim() == swa.ring.head_dim() && cl->pool.format == swa.ring.format,
                  "classical pool and SWA ring disagree on the entry shape/format");
  }
  KVLAB_REQUIRE(a.num_seqs >= 0 && a.num_heads >= 1,
                "decode: num_seqs " << a.num_seqs << " / num_heads " << a.num_heads);
  if (a.num_seqs == 0) return;
  KVLAB_REQUIRE(a.q && a.o && a.request_slots && a.positions, "decode: null pointer");
  const int D = swa.ring.head_dim(), W = swa.window();
  std::vector<std::vector<float>> keys;
  std::vector<float> k(D);
  for (int32_t s = 0; s < a.num_seqs; ++s) {
    const int32_t slot = a.request_slots[s], t = a.positions[s];
    KVLAB_REQUIRE(
        slot >= 0 && slot < swa.num_slots(),
        "decode: sequence " << s << " slot " << slot << " outside [0, " << swa.num_slots() << ")");
    KVLAB_REQUIRE(t >= 0, "decode: sequence " << s << " position " << t << " < 0");
    keys.clear();
    if (cl) {
      const int64_t n = (static_cast<int64_t>(t) + 1) / cl->ratio;
      for (int64_t e = 0; e < n; ++e) {
        KVLAB_REQUIRE(e / cl->pool.rows < cl->max_blocks_per_request,
                      "decode: sequence " << s << " entry " << e << " beyond the block table");
        const int32_t b = cl->block_of(slot, e);
        KVLAB_REQUIRE(b >= 0 && b < cl->pool.num_pages,
                      "decode: sequence " << s << " entry " << e << " maps to block " << b
                                          << " outside [0, " << cl->pool.num_pages << ")");
        dsv4_load_compressed_entry(*cl, slot, e, k.data());
        keys.push_back(k);
      }
    }
    for (int row = 0; row < W; ++row) {
      const int32_t p = swa.pos_row(slot)[row];
      if (p < 0 || p > t || p <= t - W) continue;
      dsv4_load_ring_entry(swa, slot, row, k.data());
      keys.push_back(k);
    }
    for (int32_t h = 0; h < a.num_heads; ++h) {
      const uint16_t* q = a.q + (static_cast<int64_t>(s) * a.num_heads + h) * D;
      uint16_t* o = a.o + (static_cast<int64_t>(s) * a.num_heads + h) * D;
      std::vector<double> logit(keys.size());
      double m = -std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < keys.size(); ++j) {
        double dot = 0;
        for (int d = 0; d < D; ++d)
          dot += static_cast<double>(bf16_bits_to_float(q[d])) * keys[j][d];
        logit[j] = dot * a.sm_scale;
        m = std::max(m, logit[j]);
      }
      double sum = 0;
      std::vector<double> acc(D, 0.0);
      for (size_t j = 0; j < keys.size(); ++j) {
        const double w = std::exp(logit[j] - m);
        sum += w;
        for (int d = 0; d < D; ++d) acc[d] += w * keys[j][d];
      }
      for (int d = 0; d < D; ++d)
        o[d] = keys.empty() ? 0 : round_to_16bit_code(acc[d] / sum, DType::kBF16);
      if (a.lse)
        a.lse[static_cast<int64_t>(s) * a.num_heads + h] =
            keys.empty() ? -std::numeric_limits<float>::infinity()
                         : static_cast<float>(m + std::log(sum));
    }
  }
}

}  // namespace kvlab::ref
