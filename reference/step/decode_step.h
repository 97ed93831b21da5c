// decode_step.h: the CPU reference of the synthetic decoder's full decode step (Eigen).
//
// The same model, cache and precision contract as the GPU engine (gpu/runtime/decode_step_executor.h),
// written to be obviously right for small configs:
//   - weights: the same BF16 bits (step_math.h's synthetic_weight_bf16 with synthetic_init's
//     scale/offset per tensor), held as float matrices;
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
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "reference/attention/args.h"
#include "reference/step/decoder_config.h"
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

struct StepCacheOptions {
  KvFormat format = KvFormat::kBF16;
  KvLayout layout = KvLayout::kNHD;
  int block_size = 16;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

class DecoderRef {
 public:
  // max_context tokens per sequence, blocks_per_seq = ceil(max_context / block_size); the
  // pools hold max_batch * blocks_per_seq blocks, as the GPU engine's do.
  DecoderRef(const DecoderConfig& cfg, const StepCacheOptions& cache, int max_batch,
             int max_context, bool double_accumulate = false);

  // Starts `batch` sequences at position 0. block_table: int32 [max_batch or batch,
  // blocks_per_seq] (row r = sequence r); every entry a sequence uses must be a valid,
  // distinct block. Pools are reset to zero, scales too.
  void start(int batch, const std::vector<int32_t>& block_table);

  // One decode step of every sequence on `tokens` [batch]; returns the sampled tokens.
  // top_k == 0: greedy.
  std::vector<int32_t> step(const std::vector<int32_t>& tokens, int top_k = 0,
                            float temperature = 1.0f, uint64_t seed = 0);

  const std::vector<float>& logits() const { return logits_; }  // [batch, vocab] of the last step
  const std::vector<int32_t>& positions() const { return positions_; }
  KvCacheView cache_view(int layer) const;  // host pointers
  int blocks_per_seq() const { return bps_; }
  const DecoderConfig& config() const { return cfg_; }

 private:
  struct Layer;
  DecoderConfig cfg_;
  StepCacheOptions cache_;
  int max_batch_, max_context_, bps_;
  bool double_acc_;
  PageGeometry geom_;
  std::vector<float> rope_;
  std::vector<float> embedding_;  // [vocab, hidden]
  std::vector<float> final_norm_, lm_head_;
  std::vector<Layer> layers_;
  std::vector<std::vector<uint8_t>> k_pool_, v_pool_, k_scales_, v_scales_;  // per layer
  std::vector<int32_t> block_table_, positions_;
  std::vector<float> logits_;
  int batch_ = 0;

 public:
  ~DecoderRef();
  DecoderRef(DecoderRef&&) noexcept;
};

}  // namespace kvlab::ref
