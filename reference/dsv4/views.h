// views.h: the plain view structs of the DSV4 KV-cache substrate (reference/README.md: SWAView,
// ClassicalView, IndexerView) and their address math, host and device.
//
// These structs are what LayerCacheHandle hands out and what the reference functions
// (reference/dsv4/*.h) and the GPU kernels (gpu/dsv4) take in their signatures: trivially
// copyable, raw pointers, no ownership. A view over host buffers drives the reference; the
// same view over device buffers drives a kernel.
//
// Entry storage (Dsv4EntryPages): pages of `rows` entries, one entry = nope_dim values
// stored as FP8 E4M3 + rope_dim values stored as BF16 (+ scales). The SWA ring is one page
// per request slot (rows = window); a compressed pool is one page per block (rows =
// entries_per_block). Two formats (variant.h):
//   kFp8PerToken (the per_token_scales variant), three arrays:
//     data       FP8 NoPE   [num_pages, rows, nope_dim]        uint8
//     rope       BF16 RoPE  [num_pages, rows, rope_dim]        uint16 (bits)
//     inv_scale  FP32       [num_pages, rows]                  real = e4m3(code) * inv_scale
//   kFp8DsMla (public V4 fp8_ds_mla), one array of pages:
//     data       [num_pages, page_bytes], page = rows data rows, then rows scale rows:
//                data row  [nope_dim FP8 | rope_dim BF16]  = nope_dim + 2 rope_dim bytes (576)
//                scale row [nope_dim/64 UE8M0 | pad to 8]  = 8 bytes (7 scales + 1 pad)
//                real = e4m3(code) * 2^(ue8m0 - 127), one scale per 64-element tile
//     rope, inv_scale: nullptr
//
// The per-entry bytes are 580 (per_token_scales) and 584 (public_v4) for 448 + 64 dims.
#pragma once

#include <cstdint>

#include "reference/core/hostdevice.h"
#include "reference/dsv4/variant.h"
#include "reference/formats/formats.h"

namespace kvlab {

constexpr int kDsMlaTile = 64;       // NoPE elements per UE8M0 scale (fp8_ds_mla)
constexpr int kDsMlaScaleAlign = 8;  // a scale row is padded to a multiple of 8 bytes

KVLAB_HD int ds_mla_data_row_bytes(int nope_dim, int rope_dim) {
  return nope_dim + 2 * rope_dim;
}
KVLAB_HD int ds_mla_scale_row_bytes(int nope_dim) {
  const int tiles = nope_dim / kDsMlaTile;
  return (tiles + 1 + kDsMlaScaleAlign - 1) / kDsMlaScaleAlign * kDsMlaScaleAlign;  // >= 1 pad byte
}
// Bytes of one stored entry (payload + its scales).
KVLAB_HD int64_t dsv4_entry_bytes(Dsv4EntryFormat f, int nope_dim, int rope_dim) {
  if (f == Dsv4EntryFormat::kFp8DsMla)
    return ds_mla_data_row_bytes(nope_dim, rope_dim) + ds_mla_scale_row_bytes(nope_dim);
  return static_cast<int64_t>(nope_dim) + 2 * rope_dim + 4;
}

struct Dsv4EntryPages {
  Dsv4EntryFormat format = Dsv4EntryFormat::kFp8PerToken;
  int32_t nope_dim = 0;
  int32_t rope_dim = 0;
  int32_t rows = 0;  // entries per page
  int64_t num_pages = 0;
  uint8_t* data = nullptr;
  uint16_t* rope = nullptr;
  float* inv_scale = nullptr;

  KVLAB_HD int head_dim() const { return nope_dim + rope_dim; }
  KVLAB_HD int64_t page_bytes() const {
    return rows * dsv4_entry_bytes(format, nope_dim, rope_dim);
  }
  KVLAB_HD int64_t bytes() const { return num_pages * page_bytes(); }
  KVLAB_HD int64_t entry_index(int64_t page, int row) const { return page * rows + row; }

  // kFp8PerToken addresses.
  KVLAB_HD uint8_t* pt_nope(int64_t page, int row) const {
    return data + entry_index(page, row) * nope_dim;
  }
  KVLAB_HD uint16_t* pt_rope(int64_t page, int row) const {
    return rope + entry_index(page, row) * rope_dim;
  }
  KVLAB_HD float* pt_inv_scale(int64_t page, int row) const {
    return inv_scale + entry_index(page, row);
  }
  // kFp8DsMla addresses: the data row (NoPE FP8 then RoPE BF16) and the scale row.
  KVLAB_HD uint8_t* mla_data_row(int64_t page, int row) const {
    return data + page * page_bytes() +
           static_cast<int64_t>(row) * ds_mla_data_row_bytes(nope_dim, rope_dim);
  }
  KVLAB_HD uint8_t* mla_scale_row(int64_t page, int row) const {
    return data + page * page_bytes() +
           static_cast<int64_t>(rows) * ds_mla_data_row_bytes(nope_dim, rope_dim) +
           static_cast<int64_t>(row) * ds_mla_scale_row_bytes(nope_dim);
  }
  // BF16 RoPE element j of an entry (either format).
  KVLAB_HD uint16_t rope_bits(int64_t page, int row, int j) const {
    if (format == Dsv4EntryFormat::kFp8PerToken) return pt_rope(page, row)[j];
    const uint8_t* p = mla_data_row(page, row) + nope_dim + 2 * j;
    return static_cast<uint16_t>(p[0] | (p[1] << 8));  // little-endian BF16
  }
  // Dequantized element `dim` (0..head_dim) of entry (page, row): the canonical read.
  KVLAB_HD float load(int64_t page, int row, int dim) const {
    if (dim >= nope_dim) return bf16_bits_to_float(rope_bits(page, row, dim - nope_dim));
    if (format == Dsv4EntryFormat::kFp8PerToken) {
      const float s = *pt_inv_scale(page, row);
      return e4m3_to_float(pt_nope(page, row)[dim]) * s;
    }
    const float s = ue8m0_to_float(mla_scale_row(page, row)[dim / kDsMlaTile]);
    return e4m3_to_float(mla_data_row(page, row)[dim]) * s;
  }
};

// The SWA ring of every request slot of one layer.
struct Dsv4SwaView {
  Dsv4EntryPages ring;     // page = request slot, rows = window
  int32_t* pos = nullptr;  // [num_slots, window] position held by each ring row, -1 = empty
  int32_t* head =
      nullptr;  // [num_slots] kAtomicHead: tokens written so far (next row = head % window)
                //             kPosModWindow: last written position + 1
  Dsv4RingMode mode = Dsv4RingMode::kAtomicHead;

  KVLAB_HD int32_t window() const { return ring.rows; }
  KVLAB_HD int64_t num_slots() const { return ring.num_pages; }
  KVLAB_HD int32_t* pos_row(int64_t slot) const { return pos + slot * ring.rows; }
};

// The compressed ("classical") pool of a CSA or HCA layer, addressed through the block table.
// Entry e of the request in slot s lives in block block_table[s][e / rows], row e % rows.
struct Dsv4ClassicalView {
  Dsv4EntryPages pool;                   // page = block, rows = entries_per_block
  const int32_t* block_table = nullptr;  // [max_requests, max_blocks_per_request] int32
  int32_t max_blocks_per_request = 0;
  int32_t ratio = 0;  // original tokens per entry

  KVLAB_HD int32_t block_of(int64_t slot, int64_t entry) const {
    return block_table[slot * max_blocks_per_request + entry / pool.rows];
  }
};

// FP4 indexer keys of a CSA layer (same block table and rows as the classical pool).
//   codes   [num_blocks, rows, dim/2]   packed E2M1 (first element in the low nibble)
//   scales  [num_blocks, rows, dim/g]   kNvfp4: E4M3 codes (g = 16), real = e2m1 * (e4m3 *
//   tensor_scale)
//                                       kMxfp4Hadamard: UE8M0 (g = 32), real = e2m1 * 2^(c-127),
//                                       values in the rotated basis (H_128 / sqrt(128) per 128
//                                       dims)
struct Dsv4IndexerView {
  Dsv4IndexerFormat format = Dsv4IndexerFormat::kNvfp4;
  int32_t dim = 0;
  int32_t rows = 0;
  int64_t num_blocks = 0;
  uint8_t* codes = nullptr;
  uint8_t* scales = nullptr;
  float tensor_scale = 1.0f;
  const int32_t* block_table = nullptr;
  int32_t max_blocks_per_request = 0;
  int32_t ratio = 0;

  KVLAB_HD int group() const { return format == Dsv4IndexerFormat::kNvfp4 ? 16 : 32; }
  KVLAB_HD int64_t entry_index(int64_t block, int row) const { return block * rows + row; }
  KVLAB_HD int64_t entry_bytes() const { return dim / 2 + dim / group(); }
  KVLAB_HD int64_t bytes() const { return num_blocks * rows * entry_bytes(); }
  KVLAB_HD uint8_t* entry_codes(int64_t block, int row) const {
    return codes + entry_index(block, row) * (dim / 2);
  }
  KVLAB_HD uint8_t* entry_scales(int64_t block, int row) const {
    return scales + entry_index(block, row) * (dim / group());
  }
  // Dequantized element (in the stored basis: rotated for kMxfp4Hadamard).
  KVLAB_HD float load(int64_t block, int row, int d) const {
    const uint8_t byte = entry_codes(block, row)[d / 2];
    const float v = e2m1_to_float((d & 1) ? fp4_hi(byte) : fp4_lo(byte));
    const uint8_t sc = entry_scales(block, row)[d / group()];
    if (format == Dsv4IndexerFormat::kNvfp4) return v * (e4m3_to_float(sc) * tensor_scale);
    return v * ue8m0_to_float(sc);
  }
};

// FP32 rows the streaming compressor keeps per request slot (see sim/dsv4/schema.h):
//   overlap (CSA):  ka, za [num_slots, 2, ratio, dim]  lane a, half = window parity
//                   kb, zb [num_slots, ratio, dim]     lane b of the current window
//   single (HCA):   ka, za [num_slots, ratio, dim];    kb = zb = nullptr
// A token at position p writes row p % ratio (half (p / ratio) % 2 for lane a). za/zb hold
// the gate scores with the positional bias (ape) already added.
struct Dsv4StreamView {
  int32_t ratio = 0;
  int32_t dim = 0;
  bool overlap = false;
  int64_t num_slots = 0;
  float* ka = nullptr;
  float* za = nullptr;
  float* kb = nullptr;
  float* zb = nullptr;

  KVLAB_HD int64_t lane_a_index(int64_t slot, int64_t pos) const {
    const int64_t row = pos % ratio;
    if (!overlap) return (slot * ratio + row) * dim;
    const int64_t half = (pos / ratio) & 1;
    return ((slot * 2 + half) * ratio + row) * dim;
  }
  KVLAB_HD int64_t lane_b_index(int64_t slot, int64_t pos) const {
    return (slot * ratio + pos % ratio) * dim;
  }
  KVLAB_HD int64_t lane_a_floats() const { return num_slots * (overlap ? 2 : 1) * ratio * dim; }
  KVLAB_HD int64_t lane_b_floats() const { return overlap ? num_slots * ratio * dim : 0; }
  KVLAB_HD int64_t bytes() const { return 4 * 2 * (lane_a_floats() + lane_b_floats()); }
};

}  // namespace kvlab
