// schemes.h: named, parameterized block-scaled quantization schemes (reference).
//
// A QuantScheme quantizes [rows, cols] row-major float data, one row = one token (for a KV
// tensor [tokens, heads, head_dim] with one scale set per (token, head) — the DSV4 substrate's "per
// entry" — pass rows = tokens * heads, cols = head_dim). Everything about it is a field of
// SchemeSpec: element format, scale granularity, scale format and rule, amax floor and
// where it applies, element clamp placement, saturation mode, an optional Walsh-Hadamard
// rotation, an optional FP32 tensor scale over E4M3 block scales (two-level, NVFP4), and a
// raw BF16 tail (DeepSeek-V4's RoPE dims). All scale and element arithmetic is
// scale_rules.h, so GPU quantizers calling the same functions produce the same bytes.
//
// Columns of a row: [0, qcols) are quantized (qcols = cols - raw_tail), [qcols, cols) are
// stored as BF16 (RNE, spec.saturation). The quantized part is cut into groups:
//   kNone       no scale (scale 1): plain casts, e.g. bf16 / fp16 storage
//   kPerTensor  one FP32 scale for the whole tensor (computed from the tensor amax, or given)
//   kPerToken   one scale per row (group = qcols)
//   kPerGroup   one scale per group_size consecutive columns of a row (group_size | qcols)
// With hadamard_size = n > 0 every run of n quantized columns is rotated by the normalized
// Walsh-Hadamard transform (hadamard.h) before quantization, and back after dequantization.
//
// Scale of a group (a = amax over the rotated group, m = elem_max_finite):
//   kFP32  + kExactFP32    s = fp32_scale_exact(a, m, floor, floor_at)
//   kFP32  + kCeilPow2     s = 2^pow2_exp_ceil(...)           (stored as FP32)
//   kFP32  + kOcpFloor     s = 2^pow2_exp_ocp_floor(...)      (stored as FP32)
//   kUE8M0 + kCeilPow2     code = e + 127 of pow2_exp_ceil     (DeepSeek fp8_ds_mla)
//   kUE8M0 + kOcpFloor     code = e + 127 of pow2_exp_ocp_floor (OCP MX)
//   kE4M3  + kE4M3Rounded  code = e4m3_block_scale_code(a, m, t, ...), s = e4m3(code) * t,
//                          t the FP32 tensor scale (two_level: RN(max(tensor amax, floor) /
//                          (m * 448)) or given; otherwise t = 1)
// Per-tensor scales use kFP32 with kExactFP32, kCeilPow2 or kOcpFloor. Element codes:
// quantize_element(x, s, elem, saturation, clamp); values: decode(code) * s.
//
// Byte stream (pack / unpack). Little-endian throughout; FP4 codes two per byte, the
// element with the lower column index in the low nibble (bits 0..3).
//   [header]   FP32 tensor scale, 4 bytes, when kPerTensor or two_level; else nothing
//   [record 0] [record 1] ... [record rows-1], each record_bytes(cols) long:
//     codes    qcols elements: FP8 1 byte each, BF16/FP16 2 bytes each, FP4 qcols/2 bytes
//     tail     raw_tail BF16 values, 2 bytes each
//     scales   the row's group scales in column order: FP32 4 bytes, UE8M0 / E4M3 1 byte
//     pad      zero bytes up to a multiple of record_align
// Page packing (pack_pages, block_size rows per page, DeepSeek-V4's fp8_ds_mla page):
//   [header] then per page: block_size "data rows" (codes + tail) followed by block_size
//   "scale rows" (scales + pad); rows past the end of the last page are zero bytes.
//
// Presets (make_scheme(name); scheme_names() lists them):
//   bf16, fp16                plain RNE casts, no scale
//   fp8_e4m3                  E4M3, FP32 per-tensor scale amax/448
//   fp8_e5m2                  E5M2, FP32 per-tensor scale amax/57344
//   fp8_e4m3_pt               E4M3, FP32 inverse scale per row = RN(max(amax,1e-4)/448) (the
//                             DSV4 per_token_scales entries; what append_kv writes for
//                             kFP8E4M3PerToken)
// (Names: reference/layout/layout_names.h; the older spellings fp8_e4m3_per_tensor,
// fp8_e5m2_per_tensor and fp8_e4m3_per_token are accepted by make_scheme.)
//   fp8_ds_mla                DeepSeek-V4: cols = 512 = 448 FP8 E4M3 NoPE in 7 tiles of 64
//                             with UE8M0 ceil-pow2 scales + 64 BF16 RoPE; record = 448 + 128 +
//                             7 + 1 pad = 584 bytes
//   mxfp4                     E2M1, UE8M0 OCP-floor scale per 32 (what append_kv writes for
//                             kMXFP4)
//   mxfp4_hadamard            mxfp4 after a 128-wide Walsh-Hadamard rotation (V4 indexer keys)
//   nvfp4                     E2M1, E4M3 scale per 16, FP32 tensor scale (two-level)
//   mxfp8                     E4M3, UE8M0 OCP-floor scale per 32
// All dynamic presets floor the amax at kDefaultAmaxFloor (1e-4), saturate (satfinite)
// and clamp through the encoder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reference/formats/formats.h"
#include "reference/quant/scale_rules.h"

namespace kvlab::ref {

enum class Granularity : int32_t { kNone = 0, kPerTensor = 1, kPerToken = 2, kPerGroup = 3 };
enum class ScaleFormat : int32_t { kNone = 0, kFP32 = 1, kUE8M0 = 2, kE4M3 = 3 };
enum class ScaleRule : int32_t {
  kNone = 0,
  kExactFP32 = 1,
  kCeilPow2 = 2,
  kOcpFloor = 3,
  kE4M3Rounded = 4
};

struct SchemeSpec {
  std::string name = "custom";
  ElemFormat elem = ElemFormat::kFP8E4M3;
  Granularity granularity = Granularity::kPerToken;
  int32_t group_size = 0;  // kPerGroup only: columns per scale
  ScaleFormat scale_format = ScaleFormat::kFP32;
  ScaleRule scale_rule = ScaleRule::kExactFP32;
  float amax_floor = kDefaultAmaxFloor;  // finite, >= 0
  AmaxFloorAt floor_at = AmaxFloorAt::kAmax;
  ElementClamp clamp = ElementClamp::kEncoder;
  Saturation saturation = Saturation::kSatFinite;
  int32_t hadamard_size = 0;  // 0 = no rotation; else a power of two in [2, 32768]
  bool two_level = false;     // FP32 tensor scale over E4M3 block scales
  int32_t raw_tail = 0;       // trailing columns stored as BF16, unquantized
  int32_t record_align = 1;   // records are zero-padded to a multiple of this many bytes
  int32_t required_cols = 0;  // 0 = any cols; else the only cols the scheme accepts
};

// Throws InvalidArgument (saying what was given and what is allowed) for an inconsistent
// spec. Column-dependent checks are in QuantScheme::check_cols.
void validate(const SchemeSpec& s);

// "elem=fp4_e2m1 gran=group group=32 scale=ue8m0 rule=ocp_floor floor=0.0001 floor_at=amax
//  clamp=encoder sat=satfinite hadamard=128 two_level=0 tail=0 align=1 cols=0"
std::string to_string(const SchemeSpec& s);
// Parses a preset name, optionally followed by overrides in the to_string() syntax, e.g.
// "mxfp4 group=16 rule=ceil_pow2" or "nvfp4 two_level=0". Keys and values not listed
// throw InvalidArgument naming the allowed ones. The result is validated.
SchemeSpec parse_scheme_spec(const std::string& text);

std::string to_string(ElemFormat f);   // fp8_e4m3, fp8_e5m2, fp4_e2m1, bf16, fp16
std::string to_string(Granularity g);  // none, tensor, token, group
std::string to_string(ScaleFormat f);  // none, fp32, ue8m0, e4m3
std::string to_string(ScaleRule r);    // none, exact, ceil_pow2, ocp_floor, e4m3_rounded

// A quantized [rows, cols] tensor, unpacked (one code per element).
struct QuantizedTensor {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint16_t> codes;        // [rows, qcols] element codes (FP4: low nibble)
  std::vector<uint16_t> tail;         // [rows, raw_tail] BF16 bits
  std::vector<uint32_t> scale_codes;  // [rows, groups]: FP32 bits, or a UE8M0 / E4M3 code
  float tensor_scale = 1.0f;          // kPerTensor scale, or the two-level tensor scale
};

class QuantScheme {
 public:
  explicit QuantScheme(SchemeSpec spec);  // validates

  const SchemeSpec& spec() const { return spec_; }
  const std::string& name() const { return spec_.name; }

  // Throws InvalidArgument unless cols fits the spec (required_cols, raw_tail < cols,
  // group and Hadamard sizes dividing qcols, even qcols for FP4).
  void check_cols(int64_t cols) const;
  int64_t quantized_cols(int64_t cols) const { return cols - spec_.raw_tail; }
  int64_t groups_per_row(int64_t cols) const;  // scales per row (0 for kNone / kPerTensor)
  int64_t group_cols(int64_t cols) const;      // columns per group (qcols for per-token)

  // Bytes of the stream: header_bytes() + rows * record_bytes(cols).
  int64_t header_bytes() const;
  int64_t record_bytes(int64_t cols) const;
  int64_t stream_bytes(int64_t rows, int64_t cols) const;
  // Storage per token: record_bytes plus the header amortized over `rows` tokens
  // (rows = 0: over an unbounded number, i.e. record_bytes).
  double bytes_per_token(int64_t cols, int64_t rows = 0) const;

  // x [rows, cols]. tensor_scale overrides the computed per-tensor / two-level tensor
  // scale (a calibrated or pool scale; must then be finite and positive) and is an error
  // for schemes without one.
  QuantizedTensor quantize(const float* x, int64_t rows, int64_t cols,
                           std::optional<float> tensor_scale = std::nullopt) const;
  std::vector<float> dequantize(const QuantizedTensor& q) const;  // [rows, cols]
  std::vector<float> roundtrip(const float* x, int64_t rows, int64_t cols) const;

  // The FP32 scale that multiplies the codes of group g of row r (decoded scale code, or
  // the e4m3 * tensor product, or the tensor scale).
  float group_scale(const QuantizedTensor& q, int64_t row, int64_t group) const;

  std::vector<uint8_t> pack(const QuantizedTensor& q) const;
  QuantizedTensor unpack(const uint8_t* bytes, size_t n, int64_t rows, int64_t cols) const;
  std::vector<uint8_t> pack_pages(const QuantizedTensor& q, int32_t block_size) const;
  QuantizedTensor unpack_pages(const uint8_t* bytes, size_t n, int64_t rows, int64_t cols,
                               int32_t block_size) const;
  int64_t paged_bytes(int64_t rows, int64_t cols, int32_t block_size) const;

 private:
  SchemeSpec spec_;
  int64_t code_bytes(int64_t cols) const;  // codes part of a record
  int64_t scale_bytes_per_group() const;   // 4, 1 or 0
  void check_quantized(const QuantizedTensor& q) const;
};

// Preset specs and schemes.
const std::vector<std::string>& scheme_names();
SchemeSpec preset_spec(const std::string& name);  // throws InvalidArgument listing the names
QuantScheme make_scheme(const std::string& name_or_spec);  // parse_scheme_spec + QuantScheme

// The overrides a study may put on a preset (sweep axes group_size, scale_rule, hadamard).
struct SchemeOverride {
  int group_size = 0;                 // 0: the preset's
  std::string scale_rule = "preset";  // or one of scale_rule_override_names()
  int hadamard = 0;                   // 0 (or less): the preset's; n: rotate runs of n values
};
// "preset", then the ScaleRule names a study may force: exact, ceil_pow2, ocp_floor, e4m3_rounded.
const std::vector<std::string>& scale_rule_override_names();
// The parse_scheme_spec text of a preset with its overrides, e.g. "mxfp4 group=16
// rule=ceil_pow2 hadamard=32" (make_scheme refuses an override the preset cannot take).
std::string scheme_text(const std::string& preset, const SchemeOverride& o);

}  // namespace kvlab::ref
