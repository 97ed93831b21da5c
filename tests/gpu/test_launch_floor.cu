// test_launch_floor.cu: the floor kernels of gpu/bench/launch_floor.h on the device: every
// chain (0-3 loads, with and without the 16 KiB page) returns the chain's end or the page's
// sums computed on the host, leaves the other output words and the guards alone, and the
// harness's flush evicts the chain: three dependent loads that miss L2 (the floor row) are
// slower than the same three loads primed into L2 after the flush. That must hold physically
// (an H100 DRAM miss costs hundreds of ns more than an L2 hit, x 3 loads, against events of
// 32 ns resolution); if it does not, the flush left the chain in L2 and the floor rows are not
// cold. Skips without a device.
#include <gtest/gtest.h>

#include <cstdio>

#include "gpu/bench/harness.h"
#include "gpu/bench/launch_floor.h"
#include "gpu/core/device_info.h"
#include "reference/core/error.h"

namespace kvlab::test {
namespace {

using gpu::bench::FloorKernel;
using gpu::bench::FloorPrime;
using gpu::bench::LaunchFloorCase;

gpu::bench::Timing time_floor(const LaunchFloorCase& c, FloorPrime p) {
  gpu::bench::TimingOptions o;
  o.min_reps = 40;
  o.max_reps = 200;
  o.max_seconds = 0.5;
  o.cold_l2 = true;
  return gpu::bench::time_kernel([&](cudaStream_t s) { c.launch(s); }, o,
                                 gpu::bench::L2Flush::kReadAllocate, 0, nullptr,
                                 [&](cudaStream_t s) { c.prime(p, s); });
}

}  // namespace

TEST(LaunchFloor, EveryChainReturnsWhatTheHostBuilt) {
  if (!gpu::device_available()) GTEST_SKIP() << "no CUDA device present";
  for (int chain = 0; chain <= gpu::bench::kFloorMaxChain; ++chain)
    for (bool tail : {false, true})
      for (uint64_t seed : {1ull, 77ull}) {
        LaunchFloorCase c(FloorKernel{chain, tail}, seed);
        EXPECT_EQ(c.validate(), "") << "chain " << chain << " tail " << tail << " seed " << seed;
        EXPECT_DOUBLE_EQ(c.bytes(), 4.0 * chain + (tail ? gpu::bench::kFloorTailBytes : 0));
      }
  EXPECT_THROW(LaunchFloorCase(FloorKernel{gpu::bench::kFloorMaxChain + 1, false}, 1), Error);
}

TEST(LaunchFloor, FlushEvictsTheChainPrimedLinesAreFaster) {
  if (!gpu::device_available()) GTEST_SKIP() << "no CUDA device present";
  LaunchFloorCase c(FloorKernel{3, false}, 20251126);
  ASSERT_EQ(c.validate(), "");
  const gpu::bench::Timing cold = time_floor(c, FloorPrime::kNone);
  const gpu::bench::Timing elsewhere = time_floor(c, FloorPrime::kElsewhere);
  const gpu::bench::Timing pages = time_floor(c, FloorPrime::kPages);
  const gpu::bench::Timing lines = time_floor(c, FloorPrime::kLines);
  std::printf(
      "[floor] chain3 medians [q1, q3] us: cold %.3f [%.3f, %.3f], primed elsewhere %.3f "
      "[%.3f, %.3f], pages %.3f [%.3f, %.3f], lines %.3f [%.3f, %.3f]\n",
      cold.median_us, cold.q1_us, cold.q3_us, elsewhere.median_us, elsewhere.q1_us, elsewhere.q3_us,
      pages.median_us, pages.q1_us, pages.q3_us, lines.median_us, lines.q1_us, lines.q3_us);
  // Beyond both noise bands: the cold chain's fast quartile above the primed one's slow
  // quartile, right after the flush and with the same untimed kernel in between.
  EXPECT_GT(cold.q1_us, lines.q3_us);
  EXPECT_GT(elsewhere.q1_us, lines.q3_us);
}

}  // namespace kvlab::test
