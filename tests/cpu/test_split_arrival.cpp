// test_split_arrival.cpp: the arrival count of v12_mma_decode_last_block_merge
// (gpu/attention/split_arrival.h), run on std::atomic: the same split_arrive the kernel runs
// with atomicCAS. Exactly one arrival of a launch is the n-th whatever the word held before
// (reset, fill bytes, NaN, random bytes, another launch's tag with any count), in order and
// from racing threads, and replays of one tag (a CUDA graph) count again from the reset word.
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

}  // namespace
}  // namespace kvlab::test
