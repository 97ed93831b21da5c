// cuda_check.h: the one CUDA error check. Host-side (g++ or nvcc).
//
// KVLAB_CUDA_CHECK(stmt) throws kvlab::CudaError with the statement, file and line.
// Launchers return cudaError_t; entry points check it. With -DKVLAB_SYNC_AFTER_LAUNCH
// (CMake option KVLAB_SYNC_AFTER_LAUNCH) KVLAB_CHECK_LAUNCH() also synchronizes so an
// asynchronous fault is reported at the launch that caused it.
#pragma once

#include <cuda_runtime_api.h>

#include <sstream>

#include "reference/core/error.h"

namespace kvlab {

class CudaError : public Error {
 public:
  CudaError(const std::string& msg, cudaError_t code) : Error(msg), code_(code) {}
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* stmt, const char* file,
                                          int line) {
  std::ostringstream os;
  os << "CUDA error " << cudaGetErrorName(e) << " (" << cudaGetErrorString(e) << ") in `" << stmt
     << "` at " << file << ":" << line;
  throw CudaError(os.str(), e);
}

}  // namespace kvlab

#define KVLAB_CUDA_CHECK(stmt)                                                                   \
  do {                                                                                           \
    cudaError_t kvlab_e_ = (stmt);                                                               \
    if (kvlab_e_ != cudaSuccess) ::kvlab::throw_cuda_error(kvlab_e_, #stmt, __FILE__, __LINE__); \
  } while (0)

#if defined(KVLAB_SYNC_AFTER_LAUNCH)
#define KVLAB_CHECK_LAUNCH()                   \
  do {                                         \
    KVLAB_CUDA_CHECK(cudaGetLastError());      \
    KVLAB_CUDA_CHECK(cudaDeviceSynchronize()); \
  } while (0)
#else
#define KVLAB_CHECK_LAUNCH() KVLAB_CUDA_CHECK(cudaGetLastError())
#endif
