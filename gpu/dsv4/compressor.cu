// compressor.cu: streaming / chunked / one-shot CSA and HCA compression on the GPU.
//
// Mirrors ref::dsv4_compress; the pooling arithmetic is compress_math.h's
// dsv4_pool_channel, so GPU streaming, chunked and one-shot runs give identical bits
// (against the CPU only expf and FMA contraction differ: Op::kCompressor tolerance).
//   emit_kernel   one block per emitted entry, a thread per channel: rows at positions
//                 before the call's first token come from the kept state, later ones from
//                 the call's projection rows (kv, gate, + ape).
//   keep_kernel   one block per token of the call: writes the rows later calls can still
//                 read — lane a of the last two windows (overlap) or of the last window,
//                 lane b of the last window. Runs after emit_kernel (stream order), since
//                 it overwrites rows emit_kernel may read.
#include "gpu/core/cuda_check.h"
#include "gpu/dsv4/dsv4_kernels.h"
#include "gpu/dsv4/entry_store.cuh"
#include "reference/core/error.h"
#include "reference/dsv4/compress_math.h"

namespace kvlab::gpu {

namespace {

using namespace dsv4_detail;

struct CompressParams {
  Dsv4StreamView st;
  Dsv4CompressArgs a;
};

__global__ void __launch_bounds__(kThreads) emit_kernel(const CompressParams p) {
  const Dsv4StreamView& st = p.st;
  const Dsv4CompressArgs& a = p.a;
  const int k = blockIdx.x;  // output row
  const int r = find_segment(a.entry_offsets, a.num_requests + 1, k);
  const int64_t slot = a.request_slots[r];
  if (slot < 0 || slot >= st.num_slots) __trap();
  const int64_t start = a.start_pos[r];
  const int64_t e = start / st.ratio + (k - a.entry_offsets[r]);
  const int64_t w0 = e * st.ratio;
  const int R = st.ratio, D = st.dim, W = st.overlap ? 2 * D : D;
  const int64_t tok0 = a.token_offsets[r];
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    // Row at position q, column col of the call's arrays (q >= start) or of the state.
    auto from_call = [&](int64_t q, int col, float* v, float* s) {
      const int64_t t = tok0 + (q - start);
      *v = a.kv[t * W + col];
      const float g = a.gate[t * W + col];
      *s = a.ape ? g + a.ape[(q % R) * W + col] : g;
    };
    auto lane_a = [&](int j, float* v, float* s) {  // window e-1, overlap only
      const int64_t q = w0 - R + j;
      if (q >= start) return from_call(q, c, v, s);
      const int64_t idx = st.lane_a_index(slot, q) + c;
      *v = st.ka[idx];
      *s = st.za[idx];
    };
    auto lane_b = [&](int j, float* v, float* s) {  // window e
      const int64_t q = w0 + j;
      if (q >= start) return from_call(q, st.overlap ? D + c : c, v, s);
      const int64_t idx = (st.overlap ? st.lane_b_index(slot, q) : st.lane_a_index(slot, q)) + c;
      *v = st.overlap ? st.kb[idx] : st.ka[idx];
      *s = st.overlap ? st.zb[idx] : st.za[idx];
    };
    a.out[static_cast<int64_t>(k) * D + c] =
        dsv4_pool_channel(R, st.overlap && e > 0, lane_a, lane_b);
  }
}

__global__ void __launch_bounds__(kThreads) keep_kernel(const CompressParams p) {
  const Dsv4StreamView& st = p.st;
  const Dsv4CompressArgs& a = p.a;
  const int i = blockIdx.x;  // token of the call
  const int r = find_segment(a.token_offsets, a.num_requests + 1, i);
  const int64_t slot = a.request_slots[r];
  if (slot < 0 || slot >= st.num_slots) __trap();
  const int64_t start = a.start_pos[r];
  const int64_t q = start + (i - a.token_offsets[r]);
  const int64_t last = start + (a.token_offsets[r + 1] - a.token_offsets[r]) - 1;
  const int R = st.ratio, D = st.dim, W = st.overlap ? 2 * D : D;
  const int64_t w = q / R, w_last = last / R;
  const bool keep_a = st.overlap ? w >= w_last - 1 : w == w_last;
  const bool keep_b = st.overlap && w == w_last;
  if (!keep_a) return;
  const float* kv = a.kv + static_cast<int64_t>(i) * W;
  const float* g = a.gate + static_cast<int64_t>(i) * W;
  const float* ape = a.ape ? a.ape + (q % R) * W : nullptr;
  const int64_t ia = st.lane_a_index(slot, q);
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    st.ka[ia + c] = kv[c];
    st.za[ia + c] = ape ? g[c] + ape[c] : g[c];
  }
  if (!keep_b) return;
  const int64_t ib = st.lane_b_index(slot, q);
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    st.kb[ib + c] = kv[D + c];
    st.zb[ib + c] = ape ? g[D + c] + ape[D + c] : g[D + c];
  }
}

cudaError_t launch_compress(const CompressParams& p, cudaStream_t stream) {
  if (p.a.num_entries > 0) {
    emit_kernel<<<p.a.num_entries, kThreads, 0, stream>>>(p);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  if (p.a.num_tokens > 0) keep_kernel<<<p.a.num_tokens, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

void dsv4_compress(const Dsv4StreamView& st, const Dsv4CompressArgs& a, cudaStream_t stream) {
  KVLAB_REQUIRE(st.ratio >= 1 && st.dim >= 1 && st.ka && st.za && (!st.overlap || (st.kb && st.zb)),
                "gpu::dsv4_compress: bad stream state (ratio " << st.ratio << ", dim " << st.dim
                                                               << ", null rows)");
  KVLAB_REQUIRE(a.num_requests >= 0 && a.num_tokens >= 0 && a.num_entries >= 0,
                "gpu::dsv4_compress: negative counts");
  if (a.num_requests == 0) return;
  KVLAB_REQUIRE(
      a.kv && a.gate && a.request_slots && a.start_pos && a.token_offsets && a.entry_offsets,
      "gpu::dsv4_compress: null input pointer");
  KVLAB_REQUIRE(a.num_entries == 0 || a.out,
                "gpu::dsv4_compress: null out with " << a.num_entries << " entries");
  KVLAB_CUDA_CHECK(launch_compress(CompressParams{st, a}, stream));
}

}  // namespace kvlab::gpu
