// kvlab: the experiment driver. Everything lives in kvlab_exp (experiments/cli/cli.h).
#include <iostream>

#include "experiments/cli/cli.h"

int main(int argc, char** argv) {
  return kvlab::exp::cli_main(argc, argv, std::cout, std::cerr);
}
