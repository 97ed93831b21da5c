// step_kernels.cu: the decode step's elementwise, normalization and RoPE/append kernels.
//
// These kernels move little data next to the GEMMs and the attention (a few [M, hidden]
// FP32 rows per layer), so they are written for clarity and bitwise agreement between the
// fused and unfused forms rather than peak bandwidth: each fused kernel calls the same device
// helpers in the same order as its unfused chain (see step_kernels.h). No templates on
// shapes: one instance per kernel keeps CI's CUDA compile time small.
#include "gpu/step/step_kernels.h"

#include <cub/block/block_reduce.cuh>

#include <cmath>

#include "gpu/core/cuda_check.h"
#include "gpu/quant/append.cuh"
#include "reference/core/error.h"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"
#include "reference/step/step_math.h"

namespace kvlab::gpu::step {

namespace {

using kvlab::step::fadd_rn;
using kvlab::step::fmul_rn;

constexpr int kEltThreads = 256;
constexpr int kNormThreads = 256;

inline unsigned elt_blocks(int64_t n) {
  const int64_t b = (n + kEltThreads - 1) / kEltThreads;
  return static_cast<unsigned>(b < 65535 * 64 ? (b > 0 ? b : 1) : 65535 * 64);
}

// ------------------------------------------------------------------ synthetic fills
__global__ void fill_bf16_kernel(uint16_t* out, int64_t n, uint64_t seed, uint64_t stream_id,
                                 float scale, float offset) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = kvlab::step::synthetic_weight_bf16(seed, stream_id, i, scale, offset);
}

__global__ void fill_f32_kernel(float* out, int64_t n, uint64_t seed, uint64_t stream_id,
                                float scale) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = fmul_rn(
        kvlab::step::uniform_pm1(kvlab::step::hash3(seed, stream_id, static_cast<uint64_t>(i))),
        scale);
}

// ------------------------------------------------------------------ embedding
// grid (M), block 256: one token row per block.
__global__ void embed_kernel(const int32_t* tokens, const uint16_t* emb, float* h, int hidden) {
  const int m = blockIdx.x;
  const uint16_t* src = emb + static_cast<int64_t>(tokens[m]) * hidden;
  float* dst = h + static_cast<int64_t>(m) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = bf16_bits_to_float(src[i]);
}

// ------------------------------------------------------------------ RMSNorm
using NormReduce = cub::BlockReduce<float, kNormThreads>;

// 1 / sqrt(mean(row^2) + eps) of one row, identical in rmsnorm and add_rmsnorm: the same
// strided per-thread partial sums and the same block tree, so the same bits.
__device__ float row_inv_rms(const float* row, int hidden, float eps,
                             typename NormReduce::TempStorage& tmp, float* bcast) {
  float ss = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += kNormThreads)
    ss = fadd_rn(ss, fmul_rn(row[i], row[i]));
  const float total = NormReduce(tmp).Sum(ss);
  if (threadIdx.x == 0) *bcast = 1.0f / sqrtf(fadd_rn(total / static_cast<float>(hidden), eps));
  __syncthreads();
  return *bcast;
}

__device__ void write_normed(const float* row, const uint16_t* gamma, uint16_t* out, int hidden,
                             float inv) {
  for (int i = threadIdx.x; i < hidden; i += kNormThreads)
    out[i] = float_to_bf16_bits(fmul_rn(fmul_rn(row[i], inv), bf16_bits_to_float(gamma[i])),
                                Saturation::kSatFinite);
}

__global__ void __launch_bounds__(kNormThreads)
    rmsnorm_kernel(const float* h, const uint16_t* gamma, uint16_t* xn, int hidden, float eps) {
  __shared__ typename NormReduce::TempStorage tmp;
  __shared__ float bcast;
  const float* row = h + static_cast<int64_t>(blockIdx.x) * hidden;
  const float inv = row_inv_rms(row, hidden, eps, tmp, &bcast);
  write_normed(row, gamma, xn + static_cast<int64_t>(blockIdx.x) * hidden, hidden, inv);
}

__global__ void __launch_bounds__(kNormThreads)
    add_rmsnorm_kernel(float* h, const float* y, const uint16_t* gamma, uint16_t* xn, int hidden,
                       float eps) {
  __shared__ typename NormReduce::TempStorage tmp;
  __shared__ float bcast;
  float* row = h + static_cast<int64_t>(blockIdx.x) * hidden;
  const float* yr = y + static_cast<int64_t>(blockIdx.x) * hidden;
  // Each thread re-reads only the elements it wrote itself: no barrier needed before the sum.
  for (int i = threadIdx.x; i < hidden; i += kNormThreads) row[i] = fadd_rn(row[i], yr[i]);
  const float inv = row_inv_rms(row, hidden, eps, tmp, &bcast);
  write_normed(row, gamma, xn + static_cast<int64_t>(blockIdx.x) * hidden, hidden, inv);
}

__global__ void residual_add_kernel(float* h, const float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    h[i] = fadd_rn(h[i], y[i]);
}

// ------------------------------------------------------------------ RoPE
__device__ __forceinline__ int rope_row(int32_t pos) {
  return pos < 0 ? 0 : pos;
}

// grid (M, heads), block 64..: pairs (i, i + D/2) of one head.
__global__ void rope_kernel(float* x, int64_t ld, int head_dim, const int32_t* positions,
                            const float2* table) {
  const int m = blockIdx.x, head = blockIdx.y, half = head_dim / 2;
  float* v = x + static_cast<int64_t>(m) * ld + static_cast<int64_t>(head) * head_dim;
  const float2* cs = table + static_cast<int64_t>(rope_row(positions[m])) * half;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float y0, y1;
    kvlab::step::rope_rotate(v[i], v[i + half], cs[i].x, cs[i].y, &y0, &y1);
    v[i] = y0;
    v[i + half] = y1;
  }
}

__global__ void cast_bf16_kernel(const float* in, int64_t ld, uint16_t* out, int cols) {
  const float* r = in + static_cast<int64_t>(blockIdx.x) * ld;
  uint16_t* o = out + static_cast<int64_t>(blockIdx.x) * cols;
  for (int i = threadIdx.x; i < cols; i += blockDim.x)
    o[i] = float_to_bf16_bits(r[i], Saturation::kSatFinite);
}

// Fused RoPE + append + quantize. grid (M, ceil(units / kRopeWarps)), one warp per unit; a
// unit is a q head, a k head or a v head of one token. The warp stages the (roped) head
// vector in shared memory and writes K and V with append_row (gpu/quant/append.cuh: the
// append kernel's row writer), which reads the row whole (per-token amax, scale groups)
// exactly as the reference's append reads its input row.
constexpr int kRopeWarps = 4;

struct RopeAppendParams {
  const float* qkv;
  int64_t ld;
  int q_heads;
  const int32_t* positions;
  const int64_t* slot_mapping;
  const float2* table;
  uint16_t* q_out;
  KvCacheView kv;
};

__global__ void __launch_bounds__(kRopeWarps * 32) rope_append_kernel(RopeAppendParams p) {
  extern __shared__ float stage[];  // [kRopeWarps][head_dim]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m = blockIdx.x;
  const int unit = blockIdx.y * kRopeWarps + warp;
  const int kvh = p.kv.geom.num_kv_heads, D = p.kv.geom.head_dim, half = D / 2;
  if (unit >= p.q_heads + 2 * kvh) return;  // whole warp leaves together
  const bool is_q = unit < p.q_heads;
  const bool is_v = unit >= p.q_heads + kvh;
  const int64_t slot = p.slot_mapping[m];
  if (!is_q && slot < 0) return;  // padding token: nothing to append
  if (is_q && p.q_out == nullptr) return;
  const float* src = p.qkv + static_cast<int64_t>(m) * p.ld + static_cast<int64_t>(unit) * D;
  float* x = stage + warp * D;
  if (is_v) {
    for (int i = lane; i < D; i += 32) x[i] = src[i];
  } else {
    const float2* cs = p.table + static_cast<int64_t>(rope_row(p.positions[m])) * half;
    for (int i = lane; i < half; i += 32) {
      float y0, y1;
      kvlab::step::rope_rotate(src[i], src[i + half], cs[i].x, cs[i].y, &y0, &y1);
      x[i] = y0;
      x[i + half] = y1;
    }
  }
  __syncwarp();
  if (is_q) {
    uint16_t* q = p.q_out + (static_cast<int64_t>(m) * p.q_heads + unit) * D;
    for (int i = lane; i < D; i += 32) q[i] = float_to_bf16_bits(x[i], Saturation::kSatFinite);
    return;
  }
  const int head = is_v ? unit - p.q_heads - kvh : unit - p.q_heads;
  const int bs = p.kv.geom.block_size;
  append_row(
      p.kv, is_v, slot / bs, head, static_cast<int>(slot % bs), [x](int d) { return x[d]; }, lane);
}

// ------------------------------------------------------------------ SwiGLU
__device__ __forceinline__ float silu_f(float g) {
  return g / fadd_rn(1.0f, expf(-g));
}

__global__ void silu_kernel(const float* g, int64_t ld, float* s, int f) {
  const float* gr = g + static_cast<int64_t>(blockIdx.x) * ld;
  float* sr = s + static_cast<int64_t>(blockIdx.x) * f;
  for (int i = threadIdx.x; i < f; i += blockDim.x) sr[i] = silu_f(gr[i]);
}

__global__ void mul_bf16_kernel(const float* s, const float* u, int64_t ld_u, uint16_t* out,
                                int f) {
  const float* sr = s + static_cast<int64_t>(blockIdx.x) * f;
  const float* ur = u + static_cast<int64_t>(blockIdx.x) * ld_u;
  uint16_t* o = out + static_cast<int64_t>(blockIdx.x) * f;
  for (int i = threadIdx.x; i < f; i += blockDim.x)
    o[i] = float_to_bf16_bits(fmul_rn(sr[i], ur[i]), Saturation::kSatFinite);
}

__global__ void swiglu_kernel(const float* gu, uint16_t* out, int f) {
  const float* r = gu + static_cast<int64_t>(blockIdx.x) * 2 * f;
  uint16_t* o = out + static_cast<int64_t>(blockIdx.x) * f;
  for (int i = threadIdx.x; i < f; i += blockDim.x)
    o[i] = float_to_bf16_bits(fmul_rn(silu_f(r[i]), r[f + i]), Saturation::kSatFinite);
}

// ------------------------------------------------------------------ bookkeeping
__global__ void prepare_kernel(const int32_t* positions, const int32_t* block_table, int max_blocks,
                               int bs, int64_t* slots, int32_t* seq_lens, int m) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= m) return;
  const int32_t pos = positions[i];
  if (pos < 0) {
    slots[i] = -1;
    seq_lens[i] = 0;
    return;
  }
  slots[i] =
      static_cast<int64_t>(block_table[static_cast<int64_t>(i) * max_blocks + pos / bs]) * bs +
      pos % bs;
  seq_lens[i] = pos + 1;
}

__global__ void advance_kernel(int32_t* positions, int m) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < m && positions[i] >= 0) positions[i] += 1;
}

void require_rows(int m, int cols, const char* what) {
  KVLAB_REQUIRE(m >= 1 && m <= 65535 * 32, what << ": rows " << m << " outside [1, 2097120]");
  KVLAB_REQUIRE(cols >= 1, what << ": columns " << cols << " must be >= 1");
}

}  // namespace

void fill_synthetic_bf16(uint16_t* out, int64_t n, uint64_t seed, uint64_t stream_id, float scale,
                         float offset, cudaStream_t stream) {
  KVLAB_REQUIRE(n >= 0, "fill_synthetic_bf16: n " << n << " < 0");
  if (n == 0) return;
  fill_bf16_kernel<<<elt_blocks(n), kEltThreads, 0, stream>>>(out, n, seed, stream_id, scale,
                                                              offset);
  KVLAB_CHECK_LAUNCH();
}

void fill_synthetic_f32(float* out, int64_t n, uint64_t seed, uint64_t stream_id, float scale,
                        cudaStream_t stream) {
  KVLAB_REQUIRE(n >= 0, "fill_synthetic_f32: n " << n << " < 0");
  if (n == 0) return;
  fill_f32_kernel<<<elt_blocks(n), kEltThreads, 0, stream>>>(out, n, seed, stream_id, scale);
  KVLAB_CHECK_LAUNCH();
}

void embed_gather(const int32_t* tokens, const uint16_t* embedding, float* h, int m, int hidden,
                  cudaStream_t stream) {
  require_rows(m, hidden, "embed_gather");
  embed_kernel<<<m, 256, 0, stream>>>(tokens, embedding, h, hidden);
  KVLAB_CHECK_LAUNCH();
}

void rmsnorm(const float* h, const uint16_t* gamma, uint16_t* xn, int m, int hidden, float eps,
             cudaStream_t stream) {
  require_rows(m, hidden, "rmsnorm");
  rmsnorm_kernel<<<m, kNormThreads, 0, stream>>>(h, gamma, xn, hidden, eps);
  KVLAB_CHECK_LAUNCH();
}

void residual_add(float* h, const float* y, int m, int hidden, cudaStream_t stream) {
  require_rows(m, hidden, "residual_add");
  const int64_t n = static_cast<int64_t>(m) * hidden;
  residual_add_kernel<<<elt_blocks(n), kEltThreads, 0, stream>>>(h, y, n);
  KVLAB_CHECK_LAUNCH();
}

void add_rmsnorm(float* h, const float* y, const uint16_t* gamma, uint16_t* xn, int m, int hidden,
                 float eps, cudaStream_t stream) {
  require_rows(m, hidden, "add_rmsnorm");
  add_rmsnorm_kernel<<<m, kNormThreads, 0, stream>>>(h, y, gamma, xn, hidden, eps);
  KVLAB_CHECK_LAUNCH();
}

void rope_inplace(float* x, int64_t ld, int heads, int head_dim, const int32_t* positions,
                  const float* rope_table, int max_pos, int m, cudaStream_t stream) {
  require_rows(m, heads * head_dim, "rope_inplace");
  KVLAB_REQUIRE(head_dim >= 2 && head_dim % 2 == 0,
                "rope_inplace: head_dim " << head_dim << " must be even");
  KVLAB_REQUIRE(heads >= 1 && heads <= 65535,
                "rope_inplace: heads " << heads << " outside [1, 65535]");
  KVLAB_REQUIRE(max_pos >= 1, "rope_inplace: rope table of " << max_pos << " positions");
  const int threads = head_dim / 2 < 128 ? 64 : 128;
  rope_kernel<<<dim3(m, heads), threads, 0, stream>>>(x, ld, head_dim, positions,
                                                      reinterpret_cast<const float2*>(rope_table));
  KVLAB_CHECK_LAUNCH();
}

void cast_bf16(const float* in, int64_t ld, uint16_t* out, int m, int cols, cudaStream_t stream) {
  require_rows(m, cols, "cast_bf16");
  cast_bf16_kernel<<<m, 256, 0, stream>>>(in, ld, out, cols);
  KVLAB_CHECK_LAUNCH();
}

const char* rope_append_unsupported_reason(const KvCacheView& kv) {
  // The stage holds kRopeWarps rows of head_dim floats in shared memory.
  if (kv.geom.head_dim < 2 || kv.geom.head_dim > 1024) return "head_dim outside [2, 1024]";
  if (kv_format_bits(kv.geom.format) == 0) return "unknown KV format";
  return "";
}

void rope_append(const float* qkv, int64_t ld, int q_heads, const int32_t* positions,
                 const int64_t* slot_mapping, const float* rope_table, int max_pos, uint16_t* q_out,
                 const KvCacheView& kv, int m, cudaStream_t stream) {
  const PageGeometry& g = kv.geom;
  require_rows(m, g.head_dim, "rope_append");
  const char* why = rope_append_unsupported_reason(kv);
  KVLAB_UNSUPPORTED_IF(why[0] != '\0', "rope_append: " << why);
  KVLAB_REQUIRE(kv.k != nullptr && kv.v != nullptr, "rope_append: null K/V pool");
  kvlab::validate(g);
  const bool needs_scales =
      kv_format_has_token_scales(g.format) || kv_format_has_block_scales(g.format);
  KVLAB_REQUIRE(
      !needs_scales || (kv.k_scales != nullptr && kv.v_scales != nullptr),
      "rope_append: format " << to_string(g.format) << " needs k_scales and v_scales, got null");
  if (kv_format_has_pool_scale(g.format))
    KVLAB_REQUIRE(std::isfinite(kv.k_scale) && kv.k_scale > 0.0f && std::isfinite(kv.v_scale) &&
                      kv.v_scale > 0.0f,
                  "rope_append: format " << to_string(g.format)
                                         << " needs finite positive k_scale and v_scale, got "
                                         << kv.k_scale << " and " << kv.v_scale);
  KVLAB_REQUIRE(
      q_heads >= 1 && q_heads % g.num_kv_heads == 0,
      "rope_append: q_heads " << q_heads << " not a multiple of kv heads " << g.num_kv_heads);
  KVLAB_REQUIRE(ld >= static_cast<int64_t>(q_heads + 2 * g.num_kv_heads) * g.head_dim,
                "rope_append: row stride " << ld << " below the qkv width");
  KVLAB_REQUIRE(max_pos >= 1, "rope_append: rope table of " << max_pos << " positions");
  const int units = q_heads + 2 * g.num_kv_heads;
  const dim3 grid(m, (units + kRopeWarps - 1) / kRopeWarps);
  const size_t smem = sizeof(float) * kRopeWarps * g.head_dim;
  RopeAppendParams p{
      qkv,   ld, q_heads, positions, slot_mapping, reinterpret_cast<const float2*>(rope_table),
      q_out, kv};
  rope_append_kernel<<<grid, kRopeWarps * 32, smem, stream>>>(p);
  KVLAB_CHECK_LAUNCH();
}

void silu(const float* g, int64_t ld, float* s, int m, int f, cudaStream_t stream) {
  require_rows(m, f, "silu");
  silu_kernel<<<m, 256, 0, stream>>>(g, ld, s, f);
  KVLAB_CHECK_LAUNCH();
}

void mul_bf16(const float* s, const float* u, int64_t ld_u, uint16_t* out, int m, int f,
              cudaStream_t stream) {
  require_rows(m, f, "mul_bf16");
  mul_bf16_kernel<<<m, 256, 0, stream>>>(s, u, ld_u, out, f);
  KVLAB_CHECK_LAUNCH();
}

void swiglu(const float* gu, uint16_t* out, int m, int f, cudaStream_t stream) {
  require_rows(m, f, "swiglu");
  swiglu_kernel<<<m, 256, 0, stream>>>(gu, out, f);
  KVLAB_CHECK_LAUNCH();
}

void step_prepare(const int32_t* positions, const int32_t* block_table, int max_blocks,
                  int block_size, int64_t* slot_mapping, int32_t* seq_lens, int m,
                  cudaStream_t stream) {
  require_rows(m, 1, "step_prepare");
  KVLAB_REQUIRE(block_size >= 1 && max_blocks >= 1,
                "step_prepare: block_size " << block_size << ", max_blocks " << max_blocks);
  prepare_kernel<<<(m + 127) / 128, 128, 0, stream>>>(positions, block_table, max_blocks,
                                                      block_size, slot_mapping, seq_lens, m);
  KVLAB_CHECK_LAUNCH();
}

void step_advance(int32_t* positions, int m, cudaStream_t stream) {
  require_rows(m, 1, "step_advance");
  advance_kernel<<<(m + 127) / 128, 128, 0, stream>>>(positions, m);
  KVLAB_CHECK_LAUNCH();
}

}  // namespace kvlab::gpu::step
