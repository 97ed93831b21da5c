// table_trace.h: small helpers the benches share to turn result vectors into traces.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "experiments/bench/bench.h"

namespace kvlab::exp {

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
