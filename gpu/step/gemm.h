// gemm.h: the decode step's linear layers through cuBLAS (host-includable, no cuBLAS types).
//
//   y[M, N] (FP32, row stride ldy) = x[M, K] (BF16, row stride ldx) . W[N, K]^T (BF16, dense)
//
// W is stored [out, in] row-major (nn.Linear); in cuBLAS's column-major terms the call is
// y^T = W . x^T: cublasGemmEx(OP_T, OP_N, m=N, n=M, k=K) with BF16 inputs, FP32 output and
// FP32 accumulation (CUBLAS_COMPUTE_32F), default algorithm selection (cuBLAS's heuristics
// pick the kernel per shape: tensor cores for BF16).
//
// The handle owns a fixed workspace (cublasSetWorkspace) so that GEMMs recorded into a CUDA
// graph never allocate. One Linear per stream; not thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kvlab::gpu::step {

class CublasLinear {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

  explicit CublasLinear(cudaStream_t stream, size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~CublasLinear();
  CublasLinear(const CublasLinear&) = delete;
  CublasLinear& operator=(const CublasLinear&) = delete;

  // Validates shapes (throws InvalidArgument) and enqueues the GEMM on the stream.
  void forward(const uint16_t* x, int64_t ldx, const uint16_t* w, int n, int k, float* y,
               int64_t ldy, int m) const;

  cudaStream_t stream() const { return stream_; }

 private:
  void* handle_ = nullptr;     // cublasHandle_t
  void* workspace_ = nullptr;  // device bytes
  cudaStream_t stream_ = nullptr;
};

}  // namespace kvlab::gpu::step
