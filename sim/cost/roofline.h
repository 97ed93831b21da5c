// roofline.h: the roofline cost model (decode's memory-bound analysis, made executable).
//
// An operation moves `bytes` through HBM and performs `flops`; on a GPU with read ceiling
// BW and matrix rate P it takes at least
//     t = max(bytes / (BW * mem_efficiency), flops / (P * compute_efficiency))
// Its arithmetic intensity is flops / bytes; below the ridge point P / BW it is
// memory-bound. Decode attention reads the whole attended KV history once per step
// (intensity ~ the GQA group size, far below the ridge: memory-bound at any batch); a GEMM
// [M, K] x [K, N] has intensity ~ M for small M (memory-bound at batch 1, compute-bound at
// batch in the hundreds, e.g. nn.Linear(1024, 4096)).
//
// A serving step is the sum of its kernels: per layer QKV projection, RoPE, KV append,
// decode and prefill attention, O projection, gated MLP, elementwise (norms, residual,
// activation); per step embedding, LM head and sampling. Launch overhead: eager launches
// cost max(kernel, CPU launch time) per kernel (the CPU issues kernels one by one; a short
// kernel waits for its launch); a CUDA graph replays all kernels with a small per-node gap
// plus one graph launch. The overhead constants are assumptions until calibrated
// (calibration.h) from the driver's measured timings.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reference/core/dtype.h"
#include "reference/layout/kv_layout.h"
#include "sim/cost/gpu_spec.h"
#include "sim/model/model_stack.h"

namespace kvlab::sim {

enum class Bound : int32_t { kMemory = 0, kCompute = 1 };
enum class LaunchMode : int32_t { kEager = 0, kCudaGraph = 1 };
std::string to_string(Bound b);
std::string to_string(LaunchMode m);

// Roofline of one operation.
struct OpCost {
  std::string name;
  double flops = 0;
  double bytes = 0;
  double memory_s = 0;   // bytes / effective bandwidth
  double compute_s = 0;  // flops / effective rate
  double fixed_s = 0;    // calibrated per-call overhead (0 uncalibrated)
  double seconds = 0;    // fixed_s + max(memory_s, compute_s)
  double intensity() const { return bytes > 0 ? flops / bytes : 0; }
  Bound bound() const { return compute_s > memory_s ? Bound::kCompute : Bound::kMemory; }
};

struct CostModelConfig {
  bool prefer_measured_ceiling = true;  // use GpuSpec::measured_read_bytes_per_s when present
  LaunchMode launch = LaunchMode::kCudaGraph;
  // Launch constants (assumptions, seconds; replace by calibration):
  double eager_launch_s = 4.0e-6;  // CPU cost of one kernel launch through the CUDA runtime
  double graph_node_s = 1.0e-6;    // gap between consecutive kernels inside a graph replay
  double graph_launch_s = 4.0e-6;  // one cudaGraphLaunch per step
  // Efficiency factors (1 = the roofline ceiling; calibration sets them).
  double mem_efficiency = 1.0;
  double compute_efficiency = 1.0;
  // Decode attention gets its own calibration (the fidelity target is about it).
  double attn_fixed_s = 0.0;
  double attn_mem_efficiency = 1.0;
  // Compatible extensions fitted by fit_decode_attention_model (calibration.h); their
  // defaults leave the model above unchanged.
  //  - The per-call overhead of decode attention when it is replayed inside a CUDA graph
  //    (launch == kCudaGraph): on the H100 about 2.5 us less than a stream launch, whose
  //    CPU-side launch cost bounds back-to-back calls. Unset: attn_fixed_s in both modes.
  std::optional<double> attn_graph_fixed_s;
  //  - A factor per KV storage format on attn_mem_efficiency: a format whose decode is
  //    limited by dequantization rather than by HBM (NVFP4 on the H100 reaches ~46 % of
  //    the read ceiling where BF16 reaches ~95 %) gets its own achieved fraction.
  //    Formats not listed: factor 1.
  std::map<KvFormat, double> attn_format_efficiency;
  // The decode-attention overhead and bandwidth fraction these fields give.
  double attn_fixed(LaunchMode mode) const;
  double attn_efficiency(KvFormat format) const;  // attn_mem_efficiency * the format's factor
  DType act_dtype = DType::kBF16;                 // activations, Q and O
  void validate() const;
};

// The shape of one decode-attention call (the fidelity table's unit). Either seq_lens (one
// per sequence) or a uniform `context` for all `batch` sequences.
struct DecodeAttentionShape {
  int64_t batch = 0;
  int64_t context = 0;            // used when seq_lens is empty
  std::vector<int32_t> seq_lens;  // optional, size batch
  int32_t num_qo_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;
  KvFormat format = KvFormat::kBF16;
  DType q_dtype = DType::kBF16;
  bool write_lse = false;  // the kernel also writes float lse [batch, num_qo_heads]
  void validate() const;
  int64_t total_tokens() const;
  int64_t total_blocks() const;  // sum of ceil(len / block_size): block-table entries read
};

// Bytes a decode-attention call must move: Q + K and V of every attended token at storage
// precision + their scales (per-token FP32 or block scales) + block-table entries +
// seq_lens + O (+ lse). FLOPs: 4 * num_qo_heads * head_dim per attended token (QK^T and PV).
OpCost decode_attention_cost(const GpuSpec& gpu, const DecodeAttentionShape& shape,
                             const CostModelConfig& cfg);
// Seconds, the prediction for the fidelity table.
double predict_decode_attention_seconds(const GpuSpec& gpu, const DecodeAttentionShape& shape,
                                        const CostModelConfig& cfg);

// GEMM [m, k] x [k, n]: weights n*k at weight_bits, activations m*k in and m*n out at
// act_dtype. Rate: FP8 tensor cores for 8-bit weights when the GPU has them (W8A8), FP4
// likewise, else BF16 (weight-only quantization dequantizes to BF16).
OpCost gemm_cost(const GpuSpec& gpu, const std::string& name, int64_t m, int64_t n, int64_t k,
                 int weight_bits, const CostModelConfig& cfg);
// A purely memory-bound operation (elementwise, copies).
OpCost memory_op_cost(const GpuSpec& gpu, const std::string& name, double bytes,
                      const CostModelConfig& cfg);

// What the engine hands the cost model for one step.
struct StepShape {
  int64_t num_decode_seqs = 0;         // sequences computing exactly one token
  int64_t decode_context_tokens = 0;   // sum of their attended lengths (including the new token)
  int64_t num_prefill_seqs = 0;        // sequences computing a prompt chunk
  int64_t prefill_tokens = 0;          // tokens in those chunks
  double prefill_attn_pairs = 0;       // sum over chunks of causal (query, key) pairs
  int64_t prefill_context_tokens = 0;  // sum over chunks of keys read (previous + chunk)
  int64_t num_sampled = 0;             // sequences that sample a token this step (LM head rows)
  int64_t swap_bytes = 0;              // host <-> device KV traffic this step (both directions)
  int64_t total_tokens() const { return num_decode_seqs + prefill_tokens; }
};

struct StepCost {
  double total_s = 0;
  double gemm_s = 0;       // projections, MLP, LM head (kernel time)
  double attention_s = 0;  // decode + prefill attention (kernel time)
  double other_s = 0;      // KV append, elementwise, embedding, sampling (kernel time)
  double launch_s = 0;     // launch overhead beyond kernel time (eager) or graph gaps
  double swap_s = 0;       // swap traffic over the host link
  int32_t num_kernels = 0;
};

// The per-step model for one (GPU, model stack, KV format). Precomputes the shape-invariant
// parts so step() is O(number of kernel kinds): cheap enough for 200k steps/s.
class CostModel {
 public:
  CostModel(const GpuSpec& gpu, const ModelStack& model, KvFormat kv_format,
            CostModelConfig cfg = {});
  StepCost step(const StepShape& s) const;
  // The per-step kernels with their rooflines (for reports and the analysis tables).
  std::vector<OpCost> step_ops(const StepShape& s) const;
  const GpuSpec& gpu() const { return gpu_; }
  const ModelStack& model() const { return model_; }
  const CostModelConfig& config() const { return cfg_; }

 private:
  GpuSpec gpu_;
  ModelStack model_;
  KvFormat kv_format_;
  CostModelConfig cfg_;
  double kv_bytes_per_token_layer_;  // K+V data + scales of one token in one paged layer
  double compressed_read_fraction_;  // sum over paged layers of 1/ratio (kFull counts 1)
  int64_t swa_tokens_per_seq_;       // sum over SWA layers of their window (tokens read per seq)
};

}  // namespace kvlab::sim
