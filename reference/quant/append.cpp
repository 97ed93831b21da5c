// append.cpp: reference append_kv (see append.h for the exact rule per format).
#include "reference/quant/append.h"

#include <cmath>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "reference/core/error.h"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"
#include "reference/quant/scale_rules.h"

namespace kvlab::ref {
namespace {

// Input element (token, head, dim) of a [num_tokens, num_kv_heads, head_dim] tensor.
float load_input(const void* p, DType t, int64_t idx) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(p)[idx];
    case DType::kBF16:
      return bf16_bits_to_float(static_cast<const uint16_t*>(p)[idx]);
    case DType::kF16:
      return fp16_bits_to_float(static_cast<const uint16_t*>(p)[idx]);
  }
  return 0.0f;
}

// Store an element code at pool element index `idx` of a pool in `format`.
void store_code(void* pool, KvFormat format, int64_t idx, uint16_t code) {
  switch (kv_format_bits(format)) {
    case 16:
      static_cast<uint16_t*>(pool)[idx] = code;
      return;
    case 8:
      static_cast<uint8_t*>(pool)[idx] = static_cast<uint8_t>(code);
      return;
    case 4: {
      uint8_t& byte = static_cast<uint8_t*>(pool)[idx >> 1];
      byte = (idx & 1) ? pack_fp4x2(fp4_lo(byte), static_cast<uint8_t>(code))
                       : pack_fp4x2(static_cast<uint8_t>(code), fp4_hi(byte));
      return;
    }
  }
}

bool pool_scale_ok(float s) {
  return std::isfinite(s) && s > 0.0f;
}

// Writes one (token, head) row x [head_dim] of K (is_k) or V into (block, slot).
void write_row(const KvCacheView& kv, bool is_k, int64_t block, int head, int slot,
               const float* x) {
  const PageGeometry& g = kv.geom;
  void* pool = is_k ? kv.k : kv.v;
  void* scales = is_k ? kv.k_scales : kv.v_scales;
  const float pool_scale = is_k ? kv.k_scale : kv.v_scale;
  const int D = g.head_dim;
  auto index = [&](int d) {
    return is_k ? g.k_index(block, head, slot, d) : g.v_index(block, head, slot, d);
  };

  switch (g.format) {
    case KvFormat::kBF16:
      for (int d = 0; d < D; ++d)
        store_code(pool, g.format, index(d), float_to_bf16_bits(x[d], Saturation::kNonSaturating));
      return;
    case KvFormat::kFP16:
      for (int d = 0; d < D; ++d)
        store_code(pool, g.format, index(d), float_to_fp16_bits(x[d], Saturation::kNonSaturating));
      return;
    case KvFormat::kFP8E4M3:
    case KvFormat::kFP8E5M2: {
      const ElemFormat ef =
          g.format == KvFormat::kFP8E4M3 ? ElemFormat::kFP8E4M3 : ElemFormat::kFP8E5M2;
      for (int d = 0; d < D; ++d)
        store_code(
            pool, g.format, index(d),
            quantize_element(x[d], pool_scale, ef, Saturation::kSatFinite, ElementClamp::kEncoder));
      return;
    }
    case KvFormat::kFP8E4M3PerToken: {
      float amax = 0.0f;
      for (int d = 0; d < D; ++d) amax = amax_accumulate(amax, x[d]);
      const float s = kv_fp8_token_scale(amax);
      for (int d = 0; d < D; ++d)
        store_code(pool, g.format, index(d),
                   quantize_element(x[d], s, ElemFormat::kFP8E4M3, Saturation::kSatFinite,
                                    ElementClamp::kEncoder));
      static_cast<float*>(scales)[g.token_scale_index(block, head, slot)] = s;
      return;
    }
    case KvFormat::kNVFP4:
    case KvFormat::kMXFP4: {
      const int G = g.scale_group();
      for (int d0 = 0; d0 < D; d0 += G) {
        float amax = 0.0f;
        for (int d = d0; d < d0 + G; ++d) amax = amax_accumulate(amax, x[d]);
        const KvBlockScale bs = kv_fp4_block_scale(g.format == KvFormat::kNVFP4, amax, pool_scale);
        const uint8_t scode = bs.code;
        const float div = bs.div;
        for (int d = d0; d < d0 + G; ++d)
          store_code(pool, g.format, index(d),
                     quantize_element(x[d], div, ElemFormat::kFP4E2M1, Saturation::kSatFinite,
                                      ElementClamp::kEncoder));
        static_cast<uint8_t*>(scales)[g.block_scale_index(block, head, slot, d0)] = scode;
      }
      return;
    }
  }
}

}  // namespace

void validate_append(const AppendArgs& a, bool slots_on_host) {
  KVLAB_REQUIRE(
      a.in_dtype == DType::kF32 || a.in_dtype == DType::kBF16 || a.in_dtype == DType::kF16,
      "append_kv: invalid in_dtype value " << static_cast<int>(a.in_dtype)
                                           << " (allowed: f32, bf16, f16)");
  KVLAB_REQUIRE(a.num_tokens >= 0, "append_kv: num_tokens must be >= 0, got " << a.num_tokens);
  kvlab::validate(a.kv.geom);
  const PageGeometry& g = a.kv.geom;
  KVLAB_REQUIRE(a.kv.k != nullptr && a.kv.v != nullptr,
                "append_kv: the K and V pools must be non-null");
  if (kv_format_has_token_scales(g.format) || kv_format_has_block_scales(g.format))
    KVLAB_REQUIRE(a.kv.k_scales != nullptr && a.kv.v_scales != nullptr,
                  "append_kv: format " << to_string(g.format)
                                       << " needs k_scales and v_scales arrays, got null");
  if (kv_format_has_pool_scale(g.format))
    KVLAB_REQUIRE(pool_scale_ok(a.kv.k_scale) && pool_scale_ok(a.kv.v_scale),
                  "append_kv: format " << to_string(g.format)
                                       << " needs finite positive k_scale and v_scale, got "
                                       << a.kv.k_scale << " and " << a.kv.v_scale);
  if (a.num_tokens == 0) return;
  KVLAB_REQUIRE(a.k != nullptr && a.v != nullptr,
                "append_kv: k and v inputs must be non-null for " << a.num_tokens << " tokens");
  KVLAB_REQUIRE(a.slot_mapping != nullptr,
                "append_kv: slot_mapping must be non-null for " << a.num_tokens << " tokens");
  if (!slots_on_host) return;
  const int64_t num_slots = g.num_blocks * g.block_size;
  std::unordered_map<int64_t, int32_t> seen;
  seen.reserve(static_cast<size_t>(a.num_tokens) * 2);
  for (int32_t i = 0; i < a.num_tokens; ++i) {
    const int64_t s = a.slot_mapping[i];
    KVLAB_REQUIRE(s >= -1 && s < num_slots,
                  "append_kv: slot_mapping[" << i << "] = " << s << " is outside [-1, " << num_slots
                                             << ") (num_blocks " << g.num_blocks << " x block_size "
                                             << g.block_size << "; -1 = padding)");
    if (s < 0) continue;
    auto [it, inserted] = seen.emplace(s, i);
    KVLAB_REQUIRE(inserted, "append_kv: slot " << s << " is written twice (tokens " << it->second
                                               << " and " << i
                                               << "); each slot may appear once per call");
  }
}

void append_kv(const AppendArgs& a) {
  validate_append(a, true);
  const PageGeometry& g = a.kv.geom;
  const int H = g.num_kv_heads, D = g.head_dim;
  std::vector<float> row(static_cast<size_t>(D));
  for (int32_t i = 0; i < a.num_tokens; ++i) {
    const int64_t s = a.slot_mapping[i];
    if (s < 0) continue;  // padding
    const int64_t block = s / g.block_size;
    const int slot = static_cast<int>(s % g.block_size);
    for (int h = 0; h < H; ++h) {
      const int64_t base = (static_cast<int64_t>(i) * H + h) * D;
      for (int d = 0; d < D; ++d) row[d] = load_input(a.k, a.in_dtype, base + d);
      write_row(a.kv, true, block, h, slot, row.data());
      for (int d = 0; d < D; ++d) row[d] = load_input(a.v, a.in_dtype, base + d);
      write_row(a.kv, false, block, h, slot, row.data());
    }
  }
}

}  // namespace kvlab::ref
