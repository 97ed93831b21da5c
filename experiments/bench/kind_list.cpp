// kind_list.cpp: lookup by name (see kind_list.h).
#include "experiments/bench/kind_list.h"

#include <utility>

#include "reference/core/error.h"

namespace kvlab::exp {

KindList::KindList(std::vector<std::unique_ptr<Bench>> kinds) : kinds_(std::move(kinds)) {}

std::vector<std::string> KindList::names() const {
  std::vector<std::string> n;
  for (const auto& k : kinds_) n.push_back(k->name());
  return n;
}

Bench& KindList::find(const std::string& name) const {
  for (const auto& k : kinds_)
    if (k->name() == name) return *k;
  std::string all;
  for (const auto& n : names()) all += (all.empty() ? "" : ", ") + n;
  throw InvalidArgument("unknown kind '" + name + "' (known kinds: " + all + ")");
}

}  // namespace kvlab::exp
