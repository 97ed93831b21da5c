#include "tests/common/test_env.h"

#include <cstdlib>
#include <cstring>

namespace kvlab::test {

uint64_t seed_for(const char* tensor_name, uint64_t base) {
  // FNV-1a over the name, mixed with the base seed: a fixed, printable seed per tensor.
  uint64_t h = 1469598103934665603ull ^ base;
  for (const char* p = tensor_name; *p; ++p) {
    h ^= static_cast<unsigned char>(*p);
    h *= 1099511628211ull;
  }
  if (const char* env = std::getenv("KVLAB_TEST_SEED")) h ^= std::strtoull(env, nullptr, 10);
  return h;
}

}  // namespace kvlab::test
