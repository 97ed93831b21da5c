// prefill_impl.h: internals shared by the paged-prefill versions (host side, g++-compilable).
//
// Each prefill_paged_v<N>_<algorithm>.cu defines one PrefillVersionImpl; prefill_registry.cu
// collects them in id order and validates the arguments once before asking the version.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "gpu/attention/prefill.h"

namespace kvlab::gpu::detail {

struct PrefillVersionImpl {
  PrefillVersionInfo info;
  // "" when supported. Called only on arguments that passed validate_prefill_args().
  std::string (*unsupported_reason)(const PagedPrefillArgs&) = nullptr;
  // Launches (arguments validated and supported).
  void (*run)(const PagedPrefillArgs&, cudaStream_t) = nullptr;
};

PrefillVersionImpl make_prefill_paged_v0_flash_mma();

// InvalidArgument for malformed host-visible arguments (see prefill.h).
void validate_prefill_args(const PagedPrefillArgs& a);

}  // namespace kvlab::gpu::detail
