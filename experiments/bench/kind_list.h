// kind_list.h: a list of point kinds (benches) looked up by name.
//
// The driver's one list of every kind is built by the registry beside the command line
// (experiments/cli/registry.h); sweep expansion, the runner and the result file receive it
// as a KindList, so none of them includes the registry (and through it every kind).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "experiments/bench/bench.h"

namespace kvlab::exp {

class KindList {
 public:
  KindList() = default;
  explicit KindList(std::vector<std::unique_ptr<Bench>> kinds);

  // The kind of that name; InvalidArgument listing the known kinds when there is none.
  Bench& find(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::vector<std::unique_ptr<Bench>>& all() const { return kinds_; }

 private:
  std::vector<std::unique_ptr<Bench>> kinds_;
};

}  // namespace kvlab::exp
