// self_check.cpp: `kvlab info`'s reference self-check: quick checks that the reference
// numerics agree with themselves (a broken build or platform shows up here first).
#include <cmath>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "experiments/cli/cli.h"
#include "experiments/h5/h5.h"
#include "reference/formats/formats.h"

namespace kvlab::exp {
namespace {

// Every non-NaN code of an n-bit format decodes to a value that encodes back to it.
int64_t code_round_trip_failures(int bits, const std::function<float(uint32_t)>& decode,
                                 const std::function<uint32_t(float)>& encode) {
  int64_t bad = 0;
  for (uint32_t c = 0; c < (1u << bits); ++c) {
    const float v = decode(c);
    if (std::isnan(v)) continue;
    if (encode(v) != c) ++bad;
  }
  return bad;
}

}  // namespace

bool self_check(std::ostream& out) {
  bool all = true;
  auto report = [&](const std::string& name, bool ok, const std::string& detail) {
    out << "  [" << (ok ? "PASS" : "FAIL") << "] " << name << (detail.empty() ? "" : ": " + detail) << "\n";
    all &= ok;
  };
  const Saturation nonsat = Saturation::kNonSaturating;
  struct F {
    const char* name;
    int bits;
    std::function<float(uint32_t)> dec;
    std::function<uint32_t(float)> enc;
  } formats[] = {
      {"fp8 e4m3", 8, [](uint32_t c) { return e4m3_to_float(static_cast<uint8_t>(c)); },
       [&](float v) { return static_cast<uint32_t>(float_to_e4m3(v, nonsat)); }},
      {"fp8 e5m2", 8, [](uint32_t c) { return e5m2_to_float(static_cast<uint8_t>(c)); },
       [&](float v) { return static_cast<uint32_t>(float_to_e5m2(v, nonsat)); }},
      {"fp4 e2m1", 4, [](uint32_t c) { return e2m1_to_float(static_cast<uint8_t>(c)); },
       [](float v) { return static_cast<uint32_t>(float_to_e2m1(v)); }},
      {"bf16", 16, [](uint32_t c) { return bf16_bits_to_float(static_cast<uint16_t>(c)); },
       [&](float v) { return static_cast<uint32_t>(float_to_bf16_bits(v, nonsat)); }},
      {"fp16", 16, [](uint32_t c) { return fp16_bits_to_float(static_cast<uint16_t>(c)); },
       [&](float v) { return static_cast<uint32_t>(float_to_fp16_bits(v, nonsat)); }},
  };
  for (const auto& f : formats) {
    const int64_t bad = code_round_trip_failures(f.bits, f.dec, f.enc);
    report(std::string(f.name) + " decode/encode round trip over all " + std::to_string(1 << f.bits) + " codes", bad == 0,
           bad ? std::to_string(bad) + " codes differ" : "");
  }
  // Rounding: midpoints go to the even code (DESIGN.md: 0.75 -> 1, 2.5 -> 2, 5 -> 4 in E2M1).
  const bool ties = e2m1_to_float(float_to_e2m1(0.75f)) == 1.0f && e2m1_to_float(float_to_e2m1(2.5f)) == 2.0f &&
                    e2m1_to_float(float_to_e2m1(5.0f)) == 4.0f;
  report("fp4 e2m1 ties to even (0.75->1, 2.5->2, 5->4)", ties, "");
  const bool sat = e4m3_to_float(float_to_e4m3(1e6f, Saturation::kSatFinite)) == kE4M3Max &&
                   std::isnan(e4m3_to_float(float_to_e4m3(1e6f, Saturation::kNonSaturating)));
  report("fp8 e4m3 saturation modes (satfinite -> 448, non-saturating -> NaN)", sat, "");
  // The HDF5 layer writes and reads back in memory.
  try {
    h5::File f = h5::File::create_in_memory("self-check.h5");
    h5::Table t = h5::Table::create(f, "t", {{"x", h5::Type::kFloat64, "", ""}, {"s", h5::Type::kString, "", ""}});
    t.append_row({{"x", 1.25}, {"s", std::string("ok")}});
    const bool ok = h5::Table::open(f, "t").read_doubles("x").at(0) == 1.25 && h5::Table::open(f, "t").read_strings("s").at(0) == "ok";
    report("HDF5 table write/read round trip", ok, "");
  } catch (const std::exception& e) {
    report("HDF5 table write/read round trip", false, e.what());
  }
  return all;
}

}  // namespace kvlab::exp
