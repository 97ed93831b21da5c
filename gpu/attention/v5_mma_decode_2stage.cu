// v5_mma_decode_2stage.cu: v4's tensor-core decode at a higher-occupancy design point for
// the 16-bit, FP8-with-pool-scale and NVFP4 formats: 2 cp.async stages of one 16-token
// tile per warp and a register cap, so 3 (16-bit, NVFP4) or 4 (FP8) blocks of 4 warps are
// resident per SM (d <= 128) instead of v4's 2 (16-bit) or 1 (FP8, FP4: v4's 8 KB tiles
// of 32-64 tokens take 121-141 KB of shared memory per block). Every other format (per-
// token FP8, FP8 E5M2, MXFP4) runs v4 unchanged.
//
// What changed vs v4, and why (gpu/attention/TUNING.md, step 2): v4 reached 93 % of the
// read ceiling with BF16 but 70 % with FP8 on the same shape, and its layout did not
// matter (NHD = HND), so the FP8 path is not limited by DRAM access patterns but by how
// fast each warp gets through its instruction stream: with 8 warps per SM (2 per
// scheduler) a warp's dependent chain (shared loads -> conversions -> mma -> softmax
// shuffles -> mma) leaves the schedulers mostly idle. v5 trades pipeline depth per warp for
// more warps per SM: bytes in flight stay far above what HBM needs (12-16 warps x 1 tile of
// 4-8 KB ahead), while twice as many instruction streams hide each other's latencies. The
// FP8 kernel carries only the pool-scale flavour (v4's e4m3 kernel also carries the
// per-token one, whose float path needs 225 registers), so its cap of 128 registers holds;
// the FP4 kernel only NVFP4's (f16 operands via the e4m3 byte lookup).
#include "gpu/attention/v4_mma_kernel.cuh"
#include "reference/layout/layout_names.h"

namespace kvlab::gpu::detail {
namespace {

struct V5Config {
  static constexpr int kStages = 2;
  static constexpr int kTileBytes = 0;  // 16-token warp tiles (the mma M) for every format
  static constexpr bool kPoolOnly = true;
  static constexpr int min_blocks(int d, KvElem e) {
    return d > 128 ? 1 : (kv_elem_bits(e) == 8 ? 4 : 3);
  }
  // head_dim x {bf16, fp16, e4m3 with a pool scale, NVFP4}: the formats this design point takes.
  template <class F>
  static cudaError_t dispatch(int head_dim, KvFormat f, F&& fn) {
    return KVLAB_DISPATCH_HEAD_DIM(head_dim, kD, [&] {
      switch (f) {
        case KvFormat::kBF16:
          return fn(std::integral_constant<int, kD>{},
                    std::integral_constant<KvElem, KvElem::kBF16>{});
        case KvFormat::kFP16:
          return fn(std::integral_constant<int, kD>{},
                    std::integral_constant<KvElem, KvElem::kFP16>{});
        case KvFormat::kFP8E4M3:
          return fn(std::integral_constant<int, kD>{},
                    std::integral_constant<KvElem, KvElem::kE4M3>{});
        case KvFormat::kNVFP4:
          return fn(std::integral_constant<int, kD>{},
                    std::integral_constant<KvElem, KvElem::kE2M1>{});
        default:
          break;
      }
      std::ostringstream os;
      os << "v5 kernels take bf16, fp16, fp8_e4m3 (pool scale) and nvfp4, got " << to_string(f);
      throw Unsupported(os.str());
    });
  }
};

bool own_format(KvFormat f) {
  return f == KvFormat::kBF16 || f == KvFormat::kFP16 || f == KvFormat::kFP8E4M3 ||
         f == KvFormat::kNVFP4;
}

const DecodeVersionImpl& v4() {
  static const DecodeVersionImpl v = make_v4_mma_decode();
  return v;
}

std::string v5_unsupported_reason(const DecodeArgs& a) {
  return own_format(a.kv.geom.format) ? v4_unsupported_reason<V5Config>(a)
                                      : v4().unsupported_reason(a);
}
size_t v5_workspace_bytes(const DecodeArgs& a) {
  return own_format(a.kv.geom.format) ? v4_workspace_bytes<V5Config>(a) : v4().workspace_bytes(a);
}
void v5_run(const DecodeArgs& a, void* workspace, cudaStream_t stream) {
  if (own_format(a.kv.geom.format))
    v4_run<V5Config>(a, workspace, stream);
  else
    v4().run(a, workspace, stream);
}

}  // namespace

DecodeVersionImpl make_v5_mma_decode_2stage() {
  DecodeVersionImpl v;
  v.info = {
      5, "v5_mma_decode_2stage",
      "v4's tensor-core decode with 2-stage 16-token warp tiles and a register cap (3-4 resident "
      "blocks per SM) for bf16, fp16, fp8_e4m3 and nvfp4; other formats as v4"};
  v.unsupported_reason = v5_unsupported_reason;
  v.workspace_bytes = v5_workspace_bytes;
  v.run = v5_run;
  return v;
}

}  // namespace kvlab::gpu::detail
