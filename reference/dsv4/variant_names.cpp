#include "reference/dsv4/variant_names.h"

#include <sstream>

#include "reference/core/error.h"

namespace kvlab {

std::string to_string(Dsv4EntryFormat f) {
  switch (f) {
    case Dsv4EntryFormat::kFp8PerToken:
      return "fp8_per_token";
    case Dsv4EntryFormat::kFp8DsMla:
      return "fp8_ds_mla";
  }
  return "?";
}

std::string to_string(Dsv4IndexerFormat f) {
  switch (f) {
    case Dsv4IndexerFormat::kNvfp4:
      return "nvfp4";
    case Dsv4IndexerFormat::kMxfp4Hadamard:
      return "mxfp4_hadamard";
  }
  return "?";
}

std::string to_string(Dsv4RingMode m) {
  switch (m) {
    case Dsv4RingMode::kAtomicHead:
      return "atomic_head";
    case Dsv4RingMode::kPosModWindow:
      return "pos_mod_window";
  }
  return "?";
}

std::string to_string(const Dsv4Variant& v) {
  if (v == Dsv4Variant::per_token_scales()) return "per_token_scales";
  if (v == Dsv4Variant::public_v4()) return "public_v4";
  return "entry=" + to_string(v.entry) + ",indexer=" + to_string(v.indexer) +
         ",ring=" + to_string(v.ring);
}

Dsv4EntryFormat parse_dsv4_entry_format(const std::string& s) {
  if (s == "fp8_per_token") return Dsv4EntryFormat::kFp8PerToken;
  if (s == "fp8_ds_mla") return Dsv4EntryFormat::kFp8DsMla;
  throw InvalidArgument("unknown DSV4 entry format '" + s +
                        "' (allowed: fp8_per_token, fp8_ds_mla)");
}

Dsv4IndexerFormat parse_dsv4_indexer_format(const std::string& s) {
  if (s == "nvfp4") return Dsv4IndexerFormat::kNvfp4;
  if (s == "mxfp4_hadamard") return Dsv4IndexerFormat::kMxfp4Hadamard;
  throw InvalidArgument("unknown DSV4 indexer format '" + s + "' (allowed: nvfp4, mxfp4_hadamard)");
}

Dsv4RingMode parse_dsv4_ring_mode(const std::string& s) {
  if (s == "atomic_head") return Dsv4RingMode::kAtomicHead;
  if (s == "pos_mod_window") return Dsv4RingMode::kPosModWindow;
  throw InvalidArgument("unknown DSV4 ring mode '" + s +
                        "' (allowed: atomic_head, pos_mod_window)");
}

Dsv4Variant parse_dsv4_variant(const std::string& s) {
  // "seed004": the older name of per_token_scales, accepted here only.
  if (s == "per_token_scales" || s == "seed004") return Dsv4Variant::per_token_scales();
  if (s == "public_v4") return Dsv4Variant::public_v4();
  Dsv4Variant v = Dsv4Variant::per_token_scales();
  std::istringstream in(s);
  std::string item;
  bool any = false;
  while (std::getline(in, item, ',')) {
    const auto eq = item.find('=');
    KVLAB_REQUIRE(eq != std::string::npos,
                  "DSV4 variant '" << s
                                   << "': expected per_token_scales, public_v4 or key=value items "
                                      "(entry, indexer, ring), got item '"
                                   << item << "'");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "entry")
      v.entry = parse_dsv4_entry_format(value);
    else if (key == "indexer")
      v.indexer = parse_dsv4_indexer_format(value);
    else if (key == "ring")
      v.ring = parse_dsv4_ring_mode(value);
    else
      throw InvalidArgument("DSV4 variant '" + s + "': unknown key '" + key +
                            "' (allowed: entry, indexer, ring)");
    any = true;
  }
  KVLAB_REQUIRE(
      any,
      "empty DSV4 variant (allowed: per_token_scales, public_v4 or entry=..,indexer=..,ring=..)");
  return v;
}

void validate(const Dsv4Variant& v) {
  const int e = static_cast<int>(v.entry), i = static_cast<int>(v.indexer),
            r = static_cast<int>(v.ring);
  KVLAB_REQUIRE(e == 0 || e == 1, "invalid DSV4 entry format value " << e << " (allowed 0..1)");
  KVLAB_REQUIRE(i == 0 || i == 1, "invalid DSV4 indexer format value " << i << " (allowed 0..1)");
  KVLAB_REQUIRE(r == 0 || r == 1, "invalid DSV4 ring mode value " << r << " (allowed 0..1)");
}

}  // namespace kvlab
