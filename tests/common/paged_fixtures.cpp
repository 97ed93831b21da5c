#include "tests/common/paged_fixtures.h"

#include <cstdio>

#include "reference/layout/layout_names.h"
#include "tests/common/test_env.h"

namespace kvlab::test {

ref::PagedCaseSpec seeded_spec(const char* name, KvLayout layout, KvFormat format, DType q_dtype) {
  ref::PagedCaseSpec s;
  s.layout = layout;
  s.format = format;
  s.q_dtype = q_dtype;
  s.seed = seed_for(name);
  std::printf("[seed] %s = %llu\n", name, static_cast<unsigned long long>(s.seed));
  return s;
}

std::string spec_label(const ref::PagedCaseSpec& s) {
  return to_string(s.layout) + "_" + to_string(s.format) + "_" + to_string(s.q_dtype) + "_h" +
         std::to_string(s.num_qo_heads) + "x" + std::to_string(s.num_kv_heads) + "_d" +
         std::to_string(s.head_dim) + "_b" + std::to_string(s.block_size);
}

}  // namespace kvlab::test
