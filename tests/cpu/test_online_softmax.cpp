// test_online_softmax.cpp: the streaming softmax state equals the two-pass softmax, in
// chunks and merged from split-KV partials in any order, including masked, extremely
// negative and empty inputs.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "reference/metrics/tolerance.h"
#include "reference/softmax/online_softmax.h"
#include "tests/common/test_env.h"
#include "tests/common/tolerance_check.h"

namespace kvlab {
namespace {

constexpr int kDim = 24;  // accumulator width used by these tests
using StateF = OnlineSoftmax<float, kDim>;
using StateD = OnlineSoftmax<double, kDim>;
const float kNegInf = -std::numeric_limits<float>::infinity();

struct Problem {
  std::vector<float> logits;  // [n]
  std::vector<float> values;  // [n, kDim]
};

Problem random_problem(int n, const char* name, float logit_scale = 3.0f) {
  const uint64_t seed = test::seed_for(name, static_cast<uint64_t>(n));
  std::printf("%s n=%d seed %llu\n", name, n, static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Problem p;
  p.logits.resize(static_cast<size_t>(n));
  p.values.resize(static_cast<size_t>(n) * kDim);
  for (float& z : p.logits) z = logit_scale * nd(rng);
  for (float& v : p.values) v = nd(rng);
  return p;
}

// The two-pass definition in float64: max, then sum, then the weighted average.
void two_pass(const Problem& p, std::vector<float>* out, float* lse) {
  double m = -INFINITY;
  for (float z : p.logits) m = std::max(m, static_cast<double>(z));
  out->assign(kDim, 0.0f);
  if (m == -INFINITY) {
    *lse = kNegInf;
    return;
  }
  double l = 0;
  std::vector<double> acc(kDim, 0.0);
  for (size_t j = 0; j < p.logits.size(); ++j) {
    const double w = std::exp(static_cast<double>(p.logits[j]) - m);
    l += w;
    for (int i = 0; i < kDim; ++i) acc[i] += w * p.values[j * kDim + i];
  }
  for (int i = 0; i < kDim; ++i) (*out)[i] = static_cast<float>(acc[i] / l);
  *lse = static_cast<float>(m + std::log(l));
}

template <typename S>
S run_chunked(const Problem& p, int begin, int end, int chunk) {
  S s = S::empty();
  for (int j = begin; j < end; j += chunk) {
    const int n = std::min(chunk, end - j);
    if constexpr (std::is_same_v<decltype(s.m), float>) {
      s.update(p.logits.data() + j, p.values.data() + static_cast<size_t>(j) * kDim, n, kDim);
    } else {
      std::vector<double> z(p.logits.begin() + j, p.logits.begin() + j + n);
      s.update(z.data(), p.values.data() + static_cast<size_t>(j) * kDim, n, kDim);
    }
  }
  return s;
}

template <typename S>
std::vector<float> output_of(const S& s, float* lse) {
  std::vector<float> o(kDim);
  s.normalized(o.data());
  *lse = static_cast<float>(s.lse());
  return o;
}

bool bitwise_equal(const StateF& a, const StateF& b) {
  return std::memcmp(&a, &b, sizeof(StateF)) == 0;
}

void expect_matches_two_pass(const Problem& p, const StateF& s, const std::string& what) {
  std::vector<float> ref;
  float ref_lse;
  two_pass(p, &ref, &ref_lse);
  float lse;
  const std::vector<float> o = output_of(s, &lse);
  EXPECT_TRUE(
      test::within_tolerance(o, ref, Op::kOnlineSoftmaxMerge, KvFormat::kBF16, DType::kF32, what));
  EXPECT_TRUE(test::within_tolerance({lse}, {ref_lse}, Op::kOnlineSoftmaxMerge, KvFormat::kBF16,
                                     DType::kF32, what + " lse"));
}

TEST(OnlineSoftmax, ChunkedUpdateEqualsTwoPass) {
  for (int n : {1, 2, 7, 64, 1000, 4097}) {
    const Problem p = random_problem(n, "osm.chunked");
    for (int chunk : {1, 3, 16, 128, n}) {
      expect_matches_two_pass(p, run_chunked<StateF>(p, 0, n, chunk),
                              "n=" + std::to_string(n) + " chunk=" + std::to_string(chunk));
    }
  }
}

TEST(OnlineSoftmax, DoubleStateIsAFloat64Reference) {
  const Problem p = random_problem(3001, "osm.double");
  std::vector<float> ref;
  float ref_lse;
  two_pass(p, &ref, &ref_lse);
  float lse;
  const std::vector<float> o = output_of(run_chunked<StateD>(p, 0, 3001, 37), &lse);
  EXPECT_TRUE(test::within_tolerance(o, ref, Op::kReferenceCrossCheck, KvFormat::kBF16, DType::kF32,
                                     "double"));
  EXPECT_TRUE(test::within_tolerance({lse}, {ref_lse}, Op::kReferenceCrossCheck, KvFormat::kBF16,
                                     DType::kF32, "double lse"));
}

TEST(OnlineSoftmax, SplitKvMergeInAnyOrder) {
  const int n = 2053;
  const Problem p = random_problem(n, "osm.split");
  const int bounds[] = {0, 1, 1, 300, 301, 1024, 1500, 2053};  // includes an empty split
  std::vector<StateF> parts;
  for (size_t i = 0; i + 1 < std::size(bounds); ++i)
    parts.push_back(run_chunked<StateF>(p, bounds[i], bounds[i + 1], 64));
  StateF fwd = StateF::empty(), bwd = StateF::empty();
  for (size_t i = 0; i < parts.size(); ++i) fwd.merge(parts[i]);
  for (size_t i = parts.size(); i-- > 0;) bwd.merge(parts[i]);
  // Tree order: ((0,1),(2,3)),((4,5),(6)).
  std::vector<StateF> level = parts;
  while (level.size() > 1) {
    std::vector<StateF> next;
    for (size_t i = 0; i < level.size(); i += 2) {
      StateF s = level[i];
      if (i + 1 < level.size()) s.merge(level[i + 1]);
      next.push_back(s);
    }
    level = next;
  }
  expect_matches_two_pass(p, fwd, "forward merge");
  expect_matches_two_pass(p, bwd, "backward merge");
  expect_matches_two_pass(p, level[0], "tree merge");
}

TEST(OnlineSoftmax, MergeIsBitwiseCommutative) {
  const Problem p = random_problem(500, "osm.commute");
  const StateF a = run_chunked<StateF>(p, 0, 173, 8), b = run_chunked<StateF>(p, 173, 500, 8);
  StateF ab = a, ba = b;
  ab.merge(b);
  ba.merge(a);
  EXPECT_TRUE(bitwise_equal(ab, ba));
}

TEST(OnlineSoftmax, EmptyStatesAreTheIdentity) {
  const Problem p = random_problem(50, "osm.empty");
  const StateF a = run_chunked<StateF>(p, 0, 50, 7);
  StateF x = a;
  x.merge(StateF::empty());
  EXPECT_TRUE(bitwise_equal(x, a));
  StateF y = StateF::empty();
  y.merge(a);
  EXPECT_TRUE(bitwise_equal(y, a));
  StateF e = StateF::empty();
  e.merge(StateF::empty());
  float lse;
  const std::vector<float> o = output_of(e, &lse);
  EXPECT_EQ(lse, kNegInf);
  for (float v : o) EXPECT_EQ(v, 0.0f);
  // update with no keys
  StateF z = a;
  z.update(p.logits.data(), p.values.data(), 0, kDim);
  EXPECT_TRUE(bitwise_equal(z, a));
}

TEST(OnlineSoftmax, AllMaskedChunkLeavesTheStateUnchanged) {
  const Problem p = random_problem(40, "osm.masked");
  std::vector<float> masked(16, kNegInf);
  std::vector<float> vals(16 * kDim, 1e30f);  // would dominate if a masked key leaked
  StateF s = run_chunked<StateF>(p, 0, 40, 5);
  const StateF before = s;
  s.update(masked.data(), vals.data(), 16, kDim);
  EXPECT_TRUE(bitwise_equal(s, before));
  // Masked first, on the empty state: still empty, no NaN from -inf - -inf.
  StateF e = StateF::empty();
  e.update(masked.data(), vals.data(), 16, kDim);
  EXPECT_TRUE(e.is_empty());
  EXPECT_EQ(e.l, 0.0f);
  e.update(p.logits.data(), p.values.data(), 40, kDim);
  expect_matches_two_pass(p, e, "masked then real");
}

TEST(OnlineSoftmax, PartiallyMaskedChunkEqualsTwoPassOverTheVisibleKeys) {
  Problem p = random_problem(64, "osm.partial");
  Problem visible;
  for (int j = 0; j < 64; ++j) {
    if (j % 3 == 0) {
      p.logits[static_cast<size_t>(j)] = kNegInf;
    } else {
      visible.logits.push_back(p.logits[static_cast<size_t>(j)]);
      visible.values.insert(visible.values.end(), p.values.begin() + j * kDim,
                            p.values.begin() + (j + 1) * kDim);
    }
  }
  expect_matches_two_pass(visible, run_chunked<StateF>(p, 0, 64, 9), "partially masked");
}

TEST(OnlineSoftmax, ExtremelyNegativeLogits) {
  for (float base : {-1e30f, -FLT_MAX, -1e4f}) {
    Problem p = random_problem(100, "osm.extreme");
    for (float& z : p.logits) z = base;  // all equal: weights exp(0), output = mean of values
    const StateF s = run_chunked<StateF>(p, 0, 100, 13);
    expect_matches_two_pass(p, s, "all logits " + std::to_string(base));
    EXPECT_TRUE(std::isfinite(s.lse()));
    // Mixed with ordinary logits: the extreme keys get weight exactly 0.
    Problem q = random_problem(60, "osm.extreme_mix");
    for (int j = 0; j < 60; j += 2) q.logits[static_cast<size_t>(j)] = base;
    if (base < -1e29f) {
      expect_matches_two_pass(q, run_chunked<StateF>(q, 0, 60, 7), "mixed " + std::to_string(base));
      // Extreme chunk first, then ordinary ones: the rescale factor underflows to 0 cleanly.
      StateF r = StateF::empty();
      std::vector<float> ext(10, base), ev(10 * kDim, 5.0f);
      r.update(ext.data(), ev.data(), 10, kDim);
      r.update(q.logits.data() + 1, q.values.data() + kDim, 1, kDim);
      float lse;
      const std::vector<float> o = output_of(r, &lse);
      for (int i = 0; i < kDim; ++i)
        EXPECT_EQ(o[static_cast<size_t>(i)], q.values[static_cast<size_t>(kDim + i)]);
      EXPECT_EQ(lse, q.logits[1]);
    }
  }
}

TEST(OnlineSoftmax, LseIsNaturalLog) {
  StateD s = StateD::empty();
  const double v[kDim] = {};
  s.push(2.5, v);
  EXPECT_EQ(s.lse(), 2.5);
  s.push(2.5, v);
  EXPECT_DOUBLE_EQ(s.lse(), 2.5 + std::log(2.0));
}

TEST(OnlineSoftmax, NaNPropagates) {
  Problem p = random_problem(30, "osm.nan");
  p.logits[11] = std::numeric_limits<float>::quiet_NaN();
  const StateF s = run_chunked<StateF>(p, 0, 30, 4);
  float lse;
  const std::vector<float> o = output_of(s, &lse);
  EXPECT_TRUE(std::isnan(lse));
  for (float x : o) EXPECT_TRUE(std::isnan(x));
  // A NaN value (not logit) poisons the output too.
  Problem q = random_problem(30, "osm.nan_value");
  q.values[5 * kDim + 3] = std::numeric_limits<float>::quiet_NaN();
  const StateF t = run_chunked<StateF>(q, 0, 30, 4);
  std::vector<float> ot(kDim);
  t.normalized(ot.data());
  EXPECT_TRUE(std::isnan(ot[3]));
  // Merging a NaN partial poisons the result in either order.
  StateF a = run_chunked<StateF>(q, 0, 4, 4), b = s;
  a.merge(s);
  b.merge(run_chunked<StateF>(q, 0, 4, 4));
  EXPECT_TRUE(std::isnan(a.lse()));
  EXPECT_TRUE(std::isnan(b.lse()));
}

TEST(OnlineSoftmax, NormalizedPartialsMergeLikeStates) {
  const int n = 999;
  const Problem p = random_problem(n, "osm.partials");
  const int bounds[] = {0, 250, 250, 700, 999};  // with an empty part
  const int parts = 4;
  std::vector<float> lse(parts),
      o(static_cast<size_t>(parts) * kDim, std::numeric_limits<float>::quiet_NaN());
  StateF merged = StateF::empty();
  for (int i = 0; i < parts; ++i) {
    const StateF s = run_chunked<StateF>(p, bounds[i], bounds[i + 1], 50);
    lse[static_cast<size_t>(i)] = s.lse();
    if (!s.is_empty())
      s.normalized(o.data() + i * kDim);  // the empty part's o stays NaN: never read
    merged.merge(StateF::from_normalized(o.data() + i * kDim, s.lse()));
  }
  std::vector<float> out(kDim);
  float out_lse;
  merge_normalized_partials(lse.data(), o.data(), parts, kDim, out.data(), &out_lse);
  expect_matches_two_pass(p, merged, "from_normalized + merge");
  std::vector<float> ref;
  float ref_lse;
  two_pass(p, &ref, &ref_lse);
  EXPECT_TRUE(test::within_tolerance(out, ref, Op::kOnlineSoftmaxMerge, KvFormat::kBF16,
                                     DType::kF32, "partials"));
  EXPECT_TRUE(test::within_tolerance({out_lse}, {ref_lse}, Op::kOnlineSoftmaxMerge, KvFormat::kBF16,
                                     DType::kF32, "partials lse"));
  // All parts empty: zeros and -inf.
  const float empty_lse[2] = {kNegInf, kNegInf};
  merge_normalized_partials(empty_lse, o.data(), 2, kDim, out.data(), &out_lse);
  EXPECT_EQ(out_lse, kNegInf);
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

// A deliberately wrong variant (forgetting to rescale the accumulator) must fail the same
// check: the tolerance is tight enough to catch the classic online-softmax bug.
TEST(OnlineSoftmax, TheCheckCatchesAMissingRescale) {
  const Problem p = random_problem(256, "osm.bug");
  StateF s = StateF::empty();
  for (int j = 0; j < 256; j += 32) {
    const float m_before = s.m;
    s.update(p.logits.data() + j, p.values.data() + static_cast<size_t>(j) * kDim, 32, kDim);
    if (m_before != s.m && j > 0) {
      // undo the accumulator rescale: acc *= 1/alpha (the bug)
      const float alpha = std::exp(m_before - s.m);
      for (float& a : s.acc) a /= alpha;
    }
  }
  std::vector<float> ref;
  float ref_lse;
  two_pass(p, &ref, &ref_lse);
  float lse;
  const std::vector<float> o = output_of(s, &lse);
  EXPECT_FALSE(
      test::within_tolerance(o, ref, Op::kOnlineSoftmaxMerge, KvFormat::kBF16, DType::kF32, "bug"));
}

}  // namespace
}  // namespace kvlab
