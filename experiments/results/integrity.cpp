// integrity.cpp: checksums of result files (see integrity.h; the byte encoding is in
// result_file.h).
#include "experiments/results/integrity.h"

#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "experiments/h5/file_io.h"

namespace kvlab::exp {
namespace {

// The canonical fill value of floating-point cells (and what a reader's NaN is): skipped.
bool is_fill_nan(double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, 8);
  return bits == 0x7FF8000000000000ull;
}

class Stream {
 public:
  void byte(char c) { crc_ = crc32_of(&c, 1, crc_); }
  void name(const std::string& s) {
    crc_ = crc32_of(s.data(), s.size(), crc_);
    byte('\0');
  }
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void f64(double v) { raw(&v, 8); }
  void i64(int64_t v) { raw(&v, 8); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    crc_ = crc32_of(s.data(), s.size(), crc_);
  }
  uint32_t value() const { return crc_; }

 private:
  void raw(const void* p, size_t n) { crc_ = crc32_of(p, n, crc_); }  // little-endian hosts
  uint32_t crc_ = 0;
};

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());  // std::string compares bytes: the UTF-8 byte order
  return v;
}

enum class Class { kInt, kFloat, kString };

Class class_of(hid_t type) {
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return Class::kInt;
    case H5T_FLOAT:
      return Class::kFloat;
    case H5T_STRING:
      return Class::kString;
    default:
      throw h5::Error("unsupported HDF5 type class in a checksummed object");
  }
}

// One attribute's value as stored: 'i' / 'f' / 's', a count, then the elements.
void encode_attr(hid_t obj, const std::string& name, const h5::Object& o, Stream& s) {
  const hid_t a = H5Aopen(obj, name.c_str(), H5P_DEFAULT);
  if (a < 0) throw h5::Error("cannot open attribute " + name + " of " + o.path());
  h5::Id attr(a, H5Aclose);
  h5::Id type(H5Aget_type(a), H5Tclose);
  h5::Id space(H5Aget_space(a), H5Sclose);
  const hssize_t np = H5Sget_simple_extent_npoints(space.get());
  const uint64_t n = np < 0 ? 0 : static_cast<uint64_t>(np);
  const Class c = class_of(type.get());
  if (c == Class::kString) {
    s.byte('s');
    s.u64(n);
    for (const auto& x : n ? o.attr_strings(name) : std::vector<std::string>{}) s.str(x);
  } else if (c == Class::kInt) {
    s.byte('i');
    s.u64(n);
    std::vector<int64_t> v(n);
    if (n && H5Aread(a, H5T_NATIVE_INT64, v.data()) < 0)
      throw h5::Error("cannot read attribute " + name + " of " + o.path());
    for (int64_t x : v) s.i64(x);
  } else {
    s.byte('f');
    s.u64(n);
    for (double x : n ? o.attr_doubles(name) : std::vector<double>{}) s.f64(x);
  }
}

void encode_attrs(const h5::Object& o, const std::string& skip, Stream& s) {
  for (const auto& name : sorted(o.attr_names())) {
    if (name == skip) continue;
    s.byte('a');
    s.name(name);
    encode_attr(o.id(), name, o, s);
  }
}

void encode_group(const h5::Group& g, const std::string& skip, Stream& s) {
  encode_attrs(g, skip, s);
  for (const auto& child : sorted(g.children())) {
    if (g.is_group(child)) {
      s.byte('G');
      s.name(child);
      encode_group(g.open_group(child), "", s);
      s.byte('E');
      continue;
    }
    const h5::Dataset d = g.open_dataset(child);
    s.byte('D');
    s.name(child);
    const auto shape = d.shape();
    s.u32(static_cast<uint32_t>(shape.size()));
    for (uint64_t x : shape) s.u64(x);
    encode_attrs(d, "", s);
    const h5::ColumnData v = d.read();
    if (v.type == h5::Type::kString) {
      s.byte('s');
      s.u64(v.str.size());
      for (const auto& x : v.str) s.str(x);
    } else if (v.type == h5::Type::kFloat64 || v.type == h5::Type::kFloat32) {
      s.byte('f');
      s.u64(v.f64.size());
      for (double x : v.f64) s.f64(x);
    } else {
      s.byte('i');
      s.u64(v.i64.size());
      for (int64_t x : v.i64) s.i64(x);
    }
  }
}

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "%08x", v);
  return b;
}

int64_t stored_crc(uint32_t c) {
  return static_cast<int64_t>(c);
}

}  // namespace

uint32_t row_checksum(const std::vector<std::pair<std::string, h5::Value>>& row) {
  std::vector<const std::pair<std::string, h5::Value>*> cells;
  for (const auto& c : row) {
    if (c.first == kRowCrc || c.first == "group") continue;
    if (const auto* t = std::get_if<std::string>(&c.second); t && t->empty()) continue;
    if (const auto* d = std::get_if<double>(&c.second); d && is_fill_nan(*d)) continue;
    cells.push_back(&c);
  }
  std::sort(cells.begin(), cells.end(), [](auto* a, auto* b) { return a->first < b->first; });
  Stream s;
  for (const auto* c : cells) {
    s.name(c->first);
    if (const auto* t = std::get_if<std::string>(&c->second)) {
      s.byte('s');
      s.str(utf8_safe(*t));  // what the file stores
    } else if (const auto* d = std::get_if<double>(&c->second)) {
      s.byte('n');
      s.f64(*d);
    } else {
      s.byte('n');
      s.f64(static_cast<double>(std::get<int64_t>(c->second)));
    }
  }
  return s.value();
}

uint32_t group_checksum(const h5::Group& g) {
  Stream s;
  encode_group(g, kContentCrc, s);
  return s.value();
}

uint32_t attrs_checksum(const h5::Object& o, const std::string& skip) {
  Stream s;
  encode_attrs(o, skip, s);
  return s.value();
}

void append_sealed_row(h5::Table& t, const std::vector<std::pair<std::string, h5::Value>>& row) {
  std::vector<std::pair<std::string, h5::Value>> stored = t.row_as_stored(row);
  std::vector<std::pair<std::string, h5::Value>> cells = row;
  cells.emplace_back(kRowCrc, stored_crc(row_checksum(stored)));
  t.append_row(cells);
}

void reseal_row(h5::Table& t, uint64_t row) {
  std::vector<std::pair<std::string, h5::Value>> cells;
  for (const auto& c : t.columns()) {
    if (c.name == kRowCrc) continue;
    const h5::ColumnData d = t.read(c.name);
    if (d.type == h5::Type::kString)
      cells.emplace_back(c.name, d.str[row]);
    else if (d.type == h5::Type::kFloat64 || d.type == h5::Type::kFloat32)
      cells.emplace_back(c.name, d.f64[row]);
    else
      cells.emplace_back(c.name, d.i64[row]);
  }
  t.set(row, kRowCrc, stored_crc(row_checksum(cells)));
}

void seal_group(h5::Group& g) {
  g.set_attr(kContentCrc, stored_crc(group_checksum(g)));
}

void seal_root(h5::File& f) {
  f.set_attr(kAttrsCrc, stored_crc(attrs_checksum(f, kAttrsCrc)));
}

void Verification::add(const std::string& what, size_t limit) {
  ++damaged;
  if (problems.size() < limit) problems.push_back(what);
}

void verify_table(const h5::Group& parent, const std::string& name, Verification* v) {
  h5::Table t;
  try {
    t = h5::Table::open(parent, name);
  } catch (const h5::Error& e) {
    v->add("/" + name + ": " + e.what());
    return;
  }
  if (!t.has_column(kRowCrc)) {
    v->add("/" + name + " has no row_crc column: its rows cannot be verified");
    return;
  }
  std::vector<h5::ColumnData> cols;
  std::vector<std::string> names;
  try {
    for (const auto& c : t.columns()) {
      names.push_back(c.name);
      cols.push_back(t.read(c.name));
    }
  } catch (const h5::Error& e) {
    v->add("/" + name + ": a column cannot be read (" + e.what() + ")");
    return;
  }
  const auto crc_at = std::find(names.begin(), names.end(), kRowCrc) - names.begin();
  const h5::ColumnData& crc = cols[static_cast<size_t>(crc_at)];
  if (crc.type == h5::Type::kString) {
    v->add("/" + name + "/row_crc is not numeric");
    return;
  }
  std::vector<std::string> keys;
  if (t.has_column("key") && t.column("key").type == h5::Type::kString) keys = t.read_strings("key");
  for (uint64_t r = 0; r < t.rows(); ++r) {
    std::vector<std::pair<std::string, h5::Value>> row;
    for (size_t c = 0; c < cols.size(); ++c) {
      const h5::ColumnData& d = cols[c];
      if (d.type == h5::Type::kString)
        row.emplace_back(names[c], d.str[r]);
      else if (d.type == h5::Type::kFloat64 || d.type == h5::Type::kFloat32)
        row.emplace_back(names[c], d.f64[r]);
      else
        row.emplace_back(names[c], d.i64[r]);
    }
    const uint32_t want = row_checksum(row);
    const int64_t have = crc.type == h5::Type::kInt64 || crc.type == h5::Type::kInt32
                             ? crc.i64[r]
                             : static_cast<int64_t>(crc.f64[r]);
    ++v->rows;
    if (have != stored_crc(want))
      v->add("/" + name + " row " + std::to_string(r) +
             (r < keys.size() ? " (" + keys[r] + ")" : "") + ": row_crc " +
             hex(static_cast<uint32_t>(have)) + " but the row's cells give " + hex(want));
  }
}

void verify_group(const h5::Group& g, const std::string& what, Verification* v) {
  ++v->groups;
  try {
    if (!g.has_attr(kContentCrc)) {
      v->add(what + " has no content_crc: it cannot be verified");
      return;
    }
    const int64_t have = g.attr_int(kContentCrc);
    const uint32_t want = group_checksum(g);
    if (have != stored_crc(want))
      v->add(what + ": content_crc " + hex(static_cast<uint32_t>(have)) +
             " but its contents give " + hex(want));
  } catch (const h5::Error& e) {
    v->add(what + " cannot be read (" + e.what() + ")");
  }
}

}  // namespace kvlab::exp
