// layout_names.cpp: names of layouts and formats (see layout_names.h).
#include "reference/layout/layout_names.h"

#include "reference/core/error.h"

namespace kvlab {

std::string to_string(KvLayout l) {
  switch (l) {
    case KvLayout::kNHD:
      return "nhd";
    case KvLayout::kHND:
      return "hnd";
    case KvLayout::kSplitX:
      return "split_x";
  }
  return "?";
}

std::string to_string(KvFormat f) {
  switch (f) {
    case KvFormat::kBF16:
      return "bf16";
    case KvFormat::kFP16:
      return "fp16";
    case KvFormat::kFP8E4M3:
      return "fp8_e4m3";
    case KvFormat::kFP8E4M3PerToken:
      return "fp8_e4m3_pt";
    case KvFormat::kFP8E5M2:
      return "fp8_e5m2";
    case KvFormat::kNVFP4:
      return "nvfp4";
    case KvFormat::kMXFP4:
      return "mxfp4";
  }
  return "?";
}

const std::vector<KvLayout>& all_kv_layouts() {
  static const std::vector<KvLayout> v{KvLayout::kNHD, KvLayout::kHND, KvLayout::kSplitX};
  return v;
}

const std::vector<KvFormat>& all_kv_formats() {
  static const std::vector<KvFormat> v{
      KvFormat::kBF16,    KvFormat::kFP16,  KvFormat::kFP8E4M3, KvFormat::kFP8E4M3PerToken,
      KvFormat::kFP8E5M2, KvFormat::kNVFP4, KvFormat::kMXFP4};
  return v;
}

std::vector<std::string> kv_layout_names() {
  std::vector<std::string> v;
  for (KvLayout l : all_kv_layouts()) v.push_back(to_string(l));
  return v;
}

std::vector<std::string> kv_format_names() {
  std::vector<std::string> v;
  for (KvFormat f : all_kv_formats()) v.push_back(to_string(f));
  return v;
}

KvLayout parse_kv_layout(const std::string& s) {
  for (KvLayout l : all_kv_layouts())
    if (to_string(l) == s) return l;
  if (s == "splitx" || s == "vllm") return KvLayout::kSplitX;
  throw InvalidArgument("unknown KV layout '" + s + "' (allowed: nhd, hnd, split_x)");
}

const std::vector<std::pair<std::string, std::string>>& format_name_aliases() {
  static const std::vector<std::pair<std::string, std::string>> v{
      {"fp8_e4m3_per_tensor", "fp8_e4m3"},
      {"e4m3", "fp8_e4m3"},
      {"fp8_e4m3_per_token", "fp8_e4m3_pt"},
      {"fp8_e5m2_per_tensor", "fp8_e5m2"},
      {"e5m2", "fp8_e5m2"},
      {"e2m1", "fp4_e2m1"}};
  return v;
}

std::string canonical_format_name(const std::string& name) {
  for (const auto& [alias, canonical] : format_name_aliases())
    if (name == alias) return canonical;
  return name;
}

KvFormat parse_kv_format(const std::string& text) {
  const std::string s = canonical_format_name(text);
  std::string allowed;
  for (KvFormat f : all_kv_formats()) {
    if (to_string(f) == s) return f;
    allowed += (allowed.empty() ? "" : ", ") + to_string(f);
  }
  throw InvalidArgument("unknown KV format '" + text + "' (allowed: " + allowed + ")");
}

void validate(const PageGeometry& g) {
  KVLAB_REQUIRE(g.num_blocks > 0, "num_blocks must be positive, got " << g.num_blocks);
  KVLAB_REQUIRE(g.num_kv_heads > 0, "num_kv_heads must be positive, got " << g.num_kv_heads);
  KVLAB_REQUIRE(g.block_size > 0, "block_size must be positive, got " << g.block_size);
  KVLAB_REQUIRE(g.head_dim > 0 && g.head_dim % 2 == 0,
                "head_dim must be positive and even, got " << g.head_dim);
  const int fmt = static_cast<int>(g.format);
  KVLAB_REQUIRE(fmt >= 0 && fmt < kNumKvFormats, "invalid KV format value " << fmt);
  const int lay = static_cast<int>(g.layout);
  KVLAB_REQUIRE(lay >= 0 && lay <= 2, "invalid KV layout value " << lay);
  if (g.layout == KvLayout::kSplitX)
    KVLAB_REQUIRE(g.head_dim % g.x() == 0,
                  "split_x layout with " << to_string(g.format) << " needs head_dim divisible by x="
                                         << g.x() << ", got " << g.head_dim);
  if (g.scale_group() != 0)
    KVLAB_REQUIRE(g.head_dim % g.scale_group() == 0,
                  to_string(g.format) << " needs head_dim divisible by its scale group "
                                      << g.scale_group() << ", got " << g.head_dim);
}

}  // namespace kvlab
