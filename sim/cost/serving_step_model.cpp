// serving_step_model.cpp: see serving_step_model.h.
#include "sim/cost/serving_step_model.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "reference/core/error.h"
#include "sim/cost/calibration.h"

namespace kvlab::sim {

int64_t graph_bucket(const std::vector<int32_t>& buckets, int64_t rows) {
  for (int32_t b : buckets)
    if (b >= rows) return b;
  std::ostringstream os;
  os << "graph_bucket: " << rows << " rows exceed every bucket (largest "
     << (buckets.empty() ? 0 : buckets.back()) << ")";
  throw InvalidArgument(os.str());
}

std::vector<int32_t> default_graph_buckets(int32_t max_seqs) {
  KVLAB_REQUIRE(max_seqs >= 1, "default_graph_buckets: max_seqs " << max_seqs << " must be >= 1");
  std::vector<int32_t> v;
  for (int32_t b : {1, 2, 4})
    if (b < max_seqs) v.push_back(b);
  for (int32_t b = 8; b < max_seqs; b += 8) v.push_back(b);
  v.push_back(max_seqs);
  return v;
}

double InterpolationTable::at(double v) const {
  KVLAB_REQUIRE(!x.empty(), "InterpolationTable: empty table");
  if (v <= x.front()) return y.front();
  if (v >= x.back()) return y.back() * v / x.back();
  const auto it = std::upper_bound(x.begin(), x.end(), v);
  const size_t i = static_cast<size_t>(it - x.begin());
  const double f = (v - x[i - 1]) / (x[i] - x[i - 1]);
  return y[i - 1] + f * (y[i] - y[i - 1]);
}

namespace {

struct Features {
  double rows, lm_rows, seqs;
};

Features features(const StepShape& s, bool graph, const ServingStepModelConfig& cfg) {
  Features f;
  f.seqs = static_cast<double>(s.num_decode_seqs + s.num_prefill_seqs);
  if (graph) {
    f.rows = static_cast<double>(graph_bucket(cfg.graph_buckets, s.num_decode_seqs));
    f.lm_rows = f.rows;
  } else {
    f.rows = static_cast<double>(s.total_tokens());
    f.lm_rows = static_cast<double>(s.num_sampled);
  }
  return f;
}

std::array<double, 3> decode_features(const StepShape& s) {
  return {1.0, static_cast<double>(s.num_decode_seqs),
          static_cast<double>(s.decode_context_tokens)};
}
std::array<double, 4> prefill_features(const StepShape& s) {
  return {static_cast<double>(s.num_prefill_seqs), static_cast<double>(s.prefill_tokens),
          s.prefill_attn_pairs, static_cast<double>(s.prefill_context_tokens)};
}
std::array<double, 4> rest_features(const Features& f, bool graph) {
  // A graph step runs every row of its bucket alike (rows == lm_rows; padding rows too), so
  // its rest depends on the bucket alone: a per-sequence column would be collinear with rows
  // in calibration steps that fill their bucket, and split between the two at random.
  if (graph) return {1.0, f.rows, 0.0, 0.0};
  return {1.0, f.rows, f.lm_rows, f.seqs};
}

// Weighted least squares y ~ X c (rows weighted by w); with nonneg, a negative coefficient
// drops its column and the rest are refitted (repeated until none is negative). Rank-deficient
// systems get the minimum-norm solution.
template <size_t P>
std::array<double, P> fit_linear(const std::vector<std::array<double, P>>& X,
                                 const std::vector<double>& y, const std::vector<double>& w,
                                 bool nonneg) {
  std::array<bool, P> active;
  active.fill(true);
  std::array<double, P> c{};
  for (size_t round = 0; round <= P; ++round) {
    std::vector<size_t> cols;
    for (size_t j = 0; j < P; ++j)
      if (active[j]) cols.push_back(j);
    c.fill(0.0);
    if (cols.empty() || X.empty()) return c;
    Eigen::MatrixXd A(static_cast<Eigen::Index>(X.size()), static_cast<Eigen::Index>(cols.size()));
    Eigen::VectorXd b(static_cast<Eigen::Index>(X.size()));
    for (size_t i = 0; i < X.size(); ++i) {
      for (size_t k = 0; k < cols.size(); ++k)
        A(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(k)) = w[i] * X[i][cols[k]];
      b(static_cast<Eigen::Index>(i)) = w[i] * y[i];
    }
    const Eigen::VectorXd sol = A.completeOrthogonalDecomposition().solve(b);
    for (size_t k = 0; k < cols.size(); ++k) c[cols[k]] = sol(static_cast<Eigen::Index>(k));
    if (!nonneg) return c;
    size_t worst = P;
    for (size_t j : cols)
      if (c[j] < 0 && (worst == P || c[j] < c[worst])) worst = j;
    if (worst == P) return c;
    active[worst] = false;
  }
  return c;
}

InterpolationTable table_of(const std::vector<std::pair<double, double>>& pts) {
  std::map<double, std::vector<double>> by_x;
  for (const auto& [x, y] : pts) by_x[x].push_back(y);
  InterpolationTable t;
  for (auto& [x, ys] : by_x) {
    t.x.push_back(x);
    t.y.push_back(median(ys));
  }
  return t;
}

template <size_t P>
double dot(const std::array<double, P>& a, const std::array<double, P>& b) {
  double s = 0;
  for (size_t i = 0; i < P; ++i) s += a[i] * b[i];
  return s;
}

void validate_record(const StepPartsRecord& r, const ServingStepModelConfig& cfg) {
  const std::string w = "serving step record '" + r.label + "': ";
  const StepShape& s = r.shape;
  KVLAB_REQUIRE(std::isfinite(r.total_s) && r.total_s > 0,
                w << "total " << r.total_s << " s must be finite and > 0");
  for (double v : {r.gemm_s, r.lm_head_s, r.decode_attn_s, r.prefill_attn_s})
    KVLAB_REQUIRE(std::isfinite(v) && v >= 0, w << "a part time " << v << " s is negative or NaN");
  KVLAB_REQUIRE(s.total_tokens() > 0, w << "an empty step");
  KVLAB_REQUIRE((s.num_decode_seqs > 0) == (r.decode_attn_s > 0),
                w << "decode attention time " << r.decode_attn_s << " s for " << s.num_decode_seqs
                  << " decode sequences");
  KVLAB_REQUIRE((s.prefill_tokens > 0) == (r.prefill_attn_s > 0),
                w << "prefill attention time " << r.prefill_attn_s << " s for " << s.prefill_tokens
                  << " prefill tokens");
  if (r.graph) {
    KVLAB_REQUIRE(s.prefill_tokens == 0, w << "a CUDA-graph step with prefill tokens");
    const int64_t b = graph_bucket(cfg.graph_buckets, s.num_decode_seqs);
    KVLAB_REQUIRE(r.rows == b && r.lm_rows == b, w << "graph step of " << s.num_decode_seqs
                                                   << " sequences ran " << r.rows << "/"
                                                   << r.lm_rows << " rows, the bucket is " << b);
  } else {
    KVLAB_REQUIRE(r.rows == s.total_tokens() && r.lm_rows == s.num_sampled,
                  w << "eager step ran " << r.rows << "/" << r.lm_rows << " rows for "
                    << s.total_tokens() << " tokens, " << s.num_sampled << " sampled");
  }
}

ServingStepModel fit_model(const std::vector<const StepPartsRecord*>& recs,
                           const ServingStepModelConfig& cfg) {
  ServingStepModel m;
  m.config = cfg;
  std::vector<std::pair<double, double>> g, lm;
  std::vector<std::array<double, 3>> dx;
  std::vector<std::array<double, 4>> px;
  std::vector<double> dy, dw, py, pw;
  for (const StepPartsRecord* r : recs) {
    g.emplace_back(static_cast<double>(r->rows), r->gemm_s);
    if (r->lm_rows > 0) lm.emplace_back(static_cast<double>(r->lm_rows), r->lm_head_s);
    if (r->shape.num_decode_seqs > 0) {
      dx.push_back(decode_features(r->shape));
      dy.push_back(r->decode_attn_s);
      dw.push_back(1.0 / r->decode_attn_s);
    }
    if (r->shape.prefill_tokens > 0) {
      px.push_back(prefill_features(r->shape));
      py.push_back(r->prefill_attn_s);
      pw.push_back(1.0 / r->prefill_attn_s);
    }
  }
  m.gemm = table_of(g);
  m.lm_head = table_of(lm);
  m.decode = fit_linear<3>(dx, dy, dw, true);
  m.prefill = fit_linear<4>(px, py, pw, true);
  // The rest: measured total minus the model's own parts (so that rest absorbs what the
  // fitted parts miss, e.g. a table's interpolation), per launch mode.
  for (bool graph : {true, false}) {
    std::vector<std::array<double, 4>> rx;
    std::vector<double> ry, rw;
    for (const StepPartsRecord* r : recs) {
      if (r->graph != graph) continue;
      ServingStepModel::Parts p;
      const Features f = features(r->shape, graph, cfg);
      p.gemm_s = m.gemm.at(f.rows);
      p.lm_head_s = f.lm_rows > 0 && !m.lm_head.empty() ? m.lm_head.at(f.lm_rows) : 0.0;
      p.decode_attn_s = r->shape.num_decode_seqs > 0 ? dot(m.decode, decode_features(r->shape)) : 0;
      p.prefill_attn_s =
          r->shape.prefill_tokens > 0 ? dot(m.prefill, prefill_features(r->shape)) : 0;
      rx.push_back(rest_features(f, graph));
      ry.push_back(r->total_s - p.total());
      rw.push_back(1.0 / r->total_s);
    }
    (graph ? m.rest_graph : m.rest_eager) = fit_linear<4>(rx, ry, rw, false);
  }
  return m;
}

ServingStepModel::Parts parts_in(const ServingStepModel& m, const StepShape& s, bool graph) {
  ServingStepModel::Parts p;
  p.graph = graph;
  const Features f = features(s, graph, m.config);
  p.rows = static_cast<int64_t>(f.rows);
  p.lm_rows = static_cast<int64_t>(f.lm_rows);
  if (s.total_tokens() == 0) return p;
  p.gemm_s = m.gemm.at(f.rows);
  p.lm_head_s = f.lm_rows > 0 && !m.lm_head.empty() ? m.lm_head.at(f.lm_rows) : 0.0;
  p.decode_attn_s = s.num_decode_seqs > 0 ? dot(m.decode, decode_features(s)) : 0.0;
  p.prefill_attn_s = s.prefill_tokens > 0 ? dot(m.prefill, prefill_features(s)) : 0.0;
  p.rest_s = dot(graph ? m.rest_graph : m.rest_eager, rest_features(f, graph));
  return p;
}

}  // namespace

bool ServingStepModel::is_graph(const StepShape& s) const {
  return config.graph_decode && s.prefill_tokens == 0 && s.num_decode_seqs > 0;
}

ServingStepModel::Parts ServingStepModel::parts(const StepShape& s) const {
  return parts_in(*this, s, is_graph(s));
}

StepCost ServingStepModel::step_cost(const StepShape& s) const {
  const Parts p = parts(s);
  StepCost c;
  c.gemm_s = p.gemm_s + p.lm_head_s;
  c.attention_s = p.decode_attn_s + p.prefill_attn_s;
  c.other_s = p.rest_s;
  c.total_s = std::max(0.0, p.total());
  return c;
}

std::string ServingStepModel::describe() const {
  std::ostringstream os;
  os.precision(4);
  os << "gemm table " << gemm.x.size() << " rows (" << (gemm.x.empty() ? 0 : gemm.x.front()) << ".."
     << (gemm.x.empty() ? 0 : gemm.x.back()) << "); lm_head table " << lm_head.x.size()
     << " rows; decode attention " << decode[0] * 1e6 << " us + " << decode[1] * 1e6 << " us/seq + "
     << decode[2] * 1e9 << " ns/key; prefill attention " << prefill[0] * 1e6 << " us/seq + "
     << prefill[1] * 1e6 << " us/token + " << prefill[2] * 1e12 << " ps/pair + " << prefill[3] * 1e9
     << " ns/key; rest graph " << rest_graph[0] * 1e6 << " us + " << rest_graph[1] * 1e6
     << " us/row + " << rest_graph[3] * 1e6 << " us/seq; rest eager " << rest_eager[0] * 1e6
     << " us + " << rest_eager[1] * 1e6 << " us/row + " << rest_eager[2] * 1e6 << " us/sampled + "
     << rest_eager[3] * 1e6 << " us/seq";
  return os.str();
}

ServingStepFit fit_serving_step_model(const std::vector<StepPartsRecord>& records,
                                      const ServingStepModelConfig& config) {
  KVLAB_REQUIRE(!records.empty(), "fit_serving_step_model: no records");
  if (config.graph_decode)
    KVLAB_REQUIRE(!config.graph_buckets.empty() &&
                      std::is_sorted(config.graph_buckets.begin(), config.graph_buckets.end()),
                  "fit_serving_step_model: graph_decode needs ascending graph buckets");
  ServingStepFit fit;
  for (const StepPartsRecord& r : records) {
    validate_record(r, config);
    ++fit.num_records;
    (r.graph ? fit.num_graph : fit.num_eager) += 1;
    fit.num_prefill += r.shape.prefill_tokens > 0 ? 1 : 0;
    fit.num_decode += r.shape.num_decode_seqs > 0 ? 1 : 0;
  }
  KVLAB_REQUIRE(fit.num_eager > 0, "fit_serving_step_model: no eager-mode record (mixed steps)");
  KVLAB_REQUIRE(!config.graph_decode || fit.num_graph > 0,
                "fit_serving_step_model: graph_decode is on but no CUDA-graph record");
  KVLAB_REQUIRE(fit.num_prefill > 0, "fit_serving_step_model: no record with prefill tokens");
  KVLAB_REQUIRE(fit.num_decode > 0, "fit_serving_step_model: no record with decode sequences");
  std::vector<const StepPartsRecord*> all;
  for (const StepPartsRecord& r : records) all.push_back(&r);
  fit.model = fit_model(all, config);
  std::vector<double> err, err_loo;
  for (size_t i = 0; i < records.size(); ++i) {
    const StepPartsRecord& r = records[i];
    fit.predicted_s.push_back(parts_in(fit.model, r.shape, r.graph).total());
    std::vector<const StepPartsRecord*> others;
    for (size_t j = 0; j < records.size(); ++j)
      if (j != i) others.push_back(&records[j]);
    const ServingStepModel loo = fit_model(others, config);
    fit.predicted_loo_s.push_back(parts_in(loo, r.shape, r.graph).total());
    err.push_back(std::fabs(fit.predicted_s.back() - r.total_s) / r.total_s);
    err_loo.push_back(std::fabs(fit.predicted_loo_s.back() - r.total_s) / r.total_s);
  }
  fit.median_abs_rel_error = median(err);
  fit.max_abs_rel_error = *std::max_element(err.begin(), err.end());
  fit.median_abs_rel_error_loo = median(err_loo);
  fit.max_abs_rel_error_loo = *std::max_element(err_loo.begin(), err_loo.end());
  return fit;
}

}  // namespace kvlab::sim
