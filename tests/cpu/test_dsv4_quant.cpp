// DSV4 substrate: the entry and indexer-key quantizers (reference/dsv4/entry_quant.h) are
// byte-exact to refquant's named schemes (reference/quant/schemes.h): fp8_e4m3_per_token
// (seed entries), fp8_ds_mla pages (public entries), nvfp4 with a fixed tensor scale (seed
// keys), mxfp4_hadamard (public keys); the Hadamard rotation is bit-identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "reference/dsv4/cache_ops.h"
#include "reference/dsv4/entry_quant.h"
#include "reference/metrics/tolerance.h"
#include "reference/quant/hadamard.h"
#include "reference/quant/roundtrip.h"
#include "reference/quant/schemes.h"
#include "tests/common/test_env.h"

namespace kvlab {
namespace {

// Tokens with awkward content: Gaussian rows, plus an all-zero row, a row of tiny values
// (below the 1e-4 amax floor), a row with one huge outlier, a row beyond E4M3's range.
std::vector<float> awkward_rows(int64_t rows, int cols, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(rows * cols);
  for (auto& v : x) v = d(g);
  for (int c = 0; c < cols; ++c) {
    x[0 * cols + c] = 0.0f;
    x[1 * cols + c] *= 1e-6f;
    x[3 * cols + c] *= 1e4f;
  }
  x[2 * cols + 5] = 3000.0f;
  return x;
}

TEST(Dsv4Quant, SeedEntriesMatchFp8PerTokenScheme) {
  const int nope = 448, rope = 64, D = nope + rope;
  const int64_t rows = 37;
  const uint64_t seed = test::seed_for("dsv4.quant.entries");
  SCOPED_TRACE("seed " + std::to_string(seed));
  const auto x = awkward_rows(rows, D, seed);
  std::vector<uint8_t> data(rows * nope);
  std::vector<uint16_t> rp(rows * rope);
  std::vector<float> inv(rows);
  Dsv4EntryPages p;
  p.format = Dsv4EntryFormat::kFp8PerToken;
  p.nope_dim = nope;
  p.rope_dim = rope;
  p.rows = static_cast<int32_t>(rows);
  p.num_pages = 1;
  p.data = data.data();
  p.rope = rp.data();
  p.inv_scale = inv.data();
  for (int64_t r = 0; r < rows; ++r) dsv4_store_entry(p, 0, static_cast<int>(r), x.data() + r * D);
  // refquant's per-token scheme over the NoPE columns.
  std::vector<float> xn(rows * nope);
  for (int64_t r = 0; r < rows; ++r)
    std::copy(x.begin() + r * D, x.begin() + r * D + nope, xn.begin() + r * nope);
  const auto scheme = ref::make_scheme("fp8_e4m3_per_token");
  const auto q = scheme.quantize(xn.data(), rows, nope);
  for (int64_t r = 0; r < rows; ++r) {
    uint32_t bits;
    std::memcpy(&bits, &inv[r], 4);
    ASSERT_EQ(bits, q.scale_codes[r]) << "row " << r;
    for (int d = 0; d < nope; ++d)
      ASSERT_EQ(data[r * nope + d], q.codes[r * nope + d]) << "row " << r << " dim " << d;
    for (int j = 0; j < rope; ++j)
      ASSERT_EQ(rp[r * rope + j], float_to_bf16_bits(x[r * D + nope + j], Saturation::kSatFinite));
  }
}

TEST(Dsv4Quant, PublicEntryPagesMatchFp8DsMlaPackPages) {
  const int nope = 448, rope = 64, D = nope + rope, rows_per_page = 32;
  const int64_t rows = 3 * rows_per_page;
  const uint64_t seed = test::seed_for("dsv4.quant.ds_mla");
  SCOPED_TRACE("seed " + std::to_string(seed));
  const auto x = awkward_rows(rows, D, seed);
  Dsv4EntryPages p;
  p.format = Dsv4EntryFormat::kFp8DsMla;
  p.nope_dim = nope;
  p.rope_dim = rope;
  p.rows = rows_per_page;
  p.num_pages = 3;
  EXPECT_EQ(p.page_bytes(), rows_per_page * 584);
  std::vector<uint8_t> pages(p.bytes(), 0xAB);
  p.data = pages.data();
  for (int64_t r = 0; r < rows; ++r)
    dsv4_store_entry(p, r / rows_per_page, static_cast<int>(r % rows_per_page), x.data() + r * D);
  const auto scheme = ref::make_scheme("fp8_ds_mla");
  const auto want = scheme.pack_pages(scheme.quantize(x.data(), rows, D), rows_per_page);
  ASSERT_EQ(want.size(), pages.size());
  for (size_t i = 0; i < pages.size(); ++i) ASSERT_EQ(pages[i], want[i]) << "byte " << i;
  // The canonical read is the scheme's dequantization.
  const auto deq = scheme.dequantize(scheme.quantize(x.data(), rows, D));
  for (int64_t r = 0; r < rows; ++r)
    for (int d = 0; d < D; ++d) {
      const float got = p.load(r / rows_per_page, static_cast<int>(r % rows_per_page), d);
      ASSERT_EQ(std::memcmp(&got, &deq[r * D + d], 4), 0) << "row " << r << " dim " << d;
    }
}

TEST(Dsv4Quant, HadamardMatchesTheReferenceTransform) {
  std::mt19937_64 g(test::seed_for("dsv4.quant.hadamard"));
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (int rep = 0; rep < 50; ++rep) {
    std::vector<float> a(128), b;
    for (auto& v : a) v = d(g);
    b = a;
    dsv4_hadamard(a.data(), 128);
    ref::hadamard_transform(b.data(), 128);
    ASSERT_EQ(std::memcmp(a.data(), b.data(), 128 * 4), 0) << "rep " << rep;
  }
}

void check_keys(Dsv4IndexerFormat fmt, const char* scheme_name, float tensor_scale) {
  const int dim = 256, rows_per_block = 8;
  const int64_t rows = 2 * rows_per_block;
  const uint64_t seed = test::seed_for("dsv4.quant.keys");
  SCOPED_TRACE(std::string(scheme_name) + " seed " + std::to_string(seed));
  const auto x = awkward_rows(rows, dim, seed);
  Dsv4IndexerView v;
  v.format = fmt;
  v.dim = dim;
  v.rows = rows_per_block;
  v.num_blocks = 2;
  v.tensor_scale = tensor_scale;
  std::vector<uint8_t> codes(rows * dim / 2), scales(rows * dim / v.group());
  v.codes = codes.data();
  v.scales = scales.data();
  std::vector<float> tmp(dim);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(x.begin() + r * dim, x.begin() + (r + 1) * dim, tmp.begin());
    dsv4_store_key(v, r / rows_per_block, static_cast<int>(r % rows_per_block), tmp.data());
  }
  const auto scheme = ref::make_scheme(scheme_name);
  const auto q = fmt == Dsv4IndexerFormat::kNvfp4
                     ? scheme.quantize(x.data(), rows, dim, tensor_scale)
                     : scheme.quantize(x.data(), rows, dim);
  for (int64_t r = 0; r < rows; ++r) {
    for (int b = 0; b < dim / v.group(); ++b)
      ASSERT_EQ(scales[r * (dim / v.group()) + b], q.scale_codes[r * (dim / v.group()) + b])
          << "row " << r << " group " << b;
    for (int d = 0; d < dim; ++d) {
      const uint8_t byte = codes[r * dim / 2 + d / 2];
      ASSERT_EQ((d & 1) ? fp4_hi(byte) : fp4_lo(byte), q.codes[r * dim + d])
          << "row " << r << " dim " << d;
    }
  }
  // Stored values (rotated basis for MXFP4) decode like the scheme's group scales say.
  for (int64_t r = 0; r < rows; ++r)
    for (int d = 0; d < dim; d += 17) {
      const float want = e2m1_to_float(static_cast<uint8_t>(q.codes[r * dim + d])) *
                         scheme.group_scale(q, r, d / v.group());
      const float got = v.load(r / rows_per_block, static_cast<int>(r % rows_per_block), d);
      ASSERT_TRUE(got == want || (std::isnan(got) && std::isnan(want)))
          << "row " << r << " dim " << d;
    }
}

TEST(Dsv4Quant, SeedKeysMatchNvfp4WithAFixedTensorScale) {
  check_keys(Dsv4IndexerFormat::kNvfp4, "nvfp4", 1.0f);
  check_keys(Dsv4IndexerFormat::kNvfp4, "nvfp4", 0.03125f);
}

TEST(Dsv4Quant, PublicKeysMatchMxfp4Hadamard) {
  check_keys(Dsv4IndexerFormat::kMxfp4Hadamard, "mxfp4_hadamard", 1.0f);
}

// FP8 round trip of the stored entries against the tolerance table's kQuantRoundTrip bound
// (per-token NMSE of the NoPE part), both entry formats, on Gaussian tokens.
TEST(Dsv4Quant, EntryRoundTripWithinTheTableBound) {
  const int nope = 448, rope = 64, D = nope + rope;
  const int64_t rows = 512;
  const uint64_t seed = test::seed_for("dsv4.quant.roundtrip");
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 g(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(rows * D);
  for (auto& v : x) v = dist(g);
  for (auto fmt : {Dsv4EntryFormat::kFp8PerToken, Dsv4EntryFormat::kFp8DsMla}) {
    Dsv4EntryPages p;
    p.format = fmt;
    p.nope_dim = nope;
    p.rope_dim = rope;
    p.rows = static_cast<int32_t>(rows);
    p.num_pages = 1;
    std::vector<uint8_t> data(fmt == Dsv4EntryFormat::kFp8PerToken ? rows * nope : p.bytes());
    std::vector<uint16_t> rp(rows * rope);
    std::vector<float> inv(rows);
    p.data = data.data();
    p.rope = rp.data();
    p.inv_scale = inv.data();
    std::vector<float> xn(rows * nope), yn(rows * nope);
    for (int64_t r = 0; r < rows; ++r) {
      dsv4_store_entry(p, 0, static_cast<int>(r), x.data() + r * D);
      for (int d = 0; d < nope; ++d) {
        xn[r * nope + d] = x[r * D + d];
        yn[r * nope + d] = p.load(0, static_cast<int>(r), d);
      }
    }
    const auto st = ref::roundtrip_stats(xn.data(), yn.data(), rows, nope);
    const Tolerance tol = tolerance(Op::kQuantRoundTrip, KvFormat::kFP8E4M3PerToken, DType::kF32);
    std::printf(
        "[dsv4] %s NoPE round trip: per-token rel L2 mean %.4f p99 %.4f max %.4f (table: NMSE <= "
        "%.3g per "
        "token, rel L2 <= %.4f)\n",
        fmt == Dsv4EntryFormat::kFp8PerToken ? "fp8_per_token" : "fp8_ds_mla", st.rel_l2_mean,
        st.rel_l2_p99, st.rel_l2_max, tol.nmse_max, std::sqrt(tol.nmse_max));
    EXPECT_EQ(st.nonfinite, 0);
    for (int64_t r = 0; r < rows; ++r) {
      ErrorStats es;
      ASSERT_TRUE(check(yn.data() + r * nope, xn.data() + r * nope, nope, tol, &es))
          << "token " << r << ": " << to_string(es);
    }
  }
}

}  // namespace
}  // namespace kvlab
