// provenance.h: what a result file records about how it was made (HDF5 root attributes).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "experiments/device/device.h"  // DeviceSummary, device_summary()
#include "experiments/h5/h5.h"

namespace kvlab::exp {

std::string git_commit();
bool git_dirty();
std::string hostname();
std::string utc_now();  // ISO 8601, seconds

// Build, git, host and device facts as (attribute, value) pairs.
std::vector<std::pair<std::string, h5::Value>> build_provenance();

std::string join_argv(const std::vector<std::string>& argv);

}  // namespace kvlab::exp
