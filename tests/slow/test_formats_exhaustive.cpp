// test_formats_exhaustive.cpp: every float32 bit pattern (2^32) through every encoder of
// formats.h (FP8 E4M3, FP8 E5M2, FP16, BF16, and E2M1), both signs and both saturation
// modes, against the independent table oracle of tests/cpu/test_formats_oracle.h; and
// floor_log2 / ceil_log2 and the power-of-two scale rules (scale_rules.h) over every
// positive float (this sweep found the subnormal-quotient case of pow2_exp_ceil).
//
// Speed: positive float patterns are monotonic in value, so each worker walks its range of
// magnitudes with a pointer into the oracle's sorted table (amortized O(1) per pattern)
// instead of searching; the work is split over std::thread workers.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "reference/quant/scale_rules.h"
#include "tests/cpu/test_formats_oracle.h"

namespace kvlab::test {
namespace {

constexpr uint32_t kPosInf = 0x7F800000u;

unsigned num_workers() {
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 2 : std::min(hw, 16u);
}

// Runs fn(begin, end, report) over [0, end_all) split in chunks across workers; report()
// collects mismatch messages (the first few are kept).
struct Mismatches {
  std::mutex mu;
  std::vector<std::string> first;
  std::atomic<int64_t> count{0};
  void add(const std::string& s) {
    if (count.fetch_add(1) < 10) {
      std::lock_guard<std::mutex> lock(mu);
      first.push_back(s);
    }
  }
};

template <typename Fn>
void parallel_range(uint32_t end_all, Fn fn) {
  const unsigned n = num_workers();
  constexpr uint32_t kChunk = 1u << 22;
  std::atomic<uint32_t> next{0};
  std::vector<std::thread> workers;
  for (unsigned w = 0; w < n; ++w)
    workers.emplace_back([&] {
      for (;;) {
        const uint32_t b = next.fetch_add(kChunk);
        if (b >= end_all) return;
        fn(b, std::min<uint64_t>(static_cast<uint64_t>(b) + kChunk, end_all));
      }
    });
  for (auto& t : workers) t.join();
}

// enc(x, sat) is the encoder under test, passed as a lambda so that it inlines.
template <typename Enc>
void exhaustive_encode(const FormatModel& m, Enc enc) {
  const auto t0 = std::chrono::steady_clock::now();
  const EncodeOracle oracle(m);
  const std::vector<double>& t = oracle.table();
  const double sentinel = t.back();
  const bool fp4 = &m == &kE2M1Model;
  const Saturation modes[2] = {Saturation::kSatFinite, Saturation::kNonSaturating};
  Mismatches bad;
  parallel_range(kPosInf, [&](uint32_t b, uint32_t e) {
    size_t k = oracle.interval(static_cast<double>(bits_float(b)));
    uint32_t cached_mag = ~0u, want[2][2] = {};  // [neg][mode], recomputed when mag changes
    for (uint32_t u = b; u < e; ++u) {
      const float x = bits_float(u);
      const double a = static_cast<double>(x);
      uint32_t mag;
      if (a >= sentinel) {
        mag = m.max_code + 1;
      } else {
        while (k + 1 < t.size() && a >= t[k + 1]) ++k;
        mag = oracle.round_in(a, k);
      }
      if (mag != cached_mag) {
        cached_mag = mag;
        for (int neg = 0; neg < 2; ++neg)
          for (int i = 0; i < 2; ++i) want[neg][i] = oracle.finish(mag, neg != 0, modes[i]);
      }
      uint32_t got[2][2];
      got[0][0] = enc(x, modes[0]);
      got[1][0] = enc(-x, modes[0]);
      got[0][1] = fp4 ? want[0][1] : enc(x, modes[1]);  // E2M1 has one mode
      got[1][1] = fp4 ? want[1][1] : enc(-x, modes[1]);
      if (got[0][0] != want[0][0] || got[1][0] != want[1][0] || got[0][1] != want[0][1] ||
          got[1][1] != want[1][1]) {
        for (int neg = 0; neg < 2; ++neg)
          for (int i = 0; i < 2; ++i)
            if (got[neg][i] != want[neg][i]) {
              char buf[160];
              std::snprintf(buf, sizeof buf, "%s %s: float bits 0x%08X -> got 0x%X, want 0x%X",
                            m.name, i == 0 ? "satfinite" : "nonsat", float_bits(neg ? -x : x),
                            got[neg][i], want[neg][i]);
              bad.add(buf);
            }
      }
    }
  });
  // Inf and every NaN pattern, both signs
  for (uint32_t u = kPosInf; u != 0; ++u) {    // 0x7F800000 .. 0xFFFFFFFF, then wraps to 0
    if (u > 0x7FFFFFFFu && u < 0xFF800000u) {  // negative finite: done above
      u = 0xFF7FFFFFu;
      continue;
    }
    const float x = bits_float(u);
    for (Saturation sat : modes) {
      const uint32_t want_s = oracle.encode(x, sat), got_s = enc(x, sat);
      if (got_s != want_s) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s special 0x%08X -> got 0x%X want 0x%X", m.name, u, got_s,
                      want_s);
        bad.add(buf);
      }
    }
  }
  for (const auto& s : bad.first) ADD_FAILURE() << s;
  EXPECT_EQ(bad.count.load(), 0) << m.name << ": mismatching patterns";
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: 2^32 patterns checked in %.1f s on %u workers\n", m.name, sec, num_workers());
}

TEST(FormatsExhaustive, E4M3AllFloats) {
  exhaustive_encode(kE4M3Model,
                    [](float x, Saturation s) -> uint32_t { return float_to_e4m3(x, s); });
}
TEST(FormatsExhaustive, E5M2AllFloats) {
  exhaustive_encode(kE5M2Model,
                    [](float x, Saturation s) -> uint32_t { return float_to_e5m2(x, s); });
}
TEST(FormatsExhaustive, FP16AllFloats) {
  exhaustive_encode(kFP16Model,
                    [](float x, Saturation s) -> uint32_t { return float_to_fp16_bits(x, s); });
}
TEST(FormatsExhaustive, BF16AllFloats) {
  exhaustive_encode(kBF16Model,
                    [](float x, Saturation s) -> uint32_t { return float_to_bf16_bits(x, s); });
}
TEST(FormatsExhaustive, E2M1AllFloats) {
  exhaustive_encode(kE2M1Model, [](float x, Saturation) -> uint32_t { return float_to_e2m1(x); });
}

// floor_log2 / ceil_log2 against a walking oracle (the power of two p <= x < 2p, advanced
// by doubling as x grows; seeded per chunk with frexp), and the pow2 scale rules'
// invariants, for every positive finite float. All comparisons are exact in double.
TEST(FormatsExhaustive, ExponentHelpersAndPow2RulesAllFloats) {
  Mismatches bad;
  const ElemFormat fmts[] = {ElemFormat::kFP8E4M3, ElemFormat::kFP8E5M2, ElemFormat::kFP4E2M1};
  std::vector<double> pow2(401);  // 2^(i - 200)
  for (int i = 0; i <= 400; ++i) pow2[i] = std::ldexp(1.0, i - 200);
  auto p2 = [&](int e) { return pow2[static_cast<size_t>(e + 200)]; };
  parallel_range(kPosInf, [&](uint32_t b, uint32_t e) {
    const uint32_t first = std::max(b, 1u);
    int fl = 0;
    std::frexp(static_cast<double>(bits_float(first)), &fl);
    --fl;  // x = m * 2^(fl+1), m in [0.5, 1): floor(log2 x) = fl
    double p = std::ldexp(1.0, fl);
    for (uint32_t u = first; u < e; ++u) {
      const float x = bits_float(u);
      const double xd = static_cast<double>(x);
      while (xd >= 2 * p) {
        p *= 2;
        ++fl;
      }
      const int want_floor = fl, want_ceil = xd == p ? fl : fl + 1;
      if (floor_log2(x) != want_floor || ceil_log2(x) != want_ceil) {
        char buf[128];
        std::snprintf(buf, sizeof buf, "log2 of 0x%08X: floor %d (want %d) ceil %d (want %d)", u,
                      floor_log2(x), want_floor, ceil_log2(x), want_ceil);
        bad.add(buf);
      }
      // ceil: the smallest 2^ce >= 2^-127 with x <= m 2^ce; OCP: oe + emax = floor(log2 x)
      // unless clamped at -127
      for (ElemFormat f : fmts) {
        const double mx = elem_max_finite(f);
        const int ce = pow2_exp_ceil(x, elem_max_finite(f), 0.0f, AmaxFloorAt::kAmax);
        const bool covers = ce >= kPow2MinExp && xd <= mx * p2(ce);
        const bool minimal = ce == kPow2MinExp || xd > mx * p2(ce - 1);
        const int oe = pow2_exp_ocp_floor(x, elem_emax(f), 0.0f, AmaxFloorAt::kAmax);
        const bool brackets = oe == kPow2MinExp ? want_floor - elem_emax(f) <= kPow2MinExp
                                                : oe + elem_emax(f) == want_floor;
        if (!covers || !minimal || !brackets) {
          char buf[128];
          std::snprintf(buf, sizeof buf,
                        "pow2 rules at 0x%08X format %d: ceil %d (covers %d minimal %d) ocp %d", u,
                        static_cast<int>(f), ce, covers, minimal, oe);
          bad.add(buf);
        }
      }
    }
  });
  for (const auto& s : bad.first) ADD_FAILURE() << s;
  EXPECT_EQ(bad.count.load(), 0);
}

}  // namespace
}  // namespace kvlab::test
