// append_swa.cu: write raw BF16 tokens into the DSV4 SWA ring (quantized entry, BF16 RoPE,
// position).
//
// One thread block of 128 threads per token:
//   1. amax of the NoPE dims per 64-tile, warp-level reduction (entry_store.cuh);
//   2. thread 0 picks the ring row — kAtomicHead: atomicAdd(&head[slot], 1) % window
//      (per_token_scales), kPosModWindow: position % window with head = max(head,
//      position + 1) (public_v4) — and writes the position metadata;
//   3. the block quantizes NoPE BF16 -> FP8 E4M3 with the per-token FP32 inverse scale
//      (per_token_scales) or per-tile UE8M0 scales (public_v4's fp8_ds_mla), and copies the RoPE
//      dims as BF16 (exact: a BF16 input round-trips through float unchanged).
// Runtime parameters (format, ring mode, dims) cost nothing here: one instance.
#include "gpu/core/cuda_check.h"
#include "gpu/dsv4/dsv4_kernels.h"
#include "gpu/dsv4/entry_store.cuh"
#include "reference/core/error.h"

namespace kvlab::gpu {

namespace {

using namespace dsv4_detail;

struct AppendSwaParams {
  Dsv4SwaView swa;
  Dsv4AppendSwaArgs args;
};

__global__ void __launch_bounds__(kThreads) append_swa_kernel(const AppendSwaParams p) {
  __shared__ float s_tile[kMaxTiles];
  __shared__ int s_row;
  const int64_t i = blockIdx.x;
  const int32_t slot = p.args.request_slots[i];
  const int32_t pos = p.args.positions[i];
  if (slot < 0 || slot >= p.swa.num_slots() || pos < 0) __trap();
  const Dsv4EntryPages& ring = p.swa.ring;
  const uint16_t* raw = p.args.raw_kv + i * ring.head_dim();
  auto x = [raw](int d) { return bf16_bits_to_float(raw[d]); };

  block_tile_amax(ring.nope_dim, x, s_tile);
  if (threadIdx.x == 0) {
    const int32_t W = p.swa.window();
    int row;
    if (p.swa.mode == Dsv4RingMode::kAtomicHead) {
      row = atomicAdd(&p.swa.head[slot], 1) % W;
    } else {
      row = pos % W;
      atomicMax(&p.swa.head[slot], pos + 1);
    }
    p.swa.pos_row(slot)[row] = pos;
    s_row = row;
  }
  __syncthreads();
  block_write_entry(ring, slot, s_row, x, s_tile);
}

cudaError_t launch_append_swa(const AppendSwaParams& p, cudaStream_t stream) {
  append_swa_kernel<<<p.args.num_tokens, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

void dsv4_append_swa(const Dsv4SwaView& swa, const Dsv4AppendSwaArgs& args, cudaStream_t stream) {
  KVLAB_REQUIRE(args.num_tokens >= 0,
                "gpu::dsv4_append_swa: num_tokens must be >= 0, got " << args.num_tokens);
  if (args.num_tokens == 0) return;
  KVLAB_REQUIRE(args.raw_kv && args.request_slots && args.positions,
                "gpu::dsv4_append_swa: null input pointer");
  KVLAB_REQUIRE(swa.ring.data && swa.pos && swa.head && swa.ring.rows >= 1,
                "gpu::dsv4_append_swa: null ring buffers or window < 1");
  KVLAB_REQUIRE(
      swa.ring.nope_dim > 0 && swa.ring.nope_dim % kDsMlaTile == 0 && swa.ring.rope_dim % 2 == 0,
      "gpu::dsv4_append_swa: nope_dim " << swa.ring.nope_dim
                                        << " must be a positive multiple of 64, rope_dim "
                                        << swa.ring.rope_dim << " even");
  KVLAB_UNSUPPORTED_IF(swa.ring.nope_dim > kMaxTiles * kDsMlaTile,
                       "gpu::dsv4_append_swa: nope_dim " << swa.ring.nope_dim << " above "
                                                         << kMaxTiles * kDsMlaTile);
  if (swa.ring.format == Dsv4EntryFormat::kFp8PerToken)
    KVLAB_REQUIRE(swa.ring.inv_scale && (swa.ring.rope || swa.ring.rope_dim == 0),
                  "gpu::dsv4_append_swa: null rope / inv_scale arrays");
  AppendSwaParams p{swa, args};
  KVLAB_CUDA_CHECK(launch_append_swa(p, stream));
}

}  // namespace kvlab::gpu
