// DSV4 substrate: reference append_swa (positions, RoPE exact, wrap-around, multi-request
// isolation, both ring modes and entry formats) and its bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "reference/core/error.h"
#include "reference/dsv4/variant_names.h"
#include "tests/cpu/test_dsv4_common.h"

namespace kvlab::test::dsv4 {
namespace {

const Dsv4Variant kVariants[] = {
    Dsv4Variant::per_token_scales(),
    Dsv4Variant::public_v4(),
    {Dsv4EntryFormat::kFp8DsMla, Dsv4IndexerFormat::kNvfp4, Dsv4RingMode::kAtomicHead},
    {Dsv4EntryFormat::kFp8PerToken, Dsv4IndexerFormat::kMxfp4Hadamard, Dsv4RingMode::kPosModWindow},
};

class Dsv4Append : public ::testing::TestWithParam<Dsv4Variant> {};

// Snapshot of a ring (all slots): bytes of every array plus positions and heads.
std::vector<uint8_t> snapshot(const Dsv4SwaView& v) {
  std::vector<uint8_t> s;
  auto add = [&](const void* p, size_t n) {
    if (p) s.insert(s.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  };
  const int64_t entries = v.num_slots() * v.window();
  if (v.ring.format == Dsv4EntryFormat::kFp8PerToken) {
    add(v.ring.data, entries * v.ring.nope_dim);
    add(v.ring.rope, entries * v.ring.rope_dim * 2);
    add(v.ring.inv_scale, entries * 4);
  } else {
    add(v.ring.data, v.ring.bytes());
  }
  add(v.pos, entries * 4);
  add(v.head, v.num_slots() * 4);
  return s;
}

TEST_P(Dsv4Append, SequentialDecodeWrapsAroundWithPositionsAndExactRope) {
  const Dsv4Variant var = GetParam();
  SCOPED_TRACE("variant " + to_string(var) +
               ", seed dsv4.raw_token=" + std::to_string(seed_for("dsv4.raw_token")));
  auto c = make_host_cache("test_tiny.ini", var, 16, 2, 256);
  auto& m = *c.mgr;
  const int32_t slot = m.admit_request(7);
  const auto& l = c.schema.layer(0);
  const auto h = m.acquire(0);
  const auto& v = h.read_swa_view();
  const int W = v.window();  // 16
  for (int64_t t = 0; t < 3 * W + 5; ++t) {
    const auto b = make_batch(l, {7}, {slot}, {t}, {1});
    h.write_swa(swa_args(b));
    // After t+1 tokens the ring holds positions max(0, t-W+1) .. t, position p in row p % W.
    EXPECT_EQ(v.head[slot], t + 1);
    for (int row = 0; row < W; ++row) {
      const int32_t p = v.pos_row(slot)[row];
      if (row > t) {
        EXPECT_EQ(p, -1) << "t " << t << " row " << row;
        continue;
      }
      ASSERT_GE(p, 0);
      EXPECT_EQ(p % W, row);
      EXPECT_GT(p, t - W);
      EXPECT_LE(p, t);
    }
  }
  // Every ring entry: RoPE bits exactly the input's, NoPE close to the input (quantized).
  std::vector<float> e(l.head_dim);
  for (int row = 0; row < W; ++row) {
    const int32_t p = v.pos_row(slot)[row];
    const auto x = raw_token(7, p, 0, l.head_dim);
    for (int j = 0; j < l.rope_dim; ++j)
      ASSERT_EQ(v.ring.rope_bits(slot, row, j),
                float_to_bf16_bits(x[l.nope_dim + j], Saturation::kSatFinite))
          << "row " << row << " rope " << j;
    ref::dsv4_load_ring_entry(v, slot, row, e.data());
    for (int d = 0; d < l.nope_dim; ++d) ASSERT_TRUE(std::isfinite(e[d]));
    for (int d = 0; d < l.nope_dim; ++d)
      ASSERT_LE(std::fabs(e[d] - x[d]),
                std::fabs(x[d]) * 0.0625f + 1e-30f)  // E4M3: half an ulp of 2^-3
          << "row " << row << " dim " << d;
  }
}

TEST_P(Dsv4Append, MultiRequestIsolationInOneCall) {
  const Dsv4Variant var = GetParam();
  SCOPED_TRACE("variant " + to_string(var));
  auto c = make_host_cache("test_tiny.ini", var, 16, 4, 256);
  auto& m = *c.mgr;
  const int32_t s0 = m.admit_request(10), s1 = m.admit_request(11), s2 = m.admit_request(12);
  m.admit_request(13);  // admitted, never written: must stay empty
  const auto h = m.acquire(2);
  const auto& l = c.schema.layer(2);
  const auto& v = h.read_swa_view();
  const auto before = snapshot(v);
  // Interleave three requests at different positions in one call (prefill chunks).
  auto b = make_batch(l, {10, 11, 12}, {s0, s1, s2}, {0, 5, 40}, {3, 7, 16});
  // Shuffle the token order: rows must not depend on it (pos mode) / only permute (atomic).
  {
    const size_t n = b.slots.size(), D = l.head_dim;
    std::vector<size_t> perm(n);
    for (size_t i = 0; i < n; ++i) perm[i] = i;
    std::mt19937_64 g(seed_for("dsv4.append.shuffle"));
    std::shuffle(perm.begin(), perm.end(), g);
    LayerBatch sh = b;
    for (size_t i = 0; i < n; ++i) {
      sh.slots[i] = b.slots[perm[i]];
      sh.positions[i] = b.positions[perm[i]];
      std::copy(b.raw.begin() + perm[i] * D, b.raw.begin() + (perm[i] + 1) * D,
                sh.raw.begin() + i * D);
    }
    b = sh;
  }
  h.write_swa(swa_args(b));
  const int W = v.window();
  for (auto [slot, id, start, n] :
       {std::tuple<int, int, int, int>{s0, 10, 0, 3}, {s1, 11, 5, 7}, {s2, 12, 40, 16}}) {
    std::set<int32_t> seen;
    for (int row = 0; row < W; ++row) {
      const int32_t p = v.pos_row(slot)[row];
      if (p < 0) continue;
      seen.insert(p);
      std::vector<float> e(l.head_dim);
      ref::dsv4_load_ring_entry(v, slot, row, e.data());
      const auto x = raw_token(id, p, 2, l.head_dim);
      for (int j = 0; j < l.rope_dim; ++j) ASSERT_EQ(e[l.nope_dim + j], x[l.nope_dim + j]);
      if (var.ring == Dsv4RingMode::kPosModWindow) EXPECT_EQ(row, p % W);
    }
    std::set<int32_t> want;
    for (int p = start; p < start + n; ++p) want.insert(p);
    EXPECT_EQ(seen, want) << "slot " << slot;
    EXPECT_EQ(v.head[slot], var.ring == Dsv4RingMode::kAtomicHead ? n : start + n);
  }
  // Slot 3 untouched: positions -1, head 0, payload still the 0xFF fill (NaN).
  for (int row = 0; row < W; ++row) EXPECT_EQ(v.pos_row(3)[row], -1);
  EXPECT_EQ(v.head[3], 0);
  EXPECT_TRUE(std::isnan(v.ring.load(3, 0, 0)));
  EXPECT_NE(snapshot(v), before);
}

TEST_P(Dsv4Append, BadInputThrowsAndLeavesTheRingUnchanged) {
  const Dsv4Variant var = GetParam();
  auto c = make_host_cache("test_tiny.ini", var, 16, 2, 256);
  auto& m = *c.mgr;
  const int32_t s0 = m.admit_request(1);
  const auto h = m.acquire(0);
  const auto& l = c.schema.layer(0);
  h.write_swa(swa_args(make_batch(l, {1}, {s0}, {0}, {5})));
  const auto before = snapshot(h.read_swa_view());
  auto expect_error = [&](LayerBatch b, const char* needle) {
    try {
      h.write_swa(swa_args(b));
      ADD_FAILURE() << "no error for " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "want '" << needle << "' in: " << e.what();
    }
    EXPECT_EQ(snapshot(h.read_swa_view()), before) << needle;
  };
  auto b = make_batch(l, {1}, {s0}, {5}, {3});
  b.slots[2] = 2;  // a slot outside [0, 2)
  expect_error(b, "outside [0, 2)");
  b = make_batch(l, {1}, {s0}, {5}, {3});
  b.positions[1] = -4;
  expect_error(b, "negative position");
  b = make_batch(l, {1}, {s0}, {5}, {3});
  b.positions[2] = b.positions[0] + (var.ring == Dsv4RingMode::kPosModWindow ? 16 : 0);
  expect_error(b, "earlier token of the same call");
  // 17 tokens of one slot: more than the ring holds (with pos % window, the 17th shares
  // the first one's row, which is reported first).
  expect_error(make_batch(l, {1}, {s0}, {5}, {17}), var.ring == Dsv4RingMode::kPosModWindow
                                                        ? "shares a ring row"
                                                        : "more than window=16");
}

INSTANTIATE_TEST_SUITE_P(Variants, Dsv4Append, ::testing::ValuesIn(kVariants),
                         [](const auto& info) {
                           std::string n = to_string(info.param);
                           std::replace_if(
                               n.begin(), n.end(), [](char ch) { return !std::isalnum(ch); }, '_');
                           return n;
                         });

}  // namespace
}  // namespace kvlab::test::dsv4
