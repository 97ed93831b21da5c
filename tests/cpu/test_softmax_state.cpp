// test_softmax_state.cpp: the online-softmax state of the tensor-core decode kernels
// (gpu/attention/softmax_state.h) replayed on the CPU against the reference
// (reference/softmax/online_softmax.h): a warp's 32 lanes over tiles of mma fragments
// (the max over the 8 lanes of a head, the rescale, the probabilities, the row sums), the
// block's merge of 4 warps, and the batched split merge of the merge kernels, including
// masked tokens, fully masked tiles, extremely negative logits, empty and NaN partials.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu/attention/softmax_state.h"
#include "reference/metrics/tolerance.h"
#include "reference/softmax/online_softmax.h"
#include "tests/common/test_env.h"
#include "tests/common/tolerance_check.h"

namespace kvlab::gpu {
namespace {

constexpr int kHeads = 8;  // the mma N
const float kNegInf = -std::numeric_limits<float>::infinity();

// One head's keys: logits z[j] and one value per key (a one-column V is enough to check the
// weights the accumulators receive).
struct HeadProblem {
  std::vector<float> z, v;
};

// The reference over the same keys (float64 online softmax): output and natural-log lse.
void reference(const HeadProblem& h, float* o, float* lse) {
  OnlineSoftmax<double, 1> s = OnlineSoftmax<double, 1>::empty();
  for (size_t j = 0; j < h.z.size(); ++j) {
    const double zj = h.z[j];
    s.update(&zj, &h.v[j], 1, 1);
  }
  double out;
  s.normalized(&out);
  *o = static_cast<float>(out);
  *lse = static_cast<float>(s.lse());
}

// The partial state of one warp after its tiles: per head (m, l, acc) with acc = sum p v.
struct WarpResult {
  float m[kHeads], l[kHeads], acc[kHeads];
};

// Replays a warp: tokens [0, n) in tiles of kWT (kSub 16-token passes), lane (g, t) holding
// the scores of tokens 16*sub + g, +8 for heads 2t, 2t+1 exactly as the kernel does.
template <int kSub>
WarpResult replay_warp(const std::vector<HeadProblem>& heads, int begin, int end) {
  constexpr int kWT = 16 * kSub;
  FragmentSoftmax sm[32];
  float acc[32][2] = {};
  for (auto& s : sm) s.reset();
  for (int tb = begin; tb < end; tb += kWT) {
    float s[32][kSub][4];
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane >> 2, t = lane & 3;
      for (int sub = 0; sub < kSub; ++sub) {
        const int r0 = tb + sub * 16 + g, r1 = r0 + 8;
        s[lane][sub][0] = r0 < end ? heads[2 * t].z[r0] : kNegInf;
        s[lane][sub][1] = r0 < end ? heads[2 * t + 1].z[r0] : kNegInf;
        s[lane][sub][2] = r1 < end ? heads[2 * t].z[r1] : kNegInf;
        s[lane][sub][3] = r1 < end ? heads[2 * t + 1].z[r1] : kNegInf;
      }
    }
    float mx[32][2];
    for (int lane = 0; lane < 32; ++lane) sm[lane].tile_max(s[lane], mx[lane][0], mx[lane][1]);
    // The shuffle tree over g (xor 4, 8, 16): every lane of a t ends with their max.
    for (int off = 4; off < 32; off *= 2) {
      float nx[32][2];
      for (int lane = 0; lane < 32; ++lane)
        for (int h = 0; h < 2; ++h) nx[lane][h] = fmaxf(mx[lane][h], mx[lane ^ off][h]);
      for (int lane = 0; lane < 32; ++lane) mx[lane][0] = nx[lane][0], mx[lane][1] = nx[lane][1];
    }
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane >> 2, t = lane & 3;
      float c0, c1;
      sm[lane].rescale_to(mx[lane][0], mx[lane][1], c0, c1);
      acc[lane][0] *= c0, acc[lane][1] *= c1;
      for (int sub = 0; sub < kSub; ++sub) {
        float p[4];
        sm[lane].probs(s[lane][sub], p);
        const int r0 = tb + sub * 16 + g, r1 = r0 + 8;
        const float v00 = r0 < end ? heads[2 * t].v[r0] : 0.0f;
        const float v01 = r0 < end ? heads[2 * t + 1].v[r0] : 0.0f;
        const float v10 = r1 < end ? heads[2 * t].v[r1] : 0.0f;
        const float v11 = r1 < end ? heads[2 * t + 1].v[r1] : 0.0f;
        acc[lane][0] += p[0] * v00 + p[2] * v10;
        acc[lane][1] += p[1] * v01 + p[3] * v11;
      }
    }
  }
  WarpResult r;
  for (int t = 0; t < 4; ++t)
    for (int h = 0; h < 2; ++h) {
      const int head = 2 * t + h;
      r.m[head] = sm[t].m[h];  // uniform over the lanes of t
      r.l[head] = 0.0f, r.acc[head] = 0.0f;
      for (int g = 0; g < 8; ++g) {
        EXPECT_EQ(sm[4 * g + t].m[h], r.m[head]) << "max not uniform over the lanes of a head";
        r.l[head] += sm[4 * g + t].l[h];
        r.acc[head] += acc[4 * g + t][h];
      }
    }
  return r;
}

std::vector<HeadProblem> random_heads(int n, const char* name, float scale, float mean = 0.0f) {
  const uint64_t seed = test::seed_for(name, static_cast<uint64_t>(n));
  std::printf("%s n=%d seed %llu\n", name, n, static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<HeadProblem> hs(kHeads);
  for (auto& h : hs) {
    h.z.resize(n);
    h.v.resize(n);
    for (int j = 0; j < n; ++j) h.z[j] = mean + scale * nd(rng), h.v[j] = nd(rng);
  }
  return hs;
}

void expect_head_results(const std::vector<HeadProblem>& hs, const float* m, const float* l,
                         const float* acc, const std::string& what) {
  std::vector<float> o, ref_o, lse, ref_lse;
  for (int h = 0; h < kHeads; ++h) {
    float ro, rl;
    reference(hs[h], &ro, &rl);
    ref_o.push_back(ro), ref_lse.push_back(rl);
    o.push_back(l[h] > 0 ? acc[h] / l[h] : 0.0f);
    lse.push_back(l[h] > 0 ? m[h] + std::log(l[h]) : kNegInf);
  }
  EXPECT_TRUE(test::within_tolerance(o, ref_o, Op::kOnlineSoftmaxMerge, KvFormat::kBF16,
                                     DType::kF32, what + " o"));
  EXPECT_TRUE(test::within_tolerance(lse, ref_lse, Op::kOnlineSoftmaxMerge, KvFormat::kBF16,
                                     DType::kF32, what + " lse"));
}

TEST(SoftmaxState, ExpDiffNeverFormsNaN) {
  EXPECT_EQ(exp_diff(kNegInf, kNegInf), 0.0f);
  EXPECT_EQ(exp_diff(kNegInf, 3.0f), 0.0f);
  EXPECT_EQ(exp_diff(2.5f, 2.5f), 1.0f);
  EXPECT_EQ(exp_diff(-1e30f, -1e30f), 1.0f);  // the difference first, then the scaling
  EXPECT_NEAR(exp_diff(1.0f, 2.0f), std::exp(-1.0f), 1e-6f);
}

template <int kSub>
void check_warp_replay(int n, const char* name, float scale, float mean) {
  const auto hs = random_heads(n, name, scale, mean);
  const WarpResult r = replay_warp<kSub>(hs, 0, n);
  expect_head_results(
      hs, r.m, r.l, r.acc,
      std::string(name) + " kSub " + std::to_string(kSub) + " n " + std::to_string(n));
}

TEST(SoftmaxState, WarpReplayEqualsTheReference) {
  for (int n : {1, 7, 15, 16, 17, 31, 33, 100, 1000, 3001}) {
    check_warp_replay<1>(n, "softmax_state.warp", 3.0f, 0.0f);
    check_warp_replay<2>(n, "softmax_state.warp", 3.0f, 0.0f);
  }
}

TEST(SoftmaxState, ExtremelyNegativeLogits) {
  // Logits around -1e5 with a spread of 1e4: exp(z) underflows unless the max is subtracted.
  check_warp_replay<1>(500, "softmax_state.extreme", 1e4f, -1e5f);
  check_warp_replay<2>(77, "softmax_state.extreme", 1e4f, -1e5f);
}

TEST(SoftmaxState, FullyMaskedTilesLeaveTheStateUnchanged) {
  auto hs = random_heads(64, "softmax_state.masked", 2.0f);
  // Tokens 16..47 masked for every head (-inf logits, huge values that must not leak).
  for (auto& h : hs)
    for (int j = 16; j < 48; ++j) h.z[j] = kNegInf, h.v[j] = 1e30f;
  const WarpResult r = replay_warp<1>(hs, 0, 64);
  std::vector<HeadProblem> visible(kHeads);
  for (int h = 0; h < kHeads; ++h)
    for (int j = 0; j < 64; ++j)
      if (j < 16 || j >= 48) visible[h].z.push_back(hs[h].z[j]), visible[h].v.push_back(hs[h].v[j]);
  expect_head_results(visible, r.m, r.l, r.acc, "masked tiles");
  // A warp that sees only masked tokens stays empty: m = -inf, l = 0, no NaN.
  const WarpResult e = replay_warp<1>(hs, 16, 48);
  for (int h = 0; h < kHeads; ++h) {
    EXPECT_EQ(e.m[h], kNegInf);
    EXPECT_EQ(e.l[h], 0.0f);
    EXPECT_EQ(e.acc[h], 0.0f);
  }
}

TEST(SoftmaxState, BlockMergeOfFourWarpsEqualsTheReference) {
  // v4: warp w owns every 4th 16-token tile; here each warp's tiles are replayed as one run
  // per tile and merged into the warp's state through combine_partials (as the kernel's
  // rescale does), then the 4 warps are combined as the block merge does.
  for (int n : {5, 64, 65, 1000, 2049}) {
    const auto hs = random_heads(n, "softmax_state.block", 4.0f);
    float m[kHeads], l[kHeads], acc[kHeads];
    WarpResult w[4];
    for (int wi = 0; wi < 4; ++wi) {
      // Warp wi's tokens: tiles wi, wi + 4, ... -> replay the concatenation of its tiles.
      std::vector<HeadProblem> mine(kHeads);
      for (int tb = wi * 16; tb < n; tb += 64)
        for (int h = 0; h < kHeads; ++h)
          for (int j = tb; j < std::min(n, tb + 16); ++j)
            mine[h].z.push_back(hs[h].z[j]), mine[h].v.push_back(hs[h].v[j]);
      const int nm = static_cast<int>(mine[0].z.size());
      w[wi] = replay_warp<1>(mine, 0, nm);
    }
    for (int h = 0; h < kHeads; ++h) {
      float wm[4], wl[4], wt[4];
      for (int i = 0; i < 4; ++i) wm[i] = w[i].m[h], wl[i] = w[i].l[h];
      m[h] = combine_partials<4>(wm, wl, wt, l[h]);
      acc[h] = 0.0f;
      for (int i = 0; i < 4; ++i) acc[h] += wt[i] * w[i].acc[h];
      if (n <= 16 * 3) {
        // Warps without tokens contribute weight 0.
        for (int i = 0; i < 4; ++i)
          if (wm[i] == kNegInf) EXPECT_EQ(wt[i], 0.0f);
      }
    }
    expect_head_results(hs, m, l, acc, "block merge n " + std::to_string(n));
  }
}

// The split merge of v4/v5's merge kernel (4 warps, batches of 8, running max per warp,
// then the 4 warps combined) and of v6's last-block merge, against the reference's
// merge_normalized_partials.
void batched_merge(const std::vector<float>& lse, const std::vector<float>& o, int n_valid,
                   float* out, float* out_lse, bool* bad) {
  constexpr int kW = 4, kB = 8;
  const int n = static_cast<int>(lse.size());
  LseAccumulator la[kW];
  float acc[kW] = {};
  for (int w = 0; w < kW; ++w) {
    for (int i0 = w; i0 < n; i0 += kW * kB) {
      float l[kB];
      bool use[kB];
      for (int u = 0; u < kB; ++u) {
        const int i = i0 + u * kW;
        l[u] = i < n ? lse[i] : kNegInf;
        use[u] = i < n_valid && LseAccumulator::contributes(l[u]);
      }
      const float bm = la[w].batch_max(l, use);
      if (bm == kNegInf) continue;
      acc[w] *= la[w].raise_to(bm);
      for (int u = 0; u < kB; ++u)
        if (use[u]) acc[w] += la[w].weight(l[u]) * o[i0 + u * kW];
    }
  }
  float wm[kW], ws[kW], sc[kW], sum;
  *bad = false;
  for (int w = 0; w < kW; ++w) wm[w] = la[w].m, ws[w] = la[w].s, *bad |= la[w].bad;
  const float mx = combine_partials<kW>(wm, ws, sc, sum);
  float t = 0.0f;
  for (int w = 0; w < kW; ++w) t += sc[w] * acc[w];
  *out = t / sum;
  *out_lse = mx + std::log(sum);
}

TEST(SoftmaxState, BatchedSplitMergeEqualsTheReferenceMerge) {
  const uint64_t seed = test::seed_for("softmax_state.split");
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int n : {1, 2, 5, 31, 32, 33, 64, 130}) {
    std::vector<float> lse(n), o(n);
    for (int i = 0; i < n; ++i) lse[i] = 20.0f * nd(rng), o[i] = nd(rng);
    if (n > 3) lse[1] = kNegInf;  // an empty split (its o is never read)
    if (n > 3) o[1] = std::numeric_limits<float>::quiet_NaN();
    float out, out_lse, ref, ref_lse;
    bool bad;
    batched_merge(lse, o, n, &out, &out_lse, &bad);
    merge_normalized_partials(lse.data(), o.data(), n, 1, &ref, &ref_lse);
    EXPECT_FALSE(bad);
    const std::string what = "n " + std::to_string(n);
    EXPECT_TRUE(test::within_tolerance({out, out_lse}, {ref, ref_lse}, Op::kOnlineSoftmaxMerge,
                                       KvFormat::kBF16, DType::kF32, what));
  }
}

TEST(SoftmaxState, SplitMergeIgnoresSlotsPastTheValidOnesAndFlagsNaN) {
  std::vector<float> lse = {1.0f, 2.0f, 0.5f, 1e30f, 1e30f}, o = {1.0f, 2.0f, 3.0f, 1e30f, 1e30f};
  float out, out_lse, ref, ref_lse;
  bool bad;
  batched_merge(lse, o, 3, &out, &out_lse, &bad);  // slots 3, 4 hold garbage
  merge_normalized_partials(lse.data(), o.data(), 3, 1, &ref, &ref_lse);
  EXPECT_FALSE(bad);
  EXPECT_TRUE(test::within_tolerance({out, out_lse}, {ref, ref_lse}, Op::kOnlineSoftmaxMerge,
                                     KvFormat::kBF16, DType::kF32, "valid prefix"));
  lse[1] = std::numeric_limits<float>::quiet_NaN();  // a split that read a bad page
  batched_merge(lse, o, 3, &out, &out_lse, &bad);
  EXPECT_TRUE(bad);
}

}  // namespace
}  // namespace kvlab::gpu
