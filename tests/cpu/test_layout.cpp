// test_layout.cpp: the address math of kv_layout.h: bijectivity, hand-computed offsets,
// split-x chunking per format, 64-bit offsets, scale indices, FP4 nibble addressing, and
// geometry validation.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "reference/attention/kv_access.h"
#include "reference/core/error.h"
#include "reference/layout/kv_layout.h"
#include "reference/layout/layout_names.h"

namespace kvlab {
namespace {

PageGeometry geom(KvLayout l, KvFormat f, int64_t blocks, int heads, int dim, int bs) {
  PageGeometry g;
  g.layout = l;
  g.format = f;
  g.num_blocks = blocks;
  g.num_kv_heads = heads;
  g.head_dim = dim;
  g.block_size = bs;
  return g;
}

// Smallest head_dim the (layout, format) pair accepts.
int min_dim(KvLayout l, KvFormat f) {
  PageGeometry g = geom(l, f, 1, 1, 2, 1);
  int d = 2;
  if (l == KvLayout::kSplitX) d = std::max(d, g.x());
  if (g.scale_group()) d = std::max(d, g.scale_group());
  return d;
}

TEST(Layout, EveryIndexIsABijectionOntoThePool) {
  for (KvLayout l : all_kv_layouts())
    for (KvFormat f : all_kv_formats())
      for (int bs : {1, 3, 16}) {
        const int D = 2 * min_dim(l, f);
        const PageGeometry g = geom(l, f, 3, 2, D, bs);
        ASSERT_NO_THROW(validate(g));
        std::vector<int> k_hits(static_cast<size_t>(g.elements()), 0), v_hits(k_hits);
        for (int64_t b = 0; b < g.num_blocks; ++b)
          for (int h = 0; h < g.num_kv_heads; ++h)
            for (int s = 0; s < bs; ++s)
              for (int d = 0; d < D; ++d) {
                const int64_t ki = g.k_index(b, h, s, d), vi = g.v_index(b, h, s, d);
                ASSERT_TRUE(ki >= 0 && ki < g.elements()) << to_string(l) << " " << to_string(f);
                ASSERT_TRUE(vi >= 0 && vi < g.elements()) << to_string(l) << " " << to_string(f);
                ++k_hits[static_cast<size_t>(ki)];
                ++v_hits[static_cast<size_t>(vi)];
                // A page is contiguous: its elements stay inside [b, b+1) * elements_per_block.
                ASSERT_EQ(ki / g.elements_per_block(), b);
                ASSERT_EQ(vi / g.elements_per_block(), b);
              }
        for (size_t i = 0; i < k_hits.size(); ++i) {
          ASSERT_EQ(k_hits[i], 1) << to_string(l) << "/" << to_string(f) << " K element " << i;
          ASSERT_EQ(v_hits[i], 1) << to_string(l) << "/" << to_string(f) << " V element " << i;
        }
      }
}

TEST(Layout, HandComputedOffsets) {
  // [num_blocks=5, block_size=4, heads=3, dim=8]: (2, 1, 3, 5) -> ((2*4+3)*3+1)*8+5
  const PageGeometry nhd = geom(KvLayout::kNHD, KvFormat::kBF16, 5, 3, 8, 4);
  EXPECT_EQ(nhd.k_index(2, 1, 3, 5), ((2 * 4 + 3) * 3 + 1) * 8 + 5);
  EXPECT_EQ(nhd.k_index(2, 1, 3, 5), 277);
  EXPECT_EQ(nhd.v_index(2, 1, 3, 5), 277);
  // [num_blocks, heads=3, block_size=4, dim=8]: (2, 1, 3, 5) -> ((2*3+1)*4+3)*8+5
  const PageGeometry hnd = geom(KvLayout::kHND, KvFormat::kBF16, 5, 3, 8, 4);
  EXPECT_EQ(hnd.k_index(2, 1, 3, 5), 253);
  EXPECT_EQ(hnd.v_index(2, 1, 3, 5), 253);
  // split-x bf16 (x = 8), dim 16: K [5, 3, 16/8, 4, 8]: (2,1,3,13) -> (((2*3+1)*2+1)*4+3)*8+5
  const PageGeometry sx = geom(KvLayout::kSplitX, KvFormat::kBF16, 5, 3, 16, 4);
  EXPECT_EQ(sx.k_index(2, 1, 3, 13), (((2 * 3 + 1) * 2 + 1) * 4 + 3) * 8 + 5);
  EXPECT_EQ(sx.k_index(2, 1, 3, 13), 509);
  // V [5, 3, 16, 4]: (2,1,3,13) -> ((2*3+1)*16+13)*4+3
  EXPECT_EQ(sx.v_index(2, 1, 3, 13), 503);
  // First and last element of the pool.
  for (const PageGeometry& g : {nhd, hnd, sx}) {
    EXPECT_EQ(g.k_index(0, 0, 0, 0), 0);
    EXPECT_EQ(g.k_index(g.num_blocks - 1, g.num_kv_heads - 1, g.block_size - 1, g.head_dim - 1),
              g.elements() - 1);
    EXPECT_EQ(g.v_index(g.num_blocks - 1, g.num_kv_heads - 1, g.block_size - 1, g.head_dim - 1),
              g.elements() - 1);
  }
}

TEST(Layout, SplitXChunkIsSixteenBytesPerFormat) {
  struct Expect {
    KvFormat f;
    int x;
  };
  for (const Expect e :
       {Expect{KvFormat::kBF16, 8}, Expect{KvFormat::kFP16, 8}, Expect{KvFormat::kFP8E4M3, 16},
        Expect{KvFormat::kFP8E4M3PerToken, 16}, Expect{KvFormat::kFP8E5M2, 16},
        Expect{KvFormat::kNVFP4, 32}, Expect{KvFormat::kMXFP4, 32}}) {
    const PageGeometry g = geom(KvLayout::kSplitX, e.f, 2, 2, 64, 5);
    EXPECT_EQ(g.x(), e.x) << to_string(e.f);
    EXPECT_EQ(g.x() * g.elem_bits(), 128) << to_string(e.f);
    // Within a chunk dims are consecutive; the next chunk of the same slot is block_size*x on.
    EXPECT_EQ(g.k_index(1, 1, 2, 1) - g.k_index(1, 1, 2, 0), 1);
    EXPECT_EQ(g.k_index(1, 1, 2, e.x) - g.k_index(1, 1, 2, 0), int64_t{5} * e.x);
    // Consecutive slots are x apart in K and adjacent in V (token-minor).
    EXPECT_EQ(g.k_index(1, 1, 3, 0) - g.k_index(1, 1, 2, 0), e.x);
    EXPECT_EQ(g.v_index(1, 1, 3, 7) - g.v_index(1, 1, 2, 7), 1);
  }
}

TEST(Layout, SixtyFourBitOffsetsBeyondTwoToThe31) {
  // 2^21 pages x 8 heads x 16 slots x 128 dims = 2^35 elements: nothing allocated, only math.
  for (KvLayout l : all_kv_layouts()) {
    const PageGeometry g = geom(l, KvFormat::kBF16, int64_t{1} << 21, 8, 128, 16);
    EXPECT_EQ(g.elements(), int64_t{1} << 35);
    EXPECT_EQ(g.bytes(), int64_t{1} << 36);
    const int64_t last = g.k_index(g.num_blocks - 1, 7, 15, 127);
    EXPECT_EQ(last, (int64_t{1} << 35) - 1) << to_string(l);
    EXPECT_EQ(g.v_index(g.num_blocks - 1, 7, 15, 127), (int64_t{1} << 35) - 1) << to_string(l);
    // A page just past 2^31 elements: offset = page * elements_per_block exactly.
    const int64_t page = (int64_t{1} << 31) / g.elements_per_block() + 1;
    EXPECT_EQ(g.k_index(page, 0, 0, 0), page * g.elements_per_block()) << to_string(l);
    EXPECT_GT(g.k_index(page, 0, 0, 0), int64_t{1} << 31);
  }
  const PageGeometry g =
      geom(KvLayout::kNHD, KvFormat::kFP8E4M3PerToken, int64_t{1} << 28, 4, 64, 8);
  EXPECT_EQ(g.token_scale_index(g.num_blocks - 1, 3, 7), g.token_scales_per_pool() - 1);
  EXPECT_EQ(g.token_scales_per_pool(), int64_t{1} << 33);
}

TEST(Layout, ScaleIndices) {
  for (KvFormat f : {KvFormat::kFP8E4M3PerToken, KvFormat::kNVFP4, KvFormat::kMXFP4})
    for (KvLayout l : all_kv_layouts()) {
      const PageGeometry g = geom(l, f, 3, 2, 64, 5);
      if (kv_format_has_token_scales(f)) {
        std::vector<int> hits(static_cast<size_t>(g.token_scales_per_pool()), 0);
        for (int64_t b = 0; b < 3; ++b)
          for (int h = 0; h < 2; ++h)
            for (int s = 0; s < 5; ++s) ++hits[static_cast<size_t>(g.token_scale_index(b, h, s))];
        for (int x : hits) EXPECT_EQ(x, 1);
        EXPECT_EQ(g.scale_bytes(), g.token_scales_per_pool() * 4);
        EXPECT_EQ(g.token_scale_index(2, 1, 3), (2 * 2 + 1) * 5 + 3);
      } else {
        const int grp = g.scale_group();
        EXPECT_EQ(grp, f == KvFormat::kNVFP4 ? 16 : 32);
        std::vector<int> hits(static_cast<size_t>(g.block_scales_per_pool()), 0);
        for (int64_t b = 0; b < 3; ++b)
          for (int h = 0; h < 2; ++h)
            for (int s = 0; s < 5; ++s)
              for (int d = 0; d < 64; ++d) {
                const int64_t i = g.block_scale_index(b, h, s, d);
                ASSERT_TRUE(i >= 0 && i < g.block_scales_per_pool());
                ++hits[static_cast<size_t>(i)];
                // dims of one group share the index, the next group is the next byte
                EXPECT_EQ(i, g.block_scale_index(b, h, s, (d / grp) * grp));
              }
        for (int x : hits) EXPECT_EQ(x, grp);
        EXPECT_EQ(g.scale_bytes(), g.block_scales_per_pool());
        EXPECT_EQ(g.block_scale_index(2, 1, 3, 40), ((2 * 2 + 1) * 5 + 3) * (64 / grp) + 40 / grp);
      }
    }
  for (KvFormat f : {KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3, KvFormat::kFP8E5M2})
    EXPECT_EQ(geom(KvLayout::kNHD, f, 3, 2, 64, 5).scale_bytes(), 0) << to_string(f);
}

TEST(Layout, BytesPerFormat) {
  const int64_t epb = 2 * 16 * 64;
  EXPECT_EQ(geom(KvLayout::kNHD, KvFormat::kBF16, 1, 2, 64, 16).bytes_per_block(), epb * 2);
  EXPECT_EQ(geom(KvLayout::kNHD, KvFormat::kFP8E5M2, 1, 2, 64, 16).bytes_per_block(), epb);
  EXPECT_EQ(geom(KvLayout::kNHD, KvFormat::kMXFP4, 1, 2, 64, 16).bytes_per_block(), epb / 2);
  // Odd block size with FP4: a page is still a whole number of bytes (head_dim is even).
  EXPECT_EQ(geom(KvLayout::kSplitX, KvFormat::kNVFP4, 1, 1, 32, 3).bytes_per_block(), 48);
}

TEST(Layout, Fp4FirstElementInTheLowNibble) {
  // Element 2k in the low nibble, 2k+1 in the high nibble of byte k.
  const uint8_t pool[2] = {pack_fp4x2(0x2 /* 1.0 */, 0xB /* -1.5 */),
                           pack_fp4x2(0x7 /* 6 */, 0x1 /* 0.5 */)};
  EXPECT_EQ(decode_pool_element(pool, KvFormat::kMXFP4, 0), 1.0f);
  EXPECT_EQ(decode_pool_element(pool, KvFormat::kMXFP4, 1), -1.5f);
  EXPECT_EQ(decode_pool_element(pool, KvFormat::kNVFP4, 2), 6.0f);
  EXPECT_EQ(decode_pool_element(pool, KvFormat::kNVFP4, 3), 0.5f);
}

TEST(Layout, TokenToPageAndSlot) {
  EXPECT_EQ(page_of_token(0, 16), 0);
  EXPECT_EQ(page_of_token(15, 16), 0);
  EXPECT_EQ(page_of_token(16, 16), 1);
  EXPECT_EQ(slot_of_token(17, 16), 1);
  EXPECT_EQ(page_of_token(int64_t{1} << 33, 1 << 10), 1 << 23);
  EXPECT_EQ(slot_of_token(7, 1), 0);
}

TEST(Layout, ValidateRejectsUnaddressableGeometries) {
  auto expect_bad = [](const PageGeometry& g, const char* needle) {
    try {
      validate(g);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_bad(geom(KvLayout::kNHD, KvFormat::kBF16, 0, 1, 8, 1), "num_blocks");
  expect_bad(geom(KvLayout::kNHD, KvFormat::kBF16, 1, 0, 8, 1), "num_kv_heads");
  expect_bad(geom(KvLayout::kNHD, KvFormat::kBF16, 1, 1, 8, 0), "block_size");
  expect_bad(geom(KvLayout::kNHD, KvFormat::kBF16, 1, 1, 7, 1), "head_dim");
  expect_bad(geom(KvLayout::kSplitX, KvFormat::kBF16, 1, 1, 12, 1), "x=8");
  expect_bad(geom(KvLayout::kSplitX, KvFormat::kFP8E4M3, 1, 1, 24, 1), "x=16");
  expect_bad(geom(KvLayout::kSplitX, KvFormat::kMXFP4, 1, 1, 48, 1), "x=32");
  expect_bad(geom(KvLayout::kNHD, KvFormat::kNVFP4, 1, 1, 24, 1), "scale group 16");
  expect_bad(geom(KvLayout::kHND, KvFormat::kMXFP4, 1, 1, 48, 1), "scale group 32");
  expect_bad(geom(static_cast<KvLayout>(7), KvFormat::kBF16, 1, 1, 8, 1), "layout");
  expect_bad(geom(KvLayout::kNHD, static_cast<KvFormat>(9), 1, 1, 8, 1), "format");
  EXPECT_NO_THROW(validate(geom(KvLayout::kNHD, KvFormat::kBF16, 1, 1, 2, 1)));
  EXPECT_NO_THROW(validate(geom(KvLayout::kSplitX, KvFormat::kMXFP4, 1, 1, 96, 1)));
}

TEST(Layout, NamesRoundTrip) {
  for (KvLayout l : all_kv_layouts()) EXPECT_EQ(parse_kv_layout(to_string(l)), l);
  for (KvFormat f : all_kv_formats()) EXPECT_EQ(parse_kv_format(to_string(f)), f);
  EXPECT_THROW(parse_kv_layout("nchw"), InvalidArgument);
  EXPECT_THROW(parse_kv_format("int8"), InvalidArgument);
}

}  // namespace
}  // namespace kvlab
