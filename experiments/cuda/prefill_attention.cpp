// prefill_attention.cpp: the GPU half of the kind "prefill_attention" (declared in
// experiments/kinds/gpu_kinds.cpp): every registered GPU paged-prefill version
// (gpu/attention/prefill.h) validated against kvlab::ref::paged_prefill_attention through the
// tolerance table, then timed (gpu/bench), in one record.
//
// A point: `batch` sequences, each computing a chunk of `chunk` query tokens after `prefix`
// cached ones (chunked-prefill semantics: the chunk sees its prefix and itself causally), on a
// paged cache of the point's layout and format. The device pool holds seeded 16-bit values of
// unit scale (never zeros), its pages handed to the sequences in a seeded permutation; Q is
// seeded the same way. Validation (before timing, same buffers): O is NaN-prefilled; every
// output must be finite; the last rows of sequence 0's chunk (the most keys) and the first
// rows of the last sequence's chunk are compared with the reference computed on the host
// over the same bytes (the sequence's pages downloaded), as a chunk of those rows over the
// keys they see. Timing: the sweep's [timing] options (cold L2), recorded by record_timing
// (experiments/bench/bench.h) against the read ceiling with the bytes below. FLOPs: 4 * heads *
// head_dim per causal (query, key) pair; bytes: Q + O + the K/V of every attended token once.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "experiments/cuda/timing.h"
#include "experiments/device/device.h"
#include "gpu/attention/prefill.h"
#include "gpu/bench/harness.h"
#include "gpu/core/cuda_check.h"
#include "gpu/core/device_buffer.h"
#include "gpu/step/step_kernels.h"
#include "reference/attention/attention.h"
#include "reference/attention/paged_case.h"
#include "reference/core/error.h"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "sim/cost/gpu_spec.h"

namespace kvlab::exp {
namespace {

constexpr int kValidatedRows = 8;

template <class T>
struct DevBuf {  // typed view of a gpu::DeviceBuffer
  gpu::DeviceBuffer buf;
  T* p;
  explicit DevBuf(size_t n) : buf(std::max<size_t>(n, 1) * sizeof(T)), p(buf.as<T>()) {}
};

}  // namespace

std::vector<std::string> prefill_version_names() {
  std::vector<std::string> v;
  for (const auto& i : gpu::prefill_versions()) v.push_back(i.name);
  return v;
}

Record run_prefill_attention(const Point& p, RunContext& ctx) {
  const int batch = static_cast<int>(p.integer("batch"));
  const int chunk = static_cast<int>(p.integer("chunk"));
  const int prefix = static_cast<int>(p.integer("prefix"));
  const int len = prefix + chunk;
  PageGeometry g;
  g.layout = parse_kv_layout(p.str("layout"));
  g.format = parse_kv_format(p.str("kv_format"));
  g.num_kv_heads = static_cast<int32_t>(p.integer("num_kv_heads"));
  g.head_dim = static_cast<int32_t>(p.integer("head_dim"));
  g.block_size = static_cast<int32_t>(p.integer("block_size"));
  const int pages = (len + g.block_size - 1) / g.block_size;
  g.num_blocks = int64_t{pages} * batch;
  validate(g);
  const int hq = g.num_kv_heads * static_cast<int>(p.integer("gqa_group"));
  const int D = g.head_dim;
  const DType qd = g.format == KvFormat::kFP16 ? DType::kF16 : DType::kBF16;
  int version = -1;
  for (const auto& i : gpu::prefill_versions())
    if (i.name == p.str("version")) version = i.id;
  const uint64_t seed = mix_seed(ctx.seed, p.index);

  // Host tables: a seeded permutation of the pages.
  std::vector<int32_t> perm(static_cast<size_t>(g.num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(seed));
  std::vector<int32_t> q_start(static_cast<size_t>(batch) + 1),
      seq_lens(static_cast<size_t>(batch), len);
  for (int s = 0; s <= batch; ++s) q_start[static_cast<size_t>(s)] = s * chunk;

  PagedPrefillArgs a;
  a.q_dtype = qd;
  a.kv.geom = g;
  a.num_seqs = batch;
  a.num_qo_heads = hq;
  a.max_blocks_per_seq = pages;
  a.max_q_len = chunk;
  a.max_seq_len = len;
  a.sm_scale = 1.0f / std::sqrt(static_cast<float>(D));
  {
    const std::string why = gpu::prefill_unsupported_reason(a, version);
    if (!why.empty()) return Record::skipped(why);
  }
  const int64_t q_elems = int64_t{batch} * chunk * hq * D;
  DevBuf<uint8_t> k(static_cast<size_t>(g.bytes())), v(static_cast<size_t>(g.bytes()));
  DevBuf<uint16_t> q(static_cast<size_t>(q_elems)), o(static_cast<size_t>(q_elems));
  DevBuf<float> lse(static_cast<size_t>(int64_t{batch} * chunk * hq));
  DevBuf<int32_t> dq(q_start.size()), dl(seq_lens.size()), dt(perm.size());
  cudaStream_t st = nullptr;
  // Unit-scale values of the 16-bit type (bf16 bit patterns of |x| <= 1 are finite as fp16 too).
  gpu::step::fill_synthetic_bf16(reinterpret_cast<uint16_t*>(k.p), g.bytes() / 2, seed, 1, 1.0f,
                                 0.0f, st);
  gpu::step::fill_synthetic_bf16(reinterpret_cast<uint16_t*>(v.p), g.bytes() / 2, seed, 2, 1.0f,
                                 0.0f, st);
  gpu::step::fill_synthetic_bf16(q.p, q_elems, seed, 3, 1.0f, 0.0f, st);
  KVLAB_CUDA_CHECK(cudaMemset(o.p, 0xFF, static_cast<size_t>(q_elems) * 2));  // NaN
  KVLAB_CUDA_CHECK(cudaMemcpy(dq.p, q_start.data(), q_start.size() * 4, cudaMemcpyHostToDevice));
  KVLAB_CUDA_CHECK(cudaMemcpy(dl.p, seq_lens.data(), seq_lens.size() * 4, cudaMemcpyHostToDevice));
  KVLAB_CUDA_CHECK(cudaMemcpy(dt.p, perm.data(), perm.size() * 4, cudaMemcpyHostToDevice));
  a.q = q.p;
  a.o = o.p;
  a.lse = lse.p;
  a.kv.k = k.p;
  a.kv.v = v.p;
  a.q_start = dq.p;
  a.seq_lens = dl.p;
  a.block_table = dt.p;
  gpu::validate_prefill_tables(a, st);
  gpu::prefill_attention(a, version, st);
  KVLAB_CUDA_CHECK(cudaDeviceSynchronize());

  // Validation: every output finite; subsampled rows against the host reference.
  std::vector<uint16_t> ho(static_cast<size_t>(q_elems));
  std::vector<float> hl(static_cast<size_t>(int64_t{batch} * chunk * hq));
  KVLAB_CUDA_CHECK(cudaMemcpy(ho.data(), o.p, ho.size() * 2, cudaMemcpyDeviceToHost));
  KVLAB_CUDA_CHECK(cudaMemcpy(hl.data(), lse.p, hl.size() * 4, cudaMemcpyDeviceToHost));
  const std::vector<float> of = ref::to_float(ho.data(), qd, ho.size());
  int64_t nonfinite = 0;
  for (float x : of) nonfinite += std::isfinite(x) ? 0 : 1;
  std::vector<float> got, want, got_lse, want_lse;
  int64_t validated = 0;
  const size_t page_bytes = static_cast<size_t>(g.bytes_per_block());
  for (int s : {0, batch - 1}) {
    const int r0 = s == 0 ? std::max(0, chunk - kValidatedRows) : 0;
    const int r1 = s == 0 ? chunk : std::min(chunk, kValidatedRows);
    // The sequence's pages, in table order, as a compact host pool.
    PageGeometry hg = g;
    hg.num_blocks = pages;
    std::vector<uint8_t> hk(static_cast<size_t>(hg.bytes())), hv(hk.size());
    for (int pg = 0; pg < pages; ++pg) {
      const size_t src =
          static_cast<size_t>(perm[static_cast<size_t>(s) * pages + pg]) * page_bytes;
      KVLAB_CUDA_CHECK(
          cudaMemcpy(hk.data() + pg * page_bytes, k.p + src, page_bytes, cudaMemcpyDeviceToHost));
      KVLAB_CUDA_CHECK(
          cudaMemcpy(hv.data() + pg * page_bytes, v.p + src, page_bytes, cudaMemcpyDeviceToHost));
    }
    // Rows r0..r1-1 of the chunk: a chunk of r1 - r0 queries over prefix + r1 keys.
    std::vector<uint16_t> hq_rows(static_cast<size_t>(r1 - r0) * hq * D);
    KVLAB_CUDA_CHECK(cudaMemcpy(hq_rows.data(), q.p + (int64_t{s} * chunk + r0) * hq * D,
                                hq_rows.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<int32_t> table(static_cast<size_t>(pages));
    std::iota(table.begin(), table.end(), 0);
    const int32_t sub_len = prefix + r1;
    const std::vector<int32_t> sub_start = {0, r1 - r0};
    std::vector<uint16_t> ro(hq_rows.size());
    std::vector<float> rl(static_cast<size_t>(r1 - r0) * hq);
    PagedPrefillArgs h = a;
    h.q = hq_rows.data();
    h.o = ro.data();
    h.lse = rl.data();
    h.kv.geom = hg;
    h.kv.k = hk.data();
    h.kv.v = hv.data();
    h.q_start = sub_start.data();
    h.seq_lens = &sub_len;
    h.block_table = table.data();
    h.num_seqs = 1;
    h.max_q_len = r1 - r0;
    h.max_seq_len = sub_len;
    ref::paged_prefill_attention(h);
    const std::vector<float> rf = ref::to_float(ro.data(), qd, ro.size());
    want.insert(want.end(), rf.begin(), rf.end());
    const int64_t off = (int64_t{s} * chunk + r0) * hq * D;
    got.insert(got.end(), of.begin() + off, of.begin() + off + static_cast<int64_t>(ro.size()));
    want_lse.insert(want_lse.end(), rl.begin(), rl.end());
    const int64_t loff = (int64_t{s} * chunk + r0) * hq;
    got_lse.insert(got_lse.end(), hl.begin() + loff,
                   hl.begin() + loff + static_cast<int64_t>(rl.size()));
    validated += r1 - r0;
  }
  ErrorStats es, el;
  const bool ok_o = check(got, want, tolerance(Op::kPrefillAttention, g.format, qd), &es, qd);
  const bool ok_l = check(got_lse, want_lse, tolerance(Op::kDecodeLse, g.format, DType::kF32), &el);
  Record r;
  r.metric("max_abs_err", es.max_abs);
  r.metric("nmse", es.nmse);
  r.metric("lse_max_abs_err", el.max_abs);
  r.metric("validated_rows", static_cast<double>(validated));
  r.metric("nonfinite_out", static_cast<double>(nonfinite));
  const double pairs = double(batch) * (double(chunk) * prefix + 0.5 * double(chunk) * (chunk + 1));
  const double flops = 4.0 * pairs * hq * D;
  const double bytes = 2.0 * 2.0 * double(q_elems) + 2.0 * double(batch) * len * g.num_kv_heads *
                                                         D * (kv_format_bits(g.format) / 8.0);
  r.metric("flops", flops);
  r.metric("min_bytes", bytes);
  r.label("version", p.str("version"));
  if (nonfinite > 0 || !ok_o || !ok_l) {
    r.status = Status::kFailed;
    r.reason = nonfinite > 0 ? std::to_string(nonfinite) + " non-finite outputs"
               : !ok_o       ? "O vs reference: " +
                             explain_failure(es, tolerance(Op::kPrefillAttention, g.format, qd))
                       : "LSE vs reference: " +
                             explain_failure(el, tolerance(Op::kDecodeLse, g.format, DType::kF32));
    return r;
  }
  if (!ctx.timing) return r;
  const gpu::bench::Timing t =
      gpu::bench::time_kernel([&](cudaStream_t s) { gpu::prefill_attention(a, version, s); },
                              to_harness(ctx.timing_cfg, false));
  record_timing(&r, t, {bytes, CeilingKind::kRead}, ctx);
  const double sec = t.median_us * 1e-6;
  const double tf = sec > 0 ? flops / sec / 1e12 : 0.0;
  r.metric("tflops", tf);
  std::string gpu = "H100";  // the GPU table's entry for this device (H100 when unknown)
  for (const char* key : {"H200", "H100", "A100", "B200"})
    if (ctx.device_name.find(key) != std::string::npos) {
      gpu = key;
      break;
    }
  r.metric("pct_datasheet_flops", 100.0 * tf * 1e12 / sim::gpu_spec(gpu).bf16_flops);
  r.label("gpu_spec", gpu);
  return r;
}

}  // namespace kvlab::exp
