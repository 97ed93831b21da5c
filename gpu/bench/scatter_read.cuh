// scatter_read.cuh: scattered-granule reads, the ceiling of a paged read with small pages
// (gpu/bench/harness.cu launches them; bandwidth rows "read_scatter_g<G>_...").
//
// Why they exist: with block_size 1 a BF16 d128 decode reads each token's K and V rows as
// 256-byte pieces scattered over the pool in the page table's seeded random order; at block 16
// it reads 4 KiB runs. Whether HBM itself gives as much for 256-byte pieces in random order as
// for long runs decides whether a page-size gap is the kernel's or the memory's. These kernels
// read a buffer cut into granules of G bytes (a multiple of 16; the last one shorter when G does
// not divide the buffer) in one seeded permutation of the granules (order[j] is the granule read
// j-th; the same permutation gpu/core/device_tables.h's shuffled_page_list gives decode's page
// tables), every byte once, under the same flush and timing rules as the contiguous ceilings.
// They are NOT candidates of the read ceiling R (gpu::bench::ceiling_kernels): R is the best
// contiguous read, and a scattered row is its own ceiling R_scatter(G), judged against R.
//
// Two kernels, the two fastest ways the contiguous ceiling reads:
//   kvlab_read_scatter<kLoad, kDepth, kCheck>: 16-byte loads, kDepth in flight per thread,
//     grid-stride over the logical vectors [granules x G / 16]: vector i is the (i mod V)-th of
//     granule order[i / V] (V = G / 16), so a warp's lanes read consecutive 16-byte pieces of
//     one granule (G >= 512: a warp covers 512 contiguous bytes; G = 256: two granules) and the
//     grid sweeps the permutation in order. The index word is read by every lane that needs it
//     (the lanes of a granule share one address: one request); its 4 bytes per granule are
//     counted in the row's bytes. Vectors past the buffer's end (the short last granule) are
//     skipped. The division is 32-bit (the kind refuses buffers of 2^32 vectors or more).
//   kvlab_read_bulk_scatter<kCheck>: one bulk copy (cp.async.bulk, bulk_read.cuh) per granule
//     into a ring of `stages` x G bytes of shared memory, one warp per block, each block a
//     contiguous range of the permutation (its index words are one coalesced 128-byte load per
//     32 copies, the next batch fetched while the current one is issued); lane 0 issues, every
//     lane waits on the slot's mbarrier before the slot is consumed and reused.
// kCheck = true (tests only, never timed): instead of keeping the loads live through a
// never-taken store, every thread adds what it read to check[4] = {16-byte vectors read, sum of
// the 32-bit words, sum of their squares, sum of (j + 1) x the words of the j-th granule read}
// (mod 2^64), which the host compares with the buffer's. The first three hold for any read of
// every byte once; the fourth also for the order (a kernel that read the granules contiguously,
// ignoring `order`, would pass the first three).
#pragma once

#include "gpu/bench/bulk_read.cuh"
#include "gpu/bench/l2_flush.cuh"

// Adds one 16-byte vector of the j-th granule read (position = j + 1) to the check sums s[4].
__device__ __forceinline__ void kvlab_scatter_fold(const uint4& v, unsigned long long position,
                                                   unsigned long long* s) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
  unsigned long long words = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    words += w[k];
    s[2] += static_cast<unsigned long long>(w[k]) * w[k];
  }
  s[0] += 1;
  s[1] += words;
  s[3] += position * words;
}

__device__ __forceinline__ unsigned kvlab_ld_nc_u32(const unsigned* p) {
  unsigned v;
  asm("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

// p [n 16-byte vectors]; order [granules] (a permutation of 0 .. granules - 1); vpg = G / 16.
// Launch: <<<blocks, KVLAB_L2_FLUSH_THREADS>>>, granules * vpg < 2^32.
template <int kLoad, int kDepth, bool kCheck>
__global__ void __launch_bounds__(KVLAB_L2_FLUSH_THREADS)
    kvlab_read_scatter(const uint4* __restrict__ p, unsigned long long n,
                       const unsigned* __restrict__ order, unsigned granules, unsigned vpg,
                       unsigned int* __restrict__ sink, unsigned long long* __restrict__ check) {
  const unsigned long long total = static_cast<unsigned long long>(granules) * vpg;
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  unsigned long long sums[4] = {0, 0, 0, 0};
  // The physical vector of logical vector li (n when it lies past the buffer's end).
  auto where = [&](unsigned li) -> unsigned long long {
    const unsigned g = li / vpg;
    const unsigned long long v =
        static_cast<unsigned long long>(kvlab_ld_nc_u32(order + g)) * vpg + (li - g * vpg);
    return v < n ? v : n;
  };
  for (; i + (kDepth - 1) * stride < total; i += kDepth * stride) {
    unsigned long long at[kDepth];
#pragma unroll
    for (int u = 0; u < kDepth; ++u) at[u] = where(static_cast<unsigned>(i + u * stride));
    uint4 v[kDepth];
#pragma unroll
    for (int u = 0; u < kDepth; ++u)
      v[u] = at[u] < n ? kvlab_load16<kLoad>(p + at[u]) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      if (kCheck) {
        if (at[u] < n) kvlab_scatter_fold(v[u], (i + u * stride) / vpg + 1, sums);
      } else {
        acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
      }
    }
  }
  for (; i < total; i += stride) {
    const unsigned long long at = where(static_cast<unsigned>(i));
    if (at >= n) continue;
    const uint4 v = kvlab_load16<kLoad>(p + at);
    if (kCheck)
      kvlab_scatter_fold(v, i / vpg + 1, sums);
    else
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (kCheck) {
    for (int k = 0; k < 4; ++k) atomicAdd(&check[k], sums[k]);
  } else if (acc == 0x9E3779B9u) {
    sink[0] = acc;
  }
}

// p [bytes] (bytes a multiple of 16); order [granules]; granule bytes G (a multiple of 16).
// Launch: <<<blocks, 32, stages * G bytes of dynamic shared memory>>>, stages in
// [1, KVLAB_BULK_MAX_STAGES].
template <bool kCheck>
__global__ void __launch_bounds__(32)
    kvlab_read_bulk_scatter(const unsigned char* __restrict__ p, unsigned long long bytes,
                            const unsigned* __restrict__ order, unsigned granules, unsigned granule,
                            unsigned stages, unsigned int* __restrict__ sink,
                            unsigned long long* __restrict__ check) {
  extern __shared__ __align__(128) unsigned char scatter_ring[];
  __shared__ __align__(8) unsigned long long bars[KVLAB_BULK_MAX_STAGES];
  const unsigned lane = threadIdx.x;
  if (lane == 0)
    for (unsigned s = 0; s < stages; ++s) kvlab_mbar_init(kvlab_smem_addr(&bars[s]), 1);
  // The initialized barriers visible to the async proxy and to the other lanes.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncwarp();
  const unsigned per_block = (granules + gridDim.x - 1) / gridDim.x;
  const unsigned first = blockIdx.x * per_block < granules ? blockIdx.x * per_block : granules;
  const unsigned end = first + per_block < granules ? first + per_block : granules;
  unsigned acc = 0;
  unsigned long long sums[4] = {0, 0, 0, 0};
  unsigned size_of_slot[KVLAB_BULK_MAX_STAGES];      // bytes of each slot's copy in flight
  unsigned position_of_slot[KVLAB_BULK_MAX_STAGES];  // its granule's place in the order + 1
  // Consumes slot t (all lanes, after its copy landed): the check sums every 16-byte vector of
  // the copy's n bytes; the timed kernel folds lane 0's first word (the copy must not be dropped).
  auto consume = [&](unsigned t, unsigned n) {
    const unsigned char* src = scatter_ring + static_cast<size_t>(t) * granule;
    if (kCheck) {
      for (unsigned o = lane * 16; o < n; o += 32 * 16)
        kvlab_scatter_fold(*reinterpret_cast<const uint4*>(src + o), position_of_slot[t], sums);
    } else if (lane == 0) {
      acc ^= *reinterpret_cast<const unsigned*>(src);
    }
  };
  unsigned k = 0, slot = 0, parity = 0;
  unsigned next = first + lane < end ? kvlab_ld_nc_u32(order + first + lane) : 0;
  for (unsigned base = first; base < end; base += 32) {
    const unsigned mine = next;
    const unsigned count = end - base < 32 ? end - base : 32;
    if (base + 32 + lane < end) next = kvlab_ld_nc_u32(order + base + 32 + lane);
    for (unsigned j = 0; j < count; ++j, ++k) {
      const unsigned g = __shfl_sync(0xffffffffu, mine, j);
      const unsigned bar = kvlab_smem_addr(&bars[slot]);
      if (k >= stages) {  // the slot's previous copy must have landed before it is reused
        kvlab_mbar_wait(bar, parity ^ 1u);
        consume(slot, size_of_slot[slot]);
        __syncwarp();
        if (kCheck) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      }
      const unsigned long long off = static_cast<unsigned long long>(g) * granule;
      const unsigned n = static_cast<unsigned>(bytes - off < granule ? bytes - off : granule);
      size_of_slot[slot] = n;
      position_of_slot[slot] = base + j + 1;
      if (lane == 0) {
        kvlab_mbar_expect(bar, n);
        kvlab_bulk_g2s(kvlab_smem_addr(scatter_ring + static_cast<size_t>(slot) * granule), p + off,
                       n, bar);
      }
      if (++slot == stages) {
        slot = 0;
        parity ^= 1u;
      }
    }
  }
  // Drain: each slot's last copy (slot t was used ceil((k - t) / stages) times).
  for (unsigned t = 0; t < stages && t < k; ++t) {
    const unsigned uses = (k - t + stages - 1) / stages;
    kvlab_mbar_wait(kvlab_smem_addr(&bars[t]), (uses - 1) & 1u);
    consume(t, size_of_slot[t]);
  }
  if (kCheck) {
    for (int c = 0; c < 4; ++c) atomicAdd(&check[c], sums[c]);
  } else if (acc == 0x9E3779B9u) {
    sink[0] = acc;
  }
}
