// DSV4 substrate: reference CSA / HCA compressors. Streaming = one-shot = chunked at every
// split point (bit-exact: the same arithmetic in the same order), the overlapping-window
// definition on integer inputs, batching across requests, bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "reference/core/error.h"
#include "reference/dsv4/compress_math.h"
#include "reference/dsv4/compressor.h"
#include "tests/common/test_env.h"

namespace kvlab::ref {
namespace {

struct Case {
  const char* name;
  int32_t ratio;
  int32_t dim;
  bool overlap;
  bool ape;
};
const Case kCases[] = {
    {"csa", 4, 24, true, false},
    {"csa_ape", 4, 24, true, true},
    {"hca16", 16, 20, false, true},
    {"hca128", 128, 8, false, false},
};

struct State {
  std::vector<float> ka, za, kb, zb;
  Dsv4StreamView view;
  State(const Case& c, int64_t slots) {
    const int64_t a = slots * (c.overlap ? 2 : 1) * c.ratio * c.dim,
                  b = c.overlap ? slots * c.ratio * c.dim : 0;
    ka.assign(a, NAN);
    za.assign(a, NAN);
    kb.assign(b, NAN);
    zb.assign(b, NAN);
    view.ratio = c.ratio;
    view.dim = c.dim;
    view.overlap = c.overlap;
    view.num_slots = slots;
    view.ka = ka.data();
    view.za = za.data();
    view.kb = c.overlap ? kb.data() : nullptr;
    view.zb = c.overlap ? zb.data() : nullptr;
  }
};

std::vector<float> gaussian(size_t n, uint64_t seed, float std) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, std);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Streams tokens [from, to) of a single request (slot) through dsv4_compress; returns entries.
std::vector<float> stream_call(const Case& c, State& st, int32_t slot, const std::vector<float>& kv,
                               const std::vector<float>& gate, const float* ape, int32_t from,
                               int32_t to) {
  const int W = c.overlap ? 2 * c.dim : c.dim;
  int32_t start = from, offs[2] = {0, to - from}, eoffs[2];
  dsv4_plan_entries(&start, offs, 1, c.ratio, eoffs, nullptr);
  std::vector<float> out(static_cast<size_t>(eoffs[1]) * c.dim);
  Dsv4CompressArgs a;
  a.kv = kv.data() + static_cast<int64_t>(from) * W;
  a.gate = gate.data() + static_cast<int64_t>(from) * W;
  a.ape = ape;
  a.request_slots = &slot;
  a.start_pos = &start;
  a.token_offsets = offs;
  a.entry_offsets = eoffs;
  a.num_requests = 1;
  a.num_tokens = to - from;
  a.num_entries = eoffs[1];
  a.out = out.data();
  dsv4_compress(st.view, a);
  return out;
}

std::vector<float> live_values(const State& st, int64_t slot, int64_t tokens) {
  const auto live = dsv4_live_rows(st.view, slot, tokens);
  std::vector<float> v;
  for (int64_t o : live.lane_a)
    for (int c = 0; c < st.view.dim; ++c) {
      v.push_back(st.ka[o + c]);
      v.push_back(st.za[o + c]);
    }
  for (int64_t o : live.lane_b)
    for (int c = 0; c < st.view.dim; ++c) {
      v.push_back(st.kb[o + c]);
      v.push_back(st.zb[o + c]);
    }
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class Dsv4Compressor : public ::testing::TestWithParam<Case> {};

TEST_P(Dsv4Compressor, StreamingEqualsOneShotEqualsChunkedAtEverySplit) {
  const Case c = GetParam();
  const int W = c.overlap ? 2 * c.dim : c.dim;
  // Awkward length: a prime number of tokens, a partial last window.
  const int32_t L = c.ratio == 128 ? 389 : 67;
  const uint64_t seed = test::seed_for("dsv4.compressor.inputs");
  SCOPED_TRACE(std::string(c.name) + " seed " + std::to_string(seed));
  const auto kv = gaussian(static_cast<size_t>(L) * W, seed, 1.0f);
  const auto gate = gaussian(static_cast<size_t>(L) * W, seed + 1, 2.0f);
  const auto ape_v = gaussian(static_cast<size_t>(c.ratio) * W, seed + 2, 0.5f);
  const float* ape = c.ape ? ape_v.data() : nullptr;
  const int64_t n_entries = L / c.ratio;
  std::vector<float> oneshot(n_entries * c.dim);
  dsv4_compress_oneshot(kv.data(), gate.data(), ape, L, c.ratio, c.dim, c.overlap, oneshot.data());
  for (float x : oneshot) ASSERT_TRUE(std::isfinite(x));

  // Token by token (decode).
  State tok(c, 3);
  std::vector<float> streamed;
  for (int32_t t = 0; t < L; ++t) {
    const auto e = stream_call(c, tok, 1, kv, gate, ape, t, t + 1);
    streamed.insert(streamed.end(), e.begin(), e.end());
  }
  EXPECT_TRUE(same_bits(streamed, oneshot));
  const auto final_state = live_values(tok, 1, L);

  // Two chunks at every split point (0 and L included: one-shot prefill through the state).
  const int32_t step = c.ratio == 128 ? 7 : 1;  // HCA-128: every 7th split, plus the boundaries
  for (int32_t s = 0; s <= L; s += (s + step > L && s != L) ? (L - s) : step) {
    State st(c, 3);
    auto e = stream_call(c, st, 2, kv, gate, ape, 0, s);
    const auto e2 = stream_call(c, st, 2, kv, gate, ape, s, L);
    e.insert(e.end(), e2.begin(), e2.end());
    ASSERT_TRUE(same_bits(e, oneshot)) << "split at " << s;
    ASSERT_TRUE(same_bits(live_values(st, 2, L), final_state)) << "state after split at " << s;
    if (s == L) break;
  }
  if (c.ratio == 128)  // every window boundary +-1 for the sparse sweep above
    for (int32_t s : {127, 128, 129, 255, 256, 257, 383, 384, 385}) {
      State st(c, 3);
      auto e = stream_call(c, st, 0, kv, gate, ape, 0, s);
      const auto e2 = stream_call(c, st, 0, kv, gate, ape, s, L);
      e.insert(e.end(), e2.begin(), e2.end());
      ASSERT_TRUE(same_bits(e, oneshot)) << "split at " << s;
    }
  // Three random chunks.
  std::mt19937_64 g(seed + 3);
  for (int rep = 0; rep < 20; ++rep) {
    int32_t a = static_cast<int32_t>(g() % (L + 1)), b = static_cast<int32_t>(g() % (L + 1));
    if (a > b) std::swap(a, b);
    State st(c, 1);
    auto e = stream_call(c, st, 0, kv, gate, ape, 0, a);
    for (auto [f, t] : {std::pair<int32_t, int32_t>{a, b}, {b, L}}) {
      const auto more = stream_call(c, st, 0, kv, gate, ape, f, t);
      e.insert(e.end(), more.begin(), more.end());
    }
    ASSERT_TRUE(same_bits(e, oneshot)) << "chunks " << a << ", " << b;
  }
}

TEST_P(Dsv4Compressor, BatchedRequestsMatchSeparateRuns) {
  const Case c = GetParam();
  const int W = c.overlap ? 2 * c.dim : c.dim;
  const uint64_t seed = test::seed_for("dsv4.compressor.batch");
  SCOPED_TRACE(std::string(c.name) + " seed " + std::to_string(seed));
  // Three requests, different histories; then one call carrying all three (one empty).
  const int32_t lens[3] = {c.ratio * 3 + 1, c.ratio - 1, 2 * c.ratio};
  const int32_t more[3] = {c.ratio + 2, 0, c.ratio * 2 + 3};
  std::vector<std::vector<float>> kv(3), gate(3);
  State sep(c, 3), bat(c, 3);
  std::vector<float> expect;
  for (int r = 0; r < 3; ++r) {
    kv[r] = gaussian(static_cast<size_t>(lens[r] + more[r]) * W, seed + 10 * r, 1.0f);
    gate[r] = gaussian(static_cast<size_t>(lens[r] + more[r]) * W, seed + 10 * r + 1, 1.0f);
    stream_call(c, sep, r, kv[r], gate[r], nullptr, 0, lens[r]);
    stream_call(c, bat, r, kv[r], gate[r], nullptr, 0, lens[r]);
    const auto e = stream_call(c, sep, r, kv[r], gate[r], nullptr, lens[r], lens[r] + more[r]);
    expect.insert(expect.end(), e.begin(), e.end());
  }
  std::vector<int32_t> slots{2, 0, 1},
      order{2, 0, 1};  // requests in slot order 2, 0, 1 -> r = 2, 0, 1
  std::vector<int32_t> start, toffs{0};
  std::vector<float> bkv, bgate;
  for (int r : order) {
    start.push_back(lens[r]);
    bkv.insert(bkv.end(), kv[r].begin() + static_cast<int64_t>(lens[r]) * W, kv[r].end());
    bgate.insert(bgate.end(), gate[r].begin() + static_cast<int64_t>(lens[r]) * W, gate[r].end());
    toffs.push_back(toffs.back() + more[r]);
  }
  std::vector<int32_t> eoffs(4);
  dsv4_plan_entries(start.data(), toffs.data(), 3, c.ratio, eoffs.data(), nullptr);
  std::vector<float> out(static_cast<size_t>(eoffs[3]) * c.dim);
  Dsv4CompressArgs a;
  a.kv = bkv.data();
  a.gate = bgate.data();
  a.request_slots = slots.data();
  a.start_pos = start.data();
  a.token_offsets = toffs.data();
  a.entry_offsets = eoffs.data();
  a.num_requests = 3;
  a.num_tokens = toffs[3];
  a.num_entries = eoffs[3];
  a.out = out.data();
  dsv4_compress(bat.view, a);
  // Reorder the batched output back to request order 0, 1, 2.
  std::vector<float> got;
  for (int r = 0; r < 3; ++r) {
    const int k = static_cast<int>(std::find(order.begin(), order.end(), r) - order.begin());
    got.insert(got.end(), out.begin() + static_cast<int64_t>(eoffs[k]) * c.dim,
               out.begin() + static_cast<int64_t>(eoffs[k + 1]) * c.dim);
  }
  EXPECT_TRUE(same_bits(got, expect));
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(
        same_bits(live_values(bat, r, lens[r] + more[r]), live_values(sep, r, lens[r] + more[r])));
}

INSTANTIATE_TEST_SUITE_P(Kinds, Dsv4Compressor, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The overlapping-window definition on integer inputs with equal gates (softmax = mean,
// exact in float): CSA entry 0 = mean of lane b of window 0 (lane a empty: -inf gates);
// entry i >= 1 = mean of lane a of window i-1 and lane b of window i.
TEST(Dsv4CompressorDefinition, OverlappingWindowsOnIntegers) {
  const int R = 4, D = 3, L = 12;
  std::vector<float> kv(L * 2 * D), gate(L * 2 * D, 0.5f), out(3 * D);
  for (int t = 0; t < L; ++t)
    for (int c = 0; c < D; ++c) {
      kv[t * 2 * D + c] = static_cast<float>(100 + 10 * t + c);   // lane a
      kv[t * 2 * D + D + c] = static_cast<float>(-(10 * t + c));  // lane b
    }
  dsv4_compress_oneshot(kv.data(), gate.data(), nullptr, L, R, D, true, out.data());
  for (int e = 0; e < 3; ++e)
    for (int c = 0; c < D; ++c) {
      double sum = 0;
      int n = 0;
      for (int j = 0; j < R; ++j) {
        if (e > 0) {
          sum += 100 + 10 * ((e - 1) * R + j) + c;
          ++n;
        }
        sum += -(10 * (e * R + j) + c);
        ++n;
      }
      EXPECT_EQ(out[e * D + c], static_cast<float>(sum / n)) << "entry " << e << " channel " << c;
    }
  // A dominant gate selects its row: lane-a row 2 of window 0 in entry 1 (gate +30 vs 0:
  // the others weigh e^-30 relative, far below the float ulp of the result's magnitude).
  std::fill(gate.begin(), gate.end(), 0.0f);
  for (int c = 0; c < D; ++c) gate[2 * 2 * D + c] = 30.0f;
  dsv4_compress_oneshot(kv.data(), gate.data(), nullptr, L, R, D, true, out.data());
  for (int c = 0; c < D; ++c) {
    EXPECT_FLOAT_EQ(out[1 * D + c], static_cast<float>(100 + 10 * 2 + c));
    EXPECT_EQ(out[0 * D + c], -(10.0f * 1.5f + c));  // entry 0 never sees lane a of window 0
  }
  // HCA: one lane, equal gates -> the mean of the window.
  std::vector<float> h(32 * 2), hg(32 * 2, 1.0f), ho(2 * 2);
  for (int t = 0; t < 32; ++t)
    for (int c = 0; c < 2; ++c) h[t * 2 + c] = static_cast<float>(t * 2 + c);
  dsv4_compress_oneshot(h.data(), hg.data(), nullptr, 32, 16, 2, false, ho.data());
  EXPECT_EQ(ho[0], 15.0f);
  EXPECT_EQ(ho[1], 16.0f);
  EXPECT_EQ(ho[2], 47.0f);
  EXPECT_EQ(ho[3], 48.0f);
}

TEST(Dsv4CompressorDefinition, PlanEntries) {
  int32_t start[4] = {3, 0, 8, 5}, toffs[5] = {0, 6, 6, 10, 11}, eoffs[5], first[4];
  dsv4_plan_entries(start, toffs, 4, 4, eoffs, first);
  // [3,9): entries 0,1; [0,0): none; [8,12): entry 2; [5,6): none.
  EXPECT_EQ(std::vector<int32_t>(eoffs, eoffs + 5), (std::vector<int32_t>{0, 2, 2, 3, 3}));
  EXPECT_EQ(std::vector<int32_t>(first, first + 4), (std::vector<int32_t>{0, 0, 2, 1}));
  start[0] = -1;
  EXPECT_THROW(dsv4_plan_entries(start, toffs, 4, 4, eoffs, first), InvalidArgument);
  start[0] = 3;
  toffs[2] = 5;  // decreasing
  EXPECT_THROW(dsv4_plan_entries(start, toffs, 4, 4, eoffs, first), InvalidArgument);
  EXPECT_THROW(dsv4_plan_entries(start, toffs, 4, 0, eoffs, first), InvalidArgument);
}

TEST(Dsv4CompressorDefinition, BadInputThrowsAndLeavesTheStateUnchanged) {
  const Case c{"csa", 4, 8, true, false};
  State st(c, 2);
  const auto kv = gaussian(16 * 16, 1, 1.0f), gate = gaussian(16 * 16, 2, 1.0f);
  stream_call(c, st, 0, kv, gate, nullptr, 0, 6);
  const auto snap = [&] {
    std::vector<float> v = st.ka;
    v.insert(v.end(), st.za.begin(), st.za.end());
    v.insert(v.end(), st.kb.begin(), st.kb.end());
    v.insert(v.end(), st.zb.begin(), st.zb.end());
    return v;
  };
  const auto before = snap();
  int32_t slot = 0, start = 6, offs[2] = {0, 4}, eoffs[2] = {0, 1};
  std::vector<float> out(8);
  Dsv4CompressArgs a;
  a.kv = kv.data();
  a.gate = gate.data();
  a.request_slots = &slot;
  a.start_pos = &start;
  a.token_offsets = offs;
  a.entry_offsets = eoffs;
  a.num_requests = 1;
  a.num_tokens = 4;
  a.num_entries = 1;
  a.out = out.data();
  eoffs[1] = 2;  // [6, 10) completes exactly one entry
  a.num_entries = 2;
  try {
    dsv4_compress(st.view, a);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("dsv4_plan_entries"), std::string::npos) << e.what();
  }
  eoffs[1] = 1;
  a.num_entries = 1;
  slot = 2;
  EXPECT_THROW(dsv4_compress(st.view, a), InvalidArgument);
  slot = 0;
  a.num_tokens = 3;
  EXPECT_THROW(dsv4_compress(st.view, a), InvalidArgument);
  EXPECT_TRUE(same_bits(snap(), before));
  a.num_tokens = 4;
  dsv4_compress(st.view, a);  // the valid call still works
  EXPECT_FALSE(same_bits(snap(), before));
}

}  // namespace
}  // namespace kvlab::ref
