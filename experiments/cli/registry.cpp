// registry.cpp: the list of point kinds (see registry.h).
#include "experiments/cli/registry.h"

#include "experiments/calibrate/calibrate.h"
#include "experiments/kinds/decode_step.h"
#include "experiments/kinds/kinds.h"
#include "experiments/kinds/serving_common.h"

namespace kvlab::exp {

const KindList& registered_kinds() {
  static const KindList list = [] {
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
    v.push_back(make_launch_floor_bench());  // the floor under cold decode timings
    v.push_back(make_decode_step_bench());  // the full decode step on the GPU
    v.push_back(make_step_gemm_bench());    // one linear layer of that step
    v.push_back(make_calibrate_bench());    // the cost model's fidelity (experiments/calibrate)
    v.push_back(make_prefill_attention_bench());
    v.push_back(make_serving_step_bench());
    v.push_back(make_serving_bench());
    return KindList(std::move(v));
  }();
  return list;
}

const std::vector<std::unique_ptr<Bench>>& benches() {
  return registered_kinds().all();
}

Bench& find_bench(const std::string& name) {
  return registered_kinds().find(name);
}

}  // namespace kvlab::exp
