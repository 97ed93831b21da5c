// prefill_case.cpp: see prefill_case.h.
#include "reference/attention/prefill_case.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "reference/core/error.h"
#include "reference/formats/formats.h"
#include "reference/synth/synth.h"

namespace kvlab::ref {

PagedPrefillCase make_paged_prefill_case(const PagedPrefillCaseSpec& spec) {
  const auto& lens = spec.cache.seq_lens;
  KVLAB_REQUIRE(spec.q_lens.size() == lens.size(), "prefill case: " << spec.q_lens.size()
                                                                    << " q_lens for " << lens.size()
                                                                    << " sequences");
  for (size_t s = 0; s < lens.size(); ++s)
    KVLAB_REQUIRE(spec.q_lens[s] >= 0 && spec.q_lens[s] <= lens[s],
                  "prefill case: q_lens[" << s << "] = " << spec.q_lens[s]
                                          << " outside [0, seq_len " << lens[s] << "]");
  KVLAB_REQUIRE(std::isfinite(spec.q_scale),
                "prefill case: q_scale " << spec.q_scale << " is not finite");
  PagedPrefillCase c;
  c.cache = make_paged_case(spec.cache);
  c.q_lens = spec.q_lens;
  c.q_start.assign(1, 0);
  for (int32_t n : spec.q_lens) {
    c.q_start.push_back(c.q_start.back() + n);
    c.max_q_len = std::max(c.max_q_len, n);
  }
  const int64_t n = c.o_elements();
  c.q.resize(static_cast<size_t>(n));
  SynthRng rng(spec.cache.seed ^ 0x9E3779B97F4A7C15ull ^ 0x51ef111ull);
  const DType dt = spec.cache.q_dtype;
  for (int64_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(spec.q_scale * rng.gaussian());
    c.q[static_cast<size_t>(i)] = dt == DType::kBF16
                                      ? float_to_bf16_bits(x, Saturation::kNonSaturating)
                                      : float_to_fp16_bits(x, Saturation::kNonSaturating);
  }
  return c;
}

PagedPrefillArgs PagedPrefillCase::args(void* o, float* lse) {
  PagedPrefillArgs a;
  a.q_dtype = cache.spec.q_dtype;
  a.q = q.data();
  a.o = o;
  a.lse = lse;
  a.kv = cache.kv_view();
  a.q_start = q_start.data();
  a.seq_lens = cache.seq_lens.data();
  a.block_table = cache.block_table.data();
  a.num_seqs = cache.num_seqs();
  a.num_qo_heads = cache.spec.num_qo_heads;
  a.max_blocks_per_seq = cache.max_blocks_per_seq;
  a.max_q_len = max_q_len;
  a.max_seq_len = cache.max_seq_len;
  a.sm_scale = cache.sm_scale;
  return a;
}

std::string PagedPrefillCase::describe() const {
  std::ostringstream os;
  os << cache.describe() << " q_lens=[";
  for (size_t i = 0; i < q_lens.size(); ++i) os << (i ? "," : "") << q_lens[i];
  os << "]";
  return os.str();
}

}  // namespace kvlab::ref
