// step_math.h: the scalar math the CPU reference and the GPU decode step share (host/device).
//
// Everything here is written so that g++ and nvcc produce the *same bits*: the decode step's
// synthetic weights, RoPE and sampling are then exact mirrors between reference/step and
// gpu/step, and only the reductions (GEMMs, norms, attention) differ in rounding order.
//   - Arithmetic goes through fmul_rn / fadd_rn / fsub_rn / fma_rn: on the device the
//     __f*_rn intrinsics, which nvcc never contracts into FMAs; on the host plain IEEE single
//     operations (x86-64 SSE, and kvlab builds C++ in ISO mode, where g++'s default is
//     -ffp-contract=off) and std::fma.
//   - No transcendental library call (expf/sinf differ between libm and CUDA by ulps): RoPE
//     reads a host-computed cos/sin table (rope_table() in decode_step.h) and sampling uses
//     det_exp(), a polynomial built from the operations above.
#pragma once

#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

#include "reference/core/hostdevice.h"
#include "reference/core/mix64.h"
#include "reference/formats/formats.h"

namespace kvlab::step {

// ------------------------------------------------------------------ uncontracted arithmetic
KVLAB_HD float fmul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KVLAB_HD float fadd_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
KVLAB_HD float fsub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
KVLAB_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// ------------------------------------------------------------------ counter-based randomness
// Hash of (seed, stream, index): independent streams (tensors, sampling rows) from one seed.
KVLAB_HD uint64_t hash3(uint64_t seed, uint64_t stream, uint64_t index) {
  return mix64(mix64(seed ^ mix64(stream)) + index);
}
// Uniform in [-1, 1) on a 2^-23 grid: exact in float32 (a 24-bit integer times 2^-23).
KVLAB_HD float uniform_pm1(uint64_t h) {
  const int32_t v = static_cast<int32_t>(h >> 40) - (1 << 23);
  return static_cast<float>(v) * (1.0f / 8388608.0f);
}
// Uniform in [0, 1) on a 2^-24 grid.
KVLAB_HD float uniform01(uint64_t h) {
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

// ------------------------------------------------------------------ synthetic weights
// Tensor kinds; the hash stream of a tensor is (kind, layer).
enum class WeightTensor : uint32_t {
  kEmbedding = 0,
  kAttnNorm = 1,
  kWqkv = 2,
  kWo = 3,
  kMlpNorm = 4,
  kWGateUp = 5,
  kWDown = 6,
  kFinalNorm = 7,
  kLmHead = 8,
};
KVLAB_HD uint64_t weight_stream(WeightTensor t, int layer) {
  return (static_cast<uint64_t>(t) << 32) | static_cast<uint32_t>(layer);
}
// Element `index` of a tensor: offset + scale * u, u uniform in [-1, 1), rounded to BF16.
// The caller picks (scale, offset) with weight_init() so activations stay O(1).
KVLAB_HD uint16_t synthetic_weight_bf16(uint64_t seed, uint64_t stream, int64_t index, float scale,
                                        float offset) {
  const float u = uniform_pm1(hash3(seed, stream, static_cast<uint64_t>(index)));
  return float_to_bf16_bits(fma_rn(scale, u, offset), Saturation::kSatFinite);
}

// ------------------------------------------------------------------ RoPE (NeoX halves)
// Rotates the pair (x[i], x[i + head_dim/2]) by the table's angle for (position, i).
KVLAB_HD void rope_rotate(float x0, float x1, float c, float s, float* y0, float* y1) {
  *y0 = fsub_rn(fmul_rn(x0, c), fmul_rn(x1, s));
  *y1 = fadd_rn(fmul_rn(x1, c), fmul_rn(x0, s));
}

// ------------------------------------------------------------------ sampling
// Monotone map float -> uint32 (a < b  <=>  key(a) < key(b) for non-NaN; -0 < +0). NaN of
// either sign maps to 0, below -Inf, so a NaN logit is never picked while a number exists.
KVLAB_HD uint32_t float_order_key(float x) {
  const uint32_t u = fmt_detail::f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// Total order used by greedy and top-k: larger value first, then lower token id. Distinct
// for distinct ids, so the selected set and its order are unique.
KVLAB_HD uint64_t token_order_key(float logit, uint32_t token) {
  return (static_cast<uint64_t>(float_order_key(logit)) << 32) | (0xFFFFFFFFu - token);
}
KVLAB_HD uint32_t token_of_key(uint64_t key) {
  return 0xFFFFFFFFu - static_cast<uint32_t>(key & 0xFFFFFFFFu);
}

// exp(x) for -87 < x <= 0 (0 at and below -87; x > 0 is treated as 0: callers subtract the
// maximum first), within det_exp_error_bound(x) relative: t = x * log2(e) carries the
// float rounding of log2(e) (1.3e-8) and of the product (2^-24), i.e. < 2^-23 |x| once
// scaled by ln 2 back to exp; the 2^f polynomial and f * ln 2 add a few float ulps (< 2^-21). Built
// only from _rn operations and exact bit manipulation, so host and device agree bit for bit.
KVLAB_HD float det_exp(float x) {
  if (!(x > -87.0f)) return 0.0f;  // also NaN -> 0
  if (x > 0.0f) x = 0.0f;
  const float t = fmul_rn(x, 1.44269504088896341f);  // log2(e)
  const float n = floorf(fadd_rn(t, 0.5f));          // nearest integer, exact
  const float f = fsub_rn(t, n);                     // [-0.5, 0.5], exact (Sterbenz)
  // 2^f = e^(f ln2): Taylor/Horner in g = f*ln2, degree 7 (|g| <= 0.347: error < 4e-9)
  const float g = fmul_rn(f, 0.693147180559945309f);
  float p = 1.0f / 5040.0f;
  p = fma_rn(p, g, 1.0f / 720.0f);
  p = fma_rn(p, g, 1.0f / 120.0f);
  p = fma_rn(p, g, 1.0f / 24.0f);
  p = fma_rn(p, g, 1.0f / 6.0f);
  p = fma_rn(p, g, 0.5f);
  p = fma_rn(p, g, 1.0f);
  p = fma_rn(p, g, 1.0f);
  const int e = static_cast<int>(n);  // in [-126, 0]
  return fmul_rn(p, exp2i(e));
}

KVLAB_HD double det_exp_error_bound(float x) {
  return (x < 0 ? -x : x) * 0x1p-23 + 0x1p-21;
}

// Draws from the top-k candidates, given sorted by token_order_key descending (vals[0] the
// largest logit): p_i = exp((vals[i] - vals[0]) * inv_temperature); the draw u in [0, 1)
// picks the first i whose running sum exceeds u * sum (sequential float sums, fixed order).
// Returns the candidate's position in [0, k).
KVLAB_HD int sample_sorted(const float* vals, int k, float inv_temperature, float u) {
  float total = 0.0f;
  for (int i = 0; i < k; ++i)
    total = fadd_rn(total, det_exp(fmul_rn(fsub_rn(vals[i], vals[0]), inv_temperature)));
  const float target = fmul_rn(u, total);
  float run = 0.0f;
  for (int i = 0; i < k; ++i) {
    run = fadd_rn(run, det_exp(fmul_rn(fsub_rn(vals[i], vals[0]), inv_temperature)));
    if (run > target) return i;
  }
  return k - 1;
}

// The per-(row, position) draw of top-k sampling: a fresh uniform for every sequence row
// and decode position, from one seed.
KVLAB_HD float sampling_uniform(uint64_t seed, int32_t row, int32_t position) {
  return uniform01(hash3(
      seed, 0x53414D504C45ull /* "SAMPLE" */,
      (static_cast<uint64_t>(static_cast<uint32_t>(row)) << 32) | static_cast<uint32_t>(position)));
}

}  // namespace kvlab::step
