// roofline.cpp: operation rooflines, decode-attention prediction and the per-step model.
#include "sim/cost/roofline.h"

#include <algorithm>
#include <cmath>

#include "reference/core/error.h"
#include "reference/layout/layout_names.h"

namespace kvlab::sim {

std::string to_string(Bound b) {
  return b == Bound::kCompute ? "compute" : "memory";
}
std::string to_string(LaunchMode m) {
  return m == LaunchMode::kEager ? "eager" : "cuda_graph";
}

void CostModelConfig::validate() const {
  KVLAB_REQUIRE(
      eager_launch_s >= 0 && graph_node_s >= 0 && graph_launch_s >= 0 && attn_fixed_s >= 0,
      "cost model: launch and fixed overheads must be >= 0");
  KVLAB_REQUIRE(mem_efficiency > 0 && compute_efficiency > 0 && attn_mem_efficiency > 0,
                "cost model: efficiency factors must be > 0 (got memory "
                    << mem_efficiency << ", compute " << compute_efficiency << ", attention "
                    << attn_mem_efficiency << ")");
  KVLAB_REQUIRE(
      !attn_graph_fixed_s || (std::isfinite(*attn_graph_fixed_s) && *attn_graph_fixed_s >= 0),
      "cost model: attn_graph_fixed_s " << attn_graph_fixed_s.value_or(0)
                                        << " must be finite and >= 0");
  for (const auto& [f, x] : attn_format_efficiency)
    KVLAB_REQUIRE(std::isfinite(x) && x > 0, "cost model: attention efficiency factor of "
                                                 << to_string(f) << " is " << x << ", must be > 0");
}

double CostModelConfig::attn_fixed(LaunchMode mode) const {
  return mode == LaunchMode::kCudaGraph && attn_graph_fixed_s ? *attn_graph_fixed_s : attn_fixed_s;
}

double CostModelConfig::attn_efficiency(KvFormat format) const {
  const auto it = attn_format_efficiency.find(format);
  return attn_mem_efficiency * (it == attn_format_efficiency.end() ? 1.0 : it->second);
}

void DecodeAttentionShape::validate() const {
  KVLAB_REQUIRE(batch >= 0, "decode attention: batch " << batch << " must be >= 0");
  KVLAB_REQUIRE(num_qo_heads >= 1 && num_kv_heads >= 1 && num_qo_heads % num_kv_heads == 0,
                "decode attention: num_qo_heads " << num_qo_heads
                                                  << " must be a positive multiple of num_kv_heads "
                                                  << num_kv_heads);
  KVLAB_REQUIRE(head_dim >= 2, "decode attention: head_dim " << head_dim << " must be >= 2");
  KVLAB_REQUIRE(block_size >= 1, "decode attention: block_size " << block_size << " must be >= 1");
  if (seq_lens.empty()) {
    KVLAB_REQUIRE(context >= 0, "decode attention: context " << context << " must be >= 0");
  } else {
    KVLAB_REQUIRE(static_cast<int64_t>(seq_lens.size()) == batch,
                  "decode attention: " << seq_lens.size() << " seq_lens for batch " << batch);
    for (size_t i = 0; i < seq_lens.size(); ++i)
      KVLAB_REQUIRE(seq_lens[i] >= 0,
                    "decode attention: seq_lens[" << i << "] = " << seq_lens[i] << " is negative");
  }
  PageGeometry g;
  g.format = format;
  g.num_blocks = 1;
  g.num_kv_heads = num_kv_heads;
  g.head_dim = head_dim;
  g.block_size = block_size;
  kvlab::validate(g);
}

int64_t DecodeAttentionShape::total_tokens() const {
  if (seq_lens.empty()) return batch * context;
  int64_t t = 0;
  for (int32_t l : seq_lens) t += l;
  return t;
}

int64_t DecodeAttentionShape::total_blocks() const {
  if (seq_lens.empty()) return batch * ((context + block_size - 1) / block_size);
  int64_t b = 0;
  for (int32_t l : seq_lens) b += (l + block_size - 1) / block_size;
  return b;
}

namespace {

double matrix_rate(const GpuSpec& gpu, int weight_bits) {
  if (weight_bits == 4 && gpu.fp4_flops > 0) return gpu.fp4_flops;
  if (weight_bits <= 8 && gpu.fp8_flops > 0) return gpu.fp8_flops;
  return gpu.bf16_flops;
}

OpCost make_op(const char* name, double flops, double bytes, double bw, double rate, double fixed) {
  OpCost c;
  c.name = name;
  c.flops = flops;
  c.bytes = bytes;
  c.memory_s = bytes / bw;
  c.compute_s = rate > 0 ? flops / rate : 0;
  c.fixed_s = fixed;
  c.seconds = fixed + std::max(c.memory_s, c.compute_s);
  return c;
}

// K+V bytes of one token of one layer with num_kv_heads x head_dim, data + scales.
double kv_token_bytes(KvFormat f, int32_t kv_heads, int32_t head_dim) {
  PageGeometry g;
  g.format = f;
  g.num_blocks = 1;
  g.num_kv_heads = kv_heads;
  g.head_dim = head_dim;
  g.block_size = 1;
  return 2.0 * static_cast<double>(g.bytes() + g.scale_bytes());
}

}  // namespace

OpCost decode_attention_cost(const GpuSpec& gpu, const DecodeAttentionShape& s,
                             const CostModelConfig& cfg) {
  s.validate();
  cfg.validate();
  const double act = dtype_bytes(s.q_dtype);
  const double tokens = static_cast<double>(s.total_tokens());
  const double qo = 2.0 * static_cast<double>(s.batch) * s.num_qo_heads * s.head_dim * act;
  const double kv = tokens * kv_token_bytes(s.format, s.num_kv_heads, s.head_dim);
  const double meta =
      4.0 * static_cast<double>(s.total_blocks()) + 4.0 * static_cast<double>(s.batch);
  const double lse = s.write_lse ? 4.0 * static_cast<double>(s.batch) * s.num_qo_heads : 0.0;
  const double flops = 4.0 * s.num_qo_heads * static_cast<double>(s.head_dim) * tokens;
  const double bw = gpu.read_ceiling(cfg.prefer_measured_ceiling) * cfg.attn_efficiency(s.format);
  return make_op("decode_attention", flops, qo + kv + meta + lse, bw,
                 gpu.bf16_flops * cfg.compute_efficiency, cfg.attn_fixed(cfg.launch));
}

double predict_decode_attention_seconds(const GpuSpec& gpu, const DecodeAttentionShape& shape,
                                        const CostModelConfig& cfg) {
  return decode_attention_cost(gpu, shape, cfg).seconds;
}

OpCost gemm_cost(const GpuSpec& gpu, const std::string& name, int64_t m, int64_t n, int64_t k,
                 int weight_bits, const CostModelConfig& cfg) {
  KVLAB_REQUIRE(m >= 0 && n >= 1 && k >= 1, "gemm '" << name << "': shape m=" << m << " n=" << n
                                                     << " k=" << k
                                                     << " needs m >= 0, n >= 1, k >= 1");
  KVLAB_REQUIRE(weight_bits == 4 || weight_bits == 8 || weight_bits == 16 || weight_bits == 32,
                "gemm '" << name << "': weight_bits " << weight_bits << " (allowed: 4, 8, 16, 32)");
  const double act = dtype_bytes(cfg.act_dtype);
  const double bytes = static_cast<double>(n) * k * weight_bits / 8.0 +
                       static_cast<double>(m) * k * act + static_cast<double>(m) * n * act;
  const double flops = 2.0 * static_cast<double>(m) * n * k;
  OpCost c =
      make_op("", flops, bytes, gpu.read_ceiling(cfg.prefer_measured_ceiling) * cfg.mem_efficiency,
              matrix_rate(gpu, weight_bits) * cfg.compute_efficiency, 0.0);
  c.name = name;
  return c;
}

OpCost memory_op_cost(const GpuSpec& gpu, const std::string& name, double bytes,
                      const CostModelConfig& cfg) {
  KVLAB_REQUIRE(bytes >= 0, "memory op '" << name << "': negative bytes " << bytes);
  OpCost c = make_op("", 0.0, bytes,
                     gpu.read_ceiling(cfg.prefer_measured_ceiling) * cfg.mem_efficiency, 0.0, 0.0);
  c.name = name;
  return c;
}

// ---- per-step model ----------------------------------------------------------------------

CostModel::CostModel(const GpuSpec& gpu, const ModelStack& model, KvFormat kv_format,
                     CostModelConfig cfg)
    : gpu_(gpu), model_(model), kv_format_(kv_format), cfg_(cfg) {
  gpu.validate();
  model.validate();
  cfg.validate();
  kv_bytes_per_token_layer_ =
      kv_token_bytes(kv_format, model.num_kv_heads, model.head_dim) * model.kv_pools / 2.0;
  compressed_read_fraction_ = 0;
  swa_tokens_per_seq_ = 0;
  for (const CacheLayerGroup& g : model.cache_groups()) {
    if (g.kind == CacheKind::kSlidingWindow) {
      swa_tokens_per_seq_ += static_cast<int64_t>(g.window) * g.num_layers;
    } else {
      compressed_read_fraction_ +=
          static_cast<double>(g.num_layers) / (g.kind == CacheKind::kCompressed ? g.ratio : 1);
    }
  }
}

namespace {

// Visits every kernel kind of a step: (name, flops, bytes, matrix rate, kernels, category).
// category: 0 gemm, 1 attention, 2 other. Zero-work kernels are skipped.
template <class Sink>
void visit_step(const ModelStack& m, const CostModelConfig& cfg, const GpuSpec& gpu, double kv_tok,
                double read_fraction, int64_t swa_tokens, const StepShape& s, Sink&& sink) {
  const double T = static_cast<double>(s.total_tokens());
  if (T <= 0) return;
  const double L = m.num_layers;
  const double act = dtype_bytes(cfg.act_dtype);
  const double h = m.hidden, d = m.head_dim, hq = m.num_qo_heads, hkv = m.num_kv_heads,
               I = m.intermediate;
  const double wb = m.weight_bits / 8.0;
  const double mat = matrix_rate(gpu, m.weight_bits);
  auto gemm = [&](const char* name, double rows, double n, double k, double count) {
    sink(name, 2.0 * rows * n * k * count, (n * k * wb + rows * k * act + rows * n * act) * count,
         mat, count, 0);
  };
  gemm("qkv_proj", T, (hq + 2 * hkv) * d, h, L);
  sink("rope", 0.0, 2.0 * T * (hq + hkv) * d * act * L, gpu.bf16_flops, L, 2);
  sink("kv_append", 0.0, T * (2.0 * hkv * d * act + kv_tok) * L, gpu.bf16_flops, L, 2);
  if (s.num_decode_seqs > 0) {
    const double ctx = static_cast<double>(s.decode_context_tokens) * read_fraction +
                       static_cast<double>(s.num_decode_seqs) * static_cast<double>(swa_tokens);
    const double qo = 2.0 * static_cast<double>(s.num_decode_seqs) * hq * d * act * L;
    sink("decode_attention", 4.0 * hq * d * ctx, qo + ctx * kv_tok, gpu.bf16_flops, L, 1);
  }
  if (s.prefill_tokens > 0) {
    const double pairs = s.prefill_attn_pairs * read_fraction +
                         static_cast<double>(s.prefill_tokens) * static_cast<double>(swa_tokens);
    const double keys = static_cast<double>(s.prefill_context_tokens) * read_fraction +
                        static_cast<double>(s.num_prefill_seqs) * static_cast<double>(swa_tokens);
    const double qo = 2.0 * static_cast<double>(s.prefill_tokens) * hq * d * act * L;
    sink("prefill_attention", 4.0 * hq * d * pairs, qo + keys * kv_tok, gpu.bf16_flops, L, 1);
  }
  gemm("o_proj", T, h, hq * d, L);
  gemm("gate_up_proj", T, 2 * I, h, L);
  gemm("down_proj", T, h, I, L);
  // Two fused add+RMSNorm (read residual and input, write both) and the SwiGLU activation.
  sink("add_norm", 0.0, 2.0 * 4.0 * T * h * act * L, gpu.bf16_flops, 2 * L, 2);
  sink("swiglu", 0.0, 3.0 * T * I * act * L, gpu.bf16_flops, L, 2);
  sink("embedding", 0.0, T * h * act + T * 4.0, gpu.bf16_flops, 1, 2);
  const double S = static_cast<double>(std::max<int64_t>(s.num_sampled, 0));
  if (S > 0) {
    sink("final_norm", 0.0, 2.0 * S * h * act, gpu.bf16_flops, 1, 2);
    gemm("lm_head", S, m.vocab, h, 1);
    sink("sampling", 0.0, S * m.vocab * 4.0, gpu.bf16_flops, 1, 2);
  }
}

}  // namespace

StepCost CostModel::step(const StepShape& s) const {
  StepCost c;
  const double bw_mem = gpu_.read_ceiling(cfg_.prefer_measured_ceiling);
  const bool eager = cfg_.launch == LaunchMode::kEager;
  visit_step(
      model_, cfg_, gpu_, kv_bytes_per_token_layer_, compressed_read_fraction_, swa_tokens_per_seq_,
      s, [&](const char*, double flops, double bytes, double rate, double count, int cat) {
        const bool attn = cat == 1;
        const double bw = bw_mem * (attn ? cfg_.attn_efficiency(kv_format_) : cfg_.mem_efficiency);
        const double t =
            (attn ? cfg_.attn_fixed(cfg_.launch) * count : 0.0) +
            std::max(bytes / bw, rate > 0 ? flops / (rate * cfg_.compute_efficiency) : 0.0);
        (cat == 0 ? c.gemm_s : cat == 1 ? c.attention_s : c.other_s) += t;
        const int n = static_cast<int>(count);
        c.num_kernels += n;
        if (eager) {
          // Each of the n kernels takes max(its time, the CPU launch time).
          c.launch_s += std::max(0.0, n * cfg_.eager_launch_s - t);
        } else {
          c.launch_s += n * cfg_.graph_node_s;
        }
      });
  if (!eager && c.num_kernels > 0) c.launch_s += cfg_.graph_launch_s;
  c.swap_s =
      s.swap_bytes > 0 ? static_cast<double>(s.swap_bytes) / gpu_.host_link_bytes_per_s : 0.0;
  c.total_s = c.gemm_s + c.attention_s + c.other_s + c.launch_s + c.swap_s;
  return c;
}

std::vector<OpCost> CostModel::step_ops(const StepShape& s) const {
  std::vector<OpCost> ops;
  const double bw_mem = gpu_.read_ceiling(cfg_.prefer_measured_ceiling);
  visit_step(
      model_, cfg_, gpu_, kv_bytes_per_token_layer_, compressed_read_fraction_, swa_tokens_per_seq_,
      s, [&](const char* name, double flops, double bytes, double rate, double count, int cat) {
        const bool attn = cat == 1;
        ops.push_back(make_op(
            name, flops, bytes,
            bw_mem * (attn ? cfg_.attn_efficiency(kv_format_) : cfg_.mem_efficiency),
            rate * cfg_.compute_efficiency, attn ? cfg_.attn_fixed(cfg_.launch) * count : 0.0));
      });
  return ops;
}

}  // namespace kvlab::sim
