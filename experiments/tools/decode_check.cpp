// decode_check.cpp (kvlab_decode_check): the GPU decode versions' validation table and a
// first timing of them, printed as plain text (the closing table of issue #3; the numbers
// behind gpu/attention/TUNING.md).
//
//   kvlab_decode_check --validate   version x format: max |error| and relative L2 against the
//                                   reference over the same dequantized cache, and against
//                                   the original activations (NHD, 32 q / 8 kv heads, d 128,
//                                   block 16, awkward lengths 0..3001, seeded, printed)
//   kvlab_decode_check --time       median time (cold L2, CUDA events, harness of gpu/bench)
//                                   of every version on decode shapes of DESIGN.md's targets,
//                                   with the floor bytes over time as % of the read ceiling
//                                   measured in the same run. Every timing row carries the
//                                   error of the same configuration (layout, format, heads,
//                                   head_dim, block size) validated on a smaller batch first.
// The timing pools hold real encoded data (never zeros): 64 pages of a seeded case repeated
// over the pool, reached through a shuffled block table.
#include <boost/program_options.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "reference/attention/paged_case.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/metrics.h"
#include "reference/metrics/tolerance.h"

#if defined(KVLAB_HAVE_CUDA)
#include "gpu/attention/decode.h"
#include "gpu/bench/harness.h"
#include "gpu/core/device_buffer.h"
#include "gpu/core/device_info.h"
#include "gpu/core/device_tables.h"
#endif

namespace po = boost::program_options;
using namespace kvlab;

#if defined(KVLAB_HAVE_CUDA)
namespace {

// A PagedCase copied to the device.
struct DevCase {
  gpu::DeviceBuffer q, k, v, ks, vs, table, lens, o, lse;
  DecodeArgs args;
  explicit DevCase(ref::PagedCase& c) {
    q.allocate(c.q.size() * 2);
    q.upload(c.q);
    k.allocate(c.k_pool.size());
    k.upload(c.k_pool);
    v.allocate(c.v_pool.size());
    v.upload(c.v_pool);
    if (!c.k_scales.empty()) {
      ks.allocate(c.k_scales.size());
      ks.upload(c.k_scales);
      vs.allocate(c.v_scales.size());
      vs.upload(c.v_scales);
    }
    table.allocate(c.block_table.size() * 4);
    table.upload(c.block_table);
    lens.allocate(c.seq_lens.size() * 4);
    lens.upload(c.seq_lens);
    o.allocate(static_cast<size_t>(c.o_elements()) * 2);
    lse.allocate(static_cast<size_t>(c.lse_elements()) * 4);
    args = c.decode_args(o.data(), lse.as<float>());
    args.q = q.data();
    args.kv.k = k.data();
    args.kv.v = v.data();
    args.kv.k_scales = c.k_scales.empty() ? nullptr : ks.data();
    args.kv.v_scales = c.v_scales.empty() ? nullptr : vs.data();
    args.block_table = table.as<int32_t>();
    args.seq_lens = lens.as<int32_t>();
  }
};

struct RunResult {
  bool supported = false;
  std::string reason;
  std::vector<float> o, lse;
};

RunResult run(ref::PagedCase& c, DevCase& d, int version) {
  RunResult r;
  r.reason = gpu::decode_unsupported_reason(d.args, version);
  if (!r.reason.empty()) return r;
  r.supported = true;
  const size_t ws = gpu::decode_workspace_bytes(d.args, version);
  gpu::DeviceBuffer w(ws);
  d.o.fill_bytes(0xFF);
  gpu::decode_attention(d.args, version, w.data(), ws, nullptr);
  KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
  const auto o16 = d.o.download<uint16_t>();
  r.o = ref::to_float(o16.data(), c.spec.q_dtype, o16.size());
  r.lse = d.lse.download<float>();
  return r;
}

ref::PagedCaseSpec base_spec(KvFormat f, uint64_t seed) {
  ref::PagedCaseSpec s;
  s.layout = KvLayout::kNHD;
  s.format = f;
  s.num_qo_heads = 32;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  s.block_size = 16;
  s.seed = seed;
  return s;
}

int validate_table(uint64_t seed) {
  std::printf("validation: NHD, bf16 Q/O, 32 q / 8 kv heads, head_dim 128, block 16, lengths = "
              "awkward_seq_lens(16, 3001), seed %llu\n", static_cast<unsigned long long>(seed));
  std::printf("%-32s %-12s %12s %12s %6s | %12s %12s %6s\n", "version", "format", "max_abs", "rel_l2", "pass",
              "orig_max_abs", "orig_rel_l2", "sane");
  int failures = 0;
  for (KvFormat f : all_kv_formats()) {
    ref::PagedCaseSpec s = base_spec(f, seed);
    s.seq_lens = ref::awkward_seq_lens(16, 3001);
    ref::PagedCase c = ref::make_paged_case(s);
    DevCase d(c);
    const ref::DecodeOutputs tight = ref::reference_decode(c);
    const ref::DecodeOutputs orig = ref::reference_decode_original(c);
    for (const auto& v : gpu::decode_versions()) {
      const RunResult r = run(c, d, v.id);
      if (!r.supported) {
        std::printf("%-32s %-12s unsupported: %s\n", v.name.c_str(), to_string(f).c_str(), r.reason.c_str());
        continue;
      }
      ErrorStats st, so;
      const bool ok = check(r.o, tight.o, tolerance(Op::kDecodeAttention, f, s.q_dtype), &st) &&
                      check(r.lse, tight.lse, tolerance(Op::kDecodeLse, f, s.q_dtype), nullptr);
      const bool sane = check(r.o, orig.o, tolerance(Op::kDecodeAttentionVsBf16, f, s.q_dtype), &so);
      failures += !ok + !sane;
      std::printf("%-32s %-12s %12.3e %12.3e %6s | %12.3e %12.3e %6s\n", v.name.c_str(), to_string(f).c_str(),
                  st.max_abs, st.rel_l2, ok ? "yes" : "NO", so.max_abs, so.rel_l2, sane ? "yes" : "NO");
    }
  }
  return failures;
}

struct Shape {
  const char* id;
  int batch;
  int ctx;  // every sequence; < 0: mixed lengths 1k..|ctx|
};

// Floor bytes of one decode call: K and V at storage precision plus their scales, Q and O.
double floor_bytes(const PageGeometry& g, const std::vector<int32_t>& lens, int qo_heads) {
  double tokens = 0;
  for (int32_t l : lens) tokens += l;
  const double per_token_head = static_cast<double>(g.head_dim) * g.elem_bits() / 8 +
                                (kv_format_has_token_scales(g.format) ? 4.0 : 0.0) +
                                (g.scale_group() ? static_cast<double>(g.head_dim / g.scale_group()) : 0.0);
  return 2.0 * tokens * g.num_kv_heads * per_token_head + 2.0 * lens.size() * qo_heads * g.head_dim * 2;
}

int time_table(uint64_t seed) {
  const gpu::bench::TimingOptions opt;
  const gpu::bench::Ceilings ceil = gpu::bench::measure_ceilings(opt);
  const auto devs = gpu::list_devices();
  const double datasheet = devs.empty() ? 0 : devs[0].peak_bandwidth_bytes_per_s();
  std::printf("\ndevice: %s; measured read ceiling %.3f TB/s, copy %.3f TB/s; datasheet %.3f TB/s\n",
              devs.empty() ? "?" : devs[0].name.c_str(), ceil.read_bytes_per_s / 1e12, ceil.copy_bytes_per_s / 1e12,
              datasheet / 1e12);
  const Shape shapes[] = {{"P1 b64 x 8k", 64, 8192}, {"P2 b1 x 32k", 1, 32768}, {"P3 b16 x 4k", 16, 4096},
                          {"P4 b32 mixed 1k-32k", 32, -32768}};
  std::printf("%-22s %-10s %-32s %10s %8s %9s %8s %8s | %s\n", "shape", "format", "version", "median_us", "rel_iqr",
              "GB/s", "%ceil", "%sheet", "same-config validation (rel_l2 vs reference)");
  for (const Shape& sh : shapes) {
    for (KvFormat f : {KvFormat::kBF16, KvFormat::kFP8E4M3}) {
      // Validation of this configuration on a small batch first.
      ref::PagedCaseSpec vs = base_spec(f, seed + 17);
      vs.seq_lens = {1031, 3001, 17, 2053};
      ref::PagedCase vc = ref::make_paged_case(vs);
      DevCase vd(vc);
      const ref::DecodeOutputs tight = ref::reference_decode(vc);

      // The timing case: 64 pages of real data repeated over the pool.
      ref::PagedCaseSpec ps = base_spec(f, seed + 29);
      ps.seq_lens = {64 * 16};
      ps.extra_blocks = 0;
      ps.shuffle_pages = false;
      ps.keep_original = false;
      ref::PagedCase pc = ref::make_paged_case(ps);
      std::vector<int32_t> lens(static_cast<size_t>(sh.batch));
      std::mt19937_64 rng(seed + 31);
      for (auto& l : lens) l = sh.ctx > 0 ? sh.ctx : 1024 + static_cast<int32_t>(rng() % (-sh.ctx - 1024 + 1));
      const int32_t max_len = *std::max_element(lens.begin(), lens.end());
      const int32_t mbps = (max_len + 15) / 16;
      int64_t pages = 0;
      for (auto l : lens) pages += (l + 15) / 16;
      PageGeometry g = pc.geom;
      g.num_blocks = pages;
      gpu::DeviceBuffer k(static_cast<size_t>(g.bytes())), v(static_cast<size_t>(g.bytes()));
      gpu::DeviceBuffer ksc(static_cast<size_t>(std::max<int64_t>(g.scale_bytes(), 1))),
          vsc(static_cast<size_t>(std::max<int64_t>(g.scale_bytes(), 1)));
      const size_t pb = static_cast<size_t>(pc.geom.bytes_per_block());
      const size_t sb = static_cast<size_t>(pc.geom.scale_bytes() / pc.geom.num_blocks);
      for (int64_t p = 0; p < pages; ++p) {
        const size_t src = static_cast<size_t>(p % 64);
        KVLAB_CUDA_CHECK(cudaMemcpy(k.as<uint8_t>() + p * pb, pc.k_pool.data() + src * pb, pb, cudaMemcpyHostToDevice));
        KVLAB_CUDA_CHECK(cudaMemcpy(v.as<uint8_t>() + p * pb, pc.v_pool.data() + src * pb, pb, cudaMemcpyHostToDevice));
        if (sb) {
          KVLAB_CUDA_CHECK(cudaMemcpy(ksc.as<uint8_t>() + p * sb, pc.k_scales.data() + src * sb, sb, cudaMemcpyHostToDevice));
          KVLAB_CUDA_CHECK(cudaMemcpy(vsc.as<uint8_t>() + p * sb, pc.v_scales.data() + src * sb, sb, cudaMemcpyHostToDevice));
        }
      }
      // Block tables on the device: a seeded page permutation (Thrust sort) and offsets by
      // an exclusive scan of pages per sequence.
      gpu::DeviceBuffer dt(static_cast<size_t>(sh.batch) * mbps * 4), dl(lens.size() * 4), dperm(static_cast<size_t>(pages) * 4);
      dl.upload(lens);
      gpu::shuffled_page_list(pages, seed + 37, dperm.as<int32_t>(), nullptr);
      gpu::build_block_tables(dl.as<int32_t>(), sh.batch, 16, mbps, pages, dperm.as<int32_t>(), 0, dt.as<int32_t>(), nullptr);
      std::vector<uint16_t> q(static_cast<size_t>(sh.batch) * 32 * 128);
      for (size_t i = 0; i < q.size(); ++i) q[i] = pc.q[i % pc.q.size()];
      gpu::DeviceBuffer dq(q.size() * 2), dout(q.size() * 2), dlse(static_cast<size_t>(sh.batch) * 32 * 4);
      dq.upload(q);
      DecodeArgs a = pc.decode_args(dout.data(), dlse.as<float>());
      a.q = dq.data();
      a.kv.geom = g;
      a.kv.k = k.data();
      a.kv.v = v.data();
      a.kv.k_scales = g.scale_bytes() ? ksc.data() : nullptr;
      a.kv.v_scales = g.scale_bytes() ? vsc.data() : nullptr;
      a.block_table = dt.as<int32_t>();
      a.seq_lens = dl.as<int32_t>();
      a.num_seqs = sh.batch;
      a.max_blocks_per_seq = mbps;
      a.max_seq_len = max_len;
      gpu::validate_decode_tables(a, nullptr);
      const double bytes = floor_bytes(g, lens, 32);
      for (const auto& ver : gpu::decode_versions()) {
        const std::string why = gpu::decode_unsupported_reason(a, ver.id);
        if (!why.empty()) {
          std::printf("%-22s %-10s %-32s unsupported: %s\n", sh.id, to_string(f).c_str(), ver.name.c_str(), why.c_str());
          continue;
        }
        const RunResult vr = run(vc, vd, ver.id);
        ErrorStats st;
        const bool ok = vr.supported && check(vr.o, tight.o, tolerance(Op::kDecodeAttention, f, vs.q_dtype), &st);
        const size_t ws = gpu::decode_workspace_bytes(a, ver.id);
        gpu::DeviceBuffer w(ws);
        const auto tm = gpu::bench::time_kernel(
            [&](cudaStream_t st_) { gpu::decode_attention(a, ver.id, w.data(), ws, st_); }, opt);
        const double bw = bytes / (tm.median_us * 1e-6);
        std::printf("%-22s %-10s %-32s %10.1f %8.3f %9.1f %7.1f%% %7.1f%% | %s rel_l2=%.2e\n", sh.id,
                    to_string(f).c_str(), ver.name.c_str(), tm.median_us, tm.rel_iqr, bw / 1e9,
                    100 * bw / ceil.read_bytes_per_s, datasheet > 0 ? 100 * bw / datasheet : 0.0,
                    ok ? "pass" : "FAIL", st.rel_l2);
      }
    }
  }
  return 0;
}

}  // namespace
#endif

int main(int argc, char** argv) {
  po::options_description desc("kvlab_decode_check: validation table and timing of the GPU decode versions");
  uint64_t seed = 20251122;
  desc.add_options()("help", "this text")("validate", "print the version x format error table")(
      "time", "time every version on the DESIGN.md target shapes")("seed", po::value<uint64_t>(&seed), "case seed");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  if (vm.count("help") || (!vm.count("validate") && !vm.count("time"))) {
    std::printf("%s\n", [&] { std::ostringstream os; os << desc; return os.str(); }().c_str());
    return vm.count("help") ? 0 : 2;
  }
#if defined(KVLAB_HAVE_CUDA)
  if (!gpu::device_available()) {
    std::fprintf(stderr, "kvlab_decode_check: no CUDA device\n");
    return 1;
  }
  int failures = 0;
  try {
    if (vm.count("validate")) failures += validate_table(seed);
    if (vm.count("time")) failures += time_table(seed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvlab_decode_check: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
#else
  std::fprintf(stderr, "kvlab_decode_check: built without CUDA (KVLAB_CUDA=OFF)\n");
  return 1;
#endif
}
