// device_info.cu: device enumeration for `kvlab info` and HDF5 provenance.
#include "gpu/core/device_info.h"

#include <cuda_runtime.h>

#include <sstream>

#include "gpu/core/cuda_check.h"
#include "reference/core/error.h"

namespace kvlab::gpu {

std::vector<DeviceInfo> list_devices(std::string* error) {
  std::vector<DeviceInfo> out;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (error) *error = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    DeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.sm_count = p.multiProcessorCount;
    d.global_mem_bytes = p.totalGlobalMem;
    d.l2_bytes = p.l2CacheSize;
    d.smem_per_block_optin = p.sharedMemPerBlockOptin;
    int clk = 0, mclk = 0, bus = 0;
    cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, i);
    cudaDeviceGetAttribute(&mclk, cudaDevAttrMemoryClockRate, i);
    cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, i);
    d.sm_clock_khz = clk;
    d.mem_clock_khz = mclk;
    d.mem_bus_bits = bus;
    out.push_back(d);
  }
  return out;
}

bool device_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

LaunchLimits current_launch_limits() {
  LaunchLimits l;
  KVLAB_CUDA_CHECK(cudaGetDevice(&l.device));
  KVLAB_CUDA_CHECK(cudaDeviceGetAttribute(&l.sm_count, cudaDevAttrMultiProcessorCount, l.device));
  KVLAB_CUDA_CHECK(cudaDeviceGetAttribute(&l.smem_per_block_optin,
                                          cudaDevAttrMaxSharedMemoryPerBlockOptin, l.device));
  KVLAB_CUDA_CHECK(cudaDeviceGetAttribute(&l.max_grid_y, cudaDevAttrMaxGridDimY, l.device));
  return l;
}

void require_free_memory(double bytes, double fraction, const std::string& what) {
  size_t free_b = 0, total_b = 0;
  KVLAB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (bytes <= fraction * static_cast<double>(free_b)) return;
  std::ostringstream os;
  os.precision(3);
  os << what << " needs " << bytes / double(1 << 30) << " GiB of device memory, "
     << free_b / double(1 << 30) << " GiB are free (" << 100 * fraction << "% usable)";
  throw Unsupported(os.str());
}

}  // namespace kvlab::gpu
