// decode_step.h: factories of the full-decode-step benches (experiments/kinds/decode_step.cpp).
//
//   decode_step  the synthetic decoder's whole step on the GPU
//   (gpu/runtime/decode_step_executor.h):
//                step time per variant (eager unfused / eager fused / CUDA graph) x batch x
//                context x KV format, validated in the same run against the eager unfused
//                step (and against the CPU reference for the small presets), next to the
//                roofline prediction of sim's cost model.
//   step_gemm    one linear layer of that decoder alone, time vs batch: the arithmetic-
//                intensity crossover (flat while the weight bytes dominate, growing once the
//                FLOPs do), next to sim's roofline prediction and its ridge-point batch.
#pragma once

#include <memory>

#include "experiments/bench/bench.h"

namespace kvlab::exp {

std::unique_ptr<Bench> make_decode_step_bench();
std::unique_ptr<Bench> make_step_gemm_bench();

}  // namespace kvlab::exp
