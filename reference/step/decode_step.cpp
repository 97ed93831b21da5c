// decode_step.cpp: the CPU reference decode step (see decode_step.h).
#include "reference/step/decode_step.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "reference/attention/attention.h"
#include "reference/attention/kv_access.h"
#include "reference/attention/parallel.h"
#include "reference/core/error.h"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"
#include "reference/quant/append.h"

namespace kvlab::ref {

namespace {

using step::WeightTensor;
using MatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

float bf16_round(float x) {
  return bf16_bits_to_float(float_to_bf16_bits(x, Saturation::kSatFinite));
}

// Elements per conversion / generation task: fixed chunks spread over threads (each element is
// a pure function of its index, so the result does not depend on the thread count; the
// llama3-8b shape holds 8 G weights: one thread would take tens of seconds).
constexpr int64_t kElementChunk = int64_t{1} << 20;

void bits_to_float(const uint16_t* bits, float* out, int64_t n) {
  parallel_for((n + kElementChunk - 1) / kElementChunk, n * 2, [&](int64_t chunk) {
    const int64_t end = std::min(n, (chunk + 1) * kElementChunk);
    for (int64_t i = chunk * kElementChunk; i < end; ++i) out[i] = bf16_bits_to_float(bits[i]);
  });
}

MatrixF bits_matrix(const std::vector<uint16_t>& bits, int64_t rows, int64_t cols) {
  MatrixF m(rows, cols);
  bits_to_float(bits.data(), m.data(), rows * cols);
  return m;
}

std::vector<float> bits_vector(const std::vector<uint16_t>& bits) {
  std::vector<float> v(bits.size());
  bits_to_float(bits.data(), v.data(), static_cast<int64_t>(bits.size()));
  return v;
}

// y[M, N] = x[M, K] W[N, K]^T (W row-major), accumulated in float or double. The output
// features go in fixed blocks of kLinearBlock rows of W, spread over threads: the blocks, and
// so every rounding, do not depend on the thread count, and a decode step's few rows still
// use every core (the llama3-8b shape reads 32 GB of float weights per step).
constexpr int64_t kLinearBlock = 256;
template <class W>
MatrixF linear(const MatrixF& x, const W& w, bool double_acc) {
  const int64_t n = w.rows();
  MatrixF y(x.rows(), n);
  const int64_t blocks = (n + kLinearBlock - 1) / kLinearBlock;
  parallel_for(blocks, x.rows() * n * w.cols(), [&](int64_t b) {
    const int64_t r0 = b * kLinearBlock, rn = std::min(kLinearBlock, n - r0);
    const auto wb = w.middleRows(r0, rn);
    if (double_acc) {
      const MatrixD yb = x.template cast<double>() * wb.template cast<double>().transpose();
      y.middleCols(r0, rn) = yb.template cast<float>();
    } else {
      y.middleCols(r0, rn).noalias() = x * wb.transpose();
    }
  });
  return y;
}

// RMSNorm of each row of h with gain g, rounded to BF16 (the GEMM input). The mean of squares
// is accumulated in double; the scaling follows the GPU's operation order.
MatrixF rmsnorm_bf16(const MatrixF& h, const std::vector<float>& g, float eps) {
  MatrixF out(h.rows(), h.cols());
  for (Eigen::Index r = 0; r < h.rows(); ++r) {
    double ss = 0;
    for (Eigen::Index i = 0; i < h.cols(); ++i) ss += static_cast<double>(h(r, i)) * h(r, i);
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(h.cols()) + eps));
    for (Eigen::Index i = 0; i < h.cols(); ++i) out(r, i) = bf16_round((h(r, i) * inv) * g[i]);
  }
  return out;
}

bool has_tensor_scale(const QuantScheme& s) {
  return s.spec().granularity == Granularity::kPerTensor || s.spec().two_level;
}

}  // namespace

struct DecoderRef::Layer {
  std::vector<float> attn_norm, mlp_norm;
  MatrixF wqkv, wo, wgu, wdown;
};

std::pair<float, float> synthetic_init(WeightTensor t, const DecoderConfig& c) {
  auto fan_in = [](int k) { return static_cast<float>(std::sqrt(3.0 / k)); };
  switch (t) {
    case WeightTensor::kEmbedding:
      return {1.0f, 0.0f};
    case WeightTensor::kAttnNorm:
    case WeightTensor::kMlpNorm:
    case WeightTensor::kFinalNorm:
      return {0.25f, 1.0f};
    case WeightTensor::kWqkv:
      return {fan_in(c.hidden), 0.0f};
    case WeightTensor::kWo:
      return {fan_in(c.q_dim()), 0.0f};
    case WeightTensor::kWGateUp:
      return {fan_in(c.hidden), 0.0f};
    case WeightTensor::kWDown:
      return {fan_in(c.ffn), 0.0f};
    case WeightTensor::kLmHead:
      return {fan_in(c.hidden), 0.0f};
  }
  throw InvalidArgument("synthetic_init: unknown tensor kind " +
                        std::to_string(static_cast<int>(t)));
}

std::vector<uint16_t> synthetic_tensor(const DecoderConfig& c, WeightTensor t, int layer,
                                       int64_t n) {
  KVLAB_REQUIRE(n >= 0, "synthetic_tensor: n " << n << " < 0");
  const auto [scale, offset] = synthetic_init(t, c);
  const uint64_t stream = step::weight_stream(t, layer);
  std::vector<uint16_t> out(n);
  parallel_for((n + kElementChunk - 1) / kElementChunk, n * 8, [&](int64_t chunk) {
    const int64_t end = std::min(n, (chunk + 1) * kElementChunk);
    for (int64_t i = chunk * kElementChunk; i < end; ++i)
      out[i] = step::synthetic_weight_bf16(c.seed, stream, i, scale, offset);
  });
  return out;
}

std::vector<float> rope_table(const DecoderConfig& c, int max_pos) {
  KVLAB_REQUIRE(max_pos >= 1, "rope_table: max_pos " << max_pos << " must be >= 1");
  KVLAB_REQUIRE(c.head_dim >= 2 && c.head_dim % 2 == 0,
                "rope_table: head_dim " << c.head_dim << " must be even");
  const int half = c.head_dim / 2;
  std::vector<float> t(static_cast<size_t>(max_pos) * half * 2);
  for (int p = 0; p < max_pos; ++p)
    for (int i = 0; i < half; ++i) {
      const double inv_freq = std::pow(static_cast<double>(c.rope_theta), -2.0 * i / c.head_dim);
      const double a = p * inv_freq;
      t[(static_cast<size_t>(p) * half + i) * 2] = static_cast<float>(std::cos(a));
      t[(static_cast<size_t>(p) * half + i) * 2 + 1] = static_cast<float>(std::sin(a));
    }
  return t;
}

float step_sm_scale(const DecoderConfig& c) {
  return 1.0f / std::sqrt(static_cast<float>(c.head_dim));
}

int32_t greedy_token(const float* logits, int vocab) {
  KVLAB_REQUIRE(vocab >= 1, "greedy_token: vocab " << vocab << " must be >= 1");
  uint64_t best = 0;
  for (int i = 0; i < vocab; ++i)
    best = std::max(best, step::token_order_key(logits[i], static_cast<uint32_t>(i)));
  return static_cast<int32_t>(step::token_of_key(best));
}

int32_t top_k_token(const float* logits, int vocab, int k, float temperature, uint64_t seed,
                    int32_t row, int32_t position) {
  KVLAB_REQUIRE(k >= 1 && k <= vocab,
                "top_k_token: k " << k << " outside [1, vocab " << vocab << "]");
  KVLAB_REQUIRE(std::isfinite(temperature) && temperature > 0.0f,
                "top_k_token: temperature " << temperature << " must be finite and > 0");
  std::vector<uint64_t> keys(vocab);
  for (int i = 0; i < vocab; ++i)
    keys[i] = step::token_order_key(logits[i], static_cast<uint32_t>(i));
  std::partial_sort(keys.begin(), keys.begin() + k, keys.end(), std::greater<uint64_t>());
  std::vector<float> vals(k);
  for (int i = 0; i < k; ++i) vals[i] = logits[step::token_of_key(keys[i])];
  const float u = step::sampling_uniform(seed, row, position < 0 ? 0 : position);
  const int pick = step::sample_sorted(vals.data(), k, 1.0f / temperature, u);
  return static_cast<int32_t>(step::token_of_key(keys[pick]));
}

DecoderRef::DecoderRef(const DecoderConfig& cfg, const StepCacheOptions& cache, int max_batch,
                       int max_context, bool double_accumulate)
    : DecoderRef(cfg, synthetic_weights(cfg), cache, max_batch, max_context, double_accumulate) {}

DecoderRef::DecoderRef(const DecoderConfig& cfg, const DecoderWeights& weights,
                       const StepCacheOptions& cache, int max_batch, int max_context,
                       bool double_accumulate)
    : cfg_(cfg),
      cache_(cache),
      max_batch_(max_batch),
      max_context_(max_context),
      double_acc_(double_accumulate) {
  validate(cfg);
  validate(weights, cfg);
  KVLAB_REQUIRE(max_batch >= 1, "DecoderRef: max_batch " << max_batch << " must be >= 1");
  KVLAB_REQUIRE(max_context >= 1, "DecoderRef: max_context " << max_context << " must be >= 1");
  KVLAB_REQUIRE(cache.block_size >= 1,
                "DecoderRef: block_size " << cache.block_size << " must be >= 1");
  KVLAB_REQUIRE(cache.layers.empty() || static_cast<int>(cache.layers.size()) == cfg.layers,
                "DecoderRef: " << cache.layers.size() << " per-layer KV specs for " << cfg.layers
                               << " layers (give none or one per layer)");
  bps_ = (max_context + cache.block_size - 1) / cache.block_size;
  for (int l = 0; l < cfg.layers; ++l) {
    LayerKvSpec s;
    if (cache.layers.empty()) {
      s.format = cache.format;
      s.k_scale = cache.k_scale;
      s.v_scale = cache.v_scale;
    } else {
      s = cache.layers[l];
    }
    KVLAB_REQUIRE((s.k_scheme == nullptr) == (s.v_scheme == nullptr),
                  "DecoderRef: layer " << l << " sets one of k_scheme / v_scheme (set both)");
    if (s.scheme_coded()) {
      for (const QuantScheme* q : {s.k_scheme.get(), s.v_scheme.get()}) {
        q->check_cols(cfg.head_dim);
        if (has_tensor_scale(*q))
          KVLAB_REQUIRE(std::isfinite(s.k_scale) && s.k_scale > 0 && std::isfinite(s.v_scale) &&
                            s.v_scale > 0,
                        "DecoderRef: layer " << l << " tensor scales " << s.k_scale << "/"
                                             << s.v_scale << " must be finite and > 0");
      }
      s.format = KvFormat::kBF16;  // the (unused) pages of a scheme-coded layer stay empty
    }
    PageGeometry g;
    g.layout = cache.layout;
    g.format = s.format;
    g.num_blocks = s.scheme_coded() ? 0 : static_cast<int64_t>(bps_) * max_batch;
    g.num_kv_heads = cfg.kv_heads;
    g.head_dim = cfg.head_dim;
    g.block_size = cache.block_size;
    if (!s.scheme_coded()) kvlab::validate(g);
    geom_.push_back(g);
    layer_kv_.push_back(std::move(s));
  }
  init(weights);
}

void DecoderRef::init(const DecoderWeights& w) {
  const DecoderConfig& cfg = cfg_;
  rope_ = rope_table(cfg, max_context_);
  embedding_ = bits_vector(w.embedding);
  for (int l = 0; l < cfg.layers; ++l) {
    const DecoderWeights::Layer& s = w.layers[l];
    Layer L;
    L.attn_norm = bits_vector(s.attn_norm);
    L.wqkv = bits_matrix(s.wqkv, cfg.qkv_dim(), cfg.hidden);
    L.wo = bits_matrix(s.wo, cfg.hidden, cfg.q_dim());
    L.mlp_norm = bits_vector(s.mlp_norm);
    L.wgu = bits_matrix(s.w_gate_up, 2 * int64_t{cfg.ffn}, cfg.hidden);
    L.wdown = bits_matrix(s.w_down, cfg.hidden, cfg.ffn);
    layers_.push_back(std::move(L));
  }
  final_norm_ = bits_vector(w.final_norm);
  if (!w.tied()) lm_head_ = bits_vector(w.lm_head);  // empty: the embedding serves
  const size_t dense = static_cast<size_t>(max_batch_) * max_context_ * cfg.kv_dim();
  for (int l = 0; l < cfg.layers; ++l) {
    const PageGeometry& g = geom_[l];
    k_pool_.emplace_back(g.bytes());
    v_pool_.emplace_back(g.bytes());
    k_scales_.emplace_back(g.scale_bytes());
    v_scales_.emplace_back(g.scale_bytes());
    k_dense_.emplace_back(dense);
    v_dense_.emplace_back(dense);
  }
}

DecoderRef::~DecoderRef() = default;
DecoderRef::DecoderRef(DecoderRef&&) noexcept = default;

KvCacheView DecoderRef::cache_view(int layer) const {
  KVLAB_REQUIRE(layer >= 0 && layer < cfg_.layers,
                "layer " << layer << " outside [0, " << cfg_.layers << ")");
  KVLAB_REQUIRE(!layer_kv_[layer].scheme_coded(),
                "cache_view: layer " << layer << " is scheme-coded (it has no pages)");
  const PageGeometry& g = geom_[layer];
  KvCacheView v;
  v.geom = g;
  v.k = const_cast<uint8_t*>(k_pool_[layer].data());
  v.v = const_cast<uint8_t*>(v_pool_[layer].data());
  v.k_scales = g.scale_bytes() ? const_cast<uint8_t*>(k_scales_[layer].data()) : nullptr;
  v.v_scales = g.scale_bytes() ? const_cast<uint8_t*>(v_scales_[layer].data()) : nullptr;
  v.k_scale = layer_kv_[layer].k_scale;
  v.v_scale = layer_kv_[layer].v_scale;
  return v;
}

void DecoderRef::start(int batch, const std::vector<int32_t>& block_table) {
  KVLAB_REQUIRE(batch >= 1 && batch <= max_batch_,
                "DecoderRef::start: batch " << batch << " outside [1, " << max_batch_ << "]");
  KVLAB_REQUIRE(block_table.size() >= static_cast<size_t>(batch) * bps_,
                "DecoderRef::start: block table of " << block_table.size() << " entries, need "
                                                     << batch << " x " << bps_);
  const int64_t num_blocks = static_cast<int64_t>(bps_) * max_batch_;
  std::vector<uint8_t> used(num_blocks, 0);
  for (int r = 0; r < batch; ++r)
    for (int j = 0; j < bps_; ++j) {
      const int32_t b = block_table[static_cast<size_t>(r) * bps_ + j];
      KVLAB_REQUIRE(b >= 0 && b < num_blocks, "DecoderRef::start: block_table["
                                                  << r << "][" << j << "] = " << b
                                                  << " outside [0, " << num_blocks << ")");
      KVLAB_REQUIRE(!used[b], "DecoderRef::start: block " << b << " is used twice");
      used[b] = 1;
    }
  block_table_.assign(block_table.begin(), block_table.begin() + static_cast<size_t>(batch) * bps_);
  batch_ = batch;
  positions_.assign(batch, 0);
  for (int l = 0; l < cfg_.layers; ++l) {
    std::fill(k_pool_[l].begin(), k_pool_[l].end(), 0);
    std::fill(v_pool_[l].begin(), v_pool_[l].end(), 0);
    std::fill(k_scales_[l].begin(), k_scales_[l].end(), 0);
    std::fill(v_scales_[l].begin(), v_scales_[l].end(), 0);
    std::fill(k_dense_[l].begin(), k_dense_[l].end(), 0.0f);
    std::fill(v_dense_[l].begin(), v_dense_[l].end(), 0.0f);
  }
}

void DecoderRef::store_kv(int l, int seq, int pos0, int rows, const float* k, const float* v) {
  const int D = cfg_.head_dim, Hk = cfg_.kv_heads, kvd = cfg_.kv_dim();
  float* kd = k_dense_[l].data() + (static_cast<size_t>(seq) * max_context_ + pos0) * kvd;
  float* vd = v_dense_[l].data() + (static_cast<size_t>(seq) * max_context_ + pos0) * kvd;
  const LayerKvSpec& s = layer_kv_[l];
  if (s.scheme_coded()) {
    // One (token, head) row of head_dim values is the unit every scheme scales.
    const int64_t n = static_cast<int64_t>(rows) * Hk;
    auto code = [&](const QuantScheme& q, const float* x, float scale, float* out) {
      const std::optional<float> t =
          has_tensor_scale(q) ? std::optional<float>(scale) : std::nullopt;
      const std::vector<float> y = q.dequantize(q.quantize(x, n, D, t));
      std::copy(y.begin(), y.end(), out);
    };
    code(*s.k_scheme, k, s.k_scale, kd);
    code(*s.v_scheme, v, s.v_scale, vd);
    return;
  }
  const int B = cache_.block_size;
  std::vector<int64_t> slots(rows);
  for (int i = 0; i < rows; ++i) {
    const int p = pos0 + i;
    slots[i] =
        static_cast<int64_t>(block_table_[static_cast<size_t>(seq) * bps_ + p / B]) * B + p % B;
  }
  AppendArgs ap;
  ap.in_dtype = DType::kF32;
  ap.k = k;
  ap.v = v;
  ap.slot_mapping = slots.data();
  ap.num_tokens = rows;
  ap.kv = cache_view(l);
  append_kv(ap);
  // The dense copy is what the pages now hold, read the way decode_attention reads them.
  for (int i = 0; i < rows; ++i) {
    const int64_t block = slots[i] / B;
    const int slot = static_cast<int>(slots[i] % B);
    for (int h = 0; h < Hk; ++h)
      for (int d = 0; d < D; ++d) {
        kd[static_cast<size_t>(i) * kvd + h * D + d] = load_k(ap.kv, block, h, slot, d);
        vd[static_cast<size_t>(i) * kvd + h * D + d] = load_v(ap.kv, block, h, slot, d);
      }
  }
}

std::vector<int32_t> DecoderRef::step(const std::vector<int32_t>& tokens, int top_k,
                                      float temperature, uint64_t seed) {
  KVLAB_REQUIRE(batch_ > 0, "DecoderRef::step: no sequences (call start)");
  KVLAB_REQUIRE(static_cast<int>(tokens.size()) == batch_,
                "DecoderRef::step: " << tokens.size() << " tokens for a batch of " << batch_);
  for (int r = 0; r < batch_; ++r) {
    KVLAB_REQUIRE(tokens[r] >= 0 && tokens[r] < cfg_.vocab,
                  "DecoderRef::step: token " << tokens[r] << " of row " << r << " outside [0, "
                                             << cfg_.vocab << ")");
    KVLAB_REQUIRE(positions_[r] < max_context_, "DecoderRef::step: sequence "
                                                    << r << " at position " << positions_[r]
                                                    << " = max_context");
  }
  KVLAB_REQUIRE(top_k >= 0 && top_k <= cfg_.vocab,
                "DecoderRef::step: top_k " << top_k << " outside [0, vocab]");
  std::vector<int32_t> seqs(batch_);
  std::iota(seqs.begin(), seqs.end(), 0);
  run_rows(tokens, seqs, positions_, true, {});
  const int M = batch_;
  std::vector<int32_t> out(M);
  for (int r = 0; r < M; ++r) {
    const float* row = logits_.data() + static_cast<size_t>(r) * cfg_.vocab;
    out[r] = top_k == 0 ? greedy_token(row, cfg_.vocab)
                        : top_k_token(row, cfg_.vocab, top_k, temperature, seed, r, positions_[r]);
    positions_[r] += 1;
  }
  return out;
}

void DecoderRef::forward_sequence(const std::vector<int32_t>& tokens, const KvObserver& observer) {
  KVLAB_REQUIRE(batch_ > 0, "DecoderRef::forward_sequence: no sequences (call start)");
  const int n = static_cast<int>(tokens.size());
  KVLAB_REQUIRE(n >= 1, "DecoderRef::forward_sequence: no tokens");
  KVLAB_REQUIRE(positions_[0] + static_cast<int64_t>(n) <= max_context_,
                "DecoderRef::forward_sequence: positions " << positions_[0] << " + " << n
                                                           << " tokens exceed max_context "
                                                           << max_context_);
  for (int i = 0; i < n; ++i)
    KVLAB_REQUIRE(tokens[i] >= 0 && tokens[i] < cfg_.vocab,
                  "DecoderRef::forward_sequence: token " << tokens[i] << " at " << i
                                                         << " outside [0, " << cfg_.vocab << ")");
  std::vector<int32_t> seqs(n, 0), pos(n);
  for (int i = 0; i < n; ++i) pos[i] = positions_[0] + i;
  run_rows(tokens, seqs, pos, false, observer);
  positions_[0] += n;
}

void DecoderRef::run_rows(const std::vector<int32_t>& tokens, const std::vector<int32_t>& seqs,
                          const std::vector<int32_t>& pos, bool paged_decode,
                          const KvObserver& observer) {
  const DecoderConfig& c = cfg_;
  const int M = static_cast<int>(tokens.size()), H = c.hidden, D = c.head_dim, half = D / 2,
            F = c.ffn;
  const int qd = c.q_dim(), kvd = c.kv_dim();

  MatrixF h(M, H);
  for (int r = 0; r < M; ++r)
    for (int i = 0; i < H; ++i) h(r, i) = embedding_[static_cast<size_t>(tokens[r]) * H + i];

  MatrixF xn = rmsnorm_bf16(h, layers_[0].attn_norm, c.rms_eps);
  std::vector<uint16_t> q_bits(static_cast<size_t>(M) * qd), o_bits(static_cast<size_t>(M) * qd);
  std::vector<float> kpre, kbuf(static_cast<size_t>(M) * kvd), vbuf(static_cast<size_t>(M) * kvd);
  for (int l = 0; l < c.layers; ++l) {
    const Layer& L = layers_[l];
    MatrixF qkv = linear(xn, L.wqkv, double_acc_);
    if (observer) {
      kpre.resize(static_cast<size_t>(M) * kvd);
      for (int r = 0; r < M; ++r)
        for (int i = 0; i < kvd; ++i) kpre[static_cast<size_t>(r) * kvd + i] = qkv(r, qd + i);
    }
    // RoPE on q and k heads (NeoX halves), through the shared helper and table
    for (int r = 0; r < M; ++r) {
      const float* cs = rope_.data() + static_cast<size_t>(pos[r]) * half * 2;
      for (int head = 0; head < c.q_heads + c.kv_heads; ++head) {
        float* x = qkv.row(r).data() + static_cast<size_t>(head) * D;
        for (int i = 0; i < half; ++i) {
          float y0, y1;
          step::rope_rotate(x[i], x[i + half], cs[2 * i], cs[2 * i + 1], &y0, &y1);
          x[i] = y0;
          x[i + half] = y1;
        }
      }
      for (int i = 0; i < qd; ++i)
        q_bits[static_cast<size_t>(r) * qd + i] =
            float_to_bf16_bits(qkv(r, i), Saturation::kSatFinite);
      for (int i = 0; i < kvd; ++i) {
        kbuf[static_cast<size_t>(r) * kvd + i] = qkv(r, qd + i);
        vbuf[static_cast<size_t>(r) * kvd + i] = qkv(r, qd + kvd + i);
      }
    }
    if (observer) observer(l, pos[0], M, kpre.data(), kbuf.data(), vbuf.data(), q_bits.data());
    // Append: a run of consecutive positions of one sequence is stored in one call.
    for (int r0 = 0; r0 < M;) {
      int r1 = r0 + 1;
      while (r1 < M && seqs[r1] == seqs[r0] && pos[r1] == pos[r1 - 1] + 1) ++r1;
      store_kv(l, seqs[r0], pos[r0], r1 - r0, kbuf.data() + static_cast<size_t>(r0) * kvd,
               vbuf.data() + static_cast<size_t>(r0) * kvd);
      r0 = r1;
    }

    if (paged_decode && !layer_kv_[l].scheme_coded()) {
      std::vector<int32_t> seq_lens(M), table(static_cast<size_t>(M) * bps_);
      for (int r = 0; r < M; ++r) {
        seq_lens[r] = pos[r] + 1;
        std::copy_n(block_table_.begin() + static_cast<size_t>(seqs[r]) * bps_, bps_,
                    table.begin() + static_cast<size_t>(r) * bps_);
      }
      DecodeArgs da;
      da.q_dtype = DType::kBF16;
      da.q = q_bits.data();
      da.o = o_bits.data();
      da.kv = cache_view(l);
      da.block_table = table.data();
      da.seq_lens = seq_lens.data();
      da.num_seqs = M;
      da.num_qo_heads = c.q_heads;
      da.max_blocks_per_seq = bps_;
      da.max_seq_len = max_context_;
      da.sm_scale = step_sm_scale(c);
      decode_attention(da);
    } else {
      // Causal attention of each run of rows over the dense K/V of its sequence.
      for (int r0 = 0; r0 < M;) {
        int r1 = r0 + 1;
        while (r1 < M && seqs[r1] == seqs[r0] && pos[r1] == pos[r1 - 1] + 1) ++r1;
        const int nq = r1 - r0, nk = pos[r1 - 1] + 1;
        std::vector<float> qf(static_cast<size_t>(nq) * qd);
        for (size_t i = 0; i < qf.size(); ++i)
          qf[i] = bf16_bits_to_float(q_bits[static_cast<size_t>(r0) * qd + i]);
        const size_t base = static_cast<size_t>(seqs[r0]) * max_context_ * kvd;
        PrefillArgs pa;
        pa.q = qf.data();
        pa.k = k_dense_[l].data() + base;
        pa.v = v_dense_[l].data() + base;
        pa.num_q = nq;
        pa.num_kv = nk;
        pa.num_qo_heads = c.q_heads;
        pa.num_kv_heads = c.kv_heads;
        pa.head_dim = D;
        pa.sm_scale = step_sm_scale(c);
        pa.causal = true;
        std::vector<double> o(static_cast<size_t>(nq) * qd);
        prefill_attention_exact(pa, o.data(), nullptr);
        for (size_t i = 0; i < o.size(); ++i)
          o_bits[static_cast<size_t>(r0) * qd + i] = round_to_16bit_code(o[i], DType::kBF16);
        r0 = r1;
      }
    }
    MatrixF o(M, qd);
    for (int64_t i = 0; i < int64_t{M} * qd; ++i) o.data()[i] = bf16_bits_to_float(o_bits[i]);

    h += linear(o, L.wo, double_acc_);
    xn = rmsnorm_bf16(h, L.mlp_norm, c.rms_eps);
    const MatrixF gu = linear(xn, L.wgu, double_acc_);
    MatrixF act(M, F);
    for (int r = 0; r < M; ++r)
      for (int i = 0; i < F; ++i) {
        const float g = gu(r, i);
        const float s = g / (1.0f + std::exp(-g));
        act(r, i) = bf16_round(s * gu(r, F + i));
      }
    h += linear(act, L.wdown, double_acc_);
    xn = rmsnorm_bf16(h, l + 1 < c.layers ? layers_[l + 1].attn_norm : final_norm_, c.rms_eps);
  }
  const std::vector<float>& lm = lm_head_.empty() ? embedding_ : lm_head_;
  const Eigen::Map<const MatrixF> wlm(lm.data(), c.vocab, H);
  const MatrixF logits = linear(xn, wlm, double_acc_);
  logits_.assign(logits.data(), logits.data() + static_cast<size_t>(M) * c.vocab);
}

}  // namespace kvlab::ref
