// build_info.h: what this binary was built with (printed by `kvlab info`, stored as HDF5
// provenance).
#pragma once

#include <string>

namespace kvlab::exp {

struct BuildInfo {
  std::string version;
  std::string build_type;
  std::string compiler;
  bool cuda = false;
  std::string cuda_version;  // toolkit version the binary was built with ("" without CUDA)
  std::string cuda_archs;
};

BuildInfo build_info();

}  // namespace kvlab::exp
