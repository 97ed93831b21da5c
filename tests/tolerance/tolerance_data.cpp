// tolerance_data.cpp: measures the CPU-measurable error behind the tolerance table and writes
// it as CSV (data/tolerance/cpu_measurements.csv), one line per (operation, format, dtype,
// layers, dataset):
//
//   build/tests/kvlab_tolerance_data --out data/tolerance/cpu_measurements.csv
//
// Every line states what was compared, on which data, and the worst error seen: max |out -
// ref|, the atol the row's elementwise bound needs at the row's rtol (max over elements of
// |out - ref| - rtol |ref|), and the worst NMSE over the unit a test checks (a token row for
// round trips, a whole case for attention, a step's logits for the decode step).
// tests/cpu/test_tolerance_data.cpp reads the file back: every table row that names it must
// hold on every line (the measurement fits the bound) and sit close above the worst line
// (the bound bites: at most 4x the needed atol, 16x the worst NMSE).
//
// What is measured here (the GPU rows come from the GPU stage, tests/gpu_stage.sh):
//   quant_round_trip              every scheme preset with a table format, on the synthetic
//                                 distributions the tests feed (per-tensor FP8 only on data of
//                                 unit-scale tokens, as its bound assumes), 8 seeds each
//   decode_attention_vs_original  the reference decode over the quantized cache vs the same
//                                 decode over the original activations, every format x Q dtype,
//                                 head_dim 32-256, awkward lengths up to 3001, short lengths,
//                                 single sequences of 1-16 tokens with amax and fixed pool scales,
//                                 and every case of the GPU decode tests (tests/common/
//                                 decode_cases.h) with both Q dtypes
//   decode_step_logits            the float- vs the double-accumulating CPU reference decode
//                                 step (two legitimate accumulation orders), tiny and small
//                                 presets, 8 weight seeds, batch 8, 24 steps (the GPU vs CPU
//                                 measurement replaces it in the table after the H100 run)
// Deterministic: fixed seeds, so a rerun writes the same file.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "reference/attention/paged_case.h"
#include "reference/dsv4/entry_quant.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "reference/quant/roundtrip.h"
#include "reference/step/decode_step.h"
#include "reference/synth/synth.h"
#include "tests/common/decode_cases.h"

namespace kvlab {
namespace {

struct Line {
  std::string op, format, dtype;  // the table row's key (format: a KvFormat name)
  int layers = 0;
  std::string subject;  // what was measured under that row (a scheme, an entry format, ...)
  std::string dataset;
  int64_t cases = 0, elements = 0;
  double rtol = 0, max_abs = 0, needed_atol = 0, worst_nmse = 0;
  std::string nmse_unit;
};

// Folds one comparison into a line: max |d|, max (|d| - rtol |ref|), and the NMSE of the
// unit (the caller passes the whole unit).
void fold(Line* l, const float* out, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(double(out[i]) - ref[i]);
    l->max_abs = std::max(l->max_abs, d);
    l->needed_atol = std::max(l->needed_atol, d - l->rtol * std::fabs(double(ref[i])));
    num += d * d;
    den += double(ref[i]) * ref[i];
  }
  if (den > 0) l->worst_nmse = std::max(l->worst_nmse, num / den);
  l->elements += static_cast<int64_t>(n);
}

// ---- quant_round_trip ----------------------------------------------------------------------
void round_trip(std::vector<Line>* out) {
  const std::vector<std::pair<std::string, KvFormat>> presets = {
      {"bf16", KvFormat::kBF16},
      {"fp16", KvFormat::kFP16},
      {"fp8_e4m3_per_tensor", KvFormat::kFP8E4M3},
      {"fp8_e5m2_per_tensor", KvFormat::kFP8E5M2},
      {"fp8_e4m3_per_token", KvFormat::kFP8E4M3PerToken},
      {"nvfp4", KvFormat::kNVFP4},
      {"mxfp4", KvFormat::kMXFP4},
      {"mxfp4_hadamard", KvFormat::kMXFP4}};
  const int64_t tokens = 4096;
  const int32_t heads = 2;
  for (const auto& [name, format] : presets) {
    const ref::QuantScheme s = ref::make_scheme(name);
    const int32_t cols = s.spec().required_cols ? s.spec().required_cols : 128;
    const Tolerance tol = tolerance(Op::kQuantRoundTrip, format, DType::kF32);
    for (const std::string& dist : ref::synth_preset_names()) {
      // Per-tensor scales assume tokens of comparable norm (the row's reason): only the
      // unit-scale distributions.
      if (name.find("per_tensor") != std::string::npos && dist != "gaussian" && dist != "ar1")
        continue;
      Line l;
      l.op = to_string(Op::kQuantRoundTrip);
      l.format = to_string(format);
      l.subject = name;
      l.dtype = "f32";
      l.rtol = tol.rtol;
      l.nmse_unit = "token row";
      std::ostringstream ds;
      ds << dist << " " << tokens << "x" << heads << "x" << cols << " seeds 0-7";
      l.dataset = ds.str();
      for (uint64_t seed = 0; seed < 8; ++seed) {
        const std::vector<float> x =
            ref::synth_kv(ref::synth_preset(dist, tokens, heads, cols, 0x70131ull + seed));
        const std::vector<float> y = s.roundtrip(x.data(), tokens * heads, cols);
        for (int64_t r = 0; r < tokens * heads; ++r)
          fold(&l, y.data() + r * cols, x.data() + r * cols, cols);
        ++l.cases;
      }
      out->push_back(l);
      std::fprintf(stderr, "round trip %-20s %-12s worst row nmse %.3e max_abs %.3e\n",
                   name.c_str(), dist.c_str(), l.worst_nmse, l.max_abs);
    }
  }
  // DeepSeek-V4 entries (reference/dsv4/entry_quant.h): the NoPE part of each stored entry
  // is judged per token by the E4M3 per-token row (tests/cpu/test_dsv4_quant.cpp and the GPU
  // append_swa test, on BF16-rounded data of 448 + 64 columns).
  const int nope = 448, rope = 64, D = nope + rope;
  const int64_t rows = 8192;
  const Tolerance tol = tolerance(Op::kQuantRoundTrip, KvFormat::kFP8E4M3PerToken, DType::kF32);
  for (auto fmt : {Dsv4EntryFormat::kFp8PerToken, Dsv4EntryFormat::kFp8DsMla})
    for (const char* dist : {"gaussian", "kcache"}) {
      Line l;
      l.op = to_string(Op::kQuantRoundTrip);
      l.format = to_string(KvFormat::kFP8E4M3PerToken);
      l.subject = fmt == Dsv4EntryFormat::kFp8PerToken ? "dsv4_entry_fp8_per_token"
                                                       : "dsv4_entry_fp8_ds_mla";
      l.dtype = "f32";
      l.rtol = tol.rtol;
      l.nmse_unit = "token row (NoPE part)";
      l.dataset = std::string(dist) + " 8192x1x512 rounded to bf16, seeds 0-3";
      for (uint64_t seed = 0; seed < 4; ++seed) {
        std::vector<float> x = ref::synth_kv(ref::synth_preset(dist, rows, 1, D, 0xD5F4ull + seed));
        for (float& v : x) v = bf16_bits_to_float(float_to_bf16_bits(v, Saturation::kSatFinite));
        Dsv4EntryPages p;
        p.format = fmt;
        p.nope_dim = nope;
        p.rope_dim = rope;
        p.rows = static_cast<int32_t>(rows);
        p.num_pages = 1;
        std::vector<uint8_t> data(fmt == Dsv4EntryFormat::kFp8PerToken ? rows * nope : p.bytes());
        std::vector<uint16_t> rp(rows * rope);
        std::vector<float> inv(rows);
        p.data = data.data();
        p.rope = rp.data();
        p.inv_scale = inv.data();
        std::vector<float> xn(nope), yn(nope);
        for (int64_t r = 0; r < rows; ++r) {
          dsv4_store_entry(p, 0, static_cast<int>(r), x.data() + r * D);
          for (int d = 0; d < nope; ++d) {
            xn[d] = x[r * D + d];
            yn[d] = p.load(0, static_cast<int>(r), d);
          }
          fold(&l, yn.data(), xn.data(), nope);
        }
        ++l.cases;
      }
      out->push_back(l);
      std::fprintf(stderr, "round trip %-24s %-8s worst row nmse %.3e\n", l.subject.c_str(), dist,
                   l.worst_nmse);
    }
}

// ---- decode_attention_vs_original on the GPU decode tests' cases ----------------------------
// The cases tests/gpu/test_decode.cu checks against the original data (DecodeCurated,
// DecodeSmall, DecodeReport; tests/common/decode_cases.h builds them with the same names,
// seeds, shapes and lengths), each also with the other Q dtype (same seed), so every format x
// Q dtype x layout sees them. The GPU output differs from the reference over the same cache by
// <= 1 ulp of the Q dtype (the rows' rtol 2^-7 and the decode_attention rows), so the
// reference decode over the cache stands for every GPU version here.
void gpu_test_cases_vs_original(std::vector<Line>* out) {
  std::vector<ref::PagedCaseSpec> specs;
  for (const test::DecodeConfig& c : test::curated_decode_configs())
    specs.push_back(test::decode_case_spec(c, "decode.curated." + test::decode_case_label(c)));
  for (KvFormat f : all_kv_formats())
    for (KvLayout l : all_kv_layouts())
      for (const ref::PagedCaseSpec& s : test::small_decode_specs(f, l)) specs.push_back(s);
  for (KvFormat f : all_kv_formats()) specs.push_back(test::report_decode_spec(f));
  for (KvFormat f : all_kv_formats())
    for (DType qd : {DType::kBF16, DType::kF16}) {
      const Tolerance tol = tolerance(Op::kDecodeAttentionVsBf16, f, qd);
      Line l;
      l.op = to_string(Op::kDecodeAttentionVsBf16);
      l.format = to_string(f);
      l.subject = "reference decode";
      l.dtype = to_string(qd);
      l.rtol = tol.rtol;
      l.nmse_unit = "case";
      l.dataset =
          "reference over the cache vs over the original data, the GPU decode tests' cases "
          "(tests/common/decode_cases.h: DecodeCurated, DecodeSmall, DecodeReport; both "
          "layouts; each case with bf16 and f16 Q, seeds as in gpu_tests)";
      for (ref::PagedCaseSpec s : specs) {
        if (s.format != f) continue;
        s.q_dtype = qd;
        ref::PagedCase c = ref::make_paged_case(s);
        const ref::DecodeOutputs cache = ref::reference_decode(c);
        const ref::DecodeOutputs orig = ref::reference_decode_original(c);
        fold(&l, cache.o.data(), orig.o.data(), cache.o.size());
        ++l.cases;
      }
      out->push_back(l);
      std::fprintf(stderr,
                   "vs original %-12s %-5s gpu test cases (%lld) max_abs %.3e needed atol %.3e "
                   "nmse %.3e\n",
                   l.format.c_str(), l.dtype.c_str(), static_cast<long long>(l.cases), l.max_abs,
                   l.needed_atol, l.worst_nmse);
    }
}

// ---- decode_attention_vs_original ----------------------------------------------------------
// Per (format, Q dtype): long awkward lengths (most of the output energy in long averages), the
// short lengths of the GPU tests' small cases (an output of a 1-token sequence is a dequantized
// V row: the largest elementwise errors), and single short sequences at head_dim 32 (a case of
// 4 heads x 32 elements: the fewest elements an NMSE is taken over, so the widest spread of the
// per-case NMSE), with the pool scale from the amax and fixed as a user sets it (the Python
// package's append_kv takes k_scale / v_scale; 0.01 leaves unit-Gaussian data unclipped in
// both FP8 formats, NVFP4's global scale 1).
void decode_vs_original(std::vector<Line>* out) {
  struct Dataset {
    std::string name;
    std::vector<std::vector<int32_t>> cases;  // the seq_lens of each case (one case per entry)
    std::vector<int> head_dims;
    int seeds;
    int32_t qo_heads = 8, block_size = 16;
    bool fixed_scale = false;  // pool scales fixed (fp8: 0.01, nvfp4: 1) instead of the amax
  };
  std::vector<std::vector<int32_t>> single;
  for (int32_t n = 1; n <= 16; ++n) single.push_back({n});
  const std::vector<Dataset> sets = {
      {"8 q / 2 kv heads; awkward_seq_lens(16, 3001), head_dim 64/128/256, seeds 0-3",
       {ref::awkward_seq_lens(16, 3001)},
       {64, 128, 256},
       4},
      {"8 q / 2 kv heads; lengths 0 1 2 15 16 17 33 97 600, head_dim 32/64/128, seeds 0-15",
       {{0, 1, 2, 15, 16, 17, 33, 97, 600}},
       {32, 64, 128},
       16},
      {"4 q / 2 kv heads; block 4; one sequence of 1..16 tokens per case, head_dim 32, pool "
       "scale from the amax, seeds 0-63",
       single,
       {32},
       64,
       4,
       4},
      {"4 q / 2 kv heads; block 4; one sequence of 1..16 tokens per case, head_dim 32, fixed "
       "pool scale (fp8 0.01; nvfp4 1), seeds 0-63",
       single,
       {32},
       64,
       4,
       4,
       true}};
  for (KvFormat f : all_kv_formats())
    for (DType qd : {DType::kBF16, DType::kF16})
      for (const Dataset& ds : sets) {
        const bool fp8_pool = f == KvFormat::kFP8E4M3 || f == KvFormat::kFP8E5M2;
        if (ds.fixed_scale && !fp8_pool && f != KvFormat::kNVFP4) continue;  // no pool scale
        const Tolerance tol = tolerance(Op::kDecodeAttentionVsBf16, f, qd);
        Line l;
        l.op = to_string(Op::kDecodeAttentionVsBf16);
        l.format = to_string(f);
        l.subject = "reference decode";
        l.dtype = to_string(qd);
        l.rtol = tol.rtol;
        l.nmse_unit = "case";
        l.dataset = "reference over the cache vs over the original data, " + ds.name;
        for (int d : ds.head_dims)
          for (size_t ci = 0; ci < ds.cases.size(); ++ci)
            for (int seed = 0; seed < ds.seeds; ++seed) {
              const std::vector<int32_t>& lens = ds.cases[ci];
              ref::PagedCaseSpec s;
              s.format = f;
              s.q_dtype = qd;
              s.head_dim = d;
              s.num_qo_heads = ds.qo_heads;
              s.block_size = ds.block_size;
              s.layout = KvLayout::kNHD;
              s.seq_lens = lens;
              if (ds.fixed_scale) s.k_scale = s.v_scale = fp8_pool ? 0.01f : 1.0f;
              // The first two datasets keep the seeds they were measured with.
              s.seed = 0xD0E5ull * 131 + static_cast<uint64_t>(seed) * 7 +
                       static_cast<uint64_t>(d) + lens.size() * 1000003ull +
                       (ds.cases.size() > 1 ? 0x5EC0ull * (ci + 1) + (ds.fixed_scale ? 77 : 0) : 0);
              ref::PagedCase c = ref::make_paged_case(s);
              const ref::DecodeOutputs cache = ref::reference_decode(c);
              const ref::DecodeOutputs orig = ref::reference_decode_original(c);
              fold(&l, cache.o.data(), orig.o.data(), cache.o.size());
              ++l.cases;
            }
        out->push_back(l);
        std::fprintf(stderr,
                     "vs original %-12s %-5s %-40.40s max_abs %.3e needed atol %.3e nmse %.3e\n",
                     l.format.c_str(), l.dtype.c_str(), ds.name.c_str(), l.max_abs, l.needed_atol,
                     l.worst_nmse);
      }
  gpu_test_cases_vs_original(out);
}

// ---- decode_step_logits (float vs double CPU reference) ------------------------------------
void step_logit_noise(std::vector<Line>* out) {
  for (KvFormat f : all_kv_formats())
    for (const char* preset : {"tiny", "small"}) {
      DecoderConfig base = decoder_preset(preset);
      const Tolerance tol = tolerance(Op::kDecodeStepLogits, f, DType::kF32, base.layers);
      Line l;
      l.op = to_string(Op::kDecodeStepLogits);
      l.format = to_string(f);
      l.subject = std::string("CPU reference float vs double accumulation, ") + preset;
      l.dtype = "f32";
      l.layers = base.layers;
      l.rtol = tol.rtol;
      l.nmse_unit = "step";
      l.dataset = "weight seeds 0-7, batch 8, 24 teacher-forced steps";
      for (uint64_t s = 0; s < 8; ++s) {
        DecoderConfig c = base;
        c.seed = 0x57E9ull + s;
        const int batch = 8, steps = 24;
        ref::StepCacheOptions co;
        co.format = f;
        co.k_scale = co.v_scale = 0.02f;
        ref::DecoderRef a(c, co, batch, steps), b(c, co, batch, steps, true);
        std::vector<int32_t> table(static_cast<size_t>(batch) * a.blocks_per_seq());
        std::iota(table.begin(), table.end(), 0);
        a.start(batch, table);
        b.start(batch, table);
        std::mt19937_64 rng(c.seed * 7919);
        for (int t = 0; t < steps; ++t) {
          std::vector<int32_t> tok(batch);
          for (auto& x : tok) x = static_cast<int32_t>(rng() % c.vocab);
          a.step(tok);
          b.step(tok);
          fold(&l, a.logits().data(), b.logits().data(), a.logits().size());
        }
        ++l.cases;
      }
      out->push_back(l);
      std::fprintf(stderr, "step logits %-12s %-5s max_abs %.3e nmse %.3e\n", l.format.c_str(),
                   preset, l.max_abs, l.worst_nmse);
    }
}

// CSV text fields: no commas (the file is read by a plain splitter).
std::string field(std::string s) {
  std::replace(s.begin(), s.end(), ',', ';');
  return s;
}

int run(int argc, char** argv) {
  std::string path = "data/tolerance/cpu_measurements.csv";
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out" && i + 1 < argc) {
      path = argv[++i];
    } else if (a == "--only" && i + 1 < argc) {
      only.push_back(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: kvlab_tolerance_data [--out FILE] [--only round_trip|vs_original|"
                   "step_logits]...\nunknown argument '%s'\n",
                   a.c_str());
      return 2;
    }
  }
  auto want = [&](const char* what) {
    return only.empty() || std::find(only.begin(), only.end(), what) != only.end();
  };
  std::vector<Line> lines;
  if (want("round_trip")) round_trip(&lines);
  if (want("vs_original")) decode_vs_original(&lines);
  if (want("step_logits")) step_logit_noise(&lines);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) {
      std::fprintf(stderr, "kvlab_tolerance_data: cannot write %s\n", tmp.c_str());
      return 2;
    }
    f << "# measured by build/tests/kvlab_tolerance_data (tests/tolerance/tolerance_data.cpp)\n";
    f << "op,format,dtype,layers,subject,dataset,cases,elements,rtol,max_abs,needed_atol,"
         "worst_nmse,nmse_unit\n";
    char buf[1024];
    for (const Line& l : lines) {
      std::snprintf(buf, sizeof buf, "%s,%s,%s,%d,%s,%s,%lld,%lld,%.6g,%.6g,%.6g,%.6g,%s\n",
                    l.op.c_str(), l.format.c_str(), l.dtype.c_str(), l.layers,
                    field(l.subject).c_str(), field(l.dataset).c_str(),
                    static_cast<long long>(l.cases), static_cast<long long>(l.elements), l.rtol,
                    l.max_abs, l.needed_atol, l.worst_nmse, l.nmse_unit.c_str());
      f << buf;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::fprintf(stderr, "kvlab_tolerance_data: cannot rename %s to %s\n", tmp.c_str(),
                 path.c_str());
    return 2;
  }
  std::printf("%zu lines -> %s\n", lines.size(), path.c_str());
  return 0;
}

}  // namespace
}  // namespace kvlab

int main(int argc, char** argv) {
  try {
    return kvlab::run(argc, argv);
  } catch (const kvlab::Error& e) {
    std::fprintf(stderr, "kvlab_tolerance_data: %s\n", e.what());
    return 2;
  }
}
