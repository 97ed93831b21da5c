// launch_floor.cu: the floor kernels, their priming kernel and their case (launch_floor.h).
// [link_i] uint32 [kFloorChainBufferBytes / 4], [tail] uint4 [kFloorTailBufferBytes / 16],
// [out] uint32 [kFloorTailThreads] (+ guards), filled with 0xFFFFFFFF before a check.
#include "gpu/bench/launch_floor.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gpu/bench/harness.h"
#include "gpu/core/cuda_check.h"
#include "reference/core/error.h"

namespace kvlab::gpu::bench {
namespace {

constexpr int kTailLoads = kFloorTailBytes / 16 / kFloorTailThreads;  // 8 per thread
constexpr uint32_t kPageVecs = kFloorTailBytes / 16;
constexpr uint32_t kPages = static_cast<uint32_t>(kFloorTailBufferBytes / kFloorTailBytes);
constexpr uint32_t kLinkWords = static_cast<uint32_t>(kFloorChainBufferBytes / 4);
constexpr uint64_t kPrimeStride = 32 << 10;  // pages-primed: the word this far away (XOR)

// Does nothing: what remains of a timed call is the launch and the two events around it.
__global__ void floor_empty_kernel() {}

// Thread 0 walks the chain (each load's address needs the previous load's value: the loads
// cannot overlap, like seq_len -> block-table entry -> page). Plain ld.global, as decode's
// metadata loads are. Without the tail, thread 0 writes the chain's end to out[0]; with it,
// the block reads the page the chain names, every thread its 8 vectors in flight at once,
// and writes the sum of its words (kept live, and checked by validate()).
template <int kChain, bool kTail>
__global__ void floor_chain_kernel(const uint32_t* link0, const uint32_t* link1,
                                   const uint32_t* link2, uint32_t start, const uint4* tail,
                                   uint32_t* out) {
  __shared__ uint32_t page;
  if (threadIdx.x == 0) {
    uint32_t v = start;
    if constexpr (kChain >= 1) v = link0[v];
    if constexpr (kChain >= 2) v = link1[v];
    if constexpr (kChain >= 3) v = link2[v];
    if constexpr (kTail)
      page = v;
    else
      out[0] = v;
  }
  if constexpr (kTail) {
    __syncthreads();
    const uint4* p = tail + static_cast<uint64_t>(page) * kPageVecs + threadIdx.x;
    uint4 x[kTailLoads];
#pragma unroll
    for (int u = 0; u < kTailLoads; ++u) x[u] = p[u * kFloorTailThreads];
    uint32_t sum = 0;
#pragma unroll
    for (int u = 0; u < kTailLoads; ++u) sum += x[u].x + x[u].y + x[u].z + x[u].w;
    out[threadIdx.x] = sum;
  }
}

// The untimed priming: lane i < words loads word[i]; with a page, 128 threads read its 16 KiB.
// The loads stay live through a store that never happens in practice (sink is its own word).
struct PrimeTargets {
  const uint32_t* word[kFloorMaxChain];
  int words;
  const uint4* page;  // null: none
};
__global__ void floor_prime_kernel(PrimeTargets t, uint32_t* sink) {
  uint32_t acc = 0;
  if (static_cast<int>(threadIdx.x) < t.words) acc += *t.word[threadIdx.x];
  if (t.page) {
#pragma unroll
    for (int u = 0; u < kTailLoads; ++u) {
      const uint4 x = t.page[threadIdx.x + u * kFloorTailThreads];
      acc += x.x + x.y + x.z + x.w;
    }
  }
  if (acc == 0xFFFFFFFFu) *sink = acc;
}

// Word `w` of a link or vector `v` of the tail after the buffers' fill (fill_words: word j
// holds j + 1) and before the chain words are written.
uint32_t filled_word(uint64_t w) {
  return static_cast<uint32_t>(w + 1);
}

// An address moved kPrimeStride away inside its 64 KiB-aligned block of the address space,
// hence inside the same 2 MiB page (the GPU's page of a large cudaMalloc); a position at least
// 64 KiB from either end of its buffer stays inside the buffer.
template <typename T>
const T* same_page_elsewhere(const T* p) {
  return reinterpret_cast<const T*>(reinterpret_cast<uintptr_t>(p) ^ kPrimeStride);
}

}  // namespace

LaunchFloorCase::LaunchFloorCase(FloorKernel k, uint64_t seed) : k_(k) {
  if (k.chain < 0 || k.chain > kFloorMaxChain)
    throw Error("launch floor: chain must be in [0, " + std::to_string(kFloorMaxChain) + "], got " +
                std::to_string(k.chain));
  std::mt19937_64 rng(seed);
  // Positions at least 64 KiB from either end, so that the word 32 KiB away stays inside.
  std::uniform_int_distribution<uint32_t> word_at((64 << 10) / 4, kLinkWords - (64 << 10) / 4 - 1);
  std::uniform_int_distribution<uint32_t> page_at(4, kPages - 5);
  for (int i = 0; i < kFloorMaxChain; ++i) word_[i] = word_at(rng);
  page_ = page_at(rng);
  for (int i = 0; i < k.chain; ++i) {
    link_[i].allocate(kFloorChainBufferBytes);
    fill_words(link_[i].data(), kFloorChainBufferBytes);
    // Link i holds, at the word the chain reads, the index into link i + 1, the last the page.
    const uint32_t next = i + 1 < k.chain ? word_[i + 1] : page_;
    KVLAB_CUDA_CHECK(
        cudaMemcpy(link_[i].as<uint32_t>() + word_[i], &next, 4, cudaMemcpyHostToDevice));
  }
  start_ = k.chain > 0 ? word_[0] : page_;
  if (k.tail) {
    tail_.allocate(kFloorTailBufferBytes);
    fill_words(tail_.data(), kFloorTailBufferBytes);
  }
  elsewhere_.allocate(kFloorChainBufferBytes);
  fill_words(elsewhere_.data(), kFloorChainBufferBytes);
  out_.allocate(kFloorTailThreads * 4, 256);
  sink_.allocate(4);
  sink_.fill_bytes(0);
}

void LaunchFloorCase::launch(cudaStream_t s) const {
  const uint32_t* l0 = link_[0].as<uint32_t>();
  const uint32_t* l1 = link_[1].as<uint32_t>();
  const uint32_t* l2 = link_[2].as<uint32_t>();
  const uint4* t = tail_.as<uint4>();
  uint32_t* o = out_.as<uint32_t>();
  const int threads = k_.tail ? kFloorTailThreads : 32;
#define KVLAB_FLOOR_LAUNCH(C, T) \
  floor_chain_kernel<C, T><<<1, threads, 0, s>>>(l0, l1, l2, start_, t, o)
  switch (k_.chain * 2 + (k_.tail ? 1 : 0)) {
    case 0:
      floor_empty_kernel<<<1, 32, 0, s>>>();
      break;
    case 1:
      KVLAB_FLOOR_LAUNCH(0, true);
      break;
    case 2:
      KVLAB_FLOOR_LAUNCH(1, false);
      break;
    case 3:
      KVLAB_FLOOR_LAUNCH(1, true);
      break;
    case 4:
      KVLAB_FLOOR_LAUNCH(2, false);
      break;
    case 5:
      KVLAB_FLOOR_LAUNCH(2, true);
      break;
    case 6:
      KVLAB_FLOOR_LAUNCH(3, false);
      break;
    case 7:
      KVLAB_FLOOR_LAUNCH(3, true);
      break;
    default:
      throw Error("launch floor: no kernel for chain " + std::to_string(k_.chain));
  }
#undef KVLAB_FLOOR_LAUNCH
  KVLAB_CUDA_CHECK(cudaGetLastError());
}

void LaunchFloorCase::prime(FloorPrime p, cudaStream_t s) const {
  if (p == FloorPrime::kNone) return;
  PrimeTargets t{};
  const bool lines = p == FloorPrime::kLines;
  const uint32_t* other = elsewhere_.as<uint32_t>();
  for (int i = 0; i < k_.chain; ++i) {
    const uint32_t* w = link_[i].as<uint32_t>() + word_[i];
    t.word[i] = p == FloorPrime::kElsewhere ? other + word_[i] : lines ? w : same_page_elsewhere(w);
  }
  t.words = k_.chain;
  if (k_.tail) {
    const uint4* pg = tail_.as<uint4>() + uint64_t{page_} * kPageVecs;
    // elsewhere: the 16 KiB at 1 MiB into the other allocation
    t.page = p == FloorPrime::kElsewhere ? elsewhere_.as<uint4>() + (1 << 20) / 16
             : lines                     ? pg
                                         : same_page_elsewhere(pg);
  }
  floor_prime_kernel<<<1, kFloorTailThreads, 0, s>>>(t, sink_.as<uint32_t>());
  KVLAB_CUDA_CHECK(cudaGetLastError());
}

std::string LaunchFloorCase::validate() {
  out_.fill_bytes(0xFF);
  launch(nullptr);
  KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint32_t> got = out_.download<uint32_t>();
  std::vector<uint32_t> want(kFloorTailThreads, 0xFFFFFFFFu);  // untouched unless written
  if (k_.tail) {
    for (int t = 0; t < kFloorTailThreads; ++t) {
      uint32_t sum = 0;
      for (int u = 0; u < kTailLoads; ++u) {
        const uint64_t v = uint64_t{page_} * kPageVecs + t + u * kFloorTailThreads;
        for (int w = 0; w < 4; ++w) sum += filled_word(4 * v + w);
      }
      want[t] = sum;
    }
  } else if (k_.chain > 0) {
    want[0] = page_;
  }
  for (int t = 0; t < kFloorTailThreads; ++t)
    if (got[t] != want[t])
      return "output word " + std::to_string(t) + " is " + std::to_string(got[t]) + ", expected " +
             std::to_string(want[t]) +
             (k_.tail ? " (sum of the page's words)" : " (the chain's end)");
  if (!out_.guards_intact()) return "a guard region around the output was overwritten";
  return "";
}

}  // namespace kvlab::gpu::bench
