// DSV4 substrate control plane: KVCacheManager lifecycle on the host backend, handles,
// pool shapes against the architecture spec, bad input leaving the state consistent.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "reference/core/error.h"
#include "sim/dsv4/arena.h"
#include "sim/dsv4/host_backend.h"
#include "sim/dsv4/manager.h"

namespace kvlab::sim {
namespace {

std::string model_path(const char* name) {
  return std::string(KVLAB_SOURCE_DIR) + "/data/models/" + name;
}

struct Fixture {
  Dsv4CacheSchema schema;
  Dsv4BlockBudget budget;
  std::unique_ptr<KVCacheManager> mgr;
  Dsv4HostBackend* host = nullptr;
};

// test_tiny: swa, (csa, hca) x 2; ratios 4 / 16, window 16; block_tokens 16:
// CSA 4 entries per block, HCA 1. Budget: `blocks` blocks, `slots` request slots.
Fixture make(int64_t blocks, int32_t slots, int64_t max_ctx = 48,
             Dsv4Variant v = Dsv4Variant::per_token_scales()) {
  Fixture f;
  Dsv4CacheConfig c;
  c.block_tokens = 16;
  c.variant = v;
  f.schema = build_dsv4_schema(load_dsv4_model_stack(model_path("test_tiny.ini")), c);
  const auto probe = compute_block_budget(f.schema, int64_t{1} << 40, slots, max_ctx);
  const int64_t fixed = probe.state_bytes + probe.block_table_bytes + probe.align_slack_bytes;
  f.budget =
      compute_block_budget(f.schema, fixed + blocks * f.schema.bytes_per_block(), slots, max_ctx);
  auto backend = std::make_unique<Dsv4HostBackend>();
  f.host = backend.get();
  f.mgr = std::make_unique<KVCacheManager>(f.schema, f.budget, std::move(backend));
  return f;
}

template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const kvlab::Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Dsv4Manager, PoolShapesMatchTheArchitectureSpec) {
  for (auto v : {Dsv4Variant::per_token_scales(), Dsv4Variant::public_v4()}) {
    Dsv4CacheConfig c;
    c.variant = v;
    const auto sc = build_dsv4_schema(load_dsv4_model_stack(model_path("test_mixed.ini")), c);
    const auto b = compute_block_budget(sc, int64_t{64} << 20, 2, 1024);
    auto backend = std::make_unique<Dsv4HostBackend>();
    KVCacheManager m(sc, b, std::move(backend));
    const auto swa = m.acquire(0), csa = m.acquire(1), hca = m.acquire(2);
    EXPECT_EQ(swa.kind(), Dsv4LayerKind::kSWA);
    EXPECT_EQ(swa.read_swa_view().window(), 128);
    EXPECT_EQ(swa.read_swa_view().num_slots(), 2);
    EXPECT_EQ(swa.read_swa_view().ring.nope_dim, 448);
    EXPECT_EQ(swa.read_swa_view().ring.rope_dim, 64);
    EXPECT_EQ(swa.read_swa_view().ring.format, c.variant.entry);
    EXPECT_THROW(swa.read_classical_view(), InvalidArgument);
    EXPECT_THROW(swa.read_indexer_view(), InvalidArgument);
    EXPECT_THROW(swa.stream_view(), InvalidArgument);
    EXPECT_EQ(csa.read_classical_view().pool.rows, 32);
    EXPECT_EQ(csa.read_classical_view().pool.num_pages, b.num_blocks);
    EXPECT_EQ(csa.read_classical_view().ratio, 4);
    EXPECT_EQ(csa.read_classical_view().max_blocks_per_request, 8);
    EXPECT_EQ(csa.read_indexer_view().rows, 32);
    EXPECT_EQ(csa.read_indexer_view().dim, 128);
    EXPECT_EQ(csa.read_indexer_view().format, c.variant.indexer);
    EXPECT_TRUE(csa.stream_view().overlap);
    EXPECT_EQ(csa.stream_view().dim, 512);
    EXPECT_EQ(csa.indexer_stream_view().dim, 128);
    EXPECT_EQ(hca.read_classical_view().pool.rows, 1);
    EXPECT_EQ(hca.read_classical_view().ratio, 128);
    EXPECT_FALSE(hca.stream_view().overlap);
    EXPECT_EQ(hca.stream_view().kb, nullptr);
    EXPECT_THROW(hca.read_indexer_view(), InvalidArgument);
    // Sizes: the views' bytes are the schema's bytes, and the arena fits the budget.
    EXPECT_EQ(csa.read_classical_view().pool.bytes(),
              b.num_blocks * sc.layer(1).classical_bytes_per_block);
    EXPECT_EQ(csa.read_indexer_view().bytes(), b.num_blocks * sc.layer(1).indexer_bytes_per_block);
    EXPECT_EQ(hca.stream_view().bytes(), 2 * sc.layer(2).stream_bytes_per_slot);
    EXPECT_EQ(csa.stream_view().bytes() + csa.indexer_stream_view().bytes(),
              2 * sc.layer(1).stream_bytes_per_slot);
    EXPECT_LE(m.backend().memory_bytes(), b.memory_bytes);
    EXPECT_GE(m.backend().memory_bytes(), b.state_bytes + b.pool_bytes + b.block_table_bytes);
  }
}

TEST(Dsv4Manager, AdmitAllocateReleaseRecycle) {
  auto f = make(/*blocks=*/10, /*slots=*/3);
  auto& m = *f.mgr;
  EXPECT_EQ(m.admit_request(100), 0);
  EXPECT_EQ(m.admit_request(200), 1);
  EXPECT_EQ(m.num_active(), 2);
  // 3 tokens: no CSA entry yet, no block. 4 tokens: CSA entry 0 -> block.
  m.append_tokens(100, 3);
  EXPECT_TRUE(m.blocks_of(100).empty());
  m.append_tokens(100, 1);
  EXPECT_EQ(m.blocks_of(100), (std::vector<int32_t>{0}));
  m.append_tokens(200, 17);  // 4 CSA entries fill block 0 of the request; the 5th needs a second
  EXPECT_EQ(m.blocks_of(200), (std::vector<int32_t>{1}));
  m.append_tokens(200, 3);  // 20 tokens -> 5 CSA entries -> 2 blocks
  EXPECT_EQ(m.blocks_of(200), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(m.allocate_block(100), 3);
  EXPECT_EQ(m.num_free_blocks(), 6);
  // The backend's block table mirrors the host decisions.
  const int32_t* row = f.host->block_table_row(m.slot_of(200));
  EXPECT_EQ(row[0], 1);
  EXPECT_EQ(row[1], 2);
  EXPECT_EQ(row[2], -1);
  // Release: blocks back last-first, slot freed and emptied; recycle gives them out again.
  const auto views = m.acquire(0).read_swa_view();
  views.head[m.slot_of(200)] = 7;
  views.pos_row(m.slot_of(200))[3] = 42;
  m.release_request(200);
  EXPECT_FALSE(m.has_request(200));
  EXPECT_EQ(m.num_free_blocks(), 8);
  EXPECT_EQ(row[0], -1);
  EXPECT_EQ(views.head[1], 0);
  EXPECT_EQ(views.pos_row(1)[3], -1);
  EXPECT_EQ(m.admit_request(300), 1);  // the freed slot first (LIFO)
  m.append_tokens(300, 20);
  EXPECT_EQ(m.blocks_of(300),
            (std::vector<int32_t>{1, 2}));  // the released request's blocks, same order
  EXPECT_EQ(m.num_tokens(300), 20);
}

TEST(Dsv4Manager, ExhaustionIsOutOfBlocksAndChangesNothing) {
  auto f = make(/*blocks=*/3, /*slots=*/2);
  auto& m = *f.mgr;
  m.admit_request(1);
  m.admit_request(2);
  m.append_tokens(1, 8);   // 2 CSA entries: 1 block
  m.append_tokens(2, 20);  // 5 entries: 2 blocks
  EXPECT_EQ(m.num_free_blocks(), 0);
  EXPECT_FALSE(m.can_admit(4));
  EXPECT_THROW(m.append_tokens(1, 16), OutOfBlocks);
  EXPECT_EQ(m.num_tokens(1), 8);
  EXPECT_EQ(m.blocks_of(1).size(), 1u);
  EXPECT_THROW(m.allocate_block(1), OutOfBlocks);
  EXPECT_EQ(m.blocks_of(1).size(), 1u);
  EXPECT_EQ(m.allocator().num_used(), 3);
  // Freeing one request makes room again.
  m.release_request(2);
  m.append_tokens(1, 16);
  EXPECT_EQ(m.blocks_of(1).size(), 2u);
}

TEST(Dsv4Manager, BadInputIsAClearErrorAndTheStateStaysConsistent) {
  auto f = make(/*blocks=*/4, /*slots=*/2, /*max_ctx=*/64);
  auto& m = *f.mgr;
  m.admit_request(1);
  m.append_tokens(1, 10);
  const auto blocks = m.blocks_of(1);
  const auto free_before = m.allocator().stack();
  std::string e = error_of([&] { m.admit_request(1); });
  EXPECT_NE(e.find("already admitted"), std::string::npos) << e;
  e = error_of([&] { m.release_request(99); });
  EXPECT_NE(e.find("unknown request id 99"), std::string::npos) << e;
  e = error_of([&] { m.append_tokens(99, 1); });
  EXPECT_NE(e.find("unknown request id 99"), std::string::npos) << e;
  e = error_of([&] { m.append_tokens(1, -1); });
  EXPECT_NE(e.find(">= 0"), std::string::npos) << e;
  e = error_of([&] { m.append_tokens(1, 60); });  // 70 > max_context_tokens 64
  EXPECT_NE(e.find("max_context_tokens=64"), std::string::npos) << e;
  e = error_of([&] { m.acquire(5); });
  EXPECT_NE(e.find("layer 5 outside [0, 5)"), std::string::npos) << e;
  m.admit_request(2);
  e = error_of([&] { m.admit_request(3); });
  EXPECT_NE(e.find("all 2 request slots are in use"), std::string::npos) << e;
  // Nothing changed.
  EXPECT_EQ(m.num_active(), 2);
  EXPECT_EQ(m.blocks_of(1), blocks);
  EXPECT_EQ(m.num_tokens(1), 10);
  EXPECT_EQ(m.allocator().stack(), free_before);
  // The block-table limit (max_context_tokens 64 -> 4 blocks per request).
  m.append_tokens(1, 54);
  EXPECT_EQ(m.blocks_of(1).size(), 4u);
  e = error_of([&] { m.allocate_block(1); });
  EXPECT_NE(e.find("block table's limit"), std::string::npos) << e;
  EXPECT_EQ(m.blocks_of(1).size(), 4u);
  // A budget computed for another schema is rejected.
  auto other = f.budget;
  other.bytes_per_block += 1;
  EXPECT_THROW(KVCacheManager(f.schema, other, std::make_unique<Dsv4HostBackend>()),
               InvalidArgument);
}

TEST(Dsv4Manager, AcquireIsZeroAllocationAndStable) {
  auto f = make(4, 2);
  auto& m = *f.mgr;
  const int64_t bytes = m.backend().memory_bytes();
  const auto h1 = m.acquire(1);
  m.admit_request(5);
  m.append_tokens(5, 12);
  const auto h2 = m.acquire(1);
  EXPECT_EQ(m.backend().memory_bytes(), bytes);
  EXPECT_EQ(h1.read_classical_view().pool.data, h2.read_classical_view().pool.data);
  EXPECT_EQ(h1.read_swa_view().ring.data, h2.read_swa_view().ring.data);
  EXPECT_EQ(h1.read_classical_view().block_table, h2.read_indexer_view().block_table);
}

}  // namespace
}  // namespace kvlab::sim
