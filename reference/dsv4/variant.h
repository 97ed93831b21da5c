// variant.h: the storage choices of the DeepSeek-V4-style KV-cache substrate, as named
// variants so that seed 004 and the public V4 release can be measured against each other.
//
// Host and device (plain enums, no functions needing a compiler of either kind).
//
// | choice            | seed 004 (kSeed004)                      | public V4 (kPublicV4) |
// |-------------------|------------------------------------------|---------------------------------------------|
// | entry format      | FP8 E4M3 NoPE + BF16 RoPE, one FP32      | 584-byte fp8_ds_mla record: 448
// FP8 NoPE +  | | (ring + pool)     | inverse scale per entry (kFp8PerToken)   | 64 BF16 RoPE + 7
// UE8M0 64-tile scales + pad | | indexer keys (CSA)| NVFP4: E2M1, E4M3 scale per 16, FP32     |
// MXFP4 after a 128-wide Hadamard rotation:   | |                   | tensor scale | E2M1, UE8M0
// scale per 32                    | | SWA ring slot     | atomic head: slot = atomicAdd(head) % W
// | slot = position % W                         |
//
// Every field can also be chosen on its own (the sweep axes); the two named variants are
// the bundles the sources describe.
#pragma once

#include <cstdint>

namespace kvlab {

// How one KV entry (a raw SWA token or a compressed entry) of nope_dim + rope_dim is stored.
enum class Dsv4EntryFormat : int32_t {
  kFp8PerToken = 0,  // seed 004: FP8 E4M3 NoPE, BF16 RoPE, FP32 inverse scale per entry
  kFp8DsMla =
      1,  // public V4: fp8_ds_mla 64-tiles with UE8M0 ceil scales, page = data rows then scale rows
};

// How the CSA indexer keys are stored.
enum class Dsv4IndexerFormat : int32_t {
  kNvfp4 = 0,          // seed 004: NVFP4 (16-element E4M3 block scale, FP32 tensor scale)
  kMxfp4Hadamard = 1,  // public V4: 128-wide Walsh-Hadamard rotation, then MXFP4 (32-element UE8M0)
};

// Where a token lands in its request's SWA ring of `window` slots.
enum class Dsv4RingMode : int32_t {
  kAtomicHead = 0,  // seed 004: slot = (atomicAdd(&head, 1)) % window, arrival order
  kPosModWindow =
      1,  // public V4: slot = position % window (deterministic; head = last position + 1)
};

struct Dsv4Variant {
  Dsv4EntryFormat entry = Dsv4EntryFormat::kFp8PerToken;
  Dsv4IndexerFormat indexer = Dsv4IndexerFormat::kNvfp4;
  Dsv4RingMode ring = Dsv4RingMode::kAtomicHead;

  static constexpr Dsv4Variant seed004() {
    return {Dsv4EntryFormat::kFp8PerToken, Dsv4IndexerFormat::kNvfp4, Dsv4RingMode::kAtomicHead};
  }
  static constexpr Dsv4Variant public_v4() {
    return {Dsv4EntryFormat::kFp8DsMla, Dsv4IndexerFormat::kMxfp4Hadamard,
            Dsv4RingMode::kPosModWindow};
  }
};

inline bool operator==(const Dsv4Variant& a, const Dsv4Variant& b) {
  return a.entry == b.entry && a.indexer == b.indexer && a.ring == b.ring;
}
inline bool operator!=(const Dsv4Variant& a, const Dsv4Variant& b) {
  return !(a == b);
}

}  // namespace kvlab
