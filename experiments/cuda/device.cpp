// device.cpp: the CUDA backend's device facts and checks (device.h): build, device
// summary, ceilings, `kvlab info`'s GPU check, the decode version names, and the GPU
// append_swa for kvlab_dsv4_report.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "experiments/cuda/timing.h"
#include "experiments/device/device.h"
#include "gpu/attention/decode.h"
#include "gpu/bench/harness.h"
#include "gpu/core/cuda_check.h"
#include "gpu/core/device_buffer.h"
#include "gpu/core/device_info.h"
#include "gpu/dsv4/dsv4_kernels.h"
#include "reference/attention/paged_case.h"
#include "reference/metrics/tolerance.h"

namespace kvlab::exp {

gpu::bench::TimingOptions to_harness(const TimingConfig& t, bool graph) {
  gpu::bench::TimingOptions o = t;  // the same struct: only the point's graph mode differs
  o.graph = graph;
  return o;
}

bool built_with_cuda() {
  return true;
}

std::string cuda_runtime_version() {
  return std::to_string(CUDART_VERSION / 1000) + "." + std::to_string((CUDART_VERSION % 1000) / 10);
}

DeviceSummary device_summary() {
  DeviceSummary d;
  std::string err;
  const auto devs = gpu::list_devices(&err);
  d.count = static_cast<int>(devs.size());
  if (devs.empty()) {
    d.error = err.empty() ? "no device" : "no device (" + err + ")";
    return d;
  }
  const auto& g = devs.front();
  d.present = true;
  d.name = g.name;
  d.sm_count = g.sm_count;
  d.sm_clock_khz = g.sm_clock_khz;
  d.mem_clock_khz = g.mem_clock_khz;
  d.mem_bus_bits = g.mem_bus_bits;
  d.l2_bytes = g.l2_bytes;
  d.peak_bytes_per_s = g.peak_bandwidth_bytes_per_s();
  d.global_mem_bytes = g.global_mem_bytes;
  return d;
}

void probe_device(RunContext* ctx) {
  const DeviceSummary d = device_summary();
  ctx->device_present = d.present;
  ctx->device_name = d.present ? d.name : d.error;
  ctx->peak_bytes_per_s = d.peak_bytes_per_s;
}

bool measure_ceilings(RunContext* ctx, std::string* note) {
  if (!ctx->device_present) {
    *note = ctx->device_name;
    return false;
  }
  const gpu::bench::Ceilings c = gpu::bench::measure_ceilings(to_harness(ctx->timing_cfg, false));
  ctx->read_ceiling_bytes_per_s = ctx->pass_read_ceiling_bytes_per_s = c.read_bytes_per_s;
  ctx->copy_ceiling_bytes_per_s = ctx->pass_copy_ceiling_bytes_per_s = c.copy_bytes_per_s;
  return true;
}

int gpu_self_check(std::string* detail) {
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
}

std::vector<std::string> decode_version_names() {
  std::vector<std::string> names;
  for (const auto& v : gpu::decode_versions()) names.push_back(v.name);
  return names;
}

void dsv4_append_swa_on_device(const Dsv4SwaView& ring, const Dsv4AppendSwaArgs& args) {
  const Dsv4EntryPages& e = ring.ring;
  const bool per_token = e.format == Dsv4EntryFormat::kFp8PerToken;
  const size_t rows = static_cast<size_t>(e.num_pages) * e.rows,
               n = static_cast<size_t>(args.num_tokens);
  const size_t data_bytes = per_token ? rows * e.nope_dim : static_cast<size_t>(e.bytes());
  const size_t rope_bytes = per_token ? 2 * rows * e.rope_dim : 0;
  const size_t inv_bytes = per_token ? 4 * rows : 0;
  auto up = [](gpu::DeviceBuffer& b, const void* p, size_t bytes) {
    b.allocate(std::max<size_t>(bytes, 1));
    if (bytes) b.upload(p, bytes);
  };
  gpu::DeviceBuffer data, rope, inv, pos, head, raw, slots, positions;
  up(data, e.data, data_bytes);
  up(rope, e.rope, rope_bytes);
  up(inv, e.inv_scale, inv_bytes);
  up(pos, ring.pos, 4 * rows);
  up(head, ring.head, 4 * static_cast<size_t>(e.num_pages));
  up(raw, args.raw_kv, 2 * n * static_cast<size_t>(e.head_dim()));
  up(slots, args.request_slots, 4 * n);
  up(positions, args.positions, 4 * n);
  Dsv4SwaView dv = ring;
  dv.ring.data = data.as<uint8_t>();
  dv.ring.rope = per_token ? rope.as<uint16_t>() : nullptr;
  dv.ring.inv_scale = per_token ? inv.as<float>() : nullptr;
  dv.pos = pos.as<int32_t>();
  dv.head = head.as<int32_t>();
  gpu::dsv4_append_swa(dv,
                       Dsv4AppendSwaArgs{raw.as<uint16_t>(), slots.as<int32_t>(),
                                         positions.as<int32_t>(), args.num_tokens},
                       nullptr);
  KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
  data.download(e.data, data_bytes);
  if (per_token) {
    rope.download(e.rope, rope_bytes);
    inv.download(e.inv_scale, inv_bytes);
  }
}

}  // namespace kvlab::exp
