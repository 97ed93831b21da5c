// gather_rows.cu: see gather_rows.h. One block per output row, 16-byte copies when the row
// allows them (cols a multiple of 8 and 16-byte aligned rows), else 2-byte copies.
#include "gpu/step/gather_rows.h"

#include "gpu/core/cuda_check.h"
#include "reference/core/error.h"

namespace kvlab::gpu::step {
namespace {

__global__ void gather_rows_kernel(const uint16_t* __restrict__ in, int64_t ld_in,
                                   const int32_t* __restrict__ rows, uint16_t* __restrict__ out,
                                   int cols, bool vec) {
  const int i = blockIdx.x;
  const uint16_t* src = in + static_cast<int64_t>(rows[i]) * ld_in;
  uint16_t* dst = out + static_cast<int64_t>(i) * cols;
  if (vec) {
    for (int c = threadIdx.x; c < cols / 8; c += blockDim.x)
      reinterpret_cast<uint4*>(dst)[c] = reinterpret_cast<const uint4*>(src)[c];
  } else {
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = src[c];
  }
}

}  // namespace

void gather_rows_16bit(const uint16_t* in, int64_t ld_in, const int32_t* rows, uint16_t* out, int m,
                       int cols, cudaStream_t stream) {
  KVLAB_REQUIRE(m >= 0 && cols >= 1 && ld_in >= cols,
                "gather_rows_16bit: m " << m << ", cols " << cols << ", ld_in " << ld_in);
  if (m == 0) return;
  KVLAB_REQUIRE(in != nullptr && rows != nullptr && out != nullptr,
                "gather_rows_16bit: null pointer");
  const bool vec = cols % 8 == 0 && ld_in % 8 == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0;
  gather_rows_kernel<<<m, 128, 0, stream>>>(in, ld_in, rows, out, cols, vec);
  KVLAB_CHECK_LAUNCH();
}

}  // namespace kvlab::gpu::step
