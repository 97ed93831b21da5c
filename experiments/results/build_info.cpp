// build_info.cpp: what this binary was built with (see build_info.h).
#include "experiments/results/build_info.h"

#include "experiments/device/device.h"

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
  b.cuda = built_with_cuda();
  b.cuda_version = cuda_runtime_version();
  if (b.cuda) b.cuda_archs = KVLAB_CUDA_ARCHS;
  return b;
}

}  // namespace kvlab::exp
