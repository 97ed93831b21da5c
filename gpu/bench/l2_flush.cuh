// l2_flush.cuh: THE cold-L2 flush of every timing in kvlab, and the read body of the
// bandwidth-ceiling kernels. One source for two compilers: gpu/bench/harness.cu includes it
// (nvcc), experiments/peers/peer_timer.py compiles this file's text with CuPy's RawModule
// (NVRTC) and reads the KVLAB_L2_FLUSH_* constants below from it, so kvlab and its peers
// flush with the same kernel, the same grid and the same bytes. Self-contained on purpose:
// no includes, only built-in types, loads written as PTX so both compilers emit the same
// instructions.
//
// Why reads that allocate in L2 (ld.global.cg): a timed call is cold when none of its bytes
// is in L2. Streaming (evict-first, ld.global.cs) loads are inserted at the eviction end of
// a set, so a flush made of them evicts mostly its own lines and leaves much of the previous
// call's data resident (measured on an H100: 7-17 % too fast below ~40 MB). Loads that
// allocate normally replace lines in the usual order. The buffer is
// KVLAB_L2_FLUSH_L2_MULTIPLE x the L2 size: the replacement policy is not exact LRU, and the
// H100's L2 is two partitions whose lines are homed by address hash, so one L2's worth of
// reads does not displace every line. Reads leave clean lines (no write-back of flush data
// inside the timed call), and the dirty lines a timed call left behind are written back
// during the flush, not during the next timed call. tests/gpu/test_l2_flush.cu proves the
// result on the device: a small working set read right after this flush runs no faster than
// the DRAM ceiling allows, and the same test flags a missing or streaming flush.
//
// Launch: grid = SM count x KVLAB_L2_FLUSH_BLOCKS_PER_SM, KVLAB_L2_FLUSH_THREADS threads;
// flush bytes = max(KVLAB_L2_FLUSH_L2_MULTIPLE x L2 bytes, KVLAB_L2_FLUSH_MIN_MIB MiB),
// a multiple of 16; n = bytes / 16 vectors [n] of uint4, filled with non-zero words.
//
// Rotation: the buffer is KVLAB_L2_FLUSH_ROTATE_SPAN_MIB MiB longer than one flush, and flush
// number k (k = 0, 1, ... per timer) reads its n vectors from byte offset
// (k x KVLAB_L2_FLUSH_ROTATE_STEP_KIB KiB) mod the span. Why: the time of a small cold call
// depends by a few percent on where the flush's buffer lies relative to the call's (on an
// H100 a 1 MiB read after the flush took 4.06 to 4.38 us with the same timer and a different
// flush buffer; 16 MiB and more did not move). With one fixed window, each timer's median is
// one draw of that placement; rotating the window makes it an average over placements, the
// same for every timer that follows this rule (gpu/bench and experiments/peers/peer_timer.py).
#pragma once

#define KVLAB_L2_FLUSH_THREADS 256
#define KVLAB_L2_FLUSH_BLOCKS_PER_SM 8
#define KVLAB_L2_FLUSH_L2_MULTIPLE 4
#define KVLAB_L2_FLUSH_MIN_MIB 64
#define KVLAB_L2_FLUSH_DEPTH 4
#define KVLAB_L2_FLUSH_ROTATE_SPAN_MIB 32
#define KVLAB_L2_FLUSH_ROTATE_STEP_KIB 1088
// The stream hold's patience (kvlab_hold_stream below): the host enqueues a sample in
// microseconds; a hold still waiting after this long means the host is waiting on the stream.
#define KVLAB_HOLD_TIMEOUT_NS 20000000

// The cache operator of a 16-byte global load.
#define KVLAB_LOAD_CG 0     // ld.global.cg: cache in L2 only (allocating): the flush's
#define KVLAB_LOAD_CS 1     // ld.global.cs: evict-first streaming (the flush test's control)
#define KVLAB_LOAD_PLAIN 2  // ld.global: the default
#define KVLAB_LOAD_NC 3     // ld.global.nc: the non-coherent (read-only) path

template <int kLoad>
__device__ __forceinline__ uint4 kvlab_load16(const uint4* p) {
  uint4 v;
  if (kLoad == KVLAB_LOAD_CG)
    asm("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
  else if (kLoad == KVLAB_LOAD_CS)
    asm("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
  else if (kLoad == KVLAB_LOAD_NC)
    asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
  else
    asm("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
  return v;
}

// Reads p[0, n) once, grid-stride. Each thread keeps kDepth independent 16-byte loads in
// flight per iteration (memory-level parallelism is what saturates HBM); the XOR of every
// loaded word stays live through a practically-never-taken store, so the compiler cannot
// drop the loads and no write traffic competes with the reads.
template <int kLoad, int kDepth>
__device__ __forceinline__ void kvlab_read_body(const uint4* __restrict__ p, unsigned long long n,
                                                unsigned int* __restrict__ sink) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned int acc = 0;
  for (; i + (kDepth - 1) * stride < n; i += kDepth * stride) {
    uint4 v[kDepth];
#pragma unroll
    for (int u = 0; u < kDepth; ++u) v[u] = kvlab_load16<kLoad>(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < kDepth; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = kvlab_load16<kLoad>(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) sink[0] = acc;
}

// The flush: p [n] uint4, read once with allocating loads.
extern "C" __global__ void __launch_bounds__(KVLAB_L2_FLUSH_THREADS)
    kvlab_l2_flush(const uint4* __restrict__ p, unsigned long long n,
                   unsigned int* __restrict__ sink) {
  kvlab_read_body<KVLAB_LOAD_CG, KVLAB_L2_FLUSH_DEPTH>(p, n, sink);
}

// The same read with evict-first loads: NOT a flush (it leaves the previous call's lines in
// L2). Kept only so the flush test can show that it detects a bad flush.
extern "C" __global__ void __launch_bounds__(KVLAB_L2_FLUSH_THREADS)
    kvlab_l2_flush_streaming(const uint4* __restrict__ p, unsigned long long n,
                             unsigned int* __restrict__ sink) {
  kvlab_read_body<KVLAB_LOAD_CS, KVLAB_L2_FLUSH_DEPTH>(p, n, sink);
}

// The stream hold (reference/core/timing.h, hold_stream): one thread spins until the host
// writes a non-zero word to `release` (mapped host memory) after enqueueing a whole timed
// sample behind this kernel, so that the flush, the events and the call then run back to back
// on the GPU and the host's launch time never falls between the events. Gives up after
// timeout_ns of the global timer (the host is waiting on the stream itself) and says so in
// *timed_out (mapped host memory too). Volatile loads: each poll reads the host's word anew.
extern "C" __global__ void kvlab_hold_stream(const volatile int* release, unsigned long long timeout_ns,
                                             volatile int* timed_out) {
  unsigned long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (*release == 0) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > timeout_ns) {
      *timed_out = 1;
      return;
    }
    __nanosleep(256);
  }
}

// A diagnostic twin of the flush kernel's read: the same body, plus each call's duration
// measured inside the kernel with the global nanosecond timer, from the first block's start
// to the last block's end. stamps [2]: zero before the call; afterwards stamps[0] holds ~(the
// earliest start) and stamps[1] the latest end (both folded with atomicMax, so one memset to
// zero prepares them). Event time minus in-kernel time is what launch and event overhead add,
// which tells a timer's fixed cost from the memory's.
__device__ __forceinline__ unsigned long long kvlab_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

extern "C" __global__ void __launch_bounds__(KVLAB_L2_FLUSH_THREADS)
    kvlab_read_stamped(const uint4* __restrict__ p, unsigned long long n,
                       unsigned int* __restrict__ sink, unsigned long long* __restrict__ stamps) {
  if (threadIdx.x == 0) atomicMax(&stamps[0], ~kvlab_globaltimer());
  kvlab_read_body<KVLAB_LOAD_CG, KVLAB_L2_FLUSH_DEPTH>(p, n, sink);
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(&stamps[1], kvlab_globaltimer());
}
