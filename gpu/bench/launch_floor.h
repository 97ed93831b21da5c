// launch_floor.h: the floor under every cold decode timing (host-includable). A decode call at
// batch 1 x 512 moves ~2 MB, which the read ceiling R streams in under 1 us, yet it takes ~10 us
// under the fair rules (cold L2, events around one launch after the flush kernel). These
// kernels measure, with the same harness and rules, what part of that is the timing and the
// launch themselves, and what part is decode's own start-up chain of dependent cold loads
// (sequence length -> block-table entry -> first KV page):
//   empty            one block of one warp that does nothing: events + launch after the flush;
//   chain N          one thread, N = 1..3 dependent 4-byte global loads, each address taken
//                    from the previous load, each in its own allocation (decode's seq_lens,
//                    block table and KV pool are separate allocations too);
//   chain N + 16 KiB the same chain, then one block of 128 threads reads the 16 KiB page the
//                    last load names (8 independent 16-byte loads per thread, all in flight).
// Every byte comes from buffers the harness's flush evicts (the flush is relied upon, not a
// second buffer); the primed controls prove it: after the flush and before the start event an
// untimed kernel touches either the very words and page the timed call reads (lines: L2 and
// TLB warm), or words 32 KiB away in the same 2 MiB pages (pages: TLB warm, lines still cold),
// or as many words of another allocation (elsewhere: the same kernel in between, nothing warm).
// A cold chain that is no slower than its lines-primed twin would mean the flush left the
// chain in L2.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "gpu/core/device_buffer.h"

namespace kvlab::gpu::bench {

constexpr int kFloorMaxChain = 3;                        // dependent loads of the longest chain
constexpr int kFloorTailBytes = 16 << 10;                // the page read after the chain
constexpr int kFloorTailThreads = 128;                   // 128 threads x 8 x 16 bytes = 16 KiB
constexpr uint64_t kFloorChainBufferBytes = 4ull << 20;  // each chain link's allocation
constexpr uint64_t kFloorTailBufferBytes = 64ull << 20;  // 4096 pages of 16 KiB

// What the untimed kernel between the flush and the timed call touches.
enum class FloorPrime {
  kNone,       // nothing: the timed call starts on the flush's state (the measured floor)
  kElsewhere,  // as many words (and a page) of another allocation: a kernel in between, nothing
               // of the call warm (the baseline of the two below)
  kPages,      // one word 32 KiB away from each word (page) the call reads: TLB warm, L2 cold
  kLines,      // the very words and page the call reads: L2 (and TLB) warm
};

struct FloorKernel {
  int chain = 0;      // dependent 4-byte loads, 0..kFloorMaxChain
  bool tail = false;  // then read the 16 KiB page the last load names
};

// Buffers, chain and expected outputs of one floor kernel; seeded positions.
class LaunchFloorCase {
 public:
  // Throws kvlab::Error for a chain outside [0, kFloorMaxChain].
  LaunchFloorCase(FloorKernel k, uint64_t seed);
  // Enqueues the timed kernel (the empty kernel for chain 0 without the tail).
  void launch(cudaStream_t s) const;
  // Enqueues the untimed priming kernel (nothing for kNone).
  void prime(FloorPrime p, cudaStream_t s) const;
  // Runs the kernel once and checks its outputs against the host's values and the untouched
  // output words and guards: "" when right, else what differs.
  std::string validate();
  // Bytes the timed call reads: 4 per chain load + the page.
  double bytes() const { return 4.0 * k_.chain + (k_.tail ? kFloorTailBytes : 0); }

 private:
  FloorKernel k_;
  DeviceBuffer link_[kFloorMaxChain];  // link i holds the index into link i + 1 (or the page)
  DeviceBuffer tail_, out_, sink_, elsewhere_;  // elsewhere_: the kElsewhere prime's reads
  uint32_t start_ = 0;                          // first index (chain 0: the page)
  uint32_t word_[kFloorMaxChain]{};             // word index read in each link
  uint32_t page_ = 0;                           // the page the chain ends at
};

}  // namespace kvlab::gpu::bench
