// test_append_ref.cpp: kvlab::ref::append_kv writes exactly the expected bytes at the
// expected offsets for every KvFormat x KvLayout, and nothing else.
//
// The expected image is built independently of append.cpp: element codes and scales come
// from the QuantScheme presets that document the same rule (schemes.h), and offsets from
// the layout brackets written out here (not kv_layout.h's functions). Pools and scale
// arrays are pre-filled with a sentinel and surrounded by guard regions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "reference/attention/kv_access.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "reference/quant/append.h"
#include "reference/quant/schemes.h"
#include "tests/common/test_env.h"

namespace kvlab {
namespace {

constexpr uint8_t kSentinel = 0xA5;
constexpr size_t kGuard = 64;

// A byte buffer with guard regions on both sides.
struct Guarded {
  std::vector<uint8_t> buf;
  explicit Guarded(size_t n) : buf(n + 2 * kGuard, kSentinel) {}
  uint8_t* data() { return buf.data() + kGuard; }
};

// Element offsets from the layout brackets (kv_layout.h's documentation).
int64_t k_offset(const PageGeometry& g, int64_t b, int64_t h, int64_t s, int64_t d) {
  const int64_t H = g.num_kv_heads, B = g.block_size, D = g.head_dim;
  switch (g.layout) {
    case KvLayout::kNHD:
      return ((b * B + s) * H + h) * D + d;  // [N, B, H, D]
    case KvLayout::kHND:
      return ((b * H + h) * B + s) * D + d;  // [N, H, B, D]
    case KvLayout::kSplitX: {                // [N, H, D/x, B, x]
      const int64_t X = 128 / kv_format_bits(g.format);
      return (((b * H + h) * (D / X) + d / X) * B + s) * X + d % X;
    }
  }
  return -1;
}
int64_t v_offset(const PageGeometry& g, int64_t b, int64_t h, int64_t s, int64_t d) {
  if (g.layout != KvLayout::kSplitX) return k_offset(g, b, h, s, d);
  const int64_t H = g.num_kv_heads, B = g.block_size, D = g.head_dim;
  return ((b * H + h) * D + d) * B + s;  // [N, H, D, B]
}

// The preset that documents the same rule as append_kv for a format.
std::string scheme_for(KvFormat f) {
  switch (f) {
    case KvFormat::kBF16:
      return "bf16";
    case KvFormat::kFP16:
      return "fp16";
    case KvFormat::kFP8E4M3:
      return "fp8_e4m3_per_tensor";
    case KvFormat::kFP8E5M2:
      return "fp8_e5m2_per_tensor";
    case KvFormat::kFP8E4M3PerToken:
      return "fp8_e4m3_per_token";
    case KvFormat::kNVFP4:
      return "nvfp4";
    case KvFormat::kMXFP4:
      return "mxfp4";
  }
  return "";
}

void put_code(uint8_t* pool, KvFormat f, int64_t idx, uint16_t code) {
  switch (kv_format_bits(f)) {
    case 16:
      std::memcpy(pool + 2 * idx, &code, 2);
      break;  // little-endian host
    case 8:
      pool[idx] = static_cast<uint8_t>(code);
      break;
    case 4: {
      uint8_t& byte = pool[idx / 2];
      byte = (idx % 2 == 0) ? static_cast<uint8_t>((byte & 0xF0) | (code & 0xF))
                            : static_cast<uint8_t>((byte & 0x0F) | ((code & 0xF) << 4));
      break;
    }
  }
}

uint16_t to_bits(float x, DType t) {
  return t == DType::kBF16 ? float_to_bf16_bits(x, Saturation::kNonSaturating)
                           : float_to_fp16_bits(x, Saturation::kNonSaturating);
}

struct Case {
  KvLayout layout;
  KvFormat format;
  int64_t num_blocks;
  int heads, head_dim, block_size;
  int num_tokens;
  DType in_dtype;
};

std::string name_of(const Case& c) {
  std::ostringstream os;
  os << to_string(c.layout) << "/" << to_string(c.format) << " N" << c.num_blocks << " H" << c.heads
     << " D" << c.head_dim << " B" << c.block_size << " T" << c.num_tokens << " "
     << to_string(c.in_dtype);
  return os.str();
}

// Runs append_kv on one case and checks every byte of pools, scales and guards.
void run_case(const Case& c, uint64_t seed) {
  SCOPED_TRACE(name_of(c) + " seed " + std::to_string(seed));
  PageGeometry g;
  g.layout = c.layout;
  g.format = c.format;
  g.num_blocks = c.num_blocks;
  g.num_kv_heads = c.heads;
  g.head_dim = c.head_dim;
  g.block_size = c.block_size;
  const int H = c.heads, D = c.head_dim, T = c.num_tokens;
  std::mt19937_64 rng(seed);

  // Inputs: Gaussian with a per-token magnitude spread (1e-3 .. 1e3), rounded to in_dtype.
  std::vector<float> kf(static_cast<size_t>(T) * H * D), vf(kf.size());
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> mag(-3.0f, 3.0f);
  for (int t = 0; t < T; ++t) {
    const float m = std::pow(10.0f, mag(rng));
    for (int i = 0; i < H * D; ++i) {
      kf[static_cast<size_t>(t) * H * D + i] = m * nd(rng);
      vf[static_cast<size_t>(t) * H * D + i] = m * nd(rng);
    }
  }
  if (T > 4) {  // specials: an all-zero token head, a signed zero, a huge value, NaN, Inf
    std::fill(kf.begin() + static_cast<long>(D), kf.begin() + static_cast<long>(2 * D), 0.0f);
    kf[3] = -0.0f;
    vf[5] = 3e4f;
    const size_t t3 = static_cast<size_t>(3) * H * D, t4 = static_cast<size_t>(4) * H * D;
    kf[t3 + 1] = std::numeric_limits<float>::quiet_NaN();
    vf[t4 + 2] = -std::numeric_limits<float>::infinity();
  }
  std::vector<uint16_t> k16(kf.size()), v16(kf.size());
  if (c.in_dtype != DType::kF32) {
    for (size_t i = 0; i < kf.size(); ++i) {
      k16[i] = to_bits(kf[i], c.in_dtype);
      v16[i] = to_bits(vf[i], c.in_dtype);
      kf[i] = c.in_dtype == DType::kBF16 ? bf16_bits_to_float(k16[i]) : fp16_bits_to_float(k16[i]);
      vf[i] = c.in_dtype == DType::kBF16 ? bf16_bits_to_float(v16[i]) : fp16_bits_to_float(v16[i]);
    }
  }
  // Slots: distinct, random, every third token padding.
  const int64_t num_slots = g.num_blocks * g.block_size;
  std::vector<int64_t> all(static_cast<size_t>(num_slots));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<int64_t> slots(static_cast<size_t>(T));
  size_t used = 0;
  for (int t = 0; t < T; ++t) {
    if (t % 3 == 2) {
      slots[t] = -1;
      continue;
    }
    ASSERT_LT(used, all.size()) << "test case has more tokens than slots";
    slots[t] = all[used++];
  }

  Guarded kpool(static_cast<size_t>(g.bytes())), vpool(static_cast<size_t>(g.bytes()));
  Guarded ksc(static_cast<size_t>(g.scale_bytes())), vsc(static_cast<size_t>(g.scale_bytes()));
  AppendArgs a;
  a.in_dtype = c.in_dtype;
  a.k = c.in_dtype == DType::kF32 ? static_cast<const void*>(kf.data()) : k16.data();
  a.v = c.in_dtype == DType::kF32 ? static_cast<const void*>(vf.data()) : v16.data();
  a.slot_mapping = slots.data();
  a.num_tokens = T;
  a.kv.geom = g;
  a.kv.k = kpool.data();
  a.kv.v = vpool.data();
  const bool scaled = kv_format_has_token_scales(c.format) || kv_format_has_block_scales(c.format);
  a.kv.k_scales = scaled ? ksc.data() : nullptr;
  a.kv.v_scales = scaled ? vsc.data() : nullptr;
  a.kv.k_scale = 0.0375f;  // pool scales (used by FP8 and NVFP4)
  a.kv.v_scale = 2.5f;

  // Expected images.
  Guarded ek = kpool, ev = vpool, eks = ksc, evs = vsc;
  const ref::QuantScheme scheme = ref::make_scheme(scheme_for(c.format));
  const bool pool_scaled = kv_format_has_pool_scale(c.format);
  for (int side = 0; side < 2; ++side) {
    const bool is_k = side == 0;
    const std::vector<float>& src = is_k ? kf : vf;
    uint8_t* pool = is_k ? ek.data() : ev.data();
    uint8_t* sc = is_k ? eks.data() : evs.data();
    const float pool_scale = is_k ? a.kv.k_scale : a.kv.v_scale;
    // rows = (token, head), cols = head_dim
    const ref::QuantizedTensor q =
        pool_scaled ? scheme.quantize(src.data(), static_cast<int64_t>(T) * H, D, pool_scale)
                    : scheme.quantize(src.data(), static_cast<int64_t>(T) * H, D);
    const int64_t G = scheme.groups_per_row(D);
    for (int t = 0; t < T; ++t) {
      if (slots[t] < 0) continue;
      const int64_t b = slots[t] / g.block_size, s = slots[t] % g.block_size;
      for (int h = 0; h < H; ++h) {
        const int64_t row = static_cast<int64_t>(t) * H + h;
        for (int d = 0; d < D; ++d)
          put_code(pool, c.format, is_k ? k_offset(g, b, h, s, d) : v_offset(g, b, h, s, d),
                   q.codes[row * D + d]);
        if (c.format == KvFormat::kFP8E4M3PerToken) {
          const uint32_t bits = q.scale_codes[row];
          std::memcpy(sc + 4 * ((b * H + h) * g.block_size + s), &bits, 4);  // [N, H, B] float
        } else if (kv_format_has_block_scales(c.format)) {
          for (int64_t gi = 0; gi < G; ++gi)  // [N, H, B, D/g] uint8
            sc[((b * H + h) * g.block_size + s) * G + gi] =
                static_cast<uint8_t>(q.scale_codes[row * G + gi]);
        }
      }
    }
  }

  ref::append_kv(a);

  auto diff = [](const Guarded& x, const Guarded& y) {
    int64_t n = 0, first = -1;
    for (size_t i = 0; i < x.buf.size(); ++i)
      if (x.buf[i] != y.buf[i]) {
        if (first < 0) first = static_cast<int64_t>(i) - static_cast<int64_t>(kGuard);
        ++n;
      }
    return std::make_pair(n, first);
  };
  const auto dk = diff(kpool, ek), dv = diff(vpool, ev), dks = diff(ksc, eks), dvs = diff(vsc, evs);
  EXPECT_EQ(dk.first, 0) << "K pool bytes differ, first at byte " << dk.second;
  EXPECT_EQ(dv.first, 0) << "V pool bytes differ, first at byte " << dv.second;
  EXPECT_EQ(dks.first, 0) << "K scale bytes differ, first at byte " << dks.second;
  EXPECT_EQ(dvs.first, 0) << "V scale bytes differ, first at byte " << dvs.second;

  // kv_access.h reads back the scheme's dequantized values.
  for (int side = 0; side < 2; ++side) {
    const bool is_k = side == 0;
    const std::vector<float>& src = is_k ? kf : vf;
    const float pool_scale = is_k ? a.kv.k_scale : a.kv.v_scale;
    const ref::QuantizedTensor q =
        pool_scaled ? scheme.quantize(src.data(), static_cast<int64_t>(T) * H, D, pool_scale)
                    : scheme.quantize(src.data(), static_cast<int64_t>(T) * H, D);
    const std::vector<float> deq = scheme.dequantize(q);
    int64_t mismatches = 0;
    for (int t = 0; t < T; ++t) {
      if (slots[t] < 0) continue;
      const int64_t b = slots[t] / g.block_size;
      const int s = static_cast<int>(slots[t] % g.block_size);
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) {
          const float got = is_k ? load_k(a.kv, b, h, s, d) : load_v(a.kv, b, h, s, d);
          const float want = deq[(static_cast<int64_t>(t) * H + h) * D + d];
          if (std::memcmp(&got, &want, 4) != 0 && !(std::isnan(got) && std::isnan(want)))
            ++mismatches;
        }
    }
    EXPECT_EQ(mismatches, 0) << (is_k ? "K" : "V")
                             << " values read through kv_access differ from dequantize";
  }
}

TEST(AppendRef, EveryFormatAndLayoutWritesExactBytes) {
  int n = 0;
  for (KvLayout layout : all_kv_layouts())
    for (KvFormat format : all_kv_formats()) {
      // head_dim: a multiple of every x (32 for FP4 split-x) and scale group
      const int dims[] = {64, 96};
      const int bss[] = {1, 5, 16, 17};
      for (int D : dims)
        for (int B : bss) {
          Case c{layout, format, 3, (B % 2) ? 3 : 2, D, B, 13, DType::kF32};
          if (B == 1) c.num_blocks = 11;
          run_case(c, test::seed_for(("append." + name_of(c)).c_str()));
          ++n;
        }
    }
  EXPECT_EQ(n, 3 * 7 * 2 * 4);
}

TEST(AppendRef, InputDtypes) {
  for (DType t : {DType::kBF16, DType::kF16})
    for (KvFormat format : all_kv_formats()) {
      Case c{KvLayout::kSplitX, format, 4, 2, 64, 16, 29, t};
      run_case(c, test::seed_for(("append.dtype." + name_of(c)).c_str()));
    }
}

TEST(AppendRef, FullPoolAndSingleToken) {
  for (KvFormat format : all_kv_formats()) {
    // every slot written once (T = num_blocks * block_size, with padding tokens the rest)
    Case full{KvLayout::kHND, format, 2, 1, 32, 7, 21, DType::kF32};
    run_case(full, test::seed_for(("append.full." + name_of(full)).c_str()));
    Case one{KvLayout::kNHD, format, 1, 1, 32, 1, 1, DType::kF32};
    run_case(one, test::seed_for(("append.one." + name_of(one)).c_str()));
  }
}

// Hand-computed bytes: one token, per-token FP8, NHD, head_dim 32.
TEST(AppendRef, PerTokenHandComputed) {
  PageGeometry g{KvLayout::kNHD, KvFormat::kFP8E4M3PerToken, 1, 1, 32, 2};
  std::vector<float> k(32, 0.0f), v(32, 0.0f);
  k[0] = 448.0f;  // amax 448 -> scale 1 -> codes are plain E4M3 of x
  k[1] = -1.0f;
  k[2] = 0.5f;
  // v all zero: amax below the 1e-4 floor -> scale 1e-4/448, codes 0
  std::vector<uint8_t> kp(g.bytes(), kSentinel), vp(g.bytes(), kSentinel);
  std::vector<float> ks(2, -1.0f), vs(2, -1.0f);
  const int64_t slot = 1;
  AppendArgs a;
  a.in_dtype = DType::kF32;
  a.k = k.data();
  a.v = v.data();
  a.slot_mapping = &slot;
  a.num_tokens = 1;
  a.kv.geom = g;
  a.kv.k = kp.data();
  a.kv.v = vp.data();
  a.kv.k_scales = ks.data();
  a.kv.v_scales = vs.data();
  ref::append_kv(a);
  EXPECT_EQ(kp[32 + 0], 0x7E);
  EXPECT_EQ(kp[32 + 1], 0xB8);
  EXPECT_EQ(kp[32 + 2], 0x30);
  EXPECT_EQ(kp[32 + 3], 0x00);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(kp[i], kSentinel) << "slot 0 byte " << i;
  EXPECT_EQ(ks[0], -1.0f);
  EXPECT_EQ(ks[1], 1.0f);
  EXPECT_EQ(vs[1], 1e-4f / 448.0f);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(vp[32 + i], 0x00);
}

// Hand-computed bytes: MXFP4 and NVFP4 nibbles, split-x V shares bytes between slots.
TEST(AppendRef, Fp4HandComputed) {
  PageGeometry g{KvLayout::kSplitX, KvFormat::kMXFP4, 1, 1, 32, 2};
  std::vector<float> k(64), v(64);
  for (int i = 0; i < 32; ++i) {
    k[i] = (i % 2) ? -3.0f : 1.5f;     // token 0: amax 3 -> e = floor_log2(3) - 2 = -1, scale 0.5
    k[32 + i] = 0.0f;                  // token 1: zeros -> amax floor 1e-4 -> e = -16
    v[i] = static_cast<float>(i % 4);  // amax 3 -> scale 0.5: 0, 1, 2, 3 -> 0, 2, 4, 6
    v[32 + i] = 6.0f;                  // amax 6 -> e = 0: 6 -> code 7
  }
  std::vector<uint8_t> kp(g.bytes(), kSentinel), vp(g.bytes(), kSentinel), ks(2, kSentinel),
      vs(2, kSentinel);
  const int64_t slots[2] = {0, 1};
  AppendArgs a;
  a.in_dtype = DType::kF32;
  a.k = k.data();
  a.v = v.data();
  a.slot_mapping = slots;
  a.num_tokens = 2;
  a.kv.geom = g;
  a.kv.k = kp.data();
  a.kv.v = vp.data();
  a.kv.k_scales = ks.data();
  a.kv.v_scales = vs.data();
  ref::append_kv(a);
  // K split-x, x = 32: [1, 1, 1, 2, 32]: slot 0 then slot 1, 16 bytes each.
  // 1.5/0.5 = 3 -> code 5; -3/0.5 = -6 -> code 0xF: byte = 0xF5
  for (int i = 0; i < 16; ++i) EXPECT_EQ(kp[i], 0xF5) << i;
  for (int i = 16; i < 32; ++i) EXPECT_EQ(kp[i], 0x00) << i;
  EXPECT_EQ(ks[0], 126);       // 2^-1
  EXPECT_EQ(ks[1], 127 - 16);  // 2^-16
  // V split-x: [1, 1, 32, 2]: element (d, slot) at d * 2 + slot: byte d holds slot 0 low,
  // slot 1 high. Slot 0 values 0,1,2,3 /0.5 = 0,2,4,6 -> codes 0,4,6,7; slot 1: 6 -> 7.
  const uint8_t lo[4] = {0x0, 0x4, 0x6, 0x7};
  for (int d = 0; d < 32; ++d) EXPECT_EQ(vp[d], static_cast<uint8_t>(lo[d % 4] | 0x70)) << d;
  EXPECT_EQ(vs[0], 126);
  EXPECT_EQ(vs[1], 127);

  // NVFP4, pool scale 0.5: block amax 3 -> RN(3/6 / 0.5) = 1.0 -> 0x38; divisor 0.5.
  PageGeometry gn{KvLayout::kNHD, KvFormat::kNVFP4, 1, 1, 32, 1};
  std::vector<float> kn(32, 1.5f), vn(32, 0.0f);
  kn[31] = -3.0f;
  std::vector<uint8_t> knp(gn.bytes(), kSentinel), vnp(gn.bytes(), kSentinel), kns(2, kSentinel),
      vns(2, kSentinel);
  AppendArgs b = a;
  b.k = kn.data();
  b.v = vn.data();
  b.num_tokens = 1;
  b.kv.geom = gn;
  b.kv.k = knp.data();
  b.kv.v = vnp.data();
  b.kv.k_scales = kns.data();
  b.kv.v_scales = vns.data();
  b.kv.k_scale = 0.5f;
  b.kv.v_scale = 0.5f;
  ref::append_kv(b);
  // group 0 (dims 0..15): amax 1.5 -> RN(0.25 / 0.5) = 0.5 -> 0x30, divisor 0.25: 1.5 -> 6 (7)
  EXPECT_EQ(kns[0], 0x30);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(knp[i], 0x77) << i;
  // group 1: amax 3 -> 0x38, divisor 0.5: 1.5 -> 3 (code 5), -3 -> -6 (0xF)
  EXPECT_EQ(kns[1], 0x38);
  for (int i = 8; i < 15; ++i) EXPECT_EQ(knp[i], 0x55) << i;
  EXPECT_EQ(knp[15], 0xF5);
  // V zeros: amax floor 1e-4 -> RN(1e-4/6/0.5) = 3.3e-5 -> E4M3 0 -> divisor 0 -> codes 0
  EXPECT_EQ(vns[0], 0x00);
  EXPECT_EQ(vns[1], 0x00);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(vnp[i], 0x00) << i;
}

TEST(AppendRef, PaddingOnlyWritesNothing) {
  PageGeometry g{KvLayout::kNHD, KvFormat::kFP8E4M3PerToken, 2, 2, 16, 4};
  std::vector<float> k(5 * 2 * 16, 1.0f), v(k.size(), 1.0f);
  std::vector<int64_t> slots(5, -1);
  std::vector<uint8_t> kp(g.bytes(), kSentinel), vp(g.bytes(), kSentinel);
  std::vector<float> ks(g.token_scales_per_pool(), 7.0f), vs(ks);
  AppendArgs a;
  a.k = k.data();
  a.v = v.data();
  a.in_dtype = DType::kF32;
  a.slot_mapping = slots.data();
  a.num_tokens = 5;
  a.kv.geom = g;
  a.kv.k = kp.data();
  a.kv.v = vp.data();
  a.kv.k_scales = ks.data();
  a.kv.v_scales = vs.data();
  ref::append_kv(a);
  for (uint8_t b : kp) ASSERT_EQ(b, kSentinel);
  for (uint8_t b : vp) ASSERT_EQ(b, kSentinel);
  for (float s : ks) ASSERT_EQ(s, 7.0f);
  // zero tokens: inputs may be null
  a.num_tokens = 0;
  a.k = a.v = nullptr;
  a.slot_mapping = nullptr;
  EXPECT_NO_THROW(ref::append_kv(a));
}

TEST(AppendRef, BadInputThrows) {
  PageGeometry g{KvLayout::kNHD, KvFormat::kFP8E4M3PerToken, 2, 1, 16, 4};
  std::vector<float> k(3 * 16, 1.0f), v(k.size(), 1.0f);
  std::vector<int64_t> slots{0, 3, 7};
  std::vector<uint8_t> kp(g.bytes()), vp(g.bytes());
  std::vector<float> ks(g.token_scales_per_pool()), vs(ks);
  AppendArgs good;
  good.k = k.data();
  good.v = v.data();
  good.in_dtype = DType::kF32;
  good.slot_mapping = slots.data();
  good.num_tokens = 3;
  good.kv.geom = g;
  good.kv.k = kp.data();
  good.kv.v = vp.data();
  good.kv.k_scales = ks.data();
  good.kv.v_scales = vs.data();
  EXPECT_NO_THROW(ref::append_kv(good));

  auto expect_bad = [&](AppendArgs a, const char* what, const char* needle) {
    try {
      ref::append_kv(a);
      ADD_FAILURE() << what << ": no exception";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << what << ": message '" << e.what() << "'";
    }
  };
  AppendArgs a = good;
  a.k = nullptr;
  expect_bad(a, "null k", "non-null");
  a = good;
  a.slot_mapping = nullptr;
  expect_bad(a, "null slot_mapping", "slot_mapping");
  a = good;
  a.kv.v = nullptr;
  expect_bad(a, "null V pool", "pools");
  a = good;
  a.kv.k_scales = nullptr;
  expect_bad(a, "null scales", "k_scales");
  a = good;
  a.in_dtype = static_cast<DType>(7);
  expect_bad(a, "bad in_dtype", "in_dtype");
  a = good;
  a.num_tokens = -1;
  expect_bad(a, "negative tokens", "num_tokens");
  a = good;
  a.kv.geom.head_dim = 15;
  expect_bad(a, "odd head_dim", "head_dim");
  a = good;
  a.kv.geom.num_blocks = 0;
  expect_bad(a, "no blocks", "num_blocks");
  std::vector<int64_t> past{0, 8, 1};  // 8 == num_blocks * block_size
  a = good;
  a.slot_mapping = past.data();
  expect_bad(a, "slot past the end", "outside [-1, 8)");
  std::vector<int64_t> neg{0, -2, 1};
  a.slot_mapping = neg.data();
  expect_bad(a, "slot -2", "outside");
  std::vector<int64_t> dup{5, -1, 5};
  a.slot_mapping = dup.data();
  expect_bad(a, "duplicate slot", "written twice");
  // pool-scaled formats need a finite positive pool scale
  a = good;
  a.kv.geom.format = KvFormat::kFP8E4M3;
  a.kv.k_scale = 0.0f;
  expect_bad(a, "zero k_scale", "k_scale");
  a.kv.k_scale = std::numeric_limits<float>::quiet_NaN();
  expect_bad(a, "NaN k_scale", "k_scale");
  a = good;
  a.kv.geom.format = KvFormat::kNVFP4;
  a.kv.v_scale = -1.0f;
  expect_bad(a, "negative v_scale", "v_scale");
  // nothing was written by the failing calls: validation precedes every write
  std::vector<uint8_t> kp2(g.bytes(), kSentinel);
  a = good;
  a.kv.k = kp2.data();
  a.slot_mapping = past.data();
  expect_bad(a, "slot past the end (late token)", "outside");
  for (uint8_t b : kp2) ASSERT_EQ(b, kSentinel);
}

}  // namespace
}  // namespace kvlab
