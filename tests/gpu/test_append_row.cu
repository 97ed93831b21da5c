// test_append_row.cu: gpu::append_row (gpu/quant/append.cuh), the one quantize-on-write row
// writer that append_kv's row path and the decode step's fused RoPE + append share, called
// directly the way the step calls it (one warp per (token, head, K or V) row, the row staged
// in shared memory as FP32), against ref::append_kv over the same FP32 rows, byte for byte
// (Op::kAppend is exact), for every KvFormat x KvLayout at every head_dim of {16, 48, 96, 128,
// 288} the geometry admits (odd multiples of 16 and 32 leave half-empty lane rounds), block
// sizes 1 and 5 (split-x V bytes shared by two tokens of a page, one of them never written).
// Inputs: N(0, 1.5) rows plus rows of zeros, below the amax floor, beyond every format's
// range, and with NaN / +Inf / -Inf elements; pools and scale arrays pre-filled with seeded
// bytes (bytes the append does not own must stay); padding slots (-1) in the mapping.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu/quant/append.cuh"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "reference/metrics/tolerance.h"
#include "reference/quant/append.h"
#include "tests/common/test_env.h"
#include "tests/gpu/gpu_test_util.cuh"

namespace kvlab::test {
namespace {

// grid (tokens, 2 * num_kv_heads), block 32: row y < H is K head y, else V head y - H.
__global__ void append_rows_kernel(const float* k, const float* v, const int64_t* slots,
                                   KvCacheView kv) {
  extern __shared__ float stage[];  // [head_dim]
  const PageGeometry& g = kv.geom;
  const int H = g.num_kv_heads, D = g.head_dim;
  const int token = blockIdx.x, r = blockIdx.y, lane = threadIdx.x;
  const int64_t s = slots[token];
  if (s < 0) return;  // padding: the whole warp leaves
  const bool is_v = r >= H;
  const int head = is_v ? r - H : r;
  const float* src = (is_v ? v : k) + (static_cast<int64_t>(token) * H + head) * D;
  for (int d = lane; d < D; d += 32) stage[d] = src[d];
  __syncwarp();
  const float* x = stage;
  gpu::append_row(
      kv, is_v, s / g.block_size, head, static_cast<int>(s % g.block_size),
      [x](int d) { return x[d]; }, lane);
}

std::vector<float> make_rows(int tokens, int heads, int dim, std::mt19937_64& rng) {
  std::normal_distribution<float> n(0.0f, 1.5f);
  std::vector<float> x(static_cast<size_t>(tokens) * heads * dim);
  for (auto& e : x) e = n(rng);
  auto row = [&](int t) { return x.data() + static_cast<size_t>(t) * heads * dim; };
  if (tokens > 6) {
    std::fill(row(1), row(1) + dim, 0.0f);                      // zeros: the amax floor
    for (int d = 0; d < dim; ++d) row(2)[d] *= 1e-7f;           // below the floor
    for (int d = 0; d < dim; ++d) row(3)[d] *= 3e4f;            // beyond FP8 / FP4 ranges
    row(4)[dim / 3] = std::numeric_limits<float>::quiet_NaN();  // a NaN element
    row(5)[dim - 1] = std::numeric_limits<float>::infinity();
    row(6)[0] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

std::vector<uint8_t> seeded_bytes(int64_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> b(static_cast<size_t>(n));
  for (auto& e : b) e = static_cast<uint8_t>(rng());
  return b;
}

int64_t differing(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, int64_t* first) {
  int64_t n = 0;
  *first = -1;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && n++ == 0) *first = static_cast<int64_t>(i);
  return n;
}

// Appends one seeded case on the host (reference) and through append_rows_kernel; false when
// kvlab::validate() rejects the geometry (nothing to test).
bool check_rows(KvFormat f, KvLayout l, int head_dim, int block_size) {
  PageGeometry g;
  g.format = f;
  g.layout = l;
  g.num_kv_heads = 2;
  g.head_dim = head_dim;
  g.block_size = block_size;
  g.num_blocks = 6;
  try {
    validate(g);
  } catch (const InvalidArgument&) {
    return false;
  }
  const std::string name = "append_row." + to_string(f) + "." + to_string(l) + ".d" +
                           std::to_string(head_dim) + ".b" + std::to_string(block_size);
  const uint64_t seed = seed_for(name.c_str());
  std::printf("[seed] %s = %llu\n", name.c_str(), static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  // A seeded two thirds of the slots in seeded order, three padding entries among them.
  const int64_t num_slots = g.num_blocks * block_size;
  std::vector<int64_t> slots(static_cast<size_t>(num_slots));
  for (int64_t i = 0; i < num_slots; ++i) slots[static_cast<size_t>(i)] = i;
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(static_cast<size_t>(std::max<int64_t>(1, num_slots * 2 / 3)));
  for (int p = 0; p < 3; ++p) slots.insert(slots.begin() + rng() % slots.size(), -1);
  const int tokens = static_cast<int>(slots.size());
  std::vector<float> k = make_rows(tokens, g.num_kv_heads, head_dim, rng);
  std::vector<float> v = make_rows(tokens, g.num_kv_heads, head_dim, rng);
  std::vector<uint8_t> hk = seeded_bytes(g.bytes(), rng), hv = seeded_bytes(g.bytes(), rng);
  std::vector<uint8_t> hks = seeded_bytes(g.scale_bytes(), rng),
                       hvs = seeded_bytes(g.scale_bytes(), rng);
  thrust::device_vector<uint8_t> dk = to_device(hk), dv = to_device(hv), dks = to_device(hks),
                                 dvs = to_device(hvs);
  KvCacheView view;
  view.geom = g;
  if (kv_format_has_pool_scale(f)) {
    view.k_scale = f == KvFormat::kNVFP4 ? 0.0021f : 0.0173f;
    view.v_scale = f == KvFormat::kNVFP4 ? 0.0009f : 0.0111f;
  }

  AppendArgs a;
  a.in_dtype = DType::kF32;
  a.k = k.data();
  a.v = v.data();
  a.slot_mapping = slots.data();
  a.num_tokens = tokens;
  a.kv = view;
  a.kv.k = hk.data();
  a.kv.v = hv.data();
  a.kv.k_scales = hks.empty() ? nullptr : hks.data();
  a.kv.v_scales = hvs.empty() ? nullptr : hvs.data();
  ref::append_kv(a);

  thrust::device_vector<float> dkin = to_device(k), dvin = to_device(v);
  thrust::device_vector<int64_t> dslots = to_device(slots);
  view.k = raw(dk);
  view.v = raw(dv);
  view.k_scales = hks.empty() ? nullptr : raw(dks);
  view.v_scales = hvs.empty() ? nullptr : raw(dvs);
  append_rows_kernel<<<dim3(tokens, 2 * g.num_kv_heads), 32, sizeof(float) * head_dim>>>(
      raw(dkin), raw(dvin), raw(dslots), view);
  KVLAB_CUDA_CHECK(cudaGetLastError());
  KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
  int64_t first = 0;
  EXPECT_EQ(differing(to_host(dk), hk, &first), 0) << name << ": K pool, first at " << first;
  EXPECT_EQ(differing(to_host(dv), hv, &first), 0) << name << ": V pool, first at " << first;
  EXPECT_EQ(differing(to_host(dks), hks, &first), 0) << name << ": K scales, first at " << first;
  EXPECT_EQ(differing(to_host(dvs), hvs, &first), 0) << name << ": V scales, first at " << first;
  return true;
}

TEST(AppendRow, ByteExactToTheReferenceForEveryFormatAndLayout) {
  KVLAB_SKIP_WITHOUT_GPU();
  for (KvFormat f : all_kv_formats()) {
    const Tolerance tol = tolerance(Op::kAppend, f, DType::kF32);
    ASSERT_TRUE(tol.atol == 0 && tol.rtol == 0 && tol.nmse_max == 0) << "append is exact";
    for (KvLayout l : all_kv_layouts()) {
      int cases = 0;
      for (int d : {16, 48, 96, 128, 288})
        for (int bs : {1, 5}) cases += check_rows(f, l, d, bs);
      EXPECT_GT(cases, 0) << to_string(f) << "/" << to_string(l) << ": no valid geometry tested";
    }
  }
}

}  // namespace
}  // namespace kvlab::test
