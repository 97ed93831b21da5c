// prefill_registry.cu: the paged-prefill version registry and the validating entry points of
// prefill.h (layer 1 of the four: validate, ask the version, run it).
#include <cmath>
#include <cstdint>
#include <sstream>
#include <vector>

#include "gpu/attention/prefill.h"
#include "gpu/attention/prefill_impl.h"
#include "gpu/core/cuda_check.h"
#include "gpu/dispatch.cuh"
#include "reference/attention/attention.h"
#include "reference/layout/layout_names.h"

namespace kvlab::gpu {
namespace detail {
namespace {

const std::vector<PrefillVersionImpl>& impls() {
  // Function-local static: no CUDA call and no registration order issue at load time.
  static const std::vector<PrefillVersionImpl> v{make_prefill_paged_v0_flash_mma()};
  return v;
}

const PrefillVersionImpl& impl(int id) {
  for (const auto& i : impls())
    if (i.info.id == id) return i;
  std::ostringstream os;
  os << "unknown prefill version " << id << " (registered:";
  for (const auto& i : impls()) os << " " << i.info.id << "=" << i.info.name;
  os << ")";
  throw InvalidArgument(os.str());
}

bool aligned(const void* p, size_t a) {
  return reinterpret_cast<uintptr_t>(p) % a == 0;
}

}  // namespace

void validate_prefill_args(const PagedPrefillArgs& a) {
  const PageGeometry& g = a.kv.geom;
  const char* w = "prefill_attention: ";
  validate(g);
  KVLAB_REQUIRE(a.num_seqs >= 0, w << "num_seqs must be >= 0, got " << a.num_seqs);
  KVLAB_REQUIRE(a.num_qo_heads > 0 && a.num_qo_heads % g.num_kv_heads == 0,
                w << "num_qo_heads " << a.num_qo_heads
                  << " must be a positive multiple of num_kv_heads " << g.num_kv_heads);
  KVLAB_REQUIRE(a.q_dtype == DType::kBF16 || a.q_dtype == DType::kF16,
                w << "q_dtype " << to_string(a.q_dtype) << " is not allowed (allowed: bf16, f16)");
  KVLAB_REQUIRE(a.max_blocks_per_seq >= 0,
                w << "max_blocks_per_seq must be >= 0, got " << a.max_blocks_per_seq);
  const int64_t table_tokens = static_cast<int64_t>(a.max_blocks_per_seq) * g.block_size;
  KVLAB_REQUIRE(table_tokens <= INT32_MAX,
                w << "max_blocks_per_seq * block_size = " << table_tokens << " exceeds int32");
  KVLAB_REQUIRE(a.max_seq_len >= 0 && a.max_seq_len <= table_tokens,
                w << "max_seq_len " << a.max_seq_len
                  << " is outside [0, max_blocks_per_seq * block_size = " << table_tokens << "]");
  KVLAB_REQUIRE(a.max_q_len >= 0 && a.max_q_len <= a.seq_len_bound(),
                w << "max_q_len " << a.max_q_len << " is outside [0, sequence-length bound "
                  << a.seq_len_bound() << "]");
  KVLAB_REQUIRE(std::isfinite(a.sm_scale) && a.sm_scale > 0,
                w << "sm_scale must be finite and > 0, got " << a.sm_scale);
  if (kv_format_has_pool_scale(g.format))
    KVLAB_REQUIRE(std::isfinite(a.kv.k_scale) && a.kv.k_scale > 0 && std::isfinite(a.kv.v_scale) &&
                      a.kv.v_scale > 0,
                  w << to_string(g.format) << " needs finite positive k_scale/v_scale, got "
                    << a.kv.k_scale << "/" << a.kv.v_scale);
  if (a.num_seqs == 0) return;
  KVLAB_REQUIRE(a.q != nullptr && a.o != nullptr, w << "null q or o");
  KVLAB_REQUIRE(a.kv.k != nullptr && a.kv.v != nullptr, w << "null K or V pool");
  KVLAB_REQUIRE(a.q_start != nullptr && a.seq_lens != nullptr && a.block_table != nullptr,
                w << "null q_start, seq_lens or block_table");
  KVLAB_REQUIRE(a.max_blocks_per_seq > 0,
                w << "max_blocks_per_seq must be positive with sequences");
  KVLAB_REQUIRE(aligned(a.q, 16) && aligned(a.o, 16), w << "q and o must be 16-byte aligned");
  KVLAB_REQUIRE(aligned(a.kv.k, 16) && aligned(a.kv.v, 16),
                w << "kv.k and kv.v must be 16-byte aligned");
  KVLAB_REQUIRE(a.lse == nullptr || aligned(a.lse, 4), w << "lse must be 4-byte aligned");
}

}  // namespace detail

const std::vector<PrefillVersionInfo>& prefill_versions() {
  static const std::vector<PrefillVersionInfo> v = [] {
    std::vector<PrefillVersionInfo> out;
    for (const auto& i : detail::impls()) out.push_back(i.info);
    return out;
  }();
  return v;
}

const PrefillVersionInfo& prefill_version(int id) {
  return detail::impl(id).info;
}

std::string prefill_unsupported_reason(const PagedPrefillArgs& args, int version) {
  const auto& im = detail::impl(version);
  const std::string hd = head_dim_unsupported_reason(args.kv.geom.head_dim);
  if (!hd.empty()) return hd;
  return im.unsupported_reason(args);
}

void prefill_attention(const PagedPrefillArgs& args, int version, cudaStream_t stream) {
  const auto& im = detail::impl(version);
  detail::validate_prefill_args(args);
  const std::string reason = prefill_unsupported_reason(args, version);
  KVLAB_UNSUPPORTED_IF(!reason.empty(), im.info.name << ": " << reason);
  if (args.num_seqs == 0) return;
  im.run(args, stream);
}

void validate_prefill_tables(const PagedPrefillArgs& args, cudaStream_t stream) {
  detail::validate_prefill_args(args);
  if (args.num_seqs == 0) return;
  KVLAB_CUDA_CHECK(cudaStreamSynchronize(stream));
  const size_t n = static_cast<size_t>(args.num_seqs);
  std::vector<int32_t> q_start(n + 1), seq_lens(n),
      table(n * static_cast<size_t>(args.max_blocks_per_seq));
  KVLAB_CUDA_CHECK(cudaMemcpy(q_start.data(), args.q_start, (n + 1) * 4, cudaMemcpyDeviceToHost));
  KVLAB_CUDA_CHECK(cudaMemcpy(seq_lens.data(), args.seq_lens, n * 4, cudaMemcpyDeviceToHost));
  KVLAB_CUDA_CHECK(
      cudaMemcpy(table.data(), args.block_table, table.size() * 4, cudaMemcpyDeviceToHost));
  PagedPrefillArgs h = args;  // device q/o/pools are never dereferenced by the checks
  h.q_start = q_start.data();
  h.seq_lens = seq_lens.data();
  h.block_table = table.data();
  ref::validate_paged_prefill_args(h);
}

}  // namespace kvlab::gpu
