// decode_step.cpp: the CPU reference decode step (see decode_step.h).
#include "reference/step/decode_step.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include "reference/attention/attention.h"
#include "reference/attention/parallel.h"
#include "reference/core/error.h"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"
#include "reference/quant/append.h"

namespace kvlab::ref {

namespace {

using step::WeightTensor;
using MatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

float bf16_round(float x) {
  return bf16_bits_to_float(float_to_bf16_bits(x, Saturation::kSatFinite));
}

// The tensor's BF16 weights as floats, generated in fixed chunks spread over threads (each
// element is a pure function of its index: the result does not depend on the thread count).
void fill_tensor(const DecoderConfig& c, WeightTensor t, int layer, float* out, int64_t n) {
  const auto [scale, offset] = synthetic_init(t, c);
  const uint64_t stream = step::weight_stream(t, layer);
  constexpr int64_t kChunk = int64_t{1} << 20;
  parallel_for((n + kChunk - 1) / kChunk, n * 8, [&](int64_t chunk) {
    const int64_t end = std::min(n, (chunk + 1) * kChunk);
    for (int64_t i = chunk * kChunk; i < end; ++i)
      out[i] = bf16_bits_to_float(step::synthetic_weight_bf16(c.seed, stream, i, scale, offset));
  });
}

MatrixF tensor_matrix(const DecoderConfig& c, WeightTensor t, int layer, int64_t rows,
                      int64_t cols) {
  MatrixF m(rows, cols);
  fill_tensor(c, t, layer, m.data(), rows * cols);
  return m;
}

std::vector<float> tensor_vector(const DecoderConfig& c, WeightTensor t, int layer, int64_t n) {
  std::vector<float> v(n);
  fill_tensor(c, t, layer, v.data(), n);
  return v;
}

// y[M, N] = x[M, K] W[N, K]^T (W row-major), accumulated in float (Eigen) or double. The
// output features go in fixed blocks of kLinearBlock rows of W, spread over threads: the
// blocks, and so every rounding, do not depend on the thread count (the llama3-8b shape
// reads 32 GB of float weights per step: one thread would take seconds).
constexpr int64_t kLinearBlock = 256;
MatrixF linear(const MatrixF& x, const float* w, int64_t n, int64_t k, bool double_acc) {
  MatrixF y(x.rows(), n);
  const int64_t blocks = (n + kLinearBlock - 1) / kLinearBlock;
  parallel_for(blocks, x.rows() * n * k, [&](int64_t b) {
    const int64_t r0 = b * kLinearBlock, rn = std::min(kLinearBlock, n - r0);
    const Eigen::Map<const MatrixF> wb(w + r0 * k, rn, k);
    if (double_acc)
      y.middleCols(r0, rn) = (x.cast<double>() * wb.cast<double>().transpose()).cast<float>();
    else
      y.middleCols(r0, rn).noalias() = x * wb.transpose();
  });
  return y;
}
MatrixF linear(const MatrixF& x, const MatrixF& w, bool double_acc) {
  return linear(x, w.data(), w.rows(), w.cols(), double_acc);
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
  for (int64_t i = 0; i < n; ++i)
    out[i] = step::synthetic_weight_bf16(c.seed, stream, i, scale, offset);
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
    : cfg_(cfg),
      cache_(cache),
      max_batch_(max_batch),
      max_context_(max_context),
      double_acc_(double_accumulate) {
  validate(cfg);
  KVLAB_REQUIRE(max_batch >= 1, "DecoderRef: max_batch " << max_batch << " must be >= 1");
  KVLAB_REQUIRE(max_context >= 1, "DecoderRef: max_context " << max_context << " must be >= 1");
  KVLAB_REQUIRE(cache.block_size >= 1,
                "DecoderRef: block_size " << cache.block_size << " must be >= 1");
  bps_ = (max_context + cache.block_size - 1) / cache.block_size;
  geom_.layout = cache.layout;
  geom_.format = cache.format;
  geom_.num_blocks = static_cast<int64_t>(bps_) * max_batch;
  geom_.num_kv_heads = cfg.kv_heads;
  geom_.head_dim = cfg.head_dim;
  geom_.block_size = cache.block_size;
  kvlab::validate(geom_);

  rope_ = rope_table(cfg, max_context);
  embedding_ = tensor_vector(cfg, WeightTensor::kEmbedding, 0, int64_t{cfg.vocab} * cfg.hidden);
  for (int l = 0; l < cfg.layers; ++l) {
    Layer L;
    L.attn_norm = tensor_vector(cfg, WeightTensor::kAttnNorm, l, cfg.hidden);
    L.wqkv = tensor_matrix(cfg, WeightTensor::kWqkv, l, cfg.qkv_dim(), cfg.hidden);
    L.wo = tensor_matrix(cfg, WeightTensor::kWo, l, cfg.hidden, cfg.q_dim());
    L.mlp_norm = tensor_vector(cfg, WeightTensor::kMlpNorm, l, cfg.hidden);
    L.wgu = tensor_matrix(cfg, WeightTensor::kWGateUp, l, 2 * int64_t{cfg.ffn}, cfg.hidden);
    L.wdown = tensor_matrix(cfg, WeightTensor::kWDown, l, cfg.hidden, cfg.ffn);
    layers_.push_back(std::move(L));
  }
  final_norm_ = tensor_vector(cfg, WeightTensor::kFinalNorm, 0, cfg.hidden);
  lm_head_ = tensor_vector(cfg, WeightTensor::kLmHead, 0, int64_t{cfg.vocab} * cfg.hidden);
  k_pool_.assign(cfg.layers, std::vector<uint8_t>(geom_.bytes()));
  v_pool_.assign(cfg.layers, std::vector<uint8_t>(geom_.bytes()));
  k_scales_.assign(cfg.layers, std::vector<uint8_t>(geom_.scale_bytes()));
  v_scales_.assign(cfg.layers, std::vector<uint8_t>(geom_.scale_bytes()));
}

DecoderRef::~DecoderRef() = default;
DecoderRef::DecoderRef(DecoderRef&&) noexcept = default;

KvCacheView DecoderRef::cache_view(int layer) const {
  KVLAB_REQUIRE(layer >= 0 && layer < cfg_.layers,
                "layer " << layer << " outside [0, " << cfg_.layers << ")");
  KvCacheView v;
  v.geom = geom_;
  v.k = const_cast<uint8_t*>(k_pool_[layer].data());
  v.v = const_cast<uint8_t*>(v_pool_[layer].data());
  v.k_scales = geom_.scale_bytes() ? const_cast<uint8_t*>(k_scales_[layer].data()) : nullptr;
  v.v_scales = geom_.scale_bytes() ? const_cast<uint8_t*>(v_scales_[layer].data()) : nullptr;
  v.k_scale = cache_.k_scale;
  v.v_scale = cache_.v_scale;
  return v;
}

void DecoderRef::start(int batch, const std::vector<int32_t>& block_table) {
  KVLAB_REQUIRE(batch >= 1 && batch <= max_batch_,
                "DecoderRef::start: batch " << batch << " outside [1, " << max_batch_ << "]");
  KVLAB_REQUIRE(block_table.size() >= static_cast<size_t>(batch) * bps_,
                "DecoderRef::start: block table of " << block_table.size() << " entries, need "
                                                     << batch << " x " << bps_);
  std::vector<uint8_t> used(geom_.num_blocks, 0);
  for (int r = 0; r < batch; ++r)
    for (int j = 0; j < bps_; ++j) {
      const int32_t b = block_table[static_cast<size_t>(r) * bps_ + j];
      KVLAB_REQUIRE(b >= 0 && b < geom_.num_blocks, "DecoderRef::start: block_table["
                                                        << r << "][" << j << "] = " << b
                                                        << " outside [0, " << geom_.num_blocks
                                                        << ")");
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
  const DecoderConfig& c = cfg_;
  const int M = batch_, H = c.hidden, D = c.head_dim, half = D / 2, F = c.ffn;
  const int qd = c.q_dim(), kvd = c.kv_dim();

  // bookkeeping: slots and lengths after this token
  std::vector<int64_t> slots(M);
  std::vector<int32_t> seq_lens(M);
  for (int r = 0; r < M; ++r) {
    const int p = positions_[r];
    slots[r] =
        static_cast<int64_t>(block_table_[static_cast<size_t>(r) * bps_ + p / geom_.block_size]) *
            geom_.block_size +
        p % geom_.block_size;
    seq_lens[r] = p + 1;
  }

  MatrixF h(M, H);
  for (int r = 0; r < M; ++r)
    for (int i = 0; i < H; ++i) h(r, i) = embedding_[static_cast<size_t>(tokens[r]) * H + i];

  MatrixF xn = rmsnorm_bf16(h, layers_[0].attn_norm, c.rms_eps);
  std::vector<uint16_t> q_bits(static_cast<size_t>(M) * qd), o_bits(static_cast<size_t>(M) * qd);
  std::vector<float> kbuf(static_cast<size_t>(M) * kvd), vbuf(static_cast<size_t>(M) * kvd);
  for (int l = 0; l < c.layers; ++l) {
    const Layer& L = layers_[l];
    MatrixF qkv = linear(xn, L.wqkv, double_acc_);
    // RoPE on q and k heads (NeoX halves), through the shared helper and table
    for (int r = 0; r < M; ++r) {
      const float* cs = rope_.data() + static_cast<size_t>(positions_[r]) * half * 2;
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
    AppendArgs ap;
    ap.in_dtype = DType::kF32;
    ap.k = kbuf.data();
    ap.v = vbuf.data();
    ap.slot_mapping = slots.data();
    ap.num_tokens = M;
    ap.kv = cache_view(l);
    append_kv(ap);

    DecodeArgs da;
    da.q_dtype = DType::kBF16;
    da.q = q_bits.data();
    da.o = o_bits.data();
    da.kv = cache_view(l);
    da.block_table = block_table_.data();
    da.seq_lens = seq_lens.data();
    da.num_seqs = M;
    da.num_qo_heads = c.q_heads;
    da.max_blocks_per_seq = bps_;
    da.max_seq_len = max_context_;
    da.sm_scale = step_sm_scale(c);
    decode_attention(da);
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
  const MatrixF logits = linear(xn, lm_head_.data(), c.vocab, H, double_acc_);
  logits_.assign(logits.data(), logits.data() + static_cast<size_t>(M) * c.vocab);

  std::vector<int32_t> out(M);
  for (int r = 0; r < M; ++r) {
    const float* row = logits_.data() + static_cast<size_t>(r) * c.vocab;
    out[r] = top_k == 0 ? greedy_token(row, c.vocab)
                        : top_k_token(row, c.vocab, top_k, temperature, seed, r, positions_[r]);
    positions_[r] += 1;
  }
  return out;
}

}  // namespace kvlab::ref
