// decode_cases.h: the paged decode cases of the GPU decode tests (tests/gpu/test_decode.cu),
// host-only, so that the CPU measurement tool (tests/tolerance/tolerance_data.cpp) measures
// the quantized cache against the original data on exactly the cases the GPU tests check
// (same builder, names, seeds, shapes and lengths).
//
//   for (const DecodeConfig& c : curated_decode_configs())
//     ref::PagedCase pc = ref::make_paged_case(decode_case_spec(c, "decode.curated." +
//                                                                decode_case_label(c)));
#pragma once

#include <string>
#include <vector>

#include "reference/attention/paged_case.h"

namespace kvlab::test {

struct DecodeConfig {
  KvLayout layout;
  KvFormat format;
  DType q_dtype;
  int head_dim;
  int block_size;
  int qo_heads;
  int kv_heads;
  int max_len;
};

// e.g. "nhd_fp8_e4m3_bf16_d128_b16_h8x2" (gtest-safe).
std::string decode_case_label(const DecodeConfig& c);

// seeded_spec(name) with the config's shape and ref::awkward_seq_lens(block, max_len).
ref::PagedCaseSpec decode_case_spec(const DecodeConfig& c, const std::string& name);

// DecodeCurated: every format x layout pair, every block size with every layout, every
// head_dim with every layout, GQA groups 1/2/3/4/8 and MQA, bf16 and fp16 Q/O.
std::vector<DecodeConfig> curated_decode_configs();

// DecodeSmall (format, layout): block 16 with head_dim 64 and bf16 Q, block 1 with head_dim
// 128, fp16 Q and an explicit softmax scale; lengths 0 1 2 15 16 17 33 97 600.
std::vector<ref::PagedCaseSpec> small_decode_specs(KvFormat format, KvLayout layout);

// DecodeReport (format): NHD, 32 q / 8 kv heads, ref::awkward_seq_lens(16, 3001).
ref::PagedCaseSpec report_decode_spec(KvFormat format);

}  // namespace kvlab::test
