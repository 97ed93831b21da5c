// provenance.h: what a result file records about how it was made (HDF5 root attributes).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "experiments/h5/h5.h"

namespace kvlab::exp {

struct DeviceSummary {
  bool present = false;
  std::string error;  // why there is none ("built without CUDA", the driver's message)
  int count = 0;
  std::string name;
  int sm_count = 0, sm_clock_khz = 0, mem_clock_khz = 0, mem_bus_bits = 0, l2_bytes = 0;
  double peak_bytes_per_s = 0;
  uint64_t global_mem_bytes = 0;
};
DeviceSummary device_summary();

std::string git_commit();
bool git_dirty();
std::string hostname();
std::string utc_now();  // ISO 8601, seconds

// Build, git, host and device facts as (attribute, value) pairs.
std::vector<std::pair<std::string, h5::Value>> build_provenance();

std::string join_argv(const std::vector<std::string>& argv);

}  // namespace kvlab::exp
