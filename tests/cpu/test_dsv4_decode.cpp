// DSV4 substrate: the reference decode attention sees exactly compressed entries
// 0 .. (t+1)/ratio - 1 plus the raw window (t - window, t]; the cache it reads holds what
// one-shot compression + quantization of the request's history gives; bad input.
#include <gtest/gtest.h>

#include <cmath>

#include "reference/attention/attention.h"
#include "reference/core/error.h"
#include "reference/dsv4/entry_quant.h"
#include "reference/dsv4/variant_names.h"
#include "tests/cpu/test_dsv4_common.h"

namespace kvlab::test::dsv4 {
namespace {

class Dsv4Decode : public ::testing::TestWithParam<Dsv4Variant> {};

// Runs request `id` through chunked prefill + decode on every layer of test_tiny.
void fill(HostCache& c, int64_t id, int32_t slot, int64_t pos, const std::vector<int64_t>& chunks) {
  for (int64_t n : chunks) {
    c.mgr->append_tokens(id, n);
    for (int32_t layer = 0; layer < c.schema.num_layers(); ++layer)
      host_layer_step(c.mgr->acquire(layer), c.schema.layer(layer),
                      make_batch(c.schema.layer(layer), {id}, {slot}, {pos}, {n}));
    pos += n;
  }
}

// The stored form of x (quantize into a one-entry page and read back).
std::vector<float> stored(const Dsv4EntryPages& like, const float* x) {
  Dsv4EntryPages p = like;
  p.rows = 1;
  p.num_pages = 1;
  std::vector<uint8_t> data(like.format == Dsv4EntryFormat::kFp8PerToken ? p.nope_dim
                                                                         : p.page_bytes());
  std::vector<uint16_t> rope(p.rope_dim);
  float inv = 0;
  p.data = data.data();
  p.rope = rope.data();
  p.inv_scale = &inv;
  dsv4_store_entry(p, 0, 0, x);
  std::vector<float> y(p.head_dim());
  for (int d = 0; d < p.head_dim(); ++d) y[d] = p.load(0, 0, d);
  return y;
}

// After each chunk of a request's prefill / decode, a query at its last position t.
TEST_P(Dsv4Decode, SeesCompressedEntriesUpToTPlus1OverRatioPlusTheWindow) {
  const Dsv4Variant var = GetParam();
  SCOPED_TRACE("variant " + to_string(var) + ", seeds dsv4.raw_token " +
               std::to_string(seed_for("dsv4.raw_token")) + " dsv4.kv " +
               std::to_string(seed_for("dsv4.kv")));
  auto c = make_host_cache("test_tiny.ini", var, 16, 2, 128);
  const int64_t id = 3;
  const int32_t slot = c.mgr->admit_request(id);
  const int D = c.schema.layer(0).head_dim, W = c.schema.stack.window;
  int64_t T = 0;
  // Chunks of at most `window` tokens: queries at t = 12, 28, 29, 43, 59, 60, 61, 62, 70
  // ((t+1) % 4 and (t+1) % 16 take every interesting value, the ring wraps).
  for (int64_t chunk : {13, 16, 1, 14, 16, 1, 1, 1, 8}) {
    fill(c, id, slot, T, {chunk});
    T += chunk;
    const int64_t t = T - 1;
    for (int32_t layer = 0; layer < c.schema.num_layers(); ++layer) {
      const auto& l = c.schema.layer(layer);
      const auto h = c.mgr->acquire(layer);
      // The expected keys: stored entries of the one-shot compression of the history, and
      // the stored raw tokens of the window.
      std::vector<std::vector<float>> keys;
      const int64_t n_comp = l.has_classical ? (t + 1) / l.ratio : 0;
      if (l.has_classical) {
        const int W2 = l.overlap ? 2 * D : D;
        std::vector<float> kv, gate;
        for (int64_t p = 0; p < T; ++p) {
          const auto a = proj_row("dsv4.kv", id, p, layer, W2),
                     g = proj_row("dsv4.gate", id, p, layer, W2);
          kv.insert(kv.end(), a.begin(), a.end());
          gate.insert(gate.end(), g.begin(), g.end());
        }
        std::vector<float> out(T / l.ratio * D + 1);
        ref::dsv4_compress_oneshot(kv.data(), gate.data(), nullptr, static_cast<int32_t>(T),
                                   l.ratio, D, l.overlap, out.data());
        for (int64_t e = 0; e < n_comp; ++e) {
          keys.push_back(stored(h.read_classical_view().pool, out.data() + e * D));
          std::vector<float> got(D);
          ref::dsv4_load_compressed_entry(h.read_classical_view(), slot, e, got.data());
          ASSERT_EQ(0, std::memcmp(got.data(), keys.back().data(), 4 * D))
              << "layer " << layer << " entry " << e;
        }
      }
      // Ring order: row = position % W (a single request's in-order traffic, both ring modes).
      for (int row = 0; row < W; ++row)
        for (int64_t p = std::max<int64_t>(0, t - W + 1); p <= t; ++p)
          if (p % W == row)
            keys.push_back(stored(h.read_swa_view().ring, raw_token(id, p, layer, D).data()));
      const int H = 3;
      const auto qv =
          bf16_gaussian(static_cast<size_t>(H) * D, seed_for("dsv4.decode.q") + t, 0.2f);
      const auto q = to_bf16_bits(qv);
      std::vector<uint16_t> o(H * D), o_zero(H * D);
      std::vector<float> lse(H), lse_zero(H);
      const int32_t pos32 = static_cast<int32_t>(t);
      Dsv4DecodeArgs a;
      a.q = q.data();
      a.o = o.data();
      a.lse = lse.data();
      a.request_slots = &slot;
      a.positions = &pos32;
      a.num_seqs = 1;
      a.num_heads = H;
      a.sm_scale = 1.0f / std::sqrt(static_cast<float>(D));
      const Dsv4ClassicalView* cl = l.has_classical ? &h.read_classical_view() : nullptr;
      ref::dsv4_decode_attention(h.read_swa_view(), cl, a);
      for (int hh = 0; hh < H; ++hh) {
        std::vector<double> logit(keys.size());
        double m = -INFINITY;
        for (size_t j = 0; j < keys.size(); ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += static_cast<double>(qv[hh * D + d]) * keys[j][d];
          logit[j] = dot * a.sm_scale;
          m = std::max(m, logit[j]);
        }
        double sum = 0;
        std::vector<double> acc(D, 0.0);
        for (size_t j = 0; j < keys.size(); ++j) {
          const double w = std::exp(logit[j] - m);
          sum += w;
          for (int d = 0; d < D; ++d) acc[d] += w * keys[j][d];
        }
        // Same keys, same order, same double arithmetic, one BF16 rounding: identical codes.
        for (int d = 0; d < D; ++d)
          ASSERT_EQ(o[hh * D + d], ref::round_to_16bit_code(acc[d] / sum, DType::kBF16))
              << "layer " << layer << " t " << t << " head " << hh << " dim " << d;
        EXPECT_EQ(lse[hh], static_cast<float>(m + std::log(sum)))
            << "layer " << layer << " t " << t;
      }
      // q = 0: every logit is 0, lse = log(number of visible keys): counts them.
      const std::vector<uint16_t> qz(H * D, 0);
      a.q = qz.data();
      a.o = o_zero.data();
      a.lse = lse_zero.data();
      ref::dsv4_decode_attention(h.read_swa_view(), cl, a);
      const int64_t n_win = std::min<int64_t>(W, t + 1);
      EXPECT_EQ(lse_zero[0], static_cast<float>(std::log(static_cast<double>(n_comp + n_win))))
          << "layer " << layer << " t " << t << ": expected " << n_comp << " compressed + " << n_win
          << " window keys";
    }
  }
}

TEST_P(Dsv4Decode, BadInputIsAClearError) {
  auto c = make_host_cache("test_tiny.ini", GetParam(), 16, 2, 128);
  const int32_t slot = c.mgr->admit_request(1);
  fill(c, 1, slot, 0, {16, 4});
  const auto h = c.mgr->acquire(1);  // CSA
  const int D = c.schema.layer(1).head_dim;
  std::vector<uint16_t> q(D, 0), o(D);
  int32_t s = slot, t = 19;
  Dsv4DecodeArgs a;
  a.q = q.data();
  a.o = o.data();
  a.request_slots = &s;
  a.positions = &t;
  a.num_seqs = 1;
  a.num_heads = 1;
  a.sm_scale = 1.0f;
  ref::dsv4_decode_attention(h.read_swa_view(), &h.read_classical_view(), a);
  s = 2;
  EXPECT_THROW(ref::dsv4_decode_attention(h.read_swa_view(), &h.read_classical_view(), a),
               InvalidArgument);
  s = slot;
  t = -1;
  EXPECT_THROW(ref::dsv4_decode_attention(h.read_swa_view(), &h.read_classical_view(), a),
               InvalidArgument);
  t = 40;  // entries 8.. live in a block the request never allocated
  try {
    ref::dsv4_decode_attention(h.read_swa_view(), &h.read_classical_view(), a);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("maps to block -1"), std::string::npos) << e.what();
  }
  // Storing an entry into an unallocated block is refused before anything is written.
  std::vector<float> entry(D, 1.0f);
  int32_t first = 8, offs[2] = {0, 1};
  Dsv4StoreArgs st{entry.data(), &s, &first, offs, 1, 1};
  EXPECT_THROW(ref::dsv4_store_entries(h.read_classical_view(), 2, st), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Variants, Dsv4Decode,
                         ::testing::Values(Dsv4Variant::per_token_scales(),
                                           Dsv4Variant::public_v4()),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace kvlab::test::dsv4
