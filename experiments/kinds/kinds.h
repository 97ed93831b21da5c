// kinds.h: factories of the benches (one file per kind in experiments/kinds/).
#pragma once

#include <memory>
#include <string>

#include "experiments/bench/bench.h"

namespace kvlab::exp {

std::unique_ptr<Bench> make_format_error_bench();
std::unique_ptr<Bench> make_quant_error_bench();
std::unique_ptr<Bench> make_capacity_bench();
std::unique_ptr<Bench> make_simulate_bench();
std::unique_ptr<Bench> make_roofline_bench();
std::unique_ptr<Bench> make_dsv4_capacity_bench();
std::unique_ptr<Bench> make_compression_error_bench();
// Real-model kinds (a kvlab model file: experiments/model/).
std::unique_ptr<Bench> make_real_kv_error_bench();
std::unique_ptr<Bench> make_model_quality_bench();
// GPU benches (recorded as skipped without a device or without CUDA).
std::unique_ptr<Bench> make_decode_attention_bench();
std::unique_ptr<Bench> make_append_bench();
std::unique_ptr<Bench> make_bandwidth_bench();
std::unique_ptr<Bench> make_prefill_attention_bench();
std::unique_ptr<Bench> make_launch_floor_bench();
// The launch_floor kind's row name ("empty", "chain3", "chain3_page16k", "chain3_primed_lines").
std::string launch_floor_row_name(const Point& p);

}  // namespace kvlab::exp
