// quantize.h: GPU quantize / dequantize of reference/quant/schemes.h's schemes, byte-exact
// to the reference (0 differing bytes).
//
//   gpu::quantize(scheme, x, rows, cols, out, out_bytes, stream)
//       == ref scheme.pack(scheme.quantize(x, rows, cols))              (page_block_size 0)
//       == ref scheme.pack_pages(scheme.quantize(x, rows, cols), bs)    (page_block_size bs)
//   gpu::dequantize(scheme, in, in_bytes, rows, cols, out, stream)
//       == ref scheme.dequantize(scheme.unpack(in, ...))                 (bitwise equal floats)
//
// x and out are device buffers: x float [rows, cols] row-major (a row = one token), the
// stream in the scheme's documented byte layout (header, records / pages, little-endian,
// low nibble first). Every preset and every valid custom SchemeSpec is supported: element
// format, granularity, scale format and rule, amax floor and its placement, clamp,
// saturation, Hadamard rotation (butterflies in the reference's order and rounding), the
// two-level tensor scale, the raw BF16 tail and record alignment are runtime parameters of
// one kernel set. All scale and element arithmetic is scale_rules.h's KVLAB_HD functions.
//
// A computed tensor scale (per-tensor and two-level schemes without `tensor_scale`) takes
// three launches: a per-row amax of the (rotated) data combined with an atomic max into the
// stream's header word, a one-thread kernel that turns it into the scale, then the rows.
// The output is cleared first (cudaMemsetAsync): record padding and the rows past the end of
// the last page are zero bytes, as in the reference.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "reference/quant/schemes.h"

namespace kvlab::gpu {

// Bytes of the stream for rows x cols (scheme.stream_bytes or scheme.paged_bytes).
int64_t quant_stream_bytes(const ref::QuantScheme& scheme, int64_t rows, int64_t cols,
                           int32_t page_block_size = 0);

// Throws InvalidArgument for bad arguments (null buffers, cols the scheme rejects, an output
// smaller than quant_stream_bytes, a tensor scale for a scheme without one or a non-finite
// one, negative page_block_size) and Unsupported when a row does not fit in shared memory.
void quantize(const ref::QuantScheme& scheme, const float* x, int64_t rows, int64_t cols,
              uint8_t* out, size_t out_bytes, cudaStream_t stream,
              std::optional<float> tensor_scale = std::nullopt, int32_t page_block_size = 0);

void dequantize(const ref::QuantScheme& scheme, const uint8_t* in, size_t in_bytes, int64_t rows,
                int64_t cols, float* out, cudaStream_t stream, int32_t page_block_size = 0);

}  // namespace kvlab::gpu
