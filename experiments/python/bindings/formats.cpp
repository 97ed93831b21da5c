// formats.cpp: kvlab._kvlab.formats, bit-exact encode / decode of kvlab's number formats on
// host arrays, element by element through reference/formats/formats.h (the functions the
// reference and the GPU kernels use).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "experiments/python/bindings/arrays.h"
#include "reference/formats/formats.h"
#include "reference/quant/scale_rules.h"
#include "reference/quant/schemes.h"

namespace kvlab::py {

namespace {

// The element formats plus UE8M0 (scales). Canonical names are those of
// reference/quant/schemes.h to_string(ElemFormat); the short OCP names are accepted too.
enum class Fmt { kE4M3, kE5M2, kE2M1, kBF16, kFP16, kUE8M0 };

Fmt parse_fmt(const std::string& s) {
  if (s == "fp8_e4m3" || s == "e4m3") return Fmt::kE4M3;
  if (s == "fp8_e5m2" || s == "e5m2") return Fmt::kE5M2;
  if (s == "fp4_e2m1" || s == "e2m1") return Fmt::kE2M1;
  if (s == "bf16") return Fmt::kBF16;
  if (s == "fp16") return Fmt::kFP16;
  if (s == "ue8m0") return Fmt::kUE8M0;
  throw InvalidArgument("unknown number format '" + s +
                        "' (allowed: fp8_e4m3, fp8_e5m2, fp4_e2m1, bf16, fp16, ue8m0; short "
                        "names e4m3, e5m2, e2m1)");
}

Saturation parse_sat(const std::string& s) {
  if (s == "satfinite") return Saturation::kSatFinite;
  if (s == "nonsaturating") return Saturation::kNonSaturating;
  throw InvalidArgument("unknown saturation '" + s + "' (allowed: satfinite, nonsaturating)");
}

int code_bits(Fmt f) { return f == Fmt::kBF16 || f == Fmt::kFP16 ? 16 : 8; }

void same_size(const Array& a, const Array& b, const char* an, const char* bn) {
  KVLAB_REQUIRE(a.size() == b.size(), bn << ": " << b.size() << " elements " << shape_str(b)
                                         << " for the " << a.size() << " of " << an << " "
                                         << shape_str(a));
}

void encode(const Array& x, Array& out, const std::string& format, const std::string& saturation) {
  const Fmt f = parse_fmt(format);
  KVLAB_REQUIRE(f != Fmt::kUE8M0,
                "ue8m0 codes are exponents, not rounded values: use ue8m0_from_exponent");
  const Saturation sat = parse_sat(saturation);
  KVLAB_REQUIRE(f != Fmt::kE2M1 || sat == Saturation::kSatFinite,
                "fp4_e2m1 has neither Inf nor NaN: it always saturates (saturation='satfinite')");
  Checker c(Where::kHost);
  const float* in = static_cast<const float*>(c.check_rank(x, "x", Elem::kF32, x.ndim()));
  c.check_rank(out, "out", code_bits(f) == 16 ? Elem::kBF16 : Elem::kU8, out.ndim());
  same_size(x, out, "x", "out");
  const size_t n = x.size();
  if (code_bits(f) == 16) {
    uint16_t* o = static_cast<uint16_t*>(out.data());
    for (size_t i = 0; i < n; ++i)
      o[i] = f == Fmt::kBF16 ? float_to_bf16_bits(in[i], sat) : float_to_fp16_bits(in[i], sat);
  } else {
    uint8_t* o = static_cast<uint8_t*>(out.data());
    for (size_t i = 0; i < n; ++i)
      o[i] = f == Fmt::kE4M3   ? float_to_e4m3(in[i], sat)
             : f == Fmt::kE5M2 ? float_to_e5m2(in[i], sat)
                               : float_to_e2m1(in[i]);
  }
}

void decode(const Array& codes, Array& out, const std::string& format) {
  const Fmt f = parse_fmt(format);
  Checker c(Where::kHost);
  c.check_rank(codes, "codes", code_bits(f) == 16 ? Elem::kBF16 : Elem::kU8, codes.ndim());
  float* o = static_cast<float*>(c.check_rank(out, "out", Elem::kF32, out.ndim()));
  same_size(codes, out, "codes", "out");
  const size_t n = codes.size();
  if (code_bits(f) == 16) {
    const uint16_t* in = static_cast<const uint16_t*>(codes.data());
    for (size_t i = 0; i < n; ++i)
      o[i] = f == Fmt::kBF16 ? bf16_bits_to_float(in[i]) : fp16_bits_to_float(in[i]);
    return;
  }
  const uint8_t* in = static_cast<const uint8_t*>(codes.data());
  for (size_t i = 0; i < n; ++i) {
    if (f == Fmt::kE2M1)
      KVLAB_REQUIRE(in[i] < 16, "codes: E2M1 codes are 4-bit (0..15), got " << int(in[i])
                                                                            << " at flat index "
                                                                            << i
                                                                            << " (packed bytes: "
                                                                               "unpack_fp4 first)");
    o[i] = f == Fmt::kE4M3   ? e4m3_to_float(in[i])
           : f == Fmt::kE5M2 ? e5m2_to_float(in[i])
           : f == Fmt::kE2M1 ? e2m1_to_float(in[i])
                             : ue8m0_to_float(in[i]);
  }
}

void ue8m0_from_exponent_into(const Array& e, Array& out) {
  Checker c(Where::kHost);
  const int32_t* in = static_cast<const int32_t*>(c.check_rank(e, "e", Elem::kI32, e.ndim()));
  uint8_t* o = static_cast<uint8_t*>(c.check_rank(out, "out", Elem::kU8, out.ndim()));
  same_size(e, out, "e", "out");
  for (size_t i = 0; i < e.size(); ++i) {
    KVLAB_REQUIRE(in[i] >= -127 && in[i] <= 127,
                  "e: UE8M0 holds 2^-127 .. 2^127, got exponent " << in[i] << " at flat index "
                                                                   << i);
    o[i] = ue8m0_from_exponent(in[i]);
  }
}

void pack_fp4(const Array& codes, Array& out) {
  Checker c(Where::kHost);
  const uint8_t* in = static_cast<const uint8_t*>(c.check_rank(codes, "codes", Elem::kU8, codes.ndim()));
  uint8_t* o = static_cast<uint8_t*>(c.check_rank(out, "out", Elem::kU8, out.ndim()));
  KVLAB_REQUIRE(codes.size() % 2 == 0, "codes: an even number of E2M1 codes packs into bytes, got "
                                           << codes.size());
  KVLAB_REQUIRE(out.size() * 2 == codes.size(), "out: " << out.size() << " bytes for "
                                                        << codes.size() << " codes");
  for (size_t i = 0; i < out.size(); ++i) {
    KVLAB_REQUIRE(in[2 * i] < 16 && in[2 * i + 1] < 16,
                  "codes: E2M1 codes are 4-bit (0..15), flat index " << 2 * i);
    o[i] = pack_fp4x2(in[2 * i], in[2 * i + 1]);
  }
}

void unpack_fp4(const Array& bytes, Array& out) {
  Checker c(Where::kHost);
  const uint8_t* in = static_cast<const uint8_t*>(c.check_rank(bytes, "packed", Elem::kU8, bytes.ndim()));
  uint8_t* o = static_cast<uint8_t*>(c.check_rank(out, "out", Elem::kU8, out.ndim()));
  KVLAB_REQUIRE(out.size() == 2 * bytes.size(), "out: " << out.size() << " codes for "
                                                        << bytes.size() << " bytes");
  for (size_t i = 0; i < bytes.size(); ++i) {
    o[2 * i] = fp4_lo(in[i]);
    o[2 * i + 1] = fp4_hi(in[i]);
  }
}

}  // namespace

void bind_formats(nb::module_& m) {
  m.def("encode", &encode, nb::arg("x"), nb::arg("out"), nb::arg("format"), nb::arg("saturation"));
  m.def("decode", &decode, nb::arg("codes"), nb::arg("out"), nb::arg("format"));
  m.def("ue8m0_from_exponent", &ue8m0_from_exponent_into, nb::arg("e"), nb::arg("out"));
  m.def("pack_fp4", &pack_fp4, nb::arg("codes"), nb::arg("out"));
  m.def("unpack_fp4", &unpack_fp4, nb::arg("packed"), nb::arg("out"));
  m.def("max_finite", [](const std::string& format) -> double {
    switch (parse_fmt(format)) {
      case Fmt::kE4M3: return kE4M3Max;
      case Fmt::kE5M2: return kE5M2Max;
      case Fmt::kE2M1: return kE2M1Max;
      case Fmt::kFP16: return kFP16Max;
      case Fmt::kBF16: return static_cast<double>(bf16_bits_to_float(0x7F7F));
      case Fmt::kUE8M0: return static_cast<double>(ue8m0_to_float(0xFE));
    }
    return 0;
  });
}

}  // namespace kvlab::py
