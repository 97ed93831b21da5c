// test_gpu_util.cu: the GPU building blocks: exact element decoders (kv_vec.cuh) against
// formats.h over every code, the dispatch header's value lists and errors, DeviceBuffer.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "gpu/attention/kv_vec.cuh"
#include "gpu/core/device_buffer.h"
#include "gpu/dispatch.cuh"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"
#include "tests/gpu/gpu_test_util.cuh"

namespace kvlab::test {
namespace {

// Decodes `n_words` 32-bit words of element class E with decode_words<E, 1>.
template <gpu::KvElem E>
__global__ void decode_words_kernel(const uint32_t* in, float* out, int n_words) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n_words) gpu::decode_words<E, 1>(in + i, out + i * gpu::kElemsPerWord<E>);
}

// Every code of an element class, packed into words; returns the device-decoded floats.
template <gpu::KvElem E>
std::vector<float> device_decode_all(std::vector<uint32_t> words) {
  thrust::device_vector<uint32_t> in = to_device(words);
  thrust::device_vector<float> out(words.size() * gpu::kElemsPerWord<E>);
  decode_words_kernel<E><<<static_cast<int>((words.size() + 127) / 128), 128>>>(raw(in), raw(out), static_cast<int>(words.size()));
  KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
  return to_host(out);
}

bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;  // signed zeros must match too
}

TEST(GpuDecoders, SixteenBitCodesMatchFormats) {
  KVLAB_SKIP_WITHOUT_GPU();
  std::vector<uint32_t> words;
  for (uint32_t c = 0; c < 65536; c += 2) words.push_back(c | ((c + 1) << 16));
  const auto bf = device_decode_all<gpu::KvElem::kBF16>(words);
  const auto hf = device_decode_all<gpu::KvElem::kFP16>(words);
  for (uint32_t c = 0; c < 65536; ++c) {
    ASSERT_TRUE(same_float(bf[c], bf16_bits_to_float(static_cast<uint16_t>(c)))) << "bf16 code " << c;
    ASSERT_TRUE(same_float(hf[c], fp16_bits_to_float(static_cast<uint16_t>(c)))) << "fp16 code " << c;
  }
}

TEST(GpuDecoders, Fp8CodesMatchFormats) {
  KVLAB_SKIP_WITHOUT_GPU();
  std::vector<uint32_t> words;
  for (uint32_t c = 0; c < 256; c += 4) words.push_back(c | ((c + 1) << 8) | ((c + 2) << 16) | ((c + 3) << 24));
  const auto e4 = device_decode_all<gpu::KvElem::kE4M3>(words);
  const auto e5 = device_decode_all<gpu::KvElem::kE5M2>(words);
  for (uint32_t c = 0; c < 256; ++c) {
    ASSERT_TRUE(same_float(e4[c], e4m3_to_float(static_cast<uint8_t>(c)))) << "e4m3 code " << c;
    ASSERT_TRUE(same_float(e5[c], e5m2_to_float(static_cast<uint8_t>(c)))) << "e5m2 code " << c;
  }
}

TEST(GpuDecoders, Fp4NibblesMatchFormatsLowNibbleFirst) {
  KVLAB_SKIP_WITHOUT_GPU();
  std::vector<uint32_t> words;
  for (uint32_t b = 0; b < 256; b += 4) words.push_back(b | ((b + 1) << 8) | ((b + 2) << 16) | ((b + 3) << 24));
  const auto f = device_decode_all<gpu::KvElem::kE2M1>(words);
  for (uint32_t b = 0; b < 256; ++b) {
    ASSERT_TRUE(same_float(f[2 * b], e2m1_to_float(fp4_lo(static_cast<uint8_t>(b))))) << "byte " << b << " low";
    ASSERT_TRUE(same_float(f[2 * b + 1], e2m1_to_float(fp4_hi(static_cast<uint8_t>(b))))) << "byte " << b << " high";
  }
}

TEST(Dispatch, ValueListsAndErrors) {
  EXPECT_TRUE(gpu::head_dim_compiled(64) && gpu::head_dim_compiled(128) && gpu::head_dim_compiled(256));
  EXPECT_FALSE(gpu::head_dim_compiled(96));
  EXPECT_EQ(gpu::head_dim_unsupported_reason(96), "unsupported head_dim 96 (compiled: 64, 128, 256)");
  // Every compiled head_dim reaches its case; anything else throws Unsupported.
  for (int d : {64, 128, 256}) EXPECT_EQ(KVLAB_DISPATCH_HEAD_DIM(d, kD, [&] { return kD; }), d);
  try {
    KVLAB_DISPATCH_HEAD_DIM(96, kD, [&] { return kD; });
    ADD_FAILURE() << "head_dim 96 dispatched";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported head_dim 96"), std::string::npos);
  }
  for (KvFormat f : all_kv_formats()) {
    const gpu::KvElem e = KVLAB_DISPATCH_KV_ELEM(f, kE, [&] { return kE; });
    EXPECT_EQ(e, gpu::kv_elem_of(f));
    EXPECT_EQ(gpu::kv_elem_bits(e), kv_format_bits(f));
  }
  EXPECT_THROW(KVLAB_DISPATCH_KV_ELEM(static_cast<KvFormat>(9), kE, [&] { return kE; }), InvalidArgument);
  EXPECT_EQ(KVLAB_DISPATCH_ACT_DTYPE(DType::kF32, T, [&] { return static_cast<int>(sizeof(T)); }), 4);
  EXPECT_EQ(KVLAB_DISPATCH_ACT_DTYPE(DType::kBF16, T, [&] { return static_cast<int>(sizeof(T)); }), 2);
  EXPECT_THROW(KVLAB_DISPATCH_ACT_DTYPE(static_cast<DType>(5), T, [&] { return 0; }), Unsupported);
}

TEST(DeviceBuffer, GuardsDetectOutOfBoundsWrites) {
  KVLAB_SKIP_WITHOUT_GPU();
  gpu::DeviceBuffer b(1000, 64);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 256, 0u);
  b.fill_bytes(7);
  EXPECT_TRUE(b.guards_intact());
  std::vector<uint8_t> h(1000, 3);
  b.upload(h);
  EXPECT_EQ(b.download<uint8_t>(), h);
  KVLAB_CUDA_CHECK(cudaMemset(b.as<uint8_t>() + 1000, 0, 1));  // one byte past the end
  EXPECT_FALSE(b.guards_intact());
  EXPECT_THROW(b.upload(h.data(), 1001), InvalidArgument);
  gpu::DeviceBuffer moved = std::move(b);
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(moved.bytes(), 1000u);
}

}  // namespace
}  // namespace kvlab::test
