// mix64.h: the one 64-bit mixing function of kvlab: SplitMix64's finalizer (Steele, Lea,
// Flood 2014), a bijection of 64-bit words whose outputs pass as independent random bits.
//
// Everything that derives random bits or hashes from integers calls it: the counter-based
// streams of the paged test cases (reference/attention/paged_case.cpp) and of the decode
// step's synthetic weights (reference/step/step_math.h: hash3), the seeding of SynthRng
// (reference/synth: SplitMix64 steps), the workload generator's per-quantity streams
// (sim/workload), the prefix-block hashes of the serving engine (sim/engine) and the
// device-side seeded page permutation (gpu/core/device_tables.cu). mix64(x) equals the
// SplitMix64 generator's output after its state was advanced from x, so a generator state s
// yields mix64(s), mix64(s + kGolden64), mix64(s + 2 kGolden64), ...
#pragma once

#include <cstdint>

#include "reference/core/hostdevice.h"

namespace kvlab {

// The SplitMix64 increment (2^64 / golden ratio, odd).
constexpr uint64_t kGolden64 = 0x9E3779B97F4A7C15ull;

KVLAB_HD uint64_t mix64(uint64_t x) {
  x += kGolden64;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace kvlab
