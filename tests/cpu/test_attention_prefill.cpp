// test_attention_prefill.cpp: ref::prefill_attention (full and causal, MHA/GQA/MQA, any
// head_dim) against naive float64 loops; empty rows; chunk boundaries; bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "reference/attention/attention.h"
#include "reference/core/error.h"
#include "reference/metrics/tolerance.h"
#include "tests/common/test_env.h"
#include "tests/common/tolerance_check.h"

namespace kvlab {
namespace {

struct Problem {
  std::vector<float> q, k, v;
  int nq, nk, hq, hk, d;
  float sm;
  bool causal;
  PrefillArgs args(float* o, float* lse) const {
    PrefillArgs a;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.o = o;
    a.lse = lse;
    a.num_q = nq;
    a.num_kv = nk;
    a.num_qo_heads = hq;
    a.num_kv_heads = hk;
    a.head_dim = d;
    a.sm_scale = sm;
    a.causal = causal;
    return a;
  }
};

Problem make_problem(int nq, int nk, int hq, int hk, int d, bool causal, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  Problem p{{}, {}, {}, nq, nk, hq, hk, d, 1.0f / std::sqrt(static_cast<float>(d)), causal};
  p.q.resize(static_cast<size_t>(nq) * hq * d);
  p.k.resize(static_cast<size_t>(nk) * hk * d);
  p.v.resize(p.k.size());
  for (auto* t : {&p.q, &p.k, &p.v})
    for (float& x : *t) x = nd(rng);
  return p;
}

void naive(const Problem& p, std::vector<float>* o, std::vector<float>* lse) {
  o->assign(static_cast<size_t>(p.nq) * p.hq * p.d, 0.0f);
  lse->assign(static_cast<size_t>(p.nq) * p.hq, -std::numeric_limits<float>::infinity());
  const int G = p.hq / p.hk;
  for (int i = 0; i < p.nq; ++i)
    for (int h = 0; h < p.hq; ++h) {
      const int last = p.causal ? p.nk - p.nq + i : p.nk - 1;  // last visible key
      if (last < 0) continue;
      std::vector<double> z(static_cast<size_t>(last) + 1);
      double m = -INFINITY;
      for (int j = 0; j <= last; ++j) {
        double dot = 0;
        for (int e = 0; e < p.d; ++e)
          dot += static_cast<double>(p.q[(static_cast<size_t>(i) * p.hq + h) * p.d + e]) *
                 p.k[(static_cast<size_t>(j) * p.hk + h / G) * p.d + e];
        z[static_cast<size_t>(j)] = dot * p.sm;
        m = std::max(m, z[static_cast<size_t>(j)]);
      }
      double l = 0;
      std::vector<double> acc(static_cast<size_t>(p.d), 0.0);
      for (int j = 0; j <= last; ++j) {
        const double w = std::exp(z[static_cast<size_t>(j)] - m);
        l += w;
        for (int e = 0; e < p.d; ++e)
          acc[static_cast<size_t>(e)] += w * p.v[(static_cast<size_t>(j) * p.hk + h / G) * p.d + e];
      }
      for (int e = 0; e < p.d; ++e)
        (*o)[(static_cast<size_t>(i) * p.hq + h) * p.d + e] = static_cast<float>(acc[e] / l);
      (*lse)[static_cast<size_t>(i) * p.hq + h] = static_cast<float>(m + std::log(l));
    }
}

void expect_matches_naive(const Problem& p, const std::string& what) {
  std::vector<float> o(static_cast<size_t>(p.nq) * p.hq * p.d, std::nanf("")),
      lse(static_cast<size_t>(p.nq) * p.hq, std::nanf(""));
  ref::prefill_attention(p.args(o.data(), lse.data()));
  std::vector<float> no, nl;
  naive(p, &no, &nl);
  EXPECT_TRUE(
      test::within_tolerance(o, no, Op::kReferenceCrossCheck, KvFormat::kBF16, DType::kF32, what));
  EXPECT_TRUE(test::within_tolerance(lse, nl, Op::kReferenceCrossCheck, KvFormat::kBF16,
                                     DType::kF32, what + " lse"));
}

TEST(PrefillAttention, MatchesNaiveFullAndCausal) {
  const uint64_t base = test::seed_for("prefill.naive");
  std::printf("seed base %llu\n", static_cast<unsigned long long>(base));
  const int shapes[][2] = {{4, 4}, {6, 2}, {3, 1}};
  int i = 0;
  for (bool causal : {false, true})
    for (const auto& sh : shapes)
      for (int d : {64, 1, 3, 67})
        for (const auto& nqk :
             std::vector<std::pair<int, int>>{{1, 1}, {5, 5}, {3, 17}, {17, 17}, {1, 40}}) {
          const uint64_t seed = base + static_cast<uint64_t>(i++);
          const Problem p = make_problem(nqk.first, nqk.second, sh[0], sh[1], d, causal, seed);
          expect_matches_naive(
              p, "nq=" + std::to_string(nqk.first) + " nk=" + std::to_string(nqk.second) +
                     " hq=" + std::to_string(sh[0]) + " hk=" + std::to_string(sh[1]) +
                     " d=" + std::to_string(d) + (causal ? " causal" : " full") + " seed " +
                     std::to_string(seed));
        }
}

TEST(PrefillAttention, RowsThatSeeNoKeyAreEmpty) {
  // Causal with num_q > num_kv: the first num_q - num_kv rows see no key.
  const Problem p = make_problem(6, 2, 2, 1, 8, true, test::seed_for("prefill.empty_rows"));
  std::vector<float> o(6 * 2 * 8, std::nanf("")), lse(12, std::nanf(""));
  ref::prefill_attention(p.args(o.data(), lse.data()));
  for (int i = 0; i < 4; ++i)
    for (int h = 0; h < 2; ++h) {
      EXPECT_EQ(lse[static_cast<size_t>(i * 2 + h)], -std::numeric_limits<float>::infinity());
      for (int e = 0; e < 8; ++e) EXPECT_EQ(o[static_cast<size_t>((i * 2 + h) * 8 + e)], 0.0f);
    }
  expect_matches_naive(p, "num_q > num_kv");
  // No keys at all, full attention: every row is empty.
  const Problem none = make_problem(3, 0, 2, 2, 4, false, 1);
  std::vector<float> on(3 * 2 * 4, 1.0f), ln(6, 1.0f);
  ref::prefill_attention(none.args(on.data(), ln.data()));
  for (float x : on) EXPECT_EQ(x, 0.0f);
  for (float x : ln) EXPECT_EQ(x, -std::numeric_limits<float>::infinity());
  // No queries: nothing to do, null outputs allowed.
  const Problem noq = make_problem(0, 5, 2, 2, 4, true, 1);
  EXPECT_NO_THROW(ref::prefill_attention(noq.args(nullptr, nullptr)));
}

TEST(PrefillAttention, CausalAcrossTheRowChunkBoundary) {
  // More than 256 query rows: the reference processes rows in chunks.
  expect_matches_naive(make_problem(300, 310, 2, 1, 16, true, test::seed_for("prefill.chunks")),
                       "300x310 causal");
  expect_matches_naive(make_problem(513, 513, 1, 1, 8, true, test::seed_for("prefill.chunks2")),
                       "513 causal");
}

TEST(PrefillAttention, CausalLastRowEqualsFullAttentionOfThatRow) {
  const Problem c = make_problem(9, 20, 4, 2, 32, true, test::seed_for("prefill.lastrow"));
  Problem f = c;
  f.causal = false;
  f.nq = 1;
  f.q.assign(c.q.end() - 4 * 32, c.q.end());
  std::vector<float> oc(9 * 4 * 32), lc(9 * 4), of(4 * 32), lf(4);
  ref::prefill_attention(c.args(oc.data(), lc.data()));
  ref::prefill_attention(f.args(of.data(), lf.data()));
  const std::vector<float> last(oc.end() - 4 * 32, oc.end()), last_lse(lc.end() - 4, lc.end());
  EXPECT_TRUE(test::within_tolerance(last, of, Op::kReferenceCrossCheck, KvFormat::kBF16,
                                     DType::kF32, "last row"));
  EXPECT_TRUE(test::within_tolerance(last_lse, lf, Op::kReferenceCrossCheck, KvFormat::kBF16,
                                     DType::kF32, "last row lse"));
}

void expect_invalid(const PrefillArgs& a, const char* needle) {
  try {
    ref::prefill_attention(a);
    ADD_FAILURE() << "accepted, expected '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(PrefillAttention, BadInputIsRejectedWithAClearMessage) {
  const Problem p = make_problem(3, 4, 4, 2, 8, false, 3);
  std::vector<float> o(3 * 4 * 8);
  const PrefillArgs good = p.args(o.data(), nullptr);
  ASSERT_NO_THROW(ref::prefill_attention(good));
  PrefillArgs a = good;
  a.q = nullptr;
  expect_invalid(a, "null q or o");
  a = good;
  a.v = nullptr;
  expect_invalid(a, "null k or v");
  a = good;
  a.num_qo_heads = 3;
  expect_invalid(a, "multiple of num_kv_heads");
  a = good;
  a.num_kv_heads = 0;
  expect_invalid(a, "multiple of num_kv_heads");
  a = good;
  a.head_dim = 0;
  expect_invalid(a, "head_dim");
  a = good;
  a.num_kv = -1;
  expect_invalid(a, "num_q and num_kv");
  a = good;
  a.sm_scale = -1;
  expect_invalid(a, "sm_scale");
}

}  // namespace
}  // namespace kvlab
