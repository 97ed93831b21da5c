// test_attention_paged_case.cpp: the paged-case builder (determinism, tables, poison,
// original data), the guard-region helper, and the decode tolerance applied to an fp32
// model kernel (what the GPU tests do): a correct fp32 kernel passes, broken ones fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "reference/attention/attention.h"
#include "reference/attention/guard_region.h"
#include "reference/attention/kv_access.h"
#include "reference/attention/paged_case.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "reference/softmax/online_softmax.h"
#include "tests/common/paged_fixtures.h"
#include "tests/common/test_env.h"
#include "tests/common/tolerance_check.h"

namespace kvlab {
namespace {

ref::PagedCaseSpec spec_for(const char* name, KvLayout l = KvLayout::kNHD,
                            KvFormat f = KvFormat::kBF16) {
  return test::seeded_spec(name, l, f);
}

TEST(PagedCase, DeterministicPerSeed) {
  const ref::PagedCaseSpec s = spec_for("paged.det");
  const ref::PagedCase a = ref::make_paged_case(s), b = ref::make_paged_case(s);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.k_pool, b.k_pool);
  EXPECT_EQ(a.v_pool, b.v_pool);
  EXPECT_EQ(a.block_table, b.block_table);
  ref::PagedCaseSpec s2 = s;
  s2.seed += 1;
  const ref::PagedCase c = ref::make_paged_case(s2);
  EXPECT_NE(a.q, c.q);
  EXPECT_NE(a.k_pool, c.k_pool);
  EXPECT_NE(a.block_table, c.block_table);
}

TEST(PagedCase, IdenticalWhateverTheThreadCount) {
  // Big enough for the threaded fill; MXFP4 split-x packs consecutive V slots into one byte.
  ref::PagedCaseSpec s = test::seeded_spec("paged.threads", KvLayout::kSplitX, KvFormat::kMXFP4);
  s.seq_lens = {2000, 1500, 3001, 999, 17, 0, 2500};
  s.block_size = 7;
  const ref::PagedCase multi = ref::make_paged_case(s);
  const char* old = std::getenv("KVLAB_REF_THREADS");
  const std::string saved = old ? old : "";
  setenv("KVLAB_REF_THREADS", "1", 1);
  const ref::PagedCase single = ref::make_paged_case(s);
  if (old)
    setenv("KVLAB_REF_THREADS", saved.c_str(), 1);
  else
    unsetenv("KVLAB_REF_THREADS");
  EXPECT_EQ(multi.k_pool, single.k_pool);
  EXPECT_EQ(multi.v_pool, single.v_pool);
  EXPECT_EQ(multi.k_scales, single.k_scales);
  EXPECT_EQ(multi.v_scales, single.v_scales);
  EXPECT_EQ(multi.k_original, single.k_original);
}

TEST(PagedCase, TablesArePermutedOverProvisionedAndSentinelled) {
  ref::PagedCaseSpec s = spec_for("paged.tables");
  s.seq_lens = ref::awkward_seq_lens(16, 300);
  s.extra_blocks = 5;
  s.extra_table_columns = 3;
  const ref::PagedCase c = ref::make_paged_case(s);
  int64_t needed = 0, max_pages = 0;
  for (int32_t len : s.seq_lens) {
    needed += (len + 15) / 16;
    max_pages = std::max<int64_t>(max_pages, (len + 15) / 16);
  }
  EXPECT_EQ(c.geom.num_blocks, needed + 5);
  EXPECT_EQ(c.max_blocks_per_seq, max_pages + 3);
  EXPECT_EQ(c.max_seq_len, *std::max_element(s.seq_lens.begin(), s.seq_lens.end()));
  std::set<int32_t> used;
  bool in_order = true;
  int32_t prev = -1;
  for (int s_i = 0; s_i < c.num_seqs(); ++s_i) {
    const int64_t pages = (c.seq_lens[s_i] + 15) / 16;
    for (int64_t p = 0; p < c.max_blocks_per_seq; ++p) {
      const int32_t b = c.block_table[static_cast<size_t>(s_i) * c.max_blocks_per_seq + p];
      if (p < pages) {
        ASSERT_TRUE(b >= 0 && b < c.geom.num_blocks);
        EXPECT_TRUE(used.insert(b).second) << "page " << b << " used twice";
        in_order = in_order && b == prev + 1;
        prev = b;
      } else {
        EXPECT_EQ(b, ref::kTableSentinel);
      }
    }
  }
  EXPECT_FALSE(in_order) << "pages were not shuffled";
  EXPECT_EQ(static_cast<int64_t>(used.size() + c.unused_pages.size()), c.geom.num_blocks);
  for (int32_t b : c.unused_pages) EXPECT_EQ(used.count(b), 0u);
}

TEST(PagedCase, UnusedSlotsArePoisonedUsedSlotsHoldTheOriginalData) {
  for (KvLayout l : all_kv_layouts())
    for (KvFormat f : all_kv_formats())
      for (DType qd : {DType::kBF16, DType::kF16}) {
        ref::PagedCaseSpec s = spec_for("paged.poison", l, f);
        s.q_dtype = qd;
        s.head_dim = 64;
        s.seq_lens = {0, 1, 15, 17, 40};
        ref::PagedCase c = ref::make_paged_case(s);
        const KvCacheView kv = c.kv_view();
        std::vector<int> used_slots(static_cast<size_t>(c.geom.num_blocks * s.block_size), -1);
        for (int si = 0; si < c.num_seqs(); ++si)
          for (int t = 0; t < c.seq_lens[si]; ++t)
            used_slots[static_cast<size_t>(
                           c.block_table[static_cast<size_t>(si) * c.max_blocks_per_seq + t / 16]) *
                           16 +
                       t % 16] = static_cast<int>(c.token_offset[si] + t);
        const bool lossless = (f == KvFormat::kBF16 && qd == DType::kBF16) ||
                              (f == KvFormat::kFP16 && qd == DType::kF16);
        for (int64_t b = 0; b < c.geom.num_blocks; ++b)
          for (int slot = 0; slot < 16; ++slot)
            for (int h = 0; h < s.num_kv_heads; ++h)
              for (int d = 0; d < 64; ++d) {
                const int tok = used_slots[static_cast<size_t>(b * 16 + slot)];
                const float k = load_k(kv, b, h, slot, d), v = load_v(kv, b, h, slot, d);
                if (tok < 0) {
                  ASSERT_TRUE(std::isnan(k) && std::isnan(v))
                      << c.describe() << " page " << b << " slot " << slot;
                } else {
                  const size_t oi = (static_cast<size_t>(tok) * s.num_kv_heads + h) * 64 + d;
                  ASSERT_FALSE(std::isnan(k) || std::isnan(v));
                  if (lossless) {
                    ASSERT_EQ(k, c.k_original[oi]) << c.describe();
                    ASSERT_EQ(v, c.v_original[oi]) << c.describe();
                  }
                }
              }
        // The original data are activation-dtype values.
        for (size_t i = 0; i < std::min<size_t>(c.k_original.size(), 500); ++i)
          EXPECT_EQ(c.k_original[i], ref::round_to_dtype(c.k_original[i], qd));
      }
}

TEST(PagedCase, OriginalReferenceEqualsCacheReferenceWhenLossless) {
  ref::PagedCaseSpec s = spec_for("paged.orig");
  s.seq_lens = ref::awkward_seq_lens(16, 400);
  ref::PagedCase c = ref::make_paged_case(s);
  const ref::DecodeOutputs cache = ref::reference_decode(c);
  const ref::DecodeOutputs orig = ref::reference_decode_original(c);
  EXPECT_TRUE(test::within_tolerance(cache.o, orig.o, Op::kDecodeAttentionVsBf16, KvFormat::kBF16,
                                     DType::kBF16, c.describe()));
  EXPECT_TRUE(test::within_tolerance(cache.lse, orig.lse, Op::kReferenceCrossCheck, KvFormat::kBF16,
                                     DType::kF32, c.describe()));
  ref::PagedCaseSpec nk = s;
  nk.keep_original = false;
  ref::PagedCase d = ref::make_paged_case(nk);
  EXPECT_TRUE(d.k_original.empty());
  EXPECT_THROW(ref::reference_decode_original(d), InvalidArgument);
  EXPECT_EQ(d.k_pool, c.k_pool);  // keep_original does not change the case
}

// Every format through append_kv: the dequantized cache stays within the vs-original sanity
// bound of the tolerance table (and the measured errors are printed for the record).
TEST(PagedCase, QuantizedCachesAgainstTheOriginalData) {
  for (KvFormat f : all_kv_formats())
    for (DType qd : {DType::kBF16, DType::kF16}) {
      ref::PagedCaseSpec s = spec_for("paged.vs_original", KvLayout::kSplitX, f);
      s.q_dtype = qd;
      s.seq_lens = {1, 7, 17, 100, 1031, 3001};
      ref::PagedCase c = ref::make_paged_case(s);
      const ref::DecodeOutputs cache = ref::reference_decode(c),
                               orig = ref::reference_decode_original(c);
      ErrorStats st;
      EXPECT_TRUE(test::within_tolerance(cache.o, orig.o, Op::kDecodeAttentionVsBf16, f, qd,
                                         c.describe(), &st));
      std::printf("vs original %-12s q=%s: max_abs=%.3e rel_l2=%.3e nmse=%.3e\n",
                  to_string(f).c_str(), to_string(qd).c_str(), st.max_abs, st.rel_l2, st.nmse);
    }
}

TEST(PagedCase, BadSpecsAreRejected) {
  ref::PagedCaseSpec s = spec_for("paged.bad");
  ref::PagedCaseSpec b = s;
  b.seq_lens = {3, -1};
  EXPECT_THROW(ref::make_paged_case(b), InvalidArgument);
  b = s;
  b.q_dtype = DType::kF32;
  EXPECT_THROW(ref::make_paged_case(b), InvalidArgument);
  b = s;
  b.extra_blocks = -1;
  EXPECT_THROW(ref::make_paged_case(b), InvalidArgument);
  b = s;
  b.num_qo_heads = 3;
  EXPECT_THROW(ref::make_paged_case(b), InvalidArgument);
  b = s;
  b.head_dim = 12;
  b.layout = KvLayout::kSplitX;
  EXPECT_THROW(ref::make_paged_case(b), InvalidArgument);
  b = s;
  b.seq_lens = {0, 0};
  b.extra_blocks = 0;
  EXPECT_THROW(ref::make_paged_case(b), InvalidArgument);
  b = s;
  b.q_scale = 1e39;
  EXPECT_THROW(ref::make_paged_case(b), InvalidArgument);
  b = s;
  b.format = KvFormat::kNVFP4;
  b.head_dim = 40;  // not a multiple of the 16-element scale group
  EXPECT_THROW(ref::make_paged_case(b), InvalidArgument);
}

TEST(PagedCase, SpecLabelIsGtestSafe) {
  ref::PagedCaseSpec s;
  s.layout = KvLayout::kSplitX;
  s.format = KvFormat::kFP8E4M3;
  EXPECT_EQ(test::spec_label(s), "split_x_fp8_e4m3_bf16_h8x2_d128_b16");
}

TEST(PagedCase, AwkwardLengths) {
  EXPECT_EQ(ref::awkward_seq_lens(16, 40),
            (std::vector<int32_t>{0, 1, 2, 7, 13, 15, 16, 17, 31, 33}));
  EXPECT_EQ(ref::awkward_seq_lens(1, 3), (std::vector<int32_t>{0, 1, 2, 3}));
  const std::vector<int32_t> big = ref::awkward_seq_lens(16, 5000);
  EXPECT_EQ(big.back(), 3001);
  EXPECT_THROW(ref::awkward_seq_lens(0, 10), InvalidArgument);
}

TEST(GuardRegion, NaNPrefilledAndGuarded) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    GuardedBuffer g(37, d);
    EXPECT_TRUE(g.guards_intact());
    const std::vector<float> f = ref::to_float(g.data(), d, 37);
    for (float x : f) EXPECT_TRUE(std::isnan(x)) << to_string(d);
    EXPECT_EQ(
        reinterpret_cast<uintptr_t>(g.data()) - reinterpret_cast<uintptr_t>(g.storage().data()),
        kGuardBytes);
    // Writing one byte past either end is caught and reported.
    GuardedBuffer after = g;
    static_cast<uint8_t*>(after.data())[after.payload_bytes()] ^= 0x01;
    EXPECT_FALSE(after.guards_intact());
    EXPECT_NE(after.guard_damage().find("back guard byte 0"), std::string::npos)
        << after.guard_damage();
    GuardedBuffer before = g;
    static_cast<uint8_t*>(before.data())[-1] = 0;
    EXPECT_NE(before.guard_damage().find("front guard byte 255"), std::string::npos)
        << before.guard_damage();
    // Writing the whole payload leaves the guards intact.
    std::memset(g.data(), 0, g.payload_bytes());
    EXPECT_TRUE(g.guards_intact());
  }
  // The canary is position dependent: a guard copied one byte over does not match.
  int same = 0;
  for (uint64_t j = 0; j < 1024; ++j) same += guard_canary_byte(j) == guard_canary_byte(j + 1);
  EXPECT_LT(same, 16);
}

// An fp32 model kernel: split-KV online softmax in float over the paged cache, the way a
// GPU flash-decoding kernel computes, rounded to q_dtype at the end.
enum class Bug { kNone, kDropLastToken, kReadOnePastEnd, kTruncateOutput };
std::vector<float> fp32_kernel(ref::PagedCase& c, Bug bug, std::vector<float>* lse_out) {
  constexpr int kMaxDim = 256, kSplit = 64;
  const auto& s = c.spec;
  const int G = s.num_qo_heads / s.num_kv_heads, D = s.head_dim;
  const KvCacheView kv = c.kv_view();
  std::vector<float> o(static_cast<size_t>(c.o_elements()));
  lse_out->resize(static_cast<size_t>(c.lse_elements()));
  for (int si = 0; si < c.num_seqs(); ++si)
    for (int hq = 0; hq < s.num_qo_heads; ++hq) {
      const int hk = hq / G;
      int len = c.seq_lens[si];
      if (bug == Bug::kDropLastToken && len > 1) --len;
      if (bug == Bug::kReadOnePastEnd && len % s.block_size != 0)
        ++len;  // stays inside the last page
      const std::vector<float> q = ref::to_float(
          c.q.data() + (static_cast<size_t>(si) * s.num_qo_heads + hq) * D, s.q_dtype, D);
      OnlineSoftmax<float, kMaxDim> total = OnlineSoftmax<float, kMaxDim>::empty();
      for (int t0 = 0; t0 < len; t0 += kSplit) {
        OnlineSoftmax<float, kMaxDim> part = OnlineSoftmax<float, kMaxDim>::empty();
        for (int t = t0; t < std::min(len, t0 + kSplit); ++t) {
          const int64_t b =
              c.block_table[static_cast<size_t>(si) * c.max_blocks_per_seq + t / s.block_size];
          float k[kMaxDim], v[kMaxDim], dot = 0;
          for (int d = 0; d < D; ++d) {
            k[d] = load_k(kv, b, hk, t % s.block_size, d);
            v[d] = load_v(kv, b, hk, t % s.block_size, d);
            dot += q[static_cast<size_t>(d)] * k[d];
          }
          part.push(dot * c.sm_scale, v, D);
        }
        total.merge(part, D);
      }
      float out[kMaxDim];
      total.normalized(out, D);
      for (int d = 0; d < D; ++d) {
        float r = ref::round_to_dtype(out[d], s.q_dtype);
        if (bug == Bug::kTruncateOutput && s.q_dtype == DType::kBF16) {
          uint32_t u;
          std::memcpy(&u, &out[d], 4);
          u &= 0xFFFF0000u;  // truncation instead of RNE
          std::memcpy(&r, &u, 4);
        }
        o[(static_cast<size_t>(si) * s.num_qo_heads + hq) * D + d] = r;
      }
      (*lse_out)[static_cast<size_t>(si) * s.num_qo_heads + hq] = total.lse();
    }
  return o;
}

TEST(DecodeTolerance, AdmitsACorrectFp32KernelOverEveryFormat) {
  for (KvFormat f : all_kv_formats()) {
    ref::PagedCaseSpec s = spec_for("paged.model_kernel_formats", KvLayout::kNHD, f);
    s.seq_lens = {0, 1, 33, 1031};
    ref::PagedCase c = ref::make_paged_case(s);
    const ref::DecodeOutputs r = ref::reference_decode(c);
    std::vector<float> lse;
    EXPECT_TRUE(test::within_tolerance(fp32_kernel(c, Bug::kNone, &lse), r.o, Op::kDecodeAttention,
                                       f, s.q_dtype, c.describe()));
    EXPECT_TRUE(test::within_tolerance(lse, r.lse, Op::kDecodeLse, f, s.q_dtype, c.describe()));
  }
}

TEST(DecodeTolerance, AdmitsACorrectFp32KernelAndRejectsBrokenOnes) {
  for (DType qd : {DType::kBF16, DType::kF16})
    for (int D : {64, 128, 256}) {
      ref::PagedCaseSpec s = spec_for("paged.model_kernel", KvLayout::kHND,
                                      qd == DType::kBF16 ? KvFormat::kBF16 : KvFormat::kFP16);
      s.q_dtype = qd;
      s.head_dim = D;
      s.num_qo_heads = 4;
      s.num_kv_heads = 1;
      s.seq_lens = ref::awkward_seq_lens(16, 3001);
      ref::PagedCase c = ref::make_paged_case(s);
      const ref::DecodeOutputs r = ref::reference_decode(c);
      std::vector<float> lse;
      ErrorStats st;
      const std::vector<float> o = fp32_kernel(c, Bug::kNone, &lse);
      EXPECT_TRUE(
          test::within_tolerance(o, r.o, Op::kDecodeAttention, s.format, qd, c.describe(), &st));
      std::printf("fp32 model kernel %s D=%d: %s\n", to_string(qd).c_str(), D,
                  to_string(st).c_str());
      EXPECT_TRUE(test::within_tolerance(lse, r.lse, Op::kDecodeLse, s.format, qd, c.describe()));
      EXPECT_FALSE(test::within_tolerance(fp32_kernel(c, Bug::kDropLastToken, &lse), r.o,
                                          Op::kDecodeAttention, s.format, qd, "dropped token"));
      // Reading the slot after the last token reads poison (or the next sequence's page: NaN
      // either way, because that slot is unused or the sentinel page is never allocated).
      if (s.block_size > 1) {
        const std::vector<float> past = fp32_kernel(c, Bug::kReadOnePastEnd, &lse);
        ErrorStats ps;
        EXPECT_FALSE(check(past, r.o, tolerance(Op::kDecodeAttention, s.format, qd), &ps));
        EXPECT_GT(ps.nan_out, 0);
      }
      if (qd == DType::kBF16) {
        EXPECT_FALSE(test::within_tolerance(fp32_kernel(c, Bug::kTruncateOutput, &lse), r.o,
                                            Op::kDecodeAttention, s.format, qd, "truncated output"))
            << "truncation instead of RNE should be caught (elementwise 1-ulp or nmse)";
      }
    }
}

}  // namespace
}  // namespace kvlab
