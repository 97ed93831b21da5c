// entry_quant.h: how a DSV4 entry and an indexer key are quantized, host and device.
//
// Every rule is a call into reference/quant/scale_rules.h with the parameters of the
// matching refquant preset (reference/quant/schemes.h), so the reference store, the GPU
// kernels and refquant's schemes produce the same bytes:
//   per-token entry (fp8_e4m3_pt)     s = RN(max(amax_nope, 1e-4) / 448), one FP32 per entry
//   public entry (fp8_ds_mla)         per 64-tile: s = 2^ceil_log2(RN(max(amax, 1e-4) / 448)),
//   UE8M0 both                              NoPE code = e4m3(RN(x / s)) satfinite; RoPE = BF16 RNE
//   of x NVFP4 key   (nvfp4, fixed t)      per 16: code = e4m3(RN(RN(max(amax,1e-4) / 6) / t)),
//                                     element divisor e4m3(code) * t
//   MXFP4 key   (mxfp4_hadamard)      rotate each 128-run by the normalized Walsh-Hadamard
//                                     transform, then per 32: s = 2^(floor_log2(max(amax,1e-4)) -
//                                     2)
//   both keys                         element code = e2m1(RN(x / s)) (saturating)
// The amax of a group ignores NaN elements (amax_accumulate); kernels reduce it in any order
// (max is exact), then call the same per-element functions.
#pragma once

#include <cmath>
#include <cstdint>

#include "reference/core/hostdevice.h"
#include "reference/dsv4/views.h"
#include "reference/formats/formats.h"
#include "reference/quant/scale_rules.h"

namespace kvlab {

// ------------------------------------------------------------------ entries
KVLAB_HD float dsv4_pt_scale(float amax_nope) {
  return fp8_scale_from_amax(amax_nope, ElemFormat::kFP8E4M3, kDefaultAmaxFloor,
                             AmaxFloorAt::kAmax);
}
KVLAB_HD int dsv4_mla_tile_exp(float amax_tile) {
  return pow2_exp_ceil(amax_tile, kE4M3Max, kDefaultAmaxFloor, AmaxFloorAt::kAmax);
}
KVLAB_HD uint8_t dsv4_fp8_code(float x, float s) {
  return static_cast<uint8_t>(
      quantize_element(x, s, ElemFormat::kFP8E4M3, Saturation::kSatFinite, ElementClamp::kEncoder));
}
KVLAB_HD uint16_t dsv4_rope_bits(float x) {
  return float_to_bf16_bits(x, Saturation::kSatFinite);
}

// Writes BF16 bits of RoPE element j (either entry format).
KVLAB_HD void dsv4_put_rope(const Dsv4EntryPages& p, int64_t page, int row, int j, uint16_t bits) {
  if (p.format == Dsv4EntryFormat::kFp8PerToken) {
    p.pt_rope(page, row)[j] = bits;
  } else {
    uint8_t* d = p.mla_data_row(page, row) + p.nope_dim + 2 * j;
    d[0] = static_cast<uint8_t>(bits & 0xFFu);
    d[1] = static_cast<uint8_t>(bits >> 8);
  }
}

// Scalar store of one entry x[head_dim] (NoPE dims first). The reference path; kernels
// compute the amax cooperatively and call the same element functions.
KVLAB_HD void dsv4_store_entry(const Dsv4EntryPages& p, int64_t page, int row, const float* x) {
  for (int j = 0; j < p.rope_dim; ++j)
    dsv4_put_rope(p, page, row, j, dsv4_rope_bits(x[p.nope_dim + j]));
  if (p.format == Dsv4EntryFormat::kFp8PerToken) {
    float amax = 0.0f;
    for (int d = 0; d < p.nope_dim; ++d) amax = amax_accumulate(amax, x[d]);
    const float s = dsv4_pt_scale(amax);
    *p.pt_inv_scale(page, row) = s;
    uint8_t* codes = p.pt_nope(page, row);
    for (int d = 0; d < p.nope_dim; ++d) codes[d] = dsv4_fp8_code(x[d], s);
    return;
  }
  uint8_t* codes = p.mla_data_row(page, row);
  uint8_t* scales = p.mla_scale_row(page, row);
  const int tiles = p.nope_dim / kDsMlaTile;
  for (int t = 0; t < tiles; ++t) {
    float amax = 0.0f;
    for (int d = t * kDsMlaTile; d < (t + 1) * kDsMlaTile; ++d) amax = amax_accumulate(amax, x[d]);
    const int e = dsv4_mla_tile_exp(amax);
    scales[t] = ue8m0_code_from_exp(e);
    const float s = pow2_scale_value(e);
    for (int d = t * kDsMlaTile; d < (t + 1) * kDsMlaTile; ++d) codes[d] = dsv4_fp8_code(x[d], s);
  }
  for (int b = tiles; b < ds_mla_scale_row_bytes(p.nope_dim); ++b) scales[b] = 0;  // pad
}

// ------------------------------------------------------------------ indexer keys
constexpr int kDsv4HadamardSize = 128;

// RN(1/sqrt(n)) as float (double sqrt and division are correctly rounded on host and device).
KVLAB_HD float dsv4_hadamard_norm(int n) {
  return static_cast<float>(1.0 / sqrt(static_cast<double>(n)));
}

// In-place normalized Walsh-Hadamard transform of x[0..n), n a power of two, in the exact
// float order of reference/quant/hadamard.h: stages h = 1, 2, ..., n/2, pairs (i, i+h) with
// (i & h) == 0 become (a+b, a-b), then every value times dsv4_hadamard_norm(n).
KVLAB_HD void dsv4_hadamard(float* x, int n) {
  for (int h = 1; h < n; h <<= 1)
    for (int i = 0; i < n; ++i)
      if ((i & h) == 0) {
        const float a = x[i], b = x[i + h];
        x[i] = a + b;
        x[i + h] = a - b;
      }
  const float norm = dsv4_hadamard_norm(n);
  for (int i = 0; i < n; ++i) x[i] = scale_detail::mul_rn(x[i], norm);
}

KVLAB_HD uint8_t dsv4_nvfp4_scale_code(float amax16, float tensor_scale) {
  return nvfp4_block_scale_code(amax16, tensor_scale, kDefaultAmaxFloor, AmaxFloorAt::kAmax);
}
KVLAB_HD int dsv4_mxfp4_exp(float amax32) {
  return pow2_exp_ocp_floor(amax32, elem_emax(ElemFormat::kFP4E2M1), kDefaultAmaxFloor,
                            AmaxFloorAt::kAmax);
}
KVLAB_HD uint8_t dsv4_fp4_code(float x, float s) {
  return static_cast<uint8_t>(
      quantize_element(x, s, ElemFormat::kFP4E2M1, Saturation::kSatFinite, ElementClamp::kEncoder));
}
// The scale code of group g and the FP32 divisor of its elements.
KVLAB_HD uint8_t dsv4_key_scale_code(const Dsv4IndexerView& v, float amax) {
  return v.format == Dsv4IndexerFormat::kNvfp4 ? dsv4_nvfp4_scale_code(amax, v.tensor_scale)
                                               : ue8m0_code_from_exp(dsv4_mxfp4_exp(amax));
}
KVLAB_HD float dsv4_key_scale_value(const Dsv4IndexerView& v, uint8_t code) {
  return v.format == Dsv4IndexerFormat::kNvfp4 ? nvfp4_element_scale(code, v.tensor_scale)
                                               : ue8m0_to_float(code);
}

// Scalar store of one key x[dim]; x is rotated in place for kMxfp4Hadamard.
KVLAB_HD void dsv4_store_key(const Dsv4IndexerView& v, int64_t block, int row, float* x) {
  if (v.format == Dsv4IndexerFormat::kMxfp4Hadamard)
    for (int k = 0; k < v.dim; k += kDsv4HadamardSize) dsv4_hadamard(x + k, kDsv4HadamardSize);
  const int g = v.group();
  uint8_t* codes = v.entry_codes(block, row);
  uint8_t* scales = v.entry_scales(block, row);
  for (int b = 0; b < v.dim / g; ++b) {
    float amax = 0.0f;
    for (int d = b * g; d < (b + 1) * g; ++d) amax = amax_accumulate(amax, x[d]);
    const uint8_t code = dsv4_key_scale_code(v, amax);
    scales[b] = code;
    const float s = dsv4_key_scale_value(v, code);
    for (int d = b * g; d < (b + 1) * g; d += 2)
      codes[d / 2] = pack_fp4x2(dsv4_fp4_code(x[d], s), dsv4_fp4_code(x[d + 1], s));
  }
}

}  // namespace kvlab
