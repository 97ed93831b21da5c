// split_arrival.h: the arrival count of a split-KV item's blocks, by which the last block to
// finish an item knows it is the last and merges the item's splits in the same launch
// (v12_mma_decode_last_block_merge), and the claim count by which the splits of an item share
// its tiles (v16_mma_decode_shared_tiles, below). Host/device, g++-compilable: the protocol the kernel
// runs is the one tests/cpu/test_split_arrival.cpp runs on std::atomic, threads included.
//
// One 64-bit word per item in the launch's workspace: [tag: 40 bits | count: 24 bits].
//  * A block that has written its partial result arrives: it compare-and-swaps the word from
//    what it holds to the next value, where a word carrying another tag counts as no arrival
//    yet (a new word of this launch's tag, count 1) and one carrying this launch's tag counts
//    on (+1). The arrival that makes the count n (the item's splits that hold tokens) is the
//    last; that block resets the word to 0 after the merge.
//  * The workspace's contents on entry do not matter (decode.h's contract): whatever a word
//    holds (another version's partials, a killed launch's count, 0x00 / 0xFF fill bytes, NaN)
//    counts as no arrival unless its top 40 bits are this launch's tag. Tags are drawn per
//    launch from a per-process sequence started at a random point, with the top byte fixed at
//    0x5A: as the high half of two floats a tag reads as |x| ~ 1e16 (no partial o or lse holds
//    that), it is never a fill byte pattern nor a NaN, and two launches in a row never share a
//    tag. A graph replays one launch's tag: the reset (0, no tag) keeps replays correct.
//  * The first arrival expects the reset word (one atomic); the later ones see this launch's tag
//    in the failed exchange and add (two atomics, no retry loop under contention).
#pragma once

#include <atomic>
#include <cstdint>
#include <random>

#include "reference/core/hostdevice.h"

namespace kvlab::gpu {

struct SplitArrival {
  static constexpr int kCountBits = 24;
  static constexpr uint64_t kCountMask = (uint64_t{1} << kCountBits) - 1;
  static constexpr uint64_t kReset = 0;     // what the last block leaves
  static constexpr uint64_t kTagTop = 0x5A;  // a tag's top byte (bits 32-39 of the tag)

  KVLAB_HD static constexpr uint64_t tag_of(uint64_t word) { return word >> kCountBits; }
  KVLAB_HD static constexpr uint32_t count_of(uint64_t word) {
    return static_cast<uint32_t>(word & kCountMask);
  }
  KVLAB_HD static constexpr uint64_t word(uint64_t tag, uint32_t count) {
    return (tag << kCountBits) | count;
  }
  // The tag of sequence number s (any 64-bit number): 0x5A, then its low 32 bits.
  KVLAB_HD static constexpr uint64_t tag(uint64_t s) { return (kTagTop << 32) | (s & 0xFFFFFFFFu); }
};

// One arrival of a launch tagged `t` on an item's word: cas(expected, desired) is the word's
// atomic compare-and-swap, returning what the word held (desired was stored iff that equals
// expected), add(1) its atomic fetch-and-add, returning what it held. Returns the arrivals
// counted so far, this one included. The first arrival finds the reset word (one exchange);
// the others find this launch's tag and add (two operations, never a retry: under the S
// arrivals of an item finishing together a retried exchange would cost up to S round trips);
// a word that holds anything else is claimed by exchange (the workspace's first use).
template <class Cas, class Add>
KVLAB_HD uint32_t split_arrive(uint64_t t, Cas&& cas, Add&& add) {
  uint64_t seen = cas(SplitArrival::kReset, SplitArrival::word(t, 1));
  if (seen == SplitArrival::kReset) return 1;
  while (SplitArrival::tag_of(seen) != t) {  // not this launch's: count it as no arrival
    const uint64_t got = cas(seen, SplitArrival::word(t, 1));
    if (got == seen) return 1;
    seen = got;
  }
  // This launch's tag stays until the last arrival resets the word, which is not before ours.
  return SplitArrival::count_of(add(1)) + 1;
}

// Shared tiles (v16_mma_decode_shared_tiles): the splits of an item take its tiles past their
// first ones from the item's word, the same [tag: 40 bits | count: 24 bits], where the count is
// the claims so far; a claim's index is the count it found. The merge kernel, which waits for
// the whole decode grid, resets the words (kReset), so a launch normally finds them reset.
//  * A warp's first claim: shared_tile_claim_first exchanges kReset for word(t, 0) and then
//    adds 1 (two atomics, issued back to back; the device issues them one tile before it needs
//    the index), shared_tile_claim_resolve reads the index off the add's result: when it
//    carries this launch's tag, the index is its count (this warp's exchange or another's put
//    the tag there first: a thread's two operations on one word keep their order).
//  * Otherwise the word held something else on entry (the workspace's first use, another
//    version's partials, a killed launch's word): the resolve exchanges whatever the word holds
//    for word(t, 0) until the tag is there, then adds. The stray add of the first step only
//    changed a word that was not this launch's.
//  * A warp's later claims add 1 (one atomic); the result always carries the tag.
template <class Cas, class Add>
KVLAB_HD uint64_t shared_tile_claim_first(uint64_t t, Cas&& cas, Add&& add) {
  cas(SplitArrival::kReset, SplitArrival::word(t, 0));
  return add(1);
}
template <class Load, class Cas, class Add>
KVLAB_HD uint32_t shared_tile_claim_resolve(uint64_t t, uint64_t added, Load&& load, Cas&& cas,
                                            Add&& add) {
  if (SplitArrival::tag_of(added) == t) return SplitArrival::count_of(added);
  uint64_t seen = load();
  while (SplitArrival::tag_of(seen) != t) {
    const uint64_t got = cas(seen, SplitArrival::word(t, 0));
    if (got == seen) break;
    seen = got;
  }
  return SplitArrival::count_of(add(1));
}

// Host: the tag of the next launch (thread-safe): SplitArrival::tag of a per-process sequence
// started at a random point.
inline uint64_t next_split_arrival_tag() {
  static std::atomic<uint64_t> next{std::random_device{}()};
  return SplitArrival::tag(next.fetch_add(1, std::memory_order_relaxed));
}

}  // namespace kvlab::gpu
