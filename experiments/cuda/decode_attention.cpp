// decode_attention.cpp: the GPU half of the kind "decode_attention" (declared in
// experiments/kinds/gpu_kinds.cpp): every registered GPU decode version
// (gpu/attention/decode.h) on a paged KV cache, validated against kvlab::ref::decode_attention
// through the tolerance table, then timed (gpu/bench), in one record (experiments/README.md:
// validate before timing, in the same run).
//
// The cache of a point (shared by the consecutive points that differ only in version or
// graph mode: `version` is the last axis):
//   - the device pool holds exactly the point's pages, and every page its own data: seeded
//     uniform activations of unit variance (BF16, generated on the device), written through the
//     GPU append kernel (quantize-on-write, as a serving engine fills its cache) into every slot
//     of every page; pool scales for FP8 / NVFP4 from the data's range. No two pages are alike,
//     so a kernel that reads a wrong page (an index off by one, by a power of two, wrapped at
//     2^31 bytes) reads other numbers and fails the validation; no poison (the GPU tests cover
//     unused slots);
//   - the block table is a seeded permutation of the pages (Thrust);
//   - Q [batch, num_kv_heads * gqa_group, head_dim] seeded N(0,1) rounded to BF16.
// Validation: one launch over the whole batch (O and LSE pre-filled with NaN, guard regions
// around them); every output must be finite; the sequences of a deterministic subsample
// (all when batch <= 4; else the first, the last and two seeded ones) are compared with the
// reference computed on the host over the real pool: the pages of the validated sequences,
// copied back from the device (with their scales) through the device table's entries. Which
// sequences were checked is in the record (validated_seqs, label `validation`). A failing
// check ends the point as failed, untimed.
// version = auto: gpu::choose_decode (gpu/attention/decode_auto.h) picks the version and
// split for the point's shape from the calibration table; the row records the pick
// (picked_version, picked_splits, label `picked` with the basis). num_splits forces a split
// count (0: the version's or auto's own plan).
// Timing (gpu/bench, the sweep's [timing] options; CUDA-graph replay with graph = on),
// recorded by record_timing (experiments/bench/bench.h): median / quartiles / IQR of the
// samples, how they were taken, and the bandwidth of the minimum bytes (Q + the attended K
// and V at storage precision + their per-token / block scales + O, the working set) as % of
// the read ceiling measured at the start of the run and of the device's datasheet peak.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>

#include "experiments/bench/table_trace.h"
#include "experiments/cuda/timing.h"
#include "experiments/device/device.h"
#include "gpu/attention/decode.h"
#include "gpu/attention/decode_auto.h"
#include "gpu/bench/harness.h"
#include "gpu/core/device_buffer.h"
#include "gpu/core/device_info.h"
#include "gpu/core/device_tables.h"
#include "gpu/quant/append.h"
#include "gpu/step/step_kernels.h"
#include "reference/attention/attention.h"
#include "reference/attention/paged_case.h"
#include "reference/core/error.h"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "reference/synth/synth.h"



namespace kvlab::exp {
namespace {

constexpr int kMaxValidated = 4;  // sequences compared with the host reference
// Pool data: uniform in [-sqrt(3), sqrt(3)] (unit variance), BF16.
constexpr float kPoolDataRange = 1.7320508f;

// The sequence lengths of a point: `context` each, or seeded uniform in [min(1024, context),
// context] (a skewed batch).
std::vector<int32_t> lengths_of(const Point& p, uint64_t seed) {
  const int64_t batch = p.integer("batch"), ctx = p.integer("context");
  std::vector<int32_t> lens(static_cast<size_t>(batch), static_cast<int32_t>(ctx));
  if (p.str("lengths") == "mixed") {
    ref::SynthRng rng(seed ^ 0x1e575eedull);
    const int64_t lo = std::min<int64_t>(1024, ctx);
    for (auto& l : lens)
      l = static_cast<int32_t>(lo + static_cast<int64_t>(rng.uniform() * (ctx - lo + 1)));
  }
  return lens;
}

// Q + K and V of every attended token at storage precision + their scales + O.
double min_bytes(const PageGeometry& g, const std::vector<int32_t>& lens, int qo_heads,
                 int q_bytes) {
  double tokens = 0;
  for (int32_t l : lens) tokens += l;
  const double per_token_head =
      static_cast<double>(g.head_dim) * g.elem_bits() / 8 +
      (kv_format_has_token_scales(g.format) ? 4.0 : 0.0) +
      (g.scale_group() ? static_cast<double>(g.head_dim / g.scale_group()) : 0.0);
  return 2.0 * tokens * g.num_kv_heads * per_token_head +
         2.0 * lens.size() * qo_heads * g.head_dim * q_bytes;
}

int version_id(const std::string& name) {
  for (const auto& v : gpu::decode_versions())
    if (v.name == name) return v.id;
  throw InvalidArgument("unknown decode version '" + name + "'");
}

// Everything of a point except its version and graph mode, on the device and the host.
struct DecodeCase : DeviceState {
  std::string key;
  int64_t pages = 0;
  float sm_scale = 1.0f;
  std::vector<int32_t> lens;
  std::vector<int32_t> table;  // the device table, downloaded
  std::vector<uint16_t> q;     // [batch, qo_heads, d] bf16 bits
  gpu::DeviceBuffer k, v, ks, vs, dtable, dlens, dq, o, lse;
  DecodeArgs args;                    // device pointers
  std::vector<int32_t> checked;       // the validated sequences
  std::vector<float> ref_o, ref_lse;  // their reference outputs [checked, qo_heads(, d)]
  double bytes = 0;
  std::string validation;  // how the check was done, for the record
};

std::unique_ptr<DecodeCase> build_case(const Point& p, const std::string& key, uint64_t seed,
                                       int threads) {
  auto c = std::make_unique<DecodeCase>();
  c->key = key;
  const int kvh = static_cast<int>(p.integer("num_kv_heads")),
            hq = kvh * static_cast<int>(p.integer("gqa_group"));
  const int d = static_cast<int>(p.integer("head_dim")),
            bs = static_cast<int>(p.integer("block_size"));
  const int batch = static_cast<int>(p.integer("batch"));
  c->lens = lengths_of(p, seed);
  const int32_t max_len = c->lens.empty() ? 0 : *std::max_element(c->lens.begin(), c->lens.end());
  for (int32_t l : c->lens) c->pages += (l + bs - 1) / bs;
  const int32_t mbps = std::max(1, (max_len + bs - 1) / bs);

  PageGeometry g;
  g.layout = parse_kv_layout(p.str("layout"));
  g.format = parse_kv_format(p.str("kv_format"));
  g.num_blocks = std::max<int64_t>(c->pages, 1);
  g.num_kv_heads = kvh;
  g.head_dim = d;
  g.block_size = bs;
  try {
    validate(g);
  } catch (const InvalidArgument& e) {
    throw Unsupported(e.what());  // a geometry the format / layout cannot lay out
  }
  c->sm_scale = 1.0f / std::sqrt(static_cast<float>(d));
  const double need = 2.0 * static_cast<double>(g.bytes() + g.scale_bytes());
  gpu::require_free_memory(need, 0.8, "the point's K/V pools");
  c->k.allocate(std::max<size_t>(static_cast<size_t>(g.bytes()), 1));
  c->v.allocate(std::max<size_t>(static_cast<size_t>(g.bytes()), 1));
  c->ks.allocate(std::max<size_t>(static_cast<size_t>(g.scale_bytes()), 1));
  c->vs.allocate(std::max<size_t>(static_cast<size_t>(g.scale_bytes()), 1));

  // Pool scales (FP8 and NVFP4: real = stored * scale) from the data's range.
  float k_scale = 1.0f;
  if (kv_format_has_pool_scale(g.format))
    k_scale =
        kPoolDataRange / static_cast<float>(g.format == KvFormat::kFP8E4M3   ? kE4M3Max
                                            : g.format == KvFormat::kFP8E5M2 ? kE5M2Max
                                                                             : kE2M1Max * kE4M3Max);

  // Every slot of every page: device-generated K and V, in chunks, through the append kernel.
  {
    const int64_t slots = g.num_blocks * bs;
    const int64_t row = int64_t{kvh} * d;
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(slots, (int64_t{64} << 20) / row));
    gpu::DeviceBuffer dk(static_cast<size_t>(chunk * row) * 2),
        dv(static_cast<size_t>(chunk * row) * 2), dslots(static_cast<size_t>(chunk) * 8);
    std::vector<int64_t> hs(static_cast<size_t>(chunk));
    AppendArgs ap;
    ap.in_dtype = DType::kBF16;
    ap.k = dk.data();
    ap.v = dv.data();
    ap.slot_mapping = dslots.as<int64_t>();
    ap.kv.geom = g;
    ap.kv.k = c->k.data();
    ap.kv.v = c->v.data();
    ap.kv.k_scales = g.scale_bytes() ? c->ks.data() : nullptr;
    ap.kv.v_scales = g.scale_bytes() ? c->vs.data() : nullptr;
    ap.kv.k_scale = ap.kv.v_scale = k_scale;
    for (int64_t t0 = 0; t0 < slots; t0 += chunk) {
      const int64_t n = std::min(chunk, slots - t0);
      std::iota(hs.begin(), hs.begin() + n, t0);
      dslots.upload(hs.data(), static_cast<size_t>(n) * 8);
      const uint64_t part = static_cast<uint64_t>(t0 / chunk);
      gpu::step::fill_synthetic_bf16(dk.as<uint16_t>(), n * row, seed, 0x6b00ull + 2 * part,
                                     kPoolDataRange, 0.0f, nullptr);
      gpu::step::fill_synthetic_bf16(dv.as<uint16_t>(), n * row, seed, 0x6b01ull + 2 * part,
                                     kPoolDataRange, 0.0f, nullptr);
      ap.num_tokens = static_cast<int32_t>(n);
      try {
        gpu::append_kv(ap, nullptr, gpu::SlotCheck::kTrusted);
      } catch (const InvalidArgument& e) {
        throw Unsupported(e.what());
      }
    }
    KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
  }

  // Block table: the pool's pages, sequence after sequence, in a seeded permutation
  // (page_order = shuffled) or in pool order (sequential).
  c->dtable.allocate(static_cast<size_t>(batch) * mbps * 4 + 4);
  c->dlens.allocate(c->lens.size() * 4 + 4);
  if (batch > 0) c->dlens.upload(c->lens);
  gpu::DeviceBuffer perm(static_cast<size_t>(g.num_blocks) * 4);
  if (p.str("page_order") == "sequential") {
    std::vector<int32_t> order(static_cast<size_t>(g.num_blocks));
    std::iota(order.begin(), order.end(), 0);
    if (!order.empty()) perm.upload(order);
  } else {
    gpu::shuffled_page_list(g.num_blocks, seed ^ 0x7ab1eull, perm.as<int32_t>(), nullptr);
  }
  if (batch > 0)
    gpu::build_block_tables(c->dlens.as<int32_t>(), batch, bs, mbps, g.num_blocks,
                            perm.as<int32_t>(), -1, c->dtable.as<int32_t>(), nullptr);
  c->table.resize(static_cast<size_t>(batch) * mbps);
  if (batch > 0) c->dtable.download(c->table.data(), c->table.size() * 4);

  // Q: seeded N(0, 1) rounded to BF16.
  ref::SynthRng rng(seed ^ 0x9a11ull);
  c->q.resize(static_cast<size_t>(batch) * hq * d);
  for (auto& x : c->q)
    x = float_to_bf16_bits(static_cast<float>(rng.gaussian()), Saturation::kNonSaturating);
  c->dq.allocate(c->q.size() * 2 + 2);
  if (!c->q.empty()) c->dq.upload(c->q);
  c->o.allocate(c->q.size() * 2, 256);
  c->lse.allocate(static_cast<size_t>(batch) * hq * 4, 256);

  DecodeArgs& a = c->args;
  a.q_dtype = DType::kBF16;
  a.q = c->dq.data();
  a.o = c->o.data();
  a.lse = c->lse.as<float>();
  a.kv.geom = g;
  a.kv.k = c->k.data();
  a.kv.v = c->v.data();
  a.kv.k_scales = g.scale_bytes() ? c->ks.data() : nullptr;
  a.kv.v_scales = g.scale_bytes() ? c->vs.data() : nullptr;
  a.kv.k_scale = k_scale;
  a.kv.v_scale = k_scale;
  a.block_table = c->dtable.as<int32_t>();
  a.seq_lens = c->dlens.as<int32_t>();
  a.num_seqs = batch;
  a.num_qo_heads = hq;
  a.max_blocks_per_seq = mbps;
  a.max_seq_len = max_len;
  a.sm_scale = c->sm_scale;
  if (batch > 0) gpu::validate_decode_tables(a, nullptr);
  c->bytes = min_bytes(g, c->lens, hq, 2);

  // The validated subsample and its reference over the real pool: the pages its sequences
  // use, copied back from the device (page bytes and scale bytes) into a compact host pool
  // in table order.
  if (batch <= kMaxValidated) {
    for (int i = 0; i < batch; ++i) c->checked.push_back(i);
  } else {
    c->checked = {0, batch - 1};
    ref::SynthRng pick(seed ^ 0x5eb5ull);
    while (static_cast<int>(c->checked.size()) < kMaxValidated) {
      const int s2 = 1 + static_cast<int>(pick.uniform() * (batch - 2));
      if (std::find(c->checked.begin(), c->checked.end(), s2) == c->checked.end())
        c->checked.push_back(s2);
    }
    std::sort(c->checked.begin(), c->checked.end());
  }
  const int nv = static_cast<int>(c->checked.size());
  const size_t pb = static_cast<size_t>(g.bytes_per_block());
  const size_t sb = static_cast<size_t>(g.scale_bytes() / g.num_blocks);
  int64_t host_pages = 0;
  for (int s2 : c->checked) host_pages += (c->lens[static_cast<size_t>(s2)] + bs - 1) / bs;
  PageGeometry hg = g;
  hg.num_blocks = std::max<int64_t>(host_pages, 1);
  std::vector<uint8_t> hk(static_cast<size_t>(hg.bytes())), hv(hk.size()),
      hks(static_cast<size_t>(hg.scale_bytes())), hvs(hks.size());
  std::vector<int32_t> htable(static_cast<size_t>(nv) * mbps, ref::kTableSentinel),
      hlens(static_cast<size_t>(nv));
  std::vector<uint16_t> hq_bits(static_cast<size_t>(nv) * hq * d);
  int64_t next = 0;
  for (int i = 0; i < nv; ++i) {
    const int s2 = c->checked[static_cast<size_t>(i)];
    hlens[static_cast<size_t>(i)] = c->lens[static_cast<size_t>(s2)];
    const int used = (c->lens[static_cast<size_t>(s2)] + bs - 1) / bs;
    for (int e = 0; e < used; ++e, ++next) {
      const int64_t page = c->table[static_cast<size_t>(s2) * mbps + e];
      KVLAB_CUDA_CHECK(cudaMemcpy(hk.data() + next * pb, c->k.as<uint8_t>() + page * pb, pb,
                                  cudaMemcpyDeviceToHost));
      KVLAB_CUDA_CHECK(cudaMemcpy(hv.data() + next * pb, c->v.as<uint8_t>() + page * pb, pb,
                                  cudaMemcpyDeviceToHost));
      if (sb) {
        KVLAB_CUDA_CHECK(cudaMemcpy(hks.data() + next * sb, c->ks.as<uint8_t>() + page * sb, sb,
                                    cudaMemcpyDeviceToHost));
        KVLAB_CUDA_CHECK(cudaMemcpy(hvs.data() + next * sb, c->vs.as<uint8_t>() + page * sb, sb,
                                    cudaMemcpyDeviceToHost));
      }
      htable[static_cast<size_t>(i) * mbps + e] = static_cast<int32_t>(next);
    }
    std::copy_n(c->q.begin() + static_cast<size_t>(s2) * hq * d, static_cast<size_t>(hq) * d,
                hq_bits.begin() + static_cast<size_t>(i) * hq * d);
  }
  std::vector<uint16_t> o16(hq_bits.size());
  c->ref_lse.resize(static_cast<size_t>(nv) * hq);
  DecodeArgs h = a;
  h.kv.geom = hg;
  h.kv.k = hk.data();
  h.kv.v = hv.data();
  h.kv.k_scales = sb ? hks.data() : nullptr;
  h.kv.v_scales = sb ? hvs.data() : nullptr;
  h.max_blocks_per_seq = mbps;
  h.max_seq_len = max_len;
  // One reference call per validated sequence, on the point's CPU threads (the host reference
  // is what makes a validation-heavy sweep slow; its sequences are independent).
  parallel_for(nv, threads, [&](int i) {
    const size_t si = static_cast<size_t>(i);
    DecodeArgs hi = h;
    hi.o = o16.data() + si * hq * d;
    hi.lse = c->ref_lse.data() + si * hq;
    hi.q = hq_bits.data() + si * hq * d;
    hi.block_table = htable.data() + si * mbps;
    hi.seq_lens = hlens.data() + si;
    hi.num_seqs = 1;
    ref::decode_attention(hi);
  });
  c->ref_o = ref::to_float(o16.data(), DType::kBF16, o16.size());
  std::ostringstream os;
  os << "sequences";
  for (int s2 : c->checked) os << " " << s2;
  os << " of " << batch << " (all " << hq
     << " heads) against the host reference over their pages copied back from the device pool "
        "(every page distinct)";
  c->validation = os.str();
  return c;
}

}  // namespace

Record run_decode_attention(const Point& p, RunContext& ctx, std::unique_ptr<DeviceState>* state) {
  const uint64_t seed = point_seed(ctx, p);
  std::string key;
  for (const auto& [a, v] : p.axes)
    if (a != "version" && a != "graph" && a != "num_splits") key += a + "=" + v + ",";
  key += std::to_string(seed);
  auto* cached = dynamic_cast<DecodeCase*>(state->get());
  if (!cached || cached->key != key) {
    state->reset();  // free the previous pools first
    std::unique_ptr<DecodeCase> fresh = build_case(p, key, seed, ctx.cpu_threads);
    cached = fresh.get();
    *state = std::move(fresh);
  }
  DecodeCase& c = *cached;
  gpu::DecodeTuning tuning;
  tuning.num_splits = static_cast<int>(p.integer("num_splits"));
  const bool is_auto = p.str("version") == "auto";
  int id = -1;
  std::string picked;
  if (is_auto) {
    const gpu::DecodeChoice ch = gpu::choose_decode(c.args);
    id = ch.version;
    if (tuning.num_splits == 0) tuning = ch.tuning;
    picked = gpu::decode_version(id).name + ": " + ch.basis;
  } else {
    id = version_id(p.str("version"));
  }
  const std::string why = gpu::decode_unsupported_reason(c.args, id, tuning);
  if (!why.empty()) return Record::skipped(why);
  const size_t ws = gpu::decode_workspace_bytes(c.args, id, tuning);
  gpu::DeviceBuffer work(ws);

  // Validate: one launch, outputs pre-filled with NaN.
  c.o.fill_bytes(0xFF);
  c.lse.fill_bytes(0xFF);
  gpu::decode_attention(c.args, id, tuning, work.data(), ws, nullptr);
  KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
  const int hq = c.args.num_qo_heads, d = c.args.kv.geom.head_dim;
  const auto o16 = c.o.download<uint16_t>();
  const auto lse = c.lse.download<float>();
  const std::vector<float> o = ref::to_float(o16.data(), DType::kBF16, o16.size());
  int64_t nonfinite = 0;
  for (float x : o) nonfinite += !std::isfinite(x);
  std::vector<float> got_o, got_lse;
  for (int s : c.checked) {
    got_o.insert(got_o.end(), o.begin() + static_cast<size_t>(s) * hq * d,
                 o.begin() + static_cast<size_t>(s + 1) * hq * d);
    got_lse.insert(got_lse.end(), lse.begin() + static_cast<size_t>(s) * hq,
                   lse.begin() + static_cast<size_t>(s + 1) * hq);
  }
  const KvFormat f = c.args.kv.geom.format;
  const Tolerance tol = tolerance(Op::kDecodeAttention, f, DType::kBF16);
  const Tolerance tol_lse = tolerance(Op::kDecodeLse, f, DType::kBF16);
  ErrorStats st, sl;
  const bool ok_o = check(got_o, c.ref_o, tol, &st, DType::kBF16);
  const bool ok_l = check(got_lse, c.ref_lse, tol_lse, &sl);
  const bool guards = c.o.guards_intact() && c.lse.guards_intact();
  Record r;
  r.metric("max_abs_err", st.max_abs);
  r.metric("rel_l2", st.rel_l2);
  r.metric("nmse", st.nmse);
  r.metric("max_ulp", static_cast<double>(st.max_ulp));
  r.metric("violations", static_cast<double>(st.violations));
  r.metric("lse_max_abs_err", sl.max_abs);
  r.metric("nonfinite_out", static_cast<double>(nonfinite));
  r.metric("validated_seqs", static_cast<double>(c.checked.size()));
  r.metric("guards_intact", guards ? 1.0 : 0.0);
  r.metric("min_bytes", c.bytes);
  r.label("validation", c.validation);
  if (is_auto) {
    r.metric("picked_version", id);
    r.metric("picked_splits", tuning.num_splits);
    r.label("picked", picked);
  }
  std::string fail;
  if (!ok_o)
    fail = "O: " + explain_failure(st, tol);
  else if (!ok_l)
    fail = "LSE: " + explain_failure(sl, tol_lse);
  else if (nonfinite > 0)
    fail =
        std::to_string(nonfinite) + " non-finite outputs (finite data: a sequence was not written)";
  else if (!guards)
    fail = "a guard region around O or LSE was overwritten";
  if (!fail.empty()) {
    r.status = Status::kFailed;
    r.reason = "validation failed (" + c.validation + "): " + fail;
    return r;
  }
  if (!ctx.timing) return r;

  // Time the same configuration.
  const gpu::bench::Timing t = gpu::bench::time_kernel(
      [&](cudaStream_t s) { gpu::decode_attention(c.args, id, tuning, work.data(), ws, s); },
      to_harness(ctx.timing_cfg, p.str("graph") == "on" || ctx.timing_cfg.graph));
  record_timing(&r, t, {c.bytes, CeilingKind::kRead}, ctx);
  return r;
}

}  // namespace kvlab::exp
