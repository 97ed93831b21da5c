// dsv4_common.h: what the DSV4 benches (dsv4_capacity, compression_error) share: the
// storage-variant axes and the block size that fits a stack's compression ratios.
#pragma once

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "experiments/bench/bench.h"
#include "reference/core/error.h"
#include "reference/dsv4/variant_names.h"

namespace kvlab::exp {

// Axes: variant (the named bundle), entry and indexer (per-field overrides; "variant" keeps
// the bundle's choice). Values are plain words: sweep values may not contain '=' or ','.
inline std::vector<AxisSpec> dsv4_variant_axes() {
  return {
      {"variant",
       AxisType::kEnum,
       "per_token_scales",
       {"per_token_scales", "public_v4"},
       "storage bundle: per_token_scales (FP8 + FP32 scale per entry, NVFP4 keys) or public_v4 "
       "(fp8_ds_mla, MXFP4 + Hadamard)",
       {{"seed004", "per_token_scales"}}},
      {"entry",
       AxisType::kEnum,
       "variant",
       {"variant", "fp8_per_token", "fp8_ds_mla"},
       "entry format override (variant = the bundle's)"},
      {"indexer",
       AxisType::kEnum,
       "variant",
       {"variant", "nvfp4", "mxfp4_hadamard"},
       "indexer-key format override (variant = the bundle's)"},
  };
}

inline Dsv4Variant dsv4_variant_of(const Point& p) {
  Dsv4Variant v = parse_dsv4_variant(p.str("variant"));
  if (p.str("entry") != "variant") v.entry = parse_dsv4_entry_format(p.str("entry"));
  if (p.str("indexer") != "variant") v.indexer = parse_dsv4_indexer_format(p.str("indexer"));
  return v;
}

// The smallest block (original tokens) that is a multiple of 128 and of every ratio: the
// default BLOCK_SIZE_ORIGINAL_TOKENS of a stack whose ratios a sweep changes.
inline int32_t dsv4_default_block_tokens(int32_t csa_ratio, int32_t hca_ratio) {
  KVLAB_REQUIRE(csa_ratio >= 1 && hca_ratio >= 1,
                "compression ratios must be >= 1, got csa " << csa_ratio << ", hca " << hca_ratio);
  const int64_t l = std::lcm(std::lcm(int64_t{128}, int64_t{csa_ratio}), int64_t{hca_ratio});
  KVLAB_REQUIRE(l <= (int64_t{1} << 24), "no block size fits ratios "
                                             << csa_ratio << " and " << hca_ratio
                                             << " (their lcm with 128 is " << l << ")");
  return static_cast<int32_t>(l);
}

}  // namespace kvlab::exp
