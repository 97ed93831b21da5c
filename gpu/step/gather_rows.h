// gather_rows.h: row gather of 16-bit activations (host-includable).
//
//   out[i, :] = in[rows[i], :]   in [*, cols] (16-bit elements, row stride ld_in), rows [m]
//                                int32 device indices, out [m, cols] dense.
// A serving step runs the LM head only over the rows that sample a token (the last row of each
// finishing prompt chunk and every decode row): their final-normed hidden states are gathered
// into a dense block first. Allocates nothing; safe inside CUDA-graph capture.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvlab::gpu::step {

void gather_rows_16bit(const uint16_t* in, int64_t ld_in, const int32_t* rows, uint16_t* out, int m,
                       int cols, cudaStream_t stream);

}  // namespace kvlab::gpu::step
