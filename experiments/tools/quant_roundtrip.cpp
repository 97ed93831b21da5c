// kvlab_quant_roundtrip: round-trip error of quantization schemes on synthetic KV data.
//
// Quantizes [tokens * heads, head_dim] rows (one scale set per (token, head), a row = one
// token of one head) with each scheme and prints per-token relative L2 (mean, p50, p99,
// max), NMSE, max abs error and storage bytes per token-head. Defaults give the reference
// round-trip table of every preset: Gaussian N(0, 1), 4096 tokens x 1 head x 128 dims,
// seed 0 (fp8_ds_mla needs 512 columns and gets its own 4096 x 512).
//
//   kvlab_quant_roundtrip [--data gaussian|heavy_tailed|ar1|kcache] [--tokens N]
//                         [--heads H] [--head-dim D] [--seed S] [--scheme "spec"]...
// --scheme takes a preset name or a spec with overrides (schemes.h), and may repeat.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "reference/core/error.h"
#include "reference/quant/roundtrip.h"
#include "reference/quant/schemes.h"
#include "reference/synth/synth.h"

namespace {

void usage() {
  std::printf(
      "usage: kvlab_quant_roundtrip [--data gaussian|heavy_tailed|ar1|kcache] [--tokens N] "
      "[--heads H]\n"
      "                             [--head-dim D] [--seed S] [--scheme SPEC]...\n");
}

int64_t parse_i64(const char* flag, const char* v) {
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0')
    throw kvlab::InvalidArgument(std::string(flag) + " expects an integer, got '" + v + "'");
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string data = "gaussian";
    int64_t tokens = 4096, heads = 1, head_dim = 128;
    uint64_t seed = 0;
    std::vector<std::string> schemes;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "-h" || a == "--help") {
        usage();
        return 0;
      }
      if (i + 1 >= argc) throw kvlab::InvalidArgument("option " + a + " needs a value");
      const char* v = argv[++i];
      if (a == "--data")
        data = v;
      else if (a == "--tokens")
        tokens = parse_i64("--tokens", v);
      else if (a == "--heads")
        heads = parse_i64("--heads", v);
      else if (a == "--head-dim")
        head_dim = parse_i64("--head-dim", v);
      else if (a == "--seed")
        seed = static_cast<uint64_t>(parse_i64("--seed", v));
      else if (a == "--scheme")
        schemes.push_back(v);
      else
        throw kvlab::InvalidArgument(
            "unknown option " + a +
            " (allowed: --data, --tokens, --heads, --head-dim, --seed, --scheme)");
    }
    if (schemes.empty()) schemes = kvlab::ref::scheme_names();

    std::printf(
        "# data %s, %lld tokens x %lld heads, seed %llu; per-token = per (token, head) row\n",
        data.c_str(), static_cast<long long>(tokens), static_cast<long long>(heads),
        static_cast<unsigned long long>(seed));
    std::printf("%-22s %5s %10s %10s %10s %10s %11s %10s %8s\n", "scheme", "cols", "rel_l2", "p50",
                "p99", "max", "nmse", "max_abs", "B/token");
    for (const std::string& name : schemes) {
      const kvlab::ref::QuantScheme s = kvlab::ref::make_scheme(name);
      const int64_t cols = s.spec().required_cols ? s.spec().required_cols : head_dim;
      const kvlab::ref::SynthSpec spec = kvlab::ref::synth_preset(
          data, tokens, static_cast<int32_t>(heads), static_cast<int32_t>(cols), seed);
      const std::vector<float> x = kvlab::ref::synth_kv(spec);
      const kvlab::ref::RoundTripStats r =
          kvlab::ref::roundtrip_stats(s, x.data(), tokens * heads, cols);
      std::printf("%-22s %5lld %10.3e %10.3e %10.3e %10.3e %11.3e %10.3e %8.1f\n", name.c_str(),
                  static_cast<long long>(cols), r.rel_l2_mean, r.rel_l2_p50, r.rel_l2_p99,
                  r.rel_l2_max, r.nmse, r.max_abs, r.bytes_per_token);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvlab_quant_roundtrip: %s\n", e.what());
    return 2;
  }
}
