// gpu_test_util.cuh: shared helpers of the GPU tests (one gpu_tests binary).
//
//   KVLAB_SKIP_WITHOUT_GPU();                 // first line of every GPU test
//   ref::PagedCase c = ref::make_paged_case(spec);
//   DeviceCase d(c);                           // the case's host buffers, byte for byte
//   GpuDecodeRun r = run_gpu_decode(c, d, version);
//
// Device buffers are thrust::device_vector. Outputs mirror reference/attention/
// guard_region.h's GuardedBuffer: the whole allocation (canary guards + NaN-filled payload)
// is copied to the device, the kernel writes the payload, and the allocation comes back to
// be checked (guard_damage(), and the payload compared: an unwritten element stays NaN).
// Split-KV workspaces are filled with 0xFF bytes (NaN floats) so a read of a partial that
// was never written shows up as NaN.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <thrust/copy.h>
#include <thrust/device_vector.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/attention/decode.h"
#include "gpu/core/cuda_check.h"
#include "gpu/core/device_info.h"
#include "reference/attention/guard_region.h"
#include "reference/attention/paged_case.h"
#include "tests/common/tolerance_check.h"

#define KVLAB_SKIP_WITHOUT_GPU()                                                     \
  do {                                                                               \
    if (!::kvlab::gpu::device_available()) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)

namespace kvlab::test {

template <class T>
thrust::device_vector<T> to_device(const std::vector<T>& v) {
  return thrust::device_vector<T>(v.begin(), v.end());
}
template <class T>
std::vector<T> to_host(const thrust::device_vector<T>& d) {
  std::vector<T> h(d.size());
  thrust::copy(d.begin(), d.end(), h.begin());
  return h;
}
template <class T>
T* raw(thrust::device_vector<T>& d) {
  return d.empty() ? nullptr : thrust::raw_pointer_cast(d.data());
}

// The device twin of a host GuardedBuffer (same bytes, guards included).
class DeviceGuarded {
 public:
  explicit DeviceGuarded(const GuardedBuffer& host)
      : guard_(host.guard_bytes()), dev_(to_device(host.storage())) {}
  void* data() { return raw(dev_) + guard_; }
  // Copies the device allocation back over `host` (guards included).
  void fetch(GuardedBuffer& host) const {
    thrust::copy(dev_.begin(), dev_.end(), host.storage().begin());
  }

 private:
  size_t guard_;
  thrust::device_vector<uint8_t> dev_;
};

// A PagedCase's buffers on the device, byte for byte.
struct DeviceCase {
  thrust::device_vector<uint16_t> q;
  thrust::device_vector<uint8_t> k_pool, v_pool, k_scales, v_scales;
  thrust::device_vector<int32_t> block_table, seq_lens;

  explicit DeviceCase(const ref::PagedCase& c)
      : q(to_device(c.q)),
        k_pool(to_device(c.k_pool)),
        v_pool(to_device(c.v_pool)),
        k_scales(to_device(c.k_scales)),
        v_scales(to_device(c.v_scales)),
        block_table(to_device(c.block_table)),
        seq_lens(to_device(c.seq_lens)) {}

  // The case's DecodeArgs with every pointer moved to this device copy.
  DecodeArgs decode_args(ref::PagedCase& c, void* o, float* lse) {
    DecodeArgs a = c.decode_args(o, lse);
    a.q = raw(q);
    a.kv.k = raw(k_pool);
    a.kv.v = raw(v_pool);
    a.kv.k_scales = c.k_scales.empty() ? nullptr : raw(k_scales);
    a.kv.v_scales = c.v_scales.empty() ? nullptr : raw(v_scales);
    a.block_table = raw(block_table);
    a.seq_lens = raw(seq_lens);
    return a;
  }
};

struct GpuDecodeRun {
  bool supported = false;
  std::string reason;        // decode_unsupported_reason when not supported
  std::vector<float> o;      // [num_seqs, num_qo_heads, head_dim] decoded from q_dtype
  std::vector<float> lse;    // [num_seqs, num_qo_heads]
  std::string guard_damage;  // "" when both outputs' guards are intact
  size_t workspace_bytes = 0;
};

// Runs `version` over the device copy of `c` into guarded, NaN-prefilled outputs (with
// `tuning`'s plan knobs; the defaults unless given). The workspace is a new one filled with
// 0xFF (NaN floats), or `workspace` as the caller left it (grown with 0xFF bytes if short).
inline GpuDecodeRun run_gpu_decode(ref::PagedCase& c, DeviceCase& d, int version,
                                   cudaStream_t stream = nullptr,
                                   const gpu::DecodeTuning& tuning = gpu::DecodeTuning{},
                                   thrust::device_vector<uint8_t>* workspace = nullptr) {
  GpuDecodeRun r;
  GuardedBuffer o_host(static_cast<size_t>(c.o_elements()), c.spec.q_dtype);
  GuardedBuffer lse_host(static_cast<size_t>(c.lse_elements()), DType::kF32);
  DeviceGuarded o_dev(o_host), lse_dev(lse_host);
  const DecodeArgs a = d.decode_args(c, o_dev.data(), static_cast<float*>(lse_dev.data()));
  r.reason = gpu::decode_unsupported_reason(a, version, tuning);
  if (!r.reason.empty()) return r;
  r.supported = true;
  r.workspace_bytes = gpu::decode_workspace_bytes(a, version, tuning);
  thrust::device_vector<uint8_t> fresh(workspace ? 0 : r.workspace_bytes, 0xFF);  // NaN floats
  thrust::device_vector<uint8_t>& ws = workspace ? *workspace : fresh;
  if (ws.size() < r.workspace_bytes) ws.resize(r.workspace_bytes, 0xFF);
  gpu::decode_attention(a, version, tuning, raw(ws), r.workspace_bytes, stream);
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(stream));
  KVLAB_CUDA_CHECK(cudaGetLastError());
  o_dev.fetch(o_host);
  lse_dev.fetch(lse_host);
  r.guard_damage = o_host.guard_damage() + lse_host.guard_damage();
  r.o = ref::to_float(o_host.data(), c.spec.q_dtype, o_host.elements());
  r.lse = ref::to_float(lse_host.data(), DType::kF32, lse_host.elements());
  return r;
}

// A supported run with intact guards whose O and LSE lie within the tolerance table's bounds
// of the reference `tight` (the same cache); `ctx` names the case in every failure.
inline void expect_run_matches(const GpuDecodeRun& r, const ref::DecodeOutputs& tight,
                               const ref::PagedCase& c, const std::string& ctx) {
  ASSERT_TRUE(r.supported) << ctx << ": " << r.reason;
  EXPECT_EQ(r.guard_damage, "") << ctx;
  EXPECT_TRUE(
      within_tolerance(r.o, tight.o, Op::kDecodeAttention, c.geom.format, c.spec.q_dtype, ctx));
  EXPECT_TRUE(
      within_tolerance(r.lse, tight.lse, Op::kDecodeLse, c.geom.format, c.spec.q_dtype, ctx));
}

// Two runs of the same case give the same bits: O and LSE compared byte for byte (a version
// against a peer with the same tiles and mma sequence, or a version against its own second
// call); `what` names the pair in every failure.
inline void expect_same_bits(const GpuDecodeRun& a, const GpuDecodeRun& b,
                             const std::string& what) {
  ASSERT_TRUE(a.supported && b.supported) << what << ": " << a.reason << b.reason;
  ASSERT_EQ(a.o.size(), b.o.size()) << what;
  ASSERT_EQ(a.lse.size(), b.lse.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.o.data(), b.o.data(), a.o.size() * sizeof(float)))
      << what << ": O differs";
  EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)))
      << what << ": LSE differs";
}

}  // namespace kvlab::test
