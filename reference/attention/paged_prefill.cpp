// paged_prefill.cpp: reference paged (chunked) prefill attention. See attention.h.
//
// Per sequence: the dequantized K and V of tokens 0 .. seq_len - 1 are gathered through
// kv_access.h (the canonical dequantization) into float arrays [seq_len, num_kv_heads,
// head_dim], the chunk's query rows into [q_len, num_qo_heads, head_dim], and the contiguous
// reference prefill_attention_exact (causal: row i sees keys 0 .. seq_len - q_len + i) does
// the math in float64. Outputs are rounded once (round_to_dtype). Float arrays lose nothing:
// every stored KV format and every bf16/f16 Q decodes to a float exactly.
#include <cmath>
#include <vector>

#include "reference/attention/attention.h"
#include "reference/attention/kv_access.h"
#include "reference/core/error.h"
#include "reference/formats/formats.h"

namespace kvlab::ref {
namespace {

DecodeArgs as_decode_args(const PagedPrefillArgs& a) {
  DecodeArgs d;
  d.q_dtype = a.q_dtype;
  d.q = a.q;
  d.o = a.o;
  d.kv = a.kv;
  d.block_table = a.block_table;
  d.seq_lens = a.seq_lens;
  d.num_seqs = a.num_seqs;
  d.num_qo_heads = a.num_qo_heads;
  d.max_blocks_per_seq = a.max_blocks_per_seq;
  d.max_seq_len = a.max_seq_len;
  d.sm_scale = a.sm_scale;
  return d;
}

void validate_prefill_paged(const PagedPrefillArgs& a, bool check_outputs) {
  const char* w = "paged_prefill_attention: ";
  KVLAB_REQUIRE(a.max_q_len >= 0,
                w << "max_q_len must be >= 0 (0 = the table's bound), got " << a.max_q_len);
  if (a.num_seqs > 0) {
    KVLAB_REQUIRE(a.q_start != nullptr, w << "null q_start for " << a.num_seqs << " sequences");
    KVLAB_REQUIRE(a.seq_lens != nullptr, w << "null seq_lens for " << a.num_seqs << " sequences");
  }
  // The cache, heads, scales, table and seq_lens follow the decode rules.
  DecodeArgs d = as_decode_args(a);
  if (!check_outputs && d.o == nullptr) d.o = const_cast<void*>(a.q);
  // An empty total (every q_len 0) needs no q/o: the decode check must not ask for them.
  const int64_t total = a.num_seqs > 0 ? a.q_start[a.num_seqs] : 0;
  if (total == 0 && a.num_seqs > 0) {
    static const uint16_t kDummy = 0;
    if (d.q == nullptr) d.q = &kDummy;
    if (d.o == nullptr) d.o = const_cast<uint16_t*>(&kDummy);
  }
  try {
    validate_decode_args(d);
  } catch (const InvalidArgument& e) {
    std::string m = e.what();
    const std::string from = "decode_attention: ";
    if (m.rfind(from, 0) == 0) m = m.substr(from.size());
    throw InvalidArgument(w + m);
  }
  if (a.num_seqs == 0) return;
  KVLAB_REQUIRE(a.q_start[0] == 0, w << "q_start[0] must be 0, got " << a.q_start[0]);
  const int64_t qbound = a.q_len_bound();
  for (int32_t s = 0; s < a.num_seqs; ++s) {
    const int64_t q_len = static_cast<int64_t>(a.q_start[s + 1]) - a.q_start[s];
    KVLAB_REQUIRE(q_len >= 0, w << "q_start must be non-decreasing: q_start[" << s + 1
                                << "] = " << a.q_start[s + 1] << " < q_start[" << s
                                << "] = " << a.q_start[s]);
    KVLAB_REQUIRE(q_len <= qbound, w << "sequence " << s << " has " << q_len
                                     << " query rows, above max_q_len bound " << qbound);
    KVLAB_REQUIRE(q_len <= a.seq_lens[s],
                  w << "sequence " << s << " has " << q_len << " query rows but seq_lens[" << s
                    << "] = " << a.seq_lens[s]
                    << ": the chunk's own K/V must already be in the cache");
  }
}

double load_q(const PagedPrefillArgs& a, int64_t idx) {
  const uint16_t c = static_cast<const uint16_t*>(a.q)[idx];
  return a.q_dtype == DType::kBF16 ? bf16_bits_to_float(c) : fp16_bits_to_float(c);
}

}  // namespace

void validate_paged_prefill_args(const PagedPrefillArgs& a) {
  validate_prefill_paged(a, true);
}

void paged_prefill_attention(const PagedPrefillArgs& a) {
  validate_prefill_paged(a, true);
  if (a.num_seqs == 0) return;
  const PageGeometry& g = a.kv.geom;
  const int Hq = a.num_qo_heads, Hk = g.num_kv_heads, D = g.head_dim, B = g.block_size;
  std::vector<float> q, k, v;
  std::vector<double> o, lse;
  for (int32_t s = 0; s < a.num_seqs; ++s) {
    const int64_t r0 = a.q_start[s];
    const int32_t nq = a.q_start[s + 1] - a.q_start[s];
    const int32_t nk = a.seq_lens[s];
    if (nq == 0) continue;
    q.resize(static_cast<size_t>(nq) * Hq * D);
    for (int64_t i = 0; i < static_cast<int64_t>(q.size()); ++i)
      q[static_cast<size_t>(i)] = static_cast<float>(load_q(a, r0 * Hq * D + i));
    k.resize(static_cast<size_t>(nk) * Hk * D);
    v.resize(k.size());
    const int32_t* row = a.block_table + static_cast<int64_t>(s) * a.max_blocks_per_seq;
    for (int32_t t = 0; t < nk; ++t) {
      const int64_t blk = row[page_of_token(t, B)];
      const int slot = t % B;
      for (int h = 0; h < Hk; ++h)
        for (int d = 0; d < D; ++d) {
          const size_t i = (static_cast<size_t>(t) * Hk + h) * D + d;
          k[i] = load_k(a.kv, blk, h, slot, d);
          v[i] = load_v(a.kv, blk, h, slot, d);
        }
    }
    PrefillArgs p;
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.num_q = nq;
    p.num_kv = nk;
    p.num_qo_heads = Hq;
    p.num_kv_heads = Hk;
    p.head_dim = D;
    p.sm_scale = a.sm_scale;
    p.causal = true;
    o.assign(q.size(), 0.0);
    lse.assign(static_cast<size_t>(nq) * Hq, 0.0);
    prefill_attention_exact(p, o.data(), lse.data());
    uint16_t* out = static_cast<uint16_t*>(a.o) + r0 * Hq * D;
    for (size_t i = 0; i < o.size(); ++i) out[i] = round_to_16bit_code(o[i], a.q_dtype);
    if (a.lse)
      for (size_t i = 0; i < lse.size(); ++i)
        a.lse[r0 * Hq + static_cast<int64_t>(i)] = static_cast<float>(lse[i]);
  }
}

}  // namespace kvlab::ref
