// test_tolerance.cpp: the tolerance table is complete, documented and consistent with the
// number formats it is derived from.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <set>
#include <string>

#include "reference/core/error.h"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "tests/common/test_env.h"

namespace kvlab {
namespace {

const DType kDtypes[] = {DType::kF32, DType::kBF16, DType::kF16};

TEST(Tolerance, EveryCombinationHasAnEntryOrThrowsUnsupportedNamingIt) {
  int entries = 0, unsupported = 0;
  ASSERT_EQ(static_cast<int>(all_ops().size()), kNumOps);
  for (Op op : all_ops())
    for (KvFormat f : all_kv_formats())
      for (DType d : kDtypes) {
        const std::string name = to_string(op) + "/" + to_string(f) + "/" + to_string(d);
        try {
          const Tolerance t = tolerance(op, f, d, /*layers=*/2);
          ++entries;
          EXPECT_GT(std::string(t.why).size(), 20u) << name << " has no documented reason";
          EXPECT_GE(t.atol, 0) << name;
          EXPECT_GE(t.rtol, 0) << name;
          EXPECT_GE(t.nmse_max, 0) << name;
          EXPECT_FALSE(std::isnan(t.atol) || std::isnan(t.rtol) || std::isnan(t.nmse_max)) << name;
          EXPECT_FALSE(t.allow_nonfinite) << name << ": no operation may hide NaN/Inf";
        } catch (const Unsupported& e) {
          ++unsupported;
          const std::string msg = e.what();
          EXPECT_NE(msg.find(to_string(op)), std::string::npos) << msg;
          EXPECT_NE(msg.find(to_string(f)), std::string::npos) << msg;
          EXPECT_NE(msg.find(to_string(d)), std::string::npos) << msg;
        }
      }
  EXPECT_EQ(entries + unsupported, kNumOps * kNumKvFormats * 3);
  std::printf("tolerance table: %d entries, %d unsupported combinations\n", entries, unsupported);
}

TEST(Tolerance, TheEntriesTheKernelsNeedExist) {
  for (KvFormat f : all_kv_formats())
    for (DType d : {DType::kBF16, DType::kF16}) {
      EXPECT_NO_THROW(tolerance(Op::kDecodeAttention, f, d)) << to_string(f);
      EXPECT_NO_THROW(tolerance(Op::kDecodeAttentionVsBf16, f, d)) << to_string(f);
      EXPECT_NO_THROW(tolerance(Op::kDecodeLse, f, d)) << to_string(f);
      EXPECT_NO_THROW(tolerance(Op::kReferenceCrossCheck, f, d)) << to_string(f);
      EXPECT_NO_THROW(tolerance(Op::kAppend, f, d)) << to_string(f);
      EXPECT_NO_THROW(tolerance(Op::kQuantBytes, f, d)) << to_string(f);
      EXPECT_NO_THROW(tolerance(Op::kQuantRoundTrip, f, d)) << to_string(f);
    }
  EXPECT_NO_THROW(tolerance(Op::kOnlineSoftmaxMerge, KvFormat::kBF16, DType::kF32));
  EXPECT_NO_THROW(tolerance(Op::kReferenceCrossCheck, KvFormat::kBF16, DType::kF32));
  // MXFP4 beyond 4 layers is unmeasured: no bound rather than a guessed one.
  for (KvFormat f : all_kv_formats())
    for (int layers : {1, 2, 3, 4, 5, 16, 32}) {
      if (f == KvFormat::kMXFP4 && layers > 4)
        EXPECT_THROW(tolerance(Op::kDecodeStepLogits, f, DType::kF32, layers), Unsupported)
            << layers;
      else
        EXPECT_NO_THROW(tolerance(Op::kDecodeStepLogits, f, DType::kF32, layers)) << layers;
    }
}

// No row without a use: prefill outputs are bf16/f16 (the GPU prefill kernel's Q dtype), the
// compressor is compared in f32 only.
TEST(Tolerance, RowsWithoutAUserAreGone) {
  EXPECT_NO_THROW(tolerance(Op::kPrefillAttention, KvFormat::kBF16, DType::kBF16));
  EXPECT_NO_THROW(tolerance(Op::kPrefillAttention, KvFormat::kNVFP4, DType::kF16));
  EXPECT_THROW(tolerance(Op::kPrefillAttention, KvFormat::kBF16, DType::kF32), Unsupported);
  EXPECT_THROW(tolerance(Op::kCompressor, KvFormat::kBF16, DType::kBF16), Unsupported);
  EXPECT_THROW(tolerance(Op::kCompressor, KvFormat::kBF16, DType::kF16), Unsupported);
}

// The decode-step logits are keyed by depth: a caller must say how deep its decoder is, and
// depths beyond the measured ones have no bound.
TEST(Tolerance, StepLogitsAreKeyedByDepth) {
  EXPECT_THROW(tolerance(Op::kDecodeStepLogits, KvFormat::kBF16, DType::kF32), InvalidArgument);
  EXPECT_THROW(tolerance(Op::kDecodeStepLogits, KvFormat::kBF16, DType::kF32, 0), InvalidArgument);
  EXPECT_THROW(tolerance(Op::kDecodeStepLogits, KvFormat::kBF16, DType::kF32, 33), Unsupported);
  int keyed = 0;
  for (const ToleranceRow& r : tolerance_rows()) {
    if (r.op != Op::kDecodeStepLogits) {
      EXPECT_EQ(r.max_layers, 0) << to_string(r.op) << ": only the step logits are keyed by depth";
      continue;
    }
    ++keyed;
    ASSERT_GE(r.min_layers, 1);
    ASSERT_GE(r.max_layers, r.min_layers);
    // the lookup returns this row for every depth it covers
    const KvFormat f = static_cast<KvFormat>(r.format);
    for (int l : {r.min_layers, r.max_layers}) {
      const Tolerance t = tolerance(r.op, f, DType::kF32, l);
      EXPECT_EQ(t.atol, r.tol.atol) << l;
      EXPECT_EQ(t.nmse_max, r.tol.nmse_max) << l;
    }
    // a deeper row is never tighter than a shallower one of the same format
    for (const ToleranceRow& o : tolerance_rows())
      if (o.op == r.op && o.format == r.format && o.min_layers > r.max_layers) {
        EXPECT_GE(o.tol.atol, r.tol.atol);
        EXPECT_GE(o.tol.nmse_max, r.tol.nmse_max);
      }
  }
  EXPECT_EQ(keyed, 2 * kNumKvFormats - 1);  // MXFP4: the shallow row only (unmeasured deeper)
}

// Every row names the measurement behind it: the command that regenerates it, and the data
// file when one is stored (it must exist; rows measured by the GPU stage name no file until
// the H100 run stores one).
TEST(Tolerance, EveryRowNamesItsMeasurement) {
  int with_data = 0;
  for (const ToleranceRow& r : tolerance_rows()) {
    const std::string name = to_string(r.op) + " row";
    EXPECT_GT(std::string(r.tol.command).size(), 10u) << name << " names no command";
    const std::string data = r.tol.data;
    if (data.empty()) continue;
    ++with_data;
    EXPECT_EQ(data.rfind("data/tolerance/", 0), 0u) << name << ": " << data;
    FILE* f = std::fopen(data.c_str(), "r");
    EXPECT_NE(f, nullptr) << name << ": " << data << " is missing (run from the repository root)";
    if (f) std::fclose(f);
  }
  EXPECT_GE(with_data, 20) << "most CPU-measurable rows should carry a data file";
}

TEST(Tolerance, ExplicitlyUnsupported) {
  EXPECT_THROW(tolerance(Op::kDecodeAttention, KvFormat::kBF16, DType::kF32), Unsupported);
  EXPECT_THROW(tolerance(Op::kDecodeStepLogits, KvFormat::kBF16, DType::kBF16), Unsupported);
  EXPECT_THROW(tolerance(Op::kOnlineSoftmaxMerge, KvFormat::kBF16, DType::kBF16), Unsupported);
  EXPECT_THROW(tolerance(Op::kCompressor, KvFormat::kFP8E4M3, DType::kF32), Unsupported);
  EXPECT_THROW(tolerance(static_cast<Op>(kNumOps), KvFormat::kBF16, DType::kF32), Unsupported);
  EXPECT_THROW(tolerance(Op::kDecodeAttention, static_cast<KvFormat>(99), DType::kBF16),
               InvalidArgument);
  EXPECT_THROW(tolerance(Op::kDecodeAttention, KvFormat::kBF16, static_cast<DType>(9)),
               InvalidArgument);
}

TEST(Tolerance, OpNamesAreUnique) {
  std::set<std::string> names;
  for (Op op : all_ops()) EXPECT_TRUE(names.insert(to_string(op)).second) << to_string(op);
}

// The decode bound admits exactly what it claims: two outputs one ulp apart pass, two ulps
// apart (where atol is negligible) fail. Values cover [1, 1.25) in every sign.
TEST(Tolerance, DecodeBoundIsOneUlpOfTheOutputDtype) {
  const uint64_t seed = test::seed_for("tolerance.one_ulp");
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  for (DType d : {DType::kBF16, DType::kF16}) {
    const Tolerance t = tolerance(Op::kDecodeAttention, KvFormat::kBF16, d);
    const int mant = d == DType::kBF16 ? 7 : 10;
    for (int i = 0; i < 32; ++i) {
      const float r = (i % 2 ? -1.0f : 1.0f) * (1.0f + std::ldexp(static_cast<float>(i % 16), -6));
      const float ulp = std::ldexp(1.0f, -mant);
      const float one = r + std::copysign(ulp, r), two = r + std::copysign(2 * ulp, r);
      EXPECT_LE(std::fabs(one - r), t.atol + t.rtol * std::fabs(r)) << to_string(d) << " r=" << r;
      EXPECT_GT(std::fabs(two - r), t.atol + t.rtol * std::fabs(r)) << to_string(d) << " r=" << r;
    }
  }
}

TEST(Tolerance, LooserWhereTheMathIsLooser) {
  for (KvFormat f : all_kv_formats())
    for (DType d : {DType::kBF16, DType::kF16}) {
      const Tolerance same = tolerance(Op::kDecodeAttention, f, d);
      const Tolerance orig = tolerance(Op::kDecodeAttentionVsBf16, f, d);
      EXPECT_GE(orig.atol + orig.rtol, same.atol + same.rtol) << to_string(f);
      EXPECT_GE(orig.nmse_max, same.nmse_max) << to_string(f);
      // The reference cross-check (float64 on both sides) is tighter than any kernel check.
      const Tolerance cross = tolerance(Op::kReferenceCrossCheck, f, d);
      EXPECT_LE(cross.atol, same.atol);
      EXPECT_LE(cross.rtol, same.rtol);
    }
  // Round trip: coarser element formats get larger bounds.
  const DType in = DType::kF32;
  const double bf16 = tolerance(Op::kQuantRoundTrip, KvFormat::kBF16, in).nmse_max;
  const double fp16 = tolerance(Op::kQuantRoundTrip, KvFormat::kFP16, in).nmse_max;
  const double e4m3 = tolerance(Op::kQuantRoundTrip, KvFormat::kFP8E4M3, in).nmse_max;
  const double e5m2 = tolerance(Op::kQuantRoundTrip, KvFormat::kFP8E5M2, in).nmse_max;
  const double nvfp4 = tolerance(Op::kQuantRoundTrip, KvFormat::kNVFP4, in).nmse_max;
  const double mxfp4 = tolerance(Op::kQuantRoundTrip, KvFormat::kMXFP4, in).nmse_max;
  EXPECT_LT(fp16, bf16);
  EXPECT_LT(bf16, e4m3);
  EXPECT_LT(e4m3, e5m2);
  EXPECT_LT(e5m2, nvfp4);
  EXPECT_LE(nvfp4, mxfp4);
  // Lossless storage round trips are exact.
  EXPECT_EQ(tolerance(Op::kQuantRoundTrip, KvFormat::kBF16, DType::kBF16).rtol, 0);
  EXPECT_EQ(tolerance(Op::kQuantRoundTrip, KvFormat::kFP16, DType::kF16).rtol, 0);
}

// The bf16 round-trip entry against the format itself: RNE of random floats stays inside it.
TEST(Tolerance, RoundTripEntryHoldsForBf16AndFp16Rounding) {
  const uint64_t seed = test::seed_for("tolerance.roundtrip");
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  uint64_t x = seed;
  for (DType d : {DType::kBF16, DType::kF16}) {
    const KvFormat f = d == DType::kBF16 ? KvFormat::kBF16 : KvFormat::kFP16;
    const Tolerance t = tolerance(Op::kQuantRoundTrip, f, DType::kF32);
    std::vector<float> in(4096), out(4096);
    for (size_t i = 0; i < in.size(); ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const float mag = std::ldexp(static_cast<float>((x >> 40) & 0xFFFFFF) / 16777216.0f + 0.5f,
                                   static_cast<int>((x >> 33) % 40) - 30);
      in[i] = (x >> 63) ? -mag : mag;
      out[i] = d == DType::kBF16
                   ? bf16_bits_to_float(float_to_bf16_bits(in[i], Saturation::kSatFinite))
                   : fp16_bits_to_float(float_to_fp16_bits(in[i], Saturation::kSatFinite));
    }
    ErrorStats s;
    EXPECT_TRUE(check(out, in, t, &s)) << to_string(d) << " " << to_string(s);
  }
}

}  // namespace
}  // namespace kvlab
