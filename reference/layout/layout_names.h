// layout_names.h: names of layouts and formats (CLI, HDF5, error messages) and geometry
// validation. Host only.
//
// One spelling per format, everywhere kvlab writes a name (result files, figures, messages):
// the KV formats' names below; the element formats of quantization schemes "fp8_e4m3",
// "fp8_e5m2", "fp4_e2m1", "bf16", "fp16" (reference/quant/schemes.h); a scheme whose storage
// is a KV format carries that format's name. A few older spellings are accepted where text
// is parsed (canonical_format_name) and nowhere else.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "reference/layout/kv_layout.h"

namespace kvlab {

std::string to_string(KvLayout l);  // "nhd", "hnd", "split_x"
std::string to_string(
    KvFormat f);  // "bf16", "fp16", "fp8_e4m3", "fp8_e4m3_pt", "fp8_e5m2", "nvfp4", "mxfp4"
KvLayout parse_kv_layout(const std::string& s);  // throws InvalidArgument listing the allowed names
KvFormat parse_kv_format(const std::string& s);  // canonical names and their aliases

// The canonical name of a format given in an accepted older spelling (the aliases: e4m3 and
// fp8_e4m3_per_tensor -> fp8_e4m3, fp8_e4m3_per_token -> fp8_e4m3_pt, e5m2 and
// fp8_e5m2_per_tensor -> fp8_e5m2, e2m1 -> fp4_e2m1); any other name unchanged. For the
// parsing edge only (config values, command-line values, scheme specs, old result files).
std::string canonical_format_name(const std::string& name);
// (alias, canonical name) pairs, the one table (analysis/style.py mirrors it, checked by test).
const std::vector<std::pair<std::string, std::string>>& format_name_aliases();
const std::vector<KvLayout>& all_kv_layouts();
const std::vector<KvFormat>& all_kv_formats();
std::vector<std::string> kv_layout_names();  // to_string of all_kv_layouts(), in order
std::vector<std::string> kv_format_names();  // to_string of all_kv_formats(), in order

// Throws InvalidArgument when the geometry cannot be addressed: non-positive sizes, odd
// head_dim, head_dim not a multiple of the split-x chunk or of the scale group.
void validate(const PageGeometry& g);

}  // namespace kvlab
