// test_sim_cost.cpp: the GPU table, the roofline on hand-computed cases (decode attention
// bytes per format, seed 001's GEMM bound flip, the per-step model, launch overheads) and
// the calibration / fidelity functions.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "reference/core/error.h"
#include "sim/cost/calibration.h"
#include "sim/cost/gpu_spec.h"
#include "sim/cost/roofline.h"

namespace kvlab::sim {
namespace {

// Calibration on synthetic, noise-free timings is exact algebra: only least-squares rounding
// separates the fit from the truth.
constexpr double kFitRelTol = 1e-9;

void expect_error_contains(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an InvalidArgument containing '" << needle << "'";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(SimGpuTable, DatasheetFiguresAndMeasuredCeilings) {
  const auto table = load_gpu_table();
  ASSERT_EQ(table.size(), 4u);
  const GpuSpec& h100 = find_gpu(table, "h100");
  EXPECT_EQ(h100.name, "H100-SXM5-80GB");
  EXPECT_DOUBLE_EQ(h100.hbm_bytes_per_s, 3.35e12);
  EXPECT_DOUBLE_EQ(h100.measured_read_bytes_per_s, 3.09e12);
  EXPECT_DOUBLE_EQ(h100.measured_copy_bytes_per_s, 3.02e12);
  EXPECT_DOUBLE_EQ(h100.read_ceiling(true), 3.09e12);
  EXPECT_DOUBLE_EQ(h100.read_ceiling(false), 3.35e12);
  EXPECT_DOUBLE_EQ(h100.bf16_flops, 989.4e12);
  EXPECT_EQ(h100.num_sms, 132);
  EXPECT_EQ(h100.l2_bytes, 50 * 1048576);
  EXPECT_EQ(h100.memory_bytes, int64_t{80} << 30);
  const GpuSpec& a100 = find_gpu(table, "A100-SXM4-80GB");
  EXPECT_EQ(a100.fp8_flops, 0.0);
  EXPECT_DOUBLE_EQ(a100.read_ceiling(true), 2.039e12);  // no measured ceiling: datasheet
  EXPECT_DOUBLE_EQ(find_gpu(table, "B200").fp4_flops, 9000e12);
  EXPECT_DOUBLE_EQ(find_gpu(table, "H200").hbm_bytes_per_s, 4.8e12);
  expect_error_contains([&] { find_gpu(table, "V100"); },
                        "unknown GPU 'V100' (known: A100-SXM4-80GB");
  const std::string hdr =
      "name,memory_gib,hbm_tbps,bf16_tflops,fp8_tflops,fp4_tflops,fp32_tflops,num_sms,l2_mib,host_"
      "link_gbps,"
      "measured_read_tbps,measured_copy_tbps\n";
  expect_error_contains([&] { parse_gpu_table(hdr + "X,80,fast,1,0,0,1,1,1,1,0,0\n", "g.csv"); },
                        "g.csv:2: field 'hbm_tbps' = 'fast' is not a finite number");
  expect_error_contains([&] { parse_gpu_table(hdr + "X,80,1,1,0,0,1,1,1,1,0\n", "g.csv"); },
                        "g.csv:2: 11 fields");
  expect_error_contains([&] { parse_gpu_table(hdr + "X,80,0,1,0,0,1,1,1,1,0,0\n", "g.csv"); },
                        "g.csv:2: GPU 'X': HBM bandwidth must be > 0");
}

DecodeAttentionShape shape(KvFormat f) {
  DecodeAttentionShape s;
  s.batch = 2;
  s.context = 100;
  s.num_qo_heads = 32;
  s.num_kv_heads = 8;
  s.head_dim = 128;
  s.block_size = 16;
  s.format = f;
  return s;
}

TEST(SimRoofline, DecodeAttentionBytesByHand) {
  const GpuSpec h100 = gpu_spec("H100");
  const CostModelConfig cfg;
  // Q + O: 2 seqs x 32 heads x 128 x 2 B, twice = 32768. Block table: 2 x ceil(100/16) x 4 B
  // = 56; seq_lens 8. K + V per token: 2 x 8 heads x 128 dims x (bits / 8).
  const OpCost bf16 = decode_attention_cost(h100, shape(KvFormat::kBF16), cfg);
  EXPECT_EQ(bf16.bytes, 32768 + 200 * 4096 + 56 + 8);
  EXPECT_EQ(bf16.flops, 4.0 * 32 * 128 * 200);
  EXPECT_EQ(bf16.bound(), Bound::kMemory);
  EXPECT_EQ(bf16.seconds, (32768 + 200 * 4096 + 64) / h100.measured_read_bytes_per_s);
  // FP8 with per-token FP32 scales: 1 B per element + 4 B per (token, head) per pool.
  EXPECT_EQ(decode_attention_cost(h100, shape(KvFormat::kFP8E4M3PerToken), cfg).bytes,
            32768 + 200 * (2 * 8 * 128) + 200 * (2 * 8 * 4) + 64);
  // FP8 with a pool scale: no per-token bytes.
  EXPECT_EQ(decode_attention_cost(h100, shape(KvFormat::kFP8E4M3), cfg).bytes,
            32768 + 200 * 2048 + 64);
  // NVFP4: half a byte per element + one E4M3 scale per 16 elements.
  EXPECT_EQ(decode_attention_cost(h100, shape(KvFormat::kNVFP4), cfg).bytes,
            32768 + 200 * (2 * 8 * 64) + 200 * (2 * 8 * 8) + 64);
  // MXFP4: one UE8M0 scale per 32 elements.
  EXPECT_EQ(decode_attention_cost(h100, shape(KvFormat::kMXFP4), cfg).bytes,
            32768 + 200 * (2 * 8 * 64) + 200 * (2 * 8 * 4) + 64);
  // Ragged lengths (1, 17, 0): 18 tokens in 1 + 2 + 0 blocks; the lse output adds 4 B/head.
  DecodeAttentionShape r = shape(KvFormat::kBF16);
  r.batch = 3;
  r.seq_lens = {1, 17, 0};
  r.write_lse = true;
  EXPECT_EQ(decode_attention_cost(h100, r, cfg).bytes,
            3 * 2 * 32 * 128 * 2 + 18 * 4096 + 3 * 4 + 3 * 4 + 3 * 32 * 4);
  // Datasheet ceiling instead of the measured one; a calibrated fixed cost and efficiency.
  CostModelConfig ds;
  ds.prefer_measured_ceiling = false;
  EXPECT_EQ(predict_decode_attention_seconds(h100, shape(KvFormat::kBF16), ds),
            bf16.bytes / h100.hbm_bytes_per_s);
  CostModelConfig cal;
  cal.attn_fixed_s = 5e-6;
  cal.attn_mem_efficiency = 0.9;
  EXPECT_EQ(predict_decode_attention_seconds(h100, shape(KvFormat::kBF16), cal),
            5e-6 + bf16.bytes / (h100.measured_read_bytes_per_s * 0.9));
  // Bad shapes.
  DecodeAttentionShape bad = shape(KvFormat::kBF16);
  bad.num_kv_heads = 5;
  expect_error_contains([&] { decode_attention_cost(h100, bad, cfg); },
                        "multiple of num_kv_heads 5");
  bad = shape(KvFormat::kNVFP4);
  bad.head_dim = 24;  // not a multiple of the 16-element scale group... and of split-x chunks
  EXPECT_THROW(decode_attention_cost(h100, bad, cfg), InvalidArgument);
  bad = shape(KvFormat::kBF16);
  bad.seq_lens = {3};
  expect_error_contains([&] { decode_attention_cost(h100, bad, cfg); }, "1 seq_lens for batch 2");
}

// Seed 001: nn.Linear(1024, 4096) is memory-bound at batch 1 and compute-bound at batch 512
// on an A100 (ridge 312 / 2.039 = 153 FLOP/B).
TEST(SimRoofline, GemmBoundFlipsWithBatch) {
  const GpuSpec a100 = gpu_spec("A100");
  const CostModelConfig cfg;
  const OpCost b1 = gemm_cost(a100, "linear", 1, 4096, 1024, 16, cfg);
  EXPECT_EQ(b1.flops, 2.0 * 4096 * 1024);
  EXPECT_EQ(b1.bytes, 4096 * 1024 * 2 + 1024 * 2 + 4096 * 2);
  EXPECT_EQ(b1.bound(), Bound::kMemory);
  EXPECT_EQ(b1.seconds, b1.bytes / a100.hbm_bytes_per_s);  // no measured A100 ceiling
  const OpCost b512 = gemm_cost(a100, "linear", 512, 4096, 1024, 16, cfg);
  EXPECT_EQ(b512.bytes, 4096 * 1024 * 2 + 512 * 1024 * 2 + 512 * 4096 * 2);
  EXPECT_GT(b512.intensity(), a100.ridge_bf16(true));
  EXPECT_EQ(b512.bound(), Bound::kCompute);
  EXPECT_EQ(b512.seconds, 2.0 * 512 * 4096 * 1024 / a100.bf16_flops);
  EXPECT_DOUBLE_EQ(a100.bf16_flops, 312e12);
  // 8-bit weights: FP8 tensor cores on the H100, BF16 (weight-only dequantization) on the A100.
  const OpCost h = gemm_cost(gpu_spec("H100"), "w8", 8192, 8192, 8192, 8, cfg);
  EXPECT_EQ(h.compute_s, 2.0 * 8192 * 8192 * 8192 / gpu_spec("H100").fp8_flops);
  const OpCost a = gemm_cost(a100, "w8", 8192, 8192, 8192, 8, cfg);
  EXPECT_EQ(a.compute_s, 2.0 * 8192 * 8192 * 8192 / a100.bf16_flops);
  expect_error_contains([&] { gemm_cost(a100, "g", 1, 0, 4, 16, cfg); },
                        "gemm 'g': shape m=1 n=0 k=4");
  expect_error_contains([&] { gemm_cost(a100, "g", 1, 4, 4, 6, cfg); }, "weight_bits 6");
}

ModelStack tiny_model() {
  ModelStack m;
  m.name = "tiny";
  m.num_layers = 1;
  m.hidden = 64;
  m.num_qo_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 16;
  m.intermediate = 128;
  m.vocab = 256;
  return m;
}

TEST(SimRoofline, StepModelOpsByHand) {
  const GpuSpec h100 = gpu_spec("H100");
  CostModel cm(h100, tiny_model(), KvFormat::kBF16);
  StepShape s;
  s.num_decode_seqs = 2;
  s.decode_context_tokens = 30;  // e.g. contexts 10 and 20
  s.num_prefill_seqs = 0;
  s.num_sampled = 2;
  // T = 2 tokens. QKV: n = (4 + 2*2) * 16 = 128, k = 64.
  const auto ops = cm.step_ops(s);
  auto find = [&](const std::string& n) {
    for (const auto& o : ops)
      if (o.name == n) return o;
    ADD_FAILURE() << "no op " << n;
    return OpCost{};
  };
  EXPECT_EQ(find("qkv_proj").flops, 2.0 * 2 * 128 * 64);
  EXPECT_EQ(find("qkv_proj").bytes, 128 * 64 * 2 + 2 * 64 * 2 + 2 * 128 * 2);
  // Decode attention: Q + O of 2 seqs (2 x 4 x 16 x 2 B, twice) + 30 tokens x K+V (2 x 2 x 16 x 2
  // B).
  EXPECT_EQ(find("decode_attention").bytes, 2 * (2 * 4 * 16 * 2) + 30 * (2 * 2 * 16 * 2));
  EXPECT_EQ(find("decode_attention").flops, 4.0 * 4 * 16 * 30);
  EXPECT_EQ(find("lm_head").flops, 2.0 * 2 * 256 * 64);
  for (const auto& o : ops) EXPECT_NE(o.name, "prefill_attention");

  // Graph mode: kernel times + one gap per kernel + one graph launch.
  const StepCost g = cm.step(s);
  double kernels = 0;
  for (const auto& o : ops) kernels += o.seconds;
  // Per layer: qkv, rope, append, decode attn, o, gate_up, down, 2 x add_norm, swiglu;
  // per step: embedding, final norm, lm_head, sampling.
  EXPECT_EQ(g.num_kernels, 10 + 4);
  EXPECT_DOUBLE_EQ(g.gemm_s + g.attention_s + g.other_s, kernels);
  EXPECT_DOUBLE_EQ(g.launch_s, 14 * 1.0e-6 + 4.0e-6);
  EXPECT_DOUBLE_EQ(g.total_s, kernels + g.launch_s);
  // Eager: every kernel of this tiny step is shorter than a 4 us launch, so the step is
  // launch-bound: 14 launches.
  CostModelConfig eager;
  eager.launch = LaunchMode::kEager;
  const StepCost e = CostModel(h100, tiny_model(), KvFormat::kBF16, eager).step(s);
  EXPECT_DOUBLE_EQ(e.total_s, 14 * 4.0e-6);
  EXPECT_GT(e.total_s, g.total_s);
  // Swap traffic over the 64 GB/s host link.
  s.swap_bytes = 64000;
  EXPECT_DOUBLE_EQ(cm.step(s).swap_s, 1e-6);
  // An empty step costs nothing.
  EXPECT_EQ(cm.step(StepShape{}).total_s, 0.0);
}

TEST(SimRoofline, DecodeStepIsMemoryBoundAndFp8Halves) {
  // A full llama3.1-8b decode step at batch 64 x 8k context on an H100: the attention term
  // is bytes over bandwidth, and an FP8 cache halves it.
  const GpuSpec h100 = gpu_spec("H100");
  const ModelStack m = model_preset("llama3.1-8b");
  StepShape s;
  s.num_decode_seqs = 64;
  s.decode_context_tokens = 64 * 8192;
  s.num_sampled = 64;
  const StepCost bf16 = CostModel(h100, m, KvFormat::kBF16).step(s);
  const StepCost fp8 = CostModel(h100, m, KvFormat::kFP8E4M3).step(s);
  const double kv = 64.0 * 8192 * 32 * (2 * 8 * 128 * 2);  // tokens x layers x K+V bytes
  const double qo = 32.0 * 2 * 64 * 32 * 128 * 2;
  EXPECT_DOUBLE_EQ(bf16.attention_s, (kv + qo) / h100.measured_read_bytes_per_s);
  EXPECT_DOUBLE_EQ(fp8.attention_s, (kv / 2 + qo) / h100.measured_read_bytes_per_s);
  for (const auto& o : CostModel(h100, m, KvFormat::kBF16).step_ops(s))
    if (o.name == "decode_attention") EXPECT_EQ(o.bound(), Bound::kMemory);
}

std::vector<DecodeAttentionMeasurement> synthetic_measurements(const GpuSpec& gpu, double fixed,
                                                               double eff) {
  std::vector<DecodeAttentionMeasurement> m;
  for (int64_t batch : {1, 4, 16, 64})
    for (int64_t ctx : {512, 4096, 32768}) {
      DecodeAttentionShape s = shape(KvFormat::kBF16);
      s.batch = batch;
      s.context = ctx;
      const OpCost raw = decode_attention_cost(gpu, s, CostModelConfig{});
      m.push_back({"b" + std::to_string(batch) + "_c" + std::to_string(ctx), s,
                   fixed + raw.memory_s / eff});
    }
  return m;
}

TEST(SimCalibration, RecoversFixedOverheadAndEfficiency) {
  const GpuSpec h100 = gpu_spec("H100");
  const auto m = synthetic_measurements(h100, 6e-6, 0.87);
  const Calibration c = calibrate_decode_attention(h100, m);
  EXPECT_NEAR(c.fixed_s, 6e-6, 6e-6 * kFitRelTol);
  EXPECT_NEAR(c.mem_efficiency, 0.87, 0.87 * kFitRelTol);
  EXPECT_EQ(c.num_records, 12);
  EXPECT_EQ(c.num_memory_bound, 12);
  EXPECT_GT(c.median_abs_rel_error_uncalibrated, 0.1);
  EXPECT_LT(c.median_abs_rel_error, kFitRelTol);
  EXPECT_LT(c.median_abs_rel_error_loo, kFitRelTol);
  // The fidelity table with the calibrated config matches; the raw roofline underestimates.
  const FidelityTable cal =
      decode_attention_fidelity(h100, with_decode_attention_calibration({}, c), m);
  ASSERT_EQ(cal.rows.size(), 12u);
  EXPECT_LT(cal.max_abs_rel_error, kFitRelTol);
  const FidelityTable raw = decode_attention_fidelity(h100, CostModelConfig{}, m);
  for (const auto& r : raw.rows) EXPECT_LT(r.rel_error, 0.0) << r.label;
  EXPECT_EQ(raw.rows[0].label, "b1_c512");
  EXPECT_DOUBLE_EQ(raw.rows[0].achieved_bytes_per_s, raw.rows[0].bytes / m[0].measured_s);
  // A negative fitted overhead is unphysical: the fit falls back to a zero intercept.
  const auto neg = synthetic_measurements(h100, 0.0, 0.8);
  const Calibration z = calibrate_decode_attention(h100, neg);
  EXPECT_GE(z.fixed_s, 0.0);
  EXPECT_NEAR(z.mem_efficiency, 0.8, 0.8 * kFitRelTol);
}

TEST(SimCalibration, MixedBoundsAndBadRecords) {
  const GpuSpec h100 = gpu_spec("H100");
  const CostModelConfig cfg;
  std::vector<KernelTiming> recs;
  for (int64_t m : {1, 8, 64, 2048, 4096, 8192}) {
    const OpCost r = gemm_cost(h100, "g", m, 4096, 4096, 16, cfg);
    const double t = 3e-6 + (r.bound() == Bound::kMemory ? r.memory_s / 0.8 : r.compute_s / 0.6);
    recs.push_back({"m" + std::to_string(m), r, t});
  }
  const Calibration c = calibrate(recs);
  EXPECT_GT(c.num_memory_bound, 0);
  EXPECT_GT(c.num_compute_bound, 0);
  EXPECT_NEAR(c.fixed_s, 3e-6, 3e-6 * kFitRelTol);
  EXPECT_NEAR(c.mem_efficiency, 0.8, 0.8 * kFitRelTol);
  EXPECT_NEAR(c.compute_efficiency, 0.6, 0.6 * kFitRelTol);
  EXPECT_NEAR(c.predict(recs[5].roofline), recs[5].measured_s, recs[5].measured_s * kFitRelTol);
  expect_error_contains([&] { calibrate({recs[0]}); }, "at least 2 timing records, got 1");
  auto bad = recs;
  bad[2].measured_s = 0;
  expect_error_contains([&] { calibrate(bad); },
                        "record 2 ('m64'): measured_s 0 must be finite and > 0");
  std::vector<KernelTiming> same{recs[0], recs[0]};
  expect_error_contains([&] { calibrate(same); }, "do not determine the model");
}

}  // namespace
}  // namespace kvlab::sim
