// layout_names.h: names of layouts and formats (CLI, HDF5, error messages) and geometry
// validation. Host only.
#pragma once

#include <string>
#include <vector>

#include "reference/layout/kv_layout.h"

namespace kvlab {

std::string to_string(KvLayout l);  // "nhd", "hnd", "split_x"
std::string to_string(
    KvFormat f);  // "bf16", "fp16", "fp8_e4m3", "fp8_e4m3_pt", "fp8_e5m2", "nvfp4", "mxfp4"
KvLayout parse_kv_layout(const std::string& s);  // throws InvalidArgument listing the allowed names
KvFormat parse_kv_format(const std::string& s);
const std::vector<KvLayout>& all_kv_layouts();
const std::vector<KvFormat>& all_kv_formats();

// Throws InvalidArgument when the geometry cannot be addressed: non-positive sizes, odd
// head_dim, head_dim not a multiple of the split-x chunk or of the scale group.
void validate(const PageGeometry& g);

}  // namespace kvlab
