// gemm.cu: CublasLinear (see gemm.h).
#include "gpu/step/gemm.h"

#include <cublas_v2.h>

#include <sstream>

#include "gpu/core/cuda_check.h"
#include "reference/core/error.h"

namespace kvlab::gpu::step {

namespace {

void check_cublas(cublasStatus_t s, const char* stmt) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::ostringstream os;
  os << "cuBLAS error " << cublasGetStatusName(s) << " (" << cublasGetStatusString(s) << ") in `"
     << stmt << "`";
  throw kvlab::Error(os.str());
}
#define KVLAB_CUBLAS_CHECK(stmt) check_cublas((stmt), #stmt)

cublasHandle_t as_handle(void* h) {
  return static_cast<cublasHandle_t>(h);
}

}  // namespace

CublasLinear::CublasLinear(cudaStream_t stream, size_t workspace_bytes) : stream_(stream) {
  cublasHandle_t h = nullptr;
  KVLAB_CUBLAS_CHECK(cublasCreate(&h));
  handle_ = h;
  try {
    KVLAB_CUBLAS_CHECK(cublasSetStream(h, stream));
    if (workspace_bytes > 0) {
      KVLAB_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes));
      KVLAB_CUBLAS_CHECK(cublasSetWorkspace(h, workspace_, workspace_bytes));
    }
  } catch (...) {
    if (workspace_) cudaFree(workspace_);
    cublasDestroy(h);
    throw;
  }
}

CublasLinear::~CublasLinear() {
  if (handle_) cublasDestroy(as_handle(handle_));
  if (workspace_) cudaFree(workspace_);
}

void CublasLinear::forward(const uint16_t* x, int64_t ldx, const uint16_t* w, int n, int k,
                           float* y, int64_t ldy, int m) const {
  KVLAB_REQUIRE(m >= 1 && n >= 1 && k >= 1,
                "linear: M " << m << ", N " << n << ", K " << k << " must all be >= 1");
  KVLAB_REQUIRE(ldx >= k && ldy >= n, "linear: row strides ldx " << ldx << " (>= K " << k
                                                                 << "), ldy " << ldy << " (>= N "
                                                                 << n << ")");
  KVLAB_REQUIRE(ldx <= INT32_MAX && ldy <= INT32_MAX, "linear: row stride above 2^31");
  KVLAB_REQUIRE(x != nullptr && w != nullptr && y != nullptr, "linear: null operand");
  const float alpha = 1.0f, beta = 0.0f;
  KVLAB_CUBLAS_CHECK(cublasGemmEx(as_handle(handle_), CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w,
                                  CUDA_R_16BF, k, x, CUDA_R_16BF, static_cast<int>(ldx), &beta, y,
                                  CUDA_R_32F, static_cast<int>(ldy), CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
}

}  // namespace kvlab::gpu::step
