// append.cpp: the GPU half of the kind "append" (declared in experiments/kinds/gpu_kinds.cpp):
// the GPU append / quantize-on-write kernel (gpu/quant/append.h,
// vLLM's reshape_and_cache) per format x layout, byte-exact against kvlab::ref::append_kv and
// timed against the device-to-device copy ceiling.
//
// A point appends `tokens` tokens of K and V [tokens, num_kv_heads, head_dim] (seeded N(0,1)
// in in_dtype) into a paged pool of ceil(tokens / block_size) + 3 pages, token t to a page of
// a seeded permutation (scattered, as a running allocator leaves them), slot t % block_size.
// Pools start poisoned (0xFF bytes) on both sides.
// Validation, before timing: the kernel's pools and scale arrays, byte for byte, against the
// reference's over the same inputs (Op::kAppend: exact). At most kAppendValidatedTokens tokens
// are checked on the host: larger points validate a case of that many tokens with the same
// shape class (format, layout, heads, head_dim, block size, dtype) through the same kernel,
// and the record says so (label `validation`).
// Timing: the harness with the sweep's [timing] options (slot checks off: kTrusted, as in a
// serving loop). Bytes: K and V read in in_dtype + the slot mapping + K and V written at
// storage precision with their scales; as % of the copy ceiling (read + write) measured at
// the start of the run and of the datasheet peak.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "experiments/cuda/timing.h"
#include "experiments/device/device.h"
#include "gpu/bench/harness.h"
#include "gpu/core/device_buffer.h"
#include "gpu/core/device_info.h"
#include "gpu/quant/append.h"
#include "reference/core/dtype.h"
#include "reference/core/error.h"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "reference/quant/append.h"
#include "reference/synth/synth.h"

namespace kvlab::exp {
namespace {

constexpr int32_t kExtraPages = 3;

// Host inputs and pools of one append problem.
struct AppendProblem {
  PageGeometry geom;
  DType in_dtype = DType::kBF16;
  int64_t tokens = 0;
  std::vector<uint8_t> k, v;                                // [tokens, heads, d] in in_dtype
  std::vector<int64_t> slots;                               // [tokens]
  std::vector<uint8_t> k_pool, v_pool, k_scales, v_scales;  // poisoned (0xFF)
  float k_scale = 1.0f, v_scale = 1.0f;
  AppendArgs args() {
    AppendArgs a;
    a.in_dtype = in_dtype;
    a.k = k.data();
    a.v = v.data();
    a.slot_mapping = slots.data();
    a.num_tokens = static_cast<int32_t>(tokens);
    a.kv.geom = geom;
    a.kv.k = k_pool.data();
    a.kv.v = v_pool.data();
    a.kv.k_scales = k_scales.empty() ? nullptr : k_scales.data();
    a.kv.v_scales = v_scales.empty() ? nullptr : v_scales.data();
    a.kv.k_scale = k_scale;
    a.kv.v_scale = v_scale;
    return a;
  }
};

// tile = nullptr: seeded N(0,1) inputs and host pools poisoned with 0xFF. Otherwise the
// inputs repeat tile's tokens (token t = tile token t mod tile->tokens: real data, built in
// a memcpy) and the pools are left empty: DeviceAppend poisons them on the device.
AppendProblem make_problem(const Point& p, int64_t tokens, uint64_t seed,
                           const AppendProblem* tile = nullptr) {
  AppendProblem pr;
  const int heads = static_cast<int>(p.integer("num_kv_heads")),
            d = static_cast<int>(p.integer("head_dim"));
  const int bs = static_cast<int>(p.integer("block_size"));
  pr.in_dtype = parse_dtype(p.str("in_dtype"));
  pr.tokens = tokens;
  pr.geom.layout = parse_kv_layout(p.str("layout"));
  pr.geom.format = parse_kv_format(p.str("kv_format"));
  pr.geom.num_kv_heads = heads;
  pr.geom.head_dim = d;
  pr.geom.block_size = bs;
  pr.geom.num_blocks = (tokens + bs - 1) / bs + kExtraPages;
  try {
    validate(pr.geom);
  } catch (const InvalidArgument& e) {
    throw Unsupported(e.what());
  }
  const size_t n = static_cast<size_t>(tokens) * heads * d, eb = dtype_bytes(pr.in_dtype);
  pr.k.resize(n * eb);
  pr.v.resize(n * eb);
  ref::SynthRng rng(seed);
  if (tile) {
    const size_t row = static_cast<size_t>(heads) * d * eb,
                 have = static_cast<size_t>(tile->tokens);
    for (int64_t t = 0; t < tokens; ++t) {
      std::memcpy(pr.k.data() + t * row, tile->k.data() + (static_cast<size_t>(t) % have) * row,
                  row);
      std::memcpy(pr.v.data() + t * row, tile->v.data() + (static_cast<size_t>(t) % have) * row,
                  row);
    }
  }
  auto put = [&](std::vector<uint8_t>& buf, size_t i, float x) {
    if (pr.in_dtype == DType::kF32) {
      std::memcpy(buf.data() + 4 * i, &x, 4);
    } else {
      const uint16_t b = pr.in_dtype == DType::kBF16
                             ? float_to_bf16_bits(x, Saturation::kNonSaturating)
                             : float_to_fp16_bits(x, Saturation::kNonSaturating);
      std::memcpy(buf.data() + 2 * i, &b, 2);
    }
  };
  for (size_t i = 0; !tile && i < n; ++i) put(pr.k, i, static_cast<float>(rng.gaussian()));
  for (size_t i = 0; !tile && i < n; ++i) put(pr.v, i, static_cast<float>(rng.gaussian()));
  // Pages in a seeded order (Fisher-Yates with the synth generator: the same on every platform).
  std::vector<int64_t> pages(static_cast<size_t>(pr.geom.num_blocks));
  std::iota(pages.begin(), pages.end(), 0);
  for (size_t i = pages.size(); i > 1; --i)
    std::swap(pages[i - 1], pages[static_cast<size_t>(rng.next_u64() % i)]);
  pr.slots.resize(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t)
    pr.slots[static_cast<size_t>(t)] = pages[static_cast<size_t>(t / bs)] * bs + t % bs;
  if (!tile) {
    pr.k_pool.assign(static_cast<size_t>(pr.geom.bytes()), 0xFF);
    pr.v_pool.assign(static_cast<size_t>(pr.geom.bytes()), 0xFF);
    pr.k_scales.assign(static_cast<size_t>(pr.geom.scale_bytes()), 0xFF);
    pr.v_scales.assign(static_cast<size_t>(pr.geom.scale_bytes()), 0xFF);
  }
  if (kv_format_has_pool_scale(pr.geom.format)) {
    // Pool scales as the data's amax puts them (N(0,1): |x| < 6 for every element here).
    const double top = pr.geom.format == KvFormat::kFP8E4M3   ? kE4M3Max
                       : pr.geom.format == KvFormat::kFP8E5M2 ? 57344.0
                                                              : 6.0 * kE4M3Max;
    pr.k_scale = pr.v_scale = static_cast<float>(6.0 / top);
  }
  return pr;
}

// Bytes an append must move: K and V read, slots read, K and V written with their scales.
double append_bytes(const AppendProblem& pr) {
  const PageGeometry& g = pr.geom;
  const double th = static_cast<double>(pr.tokens) * g.num_kv_heads;
  const double stored = static_cast<double>(g.head_dim) * g.elem_bits() / 8 +
                        (kv_format_has_token_scales(g.format) ? 4.0 : 0.0) +
                        (g.scale_group() ? static_cast<double>(g.head_dim / g.scale_group()) : 0.0);
  return 2.0 * th * g.head_dim * dtype_bytes(pr.in_dtype) + 8.0 * pr.tokens + 2.0 * th * stored;
}

// The problem on the device: inputs, slots and pools (pools poisoned as on the host).
struct DeviceAppend {
  gpu::DeviceBuffer k, v, slots, kp, vp, ks, vs;
  AppendArgs args;
  explicit DeviceAppend(AppendProblem& pr) {
    auto up = [](gpu::DeviceBuffer& b, const void* p, size_t n) {
      b.allocate(std::max<size_t>(n, 1));
      if (n) b.upload(p, n);
    };
    // Pools: the host's poisoned copies, or (left empty on the host) poisoned here.
    auto pool = [&](gpu::DeviceBuffer& b, const std::vector<uint8_t>& host, int64_t bytes) {
      if (!host.empty() || bytes == 0) return up(b, host.data(), host.size());
      b.allocate(static_cast<size_t>(bytes));
      b.fill_bytes(0xFF);
    };
    up(k, pr.k.data(), pr.k.size());
    up(v, pr.v.data(), pr.v.size());
    up(slots, pr.slots.data(), pr.slots.size() * 8);
    pool(kp, pr.k_pool, pr.geom.bytes());
    pool(vp, pr.v_pool, pr.geom.bytes());
    pool(ks, pr.k_scales, pr.geom.scale_bytes());
    pool(vs, pr.v_scales, pr.geom.scale_bytes());
    args = pr.args();
    args.k = k.data();
    args.v = v.data();
    args.slot_mapping = slots.as<int64_t>();
    args.kv.k = kp.data();
    args.kv.v = vp.data();
    args.kv.k_scales = pr.geom.scale_bytes() == 0 ? nullptr : ks.data();
    args.kv.v_scales = pr.geom.scale_bytes() == 0 ? nullptr : vs.data();
  }
};

int64_t differing_bytes(const std::vector<uint8_t>& a, const gpu::DeviceBuffer& d, size_t n) {
  std::vector<uint8_t> b(n);
  if (n) d.download(b.data(), n);
  int64_t diff = 0;
  for (size_t i = 0; i < n; ++i) diff += a[i] != b[i];
  return diff;
}

}  // namespace

Record run_append(const Point& p, RunContext& ctx) {
  const uint64_t seed = point_seed(ctx, p);
  const int64_t tokens = p.integer("tokens");
  const int64_t nv = std::min(tokens, kAppendValidatedTokens);
  // Byte-exactness on the host-checkable case (the point itself when small enough).
  AppendProblem small = make_problem(p, nv, seed);
  DeviceAppend dsmall(small);
  gpu::append_kv(dsmall.args, nullptr, gpu::SlotCheck::kValidate);
  KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
  ref::append_kv(small.args());
  const int64_t diff = differing_bytes(small.k_pool, dsmall.kp, small.k_pool.size()) +
                       differing_bytes(small.v_pool, dsmall.vp, small.v_pool.size()) +
                       differing_bytes(small.k_scales, dsmall.ks, small.k_scales.size()) +
                       differing_bytes(small.v_scales, dsmall.vs, small.v_scales.size());
  Record r;
  r.metric("differing_bytes", static_cast<double>(diff));
  r.metric("validated_tokens", static_cast<double>(nv));
  r.label("validation",
          nv == tokens
              ? "every pool and scale byte of this point against ref::append_kv"
              : "every pool and scale byte of a " + std::to_string(nv) +
                    "-token case of the same shape class (format, layout, heads, head_dim, "
                    "block size, dtype) against ref::append_kv; the timed point is larger");
  const Tolerance tol = tolerance(Op::kAppend, small.geom.format, small.in_dtype);
  if (tol.atol != 0 || tol.rtol != 0 || tol.nmse_max != 0)
    throw Error("the tolerance table's append entry is no longer exact: this bench compares bytes");
  if (diff > 0) {
    r.status = Status::kFailed;
    r.reason = std::to_string(diff) +
               " pool/scale bytes differ from ref::append_kv (the append is exact: 0 allowed)";
    return r;
  }
  if (!ctx.timing) return r;
  AppendProblem big = nv == tokens ? std::move(small) : make_problem(p, tokens, seed, &small);
  const double need = static_cast<double>(big.k.size() + big.v.size() + 8 * big.slots.size()) +
                      2.0 * static_cast<double>(big.geom.bytes() + big.geom.scale_bytes());
  gpu::require_free_memory(need, 0.8, "the point's K/V inputs and pools");
  DeviceAppend dbig(big);
  const double bytes = append_bytes(big);
  const gpu::bench::Timing t = gpu::bench::time_kernel(
      [&](cudaStream_t s) { gpu::append_kv(dbig.args, s, gpu::SlotCheck::kTrusted); },
      to_harness(ctx.timing_cfg, p.str("graph") == "on" || ctx.timing_cfg.graph));
  r.metric("append_bytes", bytes);
  record_timing(&r, t, {bytes, CeilingKind::kCopy}, ctx);
  return r;
}

}  // namespace kvlab::exp
