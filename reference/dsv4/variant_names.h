// variant_names.h: names of the DSV4 storage variants (CLI, HDF5, model files, errors). Host only.
#pragma once

#include <string>

#include "reference/dsv4/variant.h"

namespace kvlab {

std::string to_string(Dsv4EntryFormat f);    // "fp8_per_token", "fp8_ds_mla"
std::string to_string(Dsv4IndexerFormat f);  // "nvfp4", "mxfp4_hadamard"
std::string to_string(Dsv4RingMode m);       // "atomic_head", "pos_mod_window"
// "per_token_scales" / "public_v4" for the named bundles, else "entry=..,indexer=..,ring=..".
std::string to_string(const Dsv4Variant& v);

Dsv4EntryFormat parse_dsv4_entry_format(const std::string& s);
Dsv4IndexerFormat parse_dsv4_indexer_format(const std::string& s);
Dsv4RingMode parse_dsv4_ring_mode(const std::string& s);
// Accepts "per_token_scales" (also by its older name "seed004"), "public_v4" or a comma list
// "entry=fp8_ds_mla,indexer=nvfp4,ring=atomic_head" (fields left out keep the per_token_scales
// choice). Throws InvalidArgument naming the allowed values.
Dsv4Variant parse_dsv4_variant(const std::string& s);

// Throws InvalidArgument when an enum field holds a value outside its list (a corrupt
// struct handed across an API boundary).
void validate(const Dsv4Variant& v);

}  // namespace kvlab
