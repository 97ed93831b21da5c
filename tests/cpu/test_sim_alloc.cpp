// test_sim_alloc.cpp: BlockAllocator LIFO semantics and errors; BlockTable / slot mapping.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "sim/alloc/block_allocator.h"
#include "sim/alloc/block_table.h"
#include "tests/common/test_env.h"

namespace kvlab::sim {
namespace {

TEST(SimAlloc, FirstAcquiresReturnAscendingIds) {
  BlockAllocator a(5);
  EXPECT_EQ(a.capacity(), 5);
  EXPECT_EQ(a.num_free(), 5);
  EXPECT_EQ(a.stack(), (std::vector<int32_t>{4, 3, 2, 1, 0}));
  for (int32_t i = 0; i < 5; ++i) EXPECT_EQ(a.acquire(), i);
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_EQ(a.num_used(), 5);
}

TEST(SimAlloc, ReleasePushesOnTopLifo) {
  BlockAllocator a(6);
  std::vector<int32_t> got = a.acquire_n(4);  // 0 1 2 3
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3}));
  a.release(2);
  a.release(0);
  EXPECT_EQ(a.acquire(), 0);  // last released first
  EXPECT_EQ(a.acquire(), 2);
  EXPECT_EQ(a.acquire(), 4);              // then the untouched remainder in order
  a.release(std::vector<int32_t>{1, 3});  // pushed 1 then 3: 3 on top
  EXPECT_EQ(a.stack().back(), 3);
  EXPECT_EQ(a.acquire_n(3), (std::vector<int32_t>{3, 1, 5}));
}

TEST(SimAlloc, BatchAcquireEqualsSingleAcquires) {
  // A random operation sequence replayed on two allocators, one with batches and one with
  // single calls, must leave identical stacks: the property the GPU stack is tested against.
  const uint64_t seed = test::seed_for("sim_alloc_batch");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  BlockAllocator batch(97), single(97);
  std::vector<int32_t> held;
  for (int op = 0; op < 2000; ++op) {
    if (rng() % 2 == 0) {
      const int64_t n = static_cast<int64_t>(rng() % 9);
      if (!batch.can_acquire(n)) {
        EXPECT_THROW(batch.acquire_n(n), OutOfBlocks);
        continue;
      }
      std::vector<int32_t> b = batch.acquire_n(n);
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(single.acquire(), b[i]);
      held.insert(held.end(), b.begin(), b.end());
    } else if (!held.empty()) {
      std::shuffle(held.begin(), held.end(), rng);
      const size_t n = std::min<size_t>(held.size(), rng() % 7);
      std::vector<int32_t> r(held.end() - n, held.end());
      held.resize(held.size() - n);
      batch.release(r);
      for (int32_t id : r) single.release(id);
    }
    ASSERT_EQ(batch.stack(), single.stack()) << "after op " << op;
  }
  EXPECT_EQ(batch.total_acquired(), single.total_acquired());
  EXPECT_EQ(batch.num_used(), static_cast<int32_t>(held.size()));
}

TEST(SimAlloc, ExhaustionThrowsTypedErrorWithoutChange) {
  BlockAllocator a(3);
  a.acquire_n(2);
  const auto before = a.stack();
  try {
    a.acquire_n(2);
    FAIL() << "expected OutOfBlocks";
  } catch (const OutOfBlocks& e) {
    EXPECT_EQ(e.requested(), 2);
    EXPECT_EQ(e.num_free(), 1);
    EXPECT_EQ(e.capacity(), 3);
    EXPECT_NE(std::string(e.what()).find("requested 2, 1 free of 3"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(a.stack(), before);
  EXPECT_EQ(a.acquire(), 2);
  EXPECT_THROW(a.acquire(), OutOfBlocks);
  BlockAllocator empty(0);
  EXPECT_THROW(empty.acquire(), OutOfBlocks);
  EXPECT_EQ(empty.acquire_n(0).size(), 0u);
}

TEST(SimAlloc, DoubleFreeAndUnknownIdsAreErrors) {
  BlockAllocator a(4);
  a.acquire_n(3);                               // 0 1 2 used, 3 free
  EXPECT_THROW(a.release(3), InvalidArgument);  // never acquired
  EXPECT_THROW(a.release(4), InvalidArgument);  // out of range
  EXPECT_THROW(a.release(-1), InvalidArgument);
  a.release(1);
  try {
    a.release(1);
    FAIL() << "expected a double-free error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("double free of block 1"), std::string::npos) << e.what();
  }
  // A batch with a repeated id or a bad id releases nothing.
  const auto before = a.stack();
  EXPECT_THROW(a.release(std::vector<int32_t>{0, 2, 0}), InvalidArgument);
  EXPECT_THROW(a.release(std::vector<int32_t>{0, 9}), InvalidArgument);
  EXPECT_EQ(a.stack(), before);
  EXPECT_FALSE(a.is_free(0));
  EXPECT_FALSE(a.is_free(2));
  a.release(std::vector<int32_t>{0, 2});
  EXPECT_EQ(a.num_free(), 4);
  EXPECT_THROW(a.is_free(7), InvalidArgument);
  EXPECT_THROW(BlockAllocator(-1), InvalidArgument);
  EXPECT_THROW(a.acquire_n(-2), InvalidArgument);
}

TEST(SimBlockTable, SlotsFollowBlockTimesSizePlusOffset) {
  BlockAllocator a(10);
  BlockTable t(&a, 4);
  t.add_sequence(100);
  t.add_sequence(200);
  std::vector<int64_t> s1, s2;
  t.append_tokens(100, 5, &s1);  // blocks 0, 1
  t.append_tokens(200, 3, &s2);  // block 2
  t.append_tokens(100, 4, &s1);  // fills block 1, then block 3
  EXPECT_EQ(t.blocks(100), (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(s1, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 12}));
  EXPECT_EQ(s2, (std::vector<int64_t>{8, 9, 10}));
  EXPECT_EQ(t.slot(100, 8), 12);
  EXPECT_EQ(t.num_tokens(100), 9);
  EXPECT_THROW(t.slot(100, 9), InvalidArgument);

  std::vector<int32_t> bt;
  t.build_block_table({200, 100}, 4, -1, &bt);
  EXPECT_EQ(bt, (std::vector<int32_t>{2, -1, -1, -1, 0, 1, 3, -1}));
  EXPECT_EQ(t.seq_lens({100, 200}), (std::vector<int32_t>{9, 3}));
  EXPECT_EQ(t.max_blocks({100, 200}), 3);
  EXPECT_THROW(t.build_block_table({100}, 2, -1, &bt), InvalidArgument);  // would truncate

  // Freeing pushes tail-first: the sequence's first block is the next one handed out.
  t.free_sequence(100);
  EXPECT_EQ(a.num_free(), 9);
  EXPECT_EQ(a.stack().back(), 0);
  EXPECT_THROW(t.blocks(100), InvalidArgument);
}

TEST(SimBlockTable, ExhaustionLeavesTableUnchangedAndBadInputsFail) {
  BlockAllocator a(2);
  BlockTable t(&a, 16);
  t.add_sequence(1);
  t.append_tokens(1, 17, nullptr);  // 2 blocks
  std::vector<int64_t> slots;
  EXPECT_THROW(t.append_tokens(1, 16, &slots), OutOfBlocks);
  EXPECT_EQ(t.num_tokens(1), 17);
  EXPECT_TRUE(slots.empty());
  t.append_tokens(1, 15, &slots);  // still fits in block 1 (tokens 17..31)
  EXPECT_EQ(slots.front(), 16 + 1);
  EXPECT_EQ(slots.back(), 16 + 15);
  t.append_tokens(1, 0, &slots);
  EXPECT_THROW(t.append_tokens(1, -1, &slots), InvalidArgument);
  EXPECT_THROW(t.append_tokens(2, 1, &slots), InvalidArgument);
  EXPECT_THROW(t.add_sequence(1), InvalidArgument);
  EXPECT_THROW(BlockTable(&a, 0), InvalidArgument);
  EXPECT_THROW(BlockTable(nullptr, 16), InvalidArgument);
}

}  // namespace
}  // namespace kvlab::sim
