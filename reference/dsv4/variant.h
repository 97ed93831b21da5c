// variant.h: the storage choices of the DeepSeek-V4-style KV-cache substrate, as two named
// variants so that the two designs can be measured against each other (reference/README.md,
// "The DSV4 substrate"):
//   per_token_scales  a substrate design with FP8 E4M3 NoPE + BF16 RoPE entries and one FP32
//                     inverse scale per entry, NVFP4 indexer keys (E2M1, an E4M3 scale per 16,
//                     an FP32 tensor scale) and an atomic SWA ring head
//                     (slot = atomicAdd(head, 1) % W: arrival order);
//   public_v4         the public DeepSeek-V4 release: 584-byte fp8_ds_mla records (448 FP8 NoPE
//                     + 64 BF16 RoPE + 7 UE8M0 64-tile scales + 1 pad), MXFP4 indexer keys after
//                     a 128-wide Hadamard rotation (E2M1, a UE8M0 scale per 32), and
//                     slot = position % W.
// Every field can also be chosen on its own (the sweep axes); the named variants are the two
// bundles. Host and device (plain enums, no functions needing a compiler of either kind).
#pragma once

#include <cstdint>

namespace kvlab {

// How one KV entry (a raw SWA token or a compressed entry) of nope_dim + rope_dim is stored.
enum class Dsv4EntryFormat : int32_t {
  kFp8PerToken = 0,  // FP8 E4M3 NoPE, BF16 RoPE, FP32 inverse scale per entry
  kFp8DsMla =
      1,  // public V4: fp8_ds_mla 64-tiles with UE8M0 ceil scales, page = data rows then scale rows
};

// How the CSA indexer keys are stored.
enum class Dsv4IndexerFormat : int32_t {
  kNvfp4 = 0,          // NVFP4 (16-element E4M3 block scale, FP32 tensor scale)
  kMxfp4Hadamard = 1,  // public V4: 128-wide Walsh-Hadamard rotation, then MXFP4 (32-element UE8M0)
};

// Where a token lands in its request's SWA ring of `window` slots.
enum class Dsv4RingMode : int32_t {
  kAtomicHead = 0,  // slot = (atomicAdd(&head, 1)) % window, arrival order
  kPosModWindow =
      1,  // public V4: slot = position % window (deterministic; head = last position + 1)
};

struct Dsv4Variant {
  Dsv4EntryFormat entry = Dsv4EntryFormat::kFp8PerToken;
  Dsv4IndexerFormat indexer = Dsv4IndexerFormat::kNvfp4;
  Dsv4RingMode ring = Dsv4RingMode::kAtomicHead;

  // Per-entry FP32 scales, NVFP4 keys, atomic ring head.
  static constexpr Dsv4Variant per_token_scales() {
    return {Dsv4EntryFormat::kFp8PerToken, Dsv4IndexerFormat::kNvfp4, Dsv4RingMode::kAtomicHead};
  }
  // The public V4 release: fp8_ds_mla, Hadamard + MXFP4 keys, slot = position % window.
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
