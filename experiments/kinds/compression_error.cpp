// compression_error.cpp: bench "compression_error": what the DSV4 CSA / HCA compressors
// (reference/dsv4/compressor.h) and the storage variants lose, on synthetic KV
// (reference/synth) with controllable statistics.
//
// Model of one layer (every piece is the reference's):
//   latent   X [tokens, D] (D = nope_dim + rope_dim = 512), one latent per token shared
//            by K and V (MQA, as in V4), from a reference/synth preset
//   lanes    the compressor's value projections are X itself (CSA: lane a = lane b = X,
//            width 2D; HCA: one lane), its gate projections seeded N(0, gate_std^2) scores
//            (gate_std = 0: plain mean pooling); ref::dsv4_compress_oneshot pools them into
//            floor(tokens / ratio) entries (CSA: overlapping windows of 2 * ratio tokens)
//   storage  entries and the raw window rows go through the variant's entry format
//            (dsv4_store_entry: FP8 + FP32 scale per entry, or fp8_ds_mla 64-tiles with
//            UE8M0 scales; RoPE dims BF16) and are read back (Dsv4EntryPages::load)
//   decode   `queries` queries of `heads` heads at position t = tokens - 1 see every entry
//            0 .. (t+1)/ratio - 1 plus the raw rows of the window (t - window, t]
//            (reference/README.md, "The DSV4 substrate"); attention by ref::prefill_attention_exact
//            (float64, non-causal over the given keys), sm_scale = 1/sqrt(D)
//   truth    the same queries over all `tokens` raw latents, unquantized
// Reported: attention error of the stored cache and of the FP32 (unquantized) compressed
// cache against the truth, so that compression loss and storage loss separate; the entry
// and window round-trip errors; for CSA the indexer keys (a second synthetic stream of
// indexer_dim dims through the same compressor, stored in the variant's FP4 key format):
// their round-trip error and the top-k recall of indexer scores q . k (quantized vs FP32
// keys, one indexer head, the rotation applied to q as well for the Hadamard format); and
// the layer's bytes per token at this context from the dsv4 schema (sim/dsv4/schema.h).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "experiments/kinds/dsv4_common.h"
#include "experiments/bench/table_trace.h"
#include "experiments/kinds/kinds.h"
#include "reference/attention/attention.h"
#include "reference/dsv4/compressor.h"
#include "reference/dsv4/entry_quant.h"
#include "reference/quant/roundtrip.h"
#include "reference/synth/synth.h"
#include "sim/dsv4/dsv4_model_stack.h"
#include "sim/dsv4/schema.h"

namespace kvlab::exp {
namespace {

// Entries [n, D] through one storage format and back.
std::vector<float> store_and_load(Dsv4EntryFormat f, int nope, int rope,
                                  const std::vector<float>& x, int64_t n) {
  Dsv4EntryPages p;
  p.format = f;
  p.nope_dim = nope;
  p.rope_dim = rope;
  p.rows = 1;
  p.num_pages = std::max<int64_t>(n, 1);
  std::vector<uint8_t> data;
  std::vector<uint16_t> rope_bits;
  std::vector<float> inv;
  if (f == Dsv4EntryFormat::kFp8PerToken) {
    data.resize(static_cast<size_t>(p.num_pages) * nope);
    rope_bits.resize(static_cast<size_t>(p.num_pages) * rope);
    inv.resize(static_cast<size_t>(p.num_pages));
    p.rope = rope_bits.data();
    p.inv_scale = inv.data();
  } else {
    data.resize(static_cast<size_t>(p.bytes()));
  }
  p.data = data.data();
  const int d = nope + rope;
  std::vector<float> y(static_cast<size_t>(n) * d);
  for (int64_t e = 0; e < n; ++e) {
    dsv4_store_entry(p, e, 0, x.data() + e * d);
    for (int j = 0; j < d; ++j) y[static_cast<size_t>(e * d + j)] = p.load(e, 0, j);
  }
  return y;
}

double rel_l2(const std::vector<double>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
}

// float64 attention of q [nq, heads, D] over keys = values = kv [nk, D] (one KV head).
std::vector<double> attend(const std::vector<float>& q, int nq, int heads,
                           const std::vector<float>& kv, int64_t nk, int d) {
  PrefillArgs a;
  a.q = q.data();
  a.k = kv.data();
  a.v = kv.data();
  a.num_q = nq;
  a.num_kv = static_cast<int32_t>(nk);
  a.num_qo_heads = heads;
  a.num_kv_heads = 1;
  a.head_dim = d;
  a.sm_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  a.causal = false;
  std::vector<double> o(static_cast<size_t>(nq) * heads * d);
  ref::prefill_attention_exact(a, o.data(), nullptr);
  return o;
}

std::vector<float> gaussian(size_t n, double std, uint64_t seed) {
  ref::SynthRng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(std * rng.gaussian());
  return v;
}

class CompressionErrorBench : public Bench {
 public:
  std::string name() const override { return "compression_error"; }
  std::string summary() const override {
    return "DSV4 CSA/HCA compression + storage variants on synthetic KV: decode attention error vs "
           "the "
           "uncompressed cache, entry/key round trips, indexer top-k recall, bytes per token";
  }
  std::vector<AxisSpec> axes() const override {
    std::vector<AxisSpec> a = {
        {"layer",
         AxisType::kEnum,
         "csa",
         {"csa", "hca"},
         "compressor: CSA (overlapping windows, indexer) or HCA"},
        AxisSpec{"ratio", AxisType::kInt, "4", {}, "tokens per compressed entry"}.range(2,
                                                                                         1 << 16),
    };
    for (auto& v : dsv4_variant_axes()) a.push_back(v);
    const std::vector<AxisSpec> rest = {
        {"dist", AxisType::kEnum, "ar1", ref::synth_preset_names(),
         "synthetic latent preset of reference/synth"},
        AxisSpec{"tokens", AxisType::kInt, "4096", {}, "context: tokens before the decode query"}
            .range(1, 1 << 22),
        AxisSpec{"window", AxisType::kInt, "128", {}, "raw SWA window the query also sees"}.range(
            1, 1 << 16),
        AxisSpec{"nope_dim", AxisType::kInt, "448", {},
                 "FP8-stored dims of an entry (multiple of 64)"}
            .range(0, 1 << 14),
        AxisSpec{"rope_dim", AxisType::kInt, "64", {}, "BF16-stored dims of an entry"}.range(
            0, 1 << 14),
        AxisSpec{"indexer_dim", AxisType::kInt, "128", {},
                 "CSA indexer key dims (multiple of 128 for the Hadamard format)"}
            .range(0, 1 << 14),
        AxisSpec{"gate_std", AxisType::kFloat, "1", {},
                 "std of the synthetic gate scores (0: mean pooling)"}
            .real_range(0, 1e6),
        AxisSpec{"heads", AxisType::kInt, "8", {}, "query heads"}.range(1, 1024),
        AxisSpec{"queries", AxisType::kInt, "4", {},
                 "decode queries (independent draws at the last position)"}
            .range(1, 1 << 16),
        AxisSpec{"topk", AxisType::kInt, "64", {}, "indexer top-k for the recall metric (CSA)"}
            .range(0, 1 << 24),
        AxisSpec{"seed", AxisType::kInt, "0", {}, "input seed (mixed with the run seed)"}.range(
            0, kMaxSeed),
    };
    a.insert(a.end(), rest.begin(), rest.end());
    return a;
  }
  std::vector<MetricSpec> metrics() const override {
    return {
        {"entries", "", "compressed entries the query sees"},
        {"attn_rel_l2", "",
         "stored compressed cache vs the uncompressed raw cache: ||o - o*|| / ||o*||"},
        {"attn_rel_l2_fp32", "", "the same with FP32 entries and window (compression loss only)"},
        {"attn_storage_rel_l2", "", "stored vs FP32 compressed cache (storage loss only)"},
        {"entry_rel_l2_mean", "", "per-entry relative L2 of the stored entries (mean)"},
        {"entry_rel_l2_p99", "", "per-entry relative L2 of the stored entries (99th percentile)"},
        {"window_rel_l2_mean", "", "per-token relative L2 of the stored raw window rows (mean)"},
        {"key_rel_l2_mean", "",
         "CSA: per-key relative L2 of the stored indexer keys (mean; NaN for HCA)"},
        {"topk_recall", "",
         "CSA: |top-k by stored keys and by FP32 keys| / k over the queries (NaN for HCA)"},
        {"layer_bytes_per_token", "B",
         "the layer's cache bytes per token at this context (dsv4 schema)"},
        {"raw_bf16_bytes_per_token", "B", "an uncompressed BF16 latent per token"}};
  }
  void check_point(const Point& p) const override {
    require_tensor_fits(p, {"tokens", "nope_dim"});
    require_tensor_fits(p, {"queries", "heads", "tokens"});
    schema(p);  // dims, variant and ratio as the dsv4 schema checks them
  }
  double estimate_seconds(const Point& p, const RunContext&) const override {
    const double d = static_cast<double>(p.integer("nope_dim") + p.integer("rope_dim"));
    const double work =
        static_cast<double>(p.integer("queries") * p.integer("heads")) * p.integer("tokens") * d;
    return 2e-3 + 2.5e-9 * work + 4e-8 * p.integer("tokens") * d;
  }
  Record run(const Point& p, RunContext& ctx) override {
    const bool csa = p.str("layer") == "csa";
    const int32_t ratio = static_cast<int32_t>(p.integer("ratio"));
    const int nope = static_cast<int>(p.integer("nope_dim")),
              rope = static_cast<int>(p.integer("rope_dim"));
    const int d = nope + rope;
    const int64_t tokens = p.integer("tokens");
    const int window = static_cast<int>(p.integer("window"));
    const int heads = static_cast<int>(p.integer("heads")),
              nq = static_cast<int>(p.integer("queries"));
    const Dsv4Variant var = dsv4_variant_of(p);
    const sim::Dsv4CacheSchema sc = schema(p);
    const uint64_t seed = point_seed(ctx, p);
    const int width = csa ? 2 * d : d;

    // Latents, lanes and gates.
    const std::vector<float> x =
        ref::synth_kv(ref::synth_preset(p.str("dist"), tokens, 1, d, seed));
    std::vector<float> kv(static_cast<size_t>(tokens) * width);
    for (int64_t t = 0; t < tokens; ++t)
      for (int lane = 0; lane < width / d; ++lane)
        std::copy(x.begin() + t * d, x.begin() + (t + 1) * d, kv.begin() + t * width + lane * d);
    const std::vector<float> gate = gaussian(kv.size(), p.number("gate_std"), seed ^ 0x9a7e5eedull);

    // Compression of the whole history (the query at t = tokens - 1 sees every entry).
    const int64_t n_entries = tokens / ratio;
    std::vector<float> entries(static_cast<size_t>(std::max<int64_t>(n_entries, 1)) * d);
    ref::dsv4_compress_oneshot(kv.data(), gate.data(), nullptr, static_cast<int32_t>(tokens), ratio,
                               d, csa, entries.data());
    entries.resize(static_cast<size_t>(n_entries) * d);
    const std::vector<float> stored = store_and_load(var.entry, nope, rope, entries, n_entries);
    // The raw window (t - window, t].
    const int64_t w0 = std::max<int64_t>(0, tokens - window), nw = tokens - w0;
    const std::vector<float> win(x.begin() + w0 * d, x.end());
    const std::vector<float> win_stored = store_and_load(var.entry, nope, rope, win, nw);

    // Decode attention: truth, FP32 compressed, stored compressed.
    const std::vector<float> q =
        gaussian(static_cast<size_t>(nq) * heads * d, 1.0, seed ^ 0x51e7ull);
    auto concat = [](const std::vector<float>& a, const std::vector<float>& b) {
      std::vector<float> c(a);
      c.insert(c.end(), b.begin(), b.end());
      return c;
    };
    const std::vector<double> o_true = attend(q, nq, heads, x, tokens, d);
    const std::vector<double> o_fp32 =
        attend(q, nq, heads, concat(entries, win), n_entries + nw, d);
    const std::vector<double> o_stored =
        attend(q, nq, heads, concat(stored, win_stored), n_entries + nw, d);

    Record r;
    r.metric("entries", static_cast<double>(n_entries));
    r.metric("attn_rel_l2", rel_l2(o_stored, o_true));
    r.metric("attn_rel_l2_fp32", rel_l2(o_fp32, o_true));
    r.metric("attn_storage_rel_l2", rel_l2(o_stored, o_fp32));
    if (n_entries > 0) {
      const ref::RoundTripStats es =
          ref::roundtrip_stats(entries.data(), stored.data(), n_entries, d);
      r.metric("entry_rel_l2_mean", es.rel_l2_mean);
      r.metric("entry_rel_l2_p99", es.rel_l2_p99);
    } else {
      r.metric("entry_rel_l2_mean", std::nan(""));
      r.metric("entry_rel_l2_p99", std::nan(""));
    }
    r.metric("window_rel_l2_mean",
             ref::roundtrip_stats(win.data(), win_stored.data(), nw, d).rel_l2_mean);

    double key_err = std::nan(""), recall = std::nan("");
    if (csa && n_entries > 0)
      indexer_errors(p, var, ratio, tokens, n_entries, seed, &key_err, &recall);
    r.metric("key_rel_l2_mean", key_err);
    r.metric("topk_recall", recall);
    r.metric("layer_bytes_per_token", sim::bytes_per_token(sc, tokens).per_token);
    r.metric("raw_bf16_bytes_per_token", 2.0 * d);
    r.label("variant_name", to_string(var));

    Trace t;
    t.name = "entry_rel_l2";
    t.doc = "relative L2 error of each stored compressed entry [entries]";
    t.array = h5::ColumnData::of(ref::per_row_rel_l2(entries.data(), stored.data(), n_entries, d));
    r.traces.push_back(std::move(t));
    return r;
  }

 private:
  // A one-layer stack of the point's kind, ratio, window and dims, in the point's variant.
  static sim::Dsv4CacheSchema schema(const Point& p) {
    sim::Dsv4ModelStack st;
    st.name = "compression_error";
    st.nope_dim = static_cast<int32_t>(p.integer("nope_dim"));
    st.rope_dim = static_cast<int32_t>(p.integer("rope_dim"));
    st.indexer_dim = static_cast<int32_t>(p.integer("indexer_dim"));
    st.window = static_cast<int32_t>(p.integer("window"));
    const bool csa = p.str("layer") == "csa";
    const int32_t ratio = static_cast<int32_t>(p.integer("ratio"));
    st.csa_ratio = csa ? ratio : 4;
    st.hca_ratio = csa ? 128 : ratio;
    st.layers = {csa ? sim::Dsv4LayerKind::kCSA : sim::Dsv4LayerKind::kHCA};
    sim::validate(st);
    sim::Dsv4CacheConfig c;
    c.variant = dsv4_variant_of(p);
    c.block_tokens = dsv4_default_block_tokens(st.csa_ratio, st.hca_ratio);
    return sim::build_dsv4_schema(st, c);
  }

  // Indexer keys: a second synthetic stream through the CSA compressor, stored in the FP4 key
  // format; round-trip error (in the stored basis) and the top-k recall of q . k.
  static void indexer_errors(const Point& p, const Dsv4Variant& var, int32_t ratio, int64_t tokens,
                             int64_t n, uint64_t seed, double* key_err, double* recall) {
    const int dim = static_cast<int>(p.integer("indexer_dim"));
    const std::vector<float> xi =
        ref::synth_kv(ref::synth_preset(p.str("dist"), tokens, 1, dim, seed ^ 0x1dec5ull));
    std::vector<float> kv(static_cast<size_t>(tokens) * 2 * dim);
    for (int64_t t = 0; t < tokens; ++t)
      for (int lane = 0; lane < 2; ++lane)
        std::copy(xi.begin() + t * dim, xi.begin() + (t + 1) * dim,
                  kv.begin() + t * 2 * dim + lane * dim);
    const std::vector<float> gate = gaussian(kv.size(), p.number("gate_std"), seed ^ 0x6a7e2ull);
    std::vector<float> keys(static_cast<size_t>(n) * dim);
    ref::dsv4_compress_oneshot(kv.data(), gate.data(), nullptr, static_cast<int32_t>(tokens), ratio,
                               dim, true, keys.data());
    Dsv4IndexerView v;
    v.format = var.indexer;
    v.dim = dim;
    v.rows = 1;
    v.num_blocks = n;
    v.ratio = ratio;
    std::vector<uint8_t> codes(static_cast<size_t>(n) * dim / 2),
        scales(static_cast<size_t>(n) * dim / v.group());
    v.codes = codes.data();
    v.scales = scales.data();
    const bool rotate = var.indexer == Dsv4IndexerFormat::kMxfp4Hadamard;
    std::vector<float> basis(keys),
        back(keys.size());  // FP32 keys in the stored basis, and the stored keys
    for (int64_t e = 0; e < n; ++e) {
      float* k = basis.data() + e * dim;
      std::vector<float> tmp(k, k + dim);
      dsv4_store_key(v, e, 0, tmp.data());  // rotates tmp in place for the Hadamard format
      if (rotate) std::copy(tmp.begin(), tmp.end(), k);
      for (int j = 0; j < dim; ++j) back[static_cast<size_t>(e * dim + j)] = v.load(e, 0, j);
    }
    *key_err = ref::roundtrip_stats(basis.data(), back.data(), n, dim).rel_l2_mean;
    const int64_t k = std::min<int64_t>(p.integer("topk"), n);
    if (k <= 0) return;
    const int nq = static_cast<int>(p.integer("queries"));
    std::vector<float> qs = gaussian(static_cast<size_t>(nq) * dim, 1.0, seed ^ 0x7095ull);
    double hits = 0;
    for (int qi = 0; qi < nq; ++qi) {
      float* qv = qs.data() + static_cast<size_t>(qi) * dim;
      if (rotate)
        for (int b = 0; b < dim; b += kDsv4HadamardSize) dsv4_hadamard(qv + b, kDsv4HadamardSize);
      std::vector<double> s_ref(static_cast<size_t>(n)), s_q(static_cast<size_t>(n));
      for (int64_t e = 0; e < n; ++e) {
        double a = 0, b = 0;
        for (int j = 0; j < dim; ++j) {
          a += static_cast<double>(qv[j]) * basis[static_cast<size_t>(e * dim + j)];
          b += static_cast<double>(qv[j]) * back[static_cast<size_t>(e * dim + j)];
        }
        s_ref[static_cast<size_t>(e)] = a;
        s_q[static_cast<size_t>(e)] = b;
      }
      auto top = [&](const std::vector<double>& s) {
        std::vector<int64_t> idx(static_cast<size_t>(n));
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) {
          return s[static_cast<size_t>(a)] > s[static_cast<size_t>(b)] ||
                 (s[static_cast<size_t>(a)] == s[static_cast<size_t>(b)] && a < b);
        });
        idx.resize(static_cast<size_t>(k));
        std::sort(idx.begin(), idx.end());
        return idx;
      };
      const auto a = top(s_ref), b = top(s_q);
      std::vector<int64_t> both;
      std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
      hits += static_cast<double>(both.size());
    }
    *recall = hits / (static_cast<double>(k) * nq);
  }
};

}  // namespace

std::unique_ptr<Bench> make_compression_error_bench() {
  return std::make_unique<CompressionErrorBench>();
}

}  // namespace kvlab::exp
