#include "tests/common/decode_cases.h"

#include "reference/layout/layout_names.h"
#include "tests/common/paged_fixtures.h"

namespace kvlab::test {

std::string decode_case_label(const DecodeConfig& c) {
  return to_string(c.layout) + "_" + to_string(c.format) + "_" + to_string(c.q_dtype) + "_d" +
         std::to_string(c.head_dim) + "_b" + std::to_string(c.block_size) + "_h" +
         std::to_string(c.qo_heads) + "x" + std::to_string(c.kv_heads);
}

ref::PagedCaseSpec decode_case_spec(const DecodeConfig& c, const std::string& name) {
  ref::PagedCaseSpec s = seeded_spec(name.c_str(), c.layout, c.format, c.q_dtype);
  s.head_dim = c.head_dim;
  s.block_size = c.block_size;
  s.num_qo_heads = c.qo_heads;
  s.num_kv_heads = c.kv_heads;
  s.seq_lens = ref::awkward_seq_lens(c.block_size, c.max_len);
  return s;
}

std::vector<DecodeConfig> curated_decode_configs() {
  const int head_dims[] = {64, 128, 256};
  const int blocks[] = {1, 8, 16, 32, 64, 128, 256};
  const int groups[][2] = {{8, 8}, {8, 4},  {6, 2},
                           {8, 2}, {16, 2}, {8, 1}};  // g 1, 2, 3, 4, 8, MQA
  std::vector<DecodeConfig> v;
  int i = 0;
  for (KvFormat f : all_kv_formats()) {
    for (KvLayout l : all_kv_layouts()) {
      DecodeConfig c;
      c.layout = l;
      c.format = f;
      c.q_dtype = ((i / 3 + i) % 2) ? DType::kF16 : DType::kBF16;
      c.head_dim = head_dims[(i / 7) % 3];
      c.block_size = blocks[i % 7];
      c.qo_heads = groups[i % 6][0];
      c.kv_heads = groups[i % 6][1];
      c.max_len = 3001;
      v.push_back(c);
      ++i;
    }
  }
  return v;
}

std::vector<ref::PagedCaseSpec> small_decode_specs(KvFormat f, KvLayout l) {
  std::vector<ref::PagedCaseSpec> v;
  for (const auto& [d, bs] : std::vector<std::pair<int, int>>{{64, 16}, {128, 1}}) {
    const DecodeConfig cfg{l, f, bs == 1 ? DType::kF16 : DType::kBF16, d, bs, 8, 2, 600};
    ref::PagedCaseSpec s = decode_case_spec(cfg, "decode.small." + decode_case_label(cfg));
    s.seq_lens = {0, 1, 2, 15, 16, 17, 33, 97, 600};
    if (bs == 1) s.sm_scale = 0.37f;  // an explicit softmax scale (not 1/sqrt(head_dim))
    v.push_back(s);
  }
  return v;
}

ref::PagedCaseSpec report_decode_spec(KvFormat f) {
  ref::PagedCaseSpec s = seeded_spec(("decode.report." + to_string(f)).c_str(), KvLayout::kNHD, f);
  s.num_qo_heads = 32;
  s.num_kv_heads = 8;
  s.seq_lens = ref::awkward_seq_lens(16, 3001);
  return s;
}

}  // namespace kvlab::test
