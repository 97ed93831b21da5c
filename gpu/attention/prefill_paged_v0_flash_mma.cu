// prefill_paged_v0_flash_mma.cu: paged (chunked) prefill attention on the tensor cores,
// FlashAttention-2 style: one thread block per (query tile, sequence, KV head), Q.K^T and P.V
// on mma.sync m16n8k16, online softmax in registers, K/V tiles of the paged cache streamed
// through a two-stage cp.async pipeline.
//
// What and why (the first prefill version; kvlab had only decode kernels, and a serving step
// needs attention for many query tokens per sequence over the paged cache):
//  * GQA packing. The G = num_qo_heads / num_kv_heads query heads that share a KV head are
//    packed into the mma's M dimension: packed row r of a tile is token r / G, head r % G
//    (FlashInfer's layout). A tile holds 64 packed rows (64 / G tokens), so every K/V
//    element loaded into shared memory serves all G heads: the cache is read once per tile
//    instead of G times.
//  * Tensor cores for both products. Per warp (16 packed rows) and K/V tile of kN keys:
//      S [16 x kN]  = Q [16 x D] . K^T      Q fragments loaded once (ldmatrix), K fragments
//                                           by ldmatrix from [key][dim] rows (= col-major B)
//      O [16 x D]  += P [16 x kN] . V       P re-packed from the S accumulators (FA2), V
//                                           fragments by ldmatrix.trans
//    Q, K and V are 16-bit and exact as mma operands. P is rounded: it is split into
//    hi = RN16(P) and lo = RN16(P - hi) and both are multiplied (two mma per P.V step), so
//    P carries ~16 significant bits (bf16) and the output error stays far below one output
//    ulp (the decode versions do the same; a single rounding of P would give ~2^-9 relative
//    error per term, above the tolerance table's bound for short rows).
//  * Causal chunked-prefill semantics. Sequence s's chunk of q_len queries sits at positions
//    seq_len - q_len .. seq_len - 1; query p sees keys 0 .. p (its cached prefix and the
//    chunk causally). A tile loops over keys [0, last position of its tokens + 1) only;
//    masking (score -inf) is applied per element (key > query position). Keys past the
//    tile's bound are never loaded (zero-filled cp.async, so unused slots holding NaN are
//    never read), and a masked probability is exactly 0.
//  * Online softmax in base 2 (scores scaled by sm_scale * log2 e once), row max and sum
//    reduced over the 4 threads of a quad; the output is divided by the sum at the end and
//    rounded once; lse = (m * ln 2) + ln(l), natural log as DecodeArgs::lse.
//  * Memory: a 16-byte-per-thread cp.async.cg pipeline with two stages of K and V tiles
//    (kN keys each) in padded shared-memory rows (head_dim + 8 elements: conflict-free
//    ldmatrix), the page of each key looked up in the block table per 16-byte chunk (L1
//    hits after the first). Tiles are scheduled longest-first (the last query tile of a
//    sequence attends over the most keys).
// Limits (prefill_unsupported_reason): 16-bit caches (bf16, fp16) with Q of the same type,
// NHD or HND layout (a token's head_dim elements contiguous), head_dim 64/128/256
// (dispatch.cuh), GQA group <= 64. Instances: 3 head_dims x 2 element types.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include "gpu/attention/prefill_impl.h"
#include "gpu/attention/mma_ptx.cuh"
#include "gpu/core/cuda_check.h"
#include "gpu/dispatch.cuh"
#include "reference/layout/layout_names.h"

namespace kvlab::gpu {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTileRows = kWarps * 16;  // packed (token, head) rows per block
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Keys per K/V tile: 64 up to head_dim 128, 32 for 256 (shared memory and registers).
template <int kD>
constexpr int keys_per_tile() {
  return kD <= 128 ? 64 : 32;
}
template <int kD>
constexpr int smem_row() {
  return kD + 8;  // elements; +16 bytes: 8 consecutive rows hit 8 different bank groups
}
template <int kD>
constexpr size_t smem_bytes() {
  return 2u * (static_cast<size_t>(kTileRows) + 4u * keys_per_tile<kD>()) * smem_row<kD>();
}

struct PrefillParams {
  const uint16_t* q;  // [num_q_tokens, num_qo_heads, head_dim]
  uint16_t* o;        // [num_q_tokens, num_qo_heads, head_dim]
  float* lse;         // [num_q_tokens, num_qo_heads] or null
  const uint16_t* k;  // K pool (16-bit elements)
  const uint16_t* v;  // V pool
  PageGeometry geom;
  const int32_t* q_start;      // [num_seqs + 1]
  const int32_t* seq_lens;     // [num_seqs]
  const int32_t* block_table;  // [num_seqs, max_blocks_per_seq]
  int max_blocks_per_seq;
  int num_qo_heads;
  int group;            // G
  int tokens_per_tile;  // kTileRows / G
  float scale_log2;     // sm_scale * log2(e)
};

// ------------------------------------------------------------------ device helpers
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;  // 0: zero-fill, nothing read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int kN>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kN));
}
// Four 8x8 b16 matrices (not transposed): lane l gives row (l % 8) of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem_row) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// Loads keys [n0, n0 + kN) of one KV head into a [kN][kD + 8] tile; keys >= n_end are
// zero-filled without reading (unused slots may hold NaN).
template <int kD, int kN>
__device__ __forceinline__ void load_kv_tile(const PrefillParams& p, const uint16_t* pool,
                                             const int32_t* table_row, int kv_head, int n0,
                                             int n_end, uint16_t* tile) {
  constexpr int kChunks = kD / 8;  // 16-byte chunks per key row
  for (int c = threadIdx.x; c < kN * kChunks; c += kThreads) {
    const int key = c / kChunks, ch = c % kChunks;
    const int t = n0 + key;
    const bool valid = t < n_end;
    const uint16_t* src = pool;
    if (valid) {
      const int32_t page = table_row[t / p.geom.block_size];
      src = pool + p.geom.k_index(page, kv_head, t % p.geom.block_size, ch * 8);
    }
    cp_async16(tile + key * smem_row<kD>() + ch * 8, src, valid);
  }
}

// ------------------------------------------------------------------ kernel
template <int kD, bool kF16>
__global__ void __launch_bounds__(kThreads)
    prefill_paged_flash_mma_kernel(const __grid_constant__ PrefillParams p) {
  constexpr int kN = keys_per_tile<kD>();
  constexpr int kRow = smem_row<kD>();
  constexpr int kKSteps = kD / 16;  // mma k-steps over head_dim (Q.K^T)
  constexpr int kNTiles = kN / 8;   // n-tiles of 8 keys in S
  constexpr int kDTiles = kD / 8;   // n-tiles of 8 dims in O
  extern __shared__ __align__(16) uint16_t smem[];
  uint16_t* q_s = smem;                      // [kTileRows][kRow]
  uint16_t* kv_s = smem + kTileRows * kRow;  // 2 stages x (K [kN][kRow], V [kN][kRow])

  const int seq = blockIdx.y, kv_head = blockIdx.z;
  const int q0 = p.q_start[seq];
  const int q_len = p.q_start[seq + 1] - q0;
  // Longest-first: block x = 0 takes the sequence's last tile (the most keys).
  const int tile = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
  const int tok0 = tile * p.tokens_per_tile;
  if (tok0 >= q_len) return;
  const int tile_tokens = min(p.tokens_per_tile, q_len - tok0);
  const int seq_len = p.seq_lens[seq];
  const int prefix = seq_len - q_len;  // cached tokens before the chunk
  // Keys this tile attends: up to its last token's position.
  const int n_end = prefix + tok0 + tile_tokens;
  const int32_t* table_row = p.block_table + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const int G = p.group;

  // Q tile: packed row r = (token r / G, head kv_head * G + r % G); rows past the tile's
  // tokens are zero-filled (never stored).
  {
    constexpr int kChunks = kD / 8;
    for (int c = threadIdx.x; c < kTileRows * kChunks; c += kThreads) {
      const int r = c / kChunks, ch = c % kChunks;
      const int tok = r / G;
      const bool valid = tok < tile_tokens && r < p.tokens_per_tile * G;
      const uint16_t* src = p.q;
      if (valid)
        src = p.q +
              (static_cast<int64_t>(q0 + tok0 + tok) * p.num_qo_heads + kv_head * G + r % G) * kD +
              ch * 8;
      cp_async16(q_s + r * kRow + ch * 8, src, valid);
    }
  }
  const int num_tiles = (n_end + kN - 1) / kN;
  load_kv_tile<kD, kN>(p, p.k, table_row, kv_head, 0, n_end, kv_s);
  load_kv_tile<kD, kN>(p, p.v, table_row, kv_head, 0, n_end, kv_s + kN * kRow);
  cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;
  // The two packed rows this thread owns in the accumulators: g and g + 8 of its warp.
  int qpos[2];
  bool row_valid[2];
  for (int i = 0; i < 2; ++i) {
    const int r = warp * 16 + g + 8 * i;
    const int tok = r / G;
    row_valid[i] = tok < tile_tokens && r < p.tokens_per_tile * G;
    qpos[i] = row_valid[i] ? prefix + tok0 + tok : -1;  // -1: every key masked
  }

  uint32_t qf[kKSteps][4];
  float o_acc[kDTiles][4];
  for (int d = 0; d < kDTiles; ++d)
    for (int j = 0; j < 4; ++j) o_acc[d][j] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  for (int it = 0; it < num_tiles; ++it) {
    const int stage = it & 1;
    if (it + 1 < num_tiles) {
      uint16_t* next = kv_s + (stage ^ 1) * 2 * kN * kRow;
      load_kv_tile<kD, kN>(p, p.k, table_row, kv_head, (it + 1) * kN, n_end, next);
      load_kv_tile<kD, kN>(p, p.v, table_row, kv_head, (it + 1) * kN, n_end, next + kN * kRow);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (it == 0) {
      // Q fragments, once: matrix m = lane / 8 covers rows +8*(m%2), dims +8*(m/2).
      for (int kk = 0; kk < kKSteps; ++kk)
        ldmatrix_x4(qf[kk], q_s + (warp * 16 + (lane % 16)) * kRow + kk * 16 + (lane / 16) * 8);
    }
    const uint16_t* k_s = kv_s + stage * 2 * kN * kRow;
    const uint16_t* v_s = k_s + kN * kRow;
    const int n0 = it * kN;

    // S = Q K^T: for each pair of 8-key n-tiles, ldmatrix x4 gives b0/b1 of both.
    float s[kNTiles][4];
    for (int n = 0; n < kNTiles; ++n)
      for (int j = 0; j < 4; ++j) s[n][j] = 0.0f;
    for (int kk = 0; kk < kKSteps; ++kk) {
      for (int n = 0; n < kNTiles; n += 2) {
        uint32_t b[4];
        const int m = lane / 8;
        ldmatrix_x4(b, k_s + (n * 8 + (m / 2) * 8 + lane % 8) * kRow + kk * 16 + (m % 2) * 8);
        mma::mma16816<kF16>(s[n], qf[kk], b[0], b[1]);
        mma::mma16816<kF16>(s[n + 1], qf[kk], b[2], b[3]);
      }
    }

    // Scale, mask, online softmax (rows g and g + 8: accumulator elements {0,1} and {2,3}).
    float m_new[2] = {m_run[0], m_run[1]};
    for (int n = 0; n < kNTiles; ++n)
      for (int j = 0; j < 4; ++j) {
        const int i = j / 2;
        const int key = n0 + n * 8 + 2 * t4 + (j % 2);
        const float x = key <= qpos[i] ? s[n][j] * p.scale_log2 : -INFINITY;
        s[n][j] = x;
        m_new[i] = fmaxf(m_new[i], x);
      }
    float alpha[2];
    for (int i = 0; i < 2; ++i) {
      m_new[i] = fmaxf(m_new[i], __shfl_xor_sync(0xffffffffu, m_new[i], 1));
      m_new[i] = fmaxf(m_new[i], __shfl_xor_sync(0xffffffffu, m_new[i], 2));
      // A row with every key masked so far keeps m = -inf: shift by 0 (exp2(-inf) = 0).
      const float shift = m_new[i] == -INFINITY ? 0.0f : m_new[i];
      alpha[i] = exp2f(m_run[i] - shift);
      m_run[i] = m_new[i];
      m_new[i] = shift;
    }
    float rowsum[2] = {0.0f, 0.0f};
    for (int n = 0; n < kNTiles; ++n)
      for (int j = 0; j < 4; ++j) {
        const float e = exp2f(s[n][j] - m_new[j / 2]);
        s[n][j] = e;
        rowsum[j / 2] += e;
      }
    for (int i = 0; i < 2; ++i) {
      rowsum[i] += __shfl_xor_sync(0xffffffffu, rowsum[i], 1);
      rowsum[i] += __shfl_xor_sync(0xffffffffu, rowsum[i], 2);
      l_run[i] = l_run[i] * alpha[i] + rowsum[i];
    }
    for (int d = 0; d < kDTiles; ++d) {
      o_acc[d][0] *= alpha[0];
      o_acc[d][1] *= alpha[0];
      o_acc[d][2] *= alpha[1];
      o_acc[d][3] *= alpha[1];
    }

    // O += P V over 16-key steps: P's A fragment comes from two S n-tiles (hi + lo).
    for (int kk = 0; kk < kN / 16; ++kk) {
      uint32_t ah[4], al[4];
      mma::split2<kF16>(s[2 * kk][0], s[2 * kk][1], ah[0], al[0]);
      mma::split2<kF16>(s[2 * kk][2], s[2 * kk][3], ah[1], al[1]);
      mma::split2<kF16>(s[2 * kk + 1][0], s[2 * kk + 1][1], ah[2], al[2]);
      mma::split2<kF16>(s[2 * kk + 1][2], s[2 * kk + 1][3], ah[3], al[3]);
      for (int d = 0; d < kDTiles; d += 2) {
        uint32_t b[4];
        const int m = lane / 8;
        mma::ldmatrix_x4_trans(
            b, v_s + (kk * 16 + (m % 2) * 8 + lane % 8) * kRow + d * 8 + (m / 2) * 8);
        mma::mma16816<kF16>(o_acc[d], ah, b[0], b[1]);
        mma::mma16816<kF16>(o_acc[d], al, b[0], b[1]);
        mma::mma16816<kF16>(o_acc[d + 1], ah, b[2], b[3]);
        mma::mma16816<kF16>(o_acc[d + 1], al, b[2], b[3]);
      }
    }
    __syncthreads();  // the stage is overwritten by the load two iterations ahead
  }

  // Epilogue: O / l rounded once into q's type; lse in natural log.
  for (int i = 0; i < 2; ++i) {
    if (!row_valid[i]) continue;
    const int r = warp * 16 + g + 8 * i;
    const int64_t row =
        static_cast<int64_t>(q0 + tok0 + r / G) * p.num_qo_heads + kv_head * G + r % G;
    const float inv = 1.0f / l_run[i];
    uint32_t* out = reinterpret_cast<uint32_t*>(p.o + row * kD);
    for (int d = 0; d < kDTiles; ++d)
      out[(d * 8 + 2 * t4) / 2] =
          mma::pack2<kF16>(o_acc[d][2 * i] * inv, o_acc[d][2 * i + 1] * inv);
    if (p.lse != nullptr && t4 == 0) p.lse[row] = m_run[i] * kLn2 + logf(l_run[i]);
  }
}

// ------------------------------------------------------------------ launcher
template <int kD, bool kF16>
cudaError_t launch_prefill(const PrefillParams& p, int num_seqs, int num_kv_heads, int max_q_len,
                           cudaStream_t stream) {
  const size_t smem = smem_bytes<kD>();
  static bool configured = false;  // one attribute call per instance, outside any capture
  if (!configured) {
    const cudaError_t e =
        cudaFuncSetAttribute(prefill_paged_flash_mma_kernel<kD, kF16>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
    configured = true;
  }
  const int tiles = (max_q_len + p.tokens_per_tile - 1) / p.tokens_per_tile;
  if (tiles == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(num_seqs),
                  static_cast<unsigned>(num_kv_heads));
  prefill_paged_flash_mma_kernel<kD, kF16><<<grid, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

std::string v0_unsupported(const PagedPrefillArgs& a) {
  const PageGeometry& g = a.kv.geom;
  if (g.format != KvFormat::kBF16 && g.format != KvFormat::kFP16)
    return "prefill v0 reads 16-bit caches (bf16, fp16), got " + to_string(g.format);
  const DType want = g.format == KvFormat::kBF16 ? DType::kBF16 : DType::kF16;
  if (a.q_dtype != want)
    return "prefill v0 needs Q in the cache's 16-bit type (" + to_string(want) + "), got " +
           to_string(a.q_dtype);
  if (g.layout != KvLayout::kNHD && g.layout != KvLayout::kHND)
    return "prefill v0 needs a token's head_dim elements contiguous (nhd, hnd), got " +
           to_string(g.layout);
  if (a.group_size() > kTileRows)
    return "prefill v0 packs a GQA group into 64 rows: group " + std::to_string(a.group_size()) +
           " is larger";
  return "";
}

void v0_run(const PagedPrefillArgs& a, cudaStream_t stream) {
  PrefillParams p;
  p.q = static_cast<const uint16_t*>(a.q);
  p.o = static_cast<uint16_t*>(a.o);
  p.lse = a.lse;
  p.k = static_cast<const uint16_t*>(a.kv.k);
  p.v = static_cast<const uint16_t*>(a.kv.v);
  p.geom = a.kv.geom;
  p.q_start = a.q_start;
  p.seq_lens = a.seq_lens;
  p.block_table = a.block_table;
  p.max_blocks_per_seq = a.max_blocks_per_seq;
  p.num_qo_heads = a.num_qo_heads;
  p.group = a.group_size();
  p.tokens_per_tile = kTileRows / p.group;
  p.scale_log2 = a.sm_scale * kLog2e;
  const bool f16 = a.kv.geom.format == KvFormat::kFP16;
  const cudaError_t e = KVLAB_DISPATCH_HEAD_DIM(a.kv.geom.head_dim, kD, [&] {
    return f16 ? launch_prefill<kD, true>(p, a.num_seqs, a.kv.geom.num_kv_heads, a.q_len_bound(),
                                          stream)
               : launch_prefill<kD, false>(p, a.num_seqs, a.kv.geom.num_kv_heads, a.q_len_bound(),
                                           stream);
  });
  KVLAB_CUDA_CHECK(e);
#if defined(KVLAB_SYNC_AFTER_LAUNCH)
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(stream));
#endif
}

}  // namespace

namespace detail {
PrefillVersionImpl make_prefill_paged_v0_flash_mma() {
  PrefillVersionImpl im;
  im.info.id = 0;
  im.info.name = "prefill_paged_v0_flash_mma";
  im.info.summary =
      "FA2-style paged chunked prefill: GQA heads packed into 64-row tiles, mma.sync Q.K^T and "
      "P.V (P split hi+lo), online softmax, two-stage cp.async K/V pipeline";
  im.unsupported_reason = v0_unsupported;
  im.run = v0_run;
  return im;
}
}  // namespace detail

}  // namespace kvlab::gpu
