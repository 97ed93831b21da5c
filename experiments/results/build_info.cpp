#include "experiments/results/build_info.h"

#if defined(KVLAB_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace kvlab::exp {

BuildInfo build_info() {
  BuildInfo b;
  b.version = KVLAB_VERSION;
#if defined(NDEBUG)
  b.build_type = "release";
#else
  b.build_type = "debug";
#endif
#if defined(__clang__)
  b.compiler = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  b.compiler = "g++ " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." +
               std::to_string(__GNUC_PATCHLEVEL__);
#endif
#if defined(KVLAB_HAVE_CUDA)
  b.cuda = true;
  b.cuda_version =
      std::to_string(CUDART_VERSION / 1000) + "." + std::to_string((CUDART_VERSION % 1000) / 10);
#ifdef KVLAB_CUDA_ARCHS
  b.cuda_archs = KVLAB_CUDA_ARCHS;
#endif
#endif
  return b;
}

}  // namespace kvlab::exp
