// DSV4 substrate: model stacks (data/models), per-layer schema, block budget, bytes/token.
#include <gtest/gtest.h>

#include <string>

#include "reference/core/error.h"
#include "reference/dsv4/variant_names.h"
#include "sim/dsv4/schema.h"

namespace kvlab::sim {
namespace {

std::string model_path(const char* name) {
  return std::string(KVLAB_SOURCE_DIR) + "/data/models/" + name;
}

Dsv4ModelStack flash() {
  return load_dsv4_model_stack(model_path("v4_flash_like.ini"));
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const kvlab::Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Dsv4Schema, FlashStackHas43LayersSwaThenAlternating) {
  const auto s = flash();
  EXPECT_EQ(s.name, "v4-flash-like");
  ASSERT_EQ(s.num_layers(), 43);
  EXPECT_EQ(s.count(Dsv4LayerKind::kSWA), 2);
  EXPECT_EQ(s.count(Dsv4LayerKind::kCSA), 21);
  EXPECT_EQ(s.count(Dsv4LayerKind::kHCA), 20);
  EXPECT_EQ(s.layers[0], Dsv4LayerKind::kSWA);
  EXPECT_EQ(s.layers[1], Dsv4LayerKind::kSWA);
  for (int i = 2; i < 43; ++i)
    EXPECT_EQ(s.layers[i], (i % 2 == 0) ? Dsv4LayerKind::kCSA : Dsv4LayerKind::kHCA)
        << "layer " << i;
  EXPECT_EQ(s.head_dim(), 512);
  EXPECT_EQ(parse_dsv4_model_stack(to_ini(s), "roundtrip").layers, s.layers);
}

TEST(Dsv4Schema, CsaHcaSwaShapesSeedVariant) {
  const auto sc = build_dsv4_schema(flash(), Dsv4CacheConfig{});
  const auto& swa = sc.layer(0);
  const auto& csa = sc.layer(2);
  const auto& hca = sc.layer(3);
  // CSA: 32 entries/block + 32 indexer entries, seed tail 3, state keeps 2 windows of lane a.
  EXPECT_TRUE(csa.has_classical);
  EXPECT_TRUE(csa.has_indexer);
  EXPECT_EQ(csa.ratio, 4);
  EXPECT_EQ(csa.entries_per_block, 32);
  EXPECT_EQ(csa.indexer_entries_per_block, 32);
  EXPECT_EQ(csa.tail_tokens, 3);
  EXPECT_EQ(csa.state_rows, 8);
  EXPECT_TRUE(csa.overlap);
  // HCA: 1 entry/block, no indexer, tail 127.
  EXPECT_TRUE(hca.has_classical);
  EXPECT_FALSE(hca.has_indexer);
  EXPECT_EQ(hca.entries_per_block, 1);
  EXPECT_EQ(hca.indexer_entries_per_block, 0);
  EXPECT_EQ(hca.tail_tokens, 127);
  EXPECT_EQ(hca.state_rows, 128);
  EXPECT_FALSE(hca.overlap);
  // SWA: no classical pool, no tail, only the ring.
  EXPECT_FALSE(swa.has_classical);
  EXPECT_FALSE(swa.has_indexer);
  EXPECT_EQ(swa.tail_tokens, 0);
  EXPECT_EQ(swa.stream_bytes_per_slot, 0);
  EXPECT_EQ(swa.bytes_per_block(), 0);
  // Seed entry: 448 FP8 + 64 BF16 + FP32 scale = 580 B; NVFP4 key: 64 + 8 = 72 B.
  EXPECT_EQ(csa.entry_bytes, 580);
  EXPECT_EQ(csa.indexer_entry_bytes, 72);
  EXPECT_EQ(csa.bytes_per_block(), 32 * 580 + 32 * 72);
  EXPECT_EQ(hca.bytes_per_block(), 580);
  EXPECT_EQ(swa.swa_bytes_per_slot, 128 * (580 + 4) + 4);
  EXPECT_EQ(sc.bytes_per_block(), 21 * (32 * 580 + 32 * 72) + 20 * 580);
  // Streams: CSA FP32 k,z of 3*4 rows of 512 (main) + 3*4 rows of 128 (indexer); HCA 128 rows.
  EXPECT_EQ(csa.stream_bytes_per_slot, 2 * 4 * 12 * 512 + 2 * 4 * 12 * 128);
  EXPECT_EQ(hca.stream_bytes_per_slot, 2 * 4 * 128 * 512);
}

TEST(Dsv4Schema, PublicVariantRecordAndMxfp4Keys) {
  Dsv4CacheConfig c;
  c.variant = Dsv4Variant::public_v4();
  const auto sc = build_dsv4_schema(flash(), c);
  EXPECT_EQ(sc.layer(2).entry_bytes, 584);         // 448 + 128 + 7 UE8M0 + 1 pad
  EXPECT_EQ(sc.layer(2).indexer_entry_bytes, 68);  // 64 + 4 UE8M0
  EXPECT_EQ(to_string(sc.config.variant), "public_v4");
}

TEST(Dsv4Schema, BlockTokensIsAParameter) {
  Dsv4CacheConfig c;
  c.block_tokens = 256;
  const auto sc = build_dsv4_schema(flash(), c);
  EXPECT_EQ(sc.layer(2).entries_per_block, 64);
  EXPECT_EQ(sc.layer(3).entries_per_block, 2);
  EXPECT_EQ(sc.blocks_for_tokens(256), 1);
  EXPECT_EQ(sc.blocks_for_tokens(260), 2);
}

TEST(Dsv4Schema, BlocksForTokensFollowsTheFirstFlush) {
  const auto sc = build_dsv4_schema(flash(), Dsv4CacheConfig{});
  // A block is needed when its first entry is flushed: CSA entry 32b at token 128b + 3.
  EXPECT_EQ(sc.blocks_for_tokens(0), 0);
  EXPECT_EQ(sc.blocks_for_tokens(3), 0);
  EXPECT_EQ(sc.blocks_for_tokens(4), 1);
  EXPECT_EQ(sc.blocks_for_tokens(128), 1);
  EXPECT_EQ(sc.blocks_for_tokens(131), 1);
  EXPECT_EQ(sc.blocks_for_tokens(132), 2);
  EXPECT_EQ(sc.blocks_for_tokens(131072), 1024);
  EXPECT_EQ(sc.entries_for_tokens(2, 131), 32);
  EXPECT_EQ(sc.entries_for_tokens(3, 255), 1);
  EXPECT_EQ(sc.entries_for_tokens(0, 1000), 0);
  // An HCA-only stack needs its block at token 128b + 127.
  auto s = flash();
  s.layers = {Dsv4LayerKind::kHCA};
  const auto h = build_dsv4_schema(s, Dsv4CacheConfig{});
  EXPECT_EQ(h.blocks_for_tokens(127), 0);
  EXPECT_EQ(h.blocks_for_tokens(128), 1);
  s.layers = {Dsv4LayerKind::kSWA};
  EXPECT_EQ(build_dsv4_schema(s, Dsv4CacheConfig{}).blocks_for_tokens(1 << 20), 0);
}

TEST(Dsv4Schema, RatioMismatchIsAClearError) {
  Dsv4CacheConfig c;
  c.block_tokens = 100;
  const std::string e = error_of([&] { build_dsv4_schema(flash(), c); });
  EXPECT_NE(e.find("ratio mismatch"), std::string::npos) << e;
  EXPECT_NE(e.find("100"), std::string::npos) << e;
  c.block_tokens = 64;  // a multiple of 4 but not of 128
  EXPECT_NE(error_of([&] { build_dsv4_schema(flash(), c); }).find("hca"), std::string::npos);
  c.block_tokens = 0;
  EXPECT_THROW(build_dsv4_schema(flash(), c), InvalidArgument);
  // Hadamard keys need indexer_dim % 128.
  auto s = flash();
  s.indexer_dim = 96;
  c = Dsv4CacheConfig{};
  c.variant = Dsv4Variant::public_v4();
  EXPECT_NE(error_of([&] { build_dsv4_schema(s, c); }).find("multiple of 128"), std::string::npos);
  c.variant = Dsv4Variant::per_token_scales();
  c.indexer_tensor_scale = 0;
  EXPECT_THROW(build_dsv4_schema(flash(), c), InvalidArgument);
}

TEST(Dsv4Schema, ModelFileErrorsNameTheLineAndTheAllowedValues) {
  const std::string head =
      "[model]\nname = t\nnope_dim = 448\nrope_dim = 64\nindexer_dim = 128\nwindow = 128\n"
      "csa_ratio = 4\nhca_ratio = 128\n[layers]\n";
  EXPECT_EQ(parse_dsv4_model_stack(head + "swa csa x 3\nhca\n").num_layers(), 7);
  std::string e = error_of([&] { parse_dsv4_model_stack(head + "swa\nmla\n", "f.ini"); });
  EXPECT_NE(e.find("f.ini:11"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown DSV4 layer kind 'mla'"), std::string::npos) << e;
  EXPECT_NE(e.find("allowed: swa, csa, hca"), std::string::npos) << e;
  e = error_of([&] { parse_dsv4_model_stack(head + "csa x 0\n"); });
  EXPECT_NE(e.find("repeat count"), std::string::npos) << e;
  e = error_of([&] { parse_dsv4_model_stack("[model]\nname = t\n[layers]\nswa\n"); });
  EXPECT_NE(e.find("missing required key"), std::string::npos) << e;
  e = error_of([&] { parse_dsv4_model_stack(head + "[other]\n"); });
  EXPECT_NE(e.find("unknown section"), std::string::npos) << e;
  e = error_of([&] { parse_dsv4_model_stack("[model]\nheads = 3\n"); });
  EXPECT_NE(e.find("unknown key 'heads'"), std::string::npos) << e;
  e = error_of([&] {
    parse_dsv4_model_stack(head.substr(0, head.size() - 9) + "window = 12x\n[layers]\nswa\n");
  });
  EXPECT_NE(e.find("given twice"), std::string::npos) << e;
  std::string bad = head;
  bad.replace(bad.find("nope_dim = 448"), 14, "nope_dim = 100");
  e = error_of([&] { parse_dsv4_model_stack(bad + "swa\n"); });
  EXPECT_NE(e.find("multiple of 64"), std::string::npos) << e;
  e = error_of([&] { parse_dsv4_model_stack(head); });
  EXPECT_NE(e.find("no layers"), std::string::npos) << e;
  e = error_of([&] { load_dsv4_model_stack("/nonexistent/stack.ini"); });
  EXPECT_NE(e.find("/nonexistent/stack.ini"), std::string::npos) << e;
}

TEST(Dsv4Schema, VariantNamesParse) {
  EXPECT_EQ(parse_dsv4_variant("seed004"), Dsv4Variant::per_token_scales());
  EXPECT_EQ(parse_dsv4_variant("public_v4"), Dsv4Variant::public_v4());
  const auto v = parse_dsv4_variant("entry=fp8_ds_mla,ring=pos_mod_window");
  EXPECT_EQ(v.entry, Dsv4EntryFormat::kFp8DsMla);
  EXPECT_EQ(v.indexer, Dsv4IndexerFormat::kNvfp4);
  EXPECT_EQ(parse_dsv4_variant(to_string(v)), v);
  EXPECT_NE(
      error_of([] { parse_dsv4_variant("entry=fp16"); }).find("allowed: fp8_per_token, fp8_ds_mla"),
      std::string::npos);
  EXPECT_THROW(parse_dsv4_variant("colour=red"), InvalidArgument);
  EXPECT_THROW(parse_dsv4_variant(""), InvalidArgument);
}

TEST(Dsv4Schema, BudgetHoldsStatePlusBlocksAndRejectsTooSmall) {
  const auto sc = build_dsv4_schema(flash(), Dsv4CacheConfig{});
  const int64_t gib = int64_t{1} << 30;
  const auto b = compute_block_budget(sc, 8 * gib, 16, 131072);
  EXPECT_EQ(b.state_bytes, 16 * sc.state_bytes_per_slot());
  EXPECT_EQ(b.max_blocks_per_request, 1024);
  EXPECT_EQ(b.block_table_bytes, 4 * 16 * 1024);
  EXPECT_EQ(b.num_blocks, (8 * gib - b.state_bytes - b.block_table_bytes - b.align_slack_bytes) /
                              sc.bytes_per_block());
  EXPECT_GE(b.unused_bytes(), 0);
  EXPECT_LT(b.unused_bytes(), sc.bytes_per_block());
  // Exactly one request fits; one byte less does not, and the error says what was needed.
  const auto one = compute_block_budget(sc, 8 * gib, 1, 1000);
  const int64_t need =
      one.state_bytes + one.block_table_bytes + one.align_slack_bytes + 8 * sc.bytes_per_block();
  EXPECT_EQ(compute_block_budget(sc, need, 1, 1000).num_blocks, 8);
  const std::string e = error_of([&] { compute_block_budget(sc, need - 1, 1, 1000); });
  EXPECT_NE(e.find("too small for one request"), std::string::npos) << e;
  EXPECT_NE(e.find(std::to_string(need)), std::string::npos) << e;
  EXPECT_THROW(compute_block_budget(sc, gib, 0, 1000), InvalidArgument);
  EXPECT_THROW(compute_block_budget(sc, gib, 1, 0), InvalidArgument);
  EXPECT_THROW(compute_block_budget(sc, -1, 1, 10), InvalidArgument);
}

TEST(Dsv4Schema, BytesPerTokenAt128kAgainstBf16) {
  for (auto variant : {Dsv4Variant::per_token_scales(), Dsv4Variant::public_v4()}) {
    Dsv4CacheConfig c;
    c.variant = variant;
    const auto sc = build_dsv4_schema(flash(), c);
    const auto r = bytes_per_token(sc, 131072);
    const auto& csa = sc.layer(2);
    const auto& hca = sc.layer(3);
    EXPECT_EQ(r.blocks, 1024);
    // 131072 tokens = 32768 CSA entries (+ keys) in 21 layers, 1024 HCA entries in 20 layers.
    EXPECT_EQ(r.classical_bytes, 21 * 32768 * csa.entry_bytes + 20 * 1024 * hca.entry_bytes);
    EXPECT_EQ(r.indexer_bytes, 21 * 32768 * csa.indexer_entry_bytes);
    EXPECT_EQ(r.bf16_dense_per_token, 43 * 512 * 2);
    EXPECT_LT(r.per_token, 0.1 * r.bf16_dense_per_token);
    std::printf(
        "[dsv4] %s: %.1f B/token at 128k (paged %.1f, rings %.1f, streams %.1f) vs BF16 dense %.0f "
        "B/token "
        "(%.2f%%)\n",
        to_string(variant).c_str(), r.per_token, double(r.paged_bytes) / r.context_tokens,
        double(r.ring_bytes) / r.context_tokens, double(r.stream_bytes) / r.context_tokens,
        r.bf16_dense_per_token, 100.0 * r.per_token / r.bf16_dense_per_token);
  }
}

}  // namespace
}  // namespace kvlab::sim
