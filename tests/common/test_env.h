// test_env.h: deterministic seeds for test tensors. KVLAB_TEST_SEED=<n> reseeds every test.
#pragma once

#include <cstdint>

namespace kvlab::test {

// A fixed seed derived from the tensor's name (print it in failure messages).
uint64_t seed_for(const char* tensor_name, uint64_t base = 0);

}  // namespace kvlab::test
