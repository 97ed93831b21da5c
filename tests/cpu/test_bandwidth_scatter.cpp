// test_bandwidth_scatter.cpp: the scattered-granule reads of the bandwidth kind (order =
// scatter, experiments/kinds/bandwidth.cpp; kernels in gpu/bench/scatter_read.cuh): the point
// check refuses a granule that is zero, not a multiple of 16, larger than the working set or
// given without order scatter; in CUDA builds, the row names say what each kernel is, the
// kernels that do not exist say why, and no scattered kernel is a candidate of the read
// ceiling R. The kernels run in gpu_tests ScatterRead.*; bad values through `kvlab sweep` in
// tests/python/test_bandwidth_scatter.py.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "experiments/cli/registry.h"
#include "experiments/kinds/kinds.h"
#include "reference/core/error.h"
#if KVLAB_HAVE_CUDA
#include "gpu/bench/harness.h"
#endif

using namespace kvlab;
using namespace kvlab::exp;

namespace {

Point bw_point(const std::map<std::string, std::string>& set) {
  Point p;
  p.study = "t";
  p.kind = "bandwidth";
  for (const auto& a : find_bench("bandwidth").axes()) {
    auto it = set.find(a.name);
    p.axes.emplace_back(a.name, it == set.end() ? a.default_value : it->second);
  }
  return p;
}

}  // namespace

TEST(BandwidthScatter, PointCheckRefusesBadGranules) {
  const Bench& b = find_bench("bandwidth");
  EXPECT_NO_THROW(b.check_point(bw_point({{"order", "scatter"}, {"granule", "256"}})));
  EXPECT_NO_THROW(b.check_point(bw_point({{"order", "scatter"}, {"granule", "272"}})));
  EXPECT_NO_THROW(
      b.check_point(bw_point({{"order", "scatter"}, {"granule", "1048576"}, {"mib", "1"}})));
  EXPECT_NO_THROW(b.check_point(bw_point({})));  // contiguous: granule 0
  for (const char* g : {"0", "8", "100", "-16"})
    EXPECT_THROW(b.check_point(bw_point({{"order", "scatter"}, {"granule", g}})), InvalidArgument)
        << g;
  EXPECT_THROW(
      b.check_point(bw_point({{"order", "scatter"}, {"granule", "1048592"}, {"mib", "1"}})),
      InvalidArgument);
  EXPECT_THROW(
      b.check_point(bw_point({{"order", "scatter"}, {"granule", "256"}, {"mib", "65536"}})),
      InvalidArgument);
  EXPECT_THROW(b.check_point(bw_point({{"granule", "256"}})), InvalidArgument);
  EXPECT_THROW(b.check_point(bw_point({{"order", "ranges"}, {"granule", "256"}})), InvalidArgument);
}

#if KVLAB_HAVE_CUDA
namespace {
gpu::bench::MemKernel scatter(gpu::bench::MemLoad load, int granule, int depth, int b) {
  gpu::bench::MemKernel k;
  k.load = load;
  k.granule = granule;
  k.depth = depth;
  k.blocks_per_sm = b;
  return k;
}
}  // namespace

TEST(BandwidthScatter, RowNamesSayWhatTheKernelIs) {
  using gpu::bench::MemLoad;
  EXPECT_EQ(scatter(MemLoad::kNc, 256, 4, 0).name(), "read_scatter_g256_nc_d4_bmax");
  EXPECT_EQ(scatter(MemLoad::kNc, 4096, 8, 4).name(), "read_scatter_g4096_nc_d8_b4");
  EXPECT_EQ(scatter(MemLoad::kPlain, 512, 8, 2).name(), "read_scatter_g512_plain_d8_b2");
  EXPECT_EQ(scatter(MemLoad::kBulk, 256, 16, 32).name(), "read_scatter_g256_bulk_d16_b32");
  EXPECT_EQ(scatter(MemLoad::kBulk, 16384, 4, 0).name(), "read_scatter_g16384_bulk_d4_b1");
  // The contiguous names are unchanged.
  EXPECT_EQ(scatter(MemLoad::kNc, 0, 8, 4).name(), "read_nc_d8_b4");
}

TEST(BandwidthScatter, KernelsThatDoNotExistSayWhy) {
  using gpu::bench::mem_kernel_unsupported;
  using gpu::bench::MemLoad;
  for (const auto& k : {scatter(MemLoad::kNc, 256, 4, 0), scatter(MemLoad::kPlain, 272, 8, 4),
                        scatter(MemLoad::kBulk, 256, 16, 32), scatter(MemLoad::kBulk, 16384, 4, 2),
                        scatter(MemLoad::kBulk, 4096, 16, 2)})
    EXPECT_EQ(mem_kernel_unsupported(k), "") << k.name();
  EXPECT_NE(mem_kernel_unsupported(scatter(MemLoad::kNc, 100, 4, 0)).find("multiple of 16"),
            std::string::npos);
  EXPECT_NE(mem_kernel_unsupported(scatter(MemLoad::kCg, 256, 4, 0)).find("not cg"),
            std::string::npos);
  EXPECT_NE(mem_kernel_unsupported(scatter(MemLoad::kNc, 256, 2, 0)).find("depth 4 and 8"),
            std::string::npos);
  EXPECT_NE(mem_kernel_unsupported(scatter(MemLoad::kBulk, 256, 17, 1)).find("1 to 16"),
            std::string::npos);
  EXPECT_NE(mem_kernel_unsupported(scatter(MemLoad::kBulk, 256, 16, 33)).find("at most 32"),
            std::string::npos);
  EXPECT_NE(mem_kernel_unsupported(scatter(MemLoad::kBulk, 16384, 16, 1)).find("exceed"),
            std::string::npos);
  auto copy = scatter(MemLoad::kPlain, 256, 4, 0);
  copy.op = gpu::bench::MemOp::kCopy;
  EXPECT_NE(mem_kernel_unsupported(copy).find("not copied"), std::string::npos);
  auto chunked = scatter(MemLoad::kBulk, 256, 4, 1);
  chunked.chunk_kib = 4;
  EXPECT_NE(mem_kernel_unsupported(chunked).find("no chunk_kib"), std::string::npos);
  EXPECT_EQ(gpu::bench::scatter_granules(scatter(MemLoad::kNc, 256, 4, 0), 1000 * 16), 63u);
  EXPECT_EQ(gpu::bench::scatter_granules(scatter(MemLoad::kNc, 0, 4, 0), 1000 * 16), 0u);
}

TEST(BandwidthScatter, NoScatteredKernelIsACandidateOfTheReadCeiling) {
  for (const auto& k : gpu::bench::ceiling_kernels(gpu::bench::MemOp::kRead))
    EXPECT_EQ(k.granule, 0) << k.name();
}
#else
TEST(BandwidthScatter, RowNamesSayWhatTheKernelIs) {
  GTEST_SKIP() << "built without CUDA: the kernels' names live in gpu/bench";
}
#endif
