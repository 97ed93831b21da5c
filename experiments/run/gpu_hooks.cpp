// gpu_hooks.cpp: the driver's calls into the GPU side (see gpu_hooks.h).
#include "experiments/run/gpu_hooks.h"

#include "experiments/results/provenance.h"

#if defined(KVLAB_HAVE_CUDA)
#include <algorithm>

#include "gpu/attention/decode.h"
#include "gpu/bench/harness.h"
#include "gpu/core/device_buffer.h"
#include "reference/attention/paged_case.h"
#include "reference/metrics/tolerance.h"
#endif

namespace kvlab::exp {

#if defined(KVLAB_HAVE_CUDA)
gpu::bench::TimingOptions to_harness(const TimingConfig& t, bool graph) {
  gpu::bench::TimingOptions o = t;  // the same struct: only the point's graph mode differs
  o.graph = graph;
  return o;
}
#endif

void probe_device(RunContext* ctx) {
  const DeviceSummary d = device_summary();
  ctx->device_present = d.present;
  ctx->device_name = d.present ? d.name : d.error;
  ctx->peak_bytes_per_s = d.peak_bytes_per_s;
}

bool measure_ceilings(RunContext* ctx, std::string* note) {
#if defined(KVLAB_HAVE_CUDA)
  if (!ctx->device_present) {
    *note = ctx->device_name;
    return false;
  }
  const gpu::bench::Ceilings c = gpu::bench::measure_ceilings(to_harness(ctx->timing_cfg, false));
  ctx->read_ceiling_bytes_per_s = c.read_bytes_per_s;
  ctx->copy_ceiling_bytes_per_s = c.copy_bytes_per_s;
  return true;
#else
  (void)ctx;
  *note = "built without CUDA";
  return false;
#endif
}

int gpu_self_check(std::string* detail) {
#if defined(KVLAB_HAVE_CUDA)
  RunContext ctx;
  probe_device(&ctx);
  if (!ctx.device_present) {
    *detail = ctx.device_name;
    return -1;
  }
  try {
    // A small awkward case (lengths 0 .. 3001, GQA 4, fp8 per-token scales: the widest read
    // path) through the newest registered version.
    ref::PagedCaseSpec spec;
    spec.seq_lens = {0, 1, 15, 16, 17, 257, 3001};
    spec.num_qo_heads = 8;
    spec.num_kv_heads = 2;
    spec.head_dim = 128;
    spec.block_size = 16;
    spec.format = KvFormat::kFP8E4M3PerToken;
    spec.seed = 20240601;
    ref::PagedCase c = ref::make_paged_case(spec);
    const ref::DecodeOutputs want = ref::reference_decode(c);
    gpu::DeviceBuffer q, k, v, ks, vs, table, lens, o, lse;
    auto up = [](gpu::DeviceBuffer& b, const void* p, size_t n) {
      b.allocate(std::max<size_t>(n, 1));
      if (n) b.upload(p, n);
    };
    up(q, c.q.data(), c.q.size() * 2);
    up(k, c.k_pool.data(), c.k_pool.size());
    up(v, c.v_pool.data(), c.v_pool.size());
    up(ks, c.k_scales.data(), c.k_scales.size());
    up(vs, c.v_scales.data(), c.v_scales.size());
    up(table, c.block_table.data(), c.block_table.size() * 4);
    up(lens, c.seq_lens.data(), c.seq_lens.size() * 4);
    o.allocate(static_cast<size_t>(c.o_elements()) * 2);
    lse.allocate(static_cast<size_t>(c.lse_elements()) * 4);
    o.fill_bytes(0xFF);
    DecodeArgs a = c.decode_args(o.data(), lse.as<float>());
    a.q = q.data();
    a.kv.k = k.data();
    a.kv.v = v.data();
    a.kv.k_scales = ks.data();
    a.kv.v_scales = vs.data();
    a.block_table = table.as<int32_t>();
    a.seq_lens = lens.as<int32_t>();
    const gpu::DecodeVersionInfo& ver = gpu::decode_versions().back();
    const std::string why = gpu::decode_unsupported_reason(a, ver.id);
    if (!why.empty()) {
      *detail = ver.name + " does not run the check case: " + why;
      return 0;
    }
    const size_t ws = gpu::decode_workspace_bytes(a, ver.id);
    gpu::DeviceBuffer work(ws);
    gpu::decode_attention(a, ver.id, work.data(), ws, nullptr);
    KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
    const auto o16 = o.download<uint16_t>();
    const std::vector<float> got = ref::to_float(o16.data(), DType::kBF16, o16.size());
    const Tolerance tol = tolerance(Op::kDecodeAttention, spec.format, DType::kBF16);
    ErrorStats st;
    const bool ok = check(got, want.o, tol, &st, DType::kBF16);
    *detail = ver.name + " on " + ctx.device_name + " (" + c.describe() + ")" +
              (ok ? "" : ": " + explain_failure(st, tol));
    return ok ? 1 : 0;
  } catch (const std::exception& e) {
    *detail = std::string("error: ") + e.what();
    return 0;
  }
#else
  *detail = "built without CUDA";
  return -1;
#endif
}

}  // namespace kvlab::exp
