// online_softmax.h: the streaming ("online") softmax state and its merge (host/device).
//
// One state summarizes attention over any subset of keys:
//   m    running max of the logits seen (-inf while none, or only -inf logits, were seen)
//   l    sum_j exp(z_j - m)
//   acc  sum_j exp(z_j - m) * v_j           [kN] (a slice of the head dimension)
// so that the softmax-weighted average is acc / l and the log-sum-exp is m + log(l).
// update() folds in a chunk of (logit, value row) pairs; merge() combines two states over
// disjoint key sets (split-KV partials). Both equal the two-pass softmax up to rounding
// (tests/cpu/test_online_softmax.cpp shows it, edge cases included).
//
// LSE base: NATURAL log everywhere in kvlab (lse = log(sum_j exp(z_j)), z_j = sm_scale q.k_j).
// A kernel that works in base 2 (exp2 with log2(e) folded into sm_scale) converts its
// result with lse = lse2 * ln(2) before storing.
//
// Edge cases, by construction:
//   - a chunk whose logits are all -inf (fully masked) leaves the state unchanged, and an
//     empty state (m = -inf, l = 0) merges as the identity; no exp(-inf - -inf) = NaN is
//     ever formed;
//   - finite but extremely negative logits (-1e30, -FLT_MAX) are ordinary: they are
//     shifted by the running max before exp, so a chunk of them alone has weights exp(0);
//   - merge() is written symmetrically, so merge(a, b) and merge(b, a) are bitwise equal;
//   - a NaN logit or value propagates to the output (the state becomes NaN), so a kernel
//     that reads a NaN-poisoned unused slot is caught; a +inf logit makes the state NaN.
//
// T is the state's arithmetic type (float in kernels, double in host checks). A GPU thread
// that owns kN elements of the head dimension keeps one state with that kN (the scalar m
// and l are replicated across the threads of a row); host code uses kN >= head_dim and
// passes the runtime `dim`.
#pragma once

#include <cmath>
#include <cstdint>

#include "reference/core/hostdevice.h"

namespace kvlab {
namespace softmax_detail {

KVLAB_HD float exp_t(float x) {
#if defined(__CUDA_ARCH__)
  return ::expf(x);
#else
  return std::exp(x);
#endif
}
KVLAB_HD double exp_t(double x) {
#if defined(__CUDA_ARCH__)
  return ::exp(x);
#else
  return std::exp(x);
#endif
}
KVLAB_HD float log_t(float x) {
#if defined(__CUDA_ARCH__)
  return ::logf(x);
#else
  return std::log(x);
#endif
}
KVLAB_HD double log_t(double x) {
#if defined(__CUDA_ARCH__)
  return ::log(x);
#else
  return std::log(x);
#endif
}

template <typename T>
KVLAB_HD T neg_inf() {
  return static_cast<T>(-INFINITY);
}

// max that propagates NaN from either side (std::fmax would drop it and hide a poisoned read).
template <typename T>
KVLAB_HD T max_nan(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

// exp(a - b) for a <= b, with exp(-inf - finite) = 0 and never forming -inf - -inf.
template <typename T>
KVLAB_HD T rescale_factor(T a, T b) {
  if (a == neg_inf<T>()) return static_cast<T>(0);
  return exp_t(a - b);
}

}  // namespace softmax_detail

template <typename T, int kN>
struct OnlineSoftmax {
  static_assert(kN > 0, "OnlineSoftmax needs at least one accumulator element");

  T m;
  T l;
  T acc[kN];

  // The empty state: no keys seen.
  KVLAB_HD void reset() {
    m = softmax_detail::neg_inf<T>();
    l = static_cast<T>(0);
    for (int i = 0; i < kN; ++i) acc[i] = static_cast<T>(0);
  }
  KVLAB_HD static OnlineSoftmax empty() {
    OnlineSoftmax s;
    s.reset();
    return s;
  }

  // The state of a partial result stored the flash-decoding way: its normalized output
  // o[0..dim) and its lse (natural log). lse = -inf gives the empty state.
  template <typename V>
  KVLAB_HD static OnlineSoftmax from_normalized(const V* o, T lse, int dim = kN) {
    OnlineSoftmax s;
    s.reset();
    if (lse == softmax_detail::neg_inf<T>()) return s;
    s.m = lse;
    s.l = static_cast<T>(1);
    for (int i = 0; i < dim; ++i) s.acc[i] = static_cast<T>(o[i]);
    return s;
  }

  // Folds in n keys: logits[j] and value row j at values[j * value_stride + i], i < dim.
  // dim <= kN; elements dim..kN-1 of acc are left untouched.
  template <typename V>
  KVLAB_HD void update(const T* logits, const V* values, int n, int64_t value_stride,
                       int dim = kN) {
    T chunk_max = softmax_detail::neg_inf<T>();
    for (int j = 0; j < n; ++j) chunk_max = softmax_detail::max_nan(chunk_max, logits[j]);
    const T new_m = softmax_detail::max_nan(m, chunk_max);
    if (new_m == softmax_detail::neg_inf<T>()) return;  // nothing but masked keys so far
    const T alpha = softmax_detail::rescale_factor(m, new_m);
    l *= alpha;
    for (int i = 0; i < dim; ++i) acc[i] *= alpha;
    for (int j = 0; j < n; ++j) {
      const T p = softmax_detail::rescale_factor(logits[j], new_m);
      l += p;
      const V* row = values + j * value_stride;
      for (int i = 0; i < dim; ++i) acc[i] += p * static_cast<T>(row[i]);
    }
    m = new_m;
  }

  // One key.
  template <typename V>
  KVLAB_HD void push(T logit, const V* value, int dim = kN) {
    update(&logit, value, 1, 0, dim);
  }

  // Combines with a state over a disjoint key set. Symmetric in (this, o).
  KVLAB_HD void merge(const OnlineSoftmax& o, int dim = kN) {
    const T new_m = softmax_detail::max_nan(m, o.m);
    if (new_m == softmax_detail::neg_inf<T>()) return;  // both empty
    const T fa = softmax_detail::rescale_factor(m, new_m);
    const T fb = softmax_detail::rescale_factor(o.m, new_m);
    l = l * fa + o.l * fb;
    for (int i = 0; i < dim; ++i) acc[i] = acc[i] * fa + o.acc[i] * fb;
    m = new_m;
  }

  KVLAB_HD bool is_empty() const { return m == softmax_detail::neg_inf<T>(); }

  // Natural-log log-sum-exp of the logits seen; -inf for the empty state.
  KVLAB_HD T lse() const {
    if (is_empty()) return softmax_detail::neg_inf<T>();
    return m + softmax_detail::log_t(l);
  }

  // The softmax-weighted average of the values: acc / l; zeros for the empty state.
  template <typename O>
  KVLAB_HD void normalized(O* out, int dim = kN) const {
    for (int i = 0; i < dim; ++i)
      out[i] = is_empty() ? static_cast<O>(0) : static_cast<O>(acc[i] / l);
  }
};

// Merges num_parts partial results stored the flash-decoding way (normalized outputs
// o_parts[p * dim + i] with natural-log lse[p]) into out[0..dim) and *out_lse (nullable).
// Empty parts (lse = -inf) are skipped (their o is never read, so it may hold anything);
// all parts empty gives zeros and -inf.
// The same math as OnlineSoftmax::merge, for runtime dim without a kN-sized state.
template <typename T, typename V, typename O>
KVLAB_HD void merge_normalized_partials(const T* lse, const V* o_parts, int num_parts, int dim,
                                        O* out, T* out_lse) {
  T max_lse = softmax_detail::neg_inf<T>();
  for (int p = 0; p < num_parts; ++p) max_lse = softmax_detail::max_nan(max_lse, lse[p]);
  if (max_lse == softmax_detail::neg_inf<T>()) {
    for (int i = 0; i < dim; ++i) out[i] = static_cast<O>(0);
    if (out_lse) *out_lse = max_lse;
    return;
  }
  T l = static_cast<T>(0);
  for (int p = 0; p < num_parts; ++p) l += softmax_detail::rescale_factor(lse[p], max_lse);
  for (int i = 0; i < dim; ++i) {
    T a = static_cast<T>(0);
    for (int p = 0; p < num_parts; ++p) {
      if (lse[p] == softmax_detail::neg_inf<T>()) continue;
      a += softmax_detail::rescale_factor(lse[p], max_lse) *
           static_cast<T>(o_parts[static_cast<int64_t>(p) * dim + i]);
    }
    out[i] = static_cast<O>(a / l);
  }
  if (out_lse) *out_lse = max_lse + softmax_detail::log_t(l);
}

}  // namespace kvlab
