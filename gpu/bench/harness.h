// harness.h: the CUDA timing harness and the bandwidth ceilings (host-includable: no device
// code here). The rules of a timing are in reference/core/timing.h; the flush kernel in
// gpu/bench/l2_flush.cuh.
//
// Ceilings, measured on the device in the same run, each the best of several kernels, so
// that no kernel of the run should beat them:
//   read R: 16-byte loads (ld.global.cg, plain ld.global, non-coherent ld.global.nc) x
//           loads per thread per iteration (2, 4, 8) x blocks per SM (1, 2, 4, as many as
//           fit), grid-stride over one buffer, cold L2 (ptxas keeps at most four 16-byte
//           loads of a thread in flight, rotating four register quads, whatever the unroll:
//           the SASS of depth 8 shows it, so a deeper unroll adds no bytes in flight; at full
//           occupancy that is 128 KiB per SM, far above what HBM latency needs); and bulk copies
//           global -> shared (cp.async.bulk on an mbarrier, gpu/bench/bulk_read.cuh: chunks of 4-32
//           KiB, 2-16 in flight per block, 1 or 2 blocks per SM), the way TMA-fed attention kernels
//           read;
//   copy C: cudaMemcpyAsync device to device and a 16-byte load/store kernel (2, 4 in flight;
//           2, 4 or as many blocks per SM as fit), counting read + write bytes, cold L2.
// A ceiling is the best bandwidth over its kernels, each taken at the fast edge of its noise
// band (bytes / first-quartile time): a row is judged against it with the slow edge of its own
// band (bytes / third-quartile time, experiments/bench record_timing), so noise alone never
// makes a row "beat the ceiling".
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "reference/core/timing.h"

namespace kvlab::gpu::bench {

// The types and rules of reference/core/timing.h, under the harness's names.
using kvlab::L2Flush;
using kvlab::sampling_done;
using kvlab::summarize;
using kvlab::Timing;
using kvlab::TimingOptions;
using kvlab::to_string;

// The stream time_kernel times on when the caller gives none: one non-blocking stream per
// device for the whole process, created on first use and kept to the end, so that every timing
// of a sweep runs on the same stream (the harness used to create and destroy one per timing).
// Not a noise fix: on the H100 (session 15) a cold 1 MiB read timed 30-40 times in a row spanned
// 0-7 event ticks (32 ns) on this stream and 5-12 on a new stream each, overlapping
// (gpu/README.md, "Measuring"). Not for timing from several host threads at once (their
// flushes and events would interleave on it).
cudaStream_t timing_stream();

// Times `launch` (which enqueues the work once on the given stream, or on timing_stream()
// when `stream` is null) by the rules of timing.h. Throws kvlab::CudaError on CUDA failures
// (including a launch error inside `launch`).
Timing time_kernel(const std::function<void(cudaStream_t)>& launch, const TimingOptions& opt,
                   cudaStream_t stream = nullptr);

// The same loop with an explicit flush between calls (used when opt.cold_l2; kNone and kSelf
// flush nothing) of flush_bytes (0: l2_flush_bytes of the device). For the flush test and
// its controls; results go through the overload above. after_flush (if set) is enqueued after
// every flush, warm-up included, and before the start event, outside any graph: untimed work
// that sets up the cache state of a control (launch_floor.h's primed rows).
Timing time_kernel(const std::function<void(cudaStream_t)>& launch, const TimingOptions& opt,
                   L2Flush flush, uint64_t flush_bytes, cudaStream_t stream,
                   const std::function<void(cudaStream_t)>& after_flush = nullptr);

// The current device's L2 size and the bytes the flush reads for it (l2_flush.cuh's rule).
uint64_t device_l2_bytes();
uint64_t l2_flush_bytes(uint64_t l2_bytes);

// One bandwidth kernel: a read of a buffer or a copy between two.
enum class MemOp { kRead, kCopy };
enum class MemLoad {
  kCg,      // read: ld.global.cg (depth 4 at the flush grid is exactly the flush kernel)
  kPlain,   // read: ld.global; copy: ld.global + st.global
  kNc,      // read: ld.global.nc
  kMemcpy,  // copy: cudaMemcpyAsync device to device
  kBulk     // read: cp.async.bulk global -> shared on an mbarrier (bulk_read.cuh)
};
struct MemKernel {
  MemOp op = MemOp::kRead;
  MemLoad load = MemLoad::kPlain;
  int depth = 4;             // 16-byte loads in flight per thread per iteration (kernels);
                             // bulk: copies in flight per block (its ring's stages)
  int blocks_per_sm = 0;     // 0: as many as fit (occupancy; bulk: 1)
  int chunk_kib = 0;         // bulk: bytes of one copy, in KiB (others: unused, 0)
  bool ranges = false;       // bulk: each block reads its own contiguous range (else the
                             // blocks interleave chunk by chunk); see bulk_read.cuh
  int granule = 0;           // reads: > 0 reads the buffer as granules of this many bytes in
                             // a seeded random order (scatter_read.cuh; 0: contiguous). Never a
                             // candidate of R: a scattered row is its own ceiling R_scatter(G)
  std::string name() const;  // e.g. "read_nc_d8_b4", "read_bulk_c16k_d8_b1",
                             // "read_bulk_ranges_c16k_d8_b1", "copy_memcpy",
                             // "read_scatter_g256_nc_d4_bmax", "read_scatter_g4096_bulk_d8_b4"
};
const char* to_string(MemOp op);
const char* to_string(MemLoad load);
// "" when the kernel exists (compiled depths: read 2, 4, 8; copy 2, 4; bulk: chunk a
// power of two in [1, 64] KiB, depth in [1, 16], the ring of every block of an SM within
// kBulkSmemPerSm; scattered reads: granule a multiple of 16 bytes, loads nc or plain at depth 4
// or 8, or bulk (chunk_kib 0: one copy per granule) at depth [1, 16] with up to
// kScatterBulkBlocksPerSm blocks per SM, the rings within kBulkSmemPerSm), else why not.
std::string mem_kernel_unsupported(const MemKernel& k);
constexpr int kBulkSmemPerSm = 192 << 10;    // bulk rings of one SM: at most this many bytes
constexpr int kScatterBulkBlocksPerSm = 32;  // the most resident blocks of an sm_90 SM
// The kernels a ceiling is the best of: contiguous reads only (granule 0). Scattered reads
// move no more than contiguous ones and are judged against R, never part of it.
std::vector<MemKernel> ceiling_kernels(MemOp op);
// Granules of a scattered read of `bytes` (the last one may be shorter); 0 for contiguous.
uint64_t scatter_granules(const MemKernel& k, uint64_t bytes);
// Enqueues one pass over `bytes` (a multiple of 16): read src, or copy src to dst. `sink`
// (4 bytes, reads only) receives nothing in practice; it keeps the loads live. Scattered reads
// (k.granule > 0) need `order` [scatter_granules(k, bytes)]: the permutation of the granules
// in the order they are read (gpu::shuffled_page_list's, as decode's page tables).
void launch_mem_kernel(const MemKernel& k, const void* src, void* dst, uint64_t bytes,
                       unsigned int* sink, cudaStream_t stream, const int32_t* order = nullptr);
// Tests: one scattered read of src [bytes] in `order` by k's kernel in its checking twin,
// which adds up what it read. Returns {16-byte vectors read, sum of the 32-bit words, sum of
// their squares, sum over the granules of (place in `order` + 1) x their words} (mod 2^64): a
// buffer read exactly once gives bytes / 16 and its own sums, read in `order` the fourth too.
std::array<uint64_t, 4> scatter_read_checksum(const MemKernel& k, const void* src, uint64_t bytes,
                                              const int32_t* order);

// Diagnostic: times the flush kernel's read of p [bytes] (blocks_per_sm blocks per SM) by
// time_kernel's rules with l2_flush.cuh's stamped twin, which also measures every call inside
// the kernel (%globaltimer, first block start to last block end). Returns the event timing;
// *kernel_us gets the in-kernel durations of every call, warm-up first, in order.
Timing time_read_stamped(const void* p, uint64_t bytes, int blocks_per_sm, const TimingOptions& opt,
                         std::vector<double>* kernel_us, cudaStream_t stream = nullptr);

// Fills p [bytes / 4] with the words 1, 2, 3, ... (distinct, non-zero: never time on zeros).
void fill_words(void* p, uint64_t bytes, cudaStream_t stream = nullptr);

struct KernelBandwidth {
  MemKernel kernel;
  Timing timing;
  double bytes_per_s = 0;  // read: bytes / median; copy: 2 x bytes / median (<= the ceiling)
};

struct Ceilings {
  uint64_t bytes = 0;           // buffer size used
  double read_bytes_per_s = 0;  // R: the best read kernel, bytes / its q1 time
  double copy_bytes_per_s = 0;  // C: the best copy, (read + write) / its q1 time
  Timing read, copy;            // the timings of the best kernels
  MemKernel read_best, copy_best;
  std::vector<KernelBandwidth> kernels;  // every kernel measured
};

// Measures both ceilings with buffers of `bytes` (0: min(4 GiB, free memory / 4): on an H100
// the bulk reads move 0.3 % more, the 16-byte loads 0.8 % more, on 4 GiB than on 1 GiB, and a
// 4 GiB row must not beat a 1 GiB ceiling), cold L2,
// with opt's statistics (at most 50 samples and 0.5 s per kernel).
Ceilings measure_ceilings(const TimingOptions& opt, uint64_t bytes = 0);

}  // namespace kvlab::gpu::bench
