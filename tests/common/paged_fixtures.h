// paged_fixtures.h: thin gtest conveniences over reference/attention/paged_case.h (host-only,
// no Eigen: .cu tests may include it).
//
//   ref::PagedCaseSpec s = test::seeded_spec("decode.v3.fp8", KvLayout::kSplitX,
//   KvFormat::kFP8E4M3); s.seq_lens = ref::awkward_seq_lens(s.block_size, 3001); ref::PagedCase c =
//   ref::make_paged_case(s);          // c.describe() names the seed
//
// seeded_spec() draws the seed from the tensor name through test::seed_for (so
// KVLAB_TEST_SEED reseeds every case) and prints it; spec_label() is a gtest-safe name for
// parameterized tests.
#pragma once

#include <string>

#include "reference/attention/paged_case.h"

namespace kvlab::test {

ref::PagedCaseSpec seeded_spec(const char* name, KvLayout layout = KvLayout::kNHD,
                               KvFormat format = KvFormat::kBF16, DType q_dtype = DType::kBF16);

// e.g. "split_x_fp8_e4m3_bf16_h8x2_d128_b16": letters, digits and '_' only.
std::string spec_label(const ref::PagedCaseSpec& s);

}  // namespace kvlab::test
