// decode_step.h: the CPU reference of the decoder's full decode step (Eigen).
//
// The same model, cache and precision contract as the GPU engine
// (gpu/runtime/decode_step_executor.h), written to be obviously right for small configs:
//   - weights: BF16 bits from a DecoderWeights (decoder_weights.h): the synthetic ones
//     (step_math.h's synthetic_weight_bf16 with synthetic_init's scale/offset per tensor) or a
//     real model's (experiments/model/model_file.h), held as float matrices;
//   - residual stream FP32; every GEMM input rounded to BF16 exactly where the GPU rounds
//     (RMSNorm output, Q, attention output, SwiGLU output); GEMMs accumulate in float
//     (Eigen) or, with `double_accumulate`, in double (a second rounding order, used to show
//     that the logit tolerance covers accumulation-order differences);
//   - RoPE from rope_table() (the GPU uploads the same table) through step::rope_rotate;
//   - KV append through kvlab::ref::append_kv and attention through
//     kvlab::ref::decode_attention over a paged cache of the requested format and layout,
//     placed by the caller's block table (the GPU engine's, so pools compare byte for byte);
//   - greedy / top-k sampling through step_math.h: bit-identical choices on equal logits.
//
// Logits of the GPU and this reference agree within tolerance(Op::kDecodeStepLogits, ...).
//
// forward_sequence() runs many tokens of sequence 0 at once (teacher forcing, prefill): the same
// per-layer code with every GEMM over all the rows, the K/V rows appended to the cache through
// the same store, and causal attention (kvlab::ref::prefill_attention_exact, bottom-right
// aligned) over the dense K/V the cache holds, read back through kv_access.h (load_k/load_v, the
// dequantization decode_attention uses). Mathematically it is `rows` decode steps; a test holds
// it to the step's logits within the same tolerance.
//
// Per-layer KV storage (StepCacheOptions::layers): a paged format per layer (e.g. BF16 layers
// kept unquantized), or scheme-coded K and V (reference/quant/schemes.h): each appended
// (token, head) row quantized by its scheme and kept dequantized, for what paged formats cannot
// express (K and V in different formats, any group size, scale rule or Hadamard rotation).
// For the schemes that equal a paged format (bf16, fp8_e4m3_per_tensor, fp8_e4m3_per_token,
// nvfp4 with the pool scale as tensor scale, mxfp4) both stores hold the same values bit for
// bit (tested).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <functional>
#include <memory>

#include "reference/attention/args.h"
#include "reference/quant/schemes.h"
#include "reference/step/decoder_config.h"
#include "reference/step/decoder_weights.h"
#include "reference/step/step_math.h"

namespace kvlab::ref {

// (scale, offset) of each synthetic tensor: RMSNorm gains 1 +- 0.25; a linear layer with
// fan-in K draws from U(-sqrt(3/K), sqrt(3/K)) (unit variance out for unit variance in);
// the embedding from U(-1, 1).
std::pair<float, float> synthetic_init(step::WeightTensor t, const DecoderConfig& c);

// The BF16 bits of a whole tensor (host generation; the GPU fills the same bits on device).
std::vector<uint16_t> synthetic_tensor(const DecoderConfig& c, step::WeightTensor t, int layer,
                                       int64_t n);

// RoPE table (NeoX halves, Llama's inv_freq_i = theta^(-2i/D)): float [max_pos, D/2, 2]
// holding (cos, sin) of pos * inv_freq_i, computed in double and rounded once to float.
std::vector<float> rope_table(const DecoderConfig& c, int max_pos);

// 1/sqrt(head_dim) in float: the attention's sm_scale on both sides.
float step_sm_scale(const DecoderConfig& c);

// Sampling (mirrors gpu/step/sampling.h). Rows of `vocab` logits.
int32_t greedy_token(const float* logits, int vocab);
int32_t top_k_token(const float* logits, int vocab, int k, float temperature, uint64_t seed,
                    int32_t row, int32_t position);

// How one layer stores its K and V.
struct LayerKvSpec {
  KvFormat format = KvFormat::kBF16;  // the paged cache's format (when no schemes are set)
  float k_scale = 1.0f;               // pool scale of FP8/NVFP4 pages, or a scheme's tensor scale
  float v_scale = 1.0f;
  // Scheme-coded storage (both set, or neither): every appended (token, head) row of K (V) is
  // quantized with k_scheme (v_scheme) and kept dequantized (float). Per-tensor and two-level
  // schemes take k_scale / v_scale as their tensor scale (a fixed, calibrated scale: a cache
  // cannot see future tokens).
  std::shared_ptr<const QuantScheme> k_scheme, v_scheme;
  bool scheme_coded() const { return k_scheme != nullptr; }
};

struct StepCacheOptions {
  KvFormat format = KvFormat::kBF16;
  KvLayout layout = KvLayout::kNHD;
  int block_size = 16;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  // Per layer (empty: {format, k_scale, v_scale} for every layer; else one entry per layer).
  std::vector<LayerKvSpec> layers;
};

// What forward_sequence() shows an observer, per layer: the float K before and after RoPE
// and V, of `rows` consecutive positions from `pos0`, each [rows, kv_heads * head_dim], before
// the cache stores (and quantizes) them, and the BF16 bits of the queries attention uses
// (post-RoPE) [rows, q_heads * head_dim].
using KvObserver =
    std::function<void(int layer, int pos0, int rows, const float* k_pre_rope,
                       const float* k_post_rope, const float* v, const uint16_t* q_bf16)>;

class DecoderRef {
 public:
  // max_context tokens per sequence, blocks_per_seq = ceil(max_context / block_size); the
  // pools hold max_batch * blocks_per_seq blocks, as the GPU engine's do.
  DecoderRef(const DecoderConfig& cfg, const StepCacheOptions& cache, int max_batch,
             int max_context, bool double_accumulate = false);
  // The same with the given weights (validate(weights, cfg) must hold).
  DecoderRef(const DecoderConfig& cfg, const DecoderWeights& weights, const StepCacheOptions& cache,
             int max_batch, int max_context, bool double_accumulate = false);

  // Starts `batch` sequences at position 0. block_table: int32 [max_batch or batch,
  // blocks_per_seq] (row r = sequence r); every entry a sequence uses must be a valid,
  // distinct block. Pools are reset to zero, scales too.
  void start(int batch, const std::vector<int32_t>& block_table);

  // One decode step of every sequence on `tokens` [batch]; returns the sampled tokens.
  // top_k == 0: greedy.
  std::vector<int32_t> step(const std::vector<int32_t>& tokens, int top_k = 0,
                            float temperature = 1.0f, uint64_t seed = 0);

  // Teacher forcing / prefill of sequence 0 (after start(1, ...)): runs tokens [rows] at
  // positions positions()[0] .. + rows - 1 and advances it; logits() then holds [rows, vocab]
  // (row i predicts the token after tokens[i]). Long inputs can be fed in chunks: the cache
  // keeps what earlier calls appended. `observer` (optional) sees every layer's K/V rows.
  void forward_sequence(const std::vector<int32_t>& tokens, const KvObserver& observer = {});

  const std::vector<float>& logits() const { return logits_; }  // [rows, vocab] of the last call
  const std::vector<int32_t>& positions() const { return positions_; }
  KvCacheView cache_view(int layer) const;  // host pointers (paged layers)
  const LayerKvSpec& layer_kv(int layer) const { return layer_kv_.at(layer); }
  int blocks_per_seq() const { return bps_; }
  const DecoderConfig& config() const { return cfg_; }

 private:
  struct Layer;
  void init(const DecoderWeights& w);
  // Stores `rows` K/V rows (float [rows, kv_dim]) of sequence `seq` at positions pos0.. in
  // layer l's cache, and their dequantized values in its dense copy.
  void store_kv(int l, int seq, int pos0, int rows, const float* k, const float* v);
  // The decoder over rows r (token tokens[r] of sequence seqs[r] at position pos[r]), shared by
  // step() and forward_sequence(); fills logits_. paged_decode: paged layers attend through
  // decode_attention (the GPU's own reference); otherwise every layer attends over its dense
  // K/V with causal prefill attention.
  void run_rows(const std::vector<int32_t>& tokens, const std::vector<int32_t>& seqs,
                const std::vector<int32_t>& pos, bool paged_decode, const KvObserver& observer);
  DecoderConfig cfg_;
  StepCacheOptions cache_;
  std::vector<LayerKvSpec> layer_kv_;
  int max_batch_, max_context_, bps_;
  bool double_acc_;
  std::vector<PageGeometry> geom_;  // per layer
  std::vector<float> rope_;
  std::vector<float> embedding_;  // [vocab, hidden]
  std::vector<float> final_norm_, lm_head_;
  std::vector<Layer> layers_;
  std::vector<std::vector<uint8_t>> k_pool_, v_pool_, k_scales_, v_scales_;  // per layer
  // Per layer, the dequantized K and V as attention reads them: [max_batch, max_context, kv_dim]
  std::vector<std::vector<float>> k_dense_, v_dense_;
  std::vector<int32_t> block_table_, positions_;
  std::vector<float> logits_;
  int batch_ = 0;

 public:
  ~DecoderRef();
  DecoderRef(DecoderRef&&) noexcept;
};

}  // namespace kvlab::ref
