// v4_tuning.h: the split-KV plan knobs of the tensor-core decode versions (v4+), exposed so
// that one benchmark run can compare plans (experiments/tools/decode_check.cpp --plan).
// The defaults are the values TUNING.md measured as best; kernels never read anything else.
#pragma once

#include <cstdint>

namespace kvlab::gpu {

struct V4Tuning {
  // When the (sequence, KV head) work items fill fewer than one wave of resident blocks,
  // each sequence is split so that at most `fill_waves` waves of blocks exist (one wave:
  // every block starts at once, the per-block start-up latency is paid once).
  int fill_waves = 1;
  // No block reads more than this many bytes of K+V (bounds the tail of skewed batches:
  // a long sequence becomes several blocks, merged by log-sum-exp).
  int64_t max_chunk_bytes = int64_t{4} << 20;
  // Split further while the last wave of blocks would be less than this full (equal-work
  // blocks finish together: 1.3 waves take 2); 0 disables.
  double min_wave_efficiency = 0.9;
  // Launch the split merge with programmatic dependent launch (overlaps its launch with
  // the tail of the split kernel).
  bool pdl = true;
};

// The process-wide plan knobs (not thread-safe to change while other threads launch).
V4Tuning& v4_tuning();

}  // namespace kvlab::gpu
