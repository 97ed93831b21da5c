// mma_operands.cuh: per-format operand loaders of the tensor-core decode kernels (v4, v5,
// v6): stored K / V bytes in a shared-memory tile -> exact 16-bit mma A fragments.
//
// One loader per KvFormat (MmaOperand<F, D>), so the inner loop (mma_tile_compute.cuh) has
// no format branches: it asks the loader for the A fragments of a 16-token pass and feeds
// them to the tensor cores. Each loader fixes the operand "flavour" of its format:
//
//   format            Q.K^T operands   P.V operands   how K/V become 16-bit, exactly
//   bf16              bf16             bf16           the stored pairs are the fragments
//   fp16              f16              f16            idem
//   fp8_e4m3 (pool)   f16              f16            cvt e4m3x2 -> f16x2 (every E4M3 is a half)
//   fp8_e4m3 per tok  f16              bf16           cvt -> f16 for K (token scale on the
//                                                     score); V as bf16, its token scale on P
//   fp8_e5m2          f16              f16            the code is the top byte of the half
//   nvfp4             f16              f16            e2m1 bits moved into a half (x 2^-14)
//                                                     x the E4M3 block scale (exact)
//   mxfp4             bf16             bf16           e2m1 -> float x 2^k -> bf16 (exact)
//
// Pool scales (k_scale / v_scale, NVFP4's tensor scale) are folded into the softmax and
// output scales by the kernel; f16 P is scaled by 2^14 (kPScale) so its hi/lo split stays
// subnormal-free, and the output scale undoes it.
//
// Shared-memory tile of one warp and stage, per token (row) r of the tile:
//   K row  (the stored row, dims in order)   byte b at sk + at(r, b)   (a row geometry below)
//   V row  idem                              byte b at sv + at(r, b)
//   scales [kScaleStride] bytes       at sks / svs + r * kScaleStride (per-token FP32, or the
//                                     block-scale codes of the row; none for 16-bit / pool)
//
// Fragment ownership (g = lane / 4, t = lane % 4; mma_ptx.cuh has the m16n8k16 layout):
//  * K (A of S^T = K.Q^T, tokens as M): thread (g, t) reads dims [t*D/4, (t+1)*D/4) of
//    tokens g and g+8 of the pass with wide loads; k-step ks covers dims t*D/4 + 4ks .. +3
//    (NVFP4: the same dims in pairs, kKDimPairs; the mma contracts k, Q's B fragments use the
//    same order: mma_tile_compute.cuh).
//  * V (A of O^T += V^T.P^T, dims as M): 16-bit rows go through ldmatrix.trans (m-tile mt =
//    dims 16mt .. 16mt+15); 8- and 4-bit rows give thread g the dims [g*D/16, (g+1)*D/16)
//    and [(g+8)*D/16, ...) of tokens 2t, 2t+1, 2t+8, 2t+9 and pair tokens by byte permutes
//    (m-tile mt = dim offset mt inside each range). acc_dim() maps an accumulator back.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/attention/kv_vec.cuh"
#include "gpu/attention/mma_ptx.cuh"
#include "gpu/dispatch.cuh"

namespace kvlab::gpu::mma {

constexpr float kPScale = 16384.0f;  // f16 P * 2^14 keeps P's f16 split subnormal-free

// kWords 32-bit words from shared memory (8- or 16-byte aligned when kWords >= 2 / 4).
template <int kWords>
__device__ __forceinline__ void lds_words(const uint8_t* src, uint32_t (&w)[kWords]) {
  if constexpr (kWords == 1) {
    w[0] = *reinterpret_cast<const uint32_t*>(src);
  } else if constexpr (kWords == 2) {
    const uint2 r = *reinterpret_cast<const uint2*>(src);
    w[0] = r.x, w[1] = r.y;
  } else {
#pragma unroll
    for (int i = 0; i < kWords / 4; ++i) {
      const uint4 r = *reinterpret_cast<const uint4*>(src + 16 * i);
      w[4 * i] = r.x, w[4 * i + 1] = r.y, w[4 * i + 2] = r.z, w[4 * i + 3] = r.w;
    }
  }
}

// A range of 2/4/8/16 bytes of shared memory as 32-bit words (a 2-byte range in the low half).
template <int kBytes>
__device__ __forceinline__ void lds_range(const uint8_t* src, uint32_t (&w)[(kBytes + 3) / 4]) {
  if constexpr (kBytes == 2)
    w[0] = *reinterpret_cast<const uint16_t*>(src);
  else
    lds_words<kBytes / 4>(src, w);
}

// Four stored elements (the low 16 bits of w for 4-bit storage, w for 8-bit) -> floats, exactly.
template <KvElem E>
__device__ __forceinline__ void decode4(uint32_t w, float (&f)[4]) {
  if constexpr (E == KvElem::kE2M1) {
    const float2 a = e2m1x2_to_float2(w & 0xFFu), b = e2m1x2_to_float2((w >> 8) & 0xFFu);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
  } else {
    static_assert(E == KvElem::kE4M3, "decode4: e4m3 or e2m1");
    const float2 a = e4m3x2_to_float2(static_cast<uint16_t>(w & 0xFFFFu)),
                 b = e4m3x2_to_float2(static_cast<uint16_t>(w >> 16));
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
  }
}

// ------------------------------------------------------------------ row geometries
// Where byte `byte` of row `row` of a shared tile lies, relative to the tile's base: the one
// address function every loader reads the tile through (OperandGeometry::at). A copy path
// picks the geometry its copies land in:
//  * PaddedRows<kPad>: rows row_bytes + kPad apart. 16: rows start 4 banks apart (the cp.async
//    tiles of v4-v7, v9's per-row bulk copies); 0: back to back, as one bulk copy of a page
//    run lands them (v8).
//  * SwizzleRows<kSpan>: back to back, and the 16-byte chunk index inside each kSpan-byte
//    span is XORed with (offset / 128) % (kSpan / 16): what a TMA tensor copy with
//    CU_TENSOR_MAP_SWIZZLE_128B (kSpan 128: chunk ^= line % 8, line = offset / 128) or
//    SWIZZLE_64B (kSpan 64: chunk bits 4-5 ^= offset bits 7-8) writes (v10). The tile base
//    must be aligned to the pattern's period (8 x kSpan bytes) and a 16-byte chunk never
//    straddles two places, so any load of <= 16 bytes at a 16-byte-aligned-or-inside-a-chunk
//    offset is one address. Swizzle128Rows is the 128-byte form.
template <int kPad>
struct PaddedRows {
  static constexpr bool kSwizzled = false;
  static constexpr int kPeriod = 16;
  __host__ __device__ static constexpr int stride(int row_bytes) { return row_bytes + kPad; }
  __host__ __device__ static constexpr int offset(int row_bytes, int row, int byte) {
    return row * (row_bytes + kPad) + byte;
  }
};
template <int kSpan>
struct SwizzleRows {
  static_assert(kSpan == 64 || kSpan == 128, "the TMA's 64- and 128-byte swizzles");
  static constexpr bool kSwizzled = true;
  static constexpr int kPeriod = 8 * kSpan;  // bytes after which the XOR pattern repeats
  __host__ __device__ static constexpr int stride(int row_bytes) { return row_bytes; }
  __host__ __device__ static constexpr int offset(int row_bytes, int row, int byte) {
    const int o = row * row_bytes + byte;
    return o ^ (((o >> 7) & (kSpan / 16 - 1)) << 4);
  }
};
using Swizzle128Rows = SwizzleRows<128>;

// The dim that K k-step position p (0..7 within a group of 8: k-step 2c + h holds positions
// 4h .. 4h+3 as b0 / a0 lo, hi, b1 / a2 lo, hi) holds under kKDimPairs: the pairs (i, i + 4)
// that a word of eight E2M1 codes gives (formats.h e2m1_pair_to_fp16x2_scaled), i.e.
// positions 0..7 -> dims 0 4 1 5 2 6 3 7.
__host__ __device__ __forceinline__ constexpr int pair_order(int p) {
  return ((p & 1) << 2) | (p >> 1);
}

// ------------------------------------------------------------------ tile geometry
// What every loader of a (format, head_dim) shares: the row and fragment geometry.
// Rows: the row geometry of the shared tile (above).
template <KvFormat F, int D, class Rows = PaddedRows<16>>
struct OperandGeometry {
  static constexpr KvFormat kFormat = F;
  static constexpr KvElem kElem = kv_elem_of(F);
  // K operands are K itself and take a thread's dims in order (loaders may hide these).
  static constexpr float kScoreScale = 1.0f;
  static constexpr bool kKDimPairs = false;
  static constexpr int kBits = kv_elem_bits(kElem);
  static constexpr int kRowBytes = D * kBits / 8;
  // Bytes between the first rows of two 16-token passes, per row (a pass starts at
  // 16 * kRowStride: a multiple of the swizzle's period for the swizzled rows, so the pattern
  // restarts).
  static constexpr int kRowStride = Rows::stride(kRowBytes);
  static_assert(!Rows::kSwizzled || (16 * kRowStride) % Rows::kPeriod == 0,
                "swizzled passes start on the pattern's period");
  // The one address function of the tile: byte `byte` of row `row`.
  __device__ static int at(int row, int byte) { return Rows::offset(kRowBytes, row, byte); }
  static constexpr int kMT = D / 16;                   // k-steps of Q.K^T = m-tiles of P.V
  static constexpr int kCS = kMT < 8 ? kMT : 8;        // k-steps per K-slice load
  static constexpr int kCBytes = kCS * 4 * kBits / 8;  // bytes per token per K-slice load
  static constexpr int kCW = kCBytes / 4;
  static constexpr int kRange = D / 16;  // dims per V range (8- and 4-bit path)
  static constexpr int kRangeBytes = kRange * kBits / 8;
  static constexpr int kRangeWords = (kRangeBytes + 3) / 4;
  // Scale bytes per token: copied from global memory, and the stride of the shared tile
  // (kv_layout.h: per-token FP32, or D / group block-scale codes; the layout header's
  // functions are not constexpr, so the two facts are restated here).
  static constexpr bool kTokenScales = F == KvFormat::kFP8E4M3PerToken;
  static constexpr int kScaleGroup = F == KvFormat::kNVFP4 ? 16 : (F == KvFormat::kMXFP4 ? 32 : 0);
  static constexpr int kScaleBytes = kTokenScales ? 4 : (kScaleGroup ? D / kScaleGroup : 0);
  static_assert(kCBytes % 8 == 0, "K slice loads");
  static_assert(D % 64 == 0, "head_dim: a multiple of 64");

  // The head-dimension index of accumulator element (m-tile mt, half h: c0/c1 -> 0, c2/c3 -> 1).
  __device__ static int acc_dim(int mt, int g, int h) {
    if constexpr (kBits == 16)
      return mt * 16 + g + 8 * h;
    else
      return (g + 8 * h) * kRange + mt;
  }

  // The K slice loop shared by every loader: thread (g, t) loads its dims of rows r0 = g and
  // r1 = g + 8 of a 16-token pass in kCBytes pieces; conv(words0, words1, s_, ks, a) turns
  // k-step ks (slot s_ of the piece) into an A fragment, which goes to emit(ks, a).
  // kWords words of row `row` from byte `byte` on, in pieces of at most 16 bytes (one
  // address each through at(): a piece never crosses a 16-byte chunk).
  template <int kWords>
  __device__ static void lds_row(const uint8_t* base, int row, int byte, uint32_t (&w)[kWords]) {
    if constexpr (kWords <= 4) {
      lds_words<kWords>(base + at(row, byte), w);
    } else {
#pragma unroll
      for (int i = 0; i < kWords / 4; ++i) {
        uint32_t q[4];
        lds_words<4>(base + at(row, byte + 16 * i), q);
        w[4 * i] = q[0], w[4 * i + 1] = q[1], w[4 * i + 2] = q[2], w[4 * i + 3] = q[3];
      }
    }
  }

  template <class Conv, class Emit>
  __device__ static void k_slices(const uint8_t* sk_pass, int lane, Conv&& conv, Emit&& emit) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int ck = 0; ck < kMT / kCS; ++ck) {
      uint32_t w0[kCW], w1[kCW];
      lds_row<kCW>(sk_pass, g, t * (kRowBytes / 4) + ck * kCBytes, w0);
      lds_row<kCW>(sk_pass, g + 8, t * (kRowBytes / 4) + ck * kCBytes, w1);
#pragma unroll
      for (int s_ = 0; s_ < kCS; ++s_) {
        uint32_t a[4];
        conv(w0, w1, s_, ck * kCS + s_, a);
        emit(ck * kCS + s_, a);
      }
    }
  }

  // The 8/4-bit V pass shared by those loaders: thread (g, t) loads the two ranges of tokens
  // 2t, 2t+1, 2t+8, 2t+9; piece(x, y, reg, q4, A) fills register `reg` (a0..a3) of the four
  // m-tiles 4q4 .. 4q4+3 from words x (token of the pair's low half) and y.
  template <class Piece, class Emit>
  __device__ static void v_ranges(const uint8_t* sv_pass, int lane, Piece&& piece, Emit&& emit) {
    static_assert(kBits < 16, "16-bit V rows use ldmatrix");
    const int g = lane >> 2, t = lane & 3;
    const int ra = 2 * t, rb = 2 * t + 1, rc = 2 * t + 8, rd = 2 * t + 9;
    const int o0 = g * kRangeBytes, o1 = (g + 8) * kRangeBytes;
    uint32_t wa0[kRangeWords], wa1[kRangeWords], wb0[kRangeWords], wb1[kRangeWords];
    uint32_t wc0[kRangeWords], wc1[kRangeWords], wd0[kRangeWords], wd1[kRangeWords];
    static_assert(kRangeBytes <= 16 && 16 % kRangeBytes == 0, "a range inside one 16-byte chunk");
    lds_range<kRangeBytes>(sv_pass + at(ra, o0), wa0);
    lds_range<kRangeBytes>(sv_pass + at(ra, o1), wa1);
    lds_range<kRangeBytes>(sv_pass + at(rb, o0), wb0);
    lds_range<kRangeBytes>(sv_pass + at(rb, o1), wb1);
    lds_range<kRangeBytes>(sv_pass + at(rc, o0), wc0);
    lds_range<kRangeBytes>(sv_pass + at(rc, o1), wc1);
    lds_range<kRangeBytes>(sv_pass + at(rd, o0), wd0);
    lds_range<kRangeBytes>(sv_pass + at(rd, o1), wd1);
    constexpr int kPerWord = 32 / kBits;  // elements per word
#pragma unroll
    for (int q4 = 0; q4 < kRange / 4; ++q4) {  // 4 dims (4 m-tiles) at a time
      const int wi = (q4 * 4) / kPerWord, sh = ((q4 * 4) % kPerWord) * kBits;
      uint32_t A[4][4];                           // [m-tile within the step][a0..a3]
      piece(wa0[wi] >> sh, wb0[wi] >> sh, 0, A);  // a0: dims of range 0, tokens 2t, 2t+1
      piece(wa1[wi] >> sh, wb1[wi] >> sh, 1, A);  // a1: range 1
      piece(wc0[wi] >> sh, wd0[wi] >> sh, 2, A);  // a2: range 0, tokens 2t+8, 2t+9
      piece(wc1[wi] >> sh, wd1[wi] >> sh, 3, A);  // a3
#pragma unroll
      for (int d = 0; d < 4; ++d) emit(q4 * 4 + d, A[d]);
    }
  }
};

// ------------------------------------------------------------------ the loaders
// Interface of MmaOperand<F, D> (every member static):
//   kQkF16, kPvF16           mma operand types of Q.K^T and P.V (false: bf16)
//   k_frags(sk_pass, sks_pass, lane, emit)   emit(ks, a) for the kMT k-steps of a pass
//   k_row_scale(sks, r)      per-token K scale of row r (1 without token scales)
//   scale_probs(p, svs, r0, r1)  P's factor before rounding: 2^14 (f16 P) or V's token scale
//   v_frags(sv_pass, svs_pass, lane, emit)   emit(mt, a) for the kMT m-tiles of a pass
//   kOutScale                what the output is multiplied by to undo scale_probs' constant
//                            (and a constant the V operands carry)
//   kScoreScale              what Q.K^T is multiplied by to undo a constant the K operands
//                            carry (OperandGeometry: 1)
//   kKDimPairs               K k-steps take a thread's dims in the paired order of the NVFP4
//                            loader, and Q follows (OperandGeometry: false, dims in order)
// Rows: the tile's row geometry (v4's padded rows unless a copy path lands its rows otherwise;
// the 16-bit, FP8 E4M3 and NVFP4 loaders take any, the others v4's).
template <KvFormat F, int D, class Rows = PaddedRows<16>>
struct MmaOperand;

// 16-bit storage: the stored pairs are the fragments. Rows: the tile's row geometry (v4's
// padded rows unless a copy path lands its rows otherwise).
template <KvFormat F, int D, bool kF16, class Rows = PaddedRows<16>>
struct Operand16 : OperandGeometry<F, D, Rows> {
  using G = OperandGeometry<F, D, Rows>;
  static constexpr bool kQkF16 = kF16, kPvF16 = kF16;
  static constexpr float kOutScale = kF16 ? 1.0f / kPScale : 1.0f;
  template <class Emit>
  __device__ static void k_frags(const uint8_t* sk_pass, const uint8_t*, int lane, Emit&& emit) {
    G::k_slices(
        sk_pass, lane,
        [](const uint32_t(&w0)[G::kCW], const uint32_t(&w1)[G::kCW], int s_, int, uint32_t(&a)[4]) {
          a[0] = w0[2 * s_], a[2] = w0[2 * s_ + 1], a[1] = w1[2 * s_], a[3] = w1[2 * s_ + 1];
        },
        emit);
  }
  __device__ static float k_row_scale(const uint8_t*, int) { return 1.0f; }
  __device__ static void scale_probs(float (&p)[4], const uint8_t*, int, int) {
    if constexpr (kF16) p[0] *= kPScale, p[1] *= kPScale, p[2] *= kPScale, p[3] *= kPScale;
  }
  // V^T fragments straight from the token-major tile: matrix i of lane l is rows (tokens)
  // (i/2)*8 + l%8, columns (dims) mt*16 + (i%2)*8.
  template <class Emit>
  __device__ static void v_frags(const uint8_t* sv_pass, const uint8_t*, int lane, Emit&& emit) {
    const int vr = (lane >> 4) * 8 + (lane & 7), vb = ((lane >> 3) & 1) * 16;
#pragma unroll
    for (int mt = 0; mt < G::kMT; ++mt) {
      uint32_t a[4];
      ldmatrix_x4_trans(a, sv_pass + G::at(vr, vb + mt * 32));
      emit(mt, a);
    }
  }
};
template <int D>
struct MmaOperand<KvFormat::kBF16, D> : Operand16<KvFormat::kBF16, D, false> {};
template <int D>
struct MmaOperand<KvFormat::kFP16, D> : Operand16<KvFormat::kFP16, D, true> {};

// FP8 E4M3 with a pool scale: one cvt per pair, f16 operands both ways.
template <int D, class Rows>
struct MmaOperand<KvFormat::kFP8E4M3, D, Rows> : OperandGeometry<KvFormat::kFP8E4M3, D, Rows> {
  using G = OperandGeometry<KvFormat::kFP8E4M3, D, Rows>;
  static constexpr bool kQkF16 = true, kPvF16 = true;
  static constexpr float kOutScale = 1.0f / kPScale;
  template <class Emit>
  __device__ static void k_frags(const uint8_t* sk_pass, const uint8_t*, int lane, Emit&& emit) {
    G::k_slices(
        sk_pass, lane,
        [](const uint32_t(&w0)[G::kCW], const uint32_t(&w1)[G::kCW], int s_, int, uint32_t(&a)[4]) {
          a[0] = e4m3x2_to_f16x2(w0[s_]), a[2] = e4m3x2_to_f16x2(w0[s_] >> 16);
          a[1] = e4m3x2_to_f16x2(w1[s_]), a[3] = e4m3x2_to_f16x2(w1[s_] >> 16);
        },
        emit);
  }
  __device__ static float k_row_scale(const uint8_t*, int) { return 1.0f; }
  __device__ static void scale_probs(float (&p)[4], const uint8_t*, int, int) {
    p[0] *= kPScale, p[1] *= kPScale, p[2] *= kPScale, p[3] *= kPScale;
  }
  template <class Emit>
  __device__ static void v_frags(const uint8_t* sv_pass, const uint8_t*, int lane, Emit&& emit) {
    G::v_ranges(
        sv_pass, lane,
        [](uint32_t px, uint32_t py, int reg, uint32_t(&A)[4][4]) {
          const uint32_t lo = __byte_perm(px, py, 0x5140), hi = __byte_perm(px, py, 0x7362);
          A[0][reg] = e4m3x2_to_f16x2(lo), A[1][reg] = e4m3x2_to_f16x2(lo >> 16);
          A[2][reg] = e4m3x2_to_f16x2(hi), A[3][reg] = e4m3x2_to_f16x2(hi >> 16);
        },
        emit);
  }
};

// FP8 E4M3 with per-token FP32 scales: K as f16 with the token's scale on the score; V as
// bf16 (E4M3 is exact there) with the token's scale on the probability (bf16 has fp32's
// range, so any scale fits).
template <int D>
struct MmaOperand<KvFormat::kFP8E4M3PerToken, D> : OperandGeometry<KvFormat::kFP8E4M3PerToken, D> {
  using G = OperandGeometry<KvFormat::kFP8E4M3PerToken, D>;
  static constexpr bool kQkF16 = true, kPvF16 = false;
  static constexpr float kOutScale = 1.0f;
  template <class Emit>
  __device__ static void k_frags(const uint8_t* sk_pass, const uint8_t* sks_pass, int lane,
                                 Emit&& emit) {
    MmaOperand<KvFormat::kFP8E4M3, D>::k_frags(sk_pass, sks_pass, lane, emit);
  }
  __device__ static float k_row_scale(const uint8_t* sks, int r) {
    return reinterpret_cast<const float*>(sks)[r];
  }
  __device__ static void scale_probs(float (&p)[4], const uint8_t* svs, int r0, int r1) {
    const float vs0 = reinterpret_cast<const float*>(svs)[r0],
                vs1 = reinterpret_cast<const float*>(svs)[r1];
    p[0] *= vs0, p[1] *= vs0, p[2] *= vs1, p[3] *= vs1;
  }
  template <class Emit>
  __device__ static void v_frags(const uint8_t* sv_pass, const uint8_t*, int lane, Emit&& emit) {
    G::v_ranges(
        sv_pass, lane,
        [](uint32_t px, uint32_t py, int reg, uint32_t(&A)[4][4]) {
          float fx[4], fy[4];
          decode4<KvElem::kE4M3>(px, fx);
          decode4<KvElem::kE4M3>(py, fy);
#pragma unroll
          for (int d = 0; d < 4; ++d) A[d][reg] = pack_bf16x2(fx[d], fy[d]);
        },
        emit);
  }
};

// FP8 E5M2 (pool scale): the code is the top byte of the equal half.
template <int D>
struct MmaOperand<KvFormat::kFP8E5M2, D> : OperandGeometry<KvFormat::kFP8E5M2, D> {
  using G = OperandGeometry<KvFormat::kFP8E5M2, D>;
  static constexpr bool kQkF16 = true, kPvF16 = true;
  static constexpr float kOutScale = 1.0f / kPScale;
  template <class Emit>
  __device__ static void k_frags(const uint8_t* sk_pass, const uint8_t*, int lane, Emit&& emit) {
    G::k_slices(
        sk_pass, lane,
        [](const uint32_t(&w0)[G::kCW], const uint32_t(&w1)[G::kCW], int s_, int, uint32_t(&a)[4]) {
          a[0] = __byte_perm(w0[s_], 0u, 0x1404), a[2] = __byte_perm(w0[s_], 0u, 0x3424);
          a[1] = __byte_perm(w1[s_], 0u, 0x1404), a[3] = __byte_perm(w1[s_], 0u, 0x3424);
        },
        emit);
  }
  __device__ static float k_row_scale(const uint8_t*, int) { return 1.0f; }
  __device__ static void scale_probs(float (&p)[4], const uint8_t*, int, int) {
    p[0] *= kPScale, p[1] *= kPScale, p[2] *= kPScale, p[3] *= kPScale;
  }
  template <class Emit>
  __device__ static void v_frags(const uint8_t* sv_pass, const uint8_t*, int lane, Emit&& emit) {
    G::v_ranges(
        sv_pass, lane,
        [](uint32_t px, uint32_t py, int reg, uint32_t(&A)[4][4]) {
          const uint32_t ax = __byte_perm(px, 0u, 0x1404), bx = __byte_perm(py, 0u, 0x1404);
          const uint32_t ay = __byte_perm(px, 0u, 0x3424), by = __byte_perm(py, 0u, 0x3424);
          A[0][reg] = __byte_perm(ax, bx, 0x5410), A[1][reg] = __byte_perm(ax, bx, 0x7632);
          A[2][reg] = __byte_perm(ay, by, 0x5410), A[3][reg] = __byte_perm(ay, by, 0x7632);
        },
        emit);
  }
};

// NVFP4: e2m1 -> the bits of a half times 2^-14 by shifts and masks alone (formats.h,
// e2m1_pair_to_fp16x2_scaled), then one exact f16x2 multiply by the E4M3 block scale. The
// operands are K and V times 2^-14, exactly: a code times 2^-14 has no bit below 2^-15, an
// E4M3 scale none below 2^-9, so the product has <= 6 significant bits, none below 2^-24 (the
// f16 grid, subnormals included), and |product| <= 6 x 448 x 2^-14 < 0.17. The tensor cores
// take f16 subnormals as they are: the outputs are those of the earlier form, which scaled
// the block scales by 2^7 to keep the operands normal (same error figures on every A/B
// point, TUNING.md step 27). kScoreScale and kOutScale take the 2^14 back in fp32, where a
// power of two changes no bit. The FP32 tensor scale is the pool scale.
//
// A word of 8 codes gives the pairs (code i, code i + 4) cheaply, so the K k-steps take a
// thread's dims in the order kKDimPairs describes: k-step 2c + h of word c (dims 8c .. 8c+7
// of the thread's slice) holds dims 8c + {2h, 2h+4} in b0 / a0 and 8c + {2h+1, 2h+5} in
// b1 / a2, and q_fragments() lays Q out the same way. V pairs two tokens' codes of one dim:
// the two tokens' words are merged so that token x's dims are nibbles 0..3 and token y's
// nibbles 4..7.
//
// The block scales come from the stage's scale runs in whole words: a thread's K scales of
// a row are adjacent (one load per row, one conversion per two codes), and the V scales of
// the token pairs (2t, 2t+1) and (2t+8, 2t+9) are two adjacent rows each (one load per pair,
// one byte permute and one conversion per two codes).
template <int D, class Rows>
struct MmaOperand<KvFormat::kNVFP4, D, Rows> : OperandGeometry<KvFormat::kNVFP4, D, Rows> {
  using G = OperandGeometry<KvFormat::kNVFP4, D, Rows>;
  static constexpr bool kQkF16 = true, kPvF16 = true;
  static constexpr bool kKDimPairs = true;
  static constexpr float kScoreScale = static_cast<float>(1 << kE2M1HalfShift);
  static constexpr float kOutScale = kScoreScale / kPScale;
  static constexpr int kGroup = G::kScaleGroup;
  static constexpr int kSB = G::kScaleBytes;  // scale codes per row (D / 16)
  // Block-scale groups in a thread's K slice [t*D/4, (t+1)*D/4): group j covers k-steps
  // 4j .. 4j+3 (words 2j, 2j+1).
  static constexpr int kGpt = (D / 4) / kGroup;
  static_assert(kGpt == 1 || kGpt == 2 || kGpt == 4, "head_dim 64, 128 or 256");
  // The thread's kGpt K scales of one row as replicated f16x2 pairs (sc[j] = (s_j, s_j)).
  __device__ static void k_row_scales(const uint8_t* codes, uint32_t (&sc)[kGpt]) {
    if constexpr (kGpt == 1) {
      sc[0] = e4m3x2_to_f16x2(static_cast<uint32_t>(codes[0]) * 0x0101u);
    } else {
      const uint32_t w = kGpt == 2
                             ? static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(codes))
                             : *reinterpret_cast<const uint32_t*>(codes);
#pragma unroll
      for (int j = 0; j < kGpt; j += 2) {
        const uint32_t h = e4m3x2_to_f16x2(w >> (8 * j));
        sc[j] = __byte_perm(h, 0u, 0x1010), sc[j + 1] = __byte_perm(h, 0u, 0x3232);
      }
    }
  }
  template <class Emit>
  __device__ static void k_frags(const uint8_t* sk_pass, const uint8_t* sks_pass, int lane,
                                 Emit&& emit) {
    const int g = lane >> 2, t = lane & 3;
    // The E4M3 block scales of rows g and g+8 as replicated f16x2 pairs.
    uint32_t ksc0[kGpt], ksc1[kGpt];
    k_row_scales(sks_pass + g * kSB + t * kGpt, ksc0);
    k_row_scales(sks_pass + (g + 8) * kSB + t * kGpt, ksc1);
    G::k_slices(
        sk_pass, lane,
        [&](const uint32_t(&w0)[G::kCW], const uint32_t(&w1)[G::kCW], int s_, int ks,
            uint32_t(&a)[4]) {
          const int i = 2 * (s_ % 2);  // word s_ / 2, pairs (i, i+4) and (i+1, i+5)
          const uint32_t sc0 = ksc0[ks / 4], sc1 = ksc1[ks / 4];
          a[0] = hmul2_bits(e2m1_pair_to_fp16x2_scaled(w0[s_ / 2], i), sc0);
          a[2] = hmul2_bits(e2m1_pair_to_fp16x2_scaled(w0[s_ / 2], i + 1), sc0);
          a[1] = hmul2_bits(e2m1_pair_to_fp16x2_scaled(w1[s_ / 2], i), sc1);
          a[3] = hmul2_bits(e2m1_pair_to_fp16x2_scaled(w1[s_ / 2], i + 1), sc1);
        },
        emit);
  }
  __device__ static float k_row_scale(const uint8_t*, int) {
    return 1.0f;
  }
  __device__ static void scale_probs(float (&p)[4], const uint8_t*, int, int) {
    p[0] *= kPScale, p[1] *= kPScale, p[2] *= kPScale, p[3] *= kPScale;
  }
  // f16x2 (scale of token x, scale of token y) of one scale group, from the words w of the
  // adjacent rows x and y = x + 1 (kSB / 4 words each, x's first): the group's code is byte
  // `sel` of word kWord of each row, or of word kWord + 1 when `next` (head_dim 256).
  template <int kWord>
  __device__ static uint32_t v_pair_scales(const uint32_t (&w)[kSB / 2], bool next, uint32_t sel) {
    constexpr int kW = kSB / 4;
    uint32_t ax = w[kWord], ay = w[kW + kWord];
    if constexpr (kWord + 1 < kW) {
      if (next) ax = w[kWord + 1], ay = w[kW + kWord + 1];
    }
    return e4m3x2_to_f16x2(__byte_perm(ax, ay, sel));
  }
  template <class Emit>
  __device__ static void v_frags(const uint8_t* sv_pass, const uint8_t* svs_pass, int lane,
                                 Emit&& emit) {
    const int g = lane >> 2, t = lane & 3;
    // Each V range lies inside one scale group: f16x2 (scale of token x, scale of token y)
    // for the token pairs (2t, 2t+1) and (2t+8, 2t+9), groups q0 = g x D / 256 and
    // q1 = q0 + D / 32: q0 is byte q0 % 4 of word 0 (head_dim <= 128) or of word g / 4 (256);
    // q1 is the same byte D / 128 words further (head_dim 64: byte q0 + 2 of word 0).
    static_assert(kSB % 4 == 0 && G::kRange * 256 == kGroup * D, "q0 = g x D / 256");
    const int q0 = (g * G::kRange) / kGroup;
    const uint32_t b = static_cast<uint32_t>(q0 & 3), sel0 = b | ((b + 4) << 4);
    const uint32_t sel1 = D == 64 ? sel0 + 0x22u : sel0;
    const bool next = D == 256 && q0 >= 4;
    constexpr int kW1 = D / 128;  // q1's word
    uint32_t lo[kSB / 2], hi[kSB / 2];  // rows 2t, 2t+1 | rows 2t+8, 2t+9
    lds_words<kSB / 2>(svs_pass + (2 * t) * kSB, lo);
    lds_words<kSB / 2>(svs_pass + (2 * t + 8) * kSB, hi);
    const uint32_t hs[4] = {v_pair_scales<0>(lo, next, sel0), v_pair_scales<kW1>(lo, next, sel1),
                            v_pair_scales<0>(hi, next, sel0), v_pair_scales<kW1>(hi, next, sel1)};
    G::v_ranges(
        sv_pass, lane,
        [&](uint32_t px, uint32_t py, int reg, uint32_t(&A)[4][4]) {
          const uint32_t z = (px & 0xFFFFu) | (py << 16);  // nibble d: x's dim d, d+4: y's
#pragma unroll
          for (int d = 0; d < 4; ++d)
            A[d][reg] = hmul2_bits(e2m1_pair_to_fp16x2_scaled(z, d), hs[reg]);
        },
        emit);
  }
};

// MXFP4: e2m1 -> float x the UE8M0 block scale 2^k -> bf16 (exact: <= 2 significant bits
// times a power of two inside bf16's range).
template <int D>
struct MmaOperand<KvFormat::kMXFP4, D> : OperandGeometry<KvFormat::kMXFP4, D> {
  using G = OperandGeometry<KvFormat::kMXFP4, D>;
  static constexpr bool kQkF16 = false, kPvF16 = false;
  static constexpr float kOutScale = 1.0f;
  static constexpr int kGroup = G::kScaleGroup;
  template <class Emit>
  __device__ static void k_frags(const uint8_t* sk_pass, const uint8_t* sks_pass, int lane,
                                 Emit&& emit) {
    const int g = lane >> 2, t = lane & 3;
    const uint8_t* sc_r0 = sks_pass + g * G::kScaleBytes;
    const uint8_t* sc_r1 = sc_r0 + 8 * G::kScaleBytes;
    G::k_slices(
        sk_pass, lane,
        [&](const uint32_t(&w0)[G::kCW], const uint32_t(&w1)[G::kCW], int s_, int ks,
            uint32_t(&a)[4]) {
          const int grp = (t * (D / 4) + 4 * ks) / kGroup;
          const float sc0 = ue8m0_to_float(sc_r0[grp]), sc1 = ue8m0_to_float(sc_r1[grp]);
          float f0[4], f1[4];
          decode4<KvElem::kE2M1>(w0[s_ / 2] >> (16 * (s_ % 2)), f0);
          decode4<KvElem::kE2M1>(w1[s_ / 2] >> (16 * (s_ % 2)), f1);
          a[0] = pack_bf16x2(f0[0] * sc0, f0[1] * sc0),
          a[2] = pack_bf16x2(f0[2] * sc0, f0[3] * sc0);
          a[1] = pack_bf16x2(f1[0] * sc1, f1[1] * sc1),
          a[3] = pack_bf16x2(f1[2] * sc1, f1[3] * sc1);
        },
        emit);
  }
  __device__ static float k_row_scale(const uint8_t*, int) { return 1.0f; }
  __device__ static void scale_probs(float (&)[4], const uint8_t*, int, int) {}
  template <class Emit>
  __device__ static void v_frags(const uint8_t* sv_pass, const uint8_t* svs_pass, int lane,
                                 Emit&& emit) {
    const int g = lane >> 2, t = lane & 3;
    const int ra = 2 * t, rb = 2 * t + 1, rc = 2 * t + 8, rd = 2 * t + 9;
    const int q0 = (g * G::kRange) / kGroup, q1 = ((g + 8) * G::kRange) / kGroup;
    auto sc = [&](int r, int q) { return ue8m0_to_float(svs_pass[r * G::kScaleBytes + q]); };
    // Scales of (token x, token y) of registers a0..a3.
    const float sx[4] = {sc(ra, q0), sc(ra, q1), sc(rc, q0), sc(rc, q1)};
    const float sy[4] = {sc(rb, q0), sc(rb, q1), sc(rd, q0), sc(rd, q1)};
    G::v_ranges(
        sv_pass, lane,
        [&](uint32_t px, uint32_t py, int reg, uint32_t(&A)[4][4]) {
          float fx[4], fy[4];
          decode4<KvElem::kE2M1>(px, fx);
          decode4<KvElem::kE2M1>(py, fy);
#pragma unroll
          for (int d = 0; d < 4; ++d) A[d][reg] = pack_bf16x2(fx[d] * sx[reg], fy[d] * sy[reg]);
        },
        emit);
  }
};

}  // namespace kvlab::gpu::mma
