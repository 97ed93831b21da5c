// compress_math.h: the one definition of a DSV4 compressed entry, host and device.
//
// CSA (overlap, ratio r = 4): entry i, channel c, is a softmax-weighted sum over 2r rows:
//   lane a of window i-1 (tokens (i-1)r .. ir-1):  value ka[t][c] = kv[t][c],
//                                                   score za[t][c] = gate[t][c] + ape[t%r][c]
//   lane b of window i   (tokens ir .. ir+r-1):     value kb[t][c] = kv[t][dim+c],
//                                                   score zb[t][c] = gate[t][dim+c] +
//                                                   ape[t%r][dim+c]
//   entry[i][c] = sum_rows softmax_rows(score)[row] * value[row]
// For i = 0 lane a is empty (its gates are -inf: weight exactly 0, so the rows are skipped).
// HCA (single lane, ratio 128): entry i pools the r rows of window i with value kv[t][c]
// and score gate[t][c] + ape[t%r][c].
//
// Arithmetic (fixed, so that streaming, chunked and one-shot compression give the same
// bits whenever they run on the same processor): m = max of the scores in row order (lane a
// rows 0..r-1, then lane b rows 0..r-1); w = exp(s - m); sum and acc accumulate w and w*v
// in the same row order; entry = acc / sum. The rows come through two accessors so that the
// one-shot path reads the projection arrays and the streaming path reads the kept state.
#pragma once

#include <cmath>
#include <cstdint>

#include "reference/core/hostdevice.h"

namespace kvlab {

KVLAB_HD float dsv4_exp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);  // the accurate expf (kvlab never builds with --use_fast_math)
#else
  return std::exp(x);
#endif
}

// Pools one channel. lane_a(j, &v, &s) / lane_b(j, &v, &s) fetch row j (0..r-1) of each lane;
// has_a = false skips lane a (i = 0, or a single-lane layer, where lane_b is the only lane).
template <class LaneA, class LaneB>
KVLAB_HD float dsv4_pool_channel(int ratio, bool has_a, const LaneA& lane_a, const LaneB& lane_b) {
  float m = -INFINITY;
  float v, s;
  if (has_a)
    for (int j = 0; j < ratio; ++j) {
      lane_a(j, &v, &s);
      m = s > m ? s : m;
    }
  for (int j = 0; j < ratio; ++j) {
    lane_b(j, &v, &s);
    m = s > m ? s : m;
  }
  float sum = 0.0f, acc = 0.0f;
  if (has_a)
    for (int j = 0; j < ratio; ++j) {
      lane_a(j, &v, &s);
      const float w = dsv4_exp(s - m);
      sum += w;
      acc += w * v;
    }
  for (int j = 0; j < ratio; ++j) {
    lane_b(j, &v, &s);
    const float w = dsv4_exp(s - m);
    sum += w;
    acc += w * v;
  }
  return acc / sum;
}

// Entries a request has emitted after `tokens` tokens: floor(tokens / ratio).
KVLAB_HD int64_t dsv4_entries_after(int64_t tokens, int ratio) {
  return tokens / ratio;
}

}  // namespace kvlab
