// test_append.cu: gpu::append_kv against ref::append_kv, byte for byte (0 differing bytes),
// for every KvFormat x KvLayout x input dtype, with padding tokens, permuted slots (tokens
// of one page land in neighbouring slots, so FP4 tokens share bytes of the split-x V pool),
// special values (NaN, Inf, zeros, values beyond the format's range, values below the amax
// floor), pools pre-filled with a seeded byte pattern (untouched bytes must stay), two
// successive appends into the same pages, bad input, and FP32 inputs placed on the rounding
// boundaries of the vector path's division-free encoders (AppendBoundary).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu/quant/append.h"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "reference/quant/append.h"
#include "reference/quant/scale_rules.h"
#include "tests/common/test_env.h"
#include "tests/gpu/gpu_test_util.cuh"

namespace kvlab::test {
namespace {

struct AppendCase {
  PageGeometry g;
  DType in_dtype;
  int num_tokens;
  std::vector<uint8_t> k_in, v_in;                          // [tokens, heads, dim] in_dtype bytes
  std::vector<int64_t> slots;                               // [tokens]
  std::vector<uint8_t> k_pool, v_pool, k_scales, v_scales;  // initial contents
  float k_scale = 1.0f, v_scale = 1.0f;
  uint64_t seed = 0;
};

std::vector<uint8_t> random_bytes(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

// Input rows: Gaussian, with a few special rows (token t, head 0) to exercise every rule.
std::vector<uint8_t> make_input(int tokens, int heads, int dim, DType dt, std::mt19937_64& rng) {
  std::normal_distribution<float> n(0.0f, 1.5f);
  const int64_t count = static_cast<int64_t>(tokens) * heads * dim;
  std::vector<float> x(static_cast<size_t>(count));
  for (auto& v : x) v = n(rng);
  auto row = [&](int t) { return x.data() + static_cast<int64_t>(t) * heads * dim; };
  if (tokens > 6) {
    std::fill(row(1), row(1) + dim, 0.0f);                      // all zeros: amax floor
    for (int d = 0; d < dim; ++d) row(2)[d] *= 1e-7f;           // below the floor
    for (int d = 0; d < dim; ++d) row(3)[d] *= 3e4f;            // beyond FP8/FP4 ranges
    row(4)[dim / 3] = std::numeric_limits<float>::quiet_NaN();  // NaN element
    row(5)[dim - 1] = std::numeric_limits<float>::infinity();   // Inf element
    row(6)[0] = -std::numeric_limits<float>::infinity();
  }
  std::vector<uint8_t> out(static_cast<size_t>(count) * dtype_bytes(dt));
  for (int64_t i = 0; i < count; ++i) {
    if (dt == DType::kF32) {
      std::memcpy(out.data() + 4 * i, &x[i], 4);
    } else {
      const uint16_t b = dt == DType::kBF16 ? float_to_bf16_bits(x[i], Saturation::kNonSaturating)
                                            : float_to_fp16_bits(x[i], Saturation::kNonSaturating);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  }
  return out;
}

AppendCase make_case(KvFormat f, KvLayout l, DType dt, int head_dim, int block_size,
                     const std::string& name) {
  AppendCase c;
  c.seed = seed_for(name.c_str());
  std::printf("[seed] %s = %llu\n", name.c_str(), static_cast<unsigned long long>(c.seed));
  std::mt19937_64 rng(c.seed);
  c.g.layout = l;
  c.g.format = f;
  c.g.num_kv_heads = 3;
  c.g.head_dim = head_dim;
  c.g.block_size = block_size;
  c.g.num_blocks = 7;
  c.in_dtype = dt;
  const int64_t num_slots = c.g.num_blocks * block_size;
  // Tokens: a random subset of slots in random order, plus padding (-1).
  std::vector<int64_t> all(static_cast<size_t>(num_slots));
  for (int64_t i = 0; i < num_slots; ++i) all[i] = i;
  std::shuffle(all.begin(), all.end(), rng);
  const int64_t used = std::max<int64_t>(1, num_slots * 2 / 3);
  c.slots.assign(all.begin(), all.begin() + used);
  for (int p = 0; p < 5; ++p) c.slots.insert(c.slots.begin() + (rng() % c.slots.size()), -1);
  c.num_tokens = static_cast<int>(c.slots.size());
  c.k_in = make_input(c.num_tokens, c.g.num_kv_heads, head_dim, dt, rng);
  c.v_in = make_input(c.num_tokens, c.g.num_kv_heads, head_dim, dt, rng);
  c.k_pool = random_bytes(static_cast<size_t>(c.g.bytes()), rng);
  c.v_pool = random_bytes(static_cast<size_t>(c.g.bytes()), rng);
  c.k_scales = random_bytes(static_cast<size_t>(c.g.scale_bytes()), rng);
  c.v_scales = random_bytes(static_cast<size_t>(c.g.scale_bytes()), rng);
  if (kv_format_has_pool_scale(f)) {
    c.k_scale = f == KvFormat::kNVFP4 ? 0.0021f : 0.0173f;
    c.v_scale = f == KvFormat::kNVFP4 ? 0.0009f : 0.0111f;
  }
  return c;
}

AppendArgs args_over(const AppendCase& c, const void* k, const void* v, const int64_t* slots,
                     void* kp, void* vp, void* ks, void* vs) {
  AppendArgs a;
  a.in_dtype = c.in_dtype;
  a.k = k;
  a.v = v;
  a.slot_mapping = slots;
  a.num_tokens = c.num_tokens;
  a.kv.geom = c.g;
  a.kv.k = kp;
  a.kv.v = vp;
  a.kv.k_scales = c.k_scales.empty() ? nullptr : ks;
  a.kv.v_scales = c.v_scales.empty() ? nullptr : vs;
  a.kv.k_scale = c.k_scale;
  a.kv.v_scale = c.v_scale;
  return a;
}

int64_t differing_bytes(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                        int64_t* first) {
  int64_t n = 0;
  *first = -1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] != b[i] && n++ == 0) *first = static_cast<int64_t>(i);
  return n + static_cast<int64_t>(std::max(a.size(), b.size()) - std::min(a.size(), b.size()));
}

// Appends c on host (reference) and device, twice (second call: other tokens' data into
// the same slots' neighbours is not possible without duplicates, so the second call writes
// the same slots with fresh data), and compares every byte of pools and scales.
void check_append(AppendCase& c) {
  const Tolerance tol = tolerance(Op::kAppend, c.g.format, c.in_dtype);
  ASSERT_EQ(tol.atol, 0.0);  // exact by contract
  std::vector<uint8_t> hk = c.k_pool, hv = c.v_pool, hks = c.k_scales, hvs = c.v_scales;
  thrust::device_vector<uint8_t> dk = to_device(c.k_pool), dv = to_device(c.v_pool),
                                 dks = to_device(c.k_scales), dvs = to_device(c.v_scales);
  std::mt19937_64 rng(c.seed ^ 0x5EEDu);
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      c.k_in = make_input(c.num_tokens, c.g.num_kv_heads, c.g.head_dim, c.in_dtype, rng);
      c.v_in = make_input(c.num_tokens, c.g.num_kv_heads, c.g.head_dim, c.in_dtype, rng);
      std::reverse(c.k_in.begin(), c.k_in.end());  // different rows per slot than round 0
    }
    ref::append_kv(args_over(c, c.k_in.data(), c.v_in.data(), c.slots.data(), hk.data(), hv.data(),
                             hks.data(), hvs.data()));
    thrust::device_vector<uint8_t> kin = to_device(c.k_in), vin = to_device(c.v_in);
    thrust::device_vector<int64_t> sl = to_device(c.slots);
    gpu::append_kv(args_over(c, raw(kin), raw(vin), raw(sl), raw(dk), raw(dv), raw(dks), raw(dvs)),
                   nullptr);
    KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
    const std::string ctx = to_string(c.g.layout) + "/" + to_string(c.g.format) + "/" +
                            to_string(c.in_dtype) + " d" + std::to_string(c.g.head_dim) + " b" +
                            std::to_string(c.g.block_size) + " round " + std::to_string(round) +
                            " seed " + std::to_string(c.seed);
    int64_t first = 0;
    EXPECT_EQ(differing_bytes(to_host(dk), hk, &first), 0)
        << "K pool, first at byte " << first << " | " << ctx;
    EXPECT_EQ(differing_bytes(to_host(dv), hv, &first), 0)
        << "V pool, first at byte " << first << " | " << ctx;
    EXPECT_EQ(differing_bytes(to_host(dks), hks, &first), 0)
        << "K scales, first at byte " << first << " | " << ctx;
    EXPECT_EQ(differing_bytes(to_host(dvs), hvs, &first), 0)
        << "V scales, first at byte " << first << " | " << ctx;
  }
}

class AppendExact : public ::testing::TestWithParam<std::tuple<KvFormat, KvLayout, DType>> {};

TEST_P(AppendExact, ByteExactToReference) {
  KVLAB_SKIP_WITHOUT_GPU();
  const auto [f, l, dt] = GetParam();
  // head_dim 128 with a block size that leaves FP4 split-x V bytes shared across tokens and
  // pages (odd block size 5 makes a byte straddle two dims), plus head_dim 64 / block 16.
  for (const auto& [d, bs] : std::vector<std::pair<int, int>>{{128, 5}, {64, 16}, {256, 1}}) {
    AppendCase c = make_case(f, l, dt, d, bs,
                             "append." + to_string(f) + "." + to_string(l) + "." + to_string(dt) +
                                 ".d" + std::to_string(d));
    check_append(c);
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, AppendExact,
    ::testing::Combine(::testing::ValuesIn(all_kv_formats()), ::testing::ValuesIn(all_kv_layouts()),
                       ::testing::Values(DType::kBF16, DType::kF16, DType::kF32)),
    [](const ::testing::TestParamInfo<std::tuple<KvFormat, KvLayout, DType>>& i) {
      return to_string(std::get<0>(i.param)) + "_" + to_string(std::get<1>(i.param)) + "_" +
             to_string(std::get<2>(i.param));
    });

// FP4 from bf16 at the head dims that pick the vector path's variants: 32 elements per
// thread (head_dim % 32 == 0: one thread per row at 32, 16 at 512) and 16 (head_dim 16,
// NVFP4 only: MXFP4 needs 32). NHD and HND, block sizes 1 / 3 / 16; byte-exact.
class AppendFp4HeadDim : public ::testing::TestWithParam<std::tuple<KvFormat, KvLayout, int>> {};

TEST_P(AppendFp4HeadDim, ByteExactToReference) {
  KVLAB_SKIP_WITHOUT_GPU();
  const auto [f, l, d] = GetParam();
  for (int bs : {1, 3, 16}) {
    AppendCase c = make_case(f, l, DType::kBF16, d, bs,
                             "append.fp4_dim." + to_string(f) + "." + to_string(l) + ".d" +
                                 std::to_string(d) + ".b" + std::to_string(bs));
    check_append(c);
  }
}

// Only valid geometries are instantiated (head_dim a multiple of the format's scale group).
std::vector<std::tuple<KvFormat, KvLayout, int>> fp4_head_dim_cases() {
  std::vector<std::tuple<KvFormat, KvLayout, int>> v;
  for (KvFormat f : {KvFormat::kNVFP4, KvFormat::kMXFP4})
    for (KvLayout l : {KvLayout::kNHD, KvLayout::kHND})
      for (int d : {16, 32, 512})
        if (d % kv_format_scale_group(f) == 0) v.emplace_back(f, l, d);
  return v;
}

INSTANTIATE_TEST_SUITE_P(
    All, AppendFp4HeadDim, ::testing::ValuesIn(fp4_head_dim_cases()),
    [](const ::testing::TestParamInfo<std::tuple<KvFormat, KvLayout, int>>& i) {
      return to_string(std::get<0>(i.param)) + "_" + to_string(std::get<1>(i.param)) + "_d" +
             std::to_string(std::get<2>(i.param));
    });

// Inputs on the rounding boundaries of the vector path's division-free encoders
// (gpu/quant/append_encode.h): FP32 values within +-8 ulps of s x (every FP8 code value and
// midpoint) for the pool-scale and per-token FP8 formats, and of div x (every E2M1 value and
// rounding boundary) for NVFP4 / MXFP4, with each row's or group's amax pinned by its first
// element so that the scale the kernel derives is the one the values were placed against.
// These are exactly the inputs where an inexact FP8 quotient or an off-by-one E2M1
// threshold would show; also rounded to bf16 (FP4 from bf16 compares in bf16). Byte-exact
// against the reference.
std::vector<uint8_t> boundary_input(const AppendCase& c, float pool_scale, uint64_t salt) {
  const int H = c.g.num_kv_heads, D = c.g.head_dim;
  const KvFormat f = c.g.format;
  std::mt19937_64 rng(c.seed ^ salt);
  std::vector<float> x(static_cast<size_t>(c.num_tokens) * H * D);
  auto near = [&](double centre) {
    float v = static_cast<float>(centre);
    const int k = static_cast<int>(rng() % 17) - 8;
    for (int i = 0; i < (k < 0 ? -k : k); ++i) v = std::nextafter(v, k < 0 ? -INFINITY : INFINITY);
    return (rng() & 1) ? -v : v;
  };
  const bool e5 = f == KvFormat::kFP8E5M2;
  auto fp8_point = [&](double cap) {  // a code value or a midpoint, <= cap
    for (;;) {
      const uint32_t code = static_cast<uint32_t>(rng() % (e5 ? 0x7B : 0x7E));
      const double v0 = e5 ? e5m2_to_float(static_cast<uint8_t>(code))
                           : e4m3_to_float(static_cast<uint8_t>(code));
      const double v1 = e5 ? e5m2_to_float(static_cast<uint8_t>(code + 1))
                           : e4m3_to_float(static_cast<uint8_t>(code + 1));
      const double m = (rng() & 1) ? v0 : 0.5 * (v0 + v1);
      if (m <= cap) return m;
    }
  };
  const double e2m1_pts[] = {0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0,
                             2.5,  3.0, 3.5,  4.0, 5.0,  6.0, 7.0};
  for (size_t r = 0; r < x.size() / D; ++r) {
    float* row = x.data() + r * D;
    if (f == KvFormat::kFP8E4M3 || f == KvFormat::kFP8E5M2) {
      for (int d = 0; d < D; ++d) row[d] = near(pool_scale * fp8_point(1e30));
    } else if (f == KvFormat::kFP8E4M3PerToken) {
      const float amax = 200.0f + static_cast<float>(r % 97);  // pins the row's scale
      const float s = kv_fp8_token_scale(amax);
      row[0] = amax;
      for (int d = 1; d < D; ++d) row[d] = near(s * fp8_point(400.0));
    } else if (f == KvFormat::kNVFP4 || f == KvFormat::kMXFP4) {
      const bool nv = f == KvFormat::kNVFP4;
      const int G = c.g.scale_group();
      for (int g0 = 0; g0 < D; g0 += G) {
        // amax A pins the group's divisor; every other element stays below A.
        const float A = nv ? 3.0f + static_cast<float>(rng() % 1000) * 0.01f
                           : 1.9f * std::ldexp(1.0f, static_cast<int>(rng() % 9) - 4);
        const float div = kv_fp4_block_scale(nv, A, pool_scale).div;
        row[g0] = A;
        for (int d = g0 + 1; d < g0 + G; ++d) {
          double m = e2m1_pts[rng() % 15];
          while (m * div >= 0.98 * A) m = e2m1_pts[rng() % 15];
          row[d] = near(div * m);
        }
      }
    } else {
      for (int d = 0; d < D; ++d)
        row[d] = near(std::ldexp(1.0 + static_cast<double>(rng() % 1024) / 1024.0,
                                 static_cast<int>(rng() % 20) - 10));
    }
  }
  std::vector<uint8_t> out(x.size() * 4);
  std::memcpy(out.data(), x.data(), out.size());
  return out;
}

class AppendBoundary : public ::testing::TestWithParam<KvFormat> {};

TEST_P(AppendBoundary, RoundingBoundariesAreByteExact) {
  KVLAB_SKIP_WITHOUT_GPU();
  const KvFormat f = GetParam();
  for (const auto& [d, bs] : std::vector<std::pair<int, int>>{{128, 16}, {64, 5}, {256, 3}}) {
    AppendCase c = make_case(f, KvLayout::kNHD, DType::kF32, d, bs,
                             "append.boundary." + to_string(f) + ".d" + std::to_string(d));
    c.k_in = boundary_input(c, c.k_scale, 1);
    c.v_in = boundary_input(c, c.v_scale, 2);
    check_append(c);
  }
  // The same points rounded to bf16 (the packed-bf16 FP4 encoder compares against the
  // thresholds rounded down to bf16): the bf16 neighbours of every boundary.
  for (const auto& [d, bs] : std::vector<std::pair<int, int>>{{128, 16}, {64, 5}}) {
    AppendCase c = make_case(f, KvLayout::kNHD, DType::kBF16, d, bs,
                             "append.boundary_bf16." + to_string(f) + ".d" + std::to_string(d));
    auto to_bf16 = [](const std::vector<uint8_t>& f32) {
      std::vector<uint8_t> out(f32.size() / 2);
      for (size_t i = 0; i < f32.size() / 4; ++i) {
        float v;
        std::memcpy(&v, f32.data() + 4 * i, 4);
        const uint16_t b = float_to_bf16_bits(v, Saturation::kNonSaturating);
        std::memcpy(out.data() + 2 * i, &b, 2);
      }
      return out;
    };
    c.k_in = to_bf16(boundary_input(c, c.k_scale, 1));
    c.v_in = to_bf16(boundary_input(c, c.v_scale, 2));
    check_append(c);
  }
}

INSTANTIATE_TEST_SUITE_P(All, AppendBoundary,
                         ::testing::Values(KvFormat::kFP8E4M3, KvFormat::kFP8E5M2,
                                           KvFormat::kFP8E4M3PerToken, KvFormat::kNVFP4,
                                           KvFormat::kMXFP4, KvFormat::kBF16),
                         [](const ::testing::TestParamInfo<KvFormat>& i) {
                           return to_string(i.param);
                         });

// Pool scales that pick the vector path's branches: 0.05 (the P9 bench's scale: bf16
// inputs give quotients next to 25 * 2^k, FP8 rounding boundaries), the FP8 encoder's
// accepted range ends 2^-70 and 2^125 (every quotient there is tiny or saturates), 2^-75
// (outside: every thread takes the exact path), and NVFP4 tensor scales whose divisors fall
// below 2^-99 (the FP64 threshold path). bf16 input, NHD; byte-exact against the reference.
class AppendPoolScale : public ::testing::TestWithParam<std::tuple<KvFormat, float>> {};

TEST_P(AppendPoolScale, EveryEncoderBranchIsByteExact) {
  KVLAB_SKIP_WITHOUT_GPU();
  const auto [f, s] = GetParam();
  char name[96];
  std::snprintf(name, sizeof name, "append.pool_scale.%s.%a", to_string(f).c_str(), s);
  AppendCase c = make_case(f, KvLayout::kNHD, DType::kBF16, 128, 16, name);
  c.k_scale = s;
  c.v_scale = s * 0.75f;
  check_append(c);
}

INSTANTIATE_TEST_SUITE_P(All, AppendPoolScale,
                         ::testing::Values(std::make_tuple(KvFormat::kFP8E4M3, 0.05f),
                                           std::make_tuple(KvFormat::kFP8E5M2, 0.05f),
                                           std::make_tuple(KvFormat::kFP8E4M3, 0x1p-70f),
                                           std::make_tuple(KvFormat::kFP8E4M3, 0x1p125f),
                                           std::make_tuple(KvFormat::kFP8E5M2, 0x1p-75f),
                                           std::make_tuple(KvFormat::kNVFP4, 0.05f),
                                           std::make_tuple(KvFormat::kNVFP4, 1e-33f)),
                         [](const ::testing::TestParamInfo<std::tuple<KvFormat, float>>& i) {
                           return to_string(std::get<0>(i.param)) + "_" + std::to_string(i.index);
                         });

template <class E>
void expect_throw_containing(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an exception containing '" << needle << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(AppendBadInput, SlotsAndArgumentsAreValidated) {
  KVLAB_SKIP_WITHOUT_GPU();
  AppendCase c =
      make_case(KvFormat::kMXFP4, KvLayout::kSplitX, DType::kBF16, 64, 16, "append.bad_input");
  thrust::device_vector<uint8_t> kin = to_device(c.k_in), vin = to_device(c.v_in),
                                 dk = to_device(c.k_pool), dv = to_device(c.v_pool),
                                 dks = to_device(c.k_scales), dvs = to_device(c.v_scales);
  auto run = [&](std::vector<int64_t> slots, gpu::SlotCheck check = gpu::SlotCheck::kValidate) {
    thrust::device_vector<int64_t> sl = to_device(slots);
    gpu::append_kv(args_over(c, raw(kin), raw(vin), raw(sl), raw(dk), raw(dv), raw(dks), raw(dvs)),
                   nullptr, check);
    KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
  };
  const int64_t num_slots = c.g.num_blocks * c.g.block_size;
  std::vector<int64_t> bad = c.slots;
  bad[3] = num_slots;
  expect_throw_containing<InvalidArgument>([&] { run(bad); },
                                           "slot_mapping[3] = " + std::to_string(num_slots));
  bad[3] = -2;
  expect_throw_containing<InvalidArgument>([&] { run(bad); }, "slot_mapping[3] = -2");
  std::vector<int64_t> dup = c.slots;
  const auto first_real = std::find_if(dup.begin(), dup.end(), [](int64_t s) { return s >= 0; });
  const auto second_real =
      std::find_if(first_real + 1, dup.end(), [](int64_t s) { return s >= 0; });
  *second_real = *first_real;
  expect_throw_containing<InvalidArgument>([&] { run(dup); }, "written twice");
  // Many padding tokens are fine (-1 may repeat).
  EXPECT_NO_THROW(run(std::vector<int64_t>(c.num_tokens, -1)));
  // Trusted slots: an out-of-range slot is skipped, nothing outside the pools is written.
  const auto before = to_host(dk);
  bad = std::vector<int64_t>(c.num_tokens, -1);
  bad[0] = num_slots + 100;
  EXPECT_NO_THROW(run(bad, gpu::SlotCheck::kTrusted));
  EXPECT_EQ(to_host(dk), before);
  // Host-checkable arguments.
  thrust::device_vector<int64_t> sl = to_device(c.slots);
  AppendArgs a = args_over(c, raw(kin), raw(vin), raw(sl), raw(dk), raw(dv), raw(dks), raw(dvs));
  {
    AppendArgs b = a;
    b.k = nullptr;
    expect_throw_containing<InvalidArgument>([&] { gpu::append_kv(b, nullptr); }, "non-null");
  }
  {
    AppendArgs b = a;
    b.kv.k_scales = nullptr;
    expect_throw_containing<InvalidArgument>([&] { gpu::append_kv(b, nullptr); }, "scales");
  }
  {
    AppendArgs b = a;
    b.in_dtype = static_cast<DType>(7);
    expect_throw_containing<InvalidArgument>([&] { gpu::append_kv(b, nullptr); }, "in_dtype");
  }
  {
    AppendArgs b = a;
    b.kv.geom.head_dim = 48;
    expect_throw_containing<InvalidArgument>([&] { gpu::append_kv(b, nullptr); }, "head_dim");
  }
  {
    AppendArgs b = a;
    b.num_tokens = 0;
    b.k = nullptr;
    EXPECT_NO_THROW(gpu::append_kv(b, nullptr));
  }
}

}  // namespace
}  // namespace kvlab::test
