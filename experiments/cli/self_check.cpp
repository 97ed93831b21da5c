// self_check.cpp: `kvlab info`'s reference self-check: quick checks that the reference
// numerics agree with themselves (a broken build or platform shows up here first), judged by
// the tolerance table where a tolerance is involved:
//   - every code of every element format decodes to a value that encodes back to it; UE8M0
//     scale codes likewise; ties to even; saturation modes;
//   - the block-scaled schemes round-trip seeded Gaussian KV within the table's bound;
//   - paged decode attention equals causal prefill attention of the same sequences (two
//     independent float64 references, kReferenceCrossCheck);
//   - with CUDA and a device: one GPU decode version against the reference
//     (experiments/cuda/device.cpp);
//   - the HDF5 layer writes and reads back in memory.
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>

#include "experiments/cli/cli.h"
#include "experiments/h5/h5.h"
#include "experiments/device/device.h"
#include "reference/attention/attention.h"
#include "reference/attention/paged_case.h"
#include "reference/formats/formats.h"
#include "reference/metrics/tolerance.h"
#include "reference/quant/schemes.h"
#include "reference/synth/synth.h"

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

// Decode over a paged BF16 case vs causal prefill over each sequence's keys (the decode
// query is the last position). "" when every sequence matches, else what failed.
std::string decode_vs_prefill() {
  ref::PagedCaseSpec spec;
  spec.seq_lens = {0, 1, 15, 16, 17, 61};
  spec.num_qo_heads = 8;
  spec.num_kv_heads = 2;
  spec.head_dim = 64;
  spec.block_size = 16;
  spec.format = KvFormat::kBF16;  // stored = the original activation values: one K/V for both paths
  spec.seed = 20240601;
  ref::PagedCase c = ref::make_paged_case(spec);
  const ref::DecodeOutputs dec = ref::reference_decode(c);
  const std::vector<float> q = ref::to_float(c.q.data(), spec.q_dtype, c.q.size());
  const int hq = spec.num_qo_heads, hk = spec.num_kv_heads, d = spec.head_dim;
  const Tolerance tol_o = tolerance(Op::kReferenceCrossCheck, spec.format, DType::kBF16);
  const Tolerance tol_lse = tolerance(Op::kReferenceCrossCheck, spec.format, DType::kF32);
  for (int s = 0; s < c.num_seqs(); ++s) {
    const int len = c.seq_lens[static_cast<size_t>(s)];
    std::vector<float> k(static_cast<size_t>(len) * hk * d), v(k.size());
    const size_t off = static_cast<size_t>(c.token_offset[static_cast<size_t>(s)]) * hk * d;
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = static_cast<float>(c.k_original[off + i]);
      v[i] = static_cast<float>(c.v_original[off + i]);
    }
    std::vector<float> o(static_cast<size_t>(hq) * d), lse(static_cast<size_t>(hq));
    PrefillArgs a;
    a.q = q.data() + static_cast<size_t>(s) * hq * d;
    a.k = k.data();
    a.v = v.data();
    a.o = o.data();
    a.lse = lse.data();
    a.num_q = 1;
    a.num_kv = len;
    a.num_qo_heads = hq;
    a.num_kv_heads = hk;
    a.head_dim = d;
    a.sm_scale = c.sm_scale;
    a.causal = true;
    ref::prefill_attention(a);
    ErrorStats so, sl;
    const bool ok_o = check(dec.o.data() + static_cast<size_t>(s) * hq * d, o.data(), o.size(),
                            tol_o, &so, DType::kBF16);
    const bool ok_l =
        check(dec.lse.data() + static_cast<size_t>(s) * hq, lse.data(), lse.size(), tol_lse, &sl);
    if (!ok_o || !ok_l)
      return "sequence " + std::to_string(s) + " (length " + std::to_string(len) + "): " +
             (ok_o ? "lse: " + explain_failure(sl, tol_lse) : "o: " + explain_failure(so, tol_o)) +
             " [" + c.describe() + "]";
  }
  return "";
}

// Presets with a round-trip entry in the tolerance table, on seeded Gaussian KV.
std::string schemes_round_trip() {
  const std::map<std::string, KvFormat> presets{{"bf16", KvFormat::kBF16},
                                                {"fp16", KvFormat::kFP16},
                                                {"fp8_e4m3_per_tensor", KvFormat::kFP8E4M3},
                                                {"fp8_e5m2_per_tensor", KvFormat::kFP8E5M2},
                                                {"fp8_e4m3_per_token", KvFormat::kFP8E4M3PerToken},
                                                {"nvfp4", KvFormat::kNVFP4},
                                                {"mxfp4", KvFormat::kMXFP4},
                                                {"mxfp4_hadamard", KvFormat::kMXFP4}};
  std::string bad;
  for (const auto& [name, format] : presets) {
    const ref::QuantScheme sc = ref::make_scheme(name);
    const int32_t cols = 128;
    const std::vector<float> x =
        ref::synth_kv(ref::synth_preset("gaussian", 64, 2, cols, 20240601));
    const std::vector<float> y = sc.roundtrip(x.data(), 128, cols);
    const Tolerance tol = tolerance(Op::kQuantRoundTrip, format, DType::kF32);
    ErrorStats st;
    if (!check(y.data(), x.data(), y.size(), tol, &st))
      bad += (bad.empty() ? "" : "; ") + name + ": " + explain_failure(st, tol);
  }
  return bad;
}

}  // namespace

bool self_check(std::ostream& out) {
  bool all = true;
  auto report = [&](const std::string& name, bool ok, const std::string& detail) {
    out << "  [" << (ok ? "PASS" : "FAIL") << "] " << name << (detail.empty() ? "" : ": " + detail)
        << "\n";
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
    report(std::string(f.name) + " decode/encode round trip over all " +
               std::to_string(1 << f.bits) + " codes",
           bad == 0, bad ? std::to_string(bad) + " codes differ" : "");
  }
  // Rounding: midpoints go to the even code (0.75 -> 1, 2.5 -> 2, 5 -> 4 in E2M1; formats.h).
  const bool ties = e2m1_to_float(float_to_e2m1(0.75f)) == 1.0f &&
                    e2m1_to_float(float_to_e2m1(2.5f)) == 2.0f &&
                    e2m1_to_float(float_to_e2m1(5.0f)) == 4.0f;
  report("fp4 e2m1 ties to even (0.75->1, 2.5->2, 5->4)", ties, "");
  int64_t ue8m0_bad = 0;
  for (int c = 0; c < 255; ++c) {
    const float v = ue8m0_to_float(static_cast<uint8_t>(c));
    if (v != std::ldexp(1.0f, c - 127) || ue8m0_from_exponent(c - 127) != c) ++ue8m0_bad;
  }
  report("ue8m0 scale codes 0..254 are 2^(c-127) and back",
         ue8m0_bad == 0 && std::isnan(ue8m0_to_float(kUE8M0NaN)),
         ue8m0_bad ? std::to_string(ue8m0_bad) + " codes differ" : "");
  const bool sat = e4m3_to_float(float_to_e4m3(1e6f, Saturation::kSatFinite)) == kE4M3Max &&
                   std::isnan(e4m3_to_float(float_to_e4m3(1e6f, Saturation::kNonSaturating)));
  report("fp8 e4m3 saturation modes (satfinite -> 448, non-saturating -> NaN)", sat, "");
  try {
    const std::string why = schemes_round_trip();
    report("block-scaled schemes round-trip Gaussian KV within the tolerance table", why.empty(),
           why);
  } catch (const std::exception& e) {
    report("block-scaled schemes round-trip Gaussian KV within the tolerance table", false,
           e.what());
  }
  try {
    const std::string why = decode_vs_prefill();
    report("paged decode attention = causal prefill (lengths 0..61, GQA 4, bf16)", why.empty(),
           why);
  } catch (const std::exception& e) {
    report("paged decode attention = causal prefill (lengths 0..61, GQA 4, bf16)", false, e.what());
  }
  {
    std::string detail;
    const int r = gpu_self_check(&detail);
    if (r < 0)
      out << "  [SKIP] GPU decode vs reference: " << detail << "\n";
    else
      report("GPU decode vs reference: " + detail, r == 1, r == 1 ? "" : detail);
  }
  // The HDF5 layer writes and reads back in memory.
  try {
    h5::File f = h5::File::create_in_memory("self-check.h5");
    h5::Table t = h5::Table::create(
        f, "t", {{"x", h5::Type::kFloat64, "", ""}, {"s", h5::Type::kString, "", ""}});
    t.append_row({{"x", 1.25}, {"s", std::string("ok")}});
    const bool ok = h5::Table::open(f, "t").read_doubles("x").at(0) == 1.25 &&
                    h5::Table::open(f, "t").read_strings("s").at(0) == "ok";
    report("HDF5 table write/read round trip", ok, "");
  } catch (const std::exception& e) {
    report("HDF5 table write/read round trip", false, e.what());
  }
  return all;
}

}  // namespace kvlab::exp
