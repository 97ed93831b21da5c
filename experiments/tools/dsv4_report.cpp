// dsv4_report: the figures of the DSV4 substrate's closing note, from the same code the
// tests run.
//
//   1. The cache schema of a model stack (default: data/models/v4_flash_like.ini) for both
//      named variants, and its bytes per token at several context lengths against
//        - a dense BF16 baseline: every layer stores every token as a BF16 head_dim vector
//          (no compression, no window), and
//        - the same compressed structure stored in BF16 (what FP8/FP4 storage saves).
//   2. The FP8 round-trip error of append_swa: raw BF16 tokens through the append (the
//      reference on the CPU; with --gpu also the GPU kernel, whose bytes are identical),
//      dequantized, per-token relative L2 against the input: mean, p50, p99, max, for the
//      NoPE part (what is quantized) and the full entry (RoPE is exact). Data: Gaussian and
//      refquant's heavy-tailed "kcache" synthetic tokens.
//
//   kvlab_dsv4_report [--model PATH] [--tokens N] [--seed S] [--gpu]
#include <boost/program_options.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "experiments/device/device.h"
#include "reference/core/error.h"
#include "reference/dsv4/cache_ops.h"
#include "reference/dsv4/variant_names.h"
#include "reference/formats/formats.h"
#include "reference/quant/roundtrip.h"
#include "reference/synth/synth.h"
#include "sim/dsv4/schema.h"

namespace po = boost::program_options;
using namespace kvlab;

namespace {

void bytes_table(const sim::Dsv4ModelStack& stack) {
  std::printf("\n== bytes per token (one request; paged blocks + its ring and stream state)\n");
  std::printf(
      "assumptions: %d layers (%d swa, %d csa, %d hca), entry = %d NoPE FP8 + %d RoPE BF16 dims (K "
      "= V, one "
      "latent), indexer keys %d dims FP4, window %d, ratios %d / %d, block_tokens 128\n",
      stack.num_layers(), stack.count(sim::Dsv4LayerKind::kSWA),
      stack.count(sim::Dsv4LayerKind::kCSA), stack.count(sim::Dsv4LayerKind::kHCA), stack.nope_dim,
      stack.rope_dim, stack.indexer_dim, stack.window, stack.csa_ratio, stack.hca_ratio);
  std::printf("%-10s %9s %12s %10s %10s %10s %12s %12s %9s %9s\n", "variant", "context", "B/token",
              "paged", "rings", "streams", "bf16 dense", "bf16 struct", "vs dense", "vs struct");
  for (auto var : {Dsv4Variant::per_token_scales(), Dsv4Variant::public_v4()}) {
    sim::Dsv4CacheConfig c;
    c.variant = var;
    const auto sc = sim::build_dsv4_schema(stack, c);
    for (int64_t ctx : {4096, 32768, 131072, 1048576}) {
      const auto r = sim::bytes_per_token(sc, ctx);
      // The same structure in BF16: entries 2 * head_dim bytes, keys 2 * indexer_dim, ring
      // entries 2 * head_dim (+ position), streams unchanged (FP32 either way).
      double bf16 = 0;
      for (const auto& l : sc.layers) {
        bf16 += static_cast<double>(l.window) * (2 * l.head_dim + 4) + 4 + l.stream_bytes_per_slot;
        bf16 += static_cast<double>(r.blocks) * l.entries_per_block * 2 * l.head_dim;
        bf16 += static_cast<double>(r.blocks) * l.indexer_entries_per_block * 2 * l.indexer_dim;
      }
      bf16 /= ctx;
      std::printf("%-10s %9lld %12.1f %10.1f %10.1f %10.1f %12.0f %12.1f %8.2f%% %8.2f%%\n",
                  to_string(var).c_str(), static_cast<long long>(ctx), r.per_token,
                  double(r.paged_bytes) / ctx, double(r.ring_bytes) / ctx,
                  double(r.stream_bytes) / ctx, r.bf16_dense_per_token, bf16,
                  100.0 * r.per_token / r.bf16_dense_per_token, 100.0 * r.per_token / bf16);
    }
  }
}

struct Tokens {
  std::vector<uint16_t> raw;  // [n, D] BF16
  std::vector<float> x;       // the same values as float
};

Tokens make_tokens(const char* preset, int64_t n, int D, uint64_t seed) {
  const auto xf = ref::synth_kv(ref::synth_preset(preset, n, 1, D, seed));
  Tokens t;
  t.raw.resize(xf.size());
  t.x.resize(xf.size());
  for (size_t i = 0; i < xf.size(); ++i) {
    t.raw[i] = float_to_bf16_bits(xf[i], Saturation::kSatFinite);
    t.x[i] = bf16_bits_to_float(t.raw[i]);
  }
  return t;
}

// A ring of n / window slots, pos % window rows; host buffers.
struct HostRing {
  std::vector<uint8_t> data;
  std::vector<uint16_t> rope;
  std::vector<float> inv;
  std::vector<int32_t> pos, head;
  Dsv4SwaView v;
  HostRing(Dsv4EntryFormat f, int nope, int rope_dim, int W, int64_t slots) {
    v.ring.format = f;
    v.ring.nope_dim = nope;
    v.ring.rope_dim = rope_dim;
    v.ring.rows = W;
    v.ring.num_pages = slots;
    v.mode = Dsv4RingMode::kPosModWindow;
    data.assign(f == Dsv4EntryFormat::kFp8PerToken ? slots * W * nope : v.ring.bytes(), 0xFF);
    rope.assign(slots * W * rope_dim, 0xFFFF);
    inv.assign(slots * W, 0.0f);
    pos.assign(slots * W, -1);
    head.assign(slots, 0);
    v.ring.data = data.data();
    v.ring.rope = rope.data();
    v.ring.inv_scale = inv.data();
    v.pos = pos.data();
    v.head = head.data();
  }
};

void print_stats(const char* where, const char* fmt, const char* data, const HostRing& r,
                 const Tokens& t, int64_t n, int nope, int D) {
  std::vector<float> xn(n * nope), yn(n * nope), xa(n * D), ya(n * D);
  int64_t rope_mismatch = 0;
  const int W = r.v.window();
  for (int64_t i = 0; i < n; ++i)
    for (int d = 0; d < D; ++d) {
      const float y = r.v.ring.load(i / W, static_cast<int>(i % W), d);
      xa[i * D + d] = t.x[i * D + d];
      ya[i * D + d] = y;
      if (d < nope) {
        xn[i * nope + d] = t.x[i * D + d];
        yn[i * nope + d] = y;
      } else {
        rope_mismatch += y != t.x[i * D + d];
      }
    }
  const auto sn = ref::roundtrip_stats(xn.data(), yn.data(), n, nope);
  const auto sa = ref::roundtrip_stats(xa.data(), ya.data(), n, D);
  std::printf(
      "%-4s %-14s %-9s | NoPE mean %.4f p50 %.4f p99 %.4f max %.4f | entry mean %.4f p99 %.4f | "
      "RoPE "
      "mismatches %lld\n",
      where, fmt, data, sn.rel_l2_mean, sn.rel_l2_p50, sn.rel_l2_p99, sn.rel_l2_max, sa.rel_l2_mean,
      sa.rel_l2_p99, static_cast<long long>(rope_mismatch));
}

void fp8_roundtrip(int64_t n, uint64_t seed, bool gpu) {
  const int nope = 448, rope = 64, D = nope + rope, W = 128;
  n = (n + W - 1) / W * W;
  std::printf(
      "\n== append_swa FP8 round trip: %lld tokens of %d dims, per-token relative L2 vs the BF16 "
      "input "
      "(the per_token_scales design states < 3.6%%)\n",
      static_cast<long long>(n), D);
  std::vector<int32_t> slots(n), positions(n);
  for (int64_t i = 0; i < n; ++i) {
    slots[i] = static_cast<int32_t>(i / W);
    positions[i] = static_cast<int32_t>(i % W);
  }
  for (const char* data : {"gaussian", "kcache"}) {
    const Tokens t = make_tokens(data, n, D, seed);
    for (auto f : {Dsv4EntryFormat::kFp8PerToken, Dsv4EntryFormat::kFp8DsMla}) {
      HostRing r(f, nope, rope, W, n / W);
      ref::dsv4_append_swa(r.v, Dsv4AppendSwaArgs{t.raw.data(), slots.data(), positions.data(),
                                                  static_cast<int32_t>(n)});
      print_stats("cpu", to_string(f).c_str(), data, r, t, n, nope, D);
      if (!gpu) continue;
      HostRing g(f, nope, rope, W, n / W);
      exp::dsv4_append_swa_on_device(
          g.v,
          Dsv4AppendSwaArgs{t.raw.data(), slots.data(), positions.data(), static_cast<int32_t>(n)});
      print_stats("gpu", to_string(f).c_str(), data, g, t, n, nope, D);
      std::printf("     gpu bytes identical to cpu: %s\n",
                  (g.data == r.data && g.rope == r.rope && g.inv == r.inv) ? "yes" : "NO");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // The source tree's stack, or the working directory's when the binary runs elsewhere.
  std::string model = std::string(KVLAB_SOURCE_DIR) + "/data/models/v4_flash_like.ini";
  if (!std::ifstream(model).good()) model = "data/models/v4_flash_like.ini";
  int64_t tokens = 16384;
  uint64_t seed = 4004;
  bool gpu = false;
  po::options_description desc(
      "kvlab_dsv4_report: DSV4 substrate figures (bytes/token, FP8 round trip)");
  desc.add_options()("help,h", "this help")("model", po::value(&model),
                                            "model stack INI (data/models/*.ini)")(
      "tokens", po::value(&tokens), "tokens for the FP8 round-trip distribution")(
      "seed", po::value(&seed), "synthetic data seed")(
      "gpu", po::bool_switch(&gpu), "also run the GPU append_swa kernel (needs a device)");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return 0;
    }
    po::notify(vm);
    if (tokens < 1) throw InvalidArgument("--tokens must be >= 1, got " + std::to_string(tokens));
    if (gpu && !exp::built_with_cuda()) throw Unsupported("--gpu: this build has no CUDA");
    if (gpu && !exp::device_summary().present)
      throw InvalidArgument("--gpu: no CUDA device available (" + exp::device_summary().error +
                            ")");
    const auto stack = sim::load_dsv4_model_stack(model);
    sim::Dsv4CacheConfig c;
    std::printf("%s", sim::describe(sim::build_dsv4_schema(stack, c)).c_str());
    c.variant = Dsv4Variant::public_v4();
    std::printf("%s", sim::describe(sim::build_dsv4_schema(stack, c)).c_str());
    bytes_table(stack);
    fp8_roundtrip(tokens, seed, gpu);
  } catch (const std::exception& e) {
    std::cerr << "kvlab_dsv4_report: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
