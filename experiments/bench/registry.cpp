// registry.cpp: the list of benches (see registry.h).
#include "experiments/bench/registry.h"

#include "experiments/calibrate/calibrate.h"
#include "experiments/kinds/decode_step.h"
#include "experiments/kinds/kinds.h"
#include "experiments/kinds/serving_common.h"
#include "reference/core/error.h"

namespace kvlab::exp {

const std::vector<std::unique_ptr<Bench>>& benches() {
  static const std::vector<std::unique_ptr<Bench>> list = [] {
    std::vector<std::unique_ptr<Bench>> v;
    v.push_back(make_quant_error_bench());
    v.push_back(make_format_error_bench());
    v.push_back(make_capacity_bench());
    v.push_back(make_simulate_bench());
    v.push_back(make_roofline_bench());
    v.push_back(make_dsv4_capacity_bench());
    v.push_back(make_compression_error_bench());
    v.push_back(make_real_kv_error_bench());
    v.push_back(make_model_quality_bench());
    v.push_back(make_decode_attention_bench());
    v.push_back(make_append_bench());
    v.push_back(make_bandwidth_bench());
    v.push_back(make_decode_step_bench()), v.push_back(make_step_gemm_bench());  // issue #8
    v.push_back(make_calibrate_bench());  // issue #6 fidelity (experiments/calibrate)
    v.push_back(make_prefill_attention_bench());
    v.push_back(make_serving_step_bench()), v.push_back(make_serving_bench());
    return v;
  }();
  return list;
}

std::vector<std::string> bench_names() {
  std::vector<std::string> n;
  for (const auto& b : benches()) n.push_back(b->name());
  return n;
}

Bench& find_bench(const std::string& name) {
  for (const auto& b : benches())
    if (b->name() == name) return *b;
  std::string all;
  for (const auto& n : bench_names()) all += (all.empty() ? "" : ", ") + n;
  throw InvalidArgument("unknown kind '" + name + "' (known kinds: " + all + ")");
}

}  // namespace kvlab::exp
