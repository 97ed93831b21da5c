// test_step_logit_noise.cpp: the empirical basis of tolerance(Op::kDecodeStepLogits, ...).
//
// Two legitimate implementations of the same decode step differ only in how they round:
// the float- and the double-accumulating CPU references (reference/step/decode_step.h).
// Their logits must agree within the table's bound for every cache format, on seeds other
// than the ones the bound was measured on (tolerance.cpp states the measured maxima); the
// worst differences are printed so the margin stays visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "reference/step/decode_step.h"
#include "tests/common/test_env.h"

namespace kvlab {
namespace {

TEST(StepLogitNoise, FloatVsDoubleAccumulationStaysWithinTheBound) {
  const uint64_t base = test::seed_for("step-logit-noise");
  std::printf("base seed %llu\n", static_cast<unsigned long long>(base));
  for (KvFormat f : all_kv_formats()) {
    double worst = 0, worst_nmse = 0;
    Tolerance tol;
    for (const char* preset : {"tiny", "small"})
      for (uint64_t s = 0; s < 4; ++s) {
        DecoderConfig c = decoder_preset(preset);
        tol = tolerance(Op::kDecodeStepLogits, f, DType::kF32, c.layers);
        c.seed = base + s;
        const int batch = 8, steps = 24;
        ref::StepCacheOptions co;
        co.format = f;
        co.k_scale = co.v_scale = 0.02f;
        ref::DecoderRef a(c, co, batch, steps), b(c, co, batch, steps, true);
        std::vector<int32_t> table(static_cast<size_t>(batch) * a.blocks_per_seq());
        std::iota(table.begin(), table.end(), 0);
        a.start(batch, table);
        b.start(batch, table);
        std::mt19937_64 rng(base ^ (s * 7919));
        for (int t = 0; t < steps; ++t) {
          std::vector<int32_t> tok(batch);
          for (auto& x : tok) x = static_cast<int32_t>(rng() % c.vocab);
          a.step(tok);
          b.step(tok);
          ErrorStats es;
          EXPECT_TRUE(check(a.logits().data(), b.logits().data(), a.logits().size(), tol, &es))
              << to_string(f) << " " << preset << " seed " << c.seed << " step " << t << ": "
              << to_string(es);
          worst = std::max(worst, es.max_abs);
          worst_nmse = std::max(worst_nmse, es.nmse);
        }
      }
    std::printf("%-12s worst |dlogit| %.3g (atol %.3g), worst nmse %.3g (bound %.3g)\n",
                to_string(f).c_str(), worst, tol.atol, worst_nmse, tol.nmse_max);
  }
}

}  // namespace
}  // namespace kvlab
