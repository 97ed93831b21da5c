// decode.cpp: reference decode attention over a paged KV cache (any KvFormat x KvLayout).
//
// Per (sequence, KV head): gather the dequantized K and V rows of the sequence through
// kv_access.h into dense float64 matrices [len, head_dim], then for the whole query-head
// group at once: logits = sm_scale * K Q [len, group], two-pass softmax per column,
// o = V^T p / l, lse = max + log(l). See attention.h for the contract.
#include <Eigen/Dense>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "reference/attention/attention.h"
#include "reference/attention/kv_access.h"
#include "reference/attention/parallel.h"
#include "reference/core/error.h"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"

namespace kvlab::ref {
namespace {

using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

double load_q(const DecodeArgs& a, int64_t idx) {
  const uint16_t c = static_cast<const uint16_t*>(a.q)[idx];
  return a.q_dtype == DType::kBF16 ? bf16_bits_to_float(c) : fp16_bits_to_float(c);
}

}  // namespace

float round_to_dtype(double x, DType dtype) {
  // Round-to-odd into float: truncate toward zero, then set the last bit if inexact. The
  // following RNE into bf16/fp16 (>= 2 fewer significant bits) is then correctly rounded.
  float f = static_cast<float>(x);
  if (std::isfinite(x) && static_cast<double>(f) != x) {
    if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    u |= 1u;
    std::memcpy(&f, &u, sizeof(u));
  }
  switch (dtype) {
    case DType::kF32:
      return static_cast<float>(x);  // one RNE rounding
    case DType::kBF16:
      return bf16_bits_to_float(float_to_bf16_bits(f, Saturation::kNonSaturating));
    case DType::kF16:
      return fp16_bits_to_float(float_to_fp16_bits(f, Saturation::kNonSaturating));
  }
  throw InvalidArgument("round_to_dtype: unknown dtype value " +
                        std::to_string(static_cast<int>(dtype)));
}

uint16_t round_to_16bit_code(double x, DType dtype) {
  KVLAB_REQUIRE(
      dtype == DType::kBF16 || dtype == DType::kF16,
      "round_to_16bit_code: dtype " << to_string(dtype) << " is not 16-bit (allowed: bf16, f16)");
  const float v = round_to_dtype(x, dtype);  // exactly representable: the conversion is exact
  return dtype == DType::kBF16 ? float_to_bf16_bits(v, Saturation::kNonSaturating)
                               : float_to_fp16_bits(v, Saturation::kNonSaturating);
}

namespace {
void validate_decode(const DecodeArgs& a, bool check_outputs) {
  const char* w = "decode_attention: ";
  KVLAB_REQUIRE(a.q_dtype == DType::kBF16 || a.q_dtype == DType::kF16,
                w << "q_dtype " << to_string(a.q_dtype) << " is not allowed (allowed: bf16, f16)");
  KVLAB_REQUIRE(a.num_seqs >= 0, w << "num_seqs must be >= 0, got " << a.num_seqs);
  const PageGeometry& g = a.kv.geom;
  validate(g);
  KVLAB_REQUIRE(a.kv.k != nullptr && a.kv.v != nullptr,
                w << "null K or V pool (k=" << a.kv.k << ", v=" << a.kv.v << ")");
  if (kv_format_has_token_scales(g.format) || kv_format_has_block_scales(g.format))
    KVLAB_REQUIRE(a.kv.k_scales != nullptr && a.kv.v_scales != nullptr,
                  w << "format " << to_string(g.format)
                    << " needs k_scales and v_scales, got k_scales=" << a.kv.k_scales
                    << ", v_scales=" << a.kv.v_scales);
  if (kv_format_has_pool_scale(g.format))
    KVLAB_REQUIRE(std::isfinite(a.kv.k_scale) && a.kv.k_scale > 0 && std::isfinite(a.kv.v_scale) &&
                      a.kv.v_scale > 0,
                  w << "format " << to_string(g.format)
                    << " needs finite positive pool scales, got k_scale=" << a.kv.k_scale
                    << ", v_scale=" << a.kv.v_scale);
  KVLAB_REQUIRE(a.num_qo_heads > 0 && a.num_qo_heads % g.num_kv_heads == 0,
                w << "num_qo_heads " << a.num_qo_heads
                  << " must be a positive multiple of num_kv_heads " << g.num_kv_heads);
  KVLAB_REQUIRE(a.max_blocks_per_seq >= 0,
                w << "max_blocks_per_seq must be >= 0, got " << a.max_blocks_per_seq);
  const int64_t table_tokens = static_cast<int64_t>(a.max_blocks_per_seq) * g.block_size;
  KVLAB_REQUIRE(a.max_seq_len >= 0 && a.max_seq_len <= table_tokens,
                w << "max_seq_len " << a.max_seq_len
                  << " must be in [0, max_blocks_per_seq * block_size = " << table_tokens << "]");
  KVLAB_REQUIRE(
      std::isfinite(a.sm_scale) && a.sm_scale > 0,
      w << "sm_scale must be finite and > 0 (typically 1/sqrt(head_dim)), got " << a.sm_scale);
  if (a.num_seqs == 0) return;
  KVLAB_REQUIRE(
      a.q != nullptr && (a.o != nullptr || !check_outputs),
      w << "null q or o (q=" << a.q << ", o=" << a.o << ") for " << a.num_seqs << " sequences");
  KVLAB_REQUIRE(a.block_table != nullptr && a.seq_lens != nullptr,
                w << "null block_table or seq_lens (block_table=" << a.block_table
                  << ", seq_lens=" << a.seq_lens << ")");
  const int64_t bound = a.seq_len_bound();
  for (int32_t s = 0; s < a.num_seqs; ++s) {
    const int32_t len = a.seq_lens[s];
    KVLAB_REQUIRE(len >= 0 && len <= bound,
                  w << "seq_lens[" << s << "] = " << len << " is outside [0, " << bound << "] ("
                    << (a.max_seq_len > 0 ? "max_seq_len" : "max_blocks_per_seq * block_size")
                    << ")");
    const int64_t pages = (static_cast<int64_t>(len) + g.block_size - 1) / g.block_size;
    for (int64_t p = 0; p < pages; ++p) {
      const int32_t b = a.block_table[static_cast<int64_t>(s) * a.max_blocks_per_seq + p];
      KVLAB_REQUIRE(b >= 0 && b < g.num_blocks, w << "block_table[" << s << "][" << p << "] = " << b
                                                  << " is outside [0, num_blocks = " << g.num_blocks
                                                  << ") (sequence " << s << " has " << len
                                                  << " tokens, " << pages << " pages)");
    }
  }
}

}  // namespace

void validate_decode_args(const DecodeArgs& a) {
  validate_decode(a, true);
}

void decode_attention_exact(const DecodeArgs& a, double* o, double* lse) {
  validate_decode(a, false);
  if (a.num_seqs == 0) return;
  KVLAB_REQUIRE(o != nullptr, "decode_attention_exact: null o");
  const PageGeometry& g = a.kv.geom;
  const int H = g.num_kv_heads, D = g.head_dim, G = a.num_qo_heads / H, B = g.block_size;
  const int64_t items = static_cast<int64_t>(a.num_seqs) * H;
  int64_t work = 0;
  // gather (H) plus logits and weighted sums (num_qo_heads) per token and dim
  for (int32_t s = 0; s < a.num_seqs; ++s)
    work += static_cast<int64_t>(a.seq_lens[s]) * (H + a.num_qo_heads) * D;

  parallel_for(items, work, [&](int64_t item) {
    const int32_t s = static_cast<int32_t>(item / H);
    const int h = static_cast<int>(item % H);
    const int len = a.seq_lens[s];
    const int64_t out_row0 = static_cast<int64_t>(s) * a.num_qo_heads + static_cast<int64_t>(h) * G;
    if (len == 0) {
      for (int gi = 0; gi < G; ++gi) {
        std::fill(o + (out_row0 + gi) * D, o + (out_row0 + gi + 1) * D, 0.0);
        if (lse) lse[out_row0 + gi] = -std::numeric_limits<double>::infinity();
      }
      return;
    }
    MatrixD K(len, D), V(len, D), Q(D, G);
    for (int t = 0; t < len; ++t) {
      const int64_t block =
          a.block_table[static_cast<int64_t>(s) * a.max_blocks_per_seq + page_of_token(t, B)];
      const int slot = slot_of_token(t, B);
      for (int d = 0; d < D; ++d) {
        K(t, d) = load_k(a.kv, block, h, slot, d);
        V(t, d) = load_v(a.kv, block, h, slot, d);
      }
    }
    for (int gi = 0; gi < G; ++gi)
      for (int d = 0; d < D; ++d) Q(d, gi) = load_q(a, (out_row0 + gi) * D + d);
    const MatrixD Z = (K * Q) * static_cast<double>(a.sm_scale);  // [len, G]
    for (int gi = 0; gi < G; ++gi) {
      // Two-pass softmax; max propagates NaN so a poisoned read cannot hide.
      double m = -std::numeric_limits<double>::infinity();
      for (int t = 0; t < len; ++t) {
        const double z = Z(t, gi);
        if (std::isnan(z) || std::isnan(m))
          m = std::numeric_limits<double>::quiet_NaN();
        else
          m = std::max(m, z);
      }
      Eigen::VectorXd p(len);
      for (int t = 0; t < len; ++t) p(t) = std::exp(Z(t, gi) - m);
      const double l = p.sum();
      const Eigen::VectorXd out = (V.transpose() * p) / l;  // [D]
      for (int d = 0; d < D; ++d) o[(out_row0 + gi) * D + d] = out(d);
      if (lse) lse[out_row0 + gi] = m + std::log(l);
    }
  });
}

void decode_attention(const DecodeArgs& a) {
  validate_decode_args(a);
  if (a.num_seqs == 0) return;
  const int64_t rows = static_cast<int64_t>(a.num_seqs) * a.num_qo_heads;
  const int64_t D = a.kv.geom.head_dim;
  std::vector<double> o(static_cast<size_t>(rows * D)), lse(static_cast<size_t>(rows));
  decode_attention_exact(a, o.data(), lse.data());
  uint16_t* out = static_cast<uint16_t*>(a.o);
  for (int64_t i = 0; i < rows * D; ++i) out[i] = round_to_16bit_code(o[i], a.q_dtype);
  if (a.lse)
    for (int64_t r = 0; r < rows; ++r) a.lse[r] = static_cast<float>(lse[r]);
}

}  // namespace kvlab::ref
