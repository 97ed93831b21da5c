// test_split_arrival.cpp: the arrival count of v12_mma_decode_last_block_merge and the tile
// claims of v16_mma_decode_shared_tiles (gpu/attention/split_arrival.h), run on std::atomic:
// the same split_arrive / shared_tile_claim_* the kernels run with atomicCAS and atomicAdd.
// Exactly one arrival of a launch is the n-th whatever the word held before (reset, fill
// bytes, NaN, random bytes, another launch's tag with any count), in order and from racing
// threads, and replays of one tag (a CUDA graph) count again from the reset word. Racing
// claimers take every tile index exactly once, whatever the word held on entry, and after the
// merge's reset a replay of the same tag claims them all again.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "gpu/attention/split_arrival.h"

namespace kvlab::test {
namespace {

using gpu::SplitArrival;

uint32_t arrive(std::atomic<uint64_t>& word, uint64_t tag) {
  return gpu::split_arrive(
      tag,
      [&](uint64_t expect, uint64_t want) {
        word.compare_exchange_strong(expect, want);
        return expect;  // what the word held (updated by a failed exchange)
      },
      [&](uint64_t v) { return word.fetch_add(v); });
}

// A warp's claims on `word` until an index >= n (the item's shared tiles run out): the first
// through shared_tile_claim_first / _resolve, the later ones by adding. The indices < n.
std::vector<uint32_t> claim_until(std::atomic<uint64_t>& word, uint64_t tag, uint32_t n) {
  auto cas = [&](uint64_t expect, uint64_t want) {
    word.compare_exchange_strong(expect, want);
    return expect;
  };
  auto add = [&](uint64_t v) { return word.fetch_add(v); };
  auto load = [&] { return word.load(); };
  std::vector<uint32_t> got;
  uint32_t i = gpu::shared_tile_claim_resolve(tag, gpu::shared_tile_claim_first(tag, cas, add),
                                              load, cas, add);
  while (i < n) {
    got.push_back(i);
    i = SplitArrival::count_of(add(1));
  }
  return got;
}

uint64_t two_floats(float lo, float hi) {
  uint32_t a, b;
  std::memcpy(&a, &lo, 4);
  std::memcpy(&b, &hi, 4);
  return (static_cast<uint64_t>(b) << 32) | a;
}

// What a workspace word may hold on entry.
std::vector<uint64_t> entry_words(uint64_t tag, uint32_t n) {
  std::mt19937_64 rng(7);
  std::vector<uint64_t> w = {SplitArrival::kReset, ~uint64_t{0}, two_floats(NAN, NAN),
                             two_floats(0.25f, -3.5f), two_floats(0.0f, 1e-30f),
                             SplitArrival::word(SplitArrival::tag(12345), n - 1),
                             SplitArrival::word(SplitArrival::tag(12345), n),
                             SplitArrival::word(tag ^ 1, SplitArrival::kCountMask), 0x5A5A5A5A5A5A5A5Aull};
  for (int i = 0; i < 16; ++i) w.push_back(rng());
  return w;
}

TEST(SplitArrival, TagsCarryTheirTopByteAndNeverMatchFillBytesOrNaN) {
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t t = gpu::next_split_arrival_tag();
    EXPECT_EQ(t >> 32, SplitArrival::kTagTop) << std::hex << t;
    EXPECT_LT(t, uint64_t{1} << 40) << "a tag is 40 bits";
    EXPECT_TRUE(seen.insert(t).second) << "launches in a row share a tag";
    for (uint64_t fill : {uint64_t{0}, ~uint64_t{0}, two_floats(NAN, NAN), two_floats(1.0f, 1.0f)})
      EXPECT_NE(SplitArrival::tag_of(fill), t);
  }
  EXPECT_EQ(SplitArrival::tag_of(SplitArrival::word(SplitArrival::tag(99), 5)),
            SplitArrival::tag(99));
  EXPECT_EQ(SplitArrival::count_of(SplitArrival::word(SplitArrival::tag(99), 5)), 5u);
}

TEST(SplitArrival, ExactlyTheNthArrivalIsLastWhateverTheWordHeld) {
  const uint64_t tag = SplitArrival::tag(0xC0FFEE);
  for (uint32_t n : {1u, 2u, 3u, 8u, 47u}) {
    for (uint64_t entry : entry_words(tag, n)) {
      std::atomic<uint64_t> word{entry};
      for (uint32_t i = 1; i <= n; ++i) EXPECT_EQ(arrive(word, tag), i) << n << " " << std::hex << entry;
      EXPECT_EQ(word.load(), SplitArrival::word(tag, n));
    }
  }
}

TEST(SplitArrival, RacingBlocksAgreeOnOneLastAndReplaysCountAgain) {
  constexpr int kThreads = 8;
  const uint64_t tag = gpu::next_split_arrival_tag();
  for (uint64_t entry : entry_words(tag, kThreads)) {
    std::atomic<uint64_t> word{entry};
    for (int replay = 0; replay < 10; ++replay) {  // one tag throughout: a graph's replays
      std::atomic<int> last{0}, start{0};
      std::vector<std::thread> ts;
      for (int t = 0; t < kThreads; ++t)
        ts.emplace_back([&] {
          start.fetch_add(1);
          while (start.load() < kThreads) std::this_thread::yield();
          if (arrive(word, tag) == kThreads) {
            last.fetch_add(1);
            word.store(SplitArrival::kReset);  // what the merging block does
          }
        });
      for (auto& t : ts) t.join();
      ASSERT_EQ(last.load(), 1) << "replay " << replay << " entry " << std::hex << entry;
      ASSERT_EQ(word.load(), SplitArrival::kReset);
    }
  }
}

// One warp alone: indices 0, 1, ... in order whatever the word held, and one claim past the end.
TEST(SharedTileClaim, OneClaimerTakesEveryIndexInOrderWhateverTheWordHeld) {
  const uint64_t tag = SplitArrival::tag(0xBEEF);
  for (uint32_t n : {0u, 1u, 2u, 37u}) {
    for (uint64_t entry : entry_words(tag, n + 1)) {
      if (SplitArrival::tag_of(entry) == tag) continue;  // a live word of this launch: not an entry
      std::atomic<uint64_t> word{entry};
      const std::vector<uint32_t> got = claim_until(word, tag, n);
      ASSERT_EQ(got.size(), n) << std::hex << entry;
      for (uint32_t i = 0; i < n; ++i) EXPECT_EQ(got[i], i);
      EXPECT_EQ(word.load(), SplitArrival::word(tag, n + 1)) << "n claims and the one past the end";
    }
  }
}

// Racing warps (the splits' warps of one item): every index below n taken exactly once, whatever
// the word held on entry; the merge's reset, then a replay of the same tag (a CUDA graph) takes
// them all again. Claims past the end: one per warp.
TEST(SharedTileClaim, RacingClaimersTakeEveryIndexOnceAndReplaysClaimAgain) {
  constexpr int kThreads = 8;
  constexpr uint32_t kTiles = 3000;
  const uint64_t tag = gpu::next_split_arrival_tag();
  for (uint64_t entry : entry_words(tag, kThreads)) {
    std::atomic<uint64_t> word{entry};
    for (int replay = 0; replay < 4; ++replay) {
      std::vector<std::vector<uint32_t>> got(kThreads);
      std::atomic<int> start{0};
      std::vector<std::thread> ts;
      for (int t = 0; t < kThreads; ++t)
        ts.emplace_back([&, t] {
          start.fetch_add(1);
          while (start.load() < kThreads) std::this_thread::yield();
          got[t] = claim_until(word, tag, kTiles);
        });
      for (auto& t : ts) t.join();
      std::vector<int> seen(kTiles, 0);
      for (const auto& g : got)
        for (uint32_t i : g) ++seen[i];
      for (uint32_t i = 0; i < kTiles; ++i)
        ASSERT_EQ(seen[i], 1) << "index " << i << " replay " << replay << " entry " << std::hex << entry;
      ASSERT_EQ(word.load(), SplitArrival::word(tag, kTiles + kThreads));
      word.store(SplitArrival::kReset);  // what the merge kernel does after the grid
    }
  }
}

}  // namespace
}  // namespace kvlab::test
