// test_scatter_read.cu: the scattered-granule reads (gpu/bench/scatter_read.cuh) read every
// byte of the buffer exactly once, in the seeded order decode's page tables use, for granules
// that do and do not divide an awkward buffer size (the last granule shorter), by the 16-byte
// load kernel and by one bulk copy per granule; the checking twins' sums are compared with the
// host's (the fourth weights each granule by its place in the order); an order that reads one
// granule twice and another never, a read one vector off inside every granule, and a read of
// every byte once that ignores the order are caught. The timed kernels of perf.ini's scatter
// sections launch, and each is a row name of its own.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/sequence.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "gpu/bench/harness.h"
#include "gpu/core/cuda_check.h"
#include "gpu/core/device_info.h"
#include "gpu/core/device_tables.h"
#include "reference/core/error.h"

namespace kvlab::test {
namespace {

using gpu::bench::MemKernel;
using gpu::bench::MemLoad;
using gpu::bench::MemOp;

// 3 MiB + 37 x 16 bytes: no granule of the tests divides it.
constexpr uint64_t kBytes = (uint64_t{3} << 20) + 37 * 16;

using Sums = std::array<uint64_t, 4>;

// What scatter_read_checksum gives for fill_words' 1, 2, ..., bytes / 4 (word i holds i + 1)
// read in `order` by granules of `granule` bytes: {vectors, sum of words, sum of squares, sum
// over j of (j + 1) x the words of granule order[j]} (mod 2^64).
Sums host_sums(uint64_t bytes, int granule, const std::vector<int32_t>& order) {
  Sums s{bytes / 16, 0, 0, 0};
  for (uint64_t w = 1; w <= bytes / 4; ++w) {
    s[1] += w;
    s[2] += w * w;
  }
  for (size_t j = 0; j < order.size(); ++j) {
    const uint64_t first = uint64_t(order[j]) * granule / 4;
    const uint64_t end = std::min<uint64_t>(first + granule / 4, bytes / 4);
    for (uint64_t i = first; i < end; ++i) s[3] += (j + 1) * (i + 1);
  }
  return s;
}

MemKernel scatter(MemLoad load, int granule, int depth, int blocks_per_sm) {
  MemKernel k;
  k.op = MemOp::kRead;
  k.load = load;
  k.granule = granule;
  k.depth = depth;
  k.blocks_per_sm = blocks_per_sm;
  return k;
}

// `bytes` of fill_words' 1, 2, ..., bytes / 4. Parentheses, not braces: words{n} would pick
// device_vector's initializer_list constructor, a vector of ONE word holding n, and the fill
// would run 3 MiB past that allocation into the orders and check words allocated after it.
struct Buffer {
  thrust::device_vector<unsigned> words;
  explicit Buffer(uint64_t bytes = kBytes) : words(bytes / 4) {
    if (words.size() != bytes / 4)
      throw Error("scatter test buffer: " + std::to_string(words.size()) + " words allocated, " +
                  std::to_string(bytes / 4) + " asked");
    gpu::bench::fill_words(thrust::raw_pointer_cast(words.data()), bytes);
  }
  const void* data() const { return thrust::raw_pointer_cast(words.data()); }
};

thrust::device_vector<int32_t> order_of(const MemKernel& k, uint64_t seed) {
  thrust::device_vector<int32_t> o(gpu::bench::scatter_granules(k, kBytes));
  gpu::shuffled_page_list(static_cast<int64_t>(o.size()), seed, thrust::raw_pointer_cast(o.data()),
                          nullptr);
  return o;
}

std::vector<int32_t> on_host(const thrust::device_vector<int32_t>& d) {
  std::vector<int32_t> h(d.size());
  thrust::copy(d.begin(), d.end(), h.begin());
  return h;
}

Sums checksum(const MemKernel& k, const void* src, const thrust::device_vector<int32_t>& order) {
  return gpu::bench::scatter_read_checksum(k, src, kBytes, thrust::raw_pointer_cast(order.data()));
}

}  // namespace

TEST(ScatterRead, EveryByteIsReadExactlyOnce) {
  if (!gpu::device_available()) GTEST_SKIP() << "no CUDA device present";
  Buffer buf;
  for (int g : {16, 256, 272, 4096, 16384}) {
    for (const MemKernel& k :
         {scatter(MemLoad::kNc, g, 4, 0), scatter(MemLoad::kBulk, g, 4, 2),
          scatter(MemLoad::kBulk, g, g <= 4096 ? 16 : 4, g <= 1024 ? 16 : 1)}) {
      ASSERT_EQ(gpu::bench::mem_kernel_unsupported(k), "") << k.name();
      const thrust::device_vector<int32_t> order = order_of(k, 0xC0FFEEull + g);
      // The order is a permutation of the granules, and not the identity.
      const std::vector<int32_t> h = on_host(order);
      std::vector<int32_t> sorted = h;
      std::sort(sorted.begin(), sorted.end());
      std::vector<int32_t> iota(h.size());
      std::iota(iota.begin(), iota.end(), 0);
      ASSERT_EQ(sorted, iota) << k.name();
      ASSERT_NE(h, iota) << k.name();
      const Sums want = host_sums(kBytes, g, h);
      const Sums got = checksum(k, buf.data(), order);
      EXPECT_EQ(got[0], want[0]) << k.name() << ": 16-byte vectors read";
      EXPECT_EQ(got[1], want[1]) << k.name() << ": sum of the words read";
      EXPECT_EQ(got[2], want[2]) << k.name() << ": sum of their squares";
      EXPECT_EQ(got[3], want[3]) << k.name() << ": sum of the granules' words x their place";
    }
  }
}

TEST(ScatterRead, AnOrderThatReadsAGranuleTwiceIsCaught) {
  if (!gpu::device_available()) GTEST_SKIP() << "no CUDA device present";
  Buffer buf;
  for (const MemKernel& k :
       {scatter(MemLoad::kNc, 256, 4, 0), scatter(MemLoad::kBulk, 256, 16, 16)}) {
    thrust::device_vector<int32_t> order = order_of(k, 7);
    const Sums want = host_sums(kBytes, k.granule, on_host(order));
    // The true order gives the host's sums: what differs below is the planted granule alone.
    ASSERT_EQ(checksum(k, buf.data(), order), want) << k.name();
    // Two whole granules (not the short last one): the first read twice, the second never.
    const int32_t last = static_cast<int32_t>(order.size()) - 1;
    std::vector<size_t> at;
    for (size_t i = 0; at.size() < 2; ++i)
      if (order[i] != last) at.push_back(i);
    order[at[1]] = static_cast<int32_t>(order[at[0]]);
    const Sums got = checksum(k, buf.data(), order);
    EXPECT_EQ(got[0], want[0]) << k.name();  // as many vectors (both granules are whole) ...
    EXPECT_NE(got[1], want[1]) << k.name();  // ... but other bytes
    EXPECT_NE(got[2], want[2]) << k.name();
  }
}

// A read one 16-byte vector off inside every granule (what an off-by-one in the offset within
// a granule does: each granule's first vector never read, the next granule's first twice, the
// count unchanged): the kernels are given the buffer's base + 16 over a buffer one vector
// longer (so the shifted reads stay inside the allocation and 16-byte aligned for bulk copies).
TEST(ScatterRead, AReadOneVectorOffInsideEveryGranuleIsCaught) {
  if (!gpu::device_available()) GTEST_SKIP() << "no CUDA device present";
  Buffer buf(kBytes + 16);
  const auto* base = static_cast<const unsigned char*>(buf.data());
  for (int g : {256, 272})
    for (const MemKernel& k :
         {scatter(MemLoad::kNc, g, 4, 0), scatter(MemLoad::kBulk, g, 16, 16)}) {
      const thrust::device_vector<int32_t> order = order_of(k, 13);
      const Sums want = host_sums(kBytes, g, on_host(order));
      ASSERT_EQ(checksum(k, base, order), want) << k.name();
      const Sums got = checksum(k, base + 16, order);
      EXPECT_EQ(got[0], want[0]) << k.name();  // as many vectors ...
      EXPECT_NE(got[1], want[1]) << k.name();  // ... but other bytes
      EXPECT_NE(got[2], want[2]) << k.name();
    }
}

// A read of every byte once but not in the given order (the granules front to back, as a
// kernel that ignored `order` would read them): the first three sums cannot see it, the
// fourth (each granule's words weighted by its place in the order) must.
TEST(ScatterRead, AReadThatIgnoresTheOrderIsCaught) {
  if (!gpu::device_available()) GTEST_SKIP() << "no CUDA device present";
  Buffer buf;
  for (const MemKernel& k :
       {scatter(MemLoad::kNc, 272, 4, 0), scatter(MemLoad::kBulk, 272, 16, 16)}) {
    const thrust::device_vector<int32_t> order = order_of(k, 17);
    const Sums want = host_sums(kBytes, k.granule, on_host(order));
    ASSERT_EQ(checksum(k, buf.data(), order), want) << k.name();
    thrust::device_vector<int32_t> front_to_back(order.size());
    thrust::sequence(front_to_back.begin(), front_to_back.end(), 0);
    const Sums got = checksum(k, buf.data(), front_to_back);
    EXPECT_EQ(got[0], want[0]) << k.name();
    EXPECT_EQ(got[1], want[1]) << k.name();
    EXPECT_EQ(got[2], want[2]) << k.name();
    EXPECT_NE(got[3], want[3]) << k.name();
  }
}

TEST(ScatterRead, TimedKernelsOfThePerfSectionsLaunch) {
  if (!gpu::device_available()) GTEST_SKIP() << "no CUDA device present";
  Buffer buf;
  thrust::device_vector<unsigned> sink(1, 0u);
  std::vector<MemKernel> ks;
  for (int g : {256, 272, 16384})
    for (int d : {4, 8})
      for (int b : {4, 0}) ks.push_back(scatter(MemLoad::kNc, g, d, b));
  ks.push_back(scatter(MemLoad::kPlain, 256, 8, 0));
  ks.push_back(scatter(MemLoad::kBulk, 256, 16, 32));
  ks.push_back(scatter(MemLoad::kBulk, 16384, 4, 2));
  for (const MemKernel& k : ks) {
    ASSERT_EQ(gpu::bench::mem_kernel_unsupported(k), "") << k.name();
    const thrust::device_vector<int32_t> order = order_of(k, 11);
    gpu::bench::launch_mem_kernel(k, buf.data(), nullptr, kBytes,
                                  thrust::raw_pointer_cast(sink.data()), nullptr,
                                  thrust::raw_pointer_cast(order.data()));
    KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
  }
  // Without the order, the launcher refuses instead of reading garbage.
  EXPECT_THROW(gpu::bench::launch_mem_kernel(ks[0], buf.data(), nullptr, kBytes,
                                             thrust::raw_pointer_cast(sink.data()), nullptr),
               Error);
}

}  // namespace kvlab::test
