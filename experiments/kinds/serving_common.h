// serving_common.h: what the serving_step and serving kinds share.
//
//   serving_step  one synthetic step (decode sequences + prefill chunks) through the GPU
//                 serving executor (gpu/runtime/serving_executor.h), validated (batching
//                 invariance: the mixed step's sampled logits equal those of its decode and
//                 prefill parts run alone; a graph replay equals its eager twin), then timed
//                 whole (host wall clock, as a serving run measures a step) and part by part
//                 in the same state (GEMMs, LM head, decode and prefill attention): the records
//                 sim's serving step model is fitted to (sim/cost/serving_step_model.h)
//   serving       a whole serving run on the GPU driven by sim::Engine, the same workload
//                 through the simulator with that model, and their comparison
//
// Both build their executor from the same axes (preset, layers, block_size, pool_blocks,
// max_num_seqs, max_num_batched_tokens, max_context, graph); a process keeps one executor
// and rebuilds it only when those change, so a sweep whose points share them generates the
// weights and captures the graphs once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "experiments/bench/bench.h"
#include "experiments/device/device.h"  // ServingExecutorConfig, serving_executor
#include "reference/step/decoder_config.h"
#include "sim/cost/serving_step_model.h"

namespace kvlab::exp {

// The executor axes, in the order both kinds declare them.
std::vector<AxisSpec> serving_executor_axes();

// The point's executor axes (experiments/device/device.h: ServingExecutorConfig);
// InvalidArgument for values outside their ranges.
ServingExecutorConfig serving_executor_config(const Point& p);

// The serving step model's records of a result file: every ok serving_step point whose
// executor matches `c` (preset, layers, block size, max_num_seqs, graph). InvalidArgument /
// ResultFileError for a missing or foreign file, or one without a matching point (the
// message lists what the file holds).
std::vector<sim::StepPartsRecord> read_serving_step_records(const std::string& path,
                                                            const ServingExecutorConfig& c,
                                                            std::string* device = nullptr);

std::unique_ptr<Bench> make_serving_step_bench();
std::unique_ptr<Bench> make_serving_bench();

}  // namespace kvlab::exp
