// decode_step_executor.h: the synthetic decoder's full decode step on the GPU (host-includable).
//
// One DecodeStepExecutor (the decode-step executor; sim::Engine is the serving simulation) holds a
// DecoderConfig's synthetic weights on the device (BF16, generated there from the seed:
// reference/step/step_math.h), a paged KV cache per layer in kvlab's layouts and formats, block
// tables taken from sim::BlockAllocator (the allocator the serving simulation uses: one allocator,
// two clocks), and every activation buffer sized for `max_batch` rows. A step is, per layer (the
// precision contract is in step_kernels.h):
//
//   [add+]RMSNorm -> QKV GEMM -> RoPE + KV append/quantize -> decode attention (registry)
//   -> O GEMM -> residual + RMSNorm -> gate/up GEMM -> SwiGLU -> down GEMM -> residual
//
// then final RMSNorm, LM head GEMM, greedy or top-k sampling. Variants (StepVariant):
//   eager_unfused  every op its own kernel: separate q/k/v and gate/up GEMMs, RoPE, Q cast,
//                  the registry's append kernel, SiLU, multiply, residual add, RMSNorm
//   eager_fused    QKV and gate/up GEMMs on concatenated weights, fused add+RMSNorm,
//                  RoPE+append+quantize and SwiGLU kernels
//   graph_fused    eager_fused captured once per batch-size bucket into a CUDA graph and
//                  replayed (padding rows up to the bucket: position -1, slot -1, length 0)
//   graph_unfused  eager_unfused, captured the same way (separates the two effects)
// All per-step bookkeeping (slot mapping, sequence lengths, positions, the sampled token fed
// back as the next input) happens on the device, so a graph replay needs no host input.
//
// Blocks are reserved at start(): ceil(max_context / block_size) per sequence, so a step
// never allocates; positions beyond max_context are refused before launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/runtime/step_shapes.h"
#include "reference/attention/args.h"
#include "reference/step/decoder_config.h"
#include "reference/step/decoder_weights.h"
#include "sim/serve/step_batch.h"

namespace kvlab::gpu {

enum class StepVariant : int32_t {
  kEagerUnfused = 0,
  kEagerFused = 1,
  kGraphFused = 2,
  kGraphUnfused = 3
};
const char* to_string(
    StepVariant v);  // "eager_unfused", "eager_fused", "graph_fused", "graph_unfused"
StepVariant parse_step_variant(const std::string& s);  // throws InvalidArgument listing the names
const std::vector<StepVariant>& all_step_variants();
inline bool is_fused(StepVariant v) {
  return v == StepVariant::kEagerFused || v == StepVariant::kGraphFused;
}
inline bool is_graph(StepVariant v) {
  return v == StepVariant::kGraphFused || v == StepVariant::kGraphUnfused;
}

// top_k == 0: greedy (argmax, lowest id on ties). top_k >= 1: sample among the k largest
// logits at `temperature`, draw = step::sampling_uniform(seed, row, position).
struct Sampling {
  int top_k = 0;
  float temperature = 1.0f;
  uint64_t seed = 0;
};

// ExecutorOptions: gpu/runtime/step_shapes.h (CUDA-free, with the shapes it implies).

class DecodeStepExecutor {
 public:
  // Validates (InvalidArgument), checks free device memory (Unsupported when the weights,
  // cache and buffers do not fit), allocates and generates the weights.
  DecodeStepExecutor(const DecoderConfig& cfg, const ExecutorOptions& opt);
  // The same with the given weights uploaded instead of generated (a real model's, read by
  // experiments/model/model_file.h; validate(weights, cfg) must hold). A tied LM head is
  // uploaded as a copy of the embedding.
  DecodeStepExecutor(const DecoderConfig& cfg, const ExecutorOptions& opt,
                     const DecoderWeights& weights);
  ~DecodeStepExecutor();
  DecodeStepExecutor(const DecodeStepExecutor&) = delete;
  DecodeStepExecutor& operator=(const DecodeStepExecutor&) = delete;

  // Device bytes the engine would allocate for (cfg, opt): weights, KV cache, buffers.
  static double device_bytes_needed(const DecoderConfig& cfg, const ExecutorOptions& opt);
  // New max_batch / max_context: frees and reallocates the cache, buffers and graphs (the
  // weights stay); sequences must be started again. Unsupported when it does not fit.
  void reconfigure(int max_batch, int max_context);

  // Starts `batch` sequences at position 0 with empty caches (releases earlier ones).
  void start(int batch);
  // Writes synthetic K/V (seeded random rows through the same RoPE+append kernel) for
  // positions [0, context) of every sequence and moves them to position `context`. For timing
  // at a given context without running `context` steps.
  void fill_synthetic_context(int context, uint64_t seed);
  // Moves every sequence back to `position` (<= its current one): the next step overwrites
  // the slot there. Timing loops rewind between repetitions.
  void rewind(int position);

  // One decode step on host-given input tokens ([batch], each in [0, vocab)).
  void step(const std::vector<int32_t>& tokens, StepVariant v, const Sampling& s);
  // One decode step whose input is the previous step's sampled tokens (no host traffic).
  void step(StepVariant v, const Sampling& s);
  // `steps` feedback steps between two CUDA events: milliseconds per step.
  double time_steps(StepVariant v, const Sampling& s, int steps);

  // GEMM alone, for the crossover: prepare_linear() writes random BF16 input rows for the
  // linear layer `which` (synchronizes); enqueue_linear() enqueues one y = x W^T of layer
  // `layer`'s weight at M rows on stream() (for a timing harness).
  void prepare_linear(Linear which, int m);
  void enqueue_linear(Linear which, int m, int layer);
  // Decode attention alone at the current state, for each supported registry version:
  // picks the fastest (ms per call over `reps` calls) and returns its id.
  int autotune_attention(int reps);

  // ---- Serving (pool_blocks > 0): one step scheduled by sim::Engine ----------------------
  // Executes `batch` (sim/serve/step_batch.h: decode rows first, then prefill chunks): its
  // rows, positions, slots, lengths and tables go up in one copy; the fused step runs every
  // row through the GEMMs, RoPE + append into the pool, decode attention (registry) over the
  // decode rows and paged prefill attention (prefill.h) over the chunks; the LM head and
  // greedy sampling run over the sampled rows; the sampled tokens come back into *sampled
  // (one per batch.sample_rows entry; synchronizes). With use_graph a decode-only batch
  // replays the CUDA graph of its bucket (padding rows: position -1, slot -1, length 0),
  // captured by warm_up_serving(). Returns the device milliseconds between the step's first
  // and last operation. InvalidArgument for a batch that does not fit the options.
  double serving_step(const sim::StepBatch& batch, bool use_graph, std::vector<int32_t>* sampled);
  // Captures the serving graph of every bucket (use_graph) and runs one eager mixed step, so a
  // measured run pays neither capture nor first-launch costs. Leaves the pool's contents
  // undefined (a run writes every slot before reading it).
  void warm_up_serving(bool use_graph);
  // The parts of the last serving_step's batch again, alone and in its state, `reps` times
  // each (median milliseconds over all layers): the calibration of sim's serving step model.
  struct ServingPartTimes {
    int rows = 0, lm_rows = 0;  // rows the GEMMs and the LM head ran (graph: the bucket)
    double gemm_ms = 0, lm_head_ms = 0, decode_attn_ms = 0, prefill_attn_ms = 0;
  };
  ServingPartTimes time_serving_parts(const sim::StepBatch& batch, bool use_graph, int reps);
  // Logits [sampled rows, vocab] of the last serving_step, in batch.sample_rows order.
  std::vector<float> serving_logits(const sim::StepBatch& batch) const;
  bool serving_graph_for(const sim::StepBatch& batch, bool use_graph) const {
    return use_graph && batch.decode_only() && batch.num_decode > 0;
  }

  void synchronize() const;
  std::vector<float> logits() const;            // [batch, vocab] of the last step
  std::vector<int32_t> sampled_tokens() const;  // [batch]
  const std::vector<int32_t>& positions() const { return positions_; }  // [batch], host mirror
  // Host copies of layer `layer`'s pools and scale arrays (tests compare them byte for byte).
  std::vector<uint8_t> k_pool(int layer) const;
  std::vector<uint8_t> v_pool(int layer) const;
  std::vector<uint8_t> k_scales(int layer) const;
  std::vector<uint8_t> v_scales(int layer) const;
  KvCacheView cache_view(int layer) const;  // device pointers
  const std::vector<int32_t>& block_table() const {
    return block_table_;
  }  // [max_batch, blocks_per_seq]
  int blocks_per_seq() const;

  int batch() const { return batch_; }
  int bucket_for(int batch) const;
  // The registry id attention runs (under `auto`: its pick for max_batch rows; other batch
  // sizes may run another version).
  int attn_version() const;
  bool attn_auto() const;         // attention picks per batch size (`auto`)
  void set_attn_version(int id);  // drops captured graphs
  void set_attn_auto();           // `auto` (the default); drops captured graphs
  int graphs_captured() const;
  const DecoderConfig& config() const { return cfg_; }
  const ExecutorOptions& options() const { return opt_; }
  cudaStream_t stream() const;
  double weight_bytes() const;
  double cache_bytes() const;

  struct Impl;  // device state (decode_step_executor.cu)

 private:
  void allocate_state();
  void init(const DecoderWeights* weights);
  void ensure_serving_buffers();
  void size_workspace();  // the attention workspace for every batch size; drops graphs
  DecoderConfig cfg_;
  ExecutorOptions opt_;
  int batch_ = 0;
  std::vector<int32_t> positions_;
  std::vector<int32_t> block_table_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvlab::gpu
