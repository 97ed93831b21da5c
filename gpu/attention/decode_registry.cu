// decode_registry.cpp: the decode-version registry and the validating entry points of
// decode.h (layer 1 of the four: validate, ask the version, run it).
#include <cmath>
#include <cstdint>
#include <sstream>

#include "gpu/attention/decode.h"
#include "gpu/attention/decode_impl.h"
#include "gpu/core/cuda_check.h"
#include "gpu/dispatch.cuh"
#include "reference/layout/layout_names.h"

namespace kvlab::gpu {
namespace detail {
namespace {

const std::vector<DecodeVersionImpl>& impls() {
  // Function-local static: no CUDA call and no registration order issue at load time.
  static const std::vector<DecodeVersionImpl> v{make_v0_cached_attention(),
                                                make_v1_paged_attention(),
                                                make_v2_paged_attention_partitioned(),
                                                make_v3_flash_decoding(),
                                                make_v4_mma_decode(),
                                                make_v5_mma_decode_2stage(),
                                                make_v6_stream_k_decode(),
                                                make_v7_mma_decode_l2_prefetch(),
                                                make_v8_mma_decode_bulk_page(),
                                                make_v9_mma_decode_bulk_rows(),
                                                make_v10_mma_decode_tma_swizzle(),
                                                make_v11_mma_decode_cluster_merge(),
                                                make_v12_mma_decode_last_block_merge(),
                                                make_v13_mma_decode_eight_warps(),
                                                make_v14_mma_decode_page_heads(),
                                                make_v15_mma_decode_stream_k(),
                                                make_v16_mma_decode_shared_tiles()};
  return v;
}

const DecodeVersionImpl& impl(int id) {
  for (const auto& i : impls())
    if (i.info.id == id) return i;
  std::ostringstream os;
  os << "unknown decode version " << id << " (registered:";
  for (const auto& i : impls()) os << " " << i.info.id << "=" << i.info.name;
  os << ")";
  throw InvalidArgument(os.str());
}

bool aligned(const void* p, size_t a) {
  return reinterpret_cast<uintptr_t>(p) % a == 0;
}

}  // namespace

void validate_decode_args(const DecodeArgs& a) {
  const PageGeometry& g = a.kv.geom;
  validate(g);
  KVLAB_REQUIRE(a.num_seqs >= 0, "num_seqs must be >= 0, got " << a.num_seqs);
  KVLAB_REQUIRE(a.num_qo_heads > 0, "num_qo_heads must be positive, got " << a.num_qo_heads);
  KVLAB_REQUIRE(a.num_qo_heads % g.num_kv_heads == 0,
                "num_qo_heads " << a.num_qo_heads << " is not a multiple of num_kv_heads "
                                << g.num_kv_heads << " (GQA needs whole query-head groups)");
  KVLAB_REQUIRE(a.q_dtype == DType::kBF16 || a.q_dtype == DType::kF16 || a.q_dtype == DType::kF32,
                "invalid q_dtype value " << static_cast<int>(a.q_dtype));
  KVLAB_REQUIRE(a.max_blocks_per_seq >= 0,
                "max_blocks_per_seq must be >= 0, got " << a.max_blocks_per_seq);
  const int64_t table_tokens = static_cast<int64_t>(a.max_blocks_per_seq) * g.block_size;
  KVLAB_REQUIRE(a.max_seq_len >= 0 && a.max_seq_len <= table_tokens,
                "max_seq_len " << a.max_seq_len
                               << " is outside [0, max_blocks_per_seq * block_size = "
                               << table_tokens << "]");
  KVLAB_REQUIRE(seq_len_bound64(a) <= INT32_MAX,
                "sequence-length bound " << seq_len_bound64(a) << " exceeds int32");
  KVLAB_REQUIRE(
      std::isfinite(a.sm_scale) && a.sm_scale > 0,
      "sm_scale must be finite and > 0 (as ref::validate_decode_args), got " << a.sm_scale);
  if (kv_format_has_pool_scale(g.format)) {
    KVLAB_REQUIRE(std::isfinite(a.kv.k_scale) && a.kv.k_scale > 0 && std::isfinite(a.kv.v_scale) &&
                      a.kv.v_scale > 0,
                  to_string(g.format) << " needs finite positive k_scale/v_scale, got "
                                      << a.kv.k_scale << "/" << a.kv.v_scale);
  }
  if (a.num_seqs == 0) return;  // empty batch: nothing is read or written
  KVLAB_REQUIRE(a.q != nullptr, "q is null");
  KVLAB_REQUIRE(a.o != nullptr, "o is null");
  KVLAB_REQUIRE(a.kv.k != nullptr, "kv.k (K pool) is null");
  KVLAB_REQUIRE(a.kv.v != nullptr, "kv.v (V pool) is null");
  KVLAB_REQUIRE(a.block_table != nullptr, "block_table is null");
  KVLAB_REQUIRE(a.seq_lens != nullptr, "seq_lens is null");
  KVLAB_REQUIRE(a.max_blocks_per_seq > 0, "max_blocks_per_seq must be positive with num_seqs > 0");
  if (kv_format_has_token_scales(g.format) || kv_format_has_block_scales(g.format)) {
    KVLAB_REQUIRE(a.kv.k_scales != nullptr && a.kv.v_scales != nullptr,
                  to_string(g.format) << " needs kv.k_scales and kv.v_scales, got null");
  }
  // Vector loads/stores: Q/O rows and K/V 16-byte chunks (cudaMalloc gives 256 bytes).
  KVLAB_REQUIRE(aligned(a.q, 16) && aligned(a.o, 16), "q and o must be 16-byte aligned");
  KVLAB_REQUIRE(aligned(a.kv.k, 16) && aligned(a.kv.v, 16),
                "kv.k and kv.v must be 16-byte aligned");
  KVLAB_REQUIRE(a.lse == nullptr || aligned(a.lse, 4), "lse must be 4-byte aligned");
  if (kv_format_has_token_scales(g.format))
    KVLAB_REQUIRE(aligned(a.kv.k_scales, 4) && aligned(a.kv.v_scales, 4),
                  "per-token scales must be 4-byte aligned");
}

void validate_tuning(const DecodeTuning& t) {
  KVLAB_REQUIRE(t.num_splits >= 0,
                "tuning.num_splits must be >= 0 (0: the plan), got " << t.num_splits);
  KVLAB_REQUIRE(t.fill_waves >= 1, "tuning.fill_waves must be >= 1, got " << t.fill_waves);
  KVLAB_REQUIRE(t.max_chunk_bytes > 0,
                "tuning.max_chunk_bytes must be positive, got " << t.max_chunk_bytes);
  KVLAB_REQUIRE(t.min_wave_efficiency >= 0 && t.min_wave_efficiency <= 1,
                "tuning.min_wave_efficiency must be in [0, 1], got " << t.min_wave_efficiency);
  KVLAB_REQUIRE(t.min_items_unsplit >= 0,
                "tuning.min_items_unsplit must be >= 0, got " << t.min_items_unsplit);
  KVLAB_REQUIRE(t.many_items_chunk_factor >= 1,
                "tuning.many_items_chunk_factor must be >= 1, got " << t.many_items_chunk_factor);
  KVLAB_REQUIRE(t.max_wave_rule_waves >= 0,
                "tuning.max_wave_rule_waves must be >= 0, got " << t.max_wave_rule_waves);
  KVLAB_REQUIRE(
      t.min_tiles_per_block >= 0,
      "tuning.min_tiles_per_block must be >= 0 (0: the default), got " << t.min_tiles_per_block);
}

std::string common_unsupported_reason(const DecodeArgs& a) {
  if (a.q_dtype != DType::kBF16 && a.q_dtype != DType::kF16)
    return "GPU decode reads Q and writes O in bf16 or f16, got " + to_string(a.q_dtype);
  return head_dim_unsupported_reason(a.kv.geom.head_dim);
}

}  // namespace detail

const std::vector<DecodeVersionInfo>& decode_versions() {
  static const std::vector<DecodeVersionInfo> v = [] {
    std::vector<DecodeVersionInfo> out;
    for (const auto& i : detail::impls()) out.push_back(i.info);
    return out;
  }();
  return v;
}

const DecodeVersionInfo& decode_version(int id) {
  return detail::impl(id).info;
}

bool decode_version_in_scope(int id, const PageGeometry& g) {
  const auto& info = detail::impl(id).info;
  return info.in_scope == nullptr || info.in_scope(g);
}

std::string decode_unsupported_reason(const DecodeArgs& args, int version,
                                      const DecodeTuning& tuning) {
  const auto& im = detail::impl(version);
  std::string r = detail::common_unsupported_reason(args);
  if (!r.empty()) return r;
  return im.unsupported_reason(args, tuning);
}

size_t decode_workspace_bytes(const DecodeArgs& args, int version, const DecodeTuning& tuning) {
  const auto& im = detail::impl(version);
  detail::validate_decode_args(args);
  detail::validate_tuning(tuning);
  if (!detail::common_unsupported_reason(args).empty() ||
      !im.unsupported_reason(args, tuning).empty())
    return 0;
  return args.num_seqs == 0 ? 0 : im.workspace_bytes(args, tuning);
}

void decode_attention(const DecodeArgs& args, int version, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream) {
  decode_attention(args, version, DecodeTuning{}, workspace, workspace_bytes, stream);
}

void decode_attention(const DecodeArgs& args, int version, const DecodeTuning& tuning,
                      void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  const auto& im = detail::impl(version);
  detail::validate_decode_args(args);
  detail::validate_tuning(tuning);
  const std::string reason = decode_unsupported_reason(args, version, tuning);
  KVLAB_UNSUPPORTED_IF(!reason.empty(), im.info.name << ": " << reason);
  if (args.num_seqs == 0) return;
  const size_t need = im.workspace_bytes(args, tuning);
  KVLAB_REQUIRE(workspace_bytes >= need,
                im.info.name << " needs " << need << " workspace bytes, got " << workspace_bytes);
  KVLAB_REQUIRE(need == 0 || workspace != nullptr, im.info.name << " needs a workspace, got null");
  KVLAB_REQUIRE(need == 0 || reinterpret_cast<uintptr_t>(workspace) % 16 == 0,
                "workspace must be 16-byte aligned");
  im.run(args, tuning, workspace, stream);
}

}  // namespace kvlab::gpu
