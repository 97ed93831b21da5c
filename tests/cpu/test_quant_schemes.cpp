// test_quant_schemes.cpp: QuantScheme presets, byte streams and error bounds.
//
// Bounds are derived from the formats: an element y = x / s that lies in the element
// format's range is encoded within half an ulp of the format at |y| (ulp = 2^(e - mant)
// for |y| in [2^e, 2^(e+1)), the subnormal spacing below the min normal), so
// |x - decode(code) * s| <= half_ulp(|y|) * s plus the float roundings of x / s and of
// decode * s (each at most half a float ulp of the result); saturated elements (|y| above
// max finite) are off by |y| - max.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "reference/core/error.h"
#include "reference/quant/hadamard.h"
#include "reference/quant/schemes.h"
#include "tests/common/test_env.h"

namespace kvlab::ref {
namespace {

std::vector<float> gaussian(int64_t n, const char* name, float std = 1.0f) {
  const uint64_t seed = test::seed_for(name);
  std::printf("[seed] %s = %llu\n", name, static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, std);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = nd(rng);
  return v;
}

struct FormatFacts {
  int mant;    // mantissa bits
  int emin;    // exponent of the min normal
  double max;  // max finite
};
FormatFacts facts(ElemFormat f) {
  switch (f) {
    case ElemFormat::kFP8E4M3:
      return {3, -6, 448.0};
    case ElemFormat::kFP8E5M2:
      return {2, -14, 57344.0};
    case ElemFormat::kFP4E2M1:
      return {1, 0, 6.0};
    case ElemFormat::kBF16:
      return {7, -126, 3.3895313892515355e38};
    case ElemFormat::kFP16:
      return {10, -14, 65504.0};
  }
  return {0, 0, 0};
}

// Largest error an element x may have under scale s (see the file comment).
double element_bound(double x, double s, ElemFormat f) {
  const FormatFacts ff = facts(f);
  const double y = std::fabs(x) / (s == 0 ? 1 : s);
  const double float_slack = 2.0 * std::ldexp(std::fabs(x), -24) + std::ldexp(1.0, -149);
  if (s == 0) return std::fabs(x) == 0 ? 0 : std::fabs(x);
  if (y > ff.max) return (y - ff.max) * s * (1 + 1e-6) + float_slack;
  int e = y > 0 ? std::ilogb(y) : ff.emin;
  if (e < ff.emin) e = ff.emin;
  const double half_ulp = std::ldexp(1.0, e - ff.mant - 1);
  return half_ulp * s * (1 + std::ldexp(1.0, -22)) + float_slack;
}

// Checks every element of a non-rotated scheme against element_bound, with the group
// scale the tensor records.
void check_element_bounds(const QuantScheme& sc, const std::vector<float>& x, int64_t rows,
                          int64_t cols) {
  const QuantizedTensor q = sc.quantize(x.data(), rows, cols);
  const std::vector<float> y = sc.dequantize(q);
  const int64_t qc = sc.quantized_cols(cols), G = sc.groups_per_row(cols), gc = sc.group_cols(cols);
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      const double xv = x[r * cols + j], yv = y[r * cols + j];
      double bound;
      if (j >= qc) {
        bound = element_bound(xv, 1.0, ElemFormat::kBF16);  // raw BF16 tail
      } else {
        const double s = sc.group_scale(q, r, G == 0 ? 0 : j / gc);
        bound = element_bound(xv, s, sc.spec().elem);
      }
      if (!(std::fabs(xv - yv) <= bound)) {
        if (++bad <= 5)
          ADD_FAILURE() << sc.name() << " row " << r << " col " << j << ": x " << xv << " -> " << yv
                        << " err " << std::fabs(xv - yv) << " > bound " << bound;
      }
    }
  EXPECT_EQ(bad, 0) << sc.name();
}

TEST(QuantSchemes, PresetsExistAndValidate) {
  const std::vector<std::string> want{"bf16",        "fp16",       "fp8_e4m3", "fp8_e5m2",
                                      "fp8_e4m3_pt", "fp8_ds_mla", "mxfp4",    "mxfp4_hadamard",
                                      "nvfp4",       "mxfp8"};
  EXPECT_EQ(scheme_names(), want);
  for (const auto& n : scheme_names()) {
    const QuantScheme s = make_scheme(n);
    EXPECT_EQ(s.name(), n);
    // to_string round-trips through the parser
    const SchemeSpec p = parse_scheme_spec(to_string(s.spec()));
    EXPECT_EQ(to_string(p), to_string(s.spec())) << n;
  }
}

TEST(QuantSchemes, BytesPerToken) {
  struct Want {
    const char* name;
    int64_t cols, record;
    int64_t header;
  };
  const Want wants[] = {{"bf16", 128, 256, 0},
                        {"fp16", 128, 256, 0},
                        {"fp8_e4m3_per_tensor", 128, 128, 4},
                        {"fp8_e5m2_per_tensor", 128, 128, 4},
                        {"fp8_e4m3_per_token", 128, 132, 0},  // 128 FP8 + one FP32 scale
                        {"fp8_ds_mla", 512, 584, 0},          // 448 + 128 + 7 + 1
                        {"mxfp4", 128, 68, 0},                // 64 + 4 UE8M0
                        {"mxfp4_hadamard", 128, 68, 0},
                        {"nvfp4", 128, 72, 4},  // 64 + 8 E4M3, FP32 tensor header
                        {"mxfp8", 128, 132, 0}};
  for (const Want& w : wants) {
    const QuantScheme s = make_scheme(w.name);
    EXPECT_EQ(s.record_bytes(w.cols), w.record) << w.name;
    EXPECT_EQ(s.header_bytes(), w.header) << w.name;
    EXPECT_EQ(s.bytes_per_token(w.cols), static_cast<double>(w.record)) << w.name;
    EXPECT_EQ(s.bytes_per_token(w.cols, 4), w.record + w.header / 4.0) << w.name;
    EXPECT_EQ(s.stream_bytes(7, w.cols), w.header + 7 * w.record) << w.name;
  }
}

// The DeepSeek-V4 fp8_ds_mla record, byte by byte.
TEST(QuantSchemes, DsMlaRecordLayout) {
  const QuantScheme s = make_scheme("fp8_ds_mla");
  std::vector<float> x(512);
  // NoPE tile t (64 elements): amax 448 * 2^(t-3) -> ceil scale exactly 2^(t-3), UE8M0
  // code 124 + t; element j carries E4M3 code c_j = (7 * j + t) % 0x7E (finite, positive
  // and negative by parity), so every code is exact and the record is fully predictable.
  std::vector<uint8_t> want(584, 0);
  for (int t = 0; t < 7; ++t) {
    const float scale = std::ldexp(1.0f, t - 3);
    for (int j = 0; j < 64; ++j) {
      uint8_t c = static_cast<uint8_t>((7 * j + t) % 0x7E);
      if (j == 0) c = 0x7E;  // the tile's amax: 448
      if (j % 2) c |= 0x80;  // negative
      x[t * 64 + j] = e4m3_to_float(c) * scale;
      want[t * 64 + j] = c;
    }
    want[576 + t] = static_cast<uint8_t>(124 + t);
  }
  // RoPE: BF16-exact values, little-endian at bytes 448 + 2i
  for (int i = 0; i < 64; ++i) {
    const uint16_t b =
        static_cast<uint16_t>(0x3F80 + 3 * i - 90);  // around 1.0, both signs of exponent
    x[448 + i] = bf16_bits_to_float(b);
    want[448 + 2 * i] = static_cast<uint8_t>(b & 0xFF);
    want[448 + 2 * i + 1] = static_cast<uint8_t>(b >> 8);
  }
  // byte 583: the pad, zero
  const QuantizedTensor q = s.quantize(x.data(), 1, 512);
  const std::vector<uint8_t> got = s.pack(q);
  ASSERT_EQ(got.size(), 584u);
  for (size_t i = 0; i < 584; ++i) EXPECT_EQ(got[i], want[i]) << "record byte " << i;
  // everything is exactly representable: the round trip is exact
  const std::vector<float> y = s.dequantize(s.unpack(got.data(), got.size(), 1, 512));
  for (int i = 0; i < 512; ++i) EXPECT_EQ(y[i], x[i]) << "col " << i;
}

TEST(QuantSchemes, DsMlaPagePacking) {
  const QuantScheme s = make_scheme("fp8_ds_mla");
  const int64_t rows = 5;
  const int32_t bs = 2;
  const std::vector<float> x = gaussian(rows * 512, "schemes.dsmla_pages");
  const QuantizedTensor q = s.quantize(x.data(), rows, 512);
  const std::vector<uint8_t> stream = s.pack(q), pages = s.pack_pages(q, bs);
  ASSERT_EQ(pages.size(), static_cast<size_t>(3 * bs * 584));
  EXPECT_EQ(s.paged_bytes(rows, 512, bs), 3 * bs * 584);
  for (int64_t r = 0; r < 6; ++r) {
    const size_t page = static_cast<size_t>(r / bs) * bs * 584, i = static_cast<size_t>(r % bs);
    const size_t data_at = page + i * 576, scale_at = page + bs * 576 + i * 8;
    for (size_t b = 0; b < 576; ++b)
      ASSERT_EQ(pages[data_at + b], r < rows ? stream[r * 584 + b] : 0)
          << "row " << r << " data byte " << b;
    for (size_t b = 0; b < 8; ++b)
      ASSERT_EQ(pages[scale_at + b], r < rows ? stream[r * 584 + 576 + b] : 0)
          << "row " << r << " scale byte " << b;
  }
  const QuantizedTensor back = s.unpack_pages(pages.data(), pages.size(), rows, 512, bs);
  EXPECT_EQ(back.codes, q.codes);
  EXPECT_EQ(back.tail, q.tail);
  EXPECT_EQ(back.scale_codes, q.scale_codes);
}

TEST(QuantSchemes, NibbleAndByteOrder) {
  // FP4: first element in the low nibble. A group with amax 6 has scale 1 (OCP: 2^(2-2)).
  const QuantScheme mx = make_scheme("mxfp4");
  std::vector<float> x(32, 0.0f);
  x[0] = 0.5f;   // code 1
  x[1] = 1.0f;   // code 2
  x[2] = -6.0f;  // code 0xF
  x[3] = 3.0f;   // code 5
  const std::vector<uint8_t> b = mx.pack(mx.quantize(x.data(), 1, 32));
  ASSERT_EQ(b.size(), 17u);
  EXPECT_EQ(b[0], 0x21);
  EXPECT_EQ(b[1], 0x5F);
  EXPECT_EQ(b[16], 127);  // UE8M0 scale 2^0 after the codes
  // FP32 scales and headers little-endian: per-token scale 448/448 = 1.0f = 0x3F800000
  const QuantScheme pt = make_scheme("fp8_e4m3_per_token");
  std::vector<float> y(16, 1.0f);
  y[5] = -448.0f;
  const std::vector<uint8_t> c = pt.pack(pt.quantize(y.data(), 1, 16));
  ASSERT_EQ(c.size(), 20u);
  EXPECT_EQ(c[5], 0xFE);
  EXPECT_EQ(c[16], 0x00);
  EXPECT_EQ(c[17], 0x00);
  EXPECT_EQ(c[18], 0x80);
  EXPECT_EQ(c[19], 0x3F);
  // BF16 codes little-endian: 1.0 = 0x3F80 -> 80 3F
  const QuantScheme bf = make_scheme("bf16");
  const float one[2] = {1.0f, -2.0f};
  const std::vector<uint8_t> d = bf.pack(bf.quantize(one, 1, 2));
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0], 0x80);
  EXPECT_EQ(d[1], 0x3F);
  EXPECT_EQ(d[2], 0x00);
  EXPECT_EQ(d[3], 0xC0);
  // per-tensor header: scale 2.0 = 0x40000000 first
  const QuantScheme pten = make_scheme("fp8_e4m3_per_tensor");
  const float two[2] = {896.0f, 1.0f};
  const std::vector<uint8_t> e = pten.pack(pten.quantize(two, 1, 2));
  ASSERT_EQ(e.size(), 6u);
  EXPECT_EQ(e[3], 0x40);
  EXPECT_EQ(e[4], 0x7E);
  EXPECT_EQ(e[5], 0x30);  // 1 / 2 = 0.5
}

TEST(QuantSchemes, PackUnpackRoundTripEveryPreset) {
  for (const auto& n : scheme_names()) {
    const QuantScheme s = make_scheme(n);
    const int64_t cols = s.spec().required_cols ? s.spec().required_cols : 128;
    for (int64_t rows : {0, 1, 7}) {
      const std::vector<float> x = gaussian(rows * cols, ("schemes.pack." + n).c_str(), 3.0f);
      const QuantizedTensor q = s.quantize(x.data(), rows, cols);
      const std::vector<uint8_t> b = s.pack(q);
      EXPECT_EQ(static_cast<int64_t>(b.size()), s.stream_bytes(rows, cols)) << n;
      const QuantizedTensor u = s.unpack(b.data(), b.size(), rows, cols);
      EXPECT_EQ(u.codes, q.codes) << n;
      EXPECT_EQ(u.tail, q.tail) << n;
      EXPECT_EQ(u.scale_codes, q.scale_codes) << n;
      EXPECT_EQ(std::memcmp(&u.tensor_scale, &q.tensor_scale, 4) == 0 || s.header_bytes() == 0,
                true)
          << n;
      EXPECT_EQ(s.pack(u), b) << n;
      for (int32_t bs : {1, 3, 16}) {
        const std::vector<uint8_t> p = s.pack_pages(q, bs);
        const QuantizedTensor pu = s.unpack_pages(p.data(), p.size(), rows, cols, bs);
        EXPECT_EQ(pu.codes, q.codes) << n << " pages " << bs;
        EXPECT_EQ(pu.scale_codes, q.scale_codes) << n << " pages " << bs;
      }
      EXPECT_THROW(s.unpack(b.data(), b.size() + 1, rows, cols), InvalidArgument) << n;
    }
  }
}

TEST(QuantSchemes, ElementBoundsEveryUnrotatedPreset) {
  for (const auto& n : scheme_names()) {
    const QuantScheme s = make_scheme(n);
    if (s.spec().hadamard_size) continue;
    const int64_t cols = s.spec().required_cols ? s.spec().required_cols : 128, rows = 64;
    // per-row magnitudes from 1e-3 to 1e3, and a zero row
    std::vector<float> x = gaussian(rows * cols, ("schemes.bounds." + n).c_str());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j)
        x[r * cols + j] *= std::pow(10.0f, -3.0f + 6.0f * r / (rows - 1));
    for (int64_t j = 0; j < cols; ++j) x[5 * cols + j] = 0.0f;
    check_element_bounds(s, x, rows, cols);
  }
}

// With a 128-wide rotation the bound holds in the rotated domain; H is orthonormal, so
// the row's L2 error equals the rotated L2 error up to float rounding.
TEST(QuantSchemes, HadamardSchemeL2Bound) {
  const QuantScheme s = make_scheme("mxfp4_hadamard");
  SchemeSpec plain_spec = s.spec();
  plain_spec.hadamard_size = 0;
  const QuantScheme plain(plain_spec);
  const int64_t rows = 32, cols = 256;
  std::vector<float> x = gaussian(rows * cols, "schemes.hadamard_l2");
  std::vector<float> rot = x;
  hadamard_transform_runs(rot.data(), rows * cols, 128);
  const QuantizedTensor qr = s.quantize(x.data(), rows, cols);
  const QuantizedTensor qp = plain.quantize(rot.data(), rows, cols);
  EXPECT_EQ(qr.codes, qp.codes);  // quantizing x with rotation == quantizing H x without
  EXPECT_EQ(qr.scale_codes, qp.scale_codes);
  const std::vector<float> y = s.dequantize(qr);
  for (int64_t r = 0; r < rows; ++r) {
    double err2 = 0, bound2 = 0;
    for (int64_t j = 0; j < cols; ++j) {
      const double d = static_cast<double>(x[r * cols + j]) - y[r * cols + j];
      err2 += d * d;
      const double b =
          element_bound(rot[r * cols + j], plain.group_scale(qp, r, j / 32), ElemFormat::kFP4E2M1);
      bound2 += b * b;
    }
    EXPECT_LE(std::sqrt(err2), std::sqrt(bound2) * (1 + 1e-5)) << "row " << r;
  }
}

TEST(QuantSchemes, GivenTensorScale) {
  const QuantScheme s = make_scheme("fp8_e4m3_per_tensor");
  const float x[4] = {1.0f, -2.0f, 1000.0f, 0.25f};
  const QuantizedTensor q = s.quantize(x, 1, 4, 0.5f);
  EXPECT_EQ(q.tensor_scale, 0.5f);
  EXPECT_EQ(q.codes[0], 0x40);  // 2.0
  EXPECT_EQ(q.codes[1], 0xC8);  // -4.0
  EXPECT_EQ(q.codes[2], 0x7E);  // 2000 saturates to 448
  EXPECT_EQ(q.codes[3], 0x30);  // 0.5
  EXPECT_THROW(s.quantize(x, 1, 4, 0.0f), InvalidArgument);
  EXPECT_THROW(s.quantize(x, 1, 4, std::numeric_limits<float>::infinity()), InvalidArgument);
  EXPECT_THROW(make_scheme("mxfp4").quantize(x, 1, 4, 1.0f), InvalidArgument);
  // NVFP4 computes t = amax / 2688 when none is given
  const QuantScheme nv = make_scheme("nvfp4");
  std::vector<float> z(16, 0.0f);
  z[3] = 2688.0f;
  const QuantizedTensor qn = nv.quantize(z.data(), 1, 16);
  EXPECT_EQ(qn.tensor_scale, 1.0f);
  EXPECT_EQ(qn.scale_codes[0], 0x7Eu);  // 448
  EXPECT_EQ(qn.codes[3], 0x7);          // 2688 / 448 = 6
}

TEST(QuantSchemes, NonFiniteInputStaysVisible) {
  for (const auto& n : {"fp8_e4m3_per_token", "mxfp4", "nvfp4", "mxfp8", "fp8_ds_mla"}) {
    const QuantScheme s = make_scheme(n);
    const int64_t cols = s.spec().required_cols ? s.spec().required_cols : 64;
    std::vector<float> x = gaussian(2 * cols, (std::string("schemes.nonfinite.") + n).c_str());
    x[1] = std::numeric_limits<float>::quiet_NaN();
    x[cols + 2] = std::numeric_limits<float>::infinity();
    const std::vector<float> y = s.roundtrip(x.data(), 2, cols);
    EXPECT_TRUE(std::isnan(y[1])) << n << " NaN element";
    EXPECT_FALSE(std::isfinite(y[cols + 2])) << n << " Inf element";
    // the group of a non-finite element is NaN as a whole (FP4 has no NaN code: the scale
    // carries it); the other groups are finite. A computed tensor scale (nvfp4) is NaN
    // itself, so there the whole tensor is.
    const int64_t gc = s.group_cols(cols);
    const bool whole = s.header_bytes() > 0;
    for (int64_t j = 0; j < s.quantized_cols(cols); ++j) {  // the raw BF16 tail is element-wise
      EXPECT_EQ(std::isnan(y[j]), whole || j / gc == 1 / gc) << n << " row 0 col " << j;
      EXPECT_EQ(!std::isfinite(y[cols + j]), whole || j / gc == 2 / gc) << n << " row 1 col " << j;
    }
  }
}

TEST(QuantSchemes, ParseOverrides) {
  const SchemeSpec a = parse_scheme_spec("mxfp4 group=16 rule=ceil_pow2");
  EXPECT_EQ(a.group_size, 16);
  EXPECT_EQ(a.scale_rule, ScaleRule::kCeilPow2);
  EXPECT_EQ(a.scale_format, ScaleFormat::kUE8M0);
  EXPECT_EQ(a.name, "mxfp4 group=16 rule=ceil_pow2");
  const SchemeSpec b =
      parse_scheme_spec("elem=fp8_e5m2 gran=group group=8 scale=fp32 rule=exact name=e5g8");
  EXPECT_EQ(b.elem, ElemFormat::kFP8E5M2);
  EXPECT_EQ(b.name, "e5g8");
  EXPECT_EQ(make_scheme("nvfp4 two_level=0").header_bytes(), 0);
  // to_string -> parse keeps every float bit of the floor
  SchemeSpec c = preset_spec("mxfp4");
  c.amax_floor = std::nextafter(1e-4f, 1.0f);
  EXPECT_EQ(parse_scheme_spec(to_string(c)).amax_floor, c.amax_floor);
  EXPECT_EQ(
      make_scheme("fp8_e4m3_per_token floor=0 floor_at=scale clamp=clamp_then_encode sat=nonsat")
          .spec()
          .clamp,
      ElementClamp::kClampThenEncode);
}

TEST(QuantSchemes, BadSpecsThrowWithAllowedValues) {
  auto expect_bad = [](const std::string& text, const std::string& needle) {
    try {
      (void)make_scheme(text);
      ADD_FAILURE() << "'" << text << "': no exception";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "'" << text << "': " << e.what();
    }
  };
  expect_bad("nope", "allowed: bf16, fp16");
  expect_bad("", "preset");
  expect_bad("mxfp4 elem=fp6", "allowed: fp8_e4m3");
  expect_bad("mxfp4 rule=exact", "ue8m0 scales hold powers of two");
  expect_bad("mxfp4 scale=e4m3", "e4m3 scales take rule e4m3_rounded");
  expect_bad("mxfp4 group=0", "group_size >= 1");
  expect_bad("fp8_e4m3_per_token group=32", "group_size applies to granularity group only");
  expect_bad("fp8_e4m3_per_tensor scale=ue8m0 rule=ceil_pow2",
             "per-tensor scale is stored as fp32");
  expect_bad("mxfp4 two_level=1", "two_level");
  expect_bad("mxfp4 sat=nonsat", "fp4_e2m1 has no Inf or NaN");
  expect_bad("mxfp4 floor=-1", "amax_floor");
  expect_bad("mxfp4 floor=inf", "amax_floor");
  expect_bad("mxfp4 hadamard=96", "power of two");
  expect_bad("mxfp4 tail=-1", "raw_tail");
  expect_bad("mxfp4 align=0", "record_align");
  expect_bad("mxfp4 colour=red", "unknown key 'colour'");
  expect_bad("mxfp4 group", "key=value");
  expect_bad("mxfp4 group=abc", "not an integer");
  expect_bad("bf16 gran=token", "needs a scale format");
  expect_bad("fp8_e4m3_per_token elem=bf16", "stored unscaled");
  expect_bad("bf16 scale=fp32", "granularity none has no scale");
  // column-dependent checks
  auto expect_bad_cols = [](const std::string& n, int64_t cols, const std::string& needle) {
    const QuantScheme s = make_scheme(n);
    std::vector<float> x(static_cast<size_t>(std::max<int64_t>(cols, 1)));
    try {
      (void)s.quantize(x.data(), 1, cols);
      ADD_FAILURE() << n << " cols " << cols << ": no exception";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << n << ": " << e.what();
    }
  };
  expect_bad_cols("fp8_ds_mla", 576, "exactly 512");
  expect_bad_cols("mxfp4", 48, "group_size 32 does not divide");
  expect_bad_cols("mxfp4_hadamard", 96, "hadamard_size 128 does not divide");
  expect_bad_cols("fp8_e4m3_per_token tail=8", 8, "leaves no quantized column");
  expect_bad_cols("elem=fp4_e2m1 gran=token scale=ue8m0 rule=ocp_floor", 7, "must be even");
  expect_bad_cols("bf16", 0, "cols must be >= 1");
  EXPECT_THROW(make_scheme("bf16").quantize(nullptr, 2, 4), InvalidArgument);
  EXPECT_THROW(make_scheme("bf16").pack_pages(QuantizedTensor{}, 0), InvalidArgument);
}

// Custom specs the driver sweeps: group sizes x scale rules all quantize within bounds.
TEST(QuantSchemes, CustomSpecSweepWithinBounds) {
  const std::vector<float> x = gaussian(16 * 128, "schemes.sweep");
  for (const char* elem : {"fp8_e4m3", "fp8_e5m2", "fp4_e2m1"})
    for (int g : {8, 16, 32, 64, 128})
      for (const char* rule : {"exact", "ceil_pow2", "ocp_floor"})
        for (const char* at : {"amax", "scale"}) {
          std::ostringstream os;
          os << "elem=" << elem << " gran=group group=" << g << " scale=fp32 rule=" << rule
             << " floor_at=" << at;
          const QuantScheme s = make_scheme(os.str());
          check_element_bounds(s, x, 16, 128);
        }
}

}  // namespace
}  // namespace kvlab::ref
