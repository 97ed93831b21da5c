// test_quant.cu: gpu::quantize / gpu::dequantize against the reference schemes
// (reference/quant/schemes.h), byte for byte: the GPU stream must equal
// scheme.pack(scheme.quantize(x)) (and pack_pages) with 0 differing bytes, and the GPU
// dequantized floats must equal scheme.dequantize(scheme.unpack(stream)) bit for bit.
// Every preset, a set of custom specs (other rules, floor placements, clamps, saturation,
// group sizes, tails, alignments, per-tensor and two-level scales), data with special
// values, an odd row count, a given tensor scale, zero rows, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu/quant/quantize.h"
#include "reference/metrics/tolerance.h"
#include "reference/quant/schemes.h"
#include "tests/common/test_env.h"
#include "tests/gpu/gpu_test_util.cuh"

namespace kvlab::test {
namespace {

std::vector<float> make_data(int64_t rows, int64_t cols, const std::string& name) {
  const uint64_t seed = seed_for(name.c_str());
  std::printf("[seed] %s = %llu\n", name.c_str(), static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::ldexp(1.0f, static_cast<int>(rng() % 24) - 12);  // 2^-12 .. 2^11
    for (int64_t j = 0; j < cols; ++j) x[r * cols + j] = n(rng) * row_scale;
  }
  // Outlier channels and special rows.
  for (int64_t r = 0; r < rows; ++r) x[r * cols + 5 % cols] *= 50.0f;
  if (rows > 6) {
    std::fill(x.begin() + 1 * cols, x.begin() + 2 * cols, 0.0f);
    for (int64_t j = 0; j < cols; ++j) x[2 * cols + j] *= 1e-9f;
    x[3 * cols + cols / 2] = std::numeric_limits<float>::quiet_NaN();
    x[4 * cols + 1] = std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < cols; ++j) x[5 * cols + j] *= 1e30f;  // overflows E5M2 and FP16 too
    x[6 * cols] = -0.0f;
  }
  return x;
}

int64_t differing(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, int64_t* first) {
  int64_t n = 0;
  *first = -1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] != b[i] && n++ == 0) *first = static_cast<int64_t>(i);
  return n + static_cast<int64_t>(std::max(a.size(), b.size()) - std::min(a.size(), b.size()));
}

int64_t differing_floats(const std::vector<float>& a, const std::vector<float>& b, int64_t* first) {
  int64_t n = 0;
  *first = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t ua, ub;
    std::memcpy(&ua, &a[i], 4);
    std::memcpy(&ub, &b[i], 4);
    const bool same = (std::isnan(a[i]) && std::isnan(b[i])) || ua == ub;
    if (!same && n++ == 0) *first = static_cast<int64_t>(i);
  }
  return n;
}

void check_scheme(const ref::QuantScheme& sc, int64_t rows, int64_t cols,
                  std::optional<float> tensor_scale = std::nullopt) {
  const std::string ctx = "scheme " + sc.name() + " [" + ref::to_string(sc.spec()) + "] rows " +
                          std::to_string(rows) + " cols " + std::to_string(cols);
  ASSERT_EQ(tolerance(Op::kQuantBytes, KvFormat::kBF16, DType::kF32).atol, 0.0);
  const std::vector<float> x = make_data(rows, cols, "quant." + sc.name());
  const ref::QuantizedTensor q = sc.quantize(x.data(), rows, cols, tensor_scale);
  thrust::device_vector<float> dx = to_device(x);
  for (int32_t pages : {0, 16}) {
    const std::vector<uint8_t> want = pages == 0 ? sc.pack(q) : sc.pack_pages(q, pages);
    const int64_t n = gpu::quant_stream_bytes(sc, rows, cols, pages);
    ASSERT_EQ(n, static_cast<int64_t>(want.size())) << ctx;
    thrust::device_vector<uint8_t> out(static_cast<size_t>(n) + 64,
                                       0xAB);  // 64 canary bytes past the end
    gpu::quantize(sc, raw(dx), rows, cols, raw(out), static_cast<size_t>(n), nullptr, tensor_scale,
                  pages);
    KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> got = to_host(out);
    for (size_t i = static_cast<size_t>(n); i < got.size(); ++i)
      ASSERT_EQ(got[i], 0xAB) << "wrote past the stream | " << ctx;
    got.resize(static_cast<size_t>(n));
    int64_t first = 0;
    EXPECT_EQ(differing(got, want, &first), 0)
        << "first differing byte " << first << " (pages " << pages << ") | " << ctx;

    // Dequantize the reference stream on the GPU: bitwise equal to the reference.
    const ref::QuantizedTensor back =
        pages == 0 ? sc.unpack(want.data(), want.size(), rows, cols)
                   : sc.unpack_pages(want.data(), want.size(), rows, cols, pages);
    const std::vector<float> ref_deq = sc.dequantize(back);
    thrust::device_vector<uint8_t> din = to_device(want);
    thrust::device_vector<float> dout(static_cast<size_t>(rows * cols),
                                      std::numeric_limits<float>::quiet_NaN());
    gpu::dequantize(sc, raw(din), want.size(), rows, cols, raw(dout), nullptr, pages);
    KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(differing_floats(to_host(dout), ref_deq, &first), 0)
        << "first differing float " << first << " | " << ctx;
  }
}

int64_t cols_for(const ref::QuantScheme& sc) {
  return sc.spec().required_cols > 0 ? sc.spec().required_cols : 256;
}

TEST(QuantExact, EveryPresetByteExact) {
  KVLAB_SKIP_WITHOUT_GPU();
  ASSERT_FALSE(ref::scheme_names().empty());
  for (const std::string& name : ref::scheme_names()) {
    const ref::QuantScheme sc = ref::make_scheme(name);
    check_scheme(sc, 37, cols_for(sc));
  }
}

TEST(QuantExact, CustomSpecsByteExact) {
  KVLAB_SKIP_WITHOUT_GPU();
  const char* specs[] = {
      "fp8_e4m3_per_token floor_at=scale floor=0.001",
      "fp8_e4m3_per_token rule=ceil_pow2 name=pt_ceil",
      "fp8_e5m2_per_tensor rule=ceil_pow2",
      "fp8_e4m3_per_tensor rule=ocp_floor clamp=clamp_then_encode",
      "mxfp4 rule=ceil_pow2 group=16",
      "mxfp4 floor_at=scale floor=0.5",
      "mxfp8 sat=nonsat",
      "mxfp8 group=64 scale=fp32 rule=exact",
      "nvfp4 two_level=0",
      "nvfp4 floor=0",
      "fp8_ds_mla align=16 name=ds_align16",
      "mxfp4 tail=32 name=mx_tail",
      "bf16 sat=satfinite",
      "fp16 sat=nonsat",
      "mxfp4_hadamard hadamard=64 name=h64",
  };
  for (const char* s : specs) {
    const ref::QuantScheme sc = ref::make_scheme(s);
    check_scheme(sc, 29, cols_for(sc));
  }
}

TEST(QuantExact, GivenTensorScaleAndZeroRows) {
  KVLAB_SKIP_WITHOUT_GPU();
  check_scheme(ref::make_scheme("nvfp4"), 11, 128, 0.0031f);
  check_scheme(ref::make_scheme("fp8_e4m3_per_tensor"), 11, 128, 0.25f);
  for (const char* name : {"nvfp4", "fp8_e4m3_per_tensor", "mxfp4"}) {
    const ref::QuantScheme sc = ref::make_scheme(name);
    const std::vector<uint8_t> want = sc.pack(sc.quantize(nullptr, 0, 128));
    thrust::device_vector<uint8_t> out(want.size() + 4, 0xAB);
    gpu::quantize(sc, nullptr, 0, 128, raw(out), want.size(), nullptr);
    KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> got = to_host(out);
    got.resize(want.size());
    EXPECT_EQ(got, want) << name;
  }
}

TEST(QuantBadInput, ClearErrors) {
  KVLAB_SKIP_WITHOUT_GPU();
  const ref::QuantScheme sc = ref::make_scheme("mxfp4");
  thrust::device_vector<float> x(64 * 10, 1.0f);
  thrust::device_vector<uint8_t> out(4096);
  auto msg = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(msg([&] { gpu::quantize(sc, raw(x), 10, 48, raw(out), out.size(), nullptr); }),
            "");  // 48 % 32 != 0
  EXPECT_NE(
      msg([&] { gpu::quantize(sc, raw(x), 10, 64, raw(out), 10, nullptr); }).find("output bytes"),
      std::string::npos);
  EXPECT_NE(
      msg([&] { gpu::quantize(sc, nullptr, 10, 64, raw(out), out.size(), nullptr); }).find("null"),
      std::string::npos);
  EXPECT_NE(msg([&] {
              gpu::quantize(sc, raw(x), 10, 64, raw(out), out.size(), nullptr, 1.0f);
            }).find("no tensor scale"),
            std::string::npos);
  const ref::QuantScheme nv = ref::make_scheme("nvfp4");
  EXPECT_NE(msg([&] {
              gpu::quantize(nv, raw(x), 10, 64, raw(out), out.size(), nullptr, -1.0f);
            }).find("finite and positive"),
            std::string::npos);
  EXPECT_NE(msg([&] {
              gpu::quantize(sc, raw(x), 10, 64, raw(out), out.size(), nullptr, std::nullopt, -3);
            }).find("page_block_size"),
            std::string::npos);
  EXPECT_NE(
      msg([&] { gpu::dequantize(sc, raw(out), 7, 10, 64, raw(x), nullptr); }).find("stream of"),
      std::string::npos);
  EXPECT_NE(msg([&] {
              gpu::quantize(ref::make_scheme("fp8_ds_mla"), raw(x), 1, 256, raw(out), out.size(),
                            nullptr);
            }).find("512"),
            std::string::npos);
}

}  // namespace
}  // namespace kvlab::test
