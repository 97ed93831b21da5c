// schemes.cpp: QuantScheme, presets and spec parsing (see schemes.h for the rules).
#include "reference/quant/schemes.h"

#include <cmath>
#include <cstring>
#include <map>
#include <sstream>
#include <utility>

#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "reference/quant/hadamard.h"

namespace kvlab::ref {
namespace {

// ---------------------------------------------------------------- names
template <typename E>
struct NameTable {
  std::vector<std::pair<E, const char*>> entries;
  std::string name(E e) const {
    for (const auto& [v, n] : entries)
      if (v == e) return n;
    return "invalid(" + std::to_string(static_cast<int>(e)) + ")";
  }
  std::string allowed() const {
    std::string s;
    for (const auto& [v, n] : entries) s += (s.empty() ? "" : ", ") + std::string(n);
    return s;
  }
  E parse(const std::string& key, const std::string& text) const {
    for (const auto& [v, n] : entries)
      if (text == n) return v;
    throw InvalidArgument("scheme spec: unknown " + key + " '" + text + "' (allowed: " + allowed() +
                          ")");
  }
  bool valid(E e) const {
    for (const auto& [v, n] : entries)
      if (v == e) return true;
    return false;
  }
};

const NameTable<ElemFormat> kElemNames{{{ElemFormat::kFP8E4M3, "fp8_e4m3"},
                                        {ElemFormat::kFP8E5M2, "fp8_e5m2"},
                                        {ElemFormat::kFP4E2M1, "fp4_e2m1"},
                                        {ElemFormat::kBF16, "bf16"},
                                        {ElemFormat::kFP16, "fp16"}}};
const NameTable<Granularity> kGranNames{{{Granularity::kNone, "none"},
                                         {Granularity::kPerTensor, "tensor"},
                                         {Granularity::kPerToken, "token"},
                                         {Granularity::kPerGroup, "group"}}};
const NameTable<ScaleFormat> kScaleFmtNames{{{ScaleFormat::kNone, "none"},
                                             {ScaleFormat::kFP32, "fp32"},
                                             {ScaleFormat::kUE8M0, "ue8m0"},
                                             {ScaleFormat::kE4M3, "fp8_e4m3"}}};
const NameTable<ScaleRule> kRuleNames{{{ScaleRule::kNone, "none"},
                                       {ScaleRule::kExactFP32, "exact"},
                                       {ScaleRule::kCeilPow2, "ceil_pow2"},
                                       {ScaleRule::kOcpFloor, "ocp_floor"},
                                       {ScaleRule::kE4M3Rounded, "e4m3_rounded"}}};
const NameTable<AmaxFloorAt> kFloorAtNames{
    {{AmaxFloorAt::kAmax, "amax"}, {AmaxFloorAt::kScale, "scale"}}};
const NameTable<ElementClamp> kClampNames{
    {{ElementClamp::kEncoder, "encoder"}, {ElementClamp::kClampThenEncode, "clamp_then_encode"}}};
const NameTable<Saturation> kSatNames{
    {{Saturation::kSatFinite, "satfinite"}, {Saturation::kNonSaturating, "nonsat"}}};

// ---------------------------------------------------------------- little-endian bytes
void put_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t get_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint32_t f32_bits(float x) {
  return fmt_detail::f32_bits(x);
}
float bits_f32(uint32_t u) {
  return fmt_detail::bits_f32(u);
}

// The power-of-two exponent of a group under a pow2 rule.
int pow2_exp(const SchemeSpec& s, float amax) {
  return s.scale_rule == ScaleRule::kCeilPow2
             ? pow2_exp_ceil(amax, elem_max_finite(s.elem), s.amax_floor, s.floor_at)
             : pow2_exp_ocp_floor(amax, elem_emax(s.elem), s.amax_floor, s.floor_at);
}

// FP32 scale of a per-tensor scheme from the tensor amax.
float fp32_scale(const SchemeSpec& s, float amax) {
  if (s.scale_rule == ScaleRule::kExactFP32)
    return fp32_scale_exact(amax, elem_max_finite(s.elem), s.amax_floor, s.floor_at);
  return pow2_scale_value(pow2_exp(s, amax));
}

}  // namespace

std::string to_string(ElemFormat f) {
  return kElemNames.name(f);
}
std::string to_string(Granularity g) {
  return kGranNames.name(g);
}
std::string to_string(ScaleFormat f) {
  return kScaleFmtNames.name(f);
}
std::string to_string(ScaleRule r) {
  return kRuleNames.name(r);
}

// ---------------------------------------------------------------- validation
void validate(const SchemeSpec& s) {
  const std::string who = "scheme '" + s.name + "': ";
  KVLAB_REQUIRE(kElemNames.valid(s.elem), who << "invalid element format value "
                                              << static_cast<int>(s.elem)
                                              << " (allowed: " << kElemNames.allowed() << ")");
  KVLAB_REQUIRE(kGranNames.valid(s.granularity),
                who << "invalid granularity value " << static_cast<int>(s.granularity)
                    << " (allowed: " << kGranNames.allowed() << ")");
  KVLAB_REQUIRE(kScaleFmtNames.valid(s.scale_format),
                who << "invalid scale format value " << static_cast<int>(s.scale_format)
                    << " (allowed: " << kScaleFmtNames.allowed() << ")");
  KVLAB_REQUIRE(kRuleNames.valid(s.scale_rule),
                who << "invalid scale rule value " << static_cast<int>(s.scale_rule)
                    << " (allowed: " << kRuleNames.allowed() << ")");
  KVLAB_REQUIRE(kFloorAtNames.valid(s.floor_at),
                who << "invalid floor_at value " << static_cast<int>(s.floor_at)
                    << " (allowed: " << kFloorAtNames.allowed() << ")");
  KVLAB_REQUIRE(kClampNames.valid(s.clamp), who << "invalid clamp value "
                                                << static_cast<int>(s.clamp)
                                                << " (allowed: " << kClampNames.allowed() << ")");
  KVLAB_REQUIRE(kSatNames.valid(s.saturation), who << "invalid saturation value "
                                                   << static_cast<int>(s.saturation)
                                                   << " (allowed: " << kSatNames.allowed() << ")");

  if (s.granularity == Granularity::kNone) {
    KVLAB_REQUIRE(s.scale_format == ScaleFormat::kNone && s.scale_rule == ScaleRule::kNone,
                  who << "granularity none has no scale: scale format and rule must be none, got "
                      << to_string(s.scale_format) << " / " << to_string(s.scale_rule));
  } else {
    KVLAB_REQUIRE(s.scale_format != ScaleFormat::kNone && s.scale_rule != ScaleRule::kNone,
                  who << "granularity " << to_string(s.granularity)
                      << " needs a scale format (fp32, ue8m0, fp8_e4m3) and a rule, got "
                      << to_string(s.scale_format) << " / " << to_string(s.scale_rule));
    KVLAB_REQUIRE(s.elem != ElemFormat::kBF16 && s.elem != ElemFormat::kFP16,
                  who << "element format " << to_string(s.elem)
                      << " is stored unscaled (granularity none); scaled formats: fp8_e4m3, "
                         "fp8_e5m2, fp4_e2m1");
  }
  if (s.granularity == Granularity::kPerGroup)
    KVLAB_REQUIRE(s.group_size >= 1,
                  who << "group granularity needs group_size >= 1, got " << s.group_size);
  else
    KVLAB_REQUIRE(s.group_size == 0,
                  who << "group_size applies to granularity group only, got group_size "
                      << s.group_size << " with granularity " << to_string(s.granularity));
  if (s.granularity == Granularity::kPerTensor)
    KVLAB_REQUIRE(s.scale_format == ScaleFormat::kFP32,
                  who << "a per-tensor scale is stored as fp32, got scale format "
                      << to_string(s.scale_format));
  switch (s.scale_format) {
    case ScaleFormat::kNone:
      break;
    case ScaleFormat::kFP32:
      KVLAB_REQUIRE(s.scale_rule == ScaleRule::kExactFP32 || s.scale_rule == ScaleRule::kCeilPow2 ||
                        s.scale_rule == ScaleRule::kOcpFloor,
                    who << "fp32 scales take rule exact, ceil_pow2 or ocp_floor, got "
                        << to_string(s.scale_rule));
      break;
    case ScaleFormat::kUE8M0:
      KVLAB_REQUIRE(s.scale_rule == ScaleRule::kCeilPow2 || s.scale_rule == ScaleRule::kOcpFloor,
                    who << "ue8m0 scales hold powers of two only: rule ceil_pow2 or ocp_floor, got "
                        << to_string(s.scale_rule));
      break;
    case ScaleFormat::kE4M3:
      KVLAB_REQUIRE(
          s.scale_rule == ScaleRule::kE4M3Rounded,
          who << "fp8_e4m3 scales take rule e4m3_rounded, got " << to_string(s.scale_rule));
      break;
  }
  KVLAB_REQUIRE(
      !s.two_level || s.scale_format == ScaleFormat::kE4M3,
      who << "two_level (an fp32 tensor scale over block scales) needs fp8_e4m3 block scales, got "
          << to_string(s.scale_format));
  KVLAB_REQUIRE(!(s.elem == ElemFormat::kFP4E2M1 && s.saturation == Saturation::kNonSaturating),
                who << "fp4_e2m1 has no Inf or NaN: saturation must be satfinite, got nonsat");
  KVLAB_REQUIRE(std::isfinite(s.amax_floor) && s.amax_floor >= 0.0f,
                who << "amax_floor must be finite and >= 0, got " << s.amax_floor);
  KVLAB_REQUIRE(s.hadamard_size == 0 || (s.hadamard_size >= 2 && is_hadamard_size(s.hadamard_size)),
                who << "hadamard_size must be 0 (none) or a power of two in [2, 32768], got "
                    << s.hadamard_size);
  KVLAB_REQUIRE(s.raw_tail >= 0, who << "raw_tail must be >= 0, got " << s.raw_tail);
  KVLAB_REQUIRE(s.record_align >= 1 && s.record_align <= 4096,
                who << "record_align must be in [1, 4096], got " << s.record_align);
  KVLAB_REQUIRE(s.required_cols >= 0,
                who << "required_cols must be >= 0 (0 = any), got " << s.required_cols);
}

// ---------------------------------------------------------------- spec text
std::string to_string(const SchemeSpec& s) {
  std::ostringstream os;
  os.precision(9);  // max_digits10 of float: the floor parses back to the same float
  os << "elem=" << to_string(s.elem) << " gran=" << to_string(s.granularity)
     << " group=" << s.group_size << " scale=" << to_string(s.scale_format)
     << " rule=" << to_string(s.scale_rule) << " floor=" << s.amax_floor
     << " floor_at=" << kFloorAtNames.name(s.floor_at) << " clamp=" << kClampNames.name(s.clamp)
     << " sat=" << kSatNames.name(s.saturation) << " hadamard=" << s.hadamard_size
     << " two_level=" << (s.two_level ? 1 : 0) << " tail=" << s.raw_tail
     << " align=" << s.record_align << " cols=" << s.required_cols;
  return os.str();
}

namespace {
int32_t parse_int(const std::string& key, const std::string& v) {
  size_t pos = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  KVLAB_REQUIRE(pos == v.size() && !v.empty() && x >= INT32_MIN && x <= INT32_MAX,
                "scheme spec: " << key << "=" << v << " is not an integer");
  return static_cast<int32_t>(x);
}
float parse_float(const std::string& key, const std::string& v) {
  size_t pos = 0;
  float x = 0;
  try {
    x = std::stof(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  KVLAB_REQUIRE(pos == v.size() && !v.empty(),
                "scheme spec: " << key << "=" << v << " is not a number");
  return x;
}
}  // namespace

SchemeSpec parse_scheme_spec(const std::string& text) {
  std::istringstream is(text);
  std::string tok;
  KVLAB_REQUIRE(
      static_cast<bool>(is >> tok), "scheme spec is empty (give a preset name: " << [] {
        std::string s;
        for (const auto& n : scheme_names()) s += (s.empty() ? "" : ", ") + n;
        return s;
      }() << ")");
  SchemeSpec s;
  bool modified = false;
  if (tok.find('=') == std::string::npos) {
    s = preset_spec(tok);
  } else {
    is.clear();
    is.str(text);  // no preset: start from the default spec
  }
  while (is >> tok) {
    const size_t eq = tok.find('=');
    KVLAB_REQUIRE(eq != std::string::npos && eq > 0,
                  "scheme spec: expected key=value, got '" << tok << "'");
    const std::string k = tok.substr(0, eq), v = tok.substr(eq + 1);
    modified = true;
    if (k == "elem")
      s.elem = kElemNames.parse(k, canonical_format_name(v));
    else if (k == "gran")
      s.granularity = kGranNames.parse(k, v);
    else if (k == "group")
      s.group_size = parse_int(k, v);
    else if (k == "scale")
      s.scale_format = kScaleFmtNames.parse(k, canonical_format_name(v));
    else if (k == "rule")
      s.scale_rule = kRuleNames.parse(k, v);
    else if (k == "floor")
      s.amax_floor = parse_float(k, v);
    else if (k == "floor_at")
      s.floor_at = kFloorAtNames.parse(k, v);
    else if (k == "clamp")
      s.clamp = kClampNames.parse(k, v);
    else if (k == "sat")
      s.saturation = kSatNames.parse(k, v);
    else if (k == "hadamard")
      s.hadamard_size = parse_int(k, v);
    else if (k == "two_level")
      s.two_level = parse_int(k, v) != 0;
    else if (k == "tail")
      s.raw_tail = parse_int(k, v);
    else if (k == "align")
      s.record_align = parse_int(k, v);
    else if (k == "cols")
      s.required_cols = parse_int(k, v);
    else if (k == "name")
      s.name = v;
    else
      throw InvalidArgument(
          "scheme spec: unknown key '" + k +
          "' (allowed: elem, gran, group, scale, rule, floor, floor_at, clamp, sat, "
          "hadamard, two_level, tail, align, cols, name)");
  }
  if (modified && text.find("name=") == std::string::npos) s.name = text;
  validate(s);
  return s;
}

// ---------------------------------------------------------------- presets
const std::vector<std::string>& scheme_names() {
  static const std::vector<std::string> names{
      "bf16",       "fp16",  "fp8_e4m3",       "fp8_e5m2", "fp8_e4m3_pt",
      "fp8_ds_mla", "mxfp4", "mxfp4_hadamard", "nvfp4",    "mxfp8"};
  return names;
}

SchemeSpec preset_spec(const std::string& given) {
  const std::string name = canonical_format_name(given);
  SchemeSpec s;
  s.name = name;
  if (name == "bf16" || name == "fp16") {
    s.elem = name == "bf16" ? ElemFormat::kBF16 : ElemFormat::kFP16;
    s.granularity = Granularity::kNone;
    s.scale_format = ScaleFormat::kNone;
    s.scale_rule = ScaleRule::kNone;
    s.saturation = Saturation::kNonSaturating;  // a plain RNE cast
  } else if (name == "fp8_e4m3" || name == "fp8_e5m2") {
    s.elem = name == "fp8_e4m3" ? ElemFormat::kFP8E4M3 : ElemFormat::kFP8E5M2;
    s.granularity = Granularity::kPerTensor;
  } else if (name == "fp8_e4m3_pt") {
    s.granularity = Granularity::kPerToken;
  } else if (name == "fp8_ds_mla") {
    s.granularity = Granularity::kPerGroup;
    s.group_size = 64;
    s.scale_format = ScaleFormat::kUE8M0;
    s.scale_rule = ScaleRule::kCeilPow2;
    s.raw_tail = 64;
    s.record_align = 8;
    s.required_cols = 512;
  } else if (name == "mxfp4" || name == "mxfp4_hadamard" || name == "mxfp8") {
    s.elem = name == "mxfp8" ? ElemFormat::kFP8E4M3 : ElemFormat::kFP4E2M1;
    s.granularity = Granularity::kPerGroup;
    s.group_size = 32;
    s.scale_format = ScaleFormat::kUE8M0;
    s.scale_rule = ScaleRule::kOcpFloor;
    if (name == "mxfp4_hadamard") s.hadamard_size = kDefaultHadamardSize;
  } else if (name == "nvfp4") {
    s.elem = ElemFormat::kFP4E2M1;
    s.granularity = Granularity::kPerGroup;
    s.group_size = 16;
    s.scale_format = ScaleFormat::kE4M3;
    s.scale_rule = ScaleRule::kE4M3Rounded;
    s.two_level = true;
  } else {
    std::string allowed;
    for (const auto& n : scheme_names()) allowed += (allowed.empty() ? "" : ", ") + n;
    throw InvalidArgument("unknown quantization scheme '" + given + "' (allowed: " + allowed + ")");
  }
  validate(s);
  return s;
}

QuantScheme make_scheme(const std::string& name_or_spec) {
  return QuantScheme(parse_scheme_spec(name_or_spec));
}

// ---------------------------------------------------------------- QuantScheme
QuantScheme::QuantScheme(SchemeSpec spec) : spec_(std::move(spec)) {
  validate(spec_);
}

void QuantScheme::check_cols(int64_t cols) const {
  const std::string who = "scheme '" + spec_.name + "': ";
  KVLAB_REQUIRE(cols >= 1, who << "cols must be >= 1, got " << cols);
  KVLAB_REQUIRE(
      spec_.required_cols == 0 || cols == spec_.required_cols,
      who << "needs exactly " << spec_.required_cols << " columns per token, got " << cols);
  KVLAB_REQUIRE(spec_.raw_tail < cols,
                who << "raw_tail " << spec_.raw_tail << " leaves no quantized column of " << cols);
  const int64_t q = quantized_cols(cols);
  if (spec_.granularity == Granularity::kPerGroup)
    KVLAB_REQUIRE(q % spec_.group_size == 0, who << "group_size " << spec_.group_size
                                                 << " does not divide the " << q
                                                 << " quantized columns");
  if (spec_.hadamard_size > 0)
    KVLAB_REQUIRE(q % spec_.hadamard_size == 0, who << "hadamard_size " << spec_.hadamard_size
                                                    << " does not divide the " << q
                                                    << " quantized columns");
  if (spec_.elem == ElemFormat::kFP4E2M1)
    KVLAB_REQUIRE(
        q % 2 == 0,
        who << "fp4 packs two codes per byte: the quantized columns must be even, got " << q);
}

int64_t QuantScheme::groups_per_row(int64_t cols) const {
  switch (spec_.granularity) {
    case Granularity::kNone:
    case Granularity::kPerTensor:
      return 0;
    case Granularity::kPerToken:
      return 1;
    case Granularity::kPerGroup:
      return quantized_cols(cols) / spec_.group_size;
  }
  return 0;
}

int64_t QuantScheme::group_cols(int64_t cols) const {
  return spec_.granularity == Granularity::kPerGroup ? spec_.group_size : quantized_cols(cols);
}

int64_t QuantScheme::scale_bytes_per_group() const {
  switch (spec_.scale_format) {
    case ScaleFormat::kNone:
      return 0;
    case ScaleFormat::kFP32:
      return 4;
    case ScaleFormat::kUE8M0:
    case ScaleFormat::kE4M3:
      return 1;
  }
  return 0;
}

int64_t QuantScheme::header_bytes() const {
  return (spec_.granularity == Granularity::kPerTensor || spec_.two_level) ? 4 : 0;
}

int64_t QuantScheme::code_bytes(int64_t cols) const {
  return quantized_cols(cols) * elem_bits(spec_.elem) / 8;
}

int64_t QuantScheme::record_bytes(int64_t cols) const {
  check_cols(cols);
  const int64_t raw =
      code_bytes(cols) + 2 * spec_.raw_tail + groups_per_row(cols) * scale_bytes_per_group();
  const int64_t a = spec_.record_align;
  return (raw + a - 1) / a * a;
}

int64_t QuantScheme::stream_bytes(int64_t rows, int64_t cols) const {
  KVLAB_REQUIRE(rows >= 0, "scheme '" << spec_.name << "': rows must be >= 0, got " << rows);
  return header_bytes() + rows * record_bytes(cols);
}

double QuantScheme::bytes_per_token(int64_t cols, int64_t rows) const {
  KVLAB_REQUIRE(rows >= 0, "scheme '" << spec_.name << "': rows must be >= 0, got " << rows);
  const double rec = static_cast<double>(record_bytes(cols));
  return rows == 0 ? rec : rec + static_cast<double>(header_bytes()) / static_cast<double>(rows);
}

QuantizedTensor QuantScheme::quantize(const float* x, int64_t rows, int64_t cols,
                                      std::optional<float> tensor_scale) const {
  const std::string who = "scheme '" + spec_.name + "': ";
  KVLAB_REQUIRE(rows >= 0, who << "rows must be >= 0, got " << rows);
  check_cols(cols);
  KVLAB_REQUIRE(rows == 0 || x != nullptr, who << "input is null for " << rows << " rows");
  const bool has_tensor_scale = spec_.granularity == Granularity::kPerTensor || spec_.two_level;
  if (tensor_scale) {
    KVLAB_REQUIRE(has_tensor_scale, who << "a tensor scale was given, but granularity "
                                        << to_string(spec_.granularity)
                                        << (spec_.two_level ? "" : " without two_level")
                                        << " has none");
    KVLAB_REQUIRE(
        std::isfinite(*tensor_scale) && *tensor_scale > 0.0f,
        who << "the given tensor scale must be finite and positive, got " << *tensor_scale);
  }
  const int64_t q = quantized_cols(cols), T = spec_.raw_tail;
  QuantizedTensor out;
  out.rows = rows;
  out.cols = cols;
  out.codes.resize(static_cast<size_t>(rows * q));
  out.tail.resize(static_cast<size_t>(rows * T));
  const int64_t G = groups_per_row(cols), gc = group_cols(cols);
  out.scale_codes.resize(static_cast<size_t>(rows * G));

  // The quantized columns, rotated when asked: work [rows, q].
  std::vector<float> work(static_cast<size_t>(rows * q));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(&work[r * q], x + r * cols, sizeof(float) * q);
    for (int64_t t = 0; t < T; ++t)
      out.tail[r * T + t] = float_to_bf16_bits(x[r * cols + q + t], spec_.saturation);
    if (spec_.hadamard_size > 0) hadamard_transform_runs(&work[r * q], q, spec_.hadamard_size);
  }

  // Tensor scale (per-tensor scale or the two-level FP32 scale over E4M3 block scales).
  float t = 1.0f;
  if (has_tensor_scale) {
    if (tensor_scale) {
      t = *tensor_scale;
    } else {
      float amax = 0.0f;
      for (float v : work) amax = amax_accumulate(amax, v);
      t = spec_.two_level ? fp32_scale_exact(amax, elem_max_finite(spec_.elem) * kE4M3Max,
                                             spec_.amax_floor, spec_.floor_at)
                          : fp32_scale(spec_, amax);
    }
  }
  out.tensor_scale = t;

  for (int64_t r = 0; r < rows; ++r) {
    const float* w = &work[r * q];
    uint16_t* c = &out.codes[r * q];
    if (G == 0) {  // kNone (scale 1) or kPerTensor (scale t)
      const float s = spec_.granularity == Granularity::kNone ? 1.0f : t;  // x / 1 is exact
      for (int64_t j = 0; j < q; ++j)
        c[j] = quantize_element(w[j], s, spec_.elem, spec_.saturation, spec_.clamp);
      continue;
    }
    for (int64_t g = 0; g < G; ++g) {
      float amax = 0.0f;
      for (int64_t j = g * gc; j < (g + 1) * gc; ++j) amax = amax_accumulate(amax, w[j]);
      uint32_t code = 0;
      switch (spec_.scale_format) {
        case ScaleFormat::kFP32:
          code = f32_bits(spec_.scale_rule == ScaleRule::kExactFP32
                              ? fp32_scale_exact(amax, elem_max_finite(spec_.elem),
                                                 spec_.amax_floor, spec_.floor_at)
                              : pow2_scale_value(pow2_exp(spec_, amax)));
          break;
        case ScaleFormat::kUE8M0:
          code = ue8m0_code_from_exp(pow2_exp(spec_, amax));
          break;
        case ScaleFormat::kE4M3:
          code = e4m3_block_scale_code(amax, elem_max_finite(spec_.elem), t, spec_.amax_floor,
                                       spec_.floor_at);
          break;
        case ScaleFormat::kNone:
          break;
      }
      out.scale_codes[r * G + g] = code;
      const float s = group_scale(out, r, g);
      for (int64_t j = g * gc; j < (g + 1) * gc; ++j)
        c[j] = quantize_element(w[j], s, spec_.elem, spec_.saturation, spec_.clamp);
    }
  }
  return out;
}

float QuantScheme::group_scale(const QuantizedTensor& q, int64_t row, int64_t group) const {
  switch (spec_.granularity) {
    case Granularity::kNone:
      return 1.0f;
    case Granularity::kPerTensor:
      return q.tensor_scale;
    case Granularity::kPerToken:
    case Granularity::kPerGroup:
      break;
  }
  const int64_t G = groups_per_row(q.cols);
  const uint32_t code = q.scale_codes[static_cast<size_t>(row * G + group)];
  switch (spec_.scale_format) {
    case ScaleFormat::kFP32:
      return bits_f32(code);
    case ScaleFormat::kUE8M0:
      return ue8m0_to_float(static_cast<uint8_t>(code));
    case ScaleFormat::kE4M3:
      return nvfp4_element_scale(static_cast<uint8_t>(code), q.tensor_scale);
    case ScaleFormat::kNone:
      break;
  }
  return 1.0f;
}

void QuantScheme::check_quantized(const QuantizedTensor& q) const {
  check_cols(q.cols);
  const int64_t qc = quantized_cols(q.cols);
  KVLAB_REQUIRE(q.rows >= 0 && q.codes.size() == static_cast<size_t>(q.rows * qc) &&
                    q.tail.size() == static_cast<size_t>(q.rows * spec_.raw_tail) &&
                    q.scale_codes.size() == static_cast<size_t>(q.rows * groups_per_row(q.cols)),
                "scheme '" << spec_.name << "': quantized tensor sizes (" << q.codes.size()
                           << " codes, " << q.tail.size() << " tail, " << q.scale_codes.size()
                           << " scales) do not match " << q.rows << " x " << q.cols);
}

std::vector<float> QuantScheme::dequantize(const QuantizedTensor& q) const {
  check_quantized(q);
  const int64_t qc = quantized_cols(q.cols), T = spec_.raw_tail, G = groups_per_row(q.cols),
                gc = group_cols(q.cols);
  std::vector<float> out(static_cast<size_t>(q.rows * q.cols));
  for (int64_t r = 0; r < q.rows; ++r) {
    float* o = &out[r * q.cols];
    const uint16_t* c = &q.codes[r * qc];
    if (G == 0) {
      const float s = group_scale(q, r, 0);
      for (int64_t j = 0; j < qc; ++j) o[j] = dequantize_element(c[j], s, spec_.elem);
    } else {
      for (int64_t g = 0; g < G; ++g) {
        const float s = group_scale(q, r, g);
        for (int64_t j = g * gc; j < (g + 1) * gc; ++j)
          o[j] = dequantize_element(c[j], s, spec_.elem);
      }
    }
    if (spec_.hadamard_size > 0) hadamard_inverse_runs(o, qc, spec_.hadamard_size);
    for (int64_t t = 0; t < T; ++t) o[qc + t] = bf16_bits_to_float(q.tail[r * T + t]);
  }
  return out;
}

std::vector<float> QuantScheme::roundtrip(const float* x, int64_t rows, int64_t cols) const {
  return dequantize(quantize(x, rows, cols));
}

// ---------------------------------------------------------------- byte streams
namespace {
// Writes the data part (codes + tail) and the scale part (scales + zero pad) of one row.
struct RowWriter {
  const SchemeSpec& s;
  int64_t qc, G;
  void data(const QuantizedTensor& q, int64_t r, uint8_t* p) const {
    const uint16_t* c = &q.codes[r * qc];
    switch (elem_bits(s.elem)) {
      case 8:
        for (int64_t j = 0; j < qc; ++j) *p++ = static_cast<uint8_t>(c[j]);
        break;
      case 16:
        for (int64_t j = 0; j < qc; ++j, p += 2) put_u16(p, c[j]);
        break;
      case 4:
        for (int64_t j = 0; j < qc; j += 2)
          *p++ = pack_fp4x2(static_cast<uint8_t>(c[j]), static_cast<uint8_t>(c[j + 1]));
        break;
    }
    for (int64_t t = 0; t < s.raw_tail; ++t, p += 2) put_u16(p, q.tail[r * s.raw_tail + t]);
  }
  void scales(const QuantizedTensor& q, int64_t r, uint8_t* p) const {
    for (int64_t g = 0; g < G; ++g) {
      const uint32_t code = q.scale_codes[r * G + g];
      if (s.scale_format == ScaleFormat::kFP32) {
        put_u32(p, code);
        p += 4;
      } else {
        *p++ = static_cast<uint8_t>(code);
      }
    }
  }
  void read_data(const uint8_t* p, QuantizedTensor& q, int64_t r) const {
    uint16_t* c = &q.codes[r * qc];
    switch (elem_bits(s.elem)) {
      case 8:
        for (int64_t j = 0; j < qc; ++j) c[j] = *p++;
        break;
      case 16:
        for (int64_t j = 0; j < qc; ++j, p += 2) c[j] = get_u16(p);
        break;
      case 4:
        for (int64_t j = 0; j < qc; j += 2, ++p) {
          c[j] = fp4_lo(*p);
          c[j + 1] = fp4_hi(*p);
        }
        break;
    }
    for (int64_t t = 0; t < s.raw_tail; ++t, p += 2) q.tail[r * s.raw_tail + t] = get_u16(p);
  }
  void read_scales(const uint8_t* p, QuantizedTensor& q, int64_t r) const {
    for (int64_t g = 0; g < G; ++g) {
      if (s.scale_format == ScaleFormat::kFP32) {
        q.scale_codes[r * G + g] = get_u32(p);
        p += 4;
      } else {
        q.scale_codes[r * G + g] = *p++;
      }
    }
  }
};
}  // namespace

std::vector<uint8_t> QuantScheme::pack(const QuantizedTensor& q) const {
  check_quantized(q);
  const int64_t rec = record_bytes(q.cols), data = code_bytes(q.cols) + 2 * spec_.raw_tail;
  std::vector<uint8_t> out(static_cast<size_t>(stream_bytes(q.rows, q.cols)), 0);
  if (header_bytes() > 0) put_u32(out.data(), f32_bits(q.tensor_scale));
  const RowWriter w{spec_, quantized_cols(q.cols), groups_per_row(q.cols)};
  for (int64_t r = 0; r < q.rows; ++r) {
    uint8_t* p = out.data() + header_bytes() + r * rec;
    w.data(q, r, p);
    w.scales(q, r, p + data);
  }
  return out;
}

QuantizedTensor QuantScheme::unpack(const uint8_t* bytes, size_t n, int64_t rows,
                                    int64_t cols) const {
  const int64_t need = stream_bytes(rows, cols);
  KVLAB_REQUIRE(static_cast<int64_t>(n) == need, "scheme '" << spec_.name << "': a stream of "
                                                            << rows << " x " << cols << " is "
                                                            << need << " bytes, got " << n);
  KVLAB_REQUIRE(rows == 0 || bytes != nullptr,
                "scheme '" << spec_.name << "': unpack from a null buffer");
  QuantizedTensor q;
  q.rows = rows;
  q.cols = cols;
  const int64_t qc = quantized_cols(cols), G = groups_per_row(cols);
  q.codes.resize(static_cast<size_t>(rows * qc));
  q.tail.resize(static_cast<size_t>(rows * spec_.raw_tail));
  q.scale_codes.resize(static_cast<size_t>(rows * G));
  if (header_bytes() > 0) q.tensor_scale = bits_f32(get_u32(bytes));
  const int64_t rec = record_bytes(cols), data = code_bytes(cols) + 2 * spec_.raw_tail;
  const RowWriter w{spec_, qc, G};
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* p = bytes + header_bytes() + r * rec;
    w.read_data(p, q, r);
    w.read_scales(p + data, q, r);
  }
  return q;
}

int64_t QuantScheme::paged_bytes(int64_t rows, int64_t cols, int32_t block_size) const {
  KVLAB_REQUIRE(block_size >= 1,
                "scheme '" << spec_.name << "': block_size must be >= 1, got " << block_size);
  KVLAB_REQUIRE(rows >= 0, "scheme '" << spec_.name << "': rows must be >= 0, got " << rows);
  const int64_t pages = (rows + block_size - 1) / block_size;
  return header_bytes() + pages * block_size * record_bytes(cols);
}

std::vector<uint8_t> QuantScheme::pack_pages(const QuantizedTensor& q, int32_t block_size) const {
  check_quantized(q);
  std::vector<uint8_t> out(static_cast<size_t>(paged_bytes(q.rows, q.cols, block_size)), 0);
  if (header_bytes() > 0) put_u32(out.data(), f32_bits(q.tensor_scale));
  const int64_t rec = record_bytes(q.cols), data = code_bytes(q.cols) + 2 * spec_.raw_tail;
  const RowWriter w{spec_, quantized_cols(q.cols), groups_per_row(q.cols)};
  for (int64_t r = 0; r < q.rows; ++r) {
    uint8_t* page = out.data() + header_bytes() + (r / block_size) * block_size * rec;
    const int64_t i = r % block_size;
    w.data(q, r, page + i * data);
    w.scales(q, r, page + block_size * data + i * (rec - data));
  }
  return out;
}

QuantizedTensor QuantScheme::unpack_pages(const uint8_t* bytes, size_t n, int64_t rows,
                                          int64_t cols, int32_t block_size) const {
  const int64_t need = paged_bytes(rows, cols, block_size);
  KVLAB_REQUIRE(static_cast<int64_t>(n) == need,
                "scheme '" << spec_.name << "': " << rows << " x " << cols << " in pages of "
                           << block_size << " is " << need << " bytes, got " << n);
  KVLAB_REQUIRE(rows == 0 || bytes != nullptr,
                "scheme '" << spec_.name << "': unpack from a null buffer");
  QuantizedTensor q;
  q.rows = rows;
  q.cols = cols;
  const int64_t qc = quantized_cols(cols), G = groups_per_row(cols);
  q.codes.resize(static_cast<size_t>(rows * qc));
  q.tail.resize(static_cast<size_t>(rows * spec_.raw_tail));
  q.scale_codes.resize(static_cast<size_t>(rows * G));
  if (header_bytes() > 0) q.tensor_scale = bits_f32(get_u32(bytes));
  const int64_t rec = record_bytes(cols), data = code_bytes(cols) + 2 * spec_.raw_tail;
  const RowWriter w{spec_, qc, G};
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* page = bytes + header_bytes() + (r / block_size) * block_size * rec;
    const int64_t i = r % block_size;
    w.read_data(page + i * data, q, r);
    w.read_scales(page + block_size * data + i * (rec - data), q, r);
  }
  return q;
}

const std::vector<std::string>& scale_rule_override_names() {
  static const std::vector<std::string> names = {"preset", "exact", "ceil_pow2", "ocp_floor",
                                                 "e4m3_rounded"};
  return names;
}

std::string scheme_text(const std::string& preset, const SchemeOverride& o) {
  std::string s = preset;
  if (o.group_size != 0) s += " group=" + std::to_string(o.group_size);
  if (o.scale_rule != "preset") s += " rule=" + o.scale_rule;
  if (o.hadamard > 0) s += " hadamard=" + std::to_string(o.hadamard);
  return s;
}

}  // namespace kvlab::ref
