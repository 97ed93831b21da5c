// decode_attention.cu: DSV4 decode attention over the visible compressed entries plus the
// raw SWA window (a correctness kernel: it validates the cache substrate end to end; the
// tuned paged-decode kernels live in gpu/attention).
//
// One block of 4 warps per (head, sequence). Keys are numbered compressed entries first
// (0 .. (t+1)/ratio - 1), then the window's ring rows; warp w takes keys w, w+4, ... Each
// lane holds head_dim/32 dims of q and of its accumulator; a key's dot product is a warp
// reduction; each warp keeps an online softmax (m, l, acc) and the four are merged in
// shared memory at the end; the FP32 result is rounded once to BF16. Keys are dequantized through
// Dsv4EntryPages::load, the same function the reference reads with. K = V: the value of a key is
// the key itself.
#include <cuda_runtime.h>

#include <cmath>

#include "gpu/core/cuda_check.h"
#include "gpu/dsv4/dsv4_kernels.h"
#include "gpu/dsv4/entry_store.cuh"
#include "reference/core/error.h"

namespace kvlab::gpu {

namespace {

using namespace dsv4_detail;

constexpr int kMaxDim = 512;
constexpr int kMaxPerLane = kMaxDim / 32;

struct DecodeParams {
  Dsv4SwaView swa;
  Dsv4ClassicalView cl;
  bool has_classical;
  Dsv4DecodeArgs a;
};

__global__ void __launch_bounds__(kThreads) decode_kernel(const DecodeParams p) {
  __shared__ float s_m[kWarps], s_l[kWarps];
  __shared__ float s_acc[kWarps][kMaxDim];
  const int h = blockIdx.x, s = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const Dsv4DecodeArgs& a = p.a;
  const int D = p.swa.ring.head_dim(), per_lane = D / 32, W = p.swa.window();
  const int64_t slot = a.request_slots[s];
  const int64_t t = a.positions[s];
  if (slot < 0 || slot >= p.swa.num_slots() || t < 0) __trap();
  const int64_t n_comp = p.has_classical ? (t + 1) / p.cl.ratio : 0;
  const int64_t n_keys = n_comp + W;

  float q[kMaxPerLane], acc[kMaxPerLane];
  const uint16_t* qp = a.q + (static_cast<int64_t>(s) * a.num_heads + h) * D;
  for (int k = 0; k < per_lane; ++k) {
    q[k] = bf16_bits_to_float(qp[lane + 32 * k]);
    acc[k] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = warp; j < n_keys; j += kWarps) {
    const Dsv4EntryPages* pages;
    int64_t page;
    int row;
    if (j < n_comp) {
      pages = &p.cl.pool;
      page = checked_block(p.cl.block_table, p.cl.max_blocks_per_request, slot, j / p.cl.pool.rows,
                           p.cl.pool.num_pages);
      row = static_cast<int>(j % p.cl.pool.rows);
    } else {
      row = static_cast<int>(j - n_comp);
      const int32_t pos = p.swa.pos_row(slot)[row];
      if (pos < 0 || pos > t || pos <= t - W)
        continue;  // empty row or outside the window (warp-uniform)
      pages = &p.swa.ring;
      page = slot;
    }
    float kv[kMaxPerLane];
    float dot = 0.0f;
    for (int k = 0; k < per_lane; ++k) {
      kv[k] = pages->load(page, row, lane + 32 * k);
      dot += q[k] * kv[k];
    }
    const float logit = warp_sum(dot) * a.sm_scale;
    const float m_new = fmaxf(m, logit);
    const float corr = expf(m - m_new);  // exp(-inf) = 0 on the first key
    const float w = expf(logit - m_new);
    l = l * corr + w;
    for (int k = 0; k < per_lane; ++k) acc[k] = acc[k] * corr + w * kv[k];
    m = m_new;
  }
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
  for (int k = 0; k < per_lane; ++k) s_acc[warp][lane + 32 * k] = acc[k];
  __syncthreads();
  float m_all = -INFINITY;
  for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, s_m[w]);
  float l_all = 0.0f;
  for (int w = 0; w < kWarps; ++w)
    if (s_m[w] != -INFINITY) l_all += s_l[w] * expf(s_m[w] - m_all);
  uint16_t* o = a.o + (static_cast<int64_t>(s) * a.num_heads + h) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float v = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      if (s_m[w] != -INFINITY) v += s_acc[w][d] * expf(s_m[w] - m_all);
    o[d] = float_to_bf16_bits(l_all > 0.0f ? v / l_all : 0.0f, Saturation::kNonSaturating);
  }
  if (a.lse && threadIdx.x == 0)
    a.lse[static_cast<int64_t>(s) * a.num_heads + h] =
        l_all > 0.0f ? m_all + logf(l_all) : -INFINITY;
}

cudaError_t launch_decode(const DecodeParams& p, cudaStream_t stream) {
  decode_kernel<<<dim3(p.a.num_heads, p.a.num_seqs), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

void dsv4_decode_attention(const Dsv4SwaView& swa, const Dsv4ClassicalView* cl,
                           const Dsv4DecodeArgs& a, cudaStream_t stream) {
  KVLAB_REQUIRE(a.num_seqs >= 0 && a.num_heads >= 1, "gpu::dsv4_decode_attention: num_seqs "
                                                         << a.num_seqs << ", num_heads "
                                                         << a.num_heads);
  if (a.num_seqs == 0) return;
  KVLAB_REQUIRE(a.q && a.o && a.request_slots && a.positions,
                "gpu::dsv4_decode_attention: null pointer");
  KVLAB_REQUIRE(swa.ring.data && swa.pos && swa.ring.rows >= 1,
                "gpu::dsv4_decode_attention: null ring");
  const int D = swa.ring.head_dim();
  KVLAB_UNSUPPORTED_IF(D % 32 != 0 || D > kMaxDim, "gpu::dsv4_decode_attention: head_dim "
                                                       << D << " (supported: multiples of 32 up to "
                                                       << kMaxDim << ")");
  DecodeParams p{swa, Dsv4ClassicalView{}, cl != nullptr, a};
  if (cl) {
    KVLAB_REQUIRE(cl->ratio >= 1 && cl->block_table && cl->pool.data,
                  "gpu::dsv4_decode_attention: bad classical view (ratio " << cl->ratio << ")");
    KVLAB_REQUIRE(cl->pool.head_dim() == D && cl->pool.format == swa.ring.format,
                  "gpu::dsv4_decode_attention: classical pool and SWA ring disagree on the entry "
                  "shape/format");
    p.cl = *cl;
  }
  KVLAB_CUDA_CHECK(launch_decode(p, stream));
}

}  // namespace kvlab::gpu
