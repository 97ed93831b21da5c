// gpu_spec.h: GPU figures for the roofline cost model, read from data/gpus/gpus.csv.
//
// Every figure is a datasheet number (cited in the CSV), in SI base units here (bytes,
// bytes/s, FLOP/s). Measured ceilings (the gpus.csv columns measured_*: the ceilings of
// gpu/README.md, "Measuring", measured on that device) sit beside them; the cost model uses the
// measured read ceiling for memory-bound operations when one is present and the caller allows it
// (CostModelConfig).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvlab::sim {

struct GpuSpec {
  std::string name;
  int64_t memory_bytes = 0;
  double hbm_bytes_per_s = 0;  // datasheet HBM bandwidth
  double bf16_flops = 0;       // dense tensor-core BF16/FP16
  double fp8_flops = 0;        // dense FP8 (0 = none)
  double fp4_flops = 0;        // dense FP4 (0 = none)
  double fp32_flops = 0;       // non-tensor FP32
  int32_t num_sms = 0;
  int64_t l2_bytes = 0;
  double host_link_bytes_per_s = 0;      // PCIe, one direction (swap traffic)
  double measured_read_bytes_per_s = 0;  // 0 = not measured
  double measured_copy_bytes_per_s = 0;  // 0 = not measured (read + write counted)

  // Memory-bound ceiling: the measured read ceiling when present and allowed, else the
  // datasheet figure.
  double read_ceiling(bool prefer_measured) const {
    return prefer_measured && measured_read_bytes_per_s > 0 ? measured_read_bytes_per_s
                                                            : hbm_bytes_per_s;
  }
  // Ridge point of the roofline for BF16: FLOPs per byte above which an op is compute-bound.
  double ridge_bf16(bool prefer_measured) const {
    return bf16_flops / read_ceiling(prefer_measured);
  }
  void validate() const;
};

// Parses the table (format in data/gpus/gpus.csv); errors name the file, line and field.
std::vector<GpuSpec> parse_gpu_table(const std::string& text, const std::string& source);
// Loads data/gpus/gpus.csv (located by find_data_file) or the given path.
std::vector<GpuSpec> load_gpu_table(const std::string& path = "");
// Case-insensitive lookup by full name or by the prefix before the first '-' ("H100").
// InvalidArgument listing the known names otherwise.
const GpuSpec& find_gpu(const std::vector<GpuSpec>& table, const std::string& name);
// Convenience: load_gpu_table() + find_gpu().
GpuSpec gpu_spec(const std::string& name);

}  // namespace kvlab::sim
