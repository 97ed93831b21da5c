// bulk_read.cuh: a read-ceiling kernel that moves bytes from global to shared memory with the
// Hopper bulk-copy engine (cp.async.bulk, completing on an mbarrier), the way FlashInfer-,
// FlashAttention-3- and cuDNN-class kernels stream a KV cache. Only for the bandwidth ceiling
// (gpu/bench/harness.cu, sm_90 and newer).
//
// Why it exists: the read ceiling R must be one that nothing in a run exceeds. Kernels that
// read with 16-byte LSU loads (l2_flush.cuh's body, grid-stride) top out a little below what
// a TMA-fed kernel moves on long contiguous reads (on the H100, cuDNN SDPA moved 3.11-3.13
// TB/s with R at 3.10 TB/s from the LSU kernels). A bulk copy keeps a few large contiguous
// requests per SM in flight without spending registers or issue slots on addresses, and a
// block reads whole chunks (kilobytes of consecutive addresses) instead of 16 bytes every
// grid stride, which is friendlier to DRAM pages.
//
// Shape: p [bytes] (16-byte aligned, bytes a multiple of 16) read once as chunks [ceil(bytes /
// chunk)] of `chunk` bytes (a multiple of 16, the last one shorter). Two orders: interleaved
// (ranges = 0: chunk c read by block c mod gridDim.x, so the blocks sweep one narrow window
// of the buffer together) or ranges (ranges = 1: block b reads the b-th of gridDim.x
// consecutive ranges of chunks from start to end, as attention kernels stream one (sequence,
// head) slice per CTA: as many independent streams as blocks, spread over the whole buffer). One
// warp per block; its lane 0 keeps `stages` bulk copies in flight into a ring of stages x chunk
// bytes of dynamic shared memory, one mbarrier per slot. Before a slot is reused, the copy that
// filled it must have completed (its mbarrier phase); the first word of every completed chunk is
// folded into a checksum that stays live through a never-taken store, so the copies cannot be
// dropped, and shared memory is read after the async proxy wrote it (the mbarrier wait orders it).
// The loop counters are 32-bit and the slot / phase advance by increment, so the issue loop has no
// division: its SASS (cuobjdump, sm_90) is one SYNCS.PHASECHK.TRANS64.TRYWAIT, one LDS, one
// SYNCS.ARRIVE.TRANS64 and one UBLKCP per chunk.
#pragma once

#define KVLAB_BULK_MAX_STAGES 16

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "bulk_read.cuh needs sm_90 (cp.async.bulk, mbarrier expect_tx)"
#endif

__device__ __forceinline__ unsigned kvlab_smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void kvlab_mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Arrives once on the barrier and announces `bytes` of transactions to come.
__device__ __forceinline__ void kvlab_mbar_expect(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

// Spins until the barrier's phase with parity `parity` has completed.
__device__ __forceinline__ void kvlab_mbar_wait(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// One bulk copy global -> shared of `bytes` (a multiple of 16), completing on `bar`.
__device__ __forceinline__ void kvlab_bulk_g2s(unsigned dst, const void* src, unsigned bytes,
                                               unsigned bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// Launch: <<<blocks, 32, stages * chunk bytes of dynamic shared memory>>>, stages in
// [1, KVLAB_BULK_MAX_STAGES], ranges 0 (interleaved) or 1 (a range per block).
extern "C" __global__ void __launch_bounds__(32)
    kvlab_read_bulk(const unsigned char* __restrict__ p, unsigned long long bytes, unsigned chunk,
                    unsigned stages, unsigned ranges, unsigned int* __restrict__ sink) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) unsigned long long bars[KVLAB_BULK_MAX_STAGES];
  if (threadIdx.x != 0) return;  // lane 0 alone drives the copy engine
  for (unsigned s = 0; s < stages; ++s) kvlab_mbar_init(kvlab_smem_addr(&bars[s]), 1);
  // Make the initialized barriers visible to the async proxy before copies complete on them.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  const unsigned long long nchunks = (bytes + chunk - 1) / chunk;
  unsigned acc = 0;
  unsigned k = 0;       // this block's copies so far (32-bit: no 64-bit division in the loop)
  unsigned slot = 0;    // k mod stages
  unsigned parity = 0;  // (k / stages) & 1: the phase the slot's current use completes
  const unsigned long long per_block = (nchunks + gridDim.x - 1) / gridDim.x;
  const unsigned long long first = ranges ? blockIdx.x * per_block : blockIdx.x;
  const unsigned long long end =
      ranges ? (first + per_block < nchunks ? first + per_block : nchunks) : nchunks;
  const unsigned long long step = ranges ? 1 : gridDim.x;
  for (unsigned long long c = first; c < end; c += step, ++k) {
    const unsigned bar = kvlab_smem_addr(&bars[slot]);
    unsigned char* dst = ring + static_cast<size_t>(slot) * chunk;
    if (k >= stages) {  // the slot's previous copy (the phase before this one) must have landed
      kvlab_mbar_wait(bar, parity ^ 1u);
      acc ^= *reinterpret_cast<const unsigned*>(dst);
    }
    const unsigned long long off = c * chunk;
    const unsigned n = static_cast<unsigned>(bytes - off < chunk ? bytes - off : chunk);
    kvlab_mbar_expect(bar, n);
    kvlab_bulk_g2s(kvlab_smem_addr(dst), p + off, n, bar);
    if (++slot == stages) {
      slot = 0;
      parity ^= 1u;
    }
  }
  // Drain: each slot's last copy (slot t was used uses = ceil((k - t) / stages) times).
  for (unsigned t = 0; t < stages && t < k; ++t) {
    const unsigned uses = (k - t + stages - 1) / stages;
    kvlab_mbar_wait(kvlab_smem_addr(&bars[t]), (uses - 1) & 1u);
    acc ^= *reinterpret_cast<const unsigned*>(ring + static_cast<size_t>(t) * chunk);
  }
  if (acc == 0x9E3779B9u) sink[0] = acc;
}
