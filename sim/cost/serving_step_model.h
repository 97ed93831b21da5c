// serving_step_model.h: the step time of a real serving run, fitted to kvlab's own step
// measurements, and its out-of-sample fidelity.
//
// The roofline (roofline.h) bounds a step from below; a real step also pays cuBLAS's tile
// quantization, latency-bound small kernels, launch gaps and host work. This model predicts
// the step the GPU serving run executes (gpu/runtime: decode rows through the decode-attention
// registry, prefill chunks through the paged-prefill kernel, every linear layer through cuBLAS,
// decode-only steps replayed as a CUDA graph of the next batch bucket), as the sum of parts,
// each fitted to its own measurement in the `serving_step` sweep (synthetic steps through the
// same executor, timed part by part in the same state):
//
//   gemm(rows)          every layer's linear layers at the step's token rows: piecewise-linear
//                       interpolation of the measured times over rows (cuBLAS picks kernels by
//                       shape, so no closed form fits); flat below the smallest measured rows,
//                       proportional above the largest (compute-bound)
//   lm_head(lm_rows)    the LM head over the sampled rows, interpolated the same way
//   decode_attention    c0 + c1 * decode sequences + c2 * attended keys (the bytes it reads)
//   prefill_attention   c1 * prefill sequences + c2 * chunk tokens + c3 * causal (query, key)
//                       pairs (tensor-core work) + c4 * keys read
//   rest                everything else (norms, RoPE + append, SwiGLU, embedding, sampling,
//                       launch gaps, uploads, the host's share), fitted to the measured total
//                       minus the model's parts: CUDA graph r0 + r1 * bucket rows; eager
//                       r0 + r1 * rows + r2 * lm_rows + r3 * sequences
// In a CUDA-graph step, rows and lm_rows are the bucket's (padding rows run too).
// Linear coefficients: least squares on relative error (Eigen); a coefficient that comes out
// negative (unphysical) drops its term and the rest are refitted. Leave-one-out refits every
// part without the record, so the reported error never includes the record itself.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/cost/roofline.h"
#include "sim/engine/config.h"

namespace kvlab::sim {

// One measured synthetic step (the serving_step kind's point).
struct StepPartsRecord {
  std::string label;
  StepShape shape;
  bool graph = false;         // a decode-only step replayed as a CUDA graph
  int64_t rows = 0;           // token rows the step ran (graph: the bucket)
  int64_t lm_rows = 0;        // rows through the LM head (graph: the bucket)
  double total_s = 0;         // the whole step, host wall clock, as the serving run measures it
  double gemm_s = 0;          // every layer's linear layers at `rows`
  double lm_head_s = 0;       // the LM head at `lm_rows`
  double decode_attn_s = 0;   // every layer's decode attention (0 without decode sequences)
  double prefill_attn_s = 0;  // every layer's prefill attention (0 without prefill chunks)
};

struct ServingStepModelConfig {
  bool graph_decode = true;            // decode-only steps replay a CUDA graph per bucket
  std::vector<int32_t> graph_buckets;  // ascending batch sizes with a captured graph
};
// The smallest bucket >= rows; InvalidArgument when rows exceeds every bucket.
int64_t graph_bucket(const std::vector<int32_t>& buckets, int64_t rows);
// vLLM's capture sizes up to max_seqs: 1, 2, 4, then multiples of 8, and max_seqs itself.
std::vector<int32_t> default_graph_buckets(int32_t max_seqs);

// A piecewise-linear table (x ascending, distinct): flat below x[0], proportional to x above
// x.back(), linear in between.
struct InterpolationTable {
  std::vector<double> x, y;
  double at(double v) const;
  bool empty() const { return x.empty(); }
};

class ServingStepModel : public StepTimeModel {
 public:
  struct Parts {
    bool graph = false;
    int64_t rows = 0, lm_rows = 0;
    double gemm_s = 0, lm_head_s = 0, decode_attn_s = 0, prefill_attn_s = 0, rest_s = 0;
    double total() const { return gemm_s + lm_head_s + decode_attn_s + prefill_attn_s + rest_s; }
  };
  ServingStepModelConfig config;
  InterpolationTable gemm, lm_head;
  std::array<double, 3> decode{};   // [intercept, per sequence, per attended key]
  std::array<double, 4> prefill{};  // [per sequence, per token, per causal pair, per key read]
  std::array<double, 4> rest_graph{}, rest_eager{};  // [intercept, rows, lm_rows, sequences]
                                                     // (graph: lm_rows and sequences unused)

  // Whether the executor runs this step as a graph, and its rows / LM-head rows.
  bool is_graph(const StepShape& s) const;
  Parts parts(const StepShape& s) const;
  StepCost step_cost(const StepShape& s) const override;
  std::string describe() const;  // one line per part, coefficients in microseconds
};

struct ServingStepFit {
  ServingStepModel model;
  std::vector<double> predicted_s;      // per record: the model's total
  std::vector<double> predicted_loo_s;  // per record: the model refitted without it
  double median_abs_rel_error = 0, max_abs_rel_error = 0;
  double median_abs_rel_error_loo = 0, max_abs_rel_error_loo = 0;
  int64_t num_records = 0, num_graph = 0, num_eager = 0, num_prefill = 0, num_decode = 0;
};

// InvalidArgument when the records cannot determine the model: a record with a non-finite or
// non-positive total, negative parts, rows inconsistent with its shape and mode, or no
// record at all of a kind the model needs (graph-mode records when graph_decode is on, eager
// records, decode records, prefill records).
ServingStepFit fit_serving_step_model(const std::vector<StepPartsRecord>& records,
                                      const ServingStepModelConfig& config);

}  // namespace kvlab::sim
