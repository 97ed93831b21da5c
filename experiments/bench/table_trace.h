// table_trace.h: small helpers the benches share to turn result vectors into traces.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "experiments/bench/bench.h"
#include "reference/core/error.h"

namespace kvlab::exp {

// Axis rules the kinds share (bench.h AxisSpec: the one validation rule of every axis).
constexpr int64_t kMaxSeed = std::numeric_limits<int64_t>::max();  // any non-negative 64-bit seed
constexpr int64_t kMaxTensorElements = int64_t{1} << 31;  // 8 GiB of float32 in one CPU tensor

// An axis check from a lookup that throws for unknown names (a GPU of the table, a model file).
template <class Lookup>
std::function<std::string(const std::string&)> known_by(Lookup lookup) {
  return [lookup](const std::string& v) -> std::string {
    try {
      lookup(v);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
}

// Runs fn(i) for i in [0, n) on up to `threads` threads (the calling one included): the CPU
// reference work of one point, sized per worker (RunContext::cpu_threads = cores / workers).
template <class Fn>
void parallel_for(int n, int threads, Fn fn) {
  const int t = std::max(1, std::min(threads, n));
  if (t <= 1) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(t));
  for (int w = 0; w < t; ++w)
    pool.emplace_back([&, w] {
      try {
        for (int i = w; i < n; i += t) fn(i);
      } catch (...) {
        errors[static_cast<size_t>(w)] = std::current_exception();
      }
    });
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// A tensor a CPU kind allocates (the product of these integer axes) must stay below
// kMaxTensorElements: a bigger one is bad input (exit code 2), not an out-of-memory failure.
inline void require_tensor_fits(const Point& p, std::initializer_list<const char*> dims,
                                int64_t limit = kMaxTensorElements) {
  long double n = 1;
  std::string what;
  for (const char* d : dims) {
    n *= static_cast<long double>(p.integer(d));
    what += (what.empty() ? "" : " x ") + std::string(d) + " " + p.str(d);
  }
  if (n > static_cast<long double>(limit))
    throw InvalidArgument(what + " is more than " + std::to_string(limit) +
                          " elements (8 GiB of float32): too large for one CPU tensor");
}

// A column of any arithmetic vector: integers become int64, floating point float64.
template <class T>
h5::ColumnData column_of(const std::vector<T>& v) {
  static_assert(std::is_arithmetic<T>::value, "numeric columns only");
  if constexpr (std::is_integral<T>::value) {
    return h5::ColumnData::of(std::vector<int64_t>(v.begin(), v.end()));
  } else {
    return h5::ColumnData::of(std::vector<double>(v.begin(), v.end()));
  }
}

// Builds a table trace column by column: add("name", vector, "unit", "doc").
class TableTrace {
 public:
  TableTrace(std::string name, std::string doc) {
    t_.name = std::move(name);
    t_.doc = std::move(doc);
  }
  template <class T>
  TableTrace& add(const std::string& name, const std::vector<T>& v, const std::string& unit = "",
                  const std::string& doc = "") {
    h5::ColumnData c = column_of(v);
    t_.columns.emplace_back(h5::Table::Column{name, c.type, unit, doc}, std::move(c));
    return *this;
  }
  TableTrace& add_strings(const std::string& name, std::vector<std::string> v,
                          const std::string& doc = "") {
    t_.columns.emplace_back(h5::Table::Column{name, h5::Type::kString, "", doc},
                            h5::ColumnData::of(std::move(v)));
    return *this;
  }
  Trace take() { return std::move(t_); }

 private:
  Trace t_;
};

}  // namespace kvlab::exp
