// provenance.cpp: build/git/host/device facts for result files and `kvlab info`.
#include "experiments/results/provenance.h"

#include <unistd.h>

#include <ctime>

#include "experiments/device/device.h"
#include "experiments/results/build_info.h"
#include "kvlab_git_info.h"  // generated at build time (experiments/cmake/git_info.cmake)

namespace kvlab::exp {

std::string git_commit() {
  return KVLAB_GIT_COMMIT;
}
bool git_dirty() {
  return KVLAB_GIT_DIRTY != 0;
}

std::string hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::vector<std::pair<std::string, h5::Value>> build_provenance() {
  const BuildInfo b = build_info();
  const DeviceSummary d = device_summary();
  std::vector<std::pair<std::string, h5::Value>> v = {
      {"kvlab_version", b.version},
      {"git_commit", git_commit()},
      {"git_dirty", int64_t{git_dirty() ? 1 : 0}},
      {"build_type", b.build_type},
      {"compiler", b.compiler},
      {"cuda", int64_t{b.cuda ? 1 : 0}},
      {"cuda_version", b.cuda_version},
      {"cuda_archs", b.cuda_archs},
      {"host", hostname()},
      {"device_present", int64_t{d.present ? 1 : 0}},
      {"device_count", int64_t{d.count}},
      {"device_name", d.present ? d.name : d.error},
      {"device_sm_count", int64_t{d.sm_count}},
      {"device_sm_clock_khz", int64_t{d.sm_clock_khz}},
      {"device_mem_clock_khz", int64_t{d.mem_clock_khz}},
      {"device_mem_bus_bits", int64_t{d.mem_bus_bits}},
      {"device_l2_bytes", int64_t{d.l2_bytes}},
      {"device_peak_bytes_per_s", d.peak_bytes_per_s},
  };
  return v;
}

std::string join_argv(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    if (!s.empty()) s += ' ';
    const bool quote = a.empty() || a.find_first_of(" \t'\"$\\") != std::string::npos;
    if (!quote) {
      s += a;
      continue;
    }
    s += '\'';
    for (char c : a) s += c == '\'' ? std::string("'\\''") : std::string(1, c);
    s += '\'';
  }
  return s;
}

}  // namespace kvlab::exp
