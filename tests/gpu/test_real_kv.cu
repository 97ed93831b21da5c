// test_real_kv.cu: the append and decode kernels on a real model's K, V and queries.
//
// The dump comes from `kvlab model dump-kv` (real K after RoPE and V as float32, the queries as
// BF16 bits, a few layers of SmolLM2-135M on the GPL-3 text); KVLAB_REAL_KV names it. Without
// it the tests skip (the GPU stage script experiments/model/gpu_stage.sh writes one and sets it).
// Per dumped layer and every KV format:
//   append: gpu::append_kv vs ref::append_kv over all tokens, pools and scales byte for byte
//           (pool scales calibrated from the layer's amax, as model_quality does);
//   decode: 8 prefixes of the cache (lengths tokens*(s+1)/8) queried by the real query at their
//           last position, every registered decode version vs ref::decode_attention over the
//           same pages: tolerance(Op::kDecodeAttention, format, bf16).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "experiments/device/device.h"
#include "experiments/h5/h5.h"
#include "experiments/model/model_eval.h"
#include "experiments/model/model_file.h"
#include "gpu/runtime/decode_step_executor.h"
#include "reference/metrics/tolerance.h"
#include "gpu/quant/append.h"
#include "reference/attention/attention.h"
#include "reference/attention/paged_case.h"
#include "reference/layout/layout_names.h"
#include "reference/quant/append.h"
#include "reference/quant/scale_rules.h"
#include "reference/step/decode_step.h"
#include "tests/common/tolerance_check.h"
#include "tests/gpu/gpu_test_util.cuh"

namespace kvlab {
namespace {

using test::raw;
using test::to_device;
using test::to_host;

struct RealLayer {
  int layer = 0, tokens = 0, kv_heads = 0, q_heads = 0, head_dim = 0;
  std::vector<float> k, v;  // [tokens, kv_heads, head_dim]
  std::vector<uint16_t> q;  // [tokens, q_heads, head_dim] BF16 bits
};

std::vector<RealLayer> load_dump(std::string* why) {
  const char* path = std::getenv("KVLAB_REAL_KV");
  if (!path || !*path) {
    *why = "KVLAB_REAL_KV is not set (kvlab model dump-kv writes the file)";
    return {};
  }
  auto f = exp::h5::File::open(path);
  std::vector<RealLayer> out;
  for (const std::string& name : f.children()) {
    if (name.rfind("layer_", 0) != 0) continue;
    const auto g = f.open_group(name);
    RealLayer L;
    L.layer = static_cast<int>(g.attr_int("layer"));
    L.tokens = static_cast<int>(f.attr_int("tokens"));
    L.kv_heads = static_cast<int>(f.attr_int("kv_heads"));
    L.q_heads = static_cast<int>(f.attr_int("q_heads"));
    L.head_dim = static_cast<int>(f.attr_int("head_dim"));
    for (double x : g.open_dataset("k").read_doubles()) L.k.push_back(static_cast<float>(x));
    for (double x : g.open_dataset("v").read_doubles()) L.v.push_back(static_cast<float>(x));
    for (int64_t x : g.open_dataset("q").read_ints()) L.q.push_back(static_cast<uint16_t>(x));
    out.push_back(std::move(L));
  }
  if (out.empty()) *why = std::string(path) + " holds no layer_NN group";
  return out;
}

float amax_of(const std::vector<float>& x) {
  float a = 0;
  for (float v : x) a = std::max(a, std::fabs(v));
  return a;
}

float pool_scale(KvFormat f, float amax) {
  switch (f) {
    case KvFormat::kFP8E4M3:
      return fp32_scale_exact(amax, kE4M3Max, kDefaultAmaxFloor, AmaxFloorAt::kAmax);
    case KvFormat::kFP8E5M2:
      return fp32_scale_exact(amax, kE5M2Max, kDefaultAmaxFloor, AmaxFloorAt::kAmax);
    case KvFormat::kNVFP4:
      return nvfp4_tensor_scale(amax, kDefaultAmaxFloor, AmaxFloorAt::kAmax);
    default:
      return 1.0f;
  }
}

TEST(RealKv, AppendAndDecodeOnRealActivations) {
  KVLAB_SKIP_WITHOUT_GPU();
  std::string why;
  const std::vector<RealLayer> layers = load_dump(&why);
  if (layers.empty()) GTEST_SKIP() << why;
  for (const RealLayer& L : layers) {
    for (KvFormat f : all_kv_formats()) {
      for (KvLayout lay : {KvLayout::kNHD, KvLayout::kHND}) {
        const std::string ctx =
            "layer " + std::to_string(L.layer) + " " + to_string(f) + "/" + to_string(lay);
        PageGeometry g;
        g.layout = lay;
        g.format = f;
        g.num_kv_heads = L.kv_heads;
        g.head_dim = L.head_dim;
        g.block_size = 16;
        g.num_blocks = (L.tokens + 15) / 16;
        std::vector<uint8_t> hk(g.bytes()), hv(g.bytes()), hks(g.scale_bytes()),
            hvs(g.scale_bytes());
        std::vector<int64_t> slots(L.tokens);
        for (int i = 0; i < L.tokens; ++i) slots[i] = i;
        KvCacheView hv_view{g,
                            hk.data(),
                            hv.data(),
                            hks.empty() ? nullptr : hks.data(),
                            hvs.empty() ? nullptr : hvs.data(),
                            pool_scale(f, amax_of(L.k)),
                            pool_scale(f, amax_of(L.v))};
        AppendArgs ha;
        ha.in_dtype = DType::kF32;
        ha.k = L.k.data();
        ha.v = L.v.data();
        ha.slot_mapping = slots.data();
        ha.num_tokens = L.tokens;
        ha.kv = hv_view;
        ref::append_kv(ha);

        auto dk = to_device(std::vector<uint8_t>(g.bytes(), 0));
        auto dv = to_device(std::vector<uint8_t>(g.bytes(), 0));
        auto dks = to_device(std::vector<uint8_t>(g.scale_bytes(), 0));
        auto dvs = to_device(std::vector<uint8_t>(g.scale_bytes(), 0));
        auto dkin = to_device(L.k), dvin = to_device(L.v);
        auto dslots = to_device(slots);
        AppendArgs da = ha;
        da.k = raw(dkin);
        da.v = raw(dvin);
        da.slot_mapping = raw(dslots);
        da.kv.k = raw(dk);
        da.kv.v = raw(dv);
        da.kv.k_scales = hks.empty() ? nullptr : raw(dks);
        da.kv.v_scales = hvs.empty() ? nullptr : raw(dvs);
        gpu::append_kv(da, nullptr);
        KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_EQ(to_host(dk), hk) << ctx << ": K pool differs";
        EXPECT_EQ(to_host(dv), hv) << ctx << ": V pool differs";
        EXPECT_EQ(to_host(dks), hks) << ctx << ": K scales differ";
        EXPECT_EQ(to_host(dvs), hvs) << ctx << ": V scales differ";

        // decode: 8 prefixes, each queried by the real query at its last position
        const int S = 8;
        std::vector<int32_t> lens(S), table(static_cast<size_t>(S) * g.num_blocks);
        std::vector<uint16_t> q(static_cast<size_t>(S) * L.q_heads * L.head_dim);
        for (int s = 0; s < S; ++s) {
          lens[s] = std::max(1, L.tokens * (s + 1) / S);
          for (int b = 0; b < g.num_blocks; ++b)
            table[static_cast<size_t>(s) * g.num_blocks + b] = b;
          const size_t row = static_cast<size_t>(lens[s] - 1) * L.q_heads * L.head_dim;
          std::copy_n(L.q.begin() + row, static_cast<size_t>(L.q_heads) * L.head_dim,
                      q.begin() + static_cast<size_t>(s) * L.q_heads * L.head_dim);
        }
        DecodeArgs ra;
        ra.q_dtype = DType::kBF16;
        ra.q = q.data();
        std::vector<uint16_t> ro(q.size());
        ra.o = ro.data();
        ra.kv = hv_view;
        ra.block_table = table.data();
        ra.seq_lens = lens.data();
        ra.num_seqs = S;
        ra.num_qo_heads = L.q_heads;
        ra.max_blocks_per_seq = static_cast<int32_t>(g.num_blocks);
        ra.max_seq_len = L.tokens;
        ra.sm_scale = 1.0f / std::sqrt(static_cast<float>(L.head_dim));
        ref::decode_attention(ra);
        const std::vector<float> ref_o = ref::to_float(ro.data(), DType::kBF16, ro.size());

        auto dq = to_device(q);
        auto dtable = to_device(table);
        auto dlens = to_device(lens);
        DecodeArgs ga = ra;
        ga.q = raw(dq);
        ga.kv = da.kv;
        ga.block_table = raw(dtable);
        ga.seq_lens = raw(dlens);
        int ran = 0;
        for (const auto& ver : gpu::decode_versions()) {
          thrust::device_vector<uint16_t> dout(q.size(), 0x7FC0);  // NaN: unwritten shows
          ga.o = raw(dout);
          if (!gpu::decode_unsupported_reason(ga, ver.id).empty()) continue;
          const size_t ws = gpu::decode_workspace_bytes(ga, ver.id);
          thrust::device_vector<uint8_t> w(std::max<size_t>(ws, 1), 0xFF);
          gpu::decode_attention(ga, ver.id, raw(w), ws, nullptr);
          KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
          const std::vector<uint16_t> hout = to_host(dout);
          EXPECT_TRUE(test::within_tolerance(ref::to_float(hout.data(), DType::kBF16, hout.size()),
                                             ref_o, Op::kDecodeAttention, f, DType::kBF16,
                                             ctx + " " + ver.name));
          ++ran;
        }
        EXPECT_GT(ran, 0) << ctx << ": no decode version supports it";
      }
    }
  }
}

// The executor's weight-upload path: given weights (here the synthetic ones, uploaded from the
// host) give the same logits, bit for bit, as the weights the executor generates itself.
TEST(RealModelExecutor, UploadedWeightsEqualGeneratedOnes) {
  KVLAB_SKIP_WITHOUT_GPU();
  const DecoderConfig c = decoder_preset("tiny");
  gpu::ExecutorOptions o;
  o.max_batch = 2;
  o.max_context = 12;
  gpu::DecodeStepExecutor gen(c, o), up(c, o, synthetic_weights(c));
  gen.start(2);
  up.start(2);
  for (int s = 0; s < 6; ++s) {
    const std::vector<int32_t> tok = {(17 * s + 3) % c.vocab, (29 * s + 7) % c.vocab};
    gen.step(tok, gpu::StepVariant::kEagerFused, gpu::Sampling{});
    up.step(tok, gpu::StepVariant::kEagerFused, gpu::Sampling{});
    EXPECT_EQ(gen.logits(), up.logits()) << "step " << s;
  }
  // and a tied LM head (empty lm_head: the embedding's copy) differs from the untied one
  DecoderWeights tied = synthetic_weights(c);
  tied.lm_head.clear();
  gpu::DecodeStepExecutor t(c, o, tied);
  t.start(2);
  t.step({1, 2}, gpu::StepVariant::kEagerFused, gpu::Sampling{});
  gen.start(2);
  gen.step({1, 2}, gpu::StepVariant::kEagerFused, gpu::Sampling{});
  EXPECT_NE(t.logits(), gen.logits());
}

// A real model (KVLAB_REAL_MODEL: a kvlab model file, e.g. the GPU stage's 2-layer slice) on the
// GPU executor against the CPU reference, teacher-forced on its text, per cache format: every
// position's logits within tolerance(kDecodeStepLogits), per-layer calibrated pool scales.
TEST(RealModelExecutor, RealWeightsMatchTheCpuReference) {
  KVLAB_SKIP_WITHOUT_GPU();
  const char* path = std::getenv("KVLAB_REAL_MODEL");
  if (!path || !*path) GTEST_SKIP() << "KVLAB_REAL_MODEL is not set (a kvlab model file)";
  const exp::ModelFile m = exp::read_model_file(path);
  const std::vector<int32_t>& text = m.texts.begin()->second.tokens;
  const int n = std::min<int>(64, static_cast<int>(text.size()));
  for (KvFormat f : {KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kFP8E4M3PerToken,
                     KvFormat::kNVFP4, KvFormat::kMXFP4}) {
    gpu::ExecutorOptions o;
    o.kv_format = f;
    o.max_batch = 1;
    o.max_context = n;
    ref::StepCacheOptions rc;
    rc.format = f;
    for (int l = 0; l < m.config.layers; ++l) {
      // scales for unit-order activations: 4 / max (FP8), 4 / 2688 (NVFP4)
      const float s = f == KvFormat::kNVFP4 ? 4.0f / 2688 : 4.0f / 448;
      o.layer_k_scales.push_back(s);
      o.layer_v_scales.push_back(s);
      ref::LayerKvSpec ls;
      ls.format = f;
      ls.k_scale = ls.v_scale = s;
      rc.layers.push_back(ls);
    }
    gpu::DecodeStepExecutor e(m.config, o, m.weights);
    ref::DecoderRef r(m.config, m.weights, rc, 1, n);
    e.start(1);
    r.start(1, e.block_table());
    const Tolerance tol = tolerance(Op::kDecodeStepLogits, f, DType::kF32, m.config.layers);
    double worst = 0, worst_rms = 0;
    for (int i = 0; i < n; ++i) {
      e.step({text[i]}, gpu::StepVariant::kEagerFused, gpu::Sampling{});
      r.step({text[i]});
      // The step rows hold unit-scale logits (the synthetic presets' std is ~1, so their atol
      // is absolute); a trained model's logits have their own scale. Both sides are divided
      // by the reference's RMS at this position, which leaves the NMSE as it is and puts the
      // elementwise bound on the scale the rows were measured at.
      std::vector<float> lg = e.logits(), rf = r.logits();
      double ss = 0;
      for (float x : rf) ss += double{x} * x;
      const float rms = static_cast<float>(std::sqrt(ss / std::max<size_t>(rf.size(), 1)));
      ASSERT_GT(rms, 0.0f) << path << " position " << i << ": reference logits all zero";
      for (size_t j = 0; j < lg.size(); ++j) {
        lg[j] /= rms;
        rf[j] /= rms;
      }
      ErrorStats es;
      ASSERT_TRUE(check(lg.data(), rf.data(), lg.size(), tol, &es))
          << path << " " << to_string(f) << " position " << i << " (logits / " << rms
          << ", the reference's RMS): " << to_string(es);
      if (es.max_abs > worst) {
        worst = es.max_abs;
        worst_rms = rms;
      }
    }
    std::printf("[real-model] %s %s: %d positions, worst max |dlogit| / RMS %.4g (RMS %.3g), "
                "row atol %.4g\n",
                path, to_string(f).c_str(), n, worst, worst_rms, tol.atol);
  }
}

// The driver's GPU engine of a teacher-forced run (experiments/device/device.h:
// decode_logits_on_device, implemented by the CUDA backend in experiments/cuda/real_model.cpp)
// on the tiny preset's synthetic weights, one sequence fed a seeded token sequence: every
// step's logits within tolerance(kDecodeStepLogits) of the CPU reference fed the same tokens,
// per cache format, with a different pool scale per layer; and every step reported once, in
// order.
TEST(RealModelExecutor, DriverGpuEngineMatchesTheCpuReference) {
  KVLAB_SKIP_WITHOUT_GPU();
  const DecoderConfig c = decoder_preset("tiny");
  const DecoderWeights w = synthetic_weights(c);
  const int n = 19;  // steps; the sequence holds one token more than is fed
  std::vector<int32_t> toks(n + 1);
  for (int i = 0; i <= n; ++i) toks[i] = (37 * i + 11) % c.vocab;
  for (KvFormat f :
       {KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kFP8E4M3PerToken, KvFormat::kNVFP4}) {
    std::vector<float> ks, vs;
    ref::StepCacheOptions rc;
    rc.format = f;
    for (int l = 0; l < c.layers; ++l) {
      // around the decode_step kind's 0.02 (unit-scale synthetic K/V over the FP8/FP4 range)
      ks.push_back(0.02f * (1.0f + 0.25f * l));
      vs.push_back(0.016f * (1.0f + 0.25f * l));
      ref::LayerKvSpec ls;
      ls.format = f;
      ls.k_scale = ks.back();
      ls.v_scale = vs.back();
      rc.layers.push_back(ls);
    }
    std::vector<std::vector<float>> got;
    exp::decode_logits_on_device(c, w, f, ks, vs, n + 1, toks, n, [&](int i, const float* lg) {
      EXPECT_EQ(i, static_cast<int>(got.size())) << to_string(f);
      got.emplace_back(lg, lg + c.vocab);
    });
    ASSERT_EQ(static_cast<int>(got.size()), n) << to_string(f);
    ref::DecoderRef r(c, w, rc, 1, n + 1);
    std::vector<int32_t> table(static_cast<size_t>(r.blocks_per_seq()));
    for (size_t b = 0; b < table.size(); ++b) table[b] = static_cast<int32_t>(b);
    r.start(1, table);
    const Tolerance tol = tolerance(Op::kDecodeStepLogits, f, DType::kF32, c.layers);
    for (int i = 0; i < n; ++i) {
      r.step({toks[i]});
      ErrorStats es;
      ASSERT_TRUE(check(got[i].data(), r.logits().data(), got[i].size(), tol, &es))
          << to_string(f) << " step " << i << ": " << to_string(es);
    }
  }
}

}  // namespace
}  // namespace kvlab
