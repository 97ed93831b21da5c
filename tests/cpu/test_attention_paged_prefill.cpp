// test_attention_paged_prefill.cpp: ref::paged_prefill_attention (chunked prefill over a paged
// cache) against an independent computation, the reference decode: query row i of a chunk
// must equal a decode query at position prefix + i over the first prefix + i + 1 tokens of
// the same pages (decode_attention_exact, float64, kept in f32; the prefill output rounded
// to q_dtype: the cross-check table entry). Every layout and format, GQA/MQA, awkward
// lengths (q_len 0, 1, block +- 1, the whole sequence), NaN in every unused slot; bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "reference/attention/attention.h"
#include "reference/attention/prefill_case.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "tests/common/paged_fixtures.h"
#include "tests/common/tolerance_check.h"

namespace kvlab {
namespace {

ref::PagedPrefillCaseSpec spec_of(const char* name, KvLayout l, KvFormat f, DType qd, int hq,
                                  int hk, int d, int bs, std::vector<int32_t> lens,
                                  std::vector<int32_t> q_lens) {
  ref::PagedPrefillCaseSpec s;
  s.cache = test::seeded_spec(name, l, f, qd);
  s.cache.num_qo_heads = hq;
  s.cache.num_kv_heads = hk;
  s.cache.head_dim = d;
  s.cache.block_size = bs;
  s.cache.seq_lens = std::move(lens);
  s.cache.keep_original = false;
  s.q_lens = std::move(q_lens);
  return s;
}

// Row-by-row decode over the same pages: o [rows, hq, d] and lse [rows, hq], float.
void decode_rows(ref::PagedPrefillCase& c, std::vector<float>* o, std::vector<float>* lse) {
  const int Hq = c.cache.spec.num_qo_heads, D = c.cache.spec.head_dim;
  o->clear();
  lse->clear();
  for (int32_t s = 0; s < c.num_seqs(); ++s) {
    const int32_t nq = c.q_lens[static_cast<size_t>(s)], len = c.cache.seq_lens[s];
    for (int32_t i = 0; i < nq; ++i) {
      DecodeArgs a = c.cache.decode_args(nullptr, nullptr);
      const int32_t row_len = len - nq + i + 1;
      a.q = c.q.data() + (static_cast<size_t>(c.q_start[s]) + i) * Hq * D;
      a.seq_lens = &row_len;
      a.block_table =
          c.cache.block_table.data() + static_cast<size_t>(s) * c.cache.max_blocks_per_seq;
      a.num_seqs = 1;
      std::vector<double> od(static_cast<size_t>(Hq) * D), ld(static_cast<size_t>(Hq));
      ref::decode_attention_exact(a, od.data(), ld.data());
      for (double x : od) o->push_back(static_cast<float>(x));
      for (double x : ld) lse->push_back(static_cast<float>(x));
    }
  }
}

void check_case(ref::PagedPrefillCase& c) {
  std::vector<uint16_t> o(static_cast<size_t>(c.o_elements()), 0x7FFF);
  std::vector<float> lse(static_cast<size_t>(c.lse_elements()), NAN);
  ref::paged_prefill_attention(c.args(o.data(), lse.data()));
  const std::vector<float> of = ref::to_float(o.data(), c.cache.spec.q_dtype, o.size());
  std::vector<float> dec_o, dec_lse;
  decode_rows(c, &dec_o, &dec_lse);
  for (float x : of) ASSERT_TRUE(std::isfinite(x)) << c.describe();  // NaN slots never read
  EXPECT_TRUE(test::within_tolerance(of, dec_o, Op::kReferenceCrossCheck, c.cache.geom.format,
                                     c.cache.spec.q_dtype, c.describe()));
  EXPECT_TRUE(test::within_tolerance(lse, dec_lse, Op::kReferenceCrossCheck, c.cache.geom.format,
                                     DType::kF32, c.describe() + " lse"));
}

TEST(PagedPrefillReference, EqualsRowByRowDecodeEveryLayoutAndFormat) {
  int i = 0;
  for (KvLayout l : all_kv_layouts())
    for (KvFormat f : all_kv_formats()) {
      const DType qd = (i++ % 2) ? DType::kF16 : DType::kBF16;
      // lengths: a whole-prompt chunk, chunks after prefixes, q_len 0 and 1, block +- 1
      auto s = spec_of("paged_prefill.ref", l, f, qd, 8, 2, 64, 16, {37, 16, 50, 9, 100, 17},
                       {37, 15, 1, 0, 33, 17});
      ref::PagedPrefillCase c = ref::make_paged_prefill_case(s);
      check_case(c);
    }
}

TEST(PagedPrefillReference, GqaGroupsAndMqa) {
  for (auto [hq, hk] : {std::pair{4, 4}, {6, 2}, {8, 1}, {32, 8}}) {
    auto s = spec_of("paged_prefill.gqa", KvLayout::kHND, KvFormat::kBF16, DType::kBF16, hq, hk,
                     128, 8, {1, 31, 64}, {1, 31, 20});
    ref::PagedPrefillCase c = ref::make_paged_prefill_case(s);
    check_case(c);
  }
}

TEST(PagedPrefillReference, EmptyBatchAndEmptyChunks) {
  auto s = spec_of("paged_prefill.empty", KvLayout::kNHD, KvFormat::kBF16, DType::kBF16, 4, 2, 64,
                   16, {0, 5}, {0, 0});
  ref::PagedPrefillCase c = ref::make_paged_prefill_case(s);
  EXPECT_EQ(c.num_q_tokens(), 0);
  EXPECT_NO_THROW(ref::paged_prefill_attention(c.args(nullptr, nullptr)));
  PagedPrefillArgs none;
  none.kv = c.cache.kv_view();
  none.num_qo_heads = 4;
  none.sm_scale = 0.125f;
  EXPECT_NO_THROW(ref::paged_prefill_attention(none));
}

TEST(PagedPrefillReference, BadInputIsRejectedWithTheReason) {
  auto s = spec_of("paged_prefill.bad", KvLayout::kNHD, KvFormat::kBF16, DType::kBF16, 4, 2, 64, 16,
                   {20, 33}, {4, 10});
  ref::PagedPrefillCase c = ref::make_paged_prefill_case(s);
  std::vector<uint16_t> o(static_cast<size_t>(c.o_elements()));
  auto expect_bad = [&](PagedPrefillArgs a, const std::string& needle) {
    try {
      ref::paged_prefill_attention(a);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  {
    auto a = c.args(o.data(), nullptr);
    std::vector<int32_t> qs = {0, 12, 10};  // decreasing
    a.q_start = qs.data();
    a.max_q_len = 0;
    expect_bad(a, "non-decreasing");
  }
  {
    auto a = c.args(o.data(), nullptr);
    std::vector<int32_t> qs = {0, 21, 31};  // 21 rows > seq_len 20
    a.q_start = qs.data();
    a.max_q_len = 0;
    expect_bad(a, "must already be in the cache");
  }
  {
    auto a = c.args(o.data(), nullptr);
    a.max_q_len = 5;  // sequence 1 has 10 rows
    expect_bad(a, "max_q_len");
  }
  {
    auto a = c.args(o.data(), nullptr);
    std::vector<int32_t> qs = {1, 5, 15};
    a.q_start = qs.data();
    expect_bad(a, "q_start[0]");
  }
  {
    auto a = c.args(o.data(), nullptr);
    a.q_start = nullptr;
    expect_bad(a, "null q_start");
  }
  {
    auto a = c.args(o.data(), nullptr);
    std::vector<int32_t> table = c.cache.block_table;
    table[0] = static_cast<int32_t>(c.cache.geom.num_blocks);  // a page sequence 0 reads
    a.block_table = table.data();
    expect_bad(a, "block_table[0][0]");
  }
  {
    auto a = c.args(o.data(), nullptr);
    a.sm_scale = 0;
    expect_bad(a, "sm_scale");
  }
  {
    auto bad = s;
    bad.q_lens = {4};
    EXPECT_THROW(ref::make_paged_prefill_case(bad), InvalidArgument);
    bad.q_lens = {21, 1};
    EXPECT_THROW(ref::make_paged_prefill_case(bad), InvalidArgument);
  }
}

}  // namespace
}  // namespace kvlab
