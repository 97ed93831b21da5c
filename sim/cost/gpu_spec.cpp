// gpu_spec.cpp: the GPU table (see gpu_spec.h, data/gpus/gpus.csv).
#include "sim/cost/gpu_spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>

#include "reference/core/error.h"
#include "sim/core/text.h"

namespace kvlab::sim {

void GpuSpec::validate() const {
  const std::string w = "GPU '" + name + "': ";
  KVLAB_REQUIRE(memory_bytes > 0, w << "memory " << memory_bytes << " bytes must be > 0");
  KVLAB_REQUIRE(hbm_bytes_per_s > 0, w << "HBM bandwidth must be > 0");
  KVLAB_REQUIRE(bf16_flops > 0, w << "BF16 rate must be > 0");
  KVLAB_REQUIRE(fp8_flops >= 0 && fp4_flops >= 0 && fp32_flops > 0,
                w << "FP8/FP4 rates must be >= 0, FP32 > 0");
  KVLAB_REQUIRE(num_sms > 0 && l2_bytes > 0, w << "num_sms and L2 must be > 0");
  KVLAB_REQUIRE(host_link_bytes_per_s > 0, w << "host link bandwidth must be > 0");
  KVLAB_REQUIRE(measured_read_bytes_per_s >= 0 && measured_copy_bytes_per_s >= 0,
                w << "measured ceilings must be >= 0");
}

namespace {
const char* const kCols[] = {
    "name",       "memory_gib",     "hbm_tbps",           "bf16_tflops",
    "fp8_tflops", "fp4_tflops",     "fp32_tflops",        "num_sms",
    "l2_mib",     "host_link_gbps", "measured_read_tbps", "measured_copy_tbps"};
constexpr size_t kNumCols = sizeof(kCols) / sizeof(kCols[0]);

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}
}  // namespace

std::vector<GpuSpec> parse_gpu_table(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  std::string raw;
  int64_t line = 0;
  bool header = false;
  std::vector<GpuSpec> out;
  while (std::getline(in, raw)) {
    ++line;
    const std::string s = trim(raw);
    if (s.empty() || s[0] == '#') continue;
    const auto f = split_fields(s, ',');
    if (!header) {
      KVLAB_REQUIRE(f.size() == kNumCols, source << ":" << line << ": header has " << f.size()
                                                 << " columns, expected " << kNumCols);
      for (size_t i = 0; i < kNumCols; ++i)
        KVLAB_REQUIRE(f[i] == kCols[i], source << ":" << line << ": column " << i << " is '" << f[i]
                                               << "', expected '" << kCols[i] << "'");
      header = true;
      continue;
    }
    KVLAB_REQUIRE(f.size() == kNumCols,
                  source << ":" << line << ": " << f.size() << " fields, expected " << kNumCols);
    auto num = [&](size_t i) { return parse_double(f[i], TextLocation{source, line, kCols[i]}); };
    GpuSpec g;
    g.name = f[0];
    KVLAB_REQUIRE(!g.name.empty(), source << ":" << line << ": field 'name' is empty");
    g.memory_bytes = static_cast<int64_t>(std::llround(num(1) * 1073741824.0));
    g.hbm_bytes_per_s = num(2) * 1e12;
    g.bf16_flops = num(3) * 1e12;
    g.fp8_flops = num(4) * 1e12;
    g.fp4_flops = num(5) * 1e12;
    g.fp32_flops = num(6) * 1e12;
    g.num_sms = static_cast<int32_t>(parse_int(f[7], TextLocation{source, line, kCols[7]}));
    g.l2_bytes = static_cast<int64_t>(std::llround(num(8) * 1048576.0));
    g.host_link_bytes_per_s = num(9) * 1e9;
    g.measured_read_bytes_per_s = num(10) * 1e12;
    g.measured_copy_bytes_per_s = num(11) * 1e12;
    try {
      g.validate();
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(source + ":" + std::to_string(line) + ": " + e.what());
    }
    for (const auto& o : out)
      KVLAB_REQUIRE(lower(o.name) != lower(g.name),
                    source << ":" << line << ": GPU '" << g.name << "' listed twice");
    out.push_back(g);
  }
  KVLAB_REQUIRE(header, source << ": no header line");
  return out;
}

std::vector<GpuSpec> load_gpu_table(const std::string& path) {
  const std::string p = path.empty() ? find_data_file("gpus/gpus.csv") : path;
  return parse_gpu_table(read_text_file(p), p);
}

const GpuSpec& find_gpu(const std::vector<GpuSpec>& table, const std::string& name) {
  const std::string want = lower(name);
  for (const auto& g : table)
    if (lower(g.name) == want) return g;
  for (const auto& g : table)
    if (lower(g.name.substr(0, g.name.find('-'))) == want) return g;
  std::ostringstream os;
  os << "unknown GPU '" << name << "' (known:";
  for (const auto& g : table) os << " " << g.name;
  os << ")";
  throw InvalidArgument(os.str());
}

GpuSpec gpu_spec(const std::string& name) {
  return find_gpu(load_gpu_table(), name);
}

}  // namespace kvlab::sim
