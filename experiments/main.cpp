// kvlab: the experiment driver. Everything lives in kvlab_exp (experiments/cli/cli.h).
#include <csignal>
#include <iostream>

#include "experiments/cli/cli.h"

int main(int argc, char** argv) {
  // Past a file size limit (ulimit -f) a write fails with EFBIG, which kvlab reports as an
  // I/O error after undoing the partial commit, instead of the process dying mid-commit.
  std::signal(SIGXFSZ, SIG_IGN);
  return kvlab::exp::cli_main(argc, argv, std::cout, std::cerr);
}
