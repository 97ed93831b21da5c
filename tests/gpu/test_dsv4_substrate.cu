// DSV4 substrate on the GPU: the block allocator replays the host allocator's decisions;
// append_swa, the entry/key quantizers and the compressors mirror the reference (bytes
// exact, compressor floats within Op::kCompressor); decode attention over the GPU's own
// cache matches the reference read from a copy of the same arena; acquire() allocates
// nothing and works inside a captured and replayed CUDA graph. Every test skips without a
// device.
#include <gtest/gtest.h>
#include <thrust/device_vector.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "gpu/core/cuda_check.h"
#include "gpu/core/device_info.h"
#include "gpu/runtime/device_block_allocator.h"
#include "gpu/runtime/dsv4_device_backend.h"
#include "gpu/dsv4/dsv4_kernels.h"
#include "reference/dsv4/variant_names.h"
#include "reference/metrics/tolerance.h"
#include "reference/quant/roundtrip.h"
#include "reference/synth/synth.h"
#include "sim/alloc/block_allocator.h"
#include "sim/dsv4/arena.h"
#include "tests/cpu/test_dsv4_common.h"

namespace kvlab::test::dsv4 {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!gpu::device_available()) GTEST_SKIP() << "no CUDA device"

template <class T>
using DVec = thrust::device_vector<T>;
template <class T>
T* dptr(DVec<T>& v) {
  return thrust::raw_pointer_cast(v.data());
}
template <class T>
std::vector<T> to_host(const DVec<T>& v) {
  std::vector<T> h(v.size());
  thrust::copy(v.begin(), v.end(), h.begin());
  return h;
}

// ------------------------------------------------------------------ allocator
TEST(Dsv4Gpu, AllocatorReplaysTheHostAllocatorsDecisions) {
  SKIP_WITHOUT_GPU();
  const int32_t N = 97;
  sim::BlockAllocator host(N);
  gpu::GpuBlockAllocator dev(N);
  DVec<int32_t> dst(N), ids(N + 8);
  std::vector<int32_t> held;
  std::mt19937_64 g(seed_for("dsv4.gpu.allocator"));
  SCOPED_TRACE("seed " + std::to_string(seed_for("dsv4.gpu.allocator")));
  int ooms = 0, double_frees = 0, unknown = 0;
  for (int step = 0; step < 400; ++step) {
    const int op = static_cast<int>(g() % 10);
    if (op < 5 ||
        step % 20 == 0) {  // acquire n; every 20th step more than is free: OutOfBlocks on both
      const int32_t n = step % 20 == 0 ? host.num_free() + 1 + static_cast<int32_t>(g() % 3)
                                       : static_cast<int32_t>(g() % 12);
      bool host_oom = false, dev_oom = false;
      std::vector<int32_t> got;
      try {
        host.acquire(n, &got);
      } catch (const sim::OutOfBlocks&) {
        host_oom = true;
      }
      try {
        dev.acquire(n, dptr(dst), nullptr);
      } catch (const sim::OutOfBlocks&) {
        dev_oom = true;
      }
      ASSERT_EQ(host_oom, dev_oom) << "step " << step;
      ooms += host_oom;
      if (!host_oom) {
        const auto d = to_host(dst);
        ASSERT_TRUE(std::equal(got.begin(), got.end(), d.begin()))
            << "step " << step << ": different ids";
        held.insert(held.end(), got.begin(), got.end());
      }
    } else if (op < 9) {  // release a random subset in random order
      std::shuffle(held.begin(), held.end(), g);
      const size_t n = held.empty() ? 0 : g() % (held.size() + 1);
      std::vector<int32_t> rel(held.end() - n, held.end());
      held.resize(held.size() - n);
      host.release(rel);
      thrust::copy(rel.begin(), rel.end(), ids.begin());
      dev.release(dptr(ids), static_cast<int32_t>(rel.size()), nullptr);
    } else {  // bad release: a double free or an unknown id inside a valid batch
      std::vector<int32_t> rel;
      if (!held.empty()) rel.push_back(held[g() % held.size()]);
      const bool unknown_id = g() % 2;
      int32_t bad = unknown_id ? N + 3 : -1;
      if (!unknown_id) {
        if (host.num_free() == 0) continue;
        bad = host.stack()[g() % host.num_free()];  // already free
      }
      rel.insert(rel.begin() + (rel.empty() ? 0 : g() % 2), bad);
      EXPECT_THROW(host.release(rel), InvalidArgument);
      thrust::copy(rel.begin(), rel.end(), ids.begin());
      try {
        dev.release(dptr(ids), static_cast<int32_t>(rel.size()), nullptr);
        ADD_FAILURE() << "step " << step << ": no error for bad id " << bad;
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
      }
      (unknown_id ? unknown : double_frees)++;
    }
    ASSERT_EQ(dev.num_free(), host.num_free()) << "step " << step;
    ASSERT_EQ(dev.stack(nullptr), host.stack()) << "step " << step;
  }
  std::printf(
      "[dsv4] allocator replay: 400 ops, %d OOMs, %d double frees, %d unknown ids, identical\n",
      ooms, double_frees, unknown);
  EXPECT_GT(ooms, 0);
  EXPECT_GT(double_frees, 0);
  EXPECT_GT(unknown, 0);
}

// ------------------------------------------------------------------ device caches
struct DeviceCache {
  sim::Dsv4CacheSchema schema;
  sim::Dsv4BlockBudget budget;
  std::unique_ptr<sim::KVCacheManager> mgr;
  gpu::Dsv4DeviceBackend* dev = nullptr;

  // The arena copied to the host, with views over the copy (the reference reads these).
  std::vector<uint8_t> host_arena;
  std::vector<sim::Dsv4LayerViews> host_views;
  void snapshot() {
    KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
    host_arena.resize(dev->arena_bytes());
    KVLAB_CUDA_CHECK(
        cudaMemcpy(host_arena.data(), dev->arena(), host_arena.size(), cudaMemcpyDeviceToHost));
    host_views = sim::build_dsv4_views(schema, budget, sim::plan_dsv4_arena(schema, budget),
                                       host_arena.data());
  }
};

DeviceCache make_device_cache(const HostCache& like) {
  DeviceCache c;
  c.schema = like.schema;
  c.budget = like.budget;
  auto backend = std::make_unique<gpu::Dsv4DeviceBackend>(nullptr, /*verify_mirror=*/true);
  c.dev = backend.get();
  c.mgr = std::make_unique<sim::KVCacheManager>(c.schema, c.budget, std::move(backend));
  return c;
}

// A layer batch uploaded to the device.
struct DeviceBatch {
  DVec<int32_t> slots, positions, req_slots, start_pos, token_offsets, entry_offsets, first_entry;
  DVec<uint16_t> raw;
  DVec<float> kv, gate, ikv, igate, out, keys;
  explicit DeviceBatch(const LayerBatch& b)
      : slots(b.slots),
        positions(b.positions),
        req_slots(b.req_slots),
        start_pos(b.start_pos),
        token_offsets(b.token_offsets),
        entry_offsets(b.entry_offsets),
        first_entry(b.first_entry),
        raw(b.raw),
        kv(b.kv),
        gate(b.gate),
        ikv(b.ikv),
        igate(b.igate) {}
};

Dsv4AppendSwaArgs dev_swa_args(DeviceBatch& d, const LayerBatch& b) {
  Dsv4AppendSwaArgs a;
  a.raw_kv = dptr(d.raw);
  a.request_slots = dptr(d.slots);
  a.positions = dptr(d.positions);
  a.num_tokens = static_cast<int32_t>(b.slots.size());
  return a;
}
Dsv4CompressArgs dev_compress_args(DeviceBatch& d, const LayerBatch& b, bool indexer, float* out) {
  Dsv4CompressArgs a = compress_args(b, indexer, out);
  a.kv = indexer ? dptr(d.ikv) : dptr(d.kv);
  a.gate = indexer ? dptr(d.igate) : dptr(d.gate);
  a.request_slots = dptr(d.req_slots);
  a.start_pos = dptr(d.start_pos);
  a.token_offsets = dptr(d.token_offsets);
  a.entry_offsets = dptr(d.entry_offsets);
  return a;
}
Dsv4StoreArgs dev_store_args(DeviceBatch& d, const LayerBatch& b, const float* entries) {
  Dsv4StoreArgs a = store_args(b, entries);
  a.request_slots = dptr(d.req_slots);
  a.first_entry = dptr(d.first_entry);
  a.entry_offsets = dptr(d.entry_offsets);
  return a;
}

// GPU step of one layer: ring append, compression, stores (mirror of host_layer_step).
void device_layer_step(const sim::LayerCacheHandle& h, const sim::Dsv4LayerSchema& l,
                       const LayerBatch& b, cudaStream_t stream) {
  DeviceBatch d(b);
  h.write_swa(dev_swa_args(d, b), stream);
  if (l.has_classical) {
    d.out.resize(std::max<size_t>(1, static_cast<size_t>(b.num_entries) * l.head_dim));
    gpu::dsv4_compress(h.stream_view(), dev_compress_args(d, b, false, dptr(d.out)), stream);
    gpu::dsv4_store_entries(h.read_classical_view(), h.num_slots(),
                            dev_store_args(d, b, dptr(d.out)), stream);
  }
  if (l.has_indexer) {
    d.keys.resize(std::max<size_t>(1, static_cast<size_t>(b.num_entries) * l.indexer_dim));
    gpu::dsv4_compress(h.indexer_stream_view(), dev_compress_args(d, b, true, dptr(d.keys)),
                       stream);
    gpu::dsv4_store_indexer_keys(h.read_indexer_view(), h.num_slots(),
                                 dev_store_args(d, b, dptr(d.keys)), stream);
  }
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(stream));
}

// Bytes of one stored entry (either format), for position-keyed comparisons.
std::vector<uint8_t> entry_bytes(const Dsv4EntryPages& p, int64_t page, int row) {
  std::vector<uint8_t> out;
  if (p.format == Dsv4EntryFormat::kFp8PerToken) {
    const uint8_t* n = p.pt_nope(page, row);
    out.assign(n, n + p.nope_dim);
    const uint8_t* r = reinterpret_cast<const uint8_t*>(p.pt_rope(page, row));
    out.insert(out.end(), r, r + 2 * p.rope_dim);
    const uint8_t* s = reinterpret_cast<const uint8_t*>(p.pt_inv_scale(page, row));
    out.insert(out.end(), s, s + 4);
  } else {
    const uint8_t* d = p.mla_data_row(page, row);
    out.assign(d, d + ds_mla_data_row_bytes(p.nope_dim, p.rope_dim));
    const uint8_t* s = p.mla_scale_row(page, row);
    out.insert(out.end(), s, s + ds_mla_scale_row_bytes(p.nope_dim));
  }
  return out;
}

// Position -> entry bytes of a slot's ring.
std::map<int32_t, std::vector<uint8_t>> ring_by_position(const Dsv4SwaView& v, int64_t slot) {
  std::map<int32_t, std::vector<uint8_t>> m;
  for (int row = 0; row < v.window(); ++row)
    if (v.pos_row(slot)[row] >= 0) m[v.pos_row(slot)[row]] = entry_bytes(v.ring, slot, row);
  return m;
}

const Dsv4Variant kVariants[] = {Dsv4Variant::per_token_scales(), Dsv4Variant::public_v4()};

// ------------------------------------------------------------------ append_swa
// Decode-only traffic (one token per slot per launch) wraps the ring several times: the
// GPU rings are byte-identical to the reference in both ring modes. Prefill chunks (up to
// `window` tokens of a slot in one launch): identical with pos % window; with the seed's
// atomic head the same positions and bytes, rows in the launch's scheduling order.
TEST(Dsv4Gpu, AppendSwaMatchesTheReferenceBytes) {
  SKIP_WITHOUT_GPU();
  for (auto var : kVariants) {
    SCOPED_TRACE("variant " + to_string(var) + ", seed " +
                 std::to_string(seed_for("dsv4.raw_token")));
    const bool pos_mode = var.ring == Dsv4RingMode::kPosModWindow;
    for (bool prefill : {false, true}) {
      auto host = make_host_cache("test_mixed.ini", var, 128, 3, 1024);
      auto dev = make_device_cache(host);
      const auto& l = host.schema.layer(0);
      std::vector<int64_t> ids{4, 5, 6};
      std::vector<int32_t> slots;
      for (auto id : ids) {
        slots.push_back(host.mgr->admit_request(id));
        ASSERT_EQ(dev.mgr->admit_request(id), slots.back());
      }
      std::vector<int64_t> pos{0, 0, 0};
      auto run = [&](const std::vector<int64_t>& counts) {
        const auto b = make_batch(l, ids, slots, pos, counts);
        host.mgr->acquire(0).write_swa(swa_args(b));
        DeviceBatch d(b);
        dev.mgr->acquire(0).write_swa(dev_swa_args(d, b), nullptr);
        for (size_t r = 0; r < ids.size(); ++r) pos[r] += counts[r];
      };
      if (prefill) {
        run({100, 37, 128});
        run({28, 1, 0});
      }
      // Decode steps past the window (wrap-around) unless the rows may already differ.
      const bool decode = !prefill || pos_mode;
      if (decode)
        for (int step = 0; step < 300; ++step) run({1, 1, 1});
      dev.snapshot();
      const auto& hv = host.mgr->acquire(0).read_swa_view();
      const auto& dv = dev.host_views[0].swa;
      for (int32_t s : slots) {
        EXPECT_EQ(hv.head[s], dv.head[s]) << "slot " << s;
        EXPECT_EQ(ring_by_position(hv, s), ring_by_position(dv, s))
            << "slot " << s << (prefill ? " prefill" : "");
        if (pos_mode || !prefill) {
          EXPECT_EQ(0, std::memcmp(hv.pos_row(s), dv.pos_row(s), 4 * hv.window())) << "slot " << s;
          for (int row = 0; row < hv.window(); ++row)
            ASSERT_EQ(entry_bytes(hv.ring, s, row), entry_bytes(dv.ring, s, row))
                << "slot " << s << " row " << row;
        }
      }
      if (!pos_mode && prefill) {
        // The seed's atomic head under a multi-token launch: rows follow scheduling order, so
        // the next decode token overwrites whichever row the launch gave its first arrival,
        // not necessarily the oldest position. Measured, not asserted (it is scheduling).
        run({1, 1, 1});
        dev.snapshot();
        int lost = 0;
        for (size_t r = 0; r < slots.size(); ++r) {
          const auto ring = ring_by_position(dev.host_views[0].swa, slots[r]);
          for (int64_t p = std::max<int64_t>(0, pos[r] - 128); p < pos[r]; ++p)
            lost += ring.count(static_cast<int32_t>(p)) == 0;
        }
        std::printf(
            "[dsv4] atomic head: after prefill launches + 1 decode token, %d in-window position(s) "
            "missing "
            "from the GPU rings (0 with pos %% window)\n",
            lost);
      }
    }
  }
}

// The closing note's figure: the FP8 round-trip error of append_swa, per-token relative L2
// of the dequantized ring entry against the BF16 input (NoPE part; the RoPE part is exact),
// over Gaussian tokens and refquant's heavy-tailed "kcache" synthetic tokens.
TEST(Dsv4Gpu, AppendSwaFp8RoundTripDistribution) {
  SKIP_WITHOUT_GPU();
  const int nope = 448, rope = 64, D = nope + rope, W = 128;
  const int64_t tokens = 8192;  // 64 slots x 128
  for (const char* data : {"gaussian", "kcache"}) {
    const auto spec = ref::synth_preset(data, tokens, 1, D, seed_for("dsv4.gpu.fp8_roundtrip"));
    const auto xf = ref::synth_kv(spec);
    std::vector<uint16_t> raw(xf.size());
    std::vector<float> x(xf.size());
    for (size_t i = 0; i < xf.size(); ++i) {
      raw[i] = float_to_bf16_bits(xf[i], Saturation::kSatFinite);
      x[i] = bf16_bits_to_float(raw[i]);
    }
    std::vector<int32_t> slots(tokens), positions(tokens);
    for (int64_t i = 0; i < tokens; ++i) {
      slots[i] = static_cast<int32_t>(i / W);
      positions[i] = static_cast<int32_t>(i % W);
    }
    for (auto fmt : {Dsv4EntryFormat::kFp8PerToken, Dsv4EntryFormat::kFp8DsMla}) {
      const int64_t S = tokens / W;
      Dsv4SwaView v;
      v.ring.format = fmt;
      v.ring.nope_dim = nope;
      v.ring.rope_dim = rope;
      v.ring.rows = W;
      v.ring.num_pages = S;
      v.mode = Dsv4RingMode::kPosModWindow;
      DVec<uint8_t> data_d(fmt == Dsv4EntryFormat::kFp8PerToken ? tokens * nope : v.ring.bytes(),
                           0xFF);
      DVec<uint16_t> rope_d(tokens * rope, 0xFFFF);
      DVec<float> inv_d(tokens);
      DVec<int32_t> pos_d(tokens, -1), head_d(S, 0), slots_d(slots), positions_d(positions);
      DVec<uint16_t> raw_d(raw);
      v.ring.data = dptr(data_d);
      v.ring.rope = dptr(rope_d);
      v.ring.inv_scale = dptr(inv_d);
      v.pos = dptr(pos_d);
      v.head = dptr(head_d);
      Dsv4AppendSwaArgs a{dptr(raw_d), dptr(slots_d), dptr(positions_d),
                          static_cast<int32_t>(tokens)};
      gpu::dsv4_append_swa(v, a, nullptr);
      KVLAB_CUDA_CHECK(cudaDeviceSynchronize());
      // Read back and dequantize through the canonical host read.
      auto data_h = to_host(data_d);
      auto rope_h = to_host(rope_d);
      auto inv_h = to_host(inv_d);
      Dsv4SwaView hv = v;
      hv.ring.data = data_h.data();
      hv.ring.rope = rope_h.data();
      hv.ring.inv_scale = inv_h.data();
      std::vector<float> xn(tokens * nope), yn(tokens * nope), xa(tokens * D), ya(tokens * D);
      for (int64_t i = 0; i < tokens; ++i)
        for (int d = 0; d < D; ++d) {
          const float y = hv.ring.load(slots[i], positions[i], d);
          xa[i * D + d] = x[i * D + d];
          ya[i * D + d] = y;
          if (d < nope) {
            xn[i * nope + d] = x[i * D + d];
            yn[i * nope + d] = y;
          } else {
            ASSERT_EQ(y, x[i * D + d]) << "RoPE dim " << d << " of token " << i << " not exact";
          }
        }
      const auto sn = ref::roundtrip_stats(xn.data(), yn.data(), tokens, nope);
      const auto sa = ref::roundtrip_stats(xa.data(), ya.data(), tokens, D);
      std::printf(
          "[dsv4] append_swa FP8 round trip (%s, %s, %lld tokens): per-token rel L2 NoPE mean %.4f "
          "p99 %.4f "
          "max %.4f | full entry mean %.4f p99 %.4f (seed 004 claims < 0.036)\n",
          fmt == Dsv4EntryFormat::kFp8PerToken ? "fp8_per_token" : "fp8_ds_mla", data,
          static_cast<long long>(tokens), sn.rel_l2_mean, sn.rel_l2_p99, sn.rel_l2_max,
          sa.rel_l2_mean, sa.rel_l2_p99);
      const Tolerance tol = tolerance(Op::kQuantRoundTrip, KvFormat::kFP8E4M3PerToken, DType::kF32);
      EXPECT_EQ(sn.nonfinite, 0);
      for (int64_t i = 0; i < tokens; ++i) {
        ErrorStats st;
        ASSERT_TRUE(check(yn.data() + i * nope, xn.data() + i * nope, nope, tol, &st))
            << "token " << i << ": " << to_string(st);
      }
    }
  }
}

// ------------------------------------------------------------------ compressors
TEST(Dsv4Gpu, CompressorChunkedEqualsOneShotAtEverySplitAndMatchesTheReference) {
  SKIP_WITHOUT_GPU();
  struct Case {
    const char* name;
    int ratio, dim;
    bool overlap;
  };
  for (const Case c : {Case{"csa", 4, 512, true}, Case{"csa_indexer", 4, 128, true},
                       Case{"hca16", 16, 160, false}}) {
    const int W = c.overlap ? 2 * c.dim : c.dim;
    const int32_t L = 53;
    const uint64_t seed = seed_for("dsv4.gpu.compressor");
    SCOPED_TRACE(std::string(c.name) + " seed " + std::to_string(seed));
    const auto kv = bf16_gaussian(static_cast<size_t>(L) * W, seed, 1.0f);
    const auto gate = bf16_gaussian(static_cast<size_t>(L) * W, seed + 1, 2.0f);
    const auto ape = bf16_gaussian(static_cast<size_t>(c.ratio) * W, seed + 2, 0.5f);
    DVec<float> kv_d(kv), gate_d(gate), ape_d(ape);
    const int64_t n_entries = L / c.ratio;
    std::vector<float> ref_out(n_entries * c.dim);
    ref::dsv4_compress_oneshot(kv.data(), gate.data(), ape.data(), L, c.ratio, c.dim, c.overlap,
                               ref_out.data());
    const int64_t a_floats = (c.overlap ? 2 : 1) * c.ratio * c.dim,
                  b_floats = c.overlap ? c.ratio * c.dim : 0;
    DVec<float> ka(2 * a_floats), za(2 * a_floats), kb(2 * b_floats + 1), zb(2 * b_floats + 1);
    Dsv4StreamView st{c.ratio,
                      c.dim,
                      c.overlap,
                      2,
                      dptr(ka),
                      dptr(za),
                      c.overlap ? dptr(kb) : nullptr,
                      c.overlap ? dptr(zb) : nullptr};
    DVec<float> out(n_entries * c.dim + 1);
    // Runs tokens [from, to) of slot 1 and appends the entries to *acc.
    auto call = [&](int32_t from, int32_t to, std::vector<float>* acc) {
      int32_t start = from, offs[2] = {0, to - from}, eoffs[2], slot = 1;
      ref::dsv4_plan_entries(&start, offs, 1, c.ratio, eoffs, nullptr);
      DVec<int32_t> slot_d(1, slot), start_d(1, start), offs_d(offs, offs + 2),
          eoffs_d(eoffs, eoffs + 2);
      Dsv4CompressArgs a;
      a.kv = dptr(kv_d) + static_cast<int64_t>(from) * W;
      a.gate = dptr(gate_d) + static_cast<int64_t>(from) * W;
      a.ape = dptr(ape_d);
      a.request_slots = dptr(slot_d);
      a.start_pos = dptr(start_d);
      a.token_offsets = dptr(offs_d);
      a.entry_offsets = dptr(eoffs_d);
      a.num_requests = 1;
      a.num_tokens = to - from;
      a.num_entries = eoffs[1];
      a.out = dptr(out);
      gpu::dsv4_compress(st, a, nullptr);
      const auto h = to_host(out);
      acc->insert(acc->end(), h.begin(), h.begin() + static_cast<int64_t>(eoffs[1]) * c.dim);
    };
    std::vector<float> oneshot;
    call(0, L, &oneshot);
    // GPU vs reference: the same math up to expf and FMA contraction.
    const Tolerance tol = tolerance(Op::kCompressor, KvFormat::kBF16, DType::kF32);
    ErrorStats es;
    EXPECT_TRUE(check(oneshot.data(), ref_out.data(), ref_out.size(), tol, &es)) << to_string(es);
    // Token by token, then two chunks at every split point: bit-identical to one-shot.
    std::vector<float> tok;
    for (int32_t t = 0; t < L; ++t) call(t, t + 1, &tok);
    ASSERT_EQ(0, std::memcmp(tok.data(), oneshot.data(), 4 * oneshot.size())) << "token-by-token";
    for (int32_t s = 0; s <= L; ++s) {
      std::vector<float> e;
      call(0, s, &e);
      call(s, L, &e);
      ASSERT_EQ(0, std::memcmp(e.data(), oneshot.data(), 4 * oneshot.size())) << "split at " << s;
    }
  }
}

TEST(Dsv4Gpu, StoreEntriesAndIndexerKeysMatchTheReferenceBytes) {
  SKIP_WITHOUT_GPU();
  for (auto var : kVariants) {
    SCOPED_TRACE("variant " + to_string(var));
    auto host = make_host_cache("test_mixed.ini", var, 128, 2, 1024);
    auto dev = make_device_cache(host);
    const auto& l = host.schema.layer(1);  // CSA
    for (int64_t id : {1, 2}) {
      host.mgr->admit_request(id);
      dev.mgr->admit_request(id);
      host.mgr->append_tokens(id, 700);
      dev.mgr->append_tokens(id, 700);
    }
    // The same FP32 entries for both: 175 entries of request 1, 40 of request 2 (from entry 100).
    LayerBatch b;
    b.req_slots = {host.mgr->slot_of(1), host.mgr->slot_of(2)};
    b.first_entry = {0, 100};
    b.entry_offsets = {0, 175, 215};
    b.num_entries = 215;
    const auto entries = bf16_gaussian(215 * l.head_dim, seed_for("dsv4.gpu.store"), 2.0f);
    const auto keys = bf16_gaussian(215 * l.indexer_dim, seed_for("dsv4.gpu.store.keys"), 2.0f);
    ref::dsv4_store_entries(host.mgr->acquire(1).read_classical_view(), 2,
                            store_args(b, entries.data()));
    ref::dsv4_store_indexer_keys(host.mgr->acquire(1).read_indexer_view(), 2,
                                 store_args(b, keys.data()));
    DeviceBatch d(b);
    DVec<float> entries_d(entries), keys_d(keys);
    gpu::dsv4_store_entries(dev.mgr->acquire(1).read_classical_view(), 2,
                            dev_store_args(d, b, dptr(entries_d)), nullptr);
    gpu::dsv4_store_indexer_keys(dev.mgr->acquire(1).read_indexer_view(), 2,
                                 dev_store_args(d, b, dptr(keys_d)), nullptr);
    dev.snapshot();
    // The whole arena (pools, keys, untouched 0xFF regions, block table) is byte-identical.
    const auto& hv = host.mgr->acquire(1).read_classical_view();
    const auto& dv = dev.host_views[1].classical;
    ASSERT_EQ(hv.pool.bytes(), dv.pool.bytes());
    const auto& hk = host.mgr->acquire(1).read_indexer_view();
    const auto& dk = dev.host_views[1].indexer;
    if (var.entry == Dsv4EntryFormat::kFp8DsMla) {
      EXPECT_EQ(0, std::memcmp(hv.pool.data, dv.pool.data, hv.pool.bytes()));
    } else {
      const int64_t n = hv.pool.num_pages * hv.pool.rows;
      EXPECT_EQ(0, std::memcmp(hv.pool.data, dv.pool.data, n * hv.pool.nope_dim));
      EXPECT_EQ(0, std::memcmp(hv.pool.rope, dv.pool.rope, n * hv.pool.rope_dim * 2));
      EXPECT_EQ(0, std::memcmp(hv.pool.inv_scale, dv.pool.inv_scale, n * 4));
    }
    EXPECT_EQ(0, std::memcmp(hk.codes, dk.codes, hk.num_blocks * hk.rows * hk.dim / 2));
    EXPECT_EQ(0, std::memcmp(hk.scales, dk.scales, hk.num_blocks * hk.rows * hk.dim / hk.group()));
  }
}

// ------------------------------------------------------------------ decode end to end
// Three requests through chunked prefill and decode steps on the GPU (every layer kind),
// then GPU decode attention against the reference decode over a copy of the same arena.
TEST(Dsv4Gpu, DecodeOverTheGpuCacheMatchesTheReference) {
  SKIP_WITHOUT_GPU();
  for (auto var : kVariants) {
    SCOPED_TRACE("variant " + to_string(var) + ", seed " +
                 std::to_string(seed_for("dsv4.raw_token")));
    auto host = make_host_cache("test_mixed.ini", var, 128, 3, 1024);
    auto dev = make_device_cache(host);
    auto& m = *dev.mgr;
    const std::vector<int64_t> ids{11, 12, 13};
    std::vector<int32_t> slots;
    for (auto id : ids) slots.push_back(m.admit_request(id));
    std::vector<int64_t> pos{0, 0, 0};
    auto step = [&](const std::vector<int64_t>& counts) {
      for (size_t r = 0; r < ids.size(); ++r) m.append_tokens(ids[r], counts[r]);
      for (int32_t layer = 0; layer < host.schema.num_layers(); ++layer)
        device_layer_step(m.acquire(layer), host.schema.layer(layer),
                          make_batch(host.schema.layer(layer), ids, slots, pos, counts), nullptr);
      for (size_t r = 0; r < ids.size(); ++r) pos[r] += counts[r];
    };
    // Prefill chunks of at most `window` tokens per slot per launch (append_swa's contract).
    step({100, 128, 5});
    step({120, 0, 3});
    step({41, 1, 0});
    for (int s = 0; s < 12; ++s) step({1, 1, 1});  // last positions 272, 140, 19
    // Decode queries at each request's last position.
    const int H = 4, D = host.schema.layer(0).head_dim;
    const auto qf = bf16_gaussian(static_cast<size_t>(3) * H * D, seed_for("dsv4.gpu.q"), 1.0f);
    const auto q = to_bf16_bits(qf);
    std::vector<int32_t> qpos;
    for (auto p : pos) qpos.push_back(static_cast<int32_t>(p - 1));
    DVec<uint16_t> q_d(q), o_d(q.size(), 0xFFFF);
    DVec<float> lse_d(3 * H);
    DVec<int32_t> slots_d(slots), qpos_d(qpos);
    for (int32_t layer = 0; layer < host.schema.num_layers(); ++layer) {
      const auto h = m.acquire(layer);
      Dsv4DecodeArgs a;
      a.q = dptr(q_d);
      a.o = dptr(o_d);
      a.lse = dptr(lse_d);
      a.request_slots = dptr(slots_d);
      a.positions = dptr(qpos_d);
      a.num_seqs = 3;
      a.num_heads = H;
      a.sm_scale = 1.0f / std::sqrt(static_cast<float>(D));
      gpu::dsv4_decode_attention(
          h.read_swa_view(),
          h.kind() == sim::Dsv4LayerKind::kSWA ? nullptr : &h.read_classical_view(), a, nullptr);
      dev.snapshot();
      std::vector<uint16_t> o_ref(q.size());
      std::vector<float> lse_ref(3 * H);
      a.q = q.data();
      a.o = o_ref.data();
      a.lse = lse_ref.data();
      a.request_slots = slots.data();
      a.positions = qpos.data();
      const auto& hv = dev.host_views[layer];
      ref::dsv4_decode_attention(hv.swa,
                                 hv.kind == sim::Dsv4LayerKind::kSWA ? nullptr : &hv.classical, a);
      const auto o_gpu = to_host(o_d);
      const auto lse_gpu = to_host(lse_d);
      std::vector<float> og(o_gpu.size()), orf(o_ref.size());
      for (size_t i = 0; i < og.size(); ++i) {
        og[i] = bf16_bits_to_float(o_gpu[i]);
        orf[i] = bf16_bits_to_float(o_ref[i]);
      }
      ErrorStats es, el;
      EXPECT_TRUE(check(og.data(), orf.data(), og.size(),
                        tolerance(Op::kDecodeAttention, KvFormat::kFP8E4M3PerToken, DType::kBF16),
                        &es))
          << "layer " << layer << ": " << to_string(es);
      EXPECT_TRUE(check(lse_gpu.data(), lse_ref.data(), lse_gpu.size(),
                        tolerance(Op::kDecodeLse, KvFormat::kFP8E4M3PerToken, DType::kF32), &el))
          << "layer " << layer << ": " << to_string(el);
      for (float x : orf)
        ASSERT_TRUE(std::isfinite(x)) << "layer " << layer << ": NaN read from an unwritten slot";
    }
    // The GPU's rings hold exactly the reference rings' entries (host pipeline).
    auto& hm = *host.mgr;
    for (auto id : ids) hm.admit_request(id);
    std::fill(pos.begin(), pos.end(), 0);
    auto host_step = [&](const std::vector<int64_t>& counts) {
      for (size_t r = 0; r < ids.size(); ++r) hm.append_tokens(ids[r], counts[r]);
      for (int32_t layer = 0; layer < host.schema.num_layers(); ++layer)
        host_layer_step(hm.acquire(layer), host.schema.layer(layer),
                        make_batch(host.schema.layer(layer), ids, slots, pos, counts));
      for (size_t r = 0; r < ids.size(); ++r) pos[r] += counts[r];
    };
    host_step({100, 128, 5});
    host_step({120, 0, 3});
    host_step({41, 1, 0});
    for (int s = 0; s < 12; ++s) host_step({1, 1, 1});
    // Rings: the same bytes for every position both hold; with pos % window the same
    // positions too (the atomic head may keep a different set after multi-token launches).
    for (int32_t layer = 0; layer < host.schema.num_layers(); ++layer)
      for (int32_t s : slots) {
        const auto hr = ring_by_position(hm.acquire(layer).read_swa_view(), s);
        const auto dr = ring_by_position(dev.host_views[layer].swa, s);
        if (var.ring == Dsv4RingMode::kPosModWindow)
          EXPECT_EQ(hr, dr) << "layer " << layer << " slot " << s;
        int common = 0;
        for (const auto& [p, bytes] : dr)
          if (hr.count(p)) {
            ++common;
            EXPECT_EQ(hr.at(p), bytes) << "layer " << layer << " slot " << s << " position " << p;
          }
        EXPECT_GT(common, 0);
      }
  }
}

// ------------------------------------------------------------------ zero-allocation acquire
TEST(Dsv4Gpu, AcquireAllocatesNothingAndWorksInsideACapturedGraph) {
  SKIP_WITHOUT_GPU();
  auto host = make_host_cache("test_mixed.ini", Dsv4Variant::public_v4(), 128, 2, 1024);
  auto dev = make_device_cache(host);
  auto& m = *dev.mgr;
  const std::vector<int64_t> ids{1, 2};
  std::vector<int32_t> slots;
  for (auto id : ids) slots.push_back(m.admit_request(id));
  std::vector<int64_t> pos{0, 0};
  // Prefill 128 tokens per request (CSA entries 0..31, HCA entry 0), outside any capture.
  for (auto id : ids) m.append_tokens(id, 128);
  for (int32_t layer = 0; layer < 3; ++layer)
    device_layer_step(m.acquire(layer), host.schema.layer(layer),
                      make_batch(host.schema.layer(layer), ids, slots, pos, {128, 128}), nullptr);
  for (auto id : ids)
    m.append_tokens(id, 3);  // blocks for the decode steps, allocated before capture

  // acquire(): 0 bytes of device memory.
  size_t free0 = 0, free1 = 0, total = 0;
  KVLAB_CUDA_CHECK(cudaMemGetInfo(&free0, &total));
  for (int rep = 0; rep < 1000; ++rep)
    for (int32_t layer = 0; layer < 3; ++layer) (void)m.acquire(layer).read_swa_view();
  KVLAB_CUDA_CHECK(cudaMemGetInfo(&free1, &total));
  EXPECT_EQ(free0, free1);
  const int64_t backend_bytes = m.backend().memory_bytes();

  // Capture one decode step of every layer: acquire, append_swa, decode attention. Global
  // capture mode: any allocation (cudaMalloc) during capture would invalidate it.
  cudaStream_t stream;
  KVLAB_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const int H = 2, D = 512;
  DVec<uint16_t> raw_d(3 * 2 * D), q_d(2 * H * D), o_d(3 * 2 * H * D, 0xFFFF);
  DVec<int32_t> slots_d(slots), pos_d(2);
  DVec<float> lse_d(3 * 2 * H);
  cudaGraph_t graph;
  KVLAB_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int32_t layer = 0; layer < 3; ++layer) {
    const auto h = m.acquire(layer);
    Dsv4AppendSwaArgs a{dptr(raw_d) + layer * 2 * D, dptr(slots_d), dptr(pos_d), 2};
    h.write_swa(a, stream);
    Dsv4DecodeArgs da;
    da.q = dptr(q_d);
    da.o = dptr(o_d) + layer * 2 * H * D;
    da.lse = dptr(lse_d) + layer * 2 * H;
    da.request_slots = dptr(slots_d);
    da.positions = dptr(pos_d);
    da.num_seqs = 2;
    da.num_heads = H;
    da.sm_scale = 1.0f / std::sqrt(static_cast<float>(D));
    gpu::dsv4_decode_attention(h.read_swa_view(), layer == 0 ? nullptr : &h.read_classical_view(),
                               da, stream);
  }
  KVLAB_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  KVLAB_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  EXPECT_EQ(m.backend().memory_bytes(), backend_bytes);

  // Replay at positions 128, 129, 130 with new tokens and queries each time (inputs are
  // updated in place between replays, as a serving loop would).
  std::vector<uint16_t> raw_h(3 * 2 * D), q_h;
  for (int t = 128; t <= 130; ++t) {
    for (int32_t layer = 0; layer < 3; ++layer)
      for (int r = 0; r < 2; ++r) {
        const auto x = to_bf16_bits(raw_token(ids[r], t, layer, D));
        std::copy(x.begin(), x.end(), raw_h.begin() + (layer * 2 + r) * D);
      }
    q_h = to_bf16_bits(bf16_gaussian(2 * H * D, seed_for("dsv4.gpu.graph.q") + t, 1.0f));
    const std::vector<int32_t> p{t, t};
    thrust::copy(raw_h.begin(), raw_h.end(), raw_d.begin());
    thrust::copy(q_h.begin(), q_h.end(), q_d.begin());
    thrust::copy(p.begin(), p.end(), pos_d.begin());
    KVLAB_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    KVLAB_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  // The rings hold positions 3..130, the last three written by the graph; the outputs of
  // the last replay match the reference over a copy of the arena.
  dev.snapshot();
  const auto o_gpu = to_host(o_d);
  for (int32_t layer = 0; layer < 3; ++layer) {
    const auto& hv = dev.host_views[layer];
    for (int r = 0; r < 2; ++r) {
      const auto ring = ring_by_position(hv.swa, slots[r]);
      ASSERT_EQ(ring.size(), 128u);
      EXPECT_EQ(ring.begin()->first, 3);
      EXPECT_EQ(ring.rbegin()->first, 130);
    }
    std::vector<uint16_t> o_ref(2 * H * D);
    const std::vector<int32_t> p{130, 130};
    Dsv4DecodeArgs a;
    a.q = q_h.data();
    a.o = o_ref.data();
    a.request_slots = slots.data();
    a.positions = p.data();
    a.num_seqs = 2;
    a.num_heads = H;
    a.sm_scale = 1.0f / std::sqrt(static_cast<float>(D));
    ref::dsv4_decode_attention(hv.swa, layer == 0 ? nullptr : &hv.classical, a);
    std::vector<float> og(o_ref.size()), orf(o_ref.size());
    for (size_t i = 0; i < og.size(); ++i) {
      og[i] = bf16_bits_to_float(o_gpu[layer * 2 * H * D + i]);
      orf[i] = bf16_bits_to_float(o_ref[i]);
    }
    ErrorStats es;
    EXPECT_TRUE(check(og.data(), orf.data(), og.size(),
                      tolerance(Op::kDecodeAttention, KvFormat::kFP8E4M3PerToken, DType::kBF16),
                      &es))
        << "layer " << layer << ": " << to_string(es);
  }
  KVLAB_CUDA_CHECK(cudaGraphExecDestroy(exec));
  KVLAB_CUDA_CHECK(cudaGraphDestroy(graph));
  KVLAB_CUDA_CHECK(cudaStreamDestroy(stream));
}

// ------------------------------------------------------------------ manager on the device
TEST(Dsv4Gpu, DeviceManagerLifecycleMirrorsTheHostManager) {
  SKIP_WITHOUT_GPU();
  // 4 slots of up to 64 tokens (4 blocks each) over 6 blocks: exhaustion is reachable.
  auto host = make_host_cache("test_tiny.ini", Dsv4Variant::per_token_scales(), 16, 4, 64,
                              /*extra_blocks=*/-10);
  ASSERT_EQ(host.budget.num_blocks, 6);
  auto dev = make_device_cache(host);
  std::mt19937_64 g(seed_for("dsv4.gpu.lifecycle"));
  std::vector<int64_t> live;
  int64_t next_id = 0;
  int ooms = 0;
  // First a deterministic exhaustion: two requests of 64 tokens need 8 blocks.
  for (auto* m : {host.mgr.get(), dev.mgr.get()}) {
    m->admit_request(1000);
    m->admit_request(1001);
    m->append_tokens(1000, 64);
    EXPECT_THROW(m->append_tokens(1001, 64), sim::OutOfBlocks);
    EXPECT_EQ(m->num_tokens(1001), 0);
    EXPECT_TRUE(m->blocks_of(1001).empty());
    EXPECT_EQ(m->num_free_blocks(), 2);
  }
  ASSERT_EQ(dev.dev->allocator().stack(nullptr), host.mgr->allocator().stack());
  for (auto* m : {host.mgr.get(), dev.mgr.get()}) {
    m->release_request(1000);
    m->release_request(1001);
  }
  ++ooms;
  for (int step = 0; step < 200; ++step) {
    const int op = static_cast<int>(g() % 4);
    if (op == 0 && host.mgr->num_free_slots() > 0) {
      ASSERT_EQ(host.mgr->admit_request(next_id), dev.mgr->admit_request(next_id));
      live.push_back(next_id++);
    } else if (op == 1 && !live.empty()) {
      const size_t k = g() % live.size();
      host.mgr->release_request(live[k]);
      dev.mgr->release_request(live[k]);  // device push + validation, synchronized
      live.erase(live.begin() + k);
    } else if (!live.empty()) {
      const int64_t id = live[g() % live.size()];
      const int64_t n = static_cast<int64_t>(g() % 20);
      if (host.mgr->num_tokens(id) + n > host.budget.max_context_tokens) continue;
      bool h_oom = false, d_oom = false;
      try {
        host.mgr->append_tokens(id, n);
      } catch (const sim::OutOfBlocks&) {
        h_oom = true;
      }
      try {
        dev.mgr->append_tokens(id, n);  // verify_mirror: throws if the device popped other ids
      } catch (const sim::OutOfBlocks&) {
        d_oom = true;
      }
      ASSERT_EQ(h_oom, d_oom);
      ooms += h_oom;
    }
    ASSERT_EQ(dev.dev->allocator().stack(nullptr), host.mgr->allocator().stack())
        << "step " << step;
  }
  // Block tables agree row by row.
  for (int32_t s = 0; s < host.budget.max_requests; ++s) {
    std::vector<int32_t> row(host.budget.max_blocks_per_request);
    KVLAB_CUDA_CHECK(cudaMemcpy(row.data(), dev.dev->block_table_row(s), 4 * row.size(),
                                cudaMemcpyDeviceToHost));
    EXPECT_TRUE(std::equal(row.begin(), row.end(), host.host->block_table_row(s))) << "slot " << s;
  }
  std::printf(
      "[dsv4] device manager lifecycle: 200 ops, %d OOMs, allocators and block tables identical\n",
      ooms);
  EXPECT_GT(ooms, 0);
}

}  // namespace
}  // namespace kvlab::test::dsv4

namespace kvlab::test::dsv4 {
namespace {

// ------------------------------------------------------------------ bad input
TEST(Dsv4Gpu, EntryPointsRejectBadInputBeforeLaunching) {
  SKIP_WITHOUT_GPU();
  Dsv4SwaView v;
  v.ring.nope_dim = 448;
  v.ring.rope_dim = 64;
  v.ring.rows = 128;
  v.ring.num_pages = 1;
  Dsv4AppendSwaArgs a;
  a.num_tokens = 1;
  EXPECT_THROW(gpu::dsv4_append_swa(v, a, nullptr), InvalidArgument);  // null inputs
  a.num_tokens = -1;
  EXPECT_THROW(gpu::dsv4_append_swa(v, a, nullptr), InvalidArgument);
  DVec<uint8_t> buf(1 << 20);
  DVec<int32_t> ints(1024);
  v.ring.data = dptr(buf);
  v.pos = dptr(ints);
  v.head = dptr(ints);
  v.ring.nope_dim = 512;  // 576 dims: above the decode kernel's 512
  Dsv4DecodeArgs d;
  d.q = reinterpret_cast<const uint16_t*>(dptr(buf));
  d.o = reinterpret_cast<uint16_t*>(dptr(buf));
  d.request_slots = dptr(ints);
  d.positions = dptr(ints);
  d.num_seqs = 1;
  d.num_heads = 1;
  EXPECT_THROW(gpu::dsv4_decode_attention(v, nullptr, d, nullptr), Unsupported);
  v.ring.nope_dim = 100;  // not a multiple of 64
  a = Dsv4AppendSwaArgs{reinterpret_cast<const uint16_t*>(dptr(buf)), dptr(ints), dptr(ints), 1};
  EXPECT_THROW(gpu::dsv4_append_swa(v, a, nullptr), InvalidArgument);
  Dsv4StreamView st;
  Dsv4CompressArgs c;
  c.num_requests = 1;
  EXPECT_THROW(gpu::dsv4_compress(st, c, nullptr), InvalidArgument);  // empty state
  gpu::GpuBlockAllocator alloc(4);
  EXPECT_THROW(alloc.acquire(5, dptr(ints), nullptr), sim::OutOfBlocks);
  EXPECT_EQ(alloc.num_free(), 4);
  EXPECT_THROW(alloc.release(dptr(ints), 5, nullptr), InvalidArgument);  // more ids than blocks
  EXPECT_THROW(gpu::GpuBlockAllocator(-1), InvalidArgument);
  KVLAB_CUDA_CHECK(cudaDeviceSynchronize());  // nothing was launched that could fault
}

// ------------------------------------------------------------------ append bandwidth
// Not a target of this issue (P9 belongs to the append kernels of gpu/), recorded for the
// closing note: bytes moved (BF16 token in, stored entry + position out) over the median
// time, against a device-to-device copy measured in the same run.
TEST(Dsv4Gpu, AppendSwaBandwidthAgainstCopy) {
  SKIP_WITHOUT_GPU();
  const int nope = 448, rope = 64, D = nope + rope, W = 128;
  const int64_t S = 2048, tokens = S * W;
  const auto xf = bf16_gaussian(static_cast<size_t>(tokens) * D, seed_for("dsv4.gpu.bw"), 1.0f);
  DVec<uint16_t> raw_d(to_bf16_bits(xf));
  std::vector<int32_t> slots(tokens), positions(tokens);
  for (int64_t i = 0; i < tokens; ++i) {
    slots[i] = static_cast<int32_t>(i / W);
    positions[i] = static_cast<int32_t>(i % W);
  }
  DVec<int32_t> slots_d(slots), positions_d(positions), pos_d(tokens, -1), head_d(S, 0);
  cudaEvent_t e0, e1;
  KVLAB_CUDA_CHECK(cudaEventCreate(&e0));
  KVLAB_CUDA_CHECK(cudaEventCreate(&e1));
  auto median_ms = [&](auto&& fn) {
    for (int i = 0; i < 3; ++i) fn();
    std::vector<float> ms;
    for (int i = 0; i < 21; ++i) {
      KVLAB_CUDA_CHECK(cudaEventRecord(e0));
      fn();
      KVLAB_CUDA_CHECK(cudaEventRecord(e1));
      KVLAB_CUDA_CHECK(cudaEventSynchronize(e1));
      float t = 0;
      KVLAB_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return std::pair<float, float>(ms[ms.size() / 2], ms.back() - ms.front());
  };
  const size_t copy_bytes = size_t{1} << 30;
  DVec<uint8_t> src(copy_bytes, 1), dst(copy_bytes);
  const auto copy = median_ms([&] {
    KVLAB_CUDA_CHECK(cudaMemcpyAsync(dptr(dst), dptr(src), copy_bytes, cudaMemcpyDeviceToDevice));
  });
  const double copy_bw = 2.0 * copy_bytes / (copy.first * 1e-3);
  for (auto fmt : {Dsv4EntryFormat::kFp8PerToken, Dsv4EntryFormat::kFp8DsMla}) {
    Dsv4SwaView v;
    v.ring.format = fmt;
    v.ring.nope_dim = nope;
    v.ring.rope_dim = rope;
    v.ring.rows = W;
    v.ring.num_pages = S;
    v.mode = Dsv4RingMode::kPosModWindow;
    DVec<uint8_t> data_d(fmt == Dsv4EntryFormat::kFp8PerToken ? tokens * nope : v.ring.bytes());
    DVec<uint16_t> rope_d(tokens * rope);
    DVec<float> inv_d(tokens);
    v.ring.data = dptr(data_d);
    v.ring.rope = dptr(rope_d);
    v.ring.inv_scale = dptr(inv_d);
    v.pos = dptr(pos_d);
    v.head = dptr(head_d);
    const Dsv4AppendSwaArgs a{dptr(raw_d), dptr(slots_d), dptr(positions_d),
                              static_cast<int32_t>(tokens)};
    const auto t = median_ms([&] { gpu::dsv4_append_swa(v, a, nullptr); });
    const double bytes =
        static_cast<double>(tokens) * (2.0 * D + dsv4_entry_bytes(fmt, nope, rope) + 4 + 8);
    std::printf(
        "[dsv4] append_swa %s: %lld tokens, median %.3f ms (spread %.3f), %.0f GB/s = %.1f%% of "
        "the measured "
        "D2D copy (%.0f GB/s)\n",
        fmt == Dsv4EntryFormat::kFp8PerToken ? "fp8_per_token" : "fp8_ds_mla",
        static_cast<long long>(tokens), t.first, t.second, bytes / (t.first * 1e-3) / 1e9,
        100.0 * bytes / (t.first * 1e-3) / copy_bw, copy_bw / 1e9);
    // The timed runs wrote what they should: the ring of the last slot holds its tokens.
    std::vector<int32_t> pos_h(W);
    KVLAB_CUDA_CHECK(
        cudaMemcpy(pos_h.data(), dptr(pos_d) + (S - 1) * W, 4 * W, cudaMemcpyDeviceToHost));
    for (int r = 0; r < W; ++r) ASSERT_EQ(pos_h[r], r);
  }
  KVLAB_CUDA_CHECK(cudaEventDestroy(e0));
  KVLAB_CUDA_CHECK(cudaEventDestroy(e1));
}

}  // namespace
}  // namespace kvlab::test::dsv4
