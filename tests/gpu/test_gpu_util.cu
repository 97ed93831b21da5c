// test_gpu_util.cu: the GPU building blocks: exact element decoders (kv_vec.cuh) against
// formats.h over every code, the dispatch header's value lists and errors, DeviceBuffer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "gpu/attention/kv_vec.cuh"
#include "gpu/core/device_buffer.h"
#include "gpu/core/device_tables.h"
#include "gpu/dispatch.cuh"
#include "reference/formats/formats.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/metrics.h"
#include "reference/metrics/tolerance.h"
#include "tests/common/test_env.h"
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
  decode_words_kernel<E><<<static_cast<int>((words.size() + 127) / 128), 128>>>(
      raw(in), raw(out), static_cast<int>(words.size()));
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
    ASSERT_TRUE(same_float(bf[c], bf16_bits_to_float(static_cast<uint16_t>(c))))
        << "bf16 code " << c;
    ASSERT_TRUE(same_float(hf[c], fp16_bits_to_float(static_cast<uint16_t>(c))))
        << "fp16 code " << c;
  }
}

TEST(GpuDecoders, Fp8CodesMatchFormats) {
  KVLAB_SKIP_WITHOUT_GPU();
  std::vector<uint32_t> words;
  for (uint32_t c = 0; c < 256; c += 4)
    words.push_back(c | ((c + 1) << 8) | ((c + 2) << 16) | ((c + 3) << 24));
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
  for (uint32_t b = 0; b < 256; b += 4)
    words.push_back(b | ((b + 1) << 8) | ((b + 2) << 16) | ((b + 3) << 24));
  const auto f = device_decode_all<gpu::KvElem::kE2M1>(words);
  for (uint32_t b = 0; b < 256; ++b) {
    ASSERT_TRUE(same_float(f[2 * b], e2m1_to_float(fp4_lo(static_cast<uint8_t>(b)))))
        << "byte " << b << " low";
    ASSERT_TRUE(same_float(f[2 * b + 1], e2m1_to_float(fp4_hi(static_cast<uint8_t>(b)))))
        << "byte " << b << " high";
  }
}

TEST(Dispatch, ValueListsAndErrors) {
  EXPECT_TRUE(gpu::head_dim_compiled(64) && gpu::head_dim_compiled(128) &&
              gpu::head_dim_compiled(256));
  EXPECT_FALSE(gpu::head_dim_compiled(96));
  EXPECT_EQ(gpu::head_dim_unsupported_reason(96),
            "unsupported head_dim 96 (compiled: 64, 128, 256)");
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
  EXPECT_THROW(KVLAB_DISPATCH_KV_ELEM(static_cast<KvFormat>(9), kE, [&] { return kE; }),
               InvalidArgument);
  EXPECT_EQ(KVLAB_DISPATCH_ACT_DTYPE(DType::kF32, T, [&] { return static_cast<int>(sizeof(T)); }),
            4);
  EXPECT_EQ(KVLAB_DISPATCH_ACT_DTYPE(DType::kBF16, T, [&] { return static_cast<int>(sizeof(T)); }),
            2);
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

TEST(DeviceTables, BlockTablesFromLengthsByScan) {
  KVLAB_SKIP_WITHOUT_GPU();
  const std::vector<int32_t> lens{0, 1, 16, 17, 300, 0, 33, 1024};
  const int bs = 16, mbps = 70, num_blocks = 200, fill = -7;
  thrust::device_vector<int32_t> dl = to_device(lens), table(lens.size() * mbps), perm(num_blocks);
  gpu::shuffled_page_list(num_blocks, 99, raw(perm), nullptr);
  std::vector<int32_t> hp = to_host(perm);
  std::vector<int32_t> sorted = hp;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < num_blocks; ++i) ASSERT_EQ(sorted[i], i) << "not a permutation";
  EXPECT_FALSE(std::is_sorted(hp.begin(), hp.end()));
  thrust::device_vector<int32_t> perm2(num_blocks);
  gpu::shuffled_page_list(num_blocks, 99, raw(perm2), nullptr);
  EXPECT_EQ(to_host(perm2), hp) << "same seed, same permutation";
  for (bool shuffled : {false, true}) {
    const int64_t used =
        gpu::build_block_tables(raw(dl), static_cast<int32_t>(lens.size()), bs, mbps, num_blocks,
                                shuffled ? raw(perm) : nullptr, fill, raw(table), nullptr);
    const std::vector<int32_t> t = to_host(table);
    int64_t k = 0;
    for (size_t s = 0; s < lens.size(); ++s) {
      const int pages = (lens[s] + bs - 1) / bs;
      for (int e = 0; e < mbps; ++e) {
        const int32_t want =
            e < pages ? (shuffled ? hp[k + e] : static_cast<int32_t>(k + e)) : fill;
        ASSERT_EQ(t[s * mbps + e], want)
            << "seq " << s << " entry " << e << " shuffled " << shuffled;
      }
      k += pages;
    }
    EXPECT_EQ(used, k);
  }
  // Errors: a sequence longer than the table, more pages than the pool, a negative length.
  EXPECT_THROW(
      gpu::build_block_tables(raw(dl), 8, bs, 10, num_blocks, nullptr, fill, raw(table), nullptr),
      InvalidArgument);
  EXPECT_THROW(
      gpu::build_block_tables(raw(dl), 8, bs, mbps, 50, nullptr, fill, raw(table), nullptr),
      InvalidArgument);
  thrust::device_vector<int32_t> neg = to_device(std::vector<int32_t>{5, -1});
  EXPECT_THROW(gpu::build_block_tables(raw(neg), 2, bs, mbps, num_blocks, nullptr, fill, raw(table),
                                       nullptr),
               InvalidArgument);
}

TEST(DeviceTables, ErrorSummaryOnDeviceMatchesHostCompare) {
  KVLAB_SKIP_WITHOUT_GPU();
  const uint64_t seed = seed_for("gpu_util.error_summary");
  std::printf("[seed] gpu_util.error_summary = %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 3.0f);
  const size_t N = 100003;
  std::vector<float> ref(N), out(N);
  for (size_t i = 0; i < N; ++i) {
    ref[i] = n(rng);
    out[i] = ref[i] + 1e-3f * n(rng);
  }
  out[7] = std::numeric_limits<float>::quiet_NaN();
  ref[11] = std::numeric_limits<float>::infinity();
  out[11] = std::numeric_limits<float>::infinity();
  out[13] = -std::numeric_limits<float>::infinity();
  thrust::device_vector<float> dout = to_device(out), dref = to_device(ref);
  const gpu::DeviceErrorSummary d =
      gpu::device_error_summary(raw(dout), raw(dref), static_cast<int64_t>(N), nullptr);
  const ErrorStats h = compare(out, ref);
  EXPECT_EQ(d.count, static_cast<int64_t>(N));
  EXPECT_EQ(d.max_abs, h.max_abs);
  // Both sum in float64 in different orders: the table's cross-check entry bounds that.
  const Tolerance t = tolerance(Op::kReferenceCrossCheck, KvFormat::kBF16, DType::kF32);
  EXPECT_LE(std::fabs(d.rel_l2 - h.rel_l2), t.atol + t.rtol * h.rel_l2);
  EXPECT_EQ(d.nonfinite_out, h.nan_out + h.inf_out);
  EXPECT_EQ(d.nonfinite_ref, h.nan_ref + h.inf_ref);
  EXPECT_EQ(d.nonfinite_mismatch, h.mismatched_nonfinite);
  EXPECT_EQ(d.nonfinite_mismatch, 2);  // index 7 (NaN vs finite) and 13 (-Inf vs finite)
}

}  // namespace
}  // namespace kvlab::test
