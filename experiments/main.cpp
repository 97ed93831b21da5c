// kvlab: the experiment driver (placeholder entry point until the driver lands).
#include <iostream>

#include "experiments/build_info.h"

int main() {
  const auto b = kvlab::exp::build_info();
  std::cout << "kvlab " << b.version << " (" << b.build_type << ", " << b.compiler
            << (b.cuda ? ", CUDA " + b.cuda_version : ", no CUDA") << ")\n";
  return 0;
}
