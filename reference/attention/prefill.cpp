// prefill.cpp: reference contiguous (prefill) attention, full or causal, MHA/GQA/MQA.
//
// Per KV head: K_h, V_h [num_kv, head_dim] in float64; per query head of its group and per
// chunk of up to kRowChunk query rows: logits [rows, num_kv] = sm_scale * Q K^T (Eigen),
// causal mask by column range, two-pass softmax per row. See attention.h for the contract.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "reference/attention/attention.h"
#include "reference/attention/parallel.h"
#include "reference/core/error.h"

namespace kvlab::ref {
namespace {

using MatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
constexpr int kRowChunk = 256;  // bounds the logits matrix at kRowChunk x num_kv doubles

}  // namespace

namespace {
void validate_prefill(const PrefillArgs& a, bool check_outputs) {
  const char* w = "prefill_attention: ";
  KVLAB_REQUIRE(a.num_q >= 0 && a.num_kv >= 0,
                w << "num_q and num_kv must be >= 0, got " << a.num_q << " and " << a.num_kv);
  KVLAB_REQUIRE(a.num_kv_heads > 0 && a.num_qo_heads > 0 && a.num_qo_heads % a.num_kv_heads == 0,
                w << "num_qo_heads " << a.num_qo_heads
                  << " must be a positive multiple of num_kv_heads " << a.num_kv_heads << " (> 0)");
  KVLAB_REQUIRE(a.head_dim > 0, w << "head_dim must be > 0, got " << a.head_dim);
  KVLAB_REQUIRE(
      std::isfinite(a.sm_scale) && a.sm_scale > 0,
      w << "sm_scale must be finite and > 0 (typically 1/sqrt(head_dim)), got " << a.sm_scale);
  if (a.num_q > 0)
    KVLAB_REQUIRE(a.q != nullptr && (a.o != nullptr || !check_outputs),
                  w << "null q or o (q=" << a.q << ", o=" << a.o << ") for num_q=" << a.num_q);
  if (a.num_kv > 0)
    KVLAB_REQUIRE(a.k != nullptr && a.v != nullptr,
                  w << "null k or v (k=" << a.k << ", v=" << a.v << ") for num_kv=" << a.num_kv);
}

}  // namespace

void validate_prefill_args(const PrefillArgs& a) {
  validate_prefill(a, true);
}

void prefill_attention_exact(const PrefillArgs& a, double* o, double* lse) {
  validate_prefill(a, false);
  if (a.num_q == 0) return;
  KVLAB_REQUIRE(o != nullptr, "prefill_attention_exact: null o");
  const int Hq = a.num_qo_heads, Hk = a.num_kv_heads, D = a.head_dim, G = Hq / Hk;
  const int64_t nq = a.num_q, nk = a.num_kv;
  const int64_t chunks = (nq + kRowChunk - 1) / kRowChunk;
  const int64_t items = static_cast<int64_t>(Hq) * chunks;
  const double inf = std::numeric_limits<double>::infinity();

  parallel_for(items, nq * nk * D * Hq, [&](int64_t item) {
    const int hq = static_cast<int>(item / chunks);
    const int64_t r0 = (item % chunks) * kRowChunk;
    const int64_t rows = std::min<int64_t>(kRowChunk, nq - r0);
    const int hk = hq / G;
    MatrixD K(nk, D), V(nk, D), Q(rows, D);
    for (int64_t j = 0; j < nk; ++j)
      for (int d = 0; d < D; ++d) {
        K(j, d) = a.k[(j * Hk + hk) * D + d];
        V(j, d) = a.v[(j * Hk + hk) * D + d];
      }
    for (int64_t i = 0; i < rows; ++i)
      for (int d = 0; d < D; ++d) Q(i, d) = a.q[((r0 + i) * Hq + hq) * D + d];
    const MatrixD Z = (Q * K.transpose()) * static_cast<double>(a.sm_scale);  // [rows, nk]
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t qi = r0 + i;
      // Keys visible to this row: [0, visible).
      const int64_t visible = a.causal ? std::clamp<int64_t>(nk - nq + qi + 1, 0, nk) : nk;
      double* orow = o + (qi * Hq + hq) * D;
      if (visible == 0) {
        std::fill(orow, orow + D, 0.0);
        if (lse) lse[qi * Hq + hq] = -inf;
        continue;
      }
      double m = -inf;
      for (int64_t j = 0; j < visible; ++j) {
        const double z = Z(i, j);
        if (std::isnan(z) || std::isnan(m))
          m = std::numeric_limits<double>::quiet_NaN();
        else
          m = std::max(m, z);
      }
      Eigen::VectorXd p(visible);
      for (int64_t j = 0; j < visible; ++j) p(j) = std::exp(Z(i, j) - m);
      const double l = p.sum();
      const Eigen::VectorXd out = (V.topRows(visible).transpose() * p) / l;
      for (int d = 0; d < D; ++d) orow[d] = out(d);
      if (lse) lse[qi * Hq + hq] = m + std::log(l);
    }
  });
}

void prefill_attention(const PrefillArgs& a) {
  validate_prefill_args(a);
  if (a.num_q == 0) return;
  const int64_t rows = static_cast<int64_t>(a.num_q) * a.num_qo_heads;
  std::vector<double> o(static_cast<size_t>(rows * a.head_dim)), lse(static_cast<size_t>(rows));
  prefill_attention_exact(a, o.data(), lse.data());
  for (size_t i = 0; i < o.size(); ++i) a.o[i] = static_cast<float>(o[i]);  // one RNE rounding
  if (a.lse)
    for (int64_t r = 0; r < rows; ++r) a.lse[r] = static_cast<float>(lse[r]);
}

}  // namespace kvlab::ref
