// test_step_kernels.cu: the decode step's kernels against the CPU reference, exactly.
//
// Everything here is a bitwise contract (no tolerance): synthetic weights, RoPE, the fused
// kernels against their unfused chains, RoPE+append+quantize against kvlab::ref::append_kv
// (all formats x layouts, padding slots, poisoned unused slots), greedy and top-k sampling
// against the reference sampler, and the per-step bookkeeping.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <thrust/device_vector.h>

#include "gpu/core/cuda_check.h"
#include "gpu/core/device_info.h"
#include "gpu/step/sampling.h"
#include "gpu/step/step_kernels.h"
#include "reference/core/error.h"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"
#include "reference/quant/append.h"
#include "reference/step/decode_step.h"
#include "reference/step/step_math.h"
#include "tests/common/test_env.h"

namespace kvlab {
namespace {

namespace ks = gpu::step;

#define REQUIRE_GPU()                                               \
  do {                                                              \
    if (!gpu::device_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

template <class T>
std::vector<T> host(const thrust::device_vector<T>& d) {
  std::vector<T> h(d.size());
  thrust::copy(d.begin(), d.end(), h.begin());
  return h;
}
template <class T>
T* raw(thrust::device_vector<T>& d) {
  return thrust::raw_pointer_cast(d.data());
}

std::vector<float> gaussian(uint64_t seed, size_t n, float sd = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

TEST(StepKernels, SyntheticWeightsMatchTheHostBits) {
  REQUIRE_GPU();
  const DecoderConfig c = decoder_preset("small");
  for (auto t : {step::WeightTensor::kEmbedding, step::WeightTensor::kAttnNorm,
                 step::WeightTensor::kWDown}) {
    const int64_t n = 100003;  // prime
    const auto want = ref::synthetic_tensor(c, t, 2, n);
    const auto [scale, offset] = ref::synthetic_init(t, c);
    thrust::device_vector<uint16_t> d(n);
    ks::fill_synthetic_bf16(raw(d), n, c.seed, step::weight_stream(t, 2), scale, offset, nullptr);
    EXPECT_EQ(host(d), want) << static_cast<int>(t);
  }
}

TEST(StepKernels, FusedNormAndSwigluEqualTheirUnfusedChains) {
  REQUIRE_GPU();
  for (int hidden : {1, 255, 4096, 5003}) {
    const int m = 7;
    const uint64_t seed = test::seed_for("norm") + hidden;
    std::printf("hidden %d seed %llu\n", hidden, static_cast<unsigned long long>(seed));
    const auto h0 = gaussian(seed, size_t(m) * hidden, 3.0f),
               y0 = gaussian(seed + 1, size_t(m) * hidden);
    std::vector<uint16_t> gamma(hidden);
    for (int i = 0; i < hidden; ++i)
      gamma[i] = float_to_bf16_bits(1.0f + 0.01f * (i % 50), Saturation::kSatFinite);
    thrust::device_vector<float> ha(h0), hb(h0), y(y0);
    thrust::device_vector<uint16_t> g(gamma), xa(size_t(m) * hidden, 0xFFFF),
        xb(size_t(m) * hidden, 0x7FC1);
    ks::add_rmsnorm(raw(ha), raw(y), raw(g), raw(xa), m, hidden, 1e-5f, nullptr);
    ks::residual_add(raw(hb), raw(y), m, hidden, nullptr);
    ks::rmsnorm(raw(hb), raw(g), raw(xb), m, hidden, 1e-5f, nullptr);
    EXPECT_EQ(host(ha), host(hb));
    EXPECT_EQ(host(xa), host(xb));
    // the residual stream is exactly h + y
    const auto hh = host(ha);
    for (size_t i = 0; i < hh.size(); ++i) ASSERT_EQ(hh[i], h0[i] + y0[i]) << i;
  }
  for (int f : {1, 1368, 14336}) {
    const int m = 5;
    const auto gu0 = gaussian(test::seed_for("swiglu") + f, size_t(m) * 2 * f, 2.0f);
    thrust::device_vector<float> gu(gu0), s(size_t(m) * f);
    thrust::device_vector<float> g(size_t(m) * f), u(size_t(m) * f);
    for (int r = 0; r < m; ++r) {  // the unfused path reads separate g and u buffers
      thrust::copy(gu.begin() + size_t(r) * 2 * f, gu.begin() + size_t(r) * 2 * f + f,
                   g.begin() + size_t(r) * f);
      thrust::copy(gu.begin() + size_t(r) * 2 * f + f, gu.begin() + size_t(r + 1) * 2 * f,
                   u.begin() + size_t(r) * f);
    }
    thrust::device_vector<uint16_t> a(size_t(m) * f, 0xFFFF), b(size_t(m) * f, 0x7FC1);
    ks::swiglu(raw(gu), raw(a), m, f, nullptr);
    ks::silu(raw(g), f, raw(s), m, f, nullptr);
    ks::mul_bf16(raw(s), raw(u), f, raw(b), m, f, nullptr);
    EXPECT_EQ(host(a), host(b)) << "ffn " << f;
  }
}

TEST(StepKernels, RopeMatchesTheHostRotationBitForBit) {
  REQUIRE_GPU();
  DecoderConfig c = decoder_preset("small");
  const int max_pos = 300, m = 6, heads = 3, D = c.head_dim;
  const auto table = ref::rope_table(c, max_pos);
  const auto x0 = gaussian(test::seed_for("rope"), size_t(m) * heads * D);
  const std::vector<int32_t> pos = {0, 1, 17, 299, -1, 128};
  thrust::device_vector<float> x(x0), t(table);
  thrust::device_vector<int32_t> p(pos);
  ks::rope_inplace(raw(x), heads * D, heads, D, raw(p), raw(t), max_pos, m, nullptr);
  const auto got = host(x);
  for (int r = 0; r < m; ++r)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < D / 2; ++i) {
        const size_t b = (size_t(r) * heads + h) * D;
        const float* cs = table.data() + size_t(pos[r] < 0 ? 0 : pos[r]) * D;
        float y0, y1;
        step::rope_rotate(x0[b + i], x0[b + i + D / 2], cs[2 * i], cs[2 * i + 1], &y0, &y1);
        ASSERT_EQ(got[b + i], y0);
        ASSERT_EQ(got[b + i + D / 2], y1);
      }
}

// Pool bytes and scales of a cache view, on the host.
struct HostCache {
  std::vector<uint8_t> k, v, ks, vs;
};

TEST(StepKernels, RopeAppendIsByteExactToTheReferenceAppend) {
  REQUIRE_GPU();
  const int q_heads = 4, kv_heads = 2;
  int cases = 0;
  for (int D : {64, 128})
    for (KvFormat fmt : all_kv_formats())
      for (KvLayout layout : all_kv_layouts())
        for (int bs : {1, 15, 16}) {
          PageGeometry g;
          g.layout = layout;
          g.format = fmt;
          g.num_kv_heads = kv_heads;
          g.head_dim = D;
          g.block_size = bs;
          g.num_blocks = 64 / bs + 3;
          try {
            validate(g);
          } catch (const InvalidArgument&) {
            continue;  // e.g. a split-x chunk that head_dim does not divide
          }
          ++cases;
          DecoderConfig c = decoder_preset("tiny");
          c.head_dim = D;
          const int max_pos = 64, qkv = (q_heads + 2 * kv_heads) * D;
          const int m = 13;  // tokens; two of them padding
          const uint64_t seed = test::seed_for("rope_append") + cases;
          auto x0 = gaussian(seed, size_t(m) * qkv, 2.0f);
          // an outlier channel and an exact zero head, to exercise the scale rules
          x0[q_heads * D + 5] = 300.0f;
          for (int d = 0; d < D; ++d) x0[size_t(qkv) + (q_heads + 1) * D + d] = 0.0f;
          std::vector<int32_t> pos(m);
          std::vector<int64_t> slots(m);
          const int64_t nslots = g.num_blocks * bs;
          std::mt19937_64 rng(seed);
          std::vector<int64_t> perm(nslots);
          for (int64_t i = 0; i < nslots; ++i) perm[i] = i;
          std::shuffle(perm.begin(), perm.end(), rng);
          for (int i = 0; i < m; ++i) {
            pos[i] = static_cast<int32_t>(rng() % max_pos);
            slots[i] = (i == 3 || i == 8) ? -1 : perm[i];
          }
          HostCache init;
          init.k.assign(g.bytes(), 0xFF);  // poisoned: NaN codes in every 8/16-bit format
          init.v.assign(g.bytes(), 0xFF);
          init.ks.assign(g.scale_bytes(), 0xFF);
          init.vs.assign(g.scale_bytes(), 0xFF);
          thrust::device_vector<uint8_t> dk(init.k), dv(init.v),
              dks(std::max<size_t>(init.ks.size(), 1)), dvs(std::max<size_t>(init.vs.size(), 1));
          thrust::copy(init.ks.begin(), init.ks.end(), dks.begin());
          thrust::copy(init.vs.begin(), init.vs.end(), dvs.begin());
          KvCacheView dview;
          dview.geom = g;
          dview.k = raw(dk);
          dview.v = raw(dv);
          dview.k_scales = raw(dks);
          dview.v_scales = raw(dvs);
          dview.k_scale = 0.75f;
          dview.v_scale = 1.5f;
          const auto table = ref::rope_table(c, max_pos);
          thrust::device_vector<float> dx(x0), dt(table);
          thrust::device_vector<int32_t> dp(pos);
          thrust::device_vector<int64_t> ds(slots);
          thrust::device_vector<uint16_t> dq(size_t(m) * q_heads * D, 0x7FC1);
          ks::rope_append(raw(dx), qkv, q_heads, raw(dp), raw(ds), raw(dt), max_pos, raw(dq), dview,
                          m, nullptr);

          // reference: host RoPE (the same rotation) then ref::append_kv on the roped K/V
          std::vector<float> kin(size_t(m) * kv_heads * D), vin(size_t(m) * kv_heads * D);
          std::vector<uint16_t> qwant(size_t(m) * q_heads * D);
          for (int r = 0; r < m; ++r) {
            const float* cs = table.data() + size_t(pos[r]) * D;
            const float* row = x0.data() + size_t(r) * qkv;
            for (int h = 0; h < q_heads + kv_heads; ++h)
              for (int i = 0; i < D / 2; ++i) {
                float y0, y1;
                step::rope_rotate(row[h * D + i], row[h * D + i + D / 2], cs[2 * i], cs[2 * i + 1],
                                  &y0, &y1);
                if (h < q_heads) {
                  qwant[(size_t(r) * q_heads + h) * D + i] =
                      float_to_bf16_bits(y0, Saturation::kSatFinite);
                  qwant[(size_t(r) * q_heads + h) * D + i + D / 2] =
                      float_to_bf16_bits(y1, Saturation::kSatFinite);
                } else {
                  kin[(size_t(r) * kv_heads + h - q_heads) * D + i] = y0;
                  kin[(size_t(r) * kv_heads + h - q_heads) * D + i + D / 2] = y1;
                }
              }
            for (int i = 0; i < kv_heads * D; ++i)
              vin[size_t(r) * kv_heads * D + i] = row[(q_heads + kv_heads) * D + i];
          }
          HostCache want = init;
          KvCacheView hview = dview;
          hview.k = want.k.data();
          hview.v = want.v.data();
          hview.k_scales = want.ks.empty() ? nullptr : want.ks.data();
          hview.v_scales = want.vs.empty() ? nullptr : want.vs.data();
          AppendArgs a;
          a.in_dtype = DType::kF32;
          a.k = kin.data();
          a.v = vin.data();
          a.slot_mapping = slots.data();
          a.num_tokens = m;
          a.kv = hview;
          ref::append_kv(a);

          const std::string what = to_string(fmt) + "/" + to_string(layout) + " D" +
                                   std::to_string(D) + " bs" + std::to_string(bs) + " seed " +
                                   std::to_string(seed);
          EXPECT_EQ(host(dq), qwant) << what;
          EXPECT_EQ(host(dk), want.k) << what;
          EXPECT_EQ(host(dv), want.v) << what;
          if (!want.ks.empty()) {
            std::vector<uint8_t> gks = host(dks), gvs = host(dvs);
            gks.resize(want.ks.size());
            gvs.resize(want.vs.size());
            EXPECT_EQ(gks, want.ks) << what;
            EXPECT_EQ(gvs, want.vs) << what;
          }
        }
  std::printf("%d format x layout x geometry cases\n", cases);
  EXPECT_GE(cases, 2 * 7 * 2 * 3);
}

TEST(StepKernels, RopeAppendRejectsBadArguments) {
  REQUIRE_GPU();
  PageGeometry g;
  g.format = KvFormat::kFP8E4M3;
  g.num_kv_heads = 2;
  g.head_dim = 64;
  g.block_size = 16;
  g.num_blocks = 4;
  thrust::device_vector<uint8_t> pool(g.bytes());
  KvCacheView v;
  v.geom = g;
  v.k = raw(pool);
  v.v = raw(pool);
  v.k_scale = 0.0f;  // pool-scaled format without a valid scale
  thrust::device_vector<float> x(8 * 64), t(64);
  thrust::device_vector<int32_t> p(1, 0);
  thrust::device_vector<int64_t> s(1, 0);
  EXPECT_THROW(
      ks::rope_append(raw(x), 8 * 64, 4, raw(p), raw(s), raw(t), 1, nullptr, v, 1, nullptr),
      InvalidArgument);
  v.k_scale = 1.0f;
  EXPECT_THROW(
      ks::rope_append(raw(x), 8 * 64, 3, raw(p), raw(s), raw(t), 1, nullptr, v, 1, nullptr),
      InvalidArgument);
  EXPECT_THROW(ks::rope_append(raw(x), 100, 4, raw(p), raw(s), raw(t), 1, nullptr, v, 1, nullptr),
               InvalidArgument);
  v.geom.format = KvFormat::kFP8E4M3PerToken;  // needs scale arrays
  EXPECT_THROW(
      ks::rope_append(raw(x), 8 * 64, 4, raw(p), raw(s), raw(t), 1, nullptr, v, 1, nullptr),
      InvalidArgument);
}

TEST(StepKernels, SamplingMatchesTheReferenceSampler) {
  REQUIRE_GPU();
  for (int vocab : {1, 1000, 4099, 128256}) {
    const int m = 9;
    const uint64_t seed = test::seed_for("logits") + vocab;
    std::printf("vocab %d seed %llu\n", vocab, static_cast<unsigned long long>(seed));
    auto logits = gaussian(seed, size_t(m) * vocab, 2.0f);
    if (vocab > 10) {
      // row 1: a tie for the maximum; row 2: NaN and +Inf; row 3: all equal; row 4: a
      // block of ties straddling the top-k boundary
      logits[size_t(1) * vocab + 7] = logits[size_t(1) * vocab + vocab - 2] = 50.0f;
      logits[size_t(2) * vocab + 3] = NAN;
      logits[size_t(2) * vocab + 9] = INFINITY;
      for (int i = 0; i < vocab; ++i) logits[size_t(3) * vocab + i] = 0.25f;
      for (int i = 0; i < vocab; i += 3) logits[size_t(4) * vocab + i] = 4.0f;
    }
    thrust::device_vector<float> d(logits);
    thrust::device_vector<int32_t> tok(m, -7), pos(m);
    std::vector<int32_t> hpos(m);
    for (int r = 0; r < m; ++r) hpos[r] = r == 5 ? -1 : 10 * r + 3;
    thrust::copy(hpos.begin(), hpos.end(), pos.begin());
    ks::sample_greedy(raw(d), vocab, vocab, m, raw(tok), nullptr);
    auto got = host(tok);
    for (int r = 0; r < m; ++r)
      EXPECT_EQ(got[r], ref::greedy_token(logits.data() + size_t(r) * vocab, vocab)) << r;
    for (int k : {1, 2, 50, 1024}) {
      if (k > vocab) continue;
      for (float temp : {0.7f, 1.0f}) {
        ks::sample_top_k(raw(d), vocab, vocab, m, k, temp, seed, raw(pos), raw(tok), nullptr);
        got = host(tok);
        for (int r = 0; r < m; ++r)
          EXPECT_EQ(got[r], ref::top_k_token(logits.data() + size_t(r) * vocab, vocab, k, temp,
                                             seed, r, hpos[r]))
              << "row " << r << " k " << k << " temperature " << temp;
      }
    }
  }
  thrust::device_vector<float> d(10);
  thrust::device_vector<int32_t> tok(1), pos(1);
  EXPECT_THROW(ks::sample_top_k(raw(d), 10, 10, 1, 11, 1.0f, 0, raw(pos), raw(tok), nullptr),
               InvalidArgument);
  EXPECT_THROW(ks::sample_top_k(raw(d), 10, 10, 1, 0, 1.0f, 0, raw(pos), raw(tok), nullptr),
               InvalidArgument);
  EXPECT_THROW(ks::sample_top_k(raw(d), 10, 10, 1, 2, 0.0f, 0, raw(pos), raw(tok), nullptr),
               InvalidArgument);
}

TEST(StepKernels, PrepareAndAdvance) {
  REQUIRE_GPU();
  const int m = 5, bs = 16, mb = 4;
  const std::vector<int32_t> pos = {0, 15, 16, -1, 63};
  std::vector<int32_t> bt(m * mb);
  for (int i = 0; i < m * mb; ++i) bt[i] = (i * 7) % 23;
  thrust::device_vector<int32_t> dp(pos), dbt(bt), lens(m, -9);
  thrust::device_vector<int64_t> slots(m, -9);
  ks::step_prepare(raw(dp), raw(dbt), mb, bs, raw(slots), raw(lens), m, nullptr);
  const auto s = host(slots);
  const auto l = host(lens);
  for (int r = 0; r < m; ++r) {
    if (pos[r] < 0) {
      EXPECT_EQ(s[r], -1);
      EXPECT_EQ(l[r], 0);
    } else {
      EXPECT_EQ(s[r], int64_t{bt[r * mb + pos[r] / bs]} * bs + pos[r] % bs) << r;
      EXPECT_EQ(l[r], pos[r] + 1);
    }
  }
  ks::step_advance(raw(dp), m, nullptr);
  EXPECT_EQ(host(dp), (std::vector<int32_t>{1, 16, 17, -1, 64}));
}

}  // namespace
}  // namespace kvlab
