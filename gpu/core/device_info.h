// device_info.h: host-side device enumeration (no CUDA headers needed by includers).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvlab::gpu {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  uint64_t global_mem_bytes = 0;
  int l2_bytes = 0;
  uint64_t smem_per_block_optin = 0;
  int sm_clock_khz = 0, mem_clock_khz = 0, mem_bus_bits = 0;
  // Datasheet-style peak DRAM bandwidth from the memory clock and bus width (DDR: x2).
  double peak_bandwidth_bytes_per_s() const {
    return 2.0 * mem_clock_khz * 1e3 * mem_bus_bits / 8.0;
  }
};

// Devices visible to this process; empty (and *error set) when there is no driver/device.
std::vector<DeviceInfo> list_devices(std::string* error = nullptr);
bool device_available();

// Limits of the current device that launchers size their grids and shared memory by
// (cudaGetDevice + cudaDeviceGetAttribute: cheap, no allocation, legal during graph
// capture). Throws kvlab::CudaError without a device.
struct LaunchLimits {
  int device = 0;
  int sm_count = 0;
  int smem_per_block_optin = 0;  // bytes a block may use after cudaFuncSetAttribute
  int max_grid_y = 0;            // gridDim.y / gridDim.z limit
};
LaunchLimits current_launch_limits();

// The one device-memory guard: throws kvlab::Unsupported (the driver records the point as
// skipped, with the message) when `bytes` exceed `fraction` of the current device's free
// memory: "<what> needs 3.2 GiB of device memory, 1.1 GiB are free (80% usable)". The rest of
// the free memory is left to what the caller allocates beside (cuBLAS and attention workspaces,
// the timing harness's L2 flush buffer).
void require_free_memory(double bytes, double fraction, const std::string& what);

}  // namespace kvlab::gpu
