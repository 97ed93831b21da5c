// random.h: portable, seeded samplers for synthetic workloads.
//
// Why not <random>'s distributions: their algorithms are implementation-defined, so the same
// seed gives different request streams under libstdc++ and libc++ (and across versions).
// std::mt19937_64 itself is fully specified by the standard, so kvlab draws raw 64-bit words
// from it and turns them into samples with the fixed algorithms below: same seed, same
// workload, on every platform.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace kvlab::sim {

class Rng {
 public:
  explicit Rng(uint64_t seed) : eng_(seed) {}

  uint64_t next_u64() { return eng_(); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(eng_() >> 11) * 0x1.0p-53; }
  // Uniform integer in [lo, hi] (inclusive); multiply-shift on 64 bits (bias < 2^-32 for
  // ranges below 2^32, negligible for workload lengths).
  int64_t uniform_int(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    const unsigned __int128 m = static_cast<unsigned __int128>(eng_()) * span;
    return lo + static_cast<int64_t>(static_cast<uint64_t>(m >> 64));
  }
  // Exponential with the given rate (mean 1/rate), by inversion.
  double exponential(double rate) { return -std::log1p(-uniform()) / rate; }
  // Standard normal by the Box-Muller transform (one of the pair is used: simpler state).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Gamma(shape k > 0, scale theta) by Marsaglia & Tsang (2000); k < 1 via the boost
  // Gamma(k) = Gamma(k + 1) * U^(1/k).
  double gamma(double k, double theta) {
    if (k < 1.0) return gamma(k + 1.0, theta) * std::pow(uniform_open(), 1.0 / k);
    const double d = k - 1.0 / 3.0;
    const double c = 1.0 / std::sqrt(9.0 * d);
    while (true) {
      double x, v;
      do {
        x = normal();
        v = 1.0 + c * x;
      } while (v <= 0.0);
      v = v * v * v;
      const double u = uniform_open();
      if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v * theta;
    }
  }

 private:
  double uniform_open() { return 1.0 - uniform(); }  // (0, 1]
  std::mt19937_64 eng_;
};

}  // namespace kvlab::sim
