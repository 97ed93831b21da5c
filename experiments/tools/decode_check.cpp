// decode_check.cpp (kvlab_decode_check): the GPU decode versions' validation table and a
// first timing of them, printed as plain text (the numbers behind gpu/attention/TUNING.md).
//
//   kvlab_decode_check --validate   version x format: max |error| and relative L2 against the
//                                   reference over the same dequantized cache, and against
//                                   the original activations (NHD, 32 q / 8 kv heads, d 128,
//                                   block 16, awkward lengths 0..3001, seeded, printed)
//   kvlab_decode_check --time       median time (cold L2, CUDA events, harness of gpu/bench)
//                                   of the chosen versions (--versions, plan variants of v4+
//                                   included) over a suite of points (--suite targets: the
//                                   shapes of targets P1-P8, gpu/README.md; grid: batch x
//                                   context x format),
//                                   with the floor bytes over time as % of the read ceiling
//                                   measured in the same run and of the datasheet figure;
//                                   CUDA-graph replay for the launch-bound P8 points; --append
//                                   times the quantize-on-write kernel (P9; --append-formats picks
//                                   formats, e.g. one per ncu run); --csv keeps every row. Every
//                                   timing row carries the error of the same configuration (format,
//                                   heads, block size) validated on a smaller batch first, and the
//                                   full-size launch must be finite everywhere.
// The timing pools hold real encoded data (never zeros): 64 pages of a seeded case repeated
// over the pool (device-side doubling copies), reached through a shuffled block table.
#include <boost/program_options.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "reference/attention/paged_case.h"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/metrics.h"
#include "reference/metrics/tolerance.h"

#include "gpu/attention/decode.h"
#include "gpu/attention/v4_tuning.h"
#include "gpu/quant/append.h"
#include "gpu/bench/harness.h"
#include "gpu/core/device_buffer.h"
#include "gpu/core/device_info.h"
#include "gpu/core/device_tables.h"

namespace po = boost::program_options;
using namespace kvlab;

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
  std::printf(
      "validation: NHD, bf16 Q/O, 32 q / 8 kv heads, head_dim 128, block 16, lengths = "
      "awkward_seq_lens(16, 3001), seed %llu\n",
      static_cast<unsigned long long>(seed));
  std::printf("%-32s %-12s %12s %12s %6s | %12s %12s %6s\n", "version", "format", "max_abs",
              "rel_l2", "pass", "orig_max_abs", "orig_rel_l2", "sane");
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
        std::printf("%-32s %-12s unsupported: %s\n", v.name.c_str(), to_string(f).c_str(),
                    r.reason.c_str());
        continue;
      }
      ErrorStats st, so;
      const bool ok = check(r.o, tight.o, tolerance(Op::kDecodeAttention, f, s.q_dtype), &st) &&
                      check(r.lse, tight.lse, tolerance(Op::kDecodeLse, f, s.q_dtype), nullptr);
      const bool sane =
          check(r.o, orig.o, tolerance(Op::kDecodeAttentionVsBf16, f, s.q_dtype), &so);
      failures += !ok + !sane;
      std::printf("%-32s %-12s %12.3e %12.3e %6s | %12.3e %12.3e %6s\n", v.name.c_str(),
                  to_string(f).c_str(), st.max_abs, st.rel_l2, ok ? "yes" : "NO", so.max_abs,
                  so.rel_l2, sane ? "yes" : "NO");
    }
  }
  return failures;
}

// ------------------------------------------------------------------ the benchmark
// One point: a batch of sequences over a paged cache of real encoded data (base pages of a
// seeded case repeated over the pool by device-side doubling copies, reached through a
// seeded page permutation), 8 KV heads x group query heads, head_dim 128, NHD.
struct BenchPoint {
  std::string target;  // "P1".."P8", "grid", ...
  int batch = 1;
  int ctx = 0;         // every sequence's length, or the maximum when mixed
  bool mixed = false;  // seeded uniform lengths in [1024, ctx] (a skewed batch)
  KvFormat format = KvFormat::kBF16;
  KvLayout layout = KvLayout::kNHD;
  int group = 4;
  int block = 16;
  bool graph = false;  // CUDA-graph replay (launch-bound points; warm L2)
};

struct BenchRow {
  BenchPoint pt;
  std::string version;
  std::string status;  // ok | skipped | failed
  std::string reason;
  double median_us = 0, q1_us = 0, q3_us = 0, rel_iqr = 0, bytes = 0, gbps = 0, pct_ceiling = 0,
         pct_sheet = 0;
  double rel_l2 = 0;
  int reps = 0;
};

constexpr int kKvHeads = 8;
constexpr int kHeadDim = 128;
constexpr int kBasePages = 64;

// Floor bytes of one decode call: K and V at storage precision plus their scales, Q and O.
double floor_bytes(const PageGeometry& g, const std::vector<int32_t>& lens, int qo_heads) {
  double tokens = 0;
  for (int32_t l : lens) tokens += l;
  const double per_token_head =
      static_cast<double>(g.head_dim) * g.elem_bits() / 8 +
      (kv_format_has_token_scales(g.format) ? 4.0 : 0.0) +
      (g.scale_group() ? static_cast<double>(g.head_dim / g.scale_group()) : 0.0);
  return 2.0 * tokens * g.num_kv_heads * per_token_head +
         2.0 * lens.size() * qo_heads * g.head_dim * 2;
}

std::vector<int32_t> lengths_of(const BenchPoint& pt, uint64_t seed) {
  std::vector<int32_t> lens(static_cast<size_t>(pt.batch), pt.ctx);
  if (pt.mixed) {
    std::mt19937_64 rng(seed + 31);
    const int lo = std::min(1024, pt.ctx);
    for (auto& l : lens)
      l = lo + static_cast<int32_t>(rng() % static_cast<uint64_t>(pt.ctx - lo + 1));
  }
  return lens;
}

ref::PagedCaseSpec bench_spec(const BenchPoint& pt, uint64_t seed) {
  ref::PagedCaseSpec s;
  s.layout = pt.layout;
  s.format = pt.format;
  s.num_kv_heads = kKvHeads;
  s.num_qo_heads = kKvHeads * pt.group;
  s.head_dim = kHeadDim;
  s.block_size = pt.block;
  s.seed = seed;
  return s;
}

// Version names: "4" or "v4"; plan variants of v4+: "4:waves=N", "4:chunk=MiB", "4:nopdl".
struct VersionSel {
  int id = 0;
  std::string label;
  gpu::V4Tuning tuning;
};
std::vector<VersionSel> parse_versions(const std::string& list) {
  std::vector<VersionSel> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    VersionSel v;
    std::string base = item, opt;
    const auto colon = item.find(':');
    if (colon != std::string::npos) base = item.substr(0, colon), opt = item.substr(colon + 1);
    if (!base.empty() && base[0] == 'v') base = base.substr(1);
    v.id = std::stoi(base);
    v.label = gpu::decode_version(v.id).name;
    if (!opt.empty()) {
      KVLAB_REQUIRE(v.id >= 4, "plan options apply to v4+, got '" << item << "'");
      if (opt.rfind("waves=", 0) == 0)
        v.tuning.fill_waves = std::stoi(opt.substr(6));
      else if (opt.rfind("chunk=", 0) == 0)
        v.tuning.max_chunk_bytes = static_cast<int64_t>(std::stod(opt.substr(6)) * (1 << 20));
      else if (opt == "nopdl")
        v.tuning.pdl = false;
      else
        KVLAB_REQUIRE(false, "unknown version option '" << opt << "' (waves=N, chunk=MiB, nopdl)");
      v.label += ":" + opt;
    }
    out.push_back(v);
  }
  return out;
}

std::vector<BenchPoint> suite(const std::string& name) {
  std::vector<BenchPoint> v;
  KvLayout layout = KvLayout::kNHD;
  auto add = [&](const char* tgt, int b, int ctx, KvFormat f, int grp = 4, int blk = 16,
                 bool mixed = false, bool graph = false) {
    BenchPoint p;
    p.target = tgt, p.batch = b, p.ctx = ctx, p.format = f, p.group = grp, p.block = blk,
    p.mixed = mixed, p.graph = graph;
    p.layout = layout;
    v.push_back(p);
  };
  const KvFormat bf = KvFormat::kBF16, f8 = KvFormat::kFP8E4M3, f4 = KvFormat::kNVFP4;
  if (name == "targets" || name == "all") {
    // Every target shape in both token-row layouts: NHD (a KV head's 16-token page is 16
    // rows strided by num_kv_heads rows) and HND (the page is one contiguous run).
    for (KvLayout l : {KvLayout::kNHD, KvLayout::kHND}) {
      layout = l;
      for (KvFormat f : {bf, f8}) {
        add("P1", 64, 8192, f), add("P1", 64, 32768, f);
        add("P2", 1, 32768, f), add("P2", 1, 131072, f), add("P2", 4, 32768, f);
        add("P3", 8, 2048, f), add("P3", 8, 8192, f), add("P3", 16, 2048, f),
            add("P3", 16, 4096, f), add("P3", 16, 8192, f);
        add("P4", 32, 65536, f, 4, 16, true);
      }
      add("P1", 64, 8192, f4), add("P2", 1, 32768, f4);
      for (int blk : {1, 32, 64, 128}) add("P6", 64, 8192, bf, 4, blk);
      for (int grp : {1, 8}) add("P7", 64, 8192, bf, grp);
      add("P8", 1, 512, bf, 4, 16, false, true), add("P8", 1, 1024, bf, 4, 16, false, true);
      add("P8", 1, 1024, f8, 4, 16, false, true);
    }
    layout = KvLayout::kNHD;
  }
  if (name ==
      "small") {  // the latency-bound target shapes (TUNING.md step 6), plus P1 64 x 8k as a check
    for (KvFormat f : {bf, f8}) {
      add("P2", 1, 32768, f), add("P3", 8, 2048, f), add("P3", 8, 8192, f), add("P3", 16, 2048, f);
      add("P1", 64, 8192, f);
    }
    add("P8", 1, 512, bf, 4, 16, false, true);
  }
  if (name == "none") return v;  // --append alone
  if (name == "profile") {       // one FP8 and one BF16 P1 point, for ncu
    add("P1", 64, 8192, f8), add("P1", 64, 8192, bf);
  }
  if (name == "grid" || name == "all") {
    for (KvFormat f : {bf, f8, f4})
      for (int b : {1, 4, 16, 64, 256})
        for (int ctx : {512, 2048, 8192, 32768, 131072}) add("grid", b, ctx, f);
  }
  KVLAB_REQUIRE(!v.empty(),
                "unknown suite '" << name << "' (targets, grid, all, small, none, profile)");
  return v;
}

// Validation of a version on a small case of the point's configuration (cached per
// configuration): relative L2 against the reference over the same cache, pass/fail.
struct Validation {
  bool ok = false;
  double rel_l2 = 0;
};

class Bench {
 public:
  Bench(uint64_t seed, double max_gib) : seed_(seed), max_bytes_(max_gib * (1ull << 30)) {
    ceil_ = gpu::bench::measure_ceilings(opt_);
    const auto devs = gpu::list_devices();
    device_ = devs.empty() ? "?" : devs[0].name;
    sheet_ = devs.empty() ? 0 : devs[0].peak_bandwidth_bytes_per_s();
    std::printf(
        "\ndevice: %s; measured read ceiling %.3f TB/s, copy %.3f TB/s; datasheet %.3f TB/s\n",
        device_.c_str(), ceil_.read_bytes_per_s / 1e12, ceil_.copy_bytes_per_s / 1e12,
        sheet_ / 1e12);
  }
  const gpu::bench::Ceilings& ceilings() const { return ceil_; }
  double sheet() const { return sheet_; }
  const std::string& device() const { return device_; }

  Validation validate(const BenchPoint& pt, const VersionSel& ver) {
    std::ostringstream key;
    key << ver.label << "|" << to_string(pt.format) << "|" << to_string(pt.layout) << "|"
        << pt.group << "|" << pt.block;
    auto it = vcache_.find(key.str());
    if (it != vcache_.end()) return it->second;
    ref::PagedCaseSpec vs = bench_spec(pt, seed_ + 17);
    vs.seq_lens = {1031, 3001, 17, 2053};
    ref::PagedCase vc = ref::make_paged_case(vs);
    DevCase vd(vc);
    const ref::DecodeOutputs tight = ref::reference_decode(vc);
    gpu::v4_tuning() = ver.tuning;
    const RunResult r = run(vc, vd, ver.id);
    Validation v;
    ErrorStats st;
    v.ok = r.supported &&
           check(r.o, tight.o, tolerance(Op::kDecodeAttention, pt.format, vs.q_dtype), &st) &&
           check(r.lse, tight.lse, tolerance(Op::kDecodeLse, pt.format, vs.q_dtype), nullptr);
    v.rel_l2 = st.rel_l2;
    vcache_[key.str()] = v;
    return v;
  }

  // Times every version on one point (one pool, shared by the versions).
  std::vector<BenchRow> run_point(const BenchPoint& pt, const std::vector<VersionSel>& versions) {
    std::vector<BenchRow> rows;
    const std::vector<int32_t> lens = lengths_of(pt, seed_);
    ref::PagedCaseSpec ps = bench_spec(pt, seed_ + 29);
    ps.seq_lens = {kBasePages * pt.block};
    ps.extra_blocks = 0;
    ps.shuffle_pages = false;
    ps.keep_original = false;
    ps.poison_unused = false;
    ref::PagedCase pc = ref::make_paged_case(ps);
    const int32_t max_len = *std::max_element(lens.begin(), lens.end());
    const int32_t mbps = (max_len + pt.block - 1) / pt.block;
    int64_t pages = 0;
    for (auto l : lens) pages += (l + pt.block - 1) / pt.block;
    PageGeometry g = pc.geom;
    g.num_blocks = std::max<int64_t>(pages, kBasePages);
    const double pool_bytes = 2.0 * (g.bytes() + g.scale_bytes());
    auto skip_all = [&](const std::string& why) {
      for (const auto& ver : versions) {
        BenchRow r;
        r.pt = pt, r.version = ver.label, r.status = "skipped", r.reason = why;
        rows.push_back(r);
      }
      return rows;
    };
    if (pool_bytes > max_bytes_) {
      std::ostringstream os;
      os << "pools need " << pool_bytes / (1ull << 30) << " GiB, over the --max-gib budget";
      return skip_all(os.str());
    }
    gpu::DeviceBuffer k(static_cast<size_t>(g.bytes())), v(static_cast<size_t>(g.bytes()));
    gpu::DeviceBuffer ksc(static_cast<size_t>(std::max<int64_t>(g.scale_bytes(), 16))),
        vsc(static_cast<size_t>(std::max<int64_t>(g.scale_bytes(), 16)));
    fill_repeated(k.as<uint8_t>(), pc.k_pool.data(), pc.geom.bytes(), g.bytes());
    fill_repeated(v.as<uint8_t>(), pc.v_pool.data(), pc.geom.bytes(), g.bytes());
    if (g.scale_bytes() > 0) {
      fill_repeated(ksc.as<uint8_t>(), pc.k_scales.data(), pc.geom.scale_bytes(), g.scale_bytes());
      fill_repeated(vsc.as<uint8_t>(), pc.v_scales.data(), pc.geom.scale_bytes(), g.scale_bytes());
    }
    const int qo_heads = kKvHeads * pt.group;
    gpu::DeviceBuffer dt(static_cast<size_t>(pt.batch) * mbps * 4), dl(lens.size() * 4),
        dperm(static_cast<size_t>(g.num_blocks) * 4);
    dl.upload(lens);
    gpu::shuffled_page_list(g.num_blocks, seed_ + 37, dperm.as<int32_t>(), nullptr);
    gpu::build_block_tables(dl.as<int32_t>(), pt.batch, pt.block, mbps, g.num_blocks,
                            dperm.as<int32_t>(), 0, dt.as<int32_t>(), nullptr);
    std::vector<uint16_t> q(static_cast<size_t>(pt.batch) * qo_heads * kHeadDim);
    for (size_t i = 0; i < q.size(); ++i) q[i] = pc.q[i % pc.q.size()];
    gpu::DeviceBuffer dq(q.size() * 2), dout(q.size() * 2),
        dlse(static_cast<size_t>(pt.batch) * qo_heads * 4);
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
    a.num_seqs = pt.batch;
    a.max_blocks_per_seq = mbps;
    a.max_seq_len = max_len;
    gpu::validate_decode_tables(a, nullptr);
    const double bytes = floor_bytes(g, lens, qo_heads);
    for (const auto& ver : versions) {
      BenchRow row;
      row.pt = pt, row.version = ver.label, row.bytes = bytes;
      gpu::v4_tuning() = ver.tuning;
      const std::string why = gpu::decode_unsupported_reason(a, ver.id);
      if (!why.empty()) {
        row.status = "skipped", row.reason = why;
        rows.push_back(row);
        continue;
      }
      const Validation val = validate(pt, ver);
      gpu::v4_tuning() = ver.tuning;
      row.rel_l2 = val.rel_l2;
      if (!val.ok) {
        row.status = "failed", row.reason = "validation failed";
        rows.push_back(row);
        continue;
      }
      const size_t ws = gpu::decode_workspace_bytes(a, ver.id);
      gpu::DeviceBuffer w(std::max<size_t>(ws, 16));
      gpu::bench::TimingOptions o = opt_;
      o.graph = pt.graph;
      o.cold_l2 = !pt.graph;
      // The full-size launch must produce finite outputs (a cheap whole-batch sanity check).
      dout.fill_bytes(0xFF);
      gpu::decode_attention(a, ver.id, w.data(), ws, nullptr);
      KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
      const auto o16 = dout.download<uint16_t>();
      const std::vector<float> of = ref::to_float(o16.data(), DType::kBF16, o16.size());
      size_t nonfinite = 0;
      for (float x : of) nonfinite += !std::isfinite(x);
      if (nonfinite) {
        row.status = "failed",
        row.reason = std::to_string(nonfinite) + " non-finite outputs at full size";
        rows.push_back(row);
        continue;
      }
      const auto tm = gpu::bench::time_kernel(
          [&](cudaStream_t st_) { gpu::decode_attention(a, ver.id, w.data(), ws, st_); }, o);
      row.status = "ok";
      row.median_us = tm.median_us, row.q1_us = tm.q1_us, row.q3_us = tm.q3_us,
      row.rel_iqr = tm.rel_iqr, row.reps = tm.reps;
      row.gbps = bytes / (tm.median_us * 1e-6) / 1e9;
      row.pct_ceiling = 100 * row.gbps * 1e9 / ceil_.read_bytes_per_s;
      row.pct_sheet = sheet_ > 0 ? 100 * row.gbps * 1e9 / sheet_ : 0;
      rows.push_back(row);
    }
    gpu::v4_tuning() = gpu::V4Tuning{};
    return rows;
  }

 private:
  // dst[0, total) = src[0, n) repeated: one upload, then doubling device-to-device copies.
  static void fill_repeated(uint8_t* dst, const uint8_t* src, int64_t n, int64_t total) {
    KVLAB_CUDA_CHECK(
        cudaMemcpy(dst, src, static_cast<size_t>(std::min(n, total)), cudaMemcpyHostToDevice));
    for (int64_t have = std::min(n, total); have < total;) {
      const int64_t c = std::min(have, total - have);
      KVLAB_CUDA_CHECK(
          cudaMemcpy(dst + have, dst, static_cast<size_t>(c), cudaMemcpyDeviceToDevice));
      have += c;
    }
  }

  uint64_t seed_;
  double max_bytes_;
  gpu::bench::TimingOptions opt_;
  gpu::bench::Ceilings ceil_;
  std::string device_;
  double sheet_ = 0;
  std::map<std::string, Validation> vcache_;
};

std::string lens_label(const BenchPoint& p) {
  std::ostringstream os;
  os << p.batch << "x" << (p.mixed ? "1k-" : "")
     << (p.ctx >= 1024 ? std::to_string(p.ctx / 1024) + "k" : std::to_string(p.ctx));
  return os.str();
}

void print_row(const BenchRow& r) {
  std::printf("%-5s %-12s %-10s %-4s g%-2d b%-4d %-28s ", r.pt.target.c_str(),
              lens_label(r.pt).c_str(), to_string(r.pt.format).c_str(),
              to_string(r.pt.layout).c_str(), r.pt.group, r.pt.block, r.version.c_str());
  if (r.status != "ok") {
    std::printf("%s: %s\n", r.status.c_str(), r.reason.c_str());
  } else {
    std::printf("%10.1f us %6.3f %8.1f GB/s %6.1f%% %6.1f%%%s rel_l2=%.1e\n", r.median_us,
                r.rel_iqr, r.gbps, r.pct_ceiling, r.pct_sheet, r.pt.graph ? " graph" : "",
                r.rel_l2);
  }
  std::fflush(stdout);
}

void write_csv(const std::string& path, const std::vector<BenchRow>& rows, const Bench& b) {
  FILE* f = std::fopen(path.c_str(), "w");
  KVLAB_REQUIRE(f != nullptr, "cannot write " << path);
  std::fprintf(f, "# device=%s;read_ceiling=%.6e;copy_ceiling=%.6e;datasheet=%.6e\n",
               b.device().c_str(), b.ceilings().read_bytes_per_s, b.ceilings().copy_bytes_per_s,
               b.sheet());
  std::fprintf(f,
               "target,batch,context,lengths,kv_format,layout,gqa_group,block_size,graph,version,"
               "status,reason,median_us,q1_us,q3_us,"
               "rel_iqr,reps,bytes,gbps,pct_ceiling,pct_datasheet,rel_l2\n");
  for (const auto& r : rows)
    std::fprintf(
        f,
        "%s,%d,%d,%s,%s,%s,%d,%d,%d,%s,%s,\"%s\",%.3f,%.3f,%.3f,%.5f,%d,%.0f,%.3f,%.3f,%.3f,%.3e\n",
        r.pt.target.c_str(), r.pt.batch, r.pt.ctx, r.pt.mixed ? "mixed" : "uniform",
        to_string(r.pt.format).c_str(), to_string(r.pt.layout).c_str(), r.pt.group, r.pt.block,
        r.pt.graph ? 1 : 0, r.version.c_str(), r.status.c_str(), r.reason.c_str(), r.median_us,
        r.q1_us, r.q3_us, r.rel_iqr, r.reps, r.bytes, r.gbps, r.pct_ceiling, r.pct_sheet, r.rel_l2);
  std::fclose(f);
}

// P9: the append / quantize-on-write kernel, bf16 input, 64k tokens x 8 heads x d128 into
// a shuffled set of slots; bytes = input read + storage and scales written.
void time_append(const Bench& b, uint64_t seed, const std::vector<KvFormat>& formats,
                 std::vector<std::string>* lines, std::vector<BenchRow>* rows) {
  const int tokens = 65536, bs = 16;
  for (KvFormat f : formats) {
    PageGeometry g;
    g.layout = KvLayout::kNHD, g.format = f, g.num_kv_heads = kKvHeads, g.head_dim = kHeadDim,
    g.block_size = bs;
    g.num_blocks = tokens / bs;
    gpu::DeviceBuffer k(static_cast<size_t>(g.bytes())), v(static_cast<size_t>(g.bytes()));
    gpu::DeviceBuffer ks(static_cast<size_t>(std::max<int64_t>(g.scale_bytes(), 16))),
        vs(static_cast<size_t>(std::max<int64_t>(g.scale_bytes(), 16)));
    const size_t in_elems = static_cast<size_t>(tokens) * kKvHeads * kHeadDim;
    std::vector<uint16_t> hin(in_elems);
    std::mt19937_64 rng(seed + 41);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& x : hin) x = float_to_bf16_bits(nd(rng), Saturation::kNonSaturating);
    gpu::DeviceBuffer kin(in_elems * 2), vin(in_elems * 2), slots(static_cast<size_t>(tokens) * 8);
    kin.upload(hin);
    vin.upload(hin);
    std::vector<int64_t> hs(static_cast<size_t>(tokens));
    for (int i = 0; i < tokens; ++i) hs[static_cast<size_t>(i)] = i;
    std::shuffle(hs.begin(), hs.end(), rng);
    slots.upload(hs);
    AppendArgs a;
    a.in_dtype = DType::kBF16, a.k = kin.data(), a.v = vin.data(),
    a.slot_mapping = slots.as<int64_t>(), a.num_tokens = tokens;
    a.kv.geom = g, a.kv.k = k.data(), a.kv.v = v.data();
    a.kv.k_scales = g.scale_bytes() ? ks.data() : nullptr,
    a.kv.v_scales = g.scale_bytes() ? vs.data() : nullptr;
    a.kv.k_scale = a.kv.v_scale = 0.05f;
    gpu::append_kv(a, nullptr, gpu::SlotCheck::kValidate);
    const double bytes = 2.0 * in_elems * 2 + 2.0 * (g.bytes() + g.scale_bytes()) + tokens * 8.0;
    gpu::bench::TimingOptions o;
    const auto tm = gpu::bench::time_kernel(
        [&](cudaStream_t st) { gpu::append_kv(a, st, gpu::SlotCheck::kTrusted); }, o);
    const double bw = bytes / (tm.median_us * 1e-6);
    char line[256];
    std::snprintf(line, sizeof line,
                  "P9    append 64k tok  %-10s %10.1f us %6.3f %8.1f GB/s %6.1f%% of copy ceiling",
                  to_string(f).c_str(), tm.median_us, tm.rel_iqr, bw / 1e9,
                  100 * bw / b.ceilings().copy_bytes_per_s);
    std::printf("%s\n", line);
    lines->push_back(line);
    BenchRow r;  // P9 row: batch = tokens, pct_ceiling = % of the COPY ceiling
    r.pt.target = "P9", r.pt.batch = tokens, r.pt.ctx = 0, r.pt.format = f, r.pt.group = 0,
    r.pt.block = bs;
    r.version = "append_kv", r.status = "ok", r.reason = "pct_ceiling is of the copy ceiling";
    r.median_us = tm.median_us, r.q1_us = tm.q1_us, r.q3_us = tm.q3_us, r.rel_iqr = tm.rel_iqr,
    r.reps = tm.reps;
    r.bytes = bytes, r.gbps = bw / 1e9, r.pct_ceiling = 100 * bw / b.ceilings().copy_bytes_per_s;
    r.pct_sheet = b.sheet() > 0 ? 100 * bw / b.sheet() : 0;
    rows->push_back(r);
  }
}

int bench_main(uint64_t seed, const std::string& suite_name, const std::string& vlist,
               const std::string& csv, double max_gib, bool append,
               const std::vector<KvFormat>& append_formats) {
  Bench b(seed, max_gib);
  const std::vector<VersionSel> versions = parse_versions(vlist);
  std::vector<BenchRow> all;
  std::printf("%-5s %-12s %-10s %-4s %-3s %-5s %-28s %13s %6s %13s %7s %7s\n", "tgt", "batch x ctx",
              "format", "lay", "grp", "block", "version", "median", "relIQR", "bandwidth", "%ceil",
              "%sheet");
  for (const BenchPoint& pt : suite(suite_name)) {
    for (const BenchRow& r : b.run_point(pt, versions)) {
      print_row(r);
      all.push_back(r);
    }
    if (!csv.empty()) write_csv(csv, all, b);  // after every point: a killed run keeps its rows
  }
  std::vector<std::string> append_lines;
  if (append) {
    time_append(b, seed, append_formats, &append_lines, &all);
    if (!csv.empty()) write_csv(csv, all, b);
  }
  // Closing summary: the best version per point of the target suite.
  std::printf("\nsummary (best version per point; %% of the measured read ceiling %.3f TB/s):\n",
              b.ceilings().read_bytes_per_s / 1e12);
  std::map<std::string, const BenchRow*> best;
  for (const auto& r : all) {
    if (r.status != "ok" || r.pt.target == "grid") continue;
    const std::string key = r.pt.target + " " + lens_label(r.pt) + " " + to_string(r.pt.format) +
                            " " + to_string(r.pt.layout) + " g" + std::to_string(r.pt.group) +
                            " b" + std::to_string(r.pt.block);
    auto it = best.find(key);
    if (it == best.end() || r.median_us < it->second->median_us) best[key] = &r;
  }
  for (const auto& [key, r] : best)
    std::printf("  %-36s %-28s %9.1f us %6.1f%%\n", key.c_str(), r->version.c_str(), r->median_us,
                r->pct_ceiling);
  for (const auto& l : append_lines) std::printf("  %s\n", l.c_str());
  int failed = 0;
  for (const auto& r : all) failed += r.status == "failed";
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description desc(
      "kvlab_decode_check: validation table and timing of the GPU decode versions");
  uint64_t seed = 20251122;
  std::string suite_name = "targets", versions = "3,4", csv,
              append_formats = "bf16,fp8_e4m3,fp8_e5m2,fp8_e4m3_pt,nvfp4,mxfp4";
  double max_gib = 24;
  desc.add_options()("help", "this text")("validate", "print the version x format error table")(
      "time",
      "time versions (--versions) on a suite of points (--suite), validated first; prints a table")(
      "suite", po::value<std::string>(&suite_name),
      "targets (the P1-P8 shapes of gpu/README.md), grid (batch x context x format), all, small "
      "(latency-bound targets + P1 64x8k), none (with --append: P9 only), profile (P1 fp8 + bf16)")(
      "versions", po::value<std::string>(&versions),
      "comma list of version ids; v4+ plan variants as ID:waves=N, ID:chunk=MiB, ID:nopdl (default "
      "3,4)")("csv", po::value<std::string>(&csv),
              "write every row to this CSV file (rewritten after each point)")(
      "max-gib", po::value<double>(&max_gib),
      "skip points whose K+V pools exceed this many GiB (default 24)")(
      "append", "also time the append / quantize-on-write kernel (P9)")(
      "append-formats", po::value<std::string>(&append_formats),
      "comma list of KV formats for --append (default "
      "bf16,fp8_e4m3,fp8_e5m2,fp8_e4m3_pt,nvfp4,mxfp4)")("seed", po::value<uint64_t>(&seed),
                                                         "case seed");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  if (vm.count("help") || (!vm.count("validate") && !vm.count("time"))) {
    std::printf("%s\n",
                [&] {
                  std::ostringstream os;
                  os << desc;
                  return os.str();
                }()
                    .c_str());
    return vm.count("help") ? 0 : 2;
  }
  if (!gpu::device_available()) {
    std::fprintf(stderr, "kvlab_decode_check: no CUDA device\n");
    return 1;
  }
  int failures = 0;
  try {
    if (vm.count("validate")) failures += validate_table(seed);
    std::vector<KvFormat>
        fmts;  // parse_kv_format throws InvalidArgument naming the allowed formats
    std::string tok;
    for (std::istringstream is(append_formats); std::getline(is, tok, ',');)
      fmts.push_back(parse_kv_format(tok));
    if (vm.count("time"))
      failures +=
          bench_main(seed, suite_name, versions, csv, max_gib, vm.count("append") > 0, fmts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvlab_decode_check: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
