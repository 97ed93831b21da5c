// decode_step_executor.cu: DecodeStepExecutor (see decode_step_executor.h): weights, cache,
// buffers, the step in its four variants, CUDA-graph capture per batch bucket, timing helpers.
#include "gpu/runtime/decode_step_executor.h"

#include <thrust/device_vector.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <tuple>

#include "gpu/attention/decode.h"
#include "gpu/attention/decode_auto.h"
#include "gpu/attention/prefill.h"
#include "gpu/core/cuda_check.h"
#include "gpu/core/device_info.h"
#include "gpu/quant/append.h"
#include "gpu/step/gather_rows.h"
#include "gpu/step/gemm.h"
#include "gpu/step/sampling.h"
#include "gpu/step/step_kernels.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "reference/step/decode_step.h"
#include "reference/step/step_math.h"
#include "sim/alloc/block_allocator.h"
#include "sim/alloc/block_table.h"
#include "sim/serve/synthetic_step.h"

namespace kvlab::gpu {

namespace ks = kvlab::gpu::step;
using kvlab::step::WeightTensor;

const std::vector<StepVariant>& all_step_variants() {
  static const std::vector<StepVariant> v = {StepVariant::kEagerUnfused, StepVariant::kEagerFused,
                                             StepVariant::kGraphFused, StepVariant::kGraphUnfused};
  return v;
}

const char* to_string(StepVariant v) {
  switch (v) {
    case StepVariant::kEagerUnfused:
      return "eager_unfused";
    case StepVariant::kEagerFused:
      return "eager_fused";
    case StepVariant::kGraphFused:
      return "graph_fused";
    case StepVariant::kGraphUnfused:
      return "graph_unfused";
  }
  return "?";
}

StepVariant parse_step_variant(const std::string& s) {
  for (StepVariant v : all_step_variants())
    if (s == to_string(v)) return v;
  throw InvalidArgument("unknown step variant '" + s +
                        "'; allowed: eager_unfused, eager_fused, graph_fused, graph_unfused");
}

namespace {

// Buffer sizes in elements for max_batch rows (shared by the allocation and the estimate).
struct BufferPlan {
  int64_t rows = 0;
  int64_t h = 0, xn = 0, qkv = 0, q = 0, gu = 0, s = 0, act = 0, logits = 0;
  BufferPlan() = default;
  explicit BufferPlan(const DecoderConfig& c, int64_t max_batch) : rows(max_batch) {
    h = rows * c.hidden;
    xn = rows * c.hidden;
    qkv = rows * c.qkv_dim();
    q = rows * c.q_dim();
    // gu doubles as the GEMM-timing output for N in {qkv, hidden, 2F}
    gu = rows * std::max<int64_t>({2 * int64_t{c.ffn}, c.qkv_dim(), c.hidden});
    s = rows * c.ffn;
    // act doubles as the GEMM-timing input for K in {hidden, q_dim, ffn}
    act = rows * std::max<int64_t>({int64_t{c.ffn}, c.hidden, c.q_dim()});
    logits = rows * c.vocab;
  }
  double bytes() const {
    return 4.0 * h + 2.0 * xn + 4.0 * qkv + 2.0 * 2 * q + 4.0 * h /*y*/ + 4.0 * gu + 4.0 * s +
           2.0 * act + 4.0 * logits + rows * (4.0 * 4 + 8.0);
  }
};

// Weight layout inside one BF16 allocation, per tensor (elements).
struct WeightPlan {
  struct LayerOff {
    int64_t attn_norm, wqkv, wo, mlp_norm, wgu, wdown;
  };
  int64_t embedding = 0, final_norm = 0, lm_head = 0, total = 0;
  std::vector<LayerOff> layers;
  explicit WeightPlan(const DecoderConfig& c) {
    int64_t off = 0;
    auto take = [&](int64_t n) {
      const int64_t o = off;
      off += (n + 127) / 128 * 128;  // 256-byte aligned tensors
      return o;
    };
    embedding = take(int64_t{c.vocab} * c.hidden);
    for (int l = 0; l < c.layers; ++l) {
      LayerOff lo{};
      lo.attn_norm = take(c.hidden);
      lo.wqkv = take(int64_t{c.qkv_dim()} * c.hidden);
      lo.wo = take(int64_t{c.hidden} * c.q_dim());
      lo.mlp_norm = take(c.hidden);
      lo.wgu = take(2 * int64_t{c.ffn} * c.hidden);
      lo.wdown = take(int64_t{c.hidden} * c.ffn);
      layers.push_back(lo);
    }
    final_norm = take(c.hidden);
    lm_head = take(int64_t{c.vocab} * c.hidden);
    total = off;
  }
};

size_t align256(size_t n) {
  return (n + 255) / 256 * 256;
}

void validate_options(const DecoderConfig& c, const ExecutorOptions& o) {
  validate(c);
  KVLAB_REQUIRE(o.max_batch >= 1 && o.max_batch <= 65535,
                "engine max_batch " << o.max_batch << " outside [1, 65535]");
  KVLAB_REQUIRE(o.max_context >= 1 && o.max_context <= (1 << 24),
                "engine max_context " << o.max_context << " outside [1, 2^24]");
  KVLAB_REQUIRE(o.block_size >= 1, "engine block_size " << o.block_size << " must be >= 1");
  KVLAB_REQUIRE(o.pool_blocks >= 0,
                "engine pool_blocks " << o.pool_blocks << " must be >= 0 (0: per-sequence blocks)");
  kvlab::validate(cache_geometry(c, o));
  KVLAB_REQUIRE(cache_geometry(c, o).num_blocks < (int64_t{1} << 31),
                "engine cache of " << cache_geometry(c, o).num_blocks
                                   << " blocks exceeds the int32 block ids of a block table");
  for (int b : o.graph_buckets)
    KVLAB_REQUIRE(b >= 1 && b <= o.max_batch,
                  "graph bucket " << b << " outside [1, max_batch " << o.max_batch << "]");
  for (const auto* v : {&o.layer_k_scales, &o.layer_v_scales}) {
    KVLAB_REQUIRE(v->empty() || static_cast<int>(v->size()) == c.layers,
                  "engine per-layer pool scales: " << v->size() << " for " << c.layers
                                                   << " layers (give none or one per layer)");
    for (float x : *v)
      KVLAB_REQUIRE(std::isfinite(x) && x > 0,
                    "engine per-layer pool scale " << x << " must be finite and > 0");
  }
  if (kv_format_has_pool_scale(o.kv_format))
    KVLAB_REQUIRE(
        std::isfinite(o.k_scale) && o.k_scale > 0 && std::isfinite(o.v_scale) && o.v_scale > 0,
        "engine k_scale/v_scale " << o.k_scale << "/" << o.v_scale << " must be finite and > 0");
}

template <class T>
T* ptr(thrust::device_vector<T>& v) {
  return thrust::raw_pointer_cast(v.data());
}

}  // namespace

struct DecodeStepExecutor::Impl {
  cudaStream_t stream = nullptr;
  std::unique_ptr<ks::CublasLinear> lin;
  WeightPlan wplan;
  BufferPlan bplan;
  PageGeometry geom;
  int bps = 0;            // blocks per sequence
  int attn_version = -1;  // -1: auto
  // auto's choice per batch size (the executor's shapes differ only in the batch; choosing
  // reads the device's properties, so it is made once per batch, outside any capture).
  std::map<int, DecodeChoice> auto_choices;

  thrust::device_vector<uint16_t> weights;
  thrust::device_vector<float> rope;  // [max_context, D/2] x (cos, sin)
  thrust::device_vector<uint8_t> cache;
  std::vector<KvCacheView> views;
  size_t pool_bytes = 0, scale_bytes = 0;

  thrust::device_vector<int32_t> tokens, positions, seq_lens, block_table, tokens_bak,
      positions_bak;
  thrust::device_vector<int64_t> slots;
  thrust::device_vector<float> h, qkv, y, gu, s, logits;
  thrust::device_vector<uint16_t> xn, q, o, act;
  thrust::device_vector<uint8_t> attn_ws;
  size_t attn_ws_bytes = 0;

  std::unique_ptr<sim::BlockAllocator> allocator;
  std::unique_ptr<sim::BlockTable> table;
  std::vector<int64_t> seq_ids;

  using GraphKey =
      std::tuple<int, bool, int, uint32_t, uint64_t>;  // bucket, fused, top_k, temp bits, seed
  std::map<GraphKey, cudaGraphExec_t> graphs;
  cudaEvent_t ev0 = nullptr, ev1 = nullptr;

  // Serving (pool_blocks > 0; ensure_serving_buffers): every step's rows and tables in one
  // int32 arena uploaded from a pinned mirror, the sampled tokens, one graph per bucket.
  thrust::device_vector<int32_t> srv_arena, srv_sampled;
  int32_t* srv_host = nullptr;          // pinned, srv_arena.size() words
  int32_t* srv_host_sampled = nullptr;  // pinned, max_batch words
  std::map<int, cudaGraphExec_t> srv_graphs;
  bool srv_last_graph = false;
  int srv_last_rows = 0;
  void free_serving() {
    for (auto& g : srv_graphs) cudaGraphExecDestroy(g.second);
    srv_graphs.clear();
    if (srv_host) cudaFreeHost(srv_host);
    if (srv_host_sampled) cudaFreeHost(srv_host_sampled);
    srv_host = srv_host_sampled = nullptr;
    srv_arena.clear();
    srv_arena.shrink_to_fit();
    srv_sampled.clear();
    srv_sampled.shrink_to_fit();
  }

  Impl(const DecoderConfig& c, const ExecutorOptions& o) : wplan(c), bplan(c, o.max_batch) {}
  ~Impl() {
    free_serving();
    for (auto& g : graphs) cudaGraphExecDestroy(g.second);
    if (ev0) cudaEventDestroy(ev0);
    if (ev1) cudaEventDestroy(ev1);
    lin.reset();
    if (stream) cudaStreamDestroy(stream);
  }
  void drop_graphs() {
    for (auto& g : graphs) cudaGraphExecDestroy(g.second);
    graphs.clear();
    for (auto& g : srv_graphs) cudaGraphExecDestroy(g.second);
    srv_graphs.clear();
  }
  // Frees everything allocate_state() allocates (the weights stay).
  void release_state() {
    drop_graphs();
    free_serving();
    auto drop = [](auto& v) {
      v.clear();
      v.shrink_to_fit();
    };
    drop(rope), drop(cache), drop(tokens), drop(positions), drop(seq_lens), drop(block_table);
    drop(tokens_bak), drop(positions_bak), drop(slots), drop(h), drop(qkv), drop(y), drop(gu),
        drop(s);
    drop(logits), drop(xn), drop(q), drop(o), drop(act), drop(attn_ws);
    attn_ws_bytes = 0;
    views.clear();
    table.reset();
    allocator.reset();
  }
  const uint16_t* w(int64_t off) const { return thrust::raw_pointer_cast(weights.data()) + off; }

  DecodeArgs attn_args(const DecoderConfig& c, const ExecutorOptions& opt, int layer, int m) {
    return step_decode_args(c, opt, views[layer], ptr(q), ptr(o), ptr(block_table), ptr(seq_lens),
                            m);
  }
  // The attention version and plan knobs of a batch of m rows: the fixed version, or auto's
  // pick for that batch.
  DecodeChoice attn_choice(const DecoderConfig& c, const ExecutorOptions& opt, int m) {
    if (attn_version >= 0) {
      DecodeChoice ch;
      ch.version = attn_version;
      return ch;
    }
    auto it = auto_choices.find(m);
    if (it == auto_choices.end())
      it = auto_choices.emplace(m, choose_decode(attn_args(c, opt, 0, m))).first;
    return it->second;
  }
  // Decode attention over `a` (a.num_seqs rows) with the executor's workspace.
  void run_attention(const DecoderConfig& c, const ExecutorOptions& opt, const DecodeArgs& a,
                     cudaStream_t st) {
    const DecodeChoice ch = attn_choice(c, opt, a.num_seqs);
    decode_attention(a, ch.version, ch.tuning, attn_ws_bytes ? ptr(attn_ws) : nullptr,
                     attn_ws_bytes, st);
  }
  // Workspace of the current choice for a batch of m rows.
  size_t attn_workspace(const DecoderConfig& c, const ExecutorOptions& opt, int m) {
    const DecodeChoice ch = attn_choice(c, opt, m);
    return decode_workspace_bytes(attn_args(c, opt, 0, m), ch.version, ch.tuning);
  }
};

namespace {

double state_bytes(const DecoderConfig& cfg, const ExecutorOptions& opt) {
  const PageGeometry g = cache_geometry(cfg, opt);
  const double cache = 2.0 * cfg.layers * (align256(g.bytes()) + align256(g.scale_bytes()));
  const double buffers =
      BufferPlan(cfg, opt.max_batch).bytes() + 4.0 * static_cast<double>(g.num_blocks);
  return cache + buffers + 8.0 * opt.max_context * cfg.head_dim;
}

void require_fits(double need, const DecoderConfig& cfg, const ExecutorOptions& opt) {
  // 5% headroom for cuBLAS, attention workspaces and the synthetic-fill scratch
  require_free_memory(need, 0.95,
                      "the decode engine for " + to_string(cfg) + ", batch " +
                          std::to_string(opt.max_batch) + ", context " +
                          std::to_string(opt.max_context));
}

}  // namespace

double DecodeStepExecutor::device_bytes_needed(const DecoderConfig& cfg,
                                               const ExecutorOptions& opt) {
  validate_options(cfg, opt);
  return 2.0 * WeightPlan(cfg).total + state_bytes(cfg, opt) +
         double(ks::CublasLinear::kDefaultWorkspaceBytes);
}

DecodeStepExecutor::DecodeStepExecutor(const DecoderConfig& cfg, const ExecutorOptions& opt)
    : cfg_(cfg), opt_(opt) {
  init(nullptr);
}

DecodeStepExecutor::DecodeStepExecutor(const DecoderConfig& cfg, const ExecutorOptions& opt,
                                       const DecoderWeights& weights)
    : cfg_(cfg), opt_(opt) {
  validate(weights, cfg);
  init(&weights);
}

void DecodeStepExecutor::init(const DecoderWeights* weights) {
  const DecoderConfig& cfg = cfg_;
  const ExecutorOptions& opt = opt_;
  validate_options(cfg, opt);
  {
    const char* why = ks::rope_append_unsupported_reason(KvCacheView{cache_geometry(cfg, opt)});
    KVLAB_UNSUPPORTED_IF(why[0] != '\0', "decode engine: " << why);
  }
  require_fits(device_bytes_needed(cfg, opt), cfg, opt);
  impl_ = std::make_unique<Impl>(cfg, opt);
  Impl& I = *impl_;
  KVLAB_CUDA_CHECK(cudaStreamCreateWithFlags(&I.stream, cudaStreamNonBlocking));
  KVLAB_CUDA_CHECK(cudaEventCreate(&I.ev0));
  KVLAB_CUDA_CHECK(cudaEventCreate(&I.ev1));
  I.lin = std::make_unique<ks::CublasLinear>(I.stream);

  I.weights.resize(I.wplan.total);
  if (weights) {
    // the given BF16 bits, tensor by tensor into the plan
    auto put = [&](int64_t off, const std::vector<uint16_t>& v) {
      KVLAB_CUDA_CHECK(cudaMemcpyAsync(ptr(I.weights) + off, v.data(), v.size() * 2,
                                       cudaMemcpyHostToDevice, I.stream));
    };
    put(I.wplan.embedding, weights->embedding);
    for (int l = 0; l < cfg.layers; ++l) {
      const auto& lo = I.wplan.layers[l];
      const auto& L = weights->layers[l];
      put(lo.attn_norm, L.attn_norm);
      put(lo.wqkv, L.wqkv);
      put(lo.wo, L.wo);
      put(lo.mlp_norm, L.mlp_norm);
      put(lo.wgu, L.w_gate_up);
      put(lo.wdown, L.w_down);
    }
    put(I.wplan.final_norm, weights->final_norm);
    put(I.wplan.lm_head, weights->lm_head_bits());
    KVLAB_CUDA_CHECK(cudaStreamSynchronize(I.stream));  // the host vectors may go away
    allocate_state();
    return;
  }
  // weights, generated on the device from the seed
  auto gen = [&](int64_t off, int64_t n, WeightTensor t, int layer) {
    const auto [scale, offset] = kvlab::ref::synthetic_init(t, cfg);
    ks::fill_synthetic_bf16(ptr(I.weights) + off, n, cfg.seed, kvlab::step::weight_stream(t, layer),
                            scale, offset, I.stream);
  };
  gen(I.wplan.embedding, int64_t{cfg.vocab} * cfg.hidden, WeightTensor::kEmbedding, 0);
  for (int l = 0; l < cfg.layers; ++l) {
    const auto& lo = I.wplan.layers[l];
    gen(lo.attn_norm, cfg.hidden, WeightTensor::kAttnNorm, l);
    gen(lo.wqkv, int64_t{cfg.qkv_dim()} * cfg.hidden, WeightTensor::kWqkv, l);
    gen(lo.wo, int64_t{cfg.hidden} * cfg.q_dim(), WeightTensor::kWo, l);
    gen(lo.mlp_norm, cfg.hidden, WeightTensor::kMlpNorm, l);
    gen(lo.wgu, 2 * int64_t{cfg.ffn} * cfg.hidden, WeightTensor::kWGateUp, l);
    gen(lo.wdown, int64_t{cfg.hidden} * cfg.ffn, WeightTensor::kWDown, l);
  }
  gen(I.wplan.final_norm, cfg.hidden, WeightTensor::kFinalNorm, 0);
  gen(I.wplan.lm_head, int64_t{cfg.vocab} * cfg.hidden, WeightTensor::kLmHead, 0);
  allocate_state();
}

void DecodeStepExecutor::reconfigure(int max_batch, int max_context) {
  ExecutorOptions o = opt_;
  o.max_batch = max_batch;
  o.max_context = max_context;
  o.graph_buckets.clear();
  validate_options(cfg_, o);
  Impl& I = *impl_;
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(I.stream));
  I.release_state();
  batch_ = 0;
  positions_.clear();
  opt_ = o;
  require_fits(state_bytes(cfg_, opt_), cfg_, opt_);
  allocate_state();
}

// The per-shape state: RoPE table, KV cache, activation buffers, attention version and
// workspace. Graphs are dropped (they bake the old buffers in).
void DecodeStepExecutor::allocate_state() {
  Impl& I = *impl_;
  const DecoderConfig& cfg = cfg_;
  const ExecutorOptions& opt = opt_;
  I.drop_graphs();
  I.bplan = BufferPlan(cfg, opt.max_batch);

  // RoPE table from the host (the reference's table, bit for bit)
  const std::vector<float> table = kvlab::ref::rope_table(cfg, opt.max_context);
  I.rope.assign(table.begin(), table.end());

  // KV cache: per layer K pool, V pool, K scales, V scales (256-byte aligned)
  I.geom = cache_geometry(cfg, opt);
  // Table columns: a sequence holds up to max_context tokens. In pool mode (serving) the pool's
  // size and the rows per step are independent of that: pool_blocks / max_batch would give
  // tables too narrow for the decode args' max_seq_len (= max_context).
  I.bps = table_columns(opt);
  I.pool_bytes = align256(I.geom.bytes());
  I.scale_bytes = align256(I.geom.scale_bytes());
  I.cache.resize(static_cast<size_t>(cfg.layers) * 2 * (I.pool_bytes + I.scale_bytes));
  uint8_t* base = ptr(I.cache);
  I.views.clear();
  for (int l = 0; l < cfg.layers; ++l) {
    KvCacheView v;
    v.geom = I.geom;
    uint8_t* lb = base + static_cast<size_t>(l) * 2 * (I.pool_bytes + I.scale_bytes);
    v.k = lb;
    v.v = lb + I.pool_bytes;
    v.k_scales = I.scale_bytes ? lb + 2 * I.pool_bytes : nullptr;
    v.v_scales = I.scale_bytes ? lb + 2 * I.pool_bytes + I.scale_bytes : nullptr;
    v.k_scale = opt.layer_k_scales.empty() ? opt.k_scale : opt.layer_k_scales[l];
    v.v_scale = opt.layer_v_scales.empty() ? opt.v_scale : opt.layer_v_scales[l];
    I.views.push_back(v);
  }

  const BufferPlan& b = I.bplan;
  const int64_t R = b.rows;
  I.tokens.assign(R, 0);
  I.positions.assign(R, -1);
  I.tokens_bak.resize(R);
  I.positions_bak.resize(R);
  I.seq_lens.assign(R, 0);
  I.slots.assign(R, -1);
  I.block_table.assign(R * I.bps, 0);
  I.h.resize(b.h);
  I.xn.resize(b.xn);
  I.qkv.resize(b.qkv);
  I.q.resize(b.q);
  I.o.resize(b.q);
  I.y.resize(b.h);
  I.gu.resize(b.gu);
  I.s.resize(b.s);
  I.act.resize(b.act);
  I.logits.resize(b.logits);
  positions_.clear();
  block_table_.clear();
  batch_ = 0;

  // Decode-attention version: the requested one, or auto (picked per batch size from the
  // measured calibration table).
  if (opt.attn_version >= 0)
    set_attn_version(opt.attn_version);
  else
    set_attn_auto();
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(I.stream));
}

DecodeStepExecutor::~DecodeStepExecutor() = default;

int DecodeStepExecutor::attn_version() const {
  const Impl& I = *impl_;
  if (I.attn_version >= 0) return I.attn_version;
  const auto it = I.auto_choices.find(opt_.max_batch);  // filled by set_attn_auto
  return it != I.auto_choices.end() ? it->second.version : -1;
}
bool DecodeStepExecutor::attn_auto() const {
  return impl_->attn_version < 0;
}
int DecodeStepExecutor::blocks_per_seq() const {
  return impl_->bps;
}
cudaStream_t DecodeStepExecutor::stream() const {
  return impl_->stream;
}
int DecodeStepExecutor::graphs_captured() const {
  return static_cast<int>(impl_->graphs.size());
}
double DecodeStepExecutor::weight_bytes() const {
  return 2.0 * impl_->wplan.total;
}
double DecodeStepExecutor::cache_bytes() const {
  return static_cast<double>(impl_->cache.size());
}
KvCacheView DecodeStepExecutor::cache_view(int layer) const {
  KVLAB_REQUIRE(layer >= 0 && layer < cfg_.layers,
                "layer " << layer << " outside [0, " << cfg_.layers << ")");
  return impl_->views[layer];
}

void DecodeStepExecutor::set_attn_version(int id) {
  Impl& I = *impl_;
  decode_version(id);  // throws for an unknown id
  I.attn_version = id;
  I.auto_choices.clear();
  for (int m = 1; m <= opt_.max_batch;
       m = (m == opt_.max_batch ? m + 1 : std::min(2 * m, opt_.max_batch))) {
    const std::string why = decode_unsupported_reason(I.attn_args(cfg_, opt_, 0, m), id);
    KVLAB_UNSUPPORTED_IF(!why.empty(), "decode-attention version " << id << ": " << why);
  }
  size_workspace();
}

void DecodeStepExecutor::set_attn_auto() {
  Impl& I = *impl_;
  I.attn_version = -1;
  I.auto_choices.clear();
  // choose_decode throws Unsupported (with the reason) when no version handles a batch.
  for (int m = 1; m <= opt_.max_batch; ++m) I.attn_choice(cfg_, opt_, m);
  size_workspace();
}

// The attention workspace for every batch the executor may run (auto picks per batch, and a
// split plan need not grow monotonically with the rows): drops captured graphs.
void DecodeStepExecutor::size_workspace() {
  Impl& I = *impl_;
  size_t ws = 0;
  for (int m = 1; m <= opt_.max_batch; ++m) ws = std::max(ws, I.attn_workspace(cfg_, opt_, m));
  for (int m : opt_.graph_buckets) ws = std::max(ws, I.attn_workspace(cfg_, opt_, m));
  I.drop_graphs();
  I.attn_ws.resize(std::max<size_t>(ws, 1));
  I.attn_ws_bytes = ws;
}

int DecodeStepExecutor::bucket_for(int batch) const {
  return graph_bucket(opt_, batch);
}

void DecodeStepExecutor::start(int batch) {
  KVLAB_REQUIRE(batch >= 1 && batch <= opt_.max_batch,
                "start: batch " << batch << " outside [1, " << opt_.max_batch << "]");
  KVLAB_REQUIRE(opt_.pool_blocks == 0, "start: a serving pool (pool_blocks "
                                           << opt_.pool_blocks
                                           << ") takes its block tables from "
                                              "serving_step, not per-sequence blocks");
  Impl& I = *impl_;
  // A fresh allocator per start: every sequence reserves its blocks for max_context tokens.
  I.table.reset();
  I.allocator = std::make_unique<sim::BlockAllocator>(I.geom.num_blocks);
  I.table = std::make_unique<sim::BlockTable>(I.allocator.get(), opt_.block_size);
  I.seq_ids.clear();
  for (int r = 0; r < batch; ++r) {
    I.seq_ids.push_back(r);
    I.table->add_sequence(r);
    I.table->append_tokens(r, opt_.max_context, nullptr);
  }
  std::vector<int32_t> bt;
  I.table->build_block_table(I.seq_ids, I.bps, 0, &bt);
  block_table_.assign(static_cast<size_t>(opt_.max_batch) * I.bps, 0);
  std::copy(bt.begin(), bt.end(), block_table_.begin());
  batch_ = batch;
  positions_.assign(batch, 0);
  std::vector<int32_t> pos(opt_.max_batch, -1);
  std::fill(pos.begin(), pos.begin() + batch, 0);
  KVLAB_CUDA_CHECK(cudaMemcpyAsync(ptr(I.block_table), block_table_.data(), block_table_.size() * 4,
                                   cudaMemcpyHostToDevice, I.stream));
  KVLAB_CUDA_CHECK(cudaMemcpyAsync(ptr(I.positions), pos.data(), pos.size() * 4,
                                   cudaMemcpyHostToDevice, I.stream));
  KVLAB_CUDA_CHECK(cudaMemsetAsync(ptr(I.tokens), 0, opt_.max_batch * 4, I.stream));
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(I.stream));
}

void DecodeStepExecutor::rewind(int position) {
  KVLAB_REQUIRE(batch_ > 0, "rewind: no sequences (call start)");
  for (int r = 0; r < batch_; ++r)
    KVLAB_REQUIRE(position >= 0 && position <= positions_[r],
                  "rewind: position " << position << " outside [0, " << positions_[r]
                                      << "] of sequence " << r);
  Impl& I = *impl_;
  positions_.assign(batch_, position);
  std::vector<int32_t> pos(opt_.max_batch, -1);
  std::fill(pos.begin(), pos.begin() + batch_, position);
  KVLAB_CUDA_CHECK(cudaMemcpyAsync(ptr(I.positions), pos.data(), pos.size() * 4,
                                   cudaMemcpyHostToDevice, I.stream));
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(I.stream));
}

void DecodeStepExecutor::fill_synthetic_context(int context, uint64_t seed) {
  KVLAB_REQUIRE(batch_ > 0, "fill_synthetic_context: no sequences (call start)");
  KVLAB_REQUIRE(context >= 0 && context < opt_.max_context,
                "fill_synthetic_context: context " << context << " outside [0, max_context "
                                                   << opt_.max_context << ")");
  Impl& I = *impl_;
  const int64_t total = int64_t{batch_} * context;
  if (total > 0) {
    // One chunk of random q/k/v rows (unit scale), rotated and appended at every chunk of
    // (sequence, position) pairs of every layer: the cache then holds position-dependent,
    // properly quantized K/V in any format. Reusing the rows keeps the fill at the append's
    // own bandwidth (a fresh random row per token and layer would cost 100s of GB of writes
    // for the large shapes); timing does not depend on the values.
    const int64_t chunk = std::min<int64_t>(total, 8192);
    thrust::device_vector<float> qkv(chunk * cfg_.qkv_dim());
    thrust::device_vector<int32_t> pos(chunk);
    thrust::device_vector<int64_t> slots(chunk);
    ks::fill_synthetic_f32(ptr(qkv), chunk * cfg_.qkv_dim(), seed, uint64_t{0xF1} << 56, 1.0f,
                           I.stream);
    std::vector<int32_t> hpos(chunk);
    std::vector<int64_t> hslots(chunk);
    for (int64_t t0 = 0; t0 < total; t0 += chunk) {
      const int64_t n = std::min(chunk, total - t0);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t t = t0 + i;
        const int64_t seq = t / context;
        const int p = static_cast<int>(t % context);
        hpos[i] = p;
        hslots[i] = I.table->slot(seq, p);
      }
      KVLAB_CUDA_CHECK(
          cudaMemcpyAsync(ptr(pos), hpos.data(), n * 4, cudaMemcpyHostToDevice, I.stream));
      KVLAB_CUDA_CHECK(
          cudaMemcpyAsync(ptr(slots), hslots.data(), n * 8, cudaMemcpyHostToDevice, I.stream));
      for (int l = 0; l < cfg_.layers; ++l)
        ks::rope_append(ptr(qkv), cfg_.qkv_dim(), cfg_.q_heads, ptr(pos), ptr(slots), ptr(I.rope),
                        opt_.max_context, nullptr, I.views[l], static_cast<int>(n), I.stream);
      KVLAB_CUDA_CHECK(cudaStreamSynchronize(I.stream));  // the host vectors are reused
    }
  }
  positions_.assign(batch_, context);
  std::vector<int32_t> hp(opt_.max_batch, -1);
  std::fill(hp.begin(), hp.begin() + batch_, context);
  KVLAB_CUDA_CHECK(cudaMemcpyAsync(ptr(I.positions), hp.data(), hp.size() * 4,
                                   cudaMemcpyHostToDevice, I.stream));
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(I.stream));
}

namespace {

// The step body for m rows: every launch on I.stream, nothing allocated, no host sync.
void enqueue_step(DecodeStepExecutor::Impl& I, const DecoderConfig& c, const ExecutorOptions& opt,
                  int m, bool fused, const Sampling& smp) {
  cudaStream_t st = I.stream;
  const int H = c.hidden, F = c.ffn, V = c.vocab, D = c.head_dim;
  const int qd = c.q_dim(), kvd = c.kv_dim(), qkvd = c.qkv_dim();
  const float eps = c.rms_eps;
  const auto& wp = I.wplan;

  ks::step_prepare(ptr(I.positions), ptr(I.block_table), I.bps, opt.block_size, ptr(I.slots),
                   ptr(I.seq_lens), m, st);
  ks::embed_gather(ptr(I.tokens), I.w(wp.embedding), ptr(I.h), m, H, st);
  ks::rmsnorm(ptr(I.h), I.w(wp.layers[0].attn_norm), ptr(I.xn), m, H, eps, st);
  for (int l = 0; l < c.layers; ++l) {
    const auto& lo = wp.layers[l];
    if (fused) {
      I.lin->forward(ptr(I.xn), H, I.w(lo.wqkv), qkvd, H, ptr(I.qkv), qkvd, m);
      ks::rope_append(ptr(I.qkv), qkvd, c.q_heads, ptr(I.positions), ptr(I.slots), ptr(I.rope),
                      opt.max_context, ptr(I.q), I.views[l], m, st);
    } else {
      float* qf = ptr(I.qkv);
      float* kf = qf + int64_t{m} * qd;
      float* vf = kf + int64_t{m} * kvd;
      I.lin->forward(ptr(I.xn), H, I.w(lo.wqkv), qd, H, qf, qd, m);
      I.lin->forward(ptr(I.xn), H, I.w(lo.wqkv) + int64_t{qd} * H, kvd, H, kf, kvd, m);
      I.lin->forward(ptr(I.xn), H, I.w(lo.wqkv) + int64_t{qd + kvd} * H, kvd, H, vf, kvd, m);
      ks::rope_inplace(qf, qd, c.q_heads, D, ptr(I.positions), ptr(I.rope), opt.max_context, m, st);
      ks::rope_inplace(kf, kvd, c.kv_heads, D, ptr(I.positions), ptr(I.rope), opt.max_context, m,
                       st);
      ks::cast_bf16(qf, qd, ptr(I.q), m, qd, st);
      AppendArgs a;
      a.in_dtype = DType::kF32;
      a.k = kf;
      a.v = vf;
      a.slot_mapping = ptr(I.slots);
      a.num_tokens = m;
      a.kv = I.views[l];
      append_kv(a, st, SlotCheck::kTrusted);  // slots come from step_prepare; no sync in capture
    }
    const DecodeArgs da = I.attn_args(c, opt, l, m);
    I.run_attention(c, opt, da, st);
    I.lin->forward(ptr(I.o), qd, I.w(lo.wo), H, qd, ptr(I.y), H, m);
    if (fused) {
      ks::add_rmsnorm(ptr(I.h), ptr(I.y), I.w(lo.mlp_norm), ptr(I.xn), m, H, eps, st);
      I.lin->forward(ptr(I.xn), H, I.w(lo.wgu), 2 * F, H, ptr(I.gu), 2 * F, m);
      ks::swiglu(ptr(I.gu), ptr(I.act), m, F, st);
    } else {
      ks::residual_add(ptr(I.h), ptr(I.y), m, H, st);
      ks::rmsnorm(ptr(I.h), I.w(lo.mlp_norm), ptr(I.xn), m, H, eps, st);
      float* g = ptr(I.gu);
      float* u = g + int64_t{m} * F;
      I.lin->forward(ptr(I.xn), H, I.w(lo.wgu), F, H, g, F, m);
      I.lin->forward(ptr(I.xn), H, I.w(lo.wgu) + int64_t{F} * H, F, H, u, F, m);
      ks::silu(g, F, ptr(I.s), m, F, st);
      ks::mul_bf16(ptr(I.s), u, F, ptr(I.act), m, F, st);
    }
    I.lin->forward(ptr(I.act), F, I.w(lo.wdown), H, F, ptr(I.y), H, m);
    const uint16_t* next_gamma =
        l + 1 < c.layers ? I.w(wp.layers[l + 1].attn_norm) : I.w(wp.final_norm);
    if (fused) {
      ks::add_rmsnorm(ptr(I.h), ptr(I.y), next_gamma, ptr(I.xn), m, H, eps, st);
    } else {
      ks::residual_add(ptr(I.h), ptr(I.y), m, H, st);
      ks::rmsnorm(ptr(I.h), next_gamma, ptr(I.xn), m, H, eps, st);
    }
  }
  I.lin->forward(ptr(I.xn), H, I.w(wp.lm_head), V, H, ptr(I.logits), V, m);
  if (smp.top_k == 0)
    ks::sample_greedy(ptr(I.logits), V, V, m, ptr(I.tokens), st);
  else
    ks::sample_top_k(ptr(I.logits), V, V, m, smp.top_k, smp.temperature, smp.seed, ptr(I.positions),
                     ptr(I.tokens), st);
  ks::step_advance(ptr(I.positions), m, st);
}

void validate_sampling(const Sampling& s, int vocab) {
  KVLAB_REQUIRE(s.top_k >= 0 && s.top_k <= ks::kMaxTopK && s.top_k <= vocab,
                "sampling top_k " << s.top_k << " outside [0, min(" << ks::kMaxTopK << ", vocab "
                                  << vocab << ")] (0 = greedy)");
  KVLAB_REQUIRE(s.top_k == 0 || (std::isfinite(s.temperature) && s.temperature > 0.0f),
                "sampling temperature " << s.temperature << " must be finite and > 0");
}

}  // namespace

void DecodeStepExecutor::step(const std::vector<int32_t>& tokens, StepVariant v,
                              const Sampling& s) {
  KVLAB_REQUIRE(batch_ > 0, "step: no sequences (call start)");
  KVLAB_REQUIRE(static_cast<int>(tokens.size()) == batch_,
                "step: " << tokens.size() << " tokens for a batch of " << batch_);
  for (size_t i = 0; i < tokens.size(); ++i)
    KVLAB_REQUIRE(tokens[i] >= 0 && tokens[i] < cfg_.vocab,
                  "step: token " << tokens[i] << " of row " << i << " outside [0, vocab "
                                 << cfg_.vocab << ")");
  KVLAB_CUDA_CHECK(cudaMemcpyAsync(ptr(impl_->tokens), tokens.data(), tokens.size() * 4,
                                   cudaMemcpyHostToDevice, impl_->stream));
  step(v, s);
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));  // `tokens` may go away after return
}

void DecodeStepExecutor::step(StepVariant v, const Sampling& s) {
  KVLAB_REQUIRE(batch_ > 0, "step: no sequences (call start)");
  validate_sampling(s, cfg_.vocab);
  for (int r = 0; r < batch_; ++r)
    KVLAB_REQUIRE(positions_[r] < opt_.max_context, "step: sequence "
                                                        << r << " is at position " << positions_[r]
                                                        << ", the engine holds max_context "
                                                        << opt_.max_context << " tokens");
  Impl& I = *impl_;
  const bool fused = is_fused(v);
  if (!is_graph(v)) {
    enqueue_step(I, cfg_, opt_, batch_, fused, s);
  } else {
    const int bucket = bucket_for(batch_);
    uint32_t tbits;
    std::memcpy(&tbits, &s.temperature, 4);
    const Impl::GraphKey key{bucket, fused, s.top_k, s.top_k ? tbits : 0u, s.top_k ? s.seed : 0u};
    auto it = I.graphs.find(key);
    if (it == I.graphs.end()) {
      // Warm-up run of the same body outside capture (module loading, cuBLAS heuristics),
      // with the inputs it consumes saved and restored: its KV writes land in the slots the
      // replay rewrites with the same values.
      KVLAB_CUDA_CHECK(cudaMemcpyAsync(ptr(I.tokens_bak), ptr(I.tokens), opt_.max_batch * 4,
                                       cudaMemcpyDeviceToDevice, I.stream));
      KVLAB_CUDA_CHECK(cudaMemcpyAsync(ptr(I.positions_bak), ptr(I.positions), opt_.max_batch * 4,
                                       cudaMemcpyDeviceToDevice, I.stream));
      enqueue_step(I, cfg_, opt_, bucket, fused, s);
      KVLAB_CUDA_CHECK(cudaMemcpyAsync(ptr(I.tokens), ptr(I.tokens_bak), opt_.max_batch * 4,
                                       cudaMemcpyDeviceToDevice, I.stream));
      KVLAB_CUDA_CHECK(cudaMemcpyAsync(ptr(I.positions), ptr(I.positions_bak), opt_.max_batch * 4,
                                       cudaMemcpyDeviceToDevice, I.stream));
      KVLAB_CUDA_CHECK(cudaStreamSynchronize(I.stream));
      cudaGraph_t graph = nullptr;
      KVLAB_CUDA_CHECK(cudaStreamBeginCapture(I.stream, cudaStreamCaptureModeThreadLocal));
      try {
        enqueue_step(I, cfg_, opt_, bucket, fused, s);
      } catch (...) {
        cudaStreamEndCapture(I.stream, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
      }
      KVLAB_CUDA_CHECK(cudaStreamEndCapture(I.stream, &graph));
      cudaGraphExec_t exec = nullptr;
      const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      KVLAB_CUDA_CHECK(e);
      it = I.graphs.emplace(key, exec).first;
    }
    KVLAB_CUDA_CHECK(cudaGraphLaunch(it->second, I.stream));
  }
  for (int r = 0; r < batch_; ++r) positions_[r] += 1;
}

double DecodeStepExecutor::time_steps(StepVariant v, const Sampling& s, int steps) {
  KVLAB_REQUIRE(steps >= 1, "time_steps: steps " << steps << " must be >= 1");
  Impl& I = *impl_;
  KVLAB_CUDA_CHECK(cudaEventRecord(I.ev0, I.stream));
  for (int i = 0; i < steps; ++i) step(v, s);
  KVLAB_CUDA_CHECK(cudaEventRecord(I.ev1, I.stream));
  KVLAB_CUDA_CHECK(cudaEventSynchronize(I.ev1));
  float ms = 0;
  KVLAB_CUDA_CHECK(cudaEventElapsedTime(&ms, I.ev0, I.ev1));
  return ms / steps;
}

void DecodeStepExecutor::prepare_linear(Linear which, int m) {
  KVLAB_REQUIRE(m >= 1 && m <= opt_.max_batch,
                "prepare_linear: M " << m << " outside [1, max_batch " << opt_.max_batch << "]");
  Impl& I = *impl_;
  int64_t k = 0;
  for (const auto& sh : linear_shapes(cfg_))
    if (sh.which == which) k = sh.k;
  // random BF16 input rows: a timed GEMM never reads zeros (gpu/README.md, "Measuring")
  ks::fill_synthetic_bf16(ptr(I.act), int64_t{m} * k, 0xC0FFEEull, 7, 1.0f, 0.0f, I.stream);
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(I.stream));
}

void DecodeStepExecutor::enqueue_linear(Linear which, int m, int layer) {
  KVLAB_REQUIRE(m >= 1 && m <= opt_.max_batch,
                "enqueue_linear: M " << m << " outside [1, max_batch " << opt_.max_batch << "]");
  KVLAB_REQUIRE(layer >= 0 && layer < cfg_.layers,
                "enqueue_linear: layer " << layer << " outside [0, " << cfg_.layers << ")");
  Impl& I = *impl_;
  int64_t n = 0, k = 0;
  for (const auto& sh : linear_shapes(cfg_))
    if (sh.which == which) n = sh.n, k = sh.k;
  const auto& lo = I.wplan.layers[layer];
  const uint16_t* w = nullptr;
  switch (which) {
    case Linear::kQkv:
      w = I.w(lo.wqkv);
      break;
    case Linear::kO:
      w = I.w(lo.wo);
      break;
    case Linear::kGateUp:
      w = I.w(lo.wgu);
      break;
    case Linear::kDown:
      w = I.w(lo.wdown);
      break;
    case Linear::kLmHead:
      w = I.w(I.wplan.lm_head);
      break;
  }
  float* out = which == Linear::kLmHead ? ptr(I.logits) : ptr(I.gu);
  I.lin->forward(ptr(I.act), k, w, static_cast<int>(n), static_cast<int>(k), out, n, m);
}

int DecodeStepExecutor::autotune_attention(int reps) {
  KVLAB_REQUIRE(batch_ > 0, "autotune_attention: no sequences (call start)");
  KVLAB_REQUIRE(reps >= 1, "autotune_attention: reps " << reps << " must be >= 1");
  Impl& I = *impl_;
  // seq_lens/slots for the current positions, and a Q to attend with
  ks::step_prepare(ptr(I.positions), ptr(I.block_table), I.bps, opt_.block_size, ptr(I.slots),
                   ptr(I.seq_lens), batch_, I.stream);
  ks::fill_synthetic_bf16(ptr(I.q), int64_t{batch_} * cfg_.q_dim(), 0xA77Eull, 3, 1.0f, 0.0f,
                          I.stream);
  int best = -1;
  double best_ms = 0;
  for (const auto& info : decode_versions()) {
    const DecodeArgs probe = I.attn_args(cfg_, opt_, 0, batch_);
    if (!decode_unsupported_reason(probe, info.id).empty()) continue;
    const size_t ws = decode_workspace_bytes(probe, info.id);
    thrust::device_vector<uint8_t> wsb(std::max<size_t>(ws, 1));
    auto run = [&] {
      for (int l = 0; l < cfg_.layers; ++l)
        decode_attention(I.attn_args(cfg_, opt_, l, batch_), info.id, ws ? ptr(wsb) : nullptr, ws,
                         I.stream);
    };
    run();
    KVLAB_CUDA_CHECK(cudaEventRecord(I.ev0, I.stream));
    for (int r = 0; r < reps; ++r) run();
    KVLAB_CUDA_CHECK(cudaEventRecord(I.ev1, I.stream));
    KVLAB_CUDA_CHECK(cudaEventSynchronize(I.ev1));
    float ms = 0;
    KVLAB_CUDA_CHECK(cudaEventElapsedTime(&ms, I.ev0, I.ev1));
    const double per = ms / (double(reps) * cfg_.layers);
    if (best < 0 || per < best_ms) best = info.id, best_ms = per;
  }
  KVLAB_UNSUPPORTED_IF(best < 0, "autotune_attention: no version supports this cache");
  if (best != I.attn_version) set_attn_version(best);
  return best;
}

// ------------------------------------------------------------------------------ serving
// One step scheduled by sim::Engine over the shared pool (see the header). The step's host
// inputs live in one int32 arena (layout, packing and the attention arguments over it:
// step_shapes.h, host code shared with the CPU test of those arguments).
namespace {

PagedPrefillArgs prefill_args(DecodeStepExecutor::Impl& I, const DecoderConfig& c,
                              const ExecutorOptions& opt, const ServingDims& d, int layer) {
  return serving_prefill_args(c, opt, d, ptr(I.srv_arena), I.views[layer], ptr(I.q), ptr(I.o));
}

DecodeArgs decode_args(DecodeStepExecutor::Impl& I, const DecoderConfig& c,
                       const ExecutorOptions& opt, const ServingDims& d, int layer) {
  return serving_decode_args(c, opt, d, ptr(I.srv_arena), I.views[layer], ptr(I.q), ptr(I.o));
}

// The fused step over the arena's rows: every launch on I.stream, nothing allocated, no sync.
void enqueue_serving(DecodeStepExecutor::Impl& I, const DecoderConfig& c,
                     const ExecutorOptions& opt, const ServingDims& d) {
  cudaStream_t st = I.stream;
  const int H = c.hidden, F = c.ffn, V = c.vocab;
  const int qd = c.q_dim(), qkvd = c.qkv_dim();
  const float eps = c.rms_eps;
  const auto& wp = I.wplan;
  const int m = d.rows;
  int32_t* A = ptr(I.srv_arena);
  const int32_t* positions = A + d.L.positions;
  const int64_t* slots = reinterpret_cast<const int64_t*>(A + d.L.slots);
  ks::embed_gather(A + d.L.tokens, I.w(wp.embedding), ptr(I.h), m, H, st);
  ks::rmsnorm(ptr(I.h), I.w(wp.layers[0].attn_norm), ptr(I.xn), m, H, eps, st);
  for (int l = 0; l < c.layers; ++l) {
    const auto& lo = wp.layers[l];
    I.lin->forward(ptr(I.xn), H, I.w(lo.wqkv), qkvd, H, ptr(I.qkv), qkvd, m);
    ks::rope_append(ptr(I.qkv), qkvd, c.q_heads, positions, slots, ptr(I.rope), opt.max_context,
                    ptr(I.q), I.views[l], m, st);
    if (d.nd > 0) I.run_attention(c, opt, decode_args(I, c, opt, d, l), st);
    if (d.np > 0) prefill_attention(prefill_args(I, c, opt, d, l), 0, st);
    I.lin->forward(ptr(I.o), qd, I.w(lo.wo), H, qd, ptr(I.y), H, m);
    ks::add_rmsnorm(ptr(I.h), ptr(I.y), I.w(lo.mlp_norm), ptr(I.xn), m, H, eps, st);
    I.lin->forward(ptr(I.xn), H, I.w(lo.wgu), 2 * F, H, ptr(I.gu), 2 * F, m);
    ks::swiglu(ptr(I.gu), ptr(I.act), m, F, st);
    I.lin->forward(ptr(I.act), F, I.w(lo.wdown), H, F, ptr(I.y), H, m);
    const uint16_t* next_gamma =
        l + 1 < c.layers ? I.w(wp.layers[l + 1].attn_norm) : I.w(wp.final_norm);
    ks::add_rmsnorm(ptr(I.h), ptr(I.y), next_gamma, ptr(I.xn), m, H, eps, st);
  }
  // The LM head over the sampled rows only (gathered), or over every row of a graph bucket.
  if (d.sampled > 0) {
    ks::gather_rows_16bit(ptr(I.xn), H, A + d.L.sample_rows, ptr(I.act), d.sampled, H, st);
    I.lin->forward(ptr(I.act), H, I.w(wp.lm_head), V, H, ptr(I.logits), V, d.sampled);
    ks::sample_greedy(ptr(I.logits), V, V, d.sampled, ptr(I.srv_sampled), st);
  } else if (d.graph) {
    I.lin->forward(ptr(I.xn), H, I.w(wp.lm_head), V, H, ptr(I.logits), V, m);
    ks::sample_greedy(ptr(I.logits), V, V, m, ptr(I.srv_sampled), st);
  }
}

}  // namespace

void DecodeStepExecutor::ensure_serving_buffers() {
  KVLAB_REQUIRE(opt_.pool_blocks > 0,
                "serving: the executor was built without a serving pool (pool_blocks = 0)");
  Impl& I = *impl_;
  if (!I.srv_arena.empty()) return;
  KVLAB_UNSUPPORTED_IF(opt_.kv_format != KvFormat::kBF16,
                       "serving: the paged prefill kernel reads bf16 caches; kv_format is "
                           << to_string(opt_.kv_format));
  const int64_t R = opt_.max_batch;
  // A serving step runs decode attention over any number of rows up to max_batch: size the
  // workspace for every one of them (split-KV plans need not grow monotonically with rows).
  size_t ws = I.attn_ws_bytes;
  for (int m = 1; m <= opt_.max_batch; ++m) ws = std::max(ws, I.attn_workspace(cfg_, opt_, m));
  if (ws > I.attn_ws_bytes) {
    I.drop_graphs();
    I.attn_ws.resize(ws);
    I.attn_ws_bytes = ws;
  }
  const ServingLayout L = serving_layout(R, R, R, R, I.bps);
  I.srv_arena.assign(static_cast<size_t>(L.total), 0);
  I.srv_sampled.assign(static_cast<size_t>(R), 0);
  KVLAB_CUDA_CHECK(cudaMallocHost(&I.srv_host, static_cast<size_t>(L.total) * 4));
  KVLAB_CUDA_CHECK(cudaMallocHost(&I.srv_host_sampled, static_cast<size_t>(R) * 4));
}

namespace {

// Host checks of a batch against the executor, and the dims it runs with.
ServingDims serving_dims(const DecodeStepExecutor& e, const sim::StepBatch& b, bool graph) {
  const ExecutorOptions& o = e.options();
  const int rows = b.num_rows(), nd = b.num_decode, ns = b.num_seqs();
  KVLAB_REQUIRE(rows >= 1, "serving_step: an empty batch");
  KVLAB_REQUIRE(rows <= o.max_batch,
                "serving_step: " << rows << " token rows, the executor holds " << o.max_batch);
  KVLAB_REQUIRE(b.max_blocks_per_seq == e.blocks_per_seq(),
                "serving_step: block tables of "
                    << b.max_blocks_per_seq << " columns, the executor has " << e.blocks_per_seq());
  KVLAB_REQUIRE(
      static_cast<int>(b.q_start.size()) == ns + 1 && b.q_start.back() == rows &&
          static_cast<int>(b.seq_lens.size()) == ns &&
          static_cast<int64_t>(b.block_table.size()) == int64_t{ns} * b.max_blocks_per_seq &&
          static_cast<int>(b.positions.size()) == rows &&
          static_cast<int>(b.slots.size()) == rows && nd <= ns && nd <= rows,
      "serving_step: inconsistent batch arrays");
  for (int i = 0; i < rows; ++i)
    KVLAB_REQUIRE(b.positions[i] >= 0 && b.positions[i] < o.max_context && b.tokens[i] >= 0 &&
                      b.tokens[i] < e.config().vocab && b.slots[i] >= 0 &&
                      b.slots[i] < int64_t{o.pool_blocks} * o.block_size,
                  "serving_step: row " << i << " (token " << b.tokens[i] << ", position "
                                       << b.positions[i] << ", slot " << b.slots[i]
                                       << ") outside the executor's vocab, context or pool");
  for (int32_t s : b.sample_rows)
    KVLAB_REQUIRE(s >= 0 && s < rows, "serving_step: sample row " << s << " outside the batch");
  return serving_step_dims(b, e.blocks_per_seq(), graph, graph ? e.bucket_for(nd) : 0);
}

}  // namespace

double DecodeStepExecutor::serving_step(const sim::StepBatch& batch, bool use_graph,
                                        std::vector<int32_t>* sampled) {
  KVLAB_REQUIRE(sampled != nullptr, "serving_step: null output");
  ensure_serving_buffers();
  Impl& I = *impl_;
  const bool graph = serving_graph_for(batch, use_graph);
  const ServingDims d = serving_dims(*this, batch, graph);
  pack_serving(batch, d, I.bps, I.srv_host);
  KVLAB_CUDA_CHECK(cudaEventRecord(I.ev0, I.stream));
  KVLAB_CUDA_CHECK(cudaMemcpyAsync(ptr(I.srv_arena), I.srv_host, static_cast<size_t>(d.L.total) * 4,
                                   cudaMemcpyHostToDevice, I.stream));
  if (graph) {
    auto it = I.srv_graphs.find(d.rows);
    KVLAB_REQUIRE(it != I.srv_graphs.end(), "serving_step: no CUDA graph captured for bucket "
                                                << d.rows << " (call warm_up_serving)");
    KVLAB_CUDA_CHECK(cudaGraphLaunch(it->second, I.stream));
  } else {
    enqueue_serving(I, cfg_, opt_, d);
  }
  const int out_rows = graph ? d.rows : d.sampled;
  if (out_rows > 0)
    KVLAB_CUDA_CHECK(cudaMemcpyAsync(I.srv_host_sampled, ptr(I.srv_sampled),
                                     static_cast<size_t>(out_rows) * 4, cudaMemcpyDeviceToHost,
                                     I.stream));
  KVLAB_CUDA_CHECK(cudaEventRecord(I.ev1, I.stream));
  KVLAB_CUDA_CHECK(cudaEventSynchronize(I.ev1));
  sampled->clear();
  for (size_t k = 0; k < batch.sample_rows.size(); ++k)
    sampled->push_back(I.srv_host_sampled[graph ? batch.sample_rows[k] : static_cast<int>(k)]);
  I.srv_last_graph = graph;
  I.srv_last_rows = d.rows;
  float ms = 0;
  KVLAB_CUDA_CHECK(cudaEventElapsedTime(&ms, I.ev0, I.ev1));
  return ms;
}

void DecodeStepExecutor::warm_up_serving(bool use_graph) {
  ensure_serving_buffers();
  Impl& I = *impl_;
  // Non-zero K/V everywhere (bf16 values of unit scale): no step ever attends over zeros.
  ks::fill_synthetic_bf16(reinterpret_cast<uint16_t*>(ptr(I.cache)),
                          static_cast<int64_t>(I.cache.size() / 2), cfg_.seed, 0x5E7Dull, 1.0f,
                          0.0f, I.stream);
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(I.stream));
  if (use_graph) {
    std::vector<int> buckets = opt_.graph_buckets;
    if (buckets.empty())
      for (int b = 1;; b *= 2) {
        buckets.push_back(std::min(b, opt_.max_batch));
        if (b >= opt_.max_batch) break;
      }
    for (int b : buckets) {
      if (I.srv_graphs.count(b)) continue;
      ServingDims d;
      d.graph = true;
      d.rows = d.nd = b;
      d.L = serving_layout(b, b, 0, 0, I.bps);
      sim::StepBatch none;  // every row padding
      none.q_start = {0};
      none.max_blocks_per_seq = I.bps;
      pack_serving(none, d, I.bps, I.srv_host);
      KVLAB_CUDA_CHECK(cudaMemcpyAsync(ptr(I.srv_arena), I.srv_host,
                                       static_cast<size_t>(d.L.total) * 4, cudaMemcpyHostToDevice,
                                       I.stream));
      enqueue_serving(I, cfg_, opt_, d);  // module loading and cuBLAS heuristics, uncaptured
      KVLAB_CUDA_CHECK(cudaStreamSynchronize(I.stream));
      cudaGraph_t g = nullptr;
      KVLAB_CUDA_CHECK(cudaStreamBeginCapture(I.stream, cudaStreamCaptureModeThreadLocal));
      try {
        enqueue_serving(I, cfg_, opt_, d);
      } catch (...) {
        cudaStreamEndCapture(I.stream, &g);
        if (g) cudaGraphDestroy(g);
        throw;
      }
      KVLAB_CUDA_CHECK(cudaStreamEndCapture(I.stream, &g));
      cudaGraphExec_t exec = nullptr;
      const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
      cudaGraphDestroy(g);
      KVLAB_CUDA_CHECK(e);
      I.srv_graphs.emplace(b, exec);
    }
  }
  // One eager step with a prefill chunk and a decode row (first launches of every kernel).
  sim::SyntheticStep spec;
  spec.decode_seqs = 1;
  spec.decode_context = 1;
  spec.prefill_seqs = 1;
  spec.prefill_tokens = std::min(32, std::max(2, opt_.max_batch - 1));
  spec.prefill_context = 0;
  spec.prefill_samples = true;
  if (spec.prefill_tokens + 1 <= opt_.max_batch &&
      sim::synthetic_step_blocks(spec, opt_.block_size) <= opt_.pool_blocks &&
      spec.prefill_tokens < opt_.max_context) {
    const sim::StepBatch b =
        sim::synthetic_step_batch(spec, opt_.block_size, opt_.pool_blocks, I.bps, cfg_.vocab);
    std::vector<int32_t> out;
    serving_step(b, false, &out);
  }
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(I.stream));
}

DecodeStepExecutor::ServingPartTimes DecodeStepExecutor::time_serving_parts(
    const sim::StepBatch& batch, bool use_graph, int reps) {
  KVLAB_REQUIRE(reps >= 1, "time_serving_parts: reps " << reps << " must be >= 1");
  ensure_serving_buffers();
  Impl& I = *impl_;
  const bool graph = serving_graph_for(batch, use_graph);
  const ServingDims d = serving_dims(*this, batch, graph);
  // The arena must hold this batch: upload it again (the last step may have been another).
  pack_serving(batch, d, I.bps, I.srv_host);
  KVLAB_CUDA_CHECK(cudaMemcpyAsync(ptr(I.srv_arena), I.srv_host, static_cast<size_t>(d.L.total) * 4,
                                   cudaMemcpyHostToDevice, I.stream));
  const DecoderConfig& c = cfg_;
  const int H = c.hidden, F = c.ffn, V = c.vocab, qd = c.q_dim(), qkvd = c.qkv_dim();
  const auto& wp = I.wplan;
  auto median_ms = [&](const std::function<void()>& part) {
    std::vector<float> v;
    for (int r = 0; r < reps; ++r) {
      KVLAB_CUDA_CHECK(cudaEventRecord(I.ev0, I.stream));
      part();
      KVLAB_CUDA_CHECK(cudaEventRecord(I.ev1, I.stream));
      KVLAB_CUDA_CHECK(cudaEventSynchronize(I.ev1));
      float ms = 0;
      KVLAB_CUDA_CHECK(cudaEventElapsedTime(&ms, I.ev0, I.ev1));
      v.push_back(ms);
    }
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? double(v[v.size() / 2])
                        : 0.5 * (double(v[v.size() / 2 - 1]) + double(v[v.size() / 2]));
  };
  ServingPartTimes t;
  t.rows = d.rows;
  t.lm_rows = graph ? d.rows : d.sampled;
  const int m = d.rows;
  t.gemm_ms = median_ms([&] {
    for (int l = 0; l < c.layers; ++l) {
      const auto& lo = wp.layers[l];
      I.lin->forward(ptr(I.xn), H, I.w(lo.wqkv), qkvd, H, ptr(I.qkv), qkvd, m);
      I.lin->forward(ptr(I.o), qd, I.w(lo.wo), H, qd, ptr(I.y), H, m);
      I.lin->forward(ptr(I.xn), H, I.w(lo.wgu), 2 * F, H, ptr(I.gu), 2 * F, m);
      I.lin->forward(ptr(I.act), F, I.w(lo.wdown), H, F, ptr(I.y), H, m);
    }
  });
  if (t.lm_rows > 0)
    t.lm_head_ms = median_ms([&] {
      I.lin->forward(graph ? ptr(I.xn) : ptr(I.act), H, I.w(wp.lm_head), V, H, ptr(I.logits), V,
                     t.lm_rows);
    });
  if (d.nd > 0)
    t.decode_attn_ms = median_ms([&] {
      for (int l = 0; l < c.layers; ++l)
        I.run_attention(cfg_, opt_, decode_args(I, c, opt_, d, l), I.stream);
    });
  if (d.np > 0)
    t.prefill_attn_ms = median_ms([&] {
      for (int l = 0; l < c.layers; ++l)
        prefill_attention(prefill_args(I, c, opt_, d, l), 0, I.stream);
    });
  return t;
}

std::vector<float> DecodeStepExecutor::serving_logits(const sim::StepBatch& batch) const {
  synchronize();
  const Impl& I = *impl_;
  const size_t V = static_cast<size_t>(cfg_.vocab);
  std::vector<float> out(batch.sample_rows.size() * V);
  for (size_t k = 0; k < batch.sample_rows.size(); ++k) {
    const size_t row = I.srv_last_graph ? static_cast<size_t>(batch.sample_rows[k]) : k;
    KVLAB_CUDA_CHECK(cudaMemcpy(out.data() + k * V,
                                thrust::raw_pointer_cast(I.logits.data()) + row * V, V * 4,
                                cudaMemcpyDeviceToHost));
  }
  return out;
}

void DecodeStepExecutor::synchronize() const {
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
}

std::vector<float> DecodeStepExecutor::logits() const {
  synchronize();
  std::vector<float> out(static_cast<size_t>(batch_) * cfg_.vocab);
  KVLAB_CUDA_CHECK(cudaMemcpy(out.data(), thrust::raw_pointer_cast(impl_->logits.data()),
                              out.size() * 4, cudaMemcpyDeviceToHost));
  return out;
}

std::vector<int32_t> DecodeStepExecutor::sampled_tokens() const {
  synchronize();
  std::vector<int32_t> out(batch_);
  KVLAB_CUDA_CHECK(cudaMemcpy(out.data(), thrust::raw_pointer_cast(impl_->tokens.data()),
                              out.size() * 4, cudaMemcpyDeviceToHost));
  return out;
}

namespace {
std::vector<uint8_t> download(const void* p, size_t n) {
  std::vector<uint8_t> out(n);
  if (n) KVLAB_CUDA_CHECK(cudaMemcpy(out.data(), p, n, cudaMemcpyDeviceToHost));
  return out;
}
}  // namespace

std::vector<uint8_t> DecodeStepExecutor::k_pool(int layer) const {
  synchronize();
  return download(cache_view(layer).k, impl_->geom.bytes());
}
std::vector<uint8_t> DecodeStepExecutor::v_pool(int layer) const {
  synchronize();
  return download(cache_view(layer).v, impl_->geom.bytes());
}
std::vector<uint8_t> DecodeStepExecutor::k_scales(int layer) const {
  synchronize();
  return download(cache_view(layer).k_scales, impl_->geom.scale_bytes());
}
std::vector<uint8_t> DecodeStepExecutor::v_scales(int layer) const {
  synchronize();
  return download(cache_view(layer).v_scales, impl_->geom.scale_bytes());
}

}  // namespace kvlab::gpu
