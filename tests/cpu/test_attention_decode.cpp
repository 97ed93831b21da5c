// test_attention_decode.cpp: ref::decode_attention against an independent naive dense
// computation, for every layout x format, MHA/GQA/MQA, head_dim 64/128/256 and odd ones,
// awkward lengths; decode == causal prefill (last row); LSE; NaN propagation; bad input.
//
// The naive side shares nothing with the reference but formats.h's scalar decoders: its
// own address math (row-major over the bracket shapes in kv_layout.h's comment), its own
// page walk, plain loops in float64 instead of Eigen.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <random>
#include <vector>

#include "reference/attention/attention.h"
#include "reference/attention/kv_access.h"
#include "reference/attention/paged_case.h"
#include "reference/core/error.h"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "tests/common/test_env.h"
#include "tests/common/tolerance_check.h"

namespace kvlab {
namespace {

// ---------------------------------------------------------------- naive, independent side
int64_t row_major(std::initializer_list<int64_t> shape, std::initializer_list<int64_t> idx) {
  int64_t off = 0;
  auto s = shape.begin();
  for (auto i = idx.begin(); i != idx.end(); ++i, ++s) off = off * *s + *i;
  return off;
}

int naive_x(KvFormat f) {
  return 16 * 8 / kv_format_bits(f);
}  // elements per 16 bytes

int64_t naive_index(const PageGeometry& g, bool is_k, int64_t b, int h, int s, int d) {
  const int64_t N = g.num_blocks, H = g.num_kv_heads, B = g.block_size, D = g.head_dim;
  switch (g.layout) {
    case KvLayout::kNHD:
      return row_major({N, B, H, D}, {b, s, h, d});
    case KvLayout::kHND:
      return row_major({N, H, B, D}, {b, h, s, d});
    case KvLayout::kSplitX: {
      const int64_t X = naive_x(g.format);
      return is_k ? row_major({N, H, D / X, B, X}, {b, h, d / X, s, d % X})
                  : row_major({N, H, D, B}, {b, h, d, s});
    }
  }
  return -1;
}

float naive_element(const KvCacheView& c, bool is_k, int64_t b, int h, int s, int d) {
  const PageGeometry& g = c.geom;
  const void* pool = is_k ? c.k : c.v;
  const void* scales = is_k ? c.k_scales : c.v_scales;
  const float pool_scale = is_k ? c.k_scale : c.v_scale;
  const int64_t i = naive_index(g, is_k, b, h, s, d);
  const int64_t N = g.num_blocks, H = g.num_kv_heads, B = g.block_size, D = g.head_dim;
  const uint8_t* p8 = static_cast<const uint8_t*>(pool);
  switch (g.format) {
    case KvFormat::kBF16:
      return bf16_bits_to_float(static_cast<const uint16_t*>(pool)[i]);
    case KvFormat::kFP16:
      return fp16_bits_to_float(static_cast<const uint16_t*>(pool)[i]);
    case KvFormat::kFP8E4M3:
      return e4m3_to_float(p8[i]) * pool_scale;
    case KvFormat::kFP8E5M2:
      return e5m2_to_float(p8[i]) * pool_scale;
    case KvFormat::kFP8E4M3PerToken:
      return e4m3_to_float(p8[i]) *
             static_cast<const float*>(scales)[row_major({N, H, B}, {b, h, s})];
    case KvFormat::kNVFP4:
    case KvFormat::kMXFP4: {
      const uint8_t code = static_cast<uint8_t>((p8[i / 2] >> (4 * (i % 2))) & 0xF);
      const int g_size = g.format == KvFormat::kNVFP4 ? 16 : 32;
      const uint8_t sc = static_cast<const uint8_t*>(
          scales)[row_major({N, H, B, D / g_size}, {b, h, s, d / g_size})];
      const float scale =
          g.format == KvFormat::kNVFP4 ? e4m3_to_float(sc) * pool_scale : ue8m0_to_float(sc);
      return e2m1_to_float(code) * scale;
    }
  }
  return std::numeric_limits<float>::quiet_NaN();
}

// Dense decode in float64 with plain loops: o [num_seqs, Hq, D] and lse, as floats.
void naive_decode(const DecodeArgs& a, std::vector<float>* o, std::vector<float>* lse) {
  const PageGeometry& g = a.kv.geom;
  const int Hq = a.num_qo_heads, G = Hq / g.num_kv_heads, D = g.head_dim;
  o->assign(static_cast<size_t>(a.num_seqs) * Hq * D, 0.0f);
  lse->assign(static_cast<size_t>(a.num_seqs) * Hq, -std::numeric_limits<float>::infinity());
  const uint16_t* q = static_cast<const uint16_t*>(a.q);
  for (int s = 0; s < a.num_seqs; ++s) {
    const int len = a.seq_lens[s];
    for (int hq = 0; hq < Hq; ++hq) {
      if (len == 0) continue;
      const int hk = hq / G;
      std::vector<double> k(static_cast<size_t>(len) * D), v(k.size()), z(static_cast<size_t>(len));
      for (int t = 0; t < len; ++t) {
        const int64_t block = a.block_table[s * a.max_blocks_per_seq + t / g.block_size];
        for (int d = 0; d < D; ++d) {
          k[static_cast<size_t>(t) * D + d] =
              naive_element(a.kv, true, block, hk, t % g.block_size, d);
          v[static_cast<size_t>(t) * D + d] =
              naive_element(a.kv, false, block, hk, t % g.block_size, d);
        }
      }
      double m = -INFINITY;
      for (int t = 0; t < len; ++t) {
        double dot = 0;
        for (int d = 0; d < D; ++d) {
          const uint16_t c = q[(static_cast<size_t>(s) * Hq + hq) * D + d];
          const double qd =
              a.q_dtype == DType::kBF16 ? bf16_bits_to_float(c) : fp16_bits_to_float(c);
          dot += qd * k[static_cast<size_t>(t) * D + d];
        }
        z[static_cast<size_t>(t)] = dot * a.sm_scale;
        m = std::max(m, z[static_cast<size_t>(t)]);
      }
      double l = 0;
      std::vector<double> acc(static_cast<size_t>(D), 0.0);
      for (int t = 0; t < len; ++t) {
        const double w = std::exp(z[static_cast<size_t>(t)] - m);
        l += w;
        for (int d = 0; d < D; ++d)
          acc[static_cast<size_t>(d)] += w * v[static_cast<size_t>(t) * D + d];
      }
      for (int d = 0; d < D; ++d)
        (*o)[(static_cast<size_t>(s) * Hq + hq) * D + d] = static_cast<float>(acc[d] / l);
      (*lse)[static_cast<size_t>(s) * Hq + hq] = static_cast<float>(m + std::log(l));
    }
  }
}

// ---------------------------------------------------------------- a code-level cache builder
// Writes random valid codes (every format, independent of any quantizer) into the used slots
// of a paged cache with a scrambled, over-provisioned block table; poisons everything else.
struct CodeCache {
  PageGeometry geom;
  std::vector<uint8_t> k, v, ks, vs;
  std::vector<int32_t> table, lens;
  std::vector<uint16_t> q;
  int32_t cols = 0;
  DType q_dtype = DType::kBF16;
  float sm_scale = 0, k_scale = 1, v_scale = 1;

  DecodeArgs args(void* o, float* lse) {
    DecodeArgs a;
    a.q_dtype = q_dtype;
    a.q = q.data();
    a.o = o;
    a.lse = lse;
    a.kv.geom = geom;
    a.kv.k = k.data();
    a.kv.v = v.data();
    a.kv.k_scales = ks.empty() ? nullptr : ks.data();
    a.kv.v_scales = vs.empty() ? nullptr : vs.data();
    a.kv.k_scale = k_scale;
    a.kv.v_scale = v_scale;
    a.block_table = table.data();
    a.seq_lens = lens.data();
    a.num_seqs = static_cast<int32_t>(lens.size());
    a.num_qo_heads = static_cast<int32_t>(q.size() / (lens.size() * geom.head_dim));
    a.max_blocks_per_seq = cols;
    a.sm_scale = sm_scale;
    return a;
  }
};

CodeCache make_code_cache(KvLayout layout, KvFormat format, int hq, int hk, int dim, int bs,
                          const std::vector<int32_t>& lens, DType q_dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  CodeCache c;
  c.q_dtype = q_dtype;
  c.lens = lens;
  int64_t pages = 0, max_pages = 0;
  for (int32_t len : lens) {
    pages += (len + bs - 1) / bs;
    max_pages = std::max<int64_t>(max_pages, (len + bs - 1) / bs);
  }
  c.geom.layout = layout;
  c.geom.format = format;
  c.geom.num_blocks = pages + 2;
  c.geom.num_kv_heads = hk;
  c.geom.head_dim = dim;
  c.geom.block_size = bs;
  c.cols = static_cast<int32_t>(max_pages + 1);
  c.sm_scale = 1.0f / std::sqrt(static_cast<float>(dim));
  c.k.assign(static_cast<size_t>(c.geom.bytes()), 0);
  c.v = c.k;
  const bool fp4 = kv_format_bits(format) == 4;
  const uint8_t poison8 = fp4 ? 0x77 : 0x7F;  // FP8 NaN (E4M3 and E5M2); FP4 +6,+6
  if (kv_format_bits(format) == 16) {
    for (size_t i = 0; i + 1 < c.k.size(); i += 2)
      c.k[i] = c.v[i] = 0xFF, c.k[i + 1] = c.v[i + 1] = 0x7F;
  } else {
    std::fill(c.k.begin(), c.k.end(), poison8);
    std::fill(c.v.begin(), c.v.end(), poison8);
  }
  if (kv_format_has_token_scales(format)) {
    c.ks.resize(static_cast<size_t>(c.geom.scale_bytes()));
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (size_t i = 0; i < c.ks.size(); i += 4) std::memcpy(&c.ks[i], &nan, 4);
    c.vs = c.ks;
  } else if (kv_format_has_block_scales(format)) {
    c.ks.assign(static_cast<size_t>(c.geom.scale_bytes()),
                format == KvFormat::kNVFP4 ? kE4M3NaN : kUE8M0NaN);
    c.vs = c.ks;
  }
  if (format == KvFormat::kFP8E4M3) c.k_scale = 1.0f / 128, c.v_scale = 1.0f / 64;
  if (format == KvFormat::kFP8E5M2) c.k_scale = 1.0f / 8192, c.v_scale = 1.0f / 4096;
  if (format == KvFormat::kNVFP4) c.k_scale = 0.5f, c.v_scale = 0.75f;
  std::vector<int32_t> perm(static_cast<size_t>(c.geom.num_blocks));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int32_t>(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  c.table.assign(lens.size() * static_cast<size_t>(c.cols), -7);  // never read
  size_t next = 0;
  for (size_t s = 0; s < lens.size(); ++s)
    for (int p = 0; p < (lens[s] + bs - 1) / bs; ++p) c.table[s * c.cols + p] = perm[next++];
  // Codes of the used slots.
  const PageGeometry& g = c.geom;
  for (size_t s = 0; s < lens.size(); ++s)
    for (int t = 0; t < lens[s]; ++t) {
      const int64_t b = c.table[s * c.cols + t / bs];
      const int slot = t % bs;
      for (int h = 0; h < hk; ++h) {
        float tok_scale[2] = {0.005f + 0.02f * ud(rng), 0.005f + 0.02f * ud(rng)};
        for (int kv = 0; kv < 2; ++kv) {
          std::vector<uint8_t>& pool = kv == 0 ? c.k : c.v;
          std::vector<uint8_t>& sc = kv == 0 ? c.ks : c.vs;
          const float ps = kv == 0 ? c.k_scale : c.v_scale;
          if (kv_format_has_token_scales(format))
            std::memcpy(&sc[static_cast<size_t>(g.token_scale_index(b, h, slot)) * 4],
                        &tok_scale[kv], 4);
          if (kv_format_has_block_scales(format))
            for (int d0 = 0; d0 < dim; d0 += g.scale_group())
              sc[static_cast<size_t>(g.block_scale_index(b, h, slot, d0))] =
                  format == KvFormat::kNVFP4
                      ? float_to_e4m3(0.25f + ud(rng), Saturation::kSatFinite)
                      : static_cast<uint8_t>(125 + rng() % 4);
          for (int d = 0; d < dim; ++d) {
            const int64_t i = kv == 0 ? g.k_index(b, h, slot, d) : g.v_index(b, h, slot, d);
            const float x = nd(rng);
            switch (format) {
              case KvFormat::kBF16:
                reinterpret_cast<uint16_t*>(pool.data())[i] =
                    float_to_bf16_bits(x, Saturation::kSatFinite);
                break;
              case KvFormat::kFP16:
                reinterpret_cast<uint16_t*>(pool.data())[i] =
                    float_to_fp16_bits(x, Saturation::kSatFinite);
                break;
              case KvFormat::kFP8E4M3:
                pool[static_cast<size_t>(i)] = float_to_e4m3(x / ps, Saturation::kSatFinite);
                break;
              case KvFormat::kFP8E5M2:
                pool[static_cast<size_t>(i)] = float_to_e5m2(x / ps, Saturation::kSatFinite);
                break;
              case KvFormat::kFP8E4M3PerToken:
                pool[static_cast<size_t>(i)] =
                    float_to_e4m3(x / tok_scale[kv], Saturation::kSatFinite);
                break;
              case KvFormat::kNVFP4:
              case KvFormat::kMXFP4: {
                const uint8_t code = float_to_e2m1(2.0f * x);
                uint8_t& byte = pool[static_cast<size_t>(i / 2)];
                byte = (i % 2) ? static_cast<uint8_t>((byte & 0x0F) | (code << 4))
                               : static_cast<uint8_t>((byte & 0xF0) | code);
                break;
              }
            }
          }
        }
      }
    }
  c.q.resize(lens.size() * static_cast<size_t>(hq) * dim);
  for (uint16_t& x : c.q) x = ref::round_to_16bit_code(nd(rng), q_dtype);
  return c;
}

std::string name_of(KvLayout l, KvFormat f, int hq, int hk, int dim, int bs, DType qd) {
  return to_string(l) + "/" + to_string(f) + " hq=" + std::to_string(hq) +
         " hk=" + std::to_string(hk) + " d=" + std::to_string(dim) + " bs=" + std::to_string(bs) +
         " q=" + to_string(qd);
}

void expect_matches_naive(const DecodeArgs& a, const std::string& what) {
  const int64_t n_o = static_cast<int64_t>(a.num_seqs) * a.num_qo_heads * a.kv.geom.head_dim;
  std::vector<uint16_t> o_bits(static_cast<size_t>(n_o), 0x7FFF);
  std::vector<float> lse(static_cast<size_t>(a.num_seqs) * a.num_qo_heads, std::nanf(""));
  DecodeArgs b = a;
  b.o = o_bits.data();
  b.lse = lse.data();
  ref::decode_attention(b);
  std::vector<float> naive_o, naive_lse;
  naive_decode(a, &naive_o, &naive_lse);
  const std::vector<float> o = ref::to_float(o_bits.data(), a.q_dtype, o_bits.size());
  EXPECT_TRUE(test::within_tolerance(o, naive_o, Op::kReferenceCrossCheck, a.kv.geom.format,
                                     a.q_dtype, what));
  EXPECT_TRUE(test::within_tolerance(lse, naive_lse, Op::kReferenceCrossCheck, a.kv.geom.format,
                                     DType::kF32, what + " lse"));
}

// ---------------------------------------------------------------- tests

TEST(DecodeAttention, MatchesNaiveDenseForEveryLayoutFormatAndHeadShape) {
  const uint64_t base = test::seed_for("decode.naive");
  std::printf("seed base %llu\n", static_cast<unsigned long long>(base));
  int configs = 0;
  const int shapes[][2] = {{4, 4}, {8, 2}, {6, 1}};  // MHA, GQA 4, MQA
  for (KvLayout l : all_kv_layouts())
    for (KvFormat f : all_kv_formats())
      for (int dim : {64, 128, 256, 32, 96, 160, 2, 6})
        for (int si = 0; si < 3; ++si) {
          PageGeometry probe;
          probe.layout = l;
          probe.format = f;
          probe.num_blocks = 1;
          probe.num_kv_heads = 1;
          probe.head_dim = dim;
          probe.block_size = 1;
          try {
            validate(probe);
          } catch (const InvalidArgument&) {
            continue;  // this head_dim is not addressable in (layout, format): tested in
                       // test_layout
          }
          const int bs = (configs % 3 == 0) ? 16 : (configs % 3 == 1 ? 5 : 1);
          const DType qd = configs % 2 ? DType::kF16 : DType::kBF16;
          const std::vector<int32_t> lens = ref::awkward_seq_lens(bs, 97);
          const uint64_t seed = base + static_cast<uint64_t>(configs);
          CodeCache c =
              make_code_cache(l, f, shapes[si][0], shapes[si][1], dim, bs, lens, qd, seed);
          expect_matches_naive(c.args(nullptr, nullptr),
                               name_of(l, f, shapes[si][0], shapes[si][1], dim, bs, qd) + " seed " +
                                   std::to_string(seed));
          ++configs;
        }
  std::printf("%d configurations checked\n", configs);
  EXPECT_GT(configs, 200);
}

TEST(DecodeAttention, LongSequencesAndSmScale) {
  const uint64_t seed = test::seed_for("decode.long");
  CodeCache c = make_code_cache(KvLayout::kSplitX, KvFormat::kFP8E4M3, 8, 2, 128, 16,
                                {3001, 1031, 0, 257}, DType::kBF16, seed);
  for (float sm : {c.sm_scale, 0.01f, 1.0f}) {
    c.sm_scale = sm;
    expect_matches_naive(c.args(nullptr, nullptr),
                         "long, sm_scale " + std::to_string(sm) + " seed " + std::to_string(seed));
  }
}

TEST(DecodeAttention, EmptySequencesGiveZeroOutputAndMinusInfLse) {
  CodeCache c =
      make_code_cache(KvLayout::kNHD, KvFormat::kBF16, 4, 2, 64, 16, {0, 5, 0}, DType::kBF16, 7);
  std::vector<uint16_t> o(3 * 4 * 64, 0x7FFF);
  std::vector<float> lse(12, 0.0f);
  ref::decode_attention(c.args(o.data(), lse.data()));
  for (int s : {0, 2})
    for (int h = 0; h < 4; ++h) {
      EXPECT_EQ(lse[static_cast<size_t>(s * 4 + h)], -std::numeric_limits<float>::infinity());
      for (int d = 0; d < 64; ++d)
        EXPECT_EQ(o[static_cast<size_t>((s * 4 + h) * 64 + d)], 0) << s << " " << h;
    }
  EXPECT_TRUE(std::isfinite(lse[4]));
  // A batch of only empty sequences (the pool still needs a page).
  CodeCache e =
      make_code_cache(KvLayout::kHND, KvFormat::kMXFP4, 2, 1, 64, 8, {0, 0}, DType::kF16, 8);
  std::vector<uint16_t> eo(2 * 2 * 64, 0x7FFF);
  std::vector<float> else_(4, 0.0f);
  ref::decode_attention(e.args(eo.data(), else_.data()));
  for (uint16_t x : eo) EXPECT_EQ(x, 0);
  for (float x : else_) EXPECT_EQ(x, -std::numeric_limits<float>::infinity());
  // No sequences at all is a no-op.
  DecodeArgs none = e.args(nullptr, nullptr);
  none.num_seqs = 0;
  EXPECT_NO_THROW(ref::decode_attention(none));
}

TEST(DecodeAttention, LseIsTheNaturalLogOfTheSum) {
  // One key: lse = the logit itself; two identical keys: + ln 2.
  CodeCache c = make_code_cache(KvLayout::kNHD, KvFormat::kBF16, 1, 1, 2, 4, {1}, DType::kBF16, 9);
  uint16_t* k = reinterpret_cast<uint16_t*>(c.k.data());
  const int64_t b = c.table[0];
  k[c.geom.k_index(b, 0, 0, 0)] = float_to_bf16_bits(2.0f, Saturation::kSatFinite);
  k[c.geom.k_index(b, 0, 0, 1)] = float_to_bf16_bits(0.5f, Saturation::kSatFinite);
  c.q = {float_to_bf16_bits(1.5f, Saturation::kSatFinite),
         float_to_bf16_bits(-1.0f, Saturation::kSatFinite)};
  c.sm_scale = 0.5f;
  uint16_t o[2];
  float lse;
  ref::decode_attention(c.args(o, &lse));
  EXPECT_EQ(lse, 0.5f * (1.5f * 2.0f - 0.5f));
  // Duplicate the key into a second token.
  CodeCache d = make_code_cache(KvLayout::kNHD, KvFormat::kBF16, 1, 1, 2, 4, {2}, DType::kBF16, 10);
  uint16_t* dk = reinterpret_cast<uint16_t*>(d.k.data());
  for (int t = 0; t < 2; ++t) {
    dk[d.geom.k_index(d.table[0], 0, t, 0)] = float_to_bf16_bits(2.0f, Saturation::kSatFinite);
    dk[d.geom.k_index(d.table[0], 0, t, 1)] = float_to_bf16_bits(0.5f, Saturation::kSatFinite);
  }
  d.q = c.q;
  d.sm_scale = 0.5f;
  ref::decode_attention(d.args(o, &lse));
  EXPECT_FLOAT_EQ(lse, 1.25f + static_cast<float>(std::log(2.0)));
}

TEST(DecodeAttention, NaNInAUsedSlotPropagatesOnlyToItsGroup) {
  CodeCache c =
      make_code_cache(KvLayout::kHND, KvFormat::kBF16, 4, 2, 64, 16, {20, 20}, DType::kBF16, 11);
  // token 17 of sequence 1, KV head 1, dim 3 of V
  reinterpret_cast<uint16_t*>(c.v.data())[c.geom.v_index(c.table[1 * c.cols + 1], 1, 1, 3)] =
      0x7FC0;
  std::vector<uint16_t> o(2 * 4 * 64);
  std::vector<float> lse(8);
  ref::decode_attention(c.args(o.data(), lse.data()));
  const std::vector<float> f = ref::to_float(o.data(), DType::kBF16, o.size());
  for (int s = 0; s < 2; ++s)
    for (int h = 0; h < 4; ++h) {
      const bool poisoned = s == 1 && h / 2 == 1;
      EXPECT_EQ(std::isnan(f[static_cast<size_t>((s * 4 + h) * 64 + 3)]), poisoned)
          << s << " " << h;
      EXPECT_FALSE(std::isnan(f[static_cast<size_t>((s * 4 + h) * 64 + 4)]));
    }
}

TEST(DecodeAttention, EqualsCausalPrefillLastRow) {
  for (KvLayout l : all_kv_layouts())
    for (KvFormat f : {KvFormat::kBF16, KvFormat::kFP16})
      for (DType qd : {DType::kBF16, DType::kF16}) {
        ref::PagedCaseSpec spec;
        spec.layout = l;
        spec.format = f;
        spec.q_dtype = qd;
        spec.num_qo_heads = 6;
        spec.num_kv_heads = 2;
        spec.head_dim = 64;
        spec.block_size = 16;
        spec.seq_lens = {1, 15, 17, 33, 300};
        spec.seed = test::seed_for("decode.prefill") + static_cast<uint64_t>(l) * 10 +
                    static_cast<uint64_t>(f);
        ref::PagedCase c = ref::make_paged_case(spec);
        const ref::DecodeOutputs dec = ref::reference_decode(c);
        const KvCacheView kv = c.kv_view();
        const int Hq = spec.num_qo_heads, Hk = spec.num_kv_heads, D = spec.head_dim;
        std::mt19937_64 rng(spec.seed);
        std::normal_distribution<float> nd;
        std::vector<float> dec_last, pre_last, dec_lse, pre_lse;
        for (int s = 0; s < c.num_seqs(); ++s) {
          const int len = c.seq_lens[s], nq = std::min(len, 4);
          std::vector<float> k(static_cast<size_t>(len) * Hk * D), v(k.size());
          for (int t = 0; t < len; ++t)
            for (int h = 0; h < Hk; ++h)
              for (int d = 0; d < D; ++d) {
                const int64_t b = c.block_table[static_cast<size_t>(s) * c.max_blocks_per_seq +
                                                t / spec.block_size];
                k[(static_cast<size_t>(t) * Hk + h) * D + d] =
                    load_k(kv, b, h, t % spec.block_size, d);
                v[(static_cast<size_t>(t) * Hk + h) * D + d] =
                    load_v(kv, b, h, t % spec.block_size, d);
              }
          // Earlier query rows are random; the last row is the decode query.
          std::vector<float> q(static_cast<size_t>(nq) * Hq * D);
          for (float& x : q) x = nd(rng);
          const std::vector<float> dq = ref::to_float(c.q.data() + static_cast<size_t>(s) * Hq * D,
                                                      qd, static_cast<size_t>(Hq) * D);
          std::copy(dq.begin(), dq.end(), q.begin() + static_cast<std::ptrdiff_t>(nq - 1) * Hq * D);
          std::vector<float> o(q.size()), lse(static_cast<size_t>(nq) * Hq);
          PrefillArgs p;
          p.q = q.data();
          p.k = k.data();
          p.v = v.data();
          p.o = o.data();
          p.lse = lse.data();
          p.num_q = nq;
          p.num_kv = len;
          p.num_qo_heads = Hq;
          p.num_kv_heads = Hk;
          p.head_dim = D;
          p.sm_scale = c.sm_scale;
          p.causal = true;
          ref::prefill_attention(p);
          pre_last.insert(pre_last.end(), o.end() - Hq * D, o.end());
          pre_lse.insert(pre_lse.end(), lse.end() - Hq, lse.end());
          dec_last.insert(dec_last.end(), dec.o.begin() + static_cast<std::ptrdiff_t>(s) * Hq * D,
                          dec.o.begin() + static_cast<std::ptrdiff_t>(s + 1) * Hq * D);
          dec_lse.insert(dec_lse.end(), dec.lse.begin() + s * Hq, dec.lse.begin() + (s + 1) * Hq);
        }
        EXPECT_TRUE(test::within_tolerance(dec_last, pre_last, Op::kReferenceCrossCheck, f, qd,
                                           c.describe()));
        EXPECT_TRUE(test::within_tolerance(dec_lse, pre_lse, Op::kReferenceCrossCheck, f,
                                           DType::kF32, c.describe() + " lse"));
      }
}

TEST(DecodeAttention, ExtremelyNegativeLogits) {
  ref::PagedCaseSpec spec;
  spec.seq_lens = {1, 16, 100};
  spec.q_scale = 1e10;
  spec.q_mean = -1;
  spec.k_mean = 1;
  spec.seed = test::seed_for("decode.extreme");
  ref::PagedCase c = ref::make_paged_case(spec);
  const ref::DecodeOutputs r = ref::reference_decode(c);
  for (float x : r.lse) EXPECT_LT(x, -1e10f) << c.describe();
  expect_matches_naive(c.decode_args(nullptr, nullptr), c.describe());
}

TEST(DecodeAttention, ResultsDoNotDependOnTheThreadCount) {
  ref::PagedCaseSpec spec;
  spec.seq_lens = {2000, 1500, 3001, 999, 64, 1, 0, 2500};  // above the threading threshold
  spec.seed = test::seed_for("decode.threads");
  ref::PagedCase c = ref::make_paged_case(spec);
  const ref::DecodeOutputs multi = ref::reference_decode(c);
  const char* old = std::getenv("KVLAB_REF_THREADS");
  const std::string saved = old ? old : "";
  setenv("KVLAB_REF_THREADS", "1", 1);
  const ref::DecodeOutputs single = ref::reference_decode(c);
  if (old)
    setenv("KVLAB_REF_THREADS", saved.c_str(), 1);
  else
    unsetenv("KVLAB_REF_THREADS");
  EXPECT_EQ(std::memcmp(multi.o.data(), single.o.data(), multi.o.size() * 4), 0);
  EXPECT_EQ(std::memcmp(multi.lse.data(), single.lse.data(), multi.lse.size() * 4), 0);
}

TEST(DecodeAttention, OutputRoundingIsSingleRne) {
  // 1 + 2^-8 + 2^-30: float RNE gives the bf16 midpoint 1 + 2^-8 exactly, whose tie-to-even
  // would give 1.0; the single correct rounding is 1 + 2^-7.
  const double x = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  EXPECT_EQ(ref::round_to_dtype(x, DType::kBF16), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(ref::round_to_dtype(-x, DType::kBF16), -(1.0f + std::ldexp(1.0f, -7)));
  const double y = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(ref::round_to_dtype(y, DType::kF16), 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(ref::round_to_dtype(1.0 + std::ldexp(1.0, -8), DType::kBF16), 1.0f);  // exact tie: even
  EXPECT_EQ(ref::round_to_dtype(1e300, DType::kBF16), std::numeric_limits<float>::infinity());
  EXPECT_EQ(ref::round_to_dtype(70000.0, DType::kF16), std::numeric_limits<float>::infinity());
  EXPECT_EQ(ref::round_to_16bit_code(-0.0, DType::kBF16), 0x8000);
  EXPECT_THROW(ref::round_to_16bit_code(1.0, DType::kF32), InvalidArgument);
}

// ---------------------------------------------------------------- bad input
void expect_invalid(const DecodeArgs& a, const char* needle) {
  try {
    ref::decode_attention(a);
    ADD_FAILURE() << "accepted, expected an error mentioning '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(DecodeAttention, BadInputIsRejectedWithAClearMessage) {
  CodeCache c = make_code_cache(KvLayout::kNHD, KvFormat::kFP8E4M3PerToken, 4, 2, 64, 16, {20, 5},
                                DType::kBF16, 12);
  std::vector<uint16_t> o(2 * 4 * 64);
  const DecodeArgs good = c.args(o.data(), nullptr);
  ASSERT_NO_THROW(ref::decode_attention(good));
  DecodeArgs a = good;
  a.q_dtype = DType::kF32;
  expect_invalid(a, "q_dtype f32");
  a = good;
  a.q = nullptr;
  expect_invalid(a, "null q");
  a = good;
  a.o = nullptr;
  expect_invalid(a, "null q or o");
  a = good;
  a.kv.k = nullptr;
  expect_invalid(a, "null K or V");
  a = good;
  a.kv.v_scales = nullptr;
  expect_invalid(a, "needs k_scales and v_scales");
  a = good;
  a.block_table = nullptr;
  expect_invalid(a, "null block_table");
  a = good;
  a.num_qo_heads = 5;
  expect_invalid(a, "multiple of num_kv_heads");
  a = good;
  a.num_qo_heads = 0;
  expect_invalid(a, "multiple of num_kv_heads");
  a = good;
  a.num_seqs = -1;
  expect_invalid(a, "num_seqs");
  a = good;
  a.sm_scale = 0;
  expect_invalid(a, "sm_scale");
  a = good;
  a.sm_scale = std::nanf("");
  expect_invalid(a, "sm_scale");
  a = good;
  a.kv.geom.head_dim = 63;
  expect_invalid(a, "head_dim");
  a = good;
  a.max_seq_len = a.max_blocks_per_seq * 16 + 1;
  expect_invalid(a, "max_seq_len");
  a = good;
  a.max_seq_len = 10;  // sequence 0 has 20 tokens
  expect_invalid(a, "seq_lens[0] = 20");
  std::vector<int32_t> lens = c.lens;
  lens[1] = a.max_blocks_per_seq * 16 + 1;  // beyond the table
  a = good;
  a.seq_lens = lens.data();
  expect_invalid(a, "seq_lens[1]");
  lens = c.lens;
  lens[1] = -1;
  a.seq_lens = lens.data();
  expect_invalid(a, "seq_lens[1] = -1");
  // A sequence reaching into a table entry that holds no page (-7 here).
  lens = c.lens;
  lens[1] = 17;
  a.seq_lens = lens.data();
  expect_invalid(a, "block_table[1][1] = -7");
  std::vector<int32_t> table = c.table;
  table[0] = static_cast<int32_t>(c.geom.num_blocks);
  a = good;
  a.block_table = table.data();
  expect_invalid(a, "block_table[0][0]");
  // Pool-scaled formats need finite positive pool scales.
  CodeCache p =
      make_code_cache(KvLayout::kNHD, KvFormat::kFP8E5M2, 2, 2, 64, 16, {3}, DType::kBF16, 13);
  std::vector<uint16_t> po(2 * 64);
  DecodeArgs b = p.args(po.data(), nullptr);
  b.kv.k_scale = 0;
  expect_invalid(b, "pool scales");
  b.kv.k_scale = std::numeric_limits<float>::infinity();
  expect_invalid(b, "pool scales");
}

}  // namespace
}  // namespace kvlab
