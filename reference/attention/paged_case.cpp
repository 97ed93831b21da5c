// paged_case.cpp: the seeded paged-case builder (see paged_case.h for the recipe).
#include "reference/attention/paged_case.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "reference/attention/attention.h"
#include "reference/attention/parallel.h"
#include "reference/core/error.h"
#include "reference/core/mix64.h"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"
#include "reference/quant/append.h"

namespace kvlab::ref {
namespace {

// ---- counter-based random numbers: value = f(seed, stream, index) ---------------------------
enum Stream : uint64_t { kStreamQ = 1, kStreamK = 2, kStreamV = 3, kStreamPages = 4 };

uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t i) {
  return mix64(mix64(seed ^ (stream * 0xD1B54A32D192ED03ull)) + i);
}
double uniform_open01(uint64_t seed, uint64_t stream, uint64_t i) {  // in (0, 1)
  return (static_cast<double>(random_bits(seed, stream, i) >> 11) + 0.5) * 0x1p-53;
}
double normal(uint64_t seed, uint64_t stream, uint64_t i) {  // Box-Muller, one value per pair
  const double u1 = uniform_open01(seed, stream, 2 * i),
               u2 = uniform_open01(seed, stream, 2 * i + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// NaN codes of a pool element / scale (paged_case.h, step 3).
void poison_pools(PagedCase& c) {
  const PageGeometry& g = c.geom;
  const bool nan = c.spec.poison_unused;
  uint8_t fill8 = 0;
  switch (g.format) {
    case KvFormat::kBF16:
    case KvFormat::kFP16: {
      const uint16_t v = nan ? 0x7FFF : 0;
      for (auto* pool : {&c.k_pool, &c.v_pool})
        for (size_t i = 0; i + 1 < pool->size(); i += 2) std::memcpy(pool->data() + i, &v, 2);
      return;
    }
    case KvFormat::kFP8E4M3:
    case KvFormat::kFP8E4M3PerToken:
      fill8 = nan ? kE4M3NaN : 0;
      break;
    case KvFormat::kFP8E5M2:
      fill8 = nan ? kE5M2NaN : 0;
      break;
    case KvFormat::kNVFP4:
    case KvFormat::kMXFP4:
      fill8 = nan ? 0x77 : 0;
      break;  // +6,+6: FP4 has no NaN
  }
  std::fill(c.k_pool.begin(), c.k_pool.end(), fill8);
  std::fill(c.v_pool.begin(), c.v_pool.end(), fill8);
  if (kv_format_has_token_scales(g.format)) {
    const float v = nan ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
    for (auto* s : {&c.k_scales, &c.v_scales})
      for (size_t i = 0; i + 3 < s->size(); i += 4) std::memcpy(s->data() + i, &v, 4);
  } else if (g.format == KvFormat::kNVFP4) {
    std::fill(c.k_scales.begin(), c.k_scales.end(), nan ? kE4M3NaN : 0);
    std::fill(c.v_scales.begin(), c.v_scales.end(), nan ? kE4M3NaN : 0);
  } else if (g.format == KvFormat::kMXFP4) {
    std::fill(c.k_scales.begin(), c.k_scales.end(), nan ? kUE8M0NaN : 127);
    std::fill(c.v_scales.begin(), c.v_scales.end(), nan ? kUE8M0NaN : 127);
  }
}

// A unit of fill work: whole pages of one sequence, so no two units share a pool byte
// (FP4 split-x V packs consecutive slots of one page into a byte).
struct Chunk {
  int32_t seq;
  int32_t t0, t1;  // tokens [t0, t1)
};

constexpr int kChunkTokens = 512;

}  // namespace

KvCacheView PagedCase::kv_view() {
  KvCacheView v;
  v.geom = geom;
  v.k = k_pool.data();
  v.v = v_pool.data();
  v.k_scales = k_scales.empty() ? nullptr : k_scales.data();
  v.v_scales = v_scales.empty() ? nullptr : v_scales.data();
  v.k_scale = k_scale;
  v.v_scale = v_scale;
  return v;
}

DecodeArgs PagedCase::decode_args(void* o, float* lse) {
  DecodeArgs a;
  a.q_dtype = spec.q_dtype;
  a.q = q.data();
  a.o = o;
  a.lse = lse;
  a.kv = kv_view();
  a.block_table = block_table.data();
  a.seq_lens = seq_lens.data();
  a.num_seqs = num_seqs();
  a.num_qo_heads = spec.num_qo_heads;
  a.max_blocks_per_seq = max_blocks_per_seq;
  a.max_seq_len = max_seq_len;
  a.sm_scale = sm_scale;
  return a;
}

std::string PagedCase::describe() const {
  std::ostringstream os;
  os << "paged case: seed=" << spec.seed << " layout=" << to_string(geom.layout)
     << " format=" << to_string(geom.format) << " q_dtype=" << to_string(spec.q_dtype)
     << " qo_heads=" << spec.num_qo_heads << " kv_heads=" << spec.num_kv_heads
     << " head_dim=" << spec.head_dim << " block_size=" << spec.block_size
     << " num_blocks=" << geom.num_blocks << " table_cols=" << max_blocks_per_seq
     << " sm_scale=" << sm_scale << " k_scale=" << k_scale << " v_scale=" << v_scale << " lens=[";
  for (size_t i = 0; i < seq_lens.size(); ++i) {
    if (i == 8 && seq_lens.size() > 10) {
      os << ", ... (" << seq_lens.size() << " sequences)";
      break;
    }
    os << (i ? ", " : "") << seq_lens[i];
  }
  os << "]";
  return os.str();
}

PagedCase make_paged_case(const PagedCaseSpec& spec) {
  const char* w = "make_paged_case: ";
  KVLAB_REQUIRE(
      spec.q_dtype == DType::kBF16 || spec.q_dtype == DType::kF16,
      w << "q_dtype " << to_string(spec.q_dtype) << " is not allowed (allowed: bf16, f16)");
  KVLAB_REQUIRE(spec.extra_blocks >= 0 && spec.extra_table_columns >= 0,
                w << "extra_blocks and extra_table_columns must be >= 0, got " << spec.extra_blocks
                  << " and " << spec.extra_table_columns);
  KVLAB_REQUIRE(spec.block_size > 0, w << "block_size must be positive, got " << spec.block_size);
  KVLAB_REQUIRE(
      spec.num_kv_heads > 0 && spec.num_qo_heads > 0 && spec.num_qo_heads % spec.num_kv_heads == 0,
      w << "num_qo_heads " << spec.num_qo_heads << " must be a positive multiple of num_kv_heads "
        << spec.num_kv_heads);
  KVLAB_REQUIRE(
      std::isfinite(spec.q_scale) && std::isfinite(spec.q_mean) && std::isfinite(spec.k_mean),
      w << "q_scale, q_mean and k_mean must be finite");
  KVLAB_REQUIRE(
      std::isfinite(spec.sm_scale) && spec.sm_scale >= 0,
      w << "sm_scale must be finite and >= 0 (0: 1/sqrt(head_dim)), got " << spec.sm_scale);
  KVLAB_REQUIRE(std::isfinite(spec.k_scale) && spec.k_scale >= 0 && std::isfinite(spec.v_scale) &&
                    spec.v_scale >= 0,
                w << "k_scale/v_scale must be finite and >= 0 (0: from the data), got "
                  << spec.k_scale << "/" << spec.v_scale);
  PagedCase c;
  c.spec = spec;
  const int32_t S = static_cast<int32_t>(spec.seq_lens.size());
  const int32_t B = spec.block_size, Hk = spec.num_kv_heads, Hq = spec.num_qo_heads,
                D = spec.head_dim;
  c.seq_lens = spec.seq_lens;
  int64_t pages_total = 0;
  int64_t max_pages = 0;
  c.token_offset.assign(static_cast<size_t>(S) + 1, 0);
  for (int32_t s = 0; s < S; ++s) {
    const int32_t len = spec.seq_lens[s];
    KVLAB_REQUIRE(len >= 0, w << "seq_lens[" << s << "] = " << len << " is negative");
    const int64_t pages = (static_cast<int64_t>(len) + B - 1) / B;
    pages_total += pages;
    max_pages = std::max(max_pages, pages);
    c.max_seq_len = std::max(c.max_seq_len, len);
    c.token_offset[s + 1] = c.token_offset[s] + len;
  }
  KVLAB_REQUIRE(pages_total + spec.extra_blocks > 0,
                w << "the pool would have no page: every sequence is empty and extra_blocks is 0");
  KVLAB_REQUIRE(max_pages + spec.extra_table_columns <= std::numeric_limits<int32_t>::max(),
                w << "block table too wide");
  c.geom.layout = spec.layout;
  c.geom.format = spec.format;
  c.geom.num_blocks = pages_total + spec.extra_blocks;
  c.geom.num_kv_heads = Hk;
  c.geom.head_dim = D;
  c.geom.block_size = B;
  validate(c.geom);
  c.max_blocks_per_seq = static_cast<int32_t>(max_pages + spec.extra_table_columns);
  if (c.max_blocks_per_seq == 0)
    c.max_blocks_per_seq = 1;  // a 1-column all-sentinel table for all-empty cases
  c.sm_scale = spec.sm_scale > 0 ? spec.sm_scale
                                 : static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));

  // Pages: a seeded permutation of the pool, handed out in sequence order.
  std::vector<int32_t> perm(static_cast<size_t>(c.geom.num_blocks));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int32_t>(i);
  if (spec.shuffle_pages)
    for (size_t i = perm.size(); i > 1; --i)
      std::swap(perm[i - 1], perm[random_bits(spec.seed, kStreamPages, i) % i]);
  c.block_table.assign(static_cast<size_t>(S) * c.max_blocks_per_seq, kTableSentinel);
  size_t next = 0;
  for (int32_t s = 0; s < S; ++s) {
    const int64_t pages = (static_cast<int64_t>(spec.seq_lens[s]) + B - 1) / B;
    for (int64_t p = 0; p < pages; ++p)
      c.block_table[static_cast<size_t>(s) * c.max_blocks_per_seq + p] = perm[next++];
  }
  c.unused_pages.assign(perm.begin() + static_cast<std::ptrdiff_t>(next), perm.end());
  std::sort(c.unused_pages.begin(), c.unused_pages.end());

  // Q.
  c.q.resize(static_cast<size_t>(S) * Hq * D);
  for (size_t i = 0; i < c.q.size(); ++i) {
    const double x = spec.q_scale * (spec.q_mean + normal(spec.seed, kStreamQ, i));
    c.q[i] = round_to_16bit_code(x, spec.q_dtype);
    KVLAB_REQUIRE(std::isfinite(to_float(&c.q[i], spec.q_dtype, 1)[0]),
                  w << "q_scale " << spec.q_scale << " overflows " << to_string(spec.q_dtype));
  }

  // Pools, poisoned.
  c.k_pool.resize(static_cast<size_t>(c.geom.bytes()));
  c.v_pool.resize(static_cast<size_t>(c.geom.bytes()));
  c.k_scales.resize(static_cast<size_t>(c.geom.scale_bytes()));
  c.v_scales.resize(static_cast<size_t>(c.geom.scale_bytes()));
  poison_pools(c);
  c.k_scale = c.v_scale = 1.0f;

  // Work units.
  std::vector<Chunk> chunks;
  const int32_t chunk_tokens = std::max(B, (kChunkTokens / B) * B);
  for (int32_t s = 0; s < S; ++s)
    for (int32_t t0 = 0; t0 < spec.seq_lens[s]; t0 += chunk_tokens)
      chunks.push_back({s, t0, std::min(spec.seq_lens[s], t0 + chunk_tokens)});
  const int64_t total_tokens = c.token_offset[S];
  if (spec.keep_original) {
    c.k_original.resize(static_cast<size_t>(total_tokens) * Hk * D);
    c.v_original.resize(static_cast<size_t>(total_tokens) * Hk * D);
  }

  // Activation-dtype value of raw K/V element (global token, head, dim).
  auto raw_value = [&](Stream st, int64_t tok, int h, int d) -> float {
    const uint64_t idx = (static_cast<uint64_t>(tok) * Hk + h) * D + d;
    const double mean = st == kStreamK ? spec.k_mean : 0.0;
    return round_to_dtype(mean + normal(spec.seed, st, idx), spec.q_dtype);
  };
  const int64_t work = total_tokens * Hk * D * 2;

  // Pool scales from the data's amax (a first pass: values are regenerated, not stored).
  if (kv_format_has_pool_scale(spec.format)) {
    std::vector<float> k_amax(chunks.size(), 0.0f), v_amax(chunks.size(), 0.0f);
    if (spec.k_scale == 0 || spec.v_scale == 0)
      parallel_for(static_cast<int64_t>(chunks.size()), work, [&](int64_t ci) {
        const Chunk& ch = chunks[static_cast<size_t>(ci)];
        for (int32_t t = ch.t0; t < ch.t1; ++t)
          for (int h = 0; h < Hk; ++h)
            for (int d = 0; d < D; ++d) {
              const int64_t tok = c.token_offset[ch.seq] + t;
              k_amax[static_cast<size_t>(ci)] = std::max(k_amax[static_cast<size_t>(ci)],
                                                         std::fabs(raw_value(kStreamK, tok, h, d)));
              v_amax[static_cast<size_t>(ci)] = std::max(v_amax[static_cast<size_t>(ci)],
                                                         std::fabs(raw_value(kStreamV, tok, h, d)));
            }
      });
    const double range = spec.format == KvFormat::kFP8E4M3 ? kE4M3Max
                         : spec.format == KvFormat::kFP8E5M2
                             ? kE5M2Max
                             : kE2M1Max * kE4M3Max;  // NVFP4 tensor scale
    auto scale_of = [&](const std::vector<float>& amax) {
      const float a = amax.empty() ? 0.0f : *std::max_element(amax.begin(), amax.end());
      return a > 0 ? static_cast<float>(a / range) : 1.0f;
    };
    c.k_scale = spec.k_scale > 0 ? spec.k_scale : scale_of(k_amax);
    c.v_scale = spec.v_scale > 0 ? spec.v_scale : scale_of(v_amax);
  }

  // Tokens, written through the reference append (the rule the GPU append kernels follow).
  const KvCacheView view = c.kv_view();
  parallel_for(static_cast<int64_t>(chunks.size()), work, [&](int64_t ci) {
    const Chunk& ch = chunks[static_cast<size_t>(ci)];
    const int32_t n = ch.t1 - ch.t0;
    std::vector<uint16_t> k_in(static_cast<size_t>(n) * Hk * D), v_in(k_in.size());
    std::vector<int64_t> slots(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) {
      const int32_t t = ch.t0 + i;
      const int64_t tok = c.token_offset[ch.seq] + t;
      const int64_t block =
          c.block_table[static_cast<size_t>(ch.seq) * c.max_blocks_per_seq + page_of_token(t, B)];
      slots[static_cast<size_t>(i)] = block * B + slot_of_token(t, B);
      for (int h = 0; h < Hk; ++h)
        for (int d = 0; d < D; ++d) {
          const size_t li = (static_cast<size_t>(i) * Hk + h) * D + d;
          const float k = raw_value(kStreamK, tok, h, d), v = raw_value(kStreamV, tok, h, d);
          k_in[li] = round_to_16bit_code(k, spec.q_dtype);  // exact: k is a q_dtype value
          v_in[li] = round_to_16bit_code(v, spec.q_dtype);
          if (spec.keep_original) {
            const size_t oi = (static_cast<size_t>(tok) * Hk + h) * D + d;
            c.k_original[oi] = k;
            c.v_original[oi] = v;
          }
        }
    }
    AppendArgs a;
    a.in_dtype = spec.q_dtype;
    a.k = k_in.data();
    a.v = v_in.data();
    a.slot_mapping = slots.data();
    a.num_tokens = n;
    a.kv = view;
    append_kv(a);
  });
  return c;
}

DecodeOutputs reference_decode(PagedCase& c) {
  DecodeOutputs r;
  std::vector<uint16_t> o(static_cast<size_t>(c.o_elements()));
  r.lse.resize(static_cast<size_t>(c.lse_elements()));
  decode_attention(c.decode_args(o.data(), r.lse.data()));
  r.o = to_float(o.data(), c.spec.q_dtype, o.size());
  return r;
}

DecodeOutputs reference_decode_original(const PagedCase& c) {
  KVLAB_REQUIRE(c.spec.keep_original,
                "reference_decode_original: the case was built without keep_original");
  const int32_t Hq = c.spec.num_qo_heads, Hk = c.spec.num_kv_heads, D = c.spec.head_dim;
  DecodeOutputs r;
  r.o.resize(static_cast<size_t>(c.o_elements()));
  r.lse.resize(static_cast<size_t>(c.lse_elements()));
  std::vector<float> q(static_cast<size_t>(Hq) * D), k, v;
  std::vector<double> o(static_cast<size_t>(Hq) * D), lse(static_cast<size_t>(Hq));
  for (int32_t s = 0; s < c.num_seqs(); ++s) {
    const int64_t len = c.seq_lens[s], base = c.token_offset[s] * Hk * D;
    q = to_float(c.q.data() + static_cast<size_t>(s) * Hq * D, c.spec.q_dtype, q.size());
    k.assign(c.k_original.begin() + base, c.k_original.begin() + base + len * Hk * D);
    v.assign(c.v_original.begin() + base, c.v_original.begin() + base + len * Hk * D);
    PrefillArgs p;
    p.q = q.data();
    p.k = k.data();
    p.v = v.data();
    p.num_q = 1;
    p.num_kv = static_cast<int32_t>(len);
    p.num_qo_heads = Hq;
    p.num_kv_heads = Hk;
    p.head_dim = D;
    p.sm_scale = c.sm_scale;
    prefill_attention_exact(p, o.data(), lse.data());
    for (size_t i = 0; i < o.size(); ++i)
      r.o[static_cast<size_t>(s) * Hq * D + i] = round_to_dtype(o[i], c.spec.q_dtype);
    for (int32_t h = 0; h < Hq; ++h)
      r.lse[static_cast<size_t>(s) * Hq + h] = static_cast<float>(lse[h]);
  }
  return r;
}

std::vector<float> to_float(const void* data, DType dtype, size_t n) {
  std::vector<float> r(n);
  switch (dtype) {
    case DType::kF32:
      std::memcpy(r.data(), data, n * sizeof(float));
      break;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i)
        r[i] = bf16_bits_to_float(static_cast<const uint16_t*>(data)[i]);
      break;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i)
        r[i] = fp16_bits_to_float(static_cast<const uint16_t*>(data)[i]);
      break;
    default:
      throw InvalidArgument("to_float: unknown dtype value " +
                            std::to_string(static_cast<int>(dtype)));
  }
  return r;
}

std::vector<int32_t> awkward_seq_lens(int32_t block_size, int32_t max_len) {
  KVLAB_REQUIRE(block_size > 0 && max_len >= 0,
                "awkward_seq_lens: block_size must be > 0 and max_len >= 0, got "
                    << block_size << ", " << max_len);
  std::vector<int32_t> v{
      0,  1,   2,    block_size - 1, block_size, block_size + 1, 2 * block_size + 1, 7, 13, 31,
      97, 257, 1031, 2053,           3001};
  v.erase(std::remove_if(v.begin(), v.end(), [&](int32_t x) { return x < 0 || x > max_len; }),
          v.end());
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace kvlab::ref
