// softmax_state.h: the online-softmax state of the tensor-core decode kernels and its merges
// (host/device, g++-compilable).
//
// The math is reference/softmax/online_softmax.h's; this header holds it in the shape the
// kernels keep it, so that the exact sequence of operations a kernel performs can be run
// and checked on the CPU (tests/cpu/test_softmax_state.cpp replays a warp's lanes, the
// block merge and the split merge against the reference):
//
//  * FragmentSoftmax: one thread's state inside an mma warp tile. A thread (g, t) of a
//    warp holds the scores of tokens {16*sub + g, 16*sub + g + 8} for query heads 2t and
//    2t+1 (the C fragment of S^T = K.Q^T, fragment order c0..c3 = (g, 2t) (g, 2t+1)
//    (g+8, 2t) (g+8, 2t+1)). Per tile: the thread-local maxima, a max over the 8 lanes that
//    share t (shuffles on the device, the caller's loop on the host), the rescale factor
//    of the accumulators, then the probabilities. `l` sums only this thread's tokens until
//    the caller reduces it over the 8 lanes at the end.
//  * combine_partials: N partial (max, sum) pairs of one row -> the common max, the weights
//    exp(m_i - M) and the total sum (the block's cross-warp merge).
//  * LseAccumulator: a running combination of normalized partial results (o_i, lse_i), in
//    batches (the split merge of v4/v5's merge kernel and v6's last-block merge).
//
// Base: logits are natural-log (z = sm_scale q.k); exp(x - m) is formed as
// exp2((x - m) * log2(e)) with x - m computed first (exact enough for logits of any
// magnitude), and a -inf x (masked, or nothing seen yet) gives 0, never NaN.
#pragma once

#include <cmath>

#include "reference/core/hostdevice.h"

namespace kvlab::gpu {

constexpr float kLog2e = 1.4426950408889634f;

// exp(x - m) for the online softmax; m == -inf only when x == -inf too (no valid logit
// yet): the result is then 0, never NaN.
KVLAB_HD float exp_diff(float x, float m) {
  return (x == -INFINITY) ? 0.0f : exp2f((x - m) * kLog2e);
}

// One thread's online-softmax state in an mma warp tile: heads 2t (index 0) and 2t+1 (1).
struct FragmentSoftmax {
  float m[2];  // running maxima (uniform over the 8 lanes sharing t after each tile)
  float l[2];  // this thread's share of sum exp(z - m)

  KVLAB_HD void reset() {
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
  }

  // Step 1: this thread's maxima over a tile's scores s[kSub][c0..c3] and the running ones.
  template <int kSub>
  KVLAB_HD void tile_max(const float (&s)[kSub][4], float& mx0, float& mx1) const {
    mx0 = m[0], mx1 = m[1];
    for (int sub = 0; sub < kSub; ++sub) {
      mx0 = fmaxf(mx0, fmaxf(s[sub][0], s[sub][2]));
      mx1 = fmaxf(mx1, fmaxf(s[sub][1], s[sub][3]));
    }
  }

  // Step 2 is the caller's: the max of mx0 / mx1 over the 8 lanes sharing t.
  // Step 3: move to the tile's maxima; corr0 / corr1 rescale what was accumulated before.
  KVLAB_HD void rescale_to(float mx0, float mx1, float& corr0, float& corr1) {
    corr0 = exp_diff(m[0], mx0), corr1 = exp_diff(m[1], mx1);
    m[0] = mx0, m[1] = mx1;
    l[0] *= corr0, l[1] *= corr1;
  }

  // Step 4: the probabilities of one 16-token pass (same fragment order), added into l.
  KVLAB_HD void probs(const float (&s)[4], float (&p)[4]) {
    p[0] = exp_diff(s[0], m[0]), p[1] = exp_diff(s[1], m[1]);
    p[2] = exp_diff(s[2], m[0]), p[3] = exp_diff(s[3], m[1]);
    l[0] += p[0] + p[2], l[1] += p[1] + p[3];
  }
};

// The merge of N partial states of one row over disjoint keys: M = max m_i,
// w_i = exp(m_i - M) (0 for a partial that saw no key), sum = sum_i w_i l_i.
// Returns M (-inf when no partial saw a key; then every weight and the sum are 0).
template <int N>
KVLAB_HD float combine_partials(const float (&m)[N], const float (&l)[N], float (&w)[N],
                                float& sum) {
  float mm = -INFINITY;
  for (int i = 0; i < N; ++i) mm = fmaxf(mm, m[i]);
  sum = 0.0f;
  for (int i = 0; i < N; ++i) {
    w[i] = exp_diff(m[i], mm);
    sum += w[i] * l[i];
  }
  return mm;
}

// A running log-sum-exp combination of normalized partial results (o_i, lse_i) of one row:
// m = the largest lse seen, s = sum_i exp(lse_i - m); the caller's accumulators hold
// sum_i exp(lse_i - m) o_i. Partials are folded in batches: raise_to() the batch's max
// (rescaling what is held), then weight() each partial that contributes(). A partial with
// lse = -inf saw no key and is skipped (its o is never read: it may hold anything, as in
// reference merge_normalized_partials); a NaN lse marks the row bad.
struct LseAccumulator {
  float m = -INFINITY;
  float s = 0.0f;
  bool bad = false;

  KVLAB_HD static bool contributes(float lse) { return lse != -INFINITY; }

  // The max of the running one and a batch's lse values (NaN ones only mark `bad`).
  template <int N>
  KVLAB_HD float batch_max(const float (&lse)[N], const bool (&use)[N]) {
    float bm = m;
    for (int i = 0; i < N; ++i) {
      if (use[i]) {
        bm = fmaxf(bm, lse[i]);
        bad |= lse[i] != lse[i];
      }
    }
    return bm;
  }
  // Moves to the new max bm (>= m, finite or -inf); returns the factor for the accumulators.
  KVLAB_HD float raise_to(float bm) {
    const float r = exp_diff(m, bm);  // 0 when nothing was held (m = -inf)
    s *= r;
    m = bm;
    return r;
  }
  // The weight of a partial with log-sum-exp `lse` (after raise_to covering it).
  KVLAB_HD float weight(float lse) {
    const float w = exp_diff(lse, m);
    s += w;
    return w;
  }
};

}  // namespace kvlab::gpu
