// quantize.cu: standalone quantize / dequantize kernels for reference/quant/schemes.h
// (see quantize.h for the contract).
//
// One thread block per row (token): the row's quantized columns go to shared memory, are
// rotated there (Walsh-Hadamard butterflies stage by stage, exactly the reference's float
// operations: (a + b, a - b) per pair, then x * RN(1/sqrt(n)); every operation is an
// explicit _rn intrinsic, so no FMA contraction can change a bit), then one warp per scale
// group reduces the amax (NaN-absorbing amax_accumulate: any order gives the same bits)
// and derives the scale code with scale_rules.h; finally every thread encodes elements
// with quantize_element and writes bytes at the record's (or page's) offsets. The
// dequantizer mirrors it: decode * scale (dequantize_element), inverse rotation, BF16 tail.
// All spec fields are runtime parameters: one instance of each kernel.
#include <cuda_runtime.h>

#include <cmath>
#include <sstream>

#include "gpu/core/cuda_check.h"
#include "gpu/core/device_info.h"
#include "gpu/quant/quantize.h"
#include "reference/core/error.h"
#include "reference/quant/hadamard.h"
#include "reference/quant/scale_rules.h"

namespace kvlab::gpu {
namespace {

constexpr int kQThreads = 128;
constexpr int kQWarps = kQThreads / 32;
// Slack after the runtime-length shared arrays (see kSmemSlackFloats in
// gpu/attention/kv_vec.cuh: ptxas may widen remainder loads past the last element).
constexpr int kSlackFloats = 4;

// The spec, flattened for the device.
struct QuantParams {
  ElemFormat elem;
  int granularity;   // ref::Granularity
  int scale_format;  // ref::ScaleFormat
  int scale_rule;    // ref::ScaleRule
  float amax_floor;
  AmaxFloorAt floor_at;
  ElementClamp clamp;
  Saturation saturation;
  int hadamard_size;  // 0: none
  float hadamard_norm;
  bool two_level;
  bool has_tensor_scale;
  bool tensor_scale_given;
  float given_tensor_scale;
  int64_t rows, cols, qcols, tail;
  int64_t groups;  // scales per row
  int64_t group_cols;
  int64_t header, record, data_bytes;  // bytes: header, record, codes + tail of a record
  int scale_bytes;                     // per group: 4, 1 or 0
  int page_block_size;                 // 0: records back to back
  const float* x;                      // quantize input [rows, cols]
  uint8_t* stream;                     // quantize output / dequantize input
  float* out;                          // dequantize output [rows, cols]
};

__device__ __forceinline__ void put_byte(uint8_t* p, int64_t off, uint32_t v) {
  p[off] = static_cast<uint8_t>(v);
}
__device__ __forceinline__ void put_u16(uint8_t* p, int64_t off, uint32_t v) {
  p[off] = static_cast<uint8_t>(v);
  p[off + 1] = static_cast<uint8_t>(v >> 8);
}
__device__ __forceinline__ void put_u32(uint8_t* p, int64_t off, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[off + i] = static_cast<uint8_t>(v >> (8 * i));
}
__device__ __forceinline__ uint32_t get_u16(const uint8_t* p, int64_t off) {
  return static_cast<uint32_t>(p[off]) | (static_cast<uint32_t>(p[off + 1]) << 8);
}
__device__ __forceinline__ uint32_t get_u32(const uint8_t* p, int64_t off) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[off + i]) << (8 * i);
  return v;
}

// Byte offsets of row r's data part (codes + tail) and scale part (scales + pad).
__device__ __forceinline__ int64_t data_offset(const QuantParams& p, int64_t r) {
  if (p.page_block_size == 0) return p.header + r * p.record;
  const int64_t bs = p.page_block_size;
  return p.header + (r / bs) * bs * p.record + (r % bs) * p.data_bytes;
}
__device__ __forceinline__ int64_t scale_offset(const QuantParams& p, int64_t r) {
  if (p.page_block_size == 0) return p.header + r * p.record + p.data_bytes;
  const int64_t bs = p.page_block_size;
  return p.header + (r / bs) * bs * p.record + bs * p.data_bytes +
         (r % bs) * (p.record - p.data_bytes);
}

// In-place normalized Walsh-Hadamard transform of every run of n values of w[0..len), in
// the reference's stage order; the caller synchronizes before and after.
__device__ void hadamard_runs(float* w, int64_t len, int n, float norm) {
  for (int h = 1; h < n; h <<= 1) {
    for (int64_t i = threadIdx.x; i < len / 2; i += blockDim.x) {
      const int64_t run = i / (n / 2), k = i % (n / 2);
      const int64_t lo = run * n + (k / h) * 2 * h + (k % h);
      const float a = w[lo], b = w[lo + h];
      w[lo] = __fadd_rn(a, b);
      w[lo + h] = __fsub_rn(a, b);
    }
    __syncthreads();
  }
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) w[i] = __fmul_rn(w[i], norm);
  __syncthreads();
}

__device__ float block_amax(float a, float* red) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2)
    a = amax_accumulate(a, __shfl_xor_sync(0xFFFFFFFFu, a, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) red[warp] = a;
  __syncthreads();
  a = 0.0f;
  for (int w = 0; w < kQWarps; ++w) a = amax_accumulate(a, red[w]);
  return a;
}

// Loads row r's quantized columns into w and rotates them.
__device__ void load_rotated_row(const QuantParams& p, int64_t r, float* w) {
  const float* xr = p.x + r * p.cols;
  for (int64_t j = threadIdx.x; j < p.qcols; j += blockDim.x) w[j] = xr[j];
  __syncthreads();
  if (p.hadamard_size > 0) hadamard_runs(w, p.qcols, p.hadamard_size, p.hadamard_norm);
}

// Pass 1 (computed tensor scale only): amax of every row, atomic max into the header word
// (amax bits are non-negative floats or the canonical NaN, which orders above them all).
// grid rows; shared w [qcols], red [kQWarps].
__global__ void __launch_bounds__(kQThreads) quant_amax_kernel(const QuantParams p) {
  extern __shared__ float qsmem[];
  float* red = qsmem;
  float* w = red + kQWarps;
  load_rotated_row(p, blockIdx.x, w);
  float a = 0.0f;
  for (int64_t j = threadIdx.x; j < p.qcols; j += blockDim.x) a = amax_accumulate(a, w[j]);
  a = block_amax(a, red);
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned int*>(p.stream), __float_as_uint(a));
}

// The scale of a per-tensor scheme from an amax (ref: fp32_scale / the two-level rule).
__device__ float tensor_scale_from_amax(const QuantParams& p, float amax) {
  const float m = elem_max_finite(p.elem);
  if (p.two_level) return fp32_scale_exact(amax, m * kE4M3Max, p.amax_floor, p.floor_at);
  if (p.scale_rule == static_cast<int>(ref::ScaleRule::kExactFP32))
    return fp32_scale_exact(amax, m, p.amax_floor, p.floor_at);
  const int e = p.scale_rule == static_cast<int>(ref::ScaleRule::kCeilPow2)
                    ? pow2_exp_ceil(amax, m, p.amax_floor, p.floor_at)
                    : pow2_exp_ocp_floor(amax, elem_emax(p.elem), p.amax_floor, p.floor_at);
  return pow2_scale_value(e);
}

// Pass 2: header word amax -> tensor scale. One thread.
__global__ void quant_tensor_scale_kernel(const QuantParams p) {
  unsigned int* h = reinterpret_cast<unsigned int*>(p.stream);
  *h = __float_as_uint(tensor_scale_from_amax(p, __uint_as_float(*h)));
}

// Pass 3: one block per row. shared: w [qcols] float, gscale [groups] float, red [kQWarps].
__global__ void __launch_bounds__(kQThreads) quant_rows_kernel(const QuantParams p) {
  extern __shared__ float qsmem[];
  float* red = qsmem;
  float* gscale = red + kQWarps;
  float* w = gscale + p.groups;
  const int64_t r = blockIdx.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint8_t* out = p.stream;
  float t = 1.0f;
  if (p.has_tensor_scale) {
    if (p.tensor_scale_given) {
      t = p.given_tensor_scale;
      if (r == 0 && threadIdx.x == 0) put_u32(out, 0, __float_as_uint(t));
    } else {
      t = __uint_as_float(get_u32(out, 0));  // written by quant_tensor_scale_kernel
    }
  }
  load_rotated_row(p, r, w);
  const int64_t doff = data_offset(p, r), soff = scale_offset(p, r);

  // Scales: one warp per group.
  for (int64_t g = warp; g < p.groups; g += kQWarps) {
    float a = 0.0f;
    for (int64_t j = g * p.group_cols + lane; j < (g + 1) * p.group_cols; j += 32)
      a = amax_accumulate(a, w[j]);
#pragma unroll
    for (int off = 16; off > 0; off /= 2)
      a = amax_accumulate(a, __shfl_xor_sync(0xFFFFFFFFu, a, off));
    if (lane == 0) {
      uint32_t code = 0;
      float s = 1.0f;
      const float m = elem_max_finite(p.elem);
      switch (static_cast<ref::ScaleFormat>(p.scale_format)) {
        case ref::ScaleFormat::kFP32: {
          if (p.scale_rule == static_cast<int>(ref::ScaleRule::kExactFP32)) {
            s = fp32_scale_exact(a, m, p.amax_floor, p.floor_at);
          } else {
            const int e = p.scale_rule == static_cast<int>(ref::ScaleRule::kCeilPow2)
                              ? pow2_exp_ceil(a, m, p.amax_floor, p.floor_at)
                              : pow2_exp_ocp_floor(a, elem_emax(p.elem), p.amax_floor, p.floor_at);
            s = pow2_scale_value(e);
          }
          code = __float_as_uint(s);
          put_u32(out, soff + 4 * g, code);
          break;
        }
        case ref::ScaleFormat::kUE8M0: {
          const int e = p.scale_rule == static_cast<int>(ref::ScaleRule::kCeilPow2)
                            ? pow2_exp_ceil(a, m, p.amax_floor, p.floor_at)
                            : pow2_exp_ocp_floor(a, elem_emax(p.elem), p.amax_floor, p.floor_at);
          code = ue8m0_code_from_exp(e);
          s = ue8m0_to_float(static_cast<uint8_t>(code));
          put_byte(out, soff + g, code);
          break;
        }
        case ref::ScaleFormat::kE4M3: {
          code = e4m3_block_scale_code(a, m, t, p.amax_floor, p.floor_at);
          s = nvfp4_element_scale(static_cast<uint8_t>(code), t);
          put_byte(out, soff + g, code);
          break;
        }
        case ref::ScaleFormat::kNone:
          break;
      }
      gscale[g] = s;
    }
  }
  __syncthreads();

  // Elements (FP4: one thread per byte pair), then the raw BF16 tail.
  const int bits = elem_bits(p.elem);
  const bool per_tensor = p.granularity == static_cast<int>(ref::Granularity::kPerTensor);
  const bool none = p.granularity == static_cast<int>(ref::Granularity::kNone);
  auto scale_of = [&](int64_t j) {
    return none ? 1.0f : (per_tensor ? t : gscale[j / p.group_cols]);
  };
  auto code_of = [&](int64_t j) {
    return static_cast<uint32_t>(
        quantize_element(w[j], scale_of(j), p.elem, p.saturation, p.clamp));
  };
  if (bits == 4) {
    for (int64_t j = 2 * threadIdx.x; j < p.qcols; j += 2 * blockDim.x)
      put_byte(out, doff + j / 2,
               pack_fp4x2(static_cast<uint8_t>(code_of(j)), static_cast<uint8_t>(code_of(j + 1))));
  } else {
    for (int64_t j = threadIdx.x; j < p.qcols; j += blockDim.x) {
      if (bits == 8)
        put_byte(out, doff + j, code_of(j));
      else
        put_u16(out, doff + 2 * j, code_of(j));
    }
  }
  const float* xr = p.x + r * p.cols;
  const int64_t code_bytes = p.qcols * bits / 8;
  for (int64_t j = threadIdx.x; j < p.tail; j += blockDim.x)
    put_u16(out, doff + code_bytes + 2 * j, float_to_bf16_bits(xr[p.qcols + j], p.saturation));
}

// Dequantize: one block per row. shared: w [qcols] float.
__global__ void __launch_bounds__(kQThreads) dequant_rows_kernel(const QuantParams p) {
  extern __shared__ float qsmem[];
  float* w = qsmem;
  const int64_t r = blockIdx.x;
  const uint8_t* in = p.stream;
  const int64_t doff = data_offset(p, r), soff = scale_offset(p, r);
  const float t = p.has_tensor_scale ? __uint_as_float(get_u32(in, 0)) : 1.0f;
  const bool per_tensor = p.granularity == static_cast<int>(ref::Granularity::kPerTensor);
  const bool none = p.granularity == static_cast<int>(ref::Granularity::kNone);
  const int bits = elem_bits(p.elem);
  for (int64_t j = threadIdx.x; j < p.qcols; j += blockDim.x) {
    float s = 1.0f;
    if (per_tensor) {
      s = t;
    } else if (!none) {
      const int64_t g = j / p.group_cols;
      switch (static_cast<ref::ScaleFormat>(p.scale_format)) {
        case ref::ScaleFormat::kFP32:
          s = __uint_as_float(get_u32(in, soff + 4 * g));
          break;
        case ref::ScaleFormat::kUE8M0:
          s = ue8m0_to_float(in[soff + g]);
          break;
        case ref::ScaleFormat::kE4M3:
          s = nvfp4_element_scale(in[soff + g], t);
          break;
        case ref::ScaleFormat::kNone:
          break;
      }
    }
    uint16_t code;
    if (bits == 4) {
      const uint8_t b = in[doff + j / 2];
      code = (j & 1) ? fp4_hi(b) : fp4_lo(b);
    } else if (bits == 8) {
      code = in[doff + j];
    } else {
      code = static_cast<uint16_t>(get_u16(in, doff + 2 * j));
    }
    w[j] = dequantize_element(code, s, p.elem);
  }
  __syncthreads();
  if (p.hadamard_size > 0) hadamard_runs(w, p.qcols, p.hadamard_size, p.hadamard_norm);
  float* o = p.out + r * p.cols;
  for (int64_t j = threadIdx.x; j < p.qcols; j += blockDim.x) o[j] = w[j];
  const int64_t code_bytes = p.qcols * bits / 8;
  for (int64_t j = threadIdx.x; j < p.tail; j += blockDim.x)
    o[p.qcols + j] =
        bf16_bits_to_float(static_cast<uint16_t>(get_u16(in, doff + code_bytes + 2 * j)));
}

QuantParams make_params(const ref::QuantScheme& sc, int64_t rows, int64_t cols,
                        int32_t page_block_size) {
  const ref::SchemeSpec& s = sc.spec();
  QuantParams p{};
  p.elem = s.elem;
  p.granularity = static_cast<int>(s.granularity);
  p.scale_format = static_cast<int>(s.scale_format);
  p.scale_rule = static_cast<int>(s.scale_rule);
  p.amax_floor = s.amax_floor;
  p.floor_at = s.floor_at;
  p.clamp = s.clamp;
  p.saturation = s.saturation;
  p.hadamard_size = s.hadamard_size;
  p.hadamard_norm = s.hadamard_size > 0 ? ref::hadamard_norm(s.hadamard_size) : 1.0f;
  p.two_level = s.two_level;
  p.has_tensor_scale = s.granularity == ref::Granularity::kPerTensor || s.two_level;
  p.rows = rows;
  p.cols = cols;
  p.qcols = sc.quantized_cols(cols);
  p.tail = s.raw_tail;
  p.groups = sc.groups_per_row(cols);
  p.group_cols = sc.group_cols(cols);
  p.header = sc.header_bytes();
  p.record = sc.record_bytes(cols);
  p.data_bytes = p.qcols * elem_bits(s.elem) / 8 + 2 * p.tail;
  p.scale_bytes = s.scale_format == ref::ScaleFormat::kFP32
                      ? 4
                      : (s.scale_format == ref::ScaleFormat::kNone ? 0 : 1);
  p.page_block_size = page_block_size;
  return p;
}

size_t row_smem(const QuantParams& p, bool with_scales) {
  return (kQWarps + (with_scales ? p.groups : 0) + p.qcols + kSlackFloats) * sizeof(float);
}

void check_smem(const QuantParams& p, size_t smem, const char* what) {
  const int optin = current_launch_limits().smem_per_block_optin;
  KVLAB_UNSUPPORTED_IF(smem > static_cast<size_t>(optin),
                       what << ": a row of " << p.cols << " columns needs " << smem
                            << " bytes of shared memory, the device allows " << optin);
}

template <class Kernel>
cudaError_t launch_rows(Kernel kernel, const QuantParams& p, size_t smem, cudaStream_t stream) {
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  kernel<<<static_cast<unsigned>(p.rows), kQThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

void check_common(const ref::QuantScheme& sc, int64_t rows, int64_t cols, int32_t page_block_size,
                  const char* who) {
  KVLAB_REQUIRE(rows >= 0, who << ": rows must be >= 0, got " << rows);
  KVLAB_REQUIRE(rows <= INT32_MAX,
                who << ": rows " << rows << " exceed the grid (one block per row)");
  KVLAB_REQUIRE(page_block_size >= 0,
                who << ": page_block_size must be >= 0 (0 = records), got " << page_block_size);
  sc.check_cols(cols);
}

}  // namespace

int64_t quant_stream_bytes(const ref::QuantScheme& scheme, int64_t rows, int64_t cols,
                           int32_t page_block_size) {
  KVLAB_REQUIRE(page_block_size >= 0,
                "page_block_size must be >= 0 (0 = records), got " << page_block_size);
  return page_block_size == 0 ? scheme.stream_bytes(rows, cols)
                              : scheme.paged_bytes(rows, cols, page_block_size);
}

void quantize(const ref::QuantScheme& scheme, const float* x, int64_t rows, int64_t cols,
              uint8_t* out, size_t out_bytes, cudaStream_t stream,
              std::optional<float> tensor_scale, int32_t page_block_size) {
  const char* who = "gpu::quantize";
  check_common(scheme, rows, cols, page_block_size, who);
  QuantParams p = make_params(scheme, rows, cols, page_block_size);
  if (tensor_scale) {
    KVLAB_REQUIRE(p.has_tensor_scale,
                  who << ": scheme '" << scheme.name() << "' has no tensor scale to give");
    KVLAB_REQUIRE(
        std::isfinite(*tensor_scale) && *tensor_scale > 0.0f,
        who << ": the given tensor scale must be finite and positive, got " << *tensor_scale);
    p.tensor_scale_given = true;
    p.given_tensor_scale = *tensor_scale;
  }
  const int64_t need = quant_stream_bytes(scheme, rows, cols, page_block_size);
  KVLAB_REQUIRE(out_bytes >= static_cast<size_t>(need), who << ": scheme '" << scheme.name()
                                                            << "' needs " << need
                                                            << " output bytes, got " << out_bytes);
  if (need == 0) return;
  KVLAB_REQUIRE(out != nullptr, who << ": output is null");
  KVLAB_REQUIRE(rows == 0 || x != nullptr, who << ": input is null for " << rows << " rows");
  KVLAB_REQUIRE(!p.has_tensor_scale || reinterpret_cast<uintptr_t>(out) % 4 == 0,
                who << ": the output must be 4-byte aligned (atomic tensor amax in the header)");
  p.x = x;
  p.stream = out;
  const size_t smem = row_smem(p, true);
  check_smem(p, smem, who);
  KVLAB_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<size_t>(need), stream));
  if (rows == 0) {  // the reference's header: the given scale, or the scale of amax 0
    if (p.has_tensor_scale && p.tensor_scale_given)
      KVLAB_CUDA_CHECK(
          cudaMemcpyAsync(out, &p.given_tensor_scale, 4, cudaMemcpyHostToDevice, stream));
    else if (p.has_tensor_scale)
      quant_tensor_scale_kernel<<<1, 1, 0, stream>>>(p);
    KVLAB_CHECK_LAUNCH();
    KVLAB_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host scale above lives on the stack
    return;
  }
  if (p.has_tensor_scale && !p.tensor_scale_given) {
    KVLAB_CUDA_CHECK(launch_rows(quant_amax_kernel, p, row_smem(p, false), stream));
    KVLAB_CHECK_LAUNCH();
    quant_tensor_scale_kernel<<<1, 1, 0, stream>>>(p);
    KVLAB_CHECK_LAUNCH();
  }
  KVLAB_CUDA_CHECK(launch_rows(quant_rows_kernel, p, smem, stream));
  KVLAB_CHECK_LAUNCH();
}

void dequantize(const ref::QuantScheme& scheme, const uint8_t* in, size_t in_bytes, int64_t rows,
                int64_t cols, float* out, cudaStream_t stream, int32_t page_block_size) {
  const char* who = "gpu::dequantize";
  check_common(scheme, rows, cols, page_block_size, who);
  QuantParams p = make_params(scheme, rows, cols, page_block_size);
  const int64_t need = quant_stream_bytes(scheme, rows, cols, page_block_size);
  KVLAB_REQUIRE(in_bytes == static_cast<size_t>(need),
                who << ": scheme '" << scheme.name() << "' with " << rows << " x " << cols
                    << " is a stream of " << need << " bytes, got " << in_bytes);
  if (rows == 0) return;
  KVLAB_REQUIRE(in != nullptr && out != nullptr, who << ": null input or output");
  p.stream = const_cast<uint8_t*>(in);
  p.out = out;
  const size_t smem = (p.qcols + kSlackFloats) * sizeof(float);
  check_smem(p, smem, who);
  KVLAB_CUDA_CHECK(launch_rows(dequant_rows_kernel, p, smem, stream));
  KVLAB_CHECK_LAUNCH();
}

}  // namespace kvlab::gpu
