#include "reference/dsv4/compressor.h"

#include "reference/core/error.h"
#include "reference/dsv4/compress_math.h"

namespace kvlab::ref {

void dsv4_plan_entries(const int32_t* start_pos, const int32_t* token_offsets, int32_t num_requests,
                       int32_t ratio, int32_t* entry_offsets, int32_t* first_entry) {
  KVLAB_REQUIRE(ratio >= 1, "compression ratio must be >= 1, got " << ratio);
  KVLAB_REQUIRE(num_requests >= 0, "num_requests must be >= 0, got " << num_requests);
  KVLAB_REQUIRE(num_requests == 0 || (start_pos && token_offsets && entry_offsets),
                "dsv4_plan_entries: null start_pos / token_offsets / entry_offsets");
  if (num_requests > 0)
    KVLAB_REQUIRE(token_offsets[0] == 0, "token_offsets[0] must be 0, got " << token_offsets[0]);
  entry_offsets[0] = 0;
  for (int32_t r = 0; r < num_requests; ++r) {
    const int64_t n = static_cast<int64_t>(token_offsets[r + 1]) - token_offsets[r];
    KVLAB_REQUIRE(
        n >= 0, "token_offsets must be non-decreasing: request " << r << " has " << n << " tokens");
    KVLAB_REQUIRE(start_pos[r] >= 0,
                  "request " << r << ": start position " << start_pos[r] << " < 0");
    const int64_t e0 = start_pos[r] / ratio, e1 = (start_pos[r] + n) / ratio;
    entry_offsets[r + 1] = static_cast<int32_t>(entry_offsets[r] + (e1 - e0));
    if (first_entry) first_entry[r] = static_cast<int32_t>(e0);
  }
}

namespace {

void check_state(const Dsv4StreamView& st) {
  KVLAB_REQUIRE(st.ratio >= 1 && st.dim >= 1,
                "stream state: ratio " << st.ratio << " and dim " << st.dim << " must be >= 1");
  KVLAB_REQUIRE(st.ka && st.za, "stream state: null ka / za");
  KVLAB_REQUIRE(!st.overlap || (st.kb && st.zb), "overlapping (CSA) stream state: null kb / zb");
}

}  // namespace

void dsv4_compress(const Dsv4StreamView& st, const Dsv4CompressArgs& a) {
  check_state(st);
  KVLAB_REQUIRE(a.num_requests >= 0, "num_requests must be >= 0, got " << a.num_requests);
  if (a.num_requests == 0) return;
  KVLAB_REQUIRE(
      a.kv && a.gate && a.request_slots && a.start_pos && a.token_offsets && a.entry_offsets,
      "dsv4_compress: null input pointer");
  std::vector<int32_t> plan(a.num_requests + 1);
  dsv4_plan_entries(a.start_pos, a.token_offsets, a.num_requests, st.ratio, plan.data(), nullptr);
  KVLAB_REQUIRE(a.token_offsets[a.num_requests] == a.num_tokens,
                "num_tokens " << a.num_tokens << " != token_offsets[num_requests] "
                              << a.token_offsets[a.num_requests]);
  for (int32_t r = 0; r <= a.num_requests; ++r)
    KVLAB_REQUIRE(a.entry_offsets[r] == plan[r],
                  "entry_offsets[" << r << "] = " << a.entry_offsets[r]
                                   << " but the call completes " << plan[r]
                                   << " entries before it (use dsv4_plan_entries)");
  KVLAB_REQUIRE(a.num_entries == plan[a.num_requests],
                "num_entries " << a.num_entries << " != planned " << plan[a.num_requests]);
  KVLAB_REQUIRE(a.num_entries == 0 || a.out,
                "dsv4_compress: null out with " << a.num_entries << " entries");
  for (int32_t r = 0; r < a.num_requests; ++r) {
    KVLAB_REQUIRE(a.request_slots[r] >= 0 && a.request_slots[r] < st.num_slots,
                  "request " << r << ": slot " << a.request_slots[r] << " outside [0, "
                             << st.num_slots << ")");
    for (int32_t q = 0; q < r; ++q)
      KVLAB_REQUIRE(a.request_slots[q] != a.request_slots[r],
                    "slot " << a.request_slots[r]
                            << " appears twice in one compress call (requests " << q << " and " << r
                            << ")");
  }

  const int32_t D = st.dim, R = st.ratio, W = st.overlap ? 2 * D : D;
  for (int32_t r = 0; r < a.num_requests; ++r) {
    const int64_t slot = a.request_slots[r];
    int64_t out_row = a.entry_offsets[r];
    for (int32_t i = a.token_offsets[r]; i < a.token_offsets[r + 1]; ++i) {
      const int64_t p = a.start_pos[r] + (i - a.token_offsets[r]);
      const float* kv = a.kv + static_cast<int64_t>(i) * W;
      const float* g = a.gate + static_cast<int64_t>(i) * W;
      const float* ape = a.ape ? a.ape + (p % R) * W : nullptr;
      // Streaming: the token's rows go into the state first ...
      float* ka = st.ka + st.lane_a_index(slot, p);
      float* za = st.za + st.lane_a_index(slot, p);
      for (int32_t c = 0; c < D; ++c) {
        ka[c] = kv[c];
        za[c] = ape ? g[c] + ape[c] : g[c];
      }
      if (st.overlap) {
        float* kb = st.kb + st.lane_b_index(slot, p);
        float* zb = st.zb + st.lane_b_index(slot, p);
        for (int32_t c = 0; c < D; ++c) {
          kb[c] = kv[D + c];
          zb[c] = ape ? g[D + c] + ape[D + c] : g[D + c];
        }
      }
      // ... and a completed window emits its entry from the state alone.
      if ((p + 1) % R != 0) continue;
      const int64_t e = p / R;
      const int64_t w0 = e * R;  // first token of window e
      float* out = a.out + out_row * D;
      for (int32_t c = 0; c < D; ++c) {
        auto lane_a = [&](int j, float* v, float* s) {  // window e-1
          const int64_t idx = st.lane_a_index(slot, w0 - R + j) + c;
          *v = st.ka[idx];
          *s = st.za[idx];
        };
        auto lane_b = [&](int j, float* v, float* s) {  // window e
          const int64_t idx =
              (st.overlap ? st.lane_b_index(slot, w0 + j) : st.lane_a_index(slot, w0 + j)) + c;
          *v = st.overlap ? st.kb[idx] : st.ka[idx];
          *s = st.overlap ? st.zb[idx] : st.za[idx];
        };
        out[c] = dsv4_pool_channel(R, st.overlap && e > 0, lane_a, lane_b);
      }
      ++out_row;
    }
  }
}

void dsv4_compress_oneshot(const float* kv, const float* gate, const float* ape, int32_t num_tokens,
                           int32_t ratio, int32_t dim, bool overlap, float* out) {
  KVLAB_REQUIRE(ratio >= 1 && dim >= 1, "ratio " << ratio << " and dim " << dim << " must be >= 1");
  KVLAB_REQUIRE(num_tokens >= 0, "num_tokens must be >= 0, got " << num_tokens);
  const int64_t n_entries = num_tokens / ratio;
  if (n_entries == 0) return;
  KVLAB_REQUIRE(kv && gate && out, "dsv4_compress_oneshot: null pointer");
  const int32_t W = overlap ? 2 * dim : dim;
  for (int64_t e = 0; e < n_entries; ++e) {
    for (int32_t c = 0; c < dim; ++c) {
      auto row = [&](int64_t t, int32_t col, float* v, float* s) {
        *v = kv[t * W + col];
        *s = ape ? gate[t * W + col] + ape[(t % ratio) * W + col] : gate[t * W + col];
      };
      auto lane_a = [&](int j, float* v, float* s) { row((e - 1) * ratio + j, c, v, s); };
      auto lane_b = [&](int j, float* v, float* s) {
        row(e * ratio + j, overlap ? dim + c : c, v, s);
      };
      out[e * dim + c] = dsv4_pool_channel(ratio, overlap && e > 0, lane_a, lane_b);
    }
  }
}

Dsv4LiveRows dsv4_live_rows(const Dsv4StreamView& st, int64_t slot, int64_t tokens) {
  Dsv4LiveRows live;
  const int64_t R = st.ratio, w = tokens / R, in_window = tokens % R;
  if (st.overlap && w >= 1)
    for (int64_t j = 0; j < R; ++j) live.lane_a.push_back(st.lane_a_index(slot, (w - 1) * R + j));
  for (int64_t j = 0; j < in_window; ++j) {
    live.lane_a.push_back(st.lane_a_index(slot, w * R + j));
    if (st.overlap) live.lane_b.push_back(st.lane_b_index(slot, w * R + j));
  }
  return live;
}

}  // namespace kvlab::ref
