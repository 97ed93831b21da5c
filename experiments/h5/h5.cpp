// h5.cpp: the RAII layer over the HDF5 C API (see h5.h).
#include "experiments/h5/h5.h"

#include "experiments/h5/file_io.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>

namespace kvlab::exp::h5 {
namespace {

// HDF5 prints its error stack to stderr by default; we throw instead.
void quiet() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

herr_t walk_cb(unsigned, const H5E_error2_t* e, void* data) {
  auto* out = static_cast<std::string*>(data);
  if (e->desc && *e->desc) *out = e->desc;  // downward walk: the last one is the innermost
  return 0;
}

[[noreturn]] void fail(const std::string& what) {
  std::string inner;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_cb, &inner);
  H5Eclear2(H5E_DEFAULT);
  throw Error(inner.empty() ? what : what + ": " + inner);
}

template <class T>
T check(T v, const std::string& what) {
  if (v < 0) fail(what);
  return v;
}

std::string join_path(const std::string& base, const std::string& name) {
  if (base.empty() || base == "/") return "/" + name;
  return base + "/" + name;
}

Id str_type() {
  Id t(check(H5Tcopy(H5T_C_S1), "H5Tcopy"), H5Tclose);
  check(H5Tset_size(t.get(), H5T_VARIABLE), "H5Tset_size");
  check(H5Tset_cset(t.get(), H5T_CSET_UTF8), "H5Tset_cset");
  return t;
}

// File type (what is stored) and memory type of each Type.
hid_t file_type(Type t) {
  switch (t) {
    case Type::kFloat64:
      return H5T_IEEE_F64LE;
    case Type::kFloat32:
      return H5T_IEEE_F32LE;
    case Type::kInt64:
      return H5T_STD_I64LE;
    case Type::kInt32:
      return H5T_STD_I32LE;
    case Type::kUInt8:
      return H5T_STD_U8LE;
    case Type::kString:
      break;
  }
  return -1;
}

Type classify(hid_t type, const std::string& what) {
  const H5T_class_t c = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  if (c == H5T_FLOAT) return size == 4 ? Type::kFloat32 : Type::kFloat64;
  if (c == H5T_INTEGER) {
    if (size == 1 && H5Tget_sign(type) == H5T_SGN_NONE) return Type::kUInt8;
    return size <= 4 ? Type::kInt32 : Type::kInt64;
  }
  if (c == H5T_STRING) return Type::kString;
  throw Error(what + ": unsupported HDF5 type class " + std::to_string(static_cast<int>(c)));
}

bool is_float(Type t) {
  return t == Type::kFloat64 || t == Type::kFloat32;
}
bool is_int(Type t) {
  return t == Type::kInt64 || t == Type::kInt32 || t == Type::kUInt8;
}

// Reads every element of a dataset or attribute (reader = H5Dread or H5Aread adapter).
template <class Reader>
std::vector<std::string> read_vlen_strings(Reader&& rd, hid_t space, size_t n,
                                           const std::string& what) {
  std::vector<char*> ptrs(n, nullptr);
  Id mt = str_type();
  if (n > 0) check(rd(mt.get(), ptrs.data()), what);
  std::vector<std::string> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = ptrs[i] ? ptrs[i] : "";
  if (n > 0) H5Dvlen_reclaim(mt.get(), space, H5P_DEFAULT, ptrs.data());
  return out;
}

std::vector<std::string> read_fixed_strings(hid_t type, size_t n, const std::vector<char>& raw) {
  const size_t len = H5Tget_size(type);
  std::vector<std::string> out(n);
  for (size_t i = 0; i < n; ++i) {
    const char* p = raw.data() + i * len;
    out[i] = std::string(p, strnlen(p, len));
  }
  return out;
}

void write_attr_raw(hid_t obj, const std::string& name, hid_t ftype, hid_t mtype, hid_t space,
                    const void* buf, const std::string& where) {
  if (H5Aexists(obj, name.c_str()) > 0)
    check(H5Adelete(obj, name.c_str()), "delete attribute " + name + " of " + where);
  // An empty list is stored with an empty (null) dataspace: nothing to write.
  Id null_space;
  if (H5Sget_simple_extent_npoints(space) == 0) {
    null_space = Id(check(H5Screate(H5S_NULL), "H5Screate"), H5Sclose);
    space = null_space.get();
  }
  Id a(check(H5Acreate2(obj, name.c_str(), ftype, space, H5P_DEFAULT, H5P_DEFAULT),
             "create attribute " + name + " of " + where),
       H5Aclose);
  if (!null_space.valid())
    check(H5Awrite(a.get(), mtype, buf), "write attribute " + name + " of " + where);
}

ColumnData filled(Type t, size_t n) {
  ColumnData c;
  c.type = t;
  if (is_float(t))
    c.f64.assign(n, std::numeric_limits<double>::quiet_NaN());
  else if (is_int(t))
    c.i64.assign(n, 0);
  else
    c.str.assign(n, "");
  return c;
}

// Converts a column to the dataset's type class (numeric widening only).
ColumnData coerce(const ColumnData& c, Type to, const std::string& what) {
  if (c.type == to) return c;
  if (is_float(to) && is_float(c.type)) {
    ColumnData r = c;
    r.type = to;
    return r;
  }
  if (is_int(to) && is_int(c.type)) {
    ColumnData r = c;
    r.type = to;
    return r;
  }
  if (is_float(to) && is_int(c.type)) {
    ColumnData r;
    r.type = to;
    r.f64.assign(c.i64.begin(), c.i64.end());
    return r;
  }
  throw Error(what + ": cannot store " + to_string(c.type) + " values in a " + to_string(to) +
              " column");
}

// Writes `c` into `dset` at [offset, offset + n) of a 1-D dataset through hyperslabs.
void write_slab(hid_t dset, uint64_t offset, const ColumnData& c, Type type,
                const std::string& what) {
  const hsize_t n = c.size();
  if (n == 0) return;
  Id fspace(check(H5Dget_space(dset), what), H5Sclose);
  hsize_t start = offset, count = n;
  check(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr), what);
  Id mspace(check(H5Screate_simple(1, &count, nullptr), what), H5Sclose);
  if (type == Type::kString) {
    std::vector<std::string> safe(n);
    std::vector<const char*> ptrs(n);
    for (hsize_t i = 0; i < n; ++i) {
      safe[i] = utf8_safe(c.str[i]);
      ptrs[i] = safe[i].c_str();
    }
    Id mt = str_type();
    check(H5Dwrite(dset, mt.get(), mspace.get(), fspace.get(), H5P_DEFAULT, ptrs.data()), what);
  } else if (is_float(type)) {
    check(H5Dwrite(dset, H5T_NATIVE_DOUBLE, mspace.get(), fspace.get(), H5P_DEFAULT, c.f64.data()),
          what);
  } else {
    check(H5Dwrite(dset, H5T_NATIVE_INT64, mspace.get(), fspace.get(), H5P_DEFAULT, c.i64.data()),
          what);
  }
}

}  // namespace

std::string to_string(Type t) {
  switch (t) {
    case Type::kFloat64:
      return "float64";
    case Type::kFloat32:
      return "float32";
    case Type::kInt64:
      return "int64";
    case Type::kInt32:
      return "int32";
    case Type::kUInt8:
      return "uint8";
    case Type::kString:
      return "string";
  }
  return "?";
}

std::string to_string(const Value& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) {
    std::ostringstream os;
    os.precision(17);
    os << *d;
    return os.str();
  }
  return std::get<std::string>(v);
}

size_t ColumnData::size() const {
  if (type == Type::kString) return str.size();
  if (is_float(type)) return f64.size();
  return i64.size();
}

// ---- Id --------------------------------------------------------------------------------
Id& Id::operator=(Id&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    close_ = o.close_;
    o.id_ = -1;
  }
  return *this;
}

void Id::reset() {
  if (id_ >= 0 && close_) close_(id_);
  id_ = -1;
}

// ---- attributes --------------------------------------------------------------------------
void Object::set_attr(const std::string& name, int64_t v) {
  Id s(check(H5Screate(H5S_SCALAR), "H5Screate"), H5Sclose);
  write_attr_raw(id(), name, H5T_STD_I64LE, H5T_NATIVE_INT64, s.get(), &v, path_);
}

void Object::set_attr(const std::string& name, double v) {
  Id s(check(H5Screate(H5S_SCALAR), "H5Screate"), H5Sclose);
  write_attr_raw(id(), name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, s.get(), &v, path_);
}

void Object::set_attr(const std::string& name, const std::string& v) {
  Id s(check(H5Screate(H5S_SCALAR), "H5Screate"), H5Sclose);
  Id t = str_type();
  const std::string safe = utf8_safe(v);
  const char* p = safe.c_str();
  write_attr_raw(id(), name, t.get(), t.get(), s.get(), &p, path_);
}

void Object::set_attr(const std::string& name, const Value& v) {
  std::visit([&](const auto& x) { set_attr(name, x); }, v);
}

void Object::set_attr(const std::string& name, const std::vector<std::string>& v) {
  const hsize_t n = v.size();
  Id s(check(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"), H5Sclose);
  Id t = str_type();
  std::vector<std::string> safe(v.size());
  std::vector<const char*> p(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    safe[i] = utf8_safe(v[i]);
    p[i] = safe[i].c_str();
  }
  write_attr_raw(id(), name, t.get(), t.get(), s.get(), p.data(), path_);
}

void Object::set_attr(const std::string& name, const std::vector<double>& v) {
  const hsize_t n = v.size();
  Id s(check(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"), H5Sclose);
  write_attr_raw(id(), name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, s.get(), v.data(), path_);
}

bool Object::has_attr(const std::string& name) const {
  return check(H5Aexists(id(), name.c_str()), "check attribute " + name + " of " + path_) > 0;
}

namespace {
herr_t attr_name_cb(hid_t, const char* name, const H5A_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}

struct AttrHandle {
  Id attr, type, space;
  size_t n = 0;
};

AttrHandle open_attr(hid_t obj, const std::string& name, const std::string& path) {
  AttrHandle h;
  if (H5Aexists(obj, name.c_str()) <= 0) throw Error("attribute '" + name + "' missing on " + path);
  h.attr =
      Id(check(H5Aopen(obj, name.c_str(), H5P_DEFAULT), "open attribute " + name + " of " + path),
         H5Aclose);
  h.type = Id(check(H5Aget_type(h.attr.get()), "H5Aget_type"), H5Tclose);
  h.space = Id(check(H5Aget_space(h.attr.get()), "H5Aget_space"), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(h.space.get());
  h.n = n < 0 ? 0 : static_cast<size_t>(n);
  return h;
}
}  // namespace

std::vector<std::string> Object::attr_names() const {
  std::vector<std::string> out;
  hsize_t idx = 0;
  check(H5Aiterate2(id(), H5_INDEX_NAME, H5_ITER_INC, &idx, attr_name_cb, &out),
        "list attributes of " + path_);
  return out;
}

Type Object::attr_type(const std::string& name) const {
  AttrHandle h = open_attr(id(), name, path_);
  return classify(h.type.get(), "attribute " + name + " of " + path_);
}

std::vector<double> Object::attr_doubles(const std::string& name) const {
  AttrHandle h = open_attr(id(), name, path_);
  const Type t = classify(h.type.get(), "attribute " + name);
  if (t == Type::kString)
    throw Error("attribute '" + name + "' of " + path_ + " is a string, not a number");
  std::vector<double> v(h.n);
  if (h.n)
    check(H5Aread(h.attr.get(), H5T_NATIVE_DOUBLE, v.data()),
          "read attribute " + name + " of " + path_);
  return v;
}

std::vector<std::string> Object::attr_strings(const std::string& name) const {
  AttrHandle h = open_attr(id(), name, path_);
  const std::string what = "read attribute " + name + " of " + path_;
  if (classify(h.type.get(), what) != Type::kString)
    throw Error("attribute '" + name + "' of " + path_ + " is not a string");
  if (H5Tis_variable_str(h.type.get()) > 0) {
    hid_t a = h.attr.get();
    return read_vlen_strings([a](hid_t mt, void* buf) { return H5Aread(a, mt, buf); },
                             h.space.get(), h.n, what);
  }
  std::vector<char> raw(h.n * H5Tget_size(h.type.get()) + 1, 0);
  if (h.n) check(H5Aread(h.attr.get(), h.type.get(), raw.data()), what);
  return read_fixed_strings(h.type.get(), h.n, raw);
}

int64_t Object::attr_int(const std::string& name) const {
  AttrHandle h = open_attr(id(), name, path_);
  if (!is_int(classify(h.type.get(), "attribute " + name)) || h.n != 1)
    throw Error("attribute '" + name + "' of " + path_ + " is not a scalar integer");
  int64_t v = 0;
  check(H5Aread(h.attr.get(), H5T_NATIVE_INT64, &v), "read attribute " + name + " of " + path_);
  return v;
}

double Object::attr_double(const std::string& name) const {
  auto v = attr_doubles(name);
  if (v.size() != 1) throw Error("attribute '" + name + "' of " + path_ + " is not a scalar");
  return v[0];
}

std::string Object::attr_string(const std::string& name) const {
  auto v = attr_strings(name);
  if (v.size() != 1)
    throw Error("attribute '" + name + "' of " + path_ + " is not a scalar string");
  return v[0];
}

Value Object::attr(const std::string& name) const {
  const Type t = attr_type(name);
  if (t == Type::kString) return attr_string(name);
  if (is_int(t)) return attr_int(name);
  return attr_double(name);
}

void Object::copy_attr(const std::string& name, Object& dst) const {
  AttrHandle h = open_attr(id(), name, path_);
  const int rank = H5Sget_simple_extent_ndims(h.space.get());
  const bool scalar = rank == 0 && H5Sget_simple_extent_type(h.space.get()) == H5S_SCALAR;
  const Type t = classify(h.type.get(), "attribute " + name + " of " + path_);
  if (t == Type::kString) {
    if (scalar)
      dst.set_attr(name, attr_string(name));
    else
      dst.set_attr(name, attr_strings(name));
  } else if (scalar) {
    dst.set_attr(name, attr(name));
  } else {
    dst.set_attr(name, attr_doubles(name));
  }
}

// ---- Dataset -----------------------------------------------------------------------------
std::vector<uint64_t> Dataset::shape() const {
  Id s(check(H5Dget_space(id()), "H5Dget_space " + path_), H5Sclose);
  const int rank = check(H5Sget_simple_extent_ndims(s.get()), "rank of " + path_);
  std::vector<hsize_t> d(rank);
  if (rank > 0) H5Sget_simple_extent_dims(s.get(), d.data(), nullptr);
  return std::vector<uint64_t>(d.begin(), d.end());
}

uint64_t Dataset::size() const {
  uint64_t n = 1;
  for (auto d : shape()) n *= d;
  return n;
}

Type Dataset::type() const {
  Id t(check(H5Dget_type(id()), "H5Dget_type " + path_), H5Tclose);
  return classify(t.get(), path_);
}

std::vector<double> Dataset::read_doubles() const {
  if (type() == Type::kString) throw Error(path_ + " holds strings, not numbers");
  std::vector<double> v(size());
  if (!v.empty())
    check(H5Dread(id(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()),
          "read " + path_);
  return v;
}

std::vector<int64_t> Dataset::read_ints() const {
  if (!is_int(type())) throw Error(path_ + " holds " + to_string(type()) + ", not integers");
  std::vector<int64_t> v(size());
  if (!v.empty())
    check(H5Dread(id(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()),
          "read " + path_);
  return v;
}

std::vector<std::string> Dataset::read_strings() const {
  Id t(check(H5Dget_type(id()), "H5Dget_type " + path_), H5Tclose);
  if (classify(t.get(), path_) != Type::kString) throw Error(path_ + " does not hold strings");
  Id s(check(H5Dget_space(id()), "H5Dget_space " + path_), H5Sclose);
  const size_t n = size();
  if (H5Tis_variable_str(t.get()) > 0) {
    hid_t d = id();
    return read_vlen_strings(
        [d](hid_t mt, void* buf) { return H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf); },
        s.get(), n, "read " + path_);
  }
  std::vector<char> raw(n * H5Tget_size(t.get()) + 1, 0);
  if (n) check(H5Dread(id(), t.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()), "read " + path_);
  return read_fixed_strings(t.get(), n, raw);
}

ColumnData Dataset::read() const {
  const Type t = type();
  ColumnData c;
  c.type = t;
  if (t == Type::kString)
    c.str = read_strings();
  else if (is_float(t))
    c.f64 = read_doubles();
  else
    c.i64 = read_ints();
  return c;
}

void Dataset::append(const ColumnData& data) {
  const auto sh = shape();
  if (sh.size() != 1) throw Error("append to " + path_ + ": only 1-D datasets grow");
  const Type t = type();
  ColumnData c = coerce(data, t, "append to " + path_);
  const hsize_t n = c.size();
  if (n == 0) return;
  const hsize_t new_size = sh[0] + n;
  check(H5Dset_extent(id(), &new_size), "grow " + path_ + " (is it chunked?)");
  write_slab(id(), sh[0], c, t, "append to " + path_);
}

void Dataset::write_at(uint64_t i, const Value& v) {
  const auto sh = shape();
  if (sh.size() != 1 || i >= sh[0])
    throw Error("write element " + std::to_string(i) + " of " + path_ + ": out of range");
  ColumnData c;
  if (auto* x = std::get_if<int64_t>(&v))
    c = ColumnData::of(std::vector<int64_t>{*x});
  else if (auto* d = std::get_if<double>(&v))
    c = ColumnData::of(std::vector<double>{*d});
  else
    c = ColumnData::of(std::vector<std::string>{std::get<std::string>(v)});
  const Type t = type();
  write_slab(id(), i, coerce(c, t, "write " + path_), t, "write " + path_);
}

// ---- Group -------------------------------------------------------------------------------
Group Group::create_group(const std::string& name) {
  const std::string p = join_path(path_, name);
  Id g(check(H5Gcreate2(id(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
             "create group " + p),
       H5Gclose);
  return Group(std::move(g), p);
}

Group Group::open_group(const std::string& name) const {
  const std::string p = join_path(path_, name);
  if (!exists(name)) throw Error("group " + p + " does not exist");
  Id g(check(H5Gopen2(id(), name.c_str(), H5P_DEFAULT), "open group " + p), H5Gclose);
  return Group(std::move(g), p);
}

Group Group::require_group(const std::string& name) {
  return exists(name) ? open_group(name) : create_group(name);
}

bool Group::exists(const std::string& rel_path) const {
  // H5Lexists fails (rather than returning false) when an intermediate link is missing.
  std::string prefix;
  std::stringstream ss(rel_path);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    prefix = prefix.empty() ? part : prefix + "/" + part;
    const htri_t e = H5Lexists(id(), prefix.c_str(), H5P_DEFAULT);
    if (e <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
  }
  return !prefix.empty();
}

bool Group::is_group(const std::string& name) const {
  if (!exists(name)) return false;
  H5O_info_t info;
  check(H5Oget_info_by_name(id(), name.c_str(), &info, H5P_DEFAULT),
        "info " + join_path(path_, name));
  return info.type == H5O_TYPE_GROUP;
}

bool Group::is_dataset(const std::string& name) const {
  if (!exists(name)) return false;
  H5O_info_t info;
  check(H5Oget_info_by_name(id(), name.c_str(), &info, H5P_DEFAULT),
        "info " + join_path(path_, name));
  return info.type == H5O_TYPE_DATASET;
}

namespace {
herr_t link_cb(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> Group::children() const {
  std::vector<std::string> out;
  hsize_t idx = 0;
  check(H5Literate(id(), H5_INDEX_NAME, H5_ITER_INC, &idx, link_cb, &out), "list " + path_);
  return out;
}

void Group::remove(const std::string& name) {
  check(H5Ldelete(id(), name.c_str(), H5P_DEFAULT), "remove " + join_path(path_, name));
}

Dataset Group::write(const std::string& name, const ColumnData& data, std::vector<uint64_t> dims) {
  const std::string p = join_path(path_, name);
  const size_t n = data.size();
  if (dims.empty()) dims = {static_cast<uint64_t>(n)};
  uint64_t prod = 1;
  for (auto d : dims) prod *= d;
  if (prod != n)
    throw Error("write " + p + ": " + std::to_string(n) + " values do not fill the given shape (" +
                std::to_string(prod) + " elements)");
  std::vector<hsize_t> hd(dims.begin(), dims.end());
  Id space(
      check(H5Screate_simple(static_cast<int>(hd.size()), hd.data(), nullptr), "dataspace " + p),
      H5Sclose);
  Id strt;
  hid_t ft;
  if (data.type == Type::kString) {
    strt = str_type();
    ft = strt.get();
  } else {
    ft = file_type(data.type);
  }
  // Large 1-D numeric arrays (traces) are chunked and compressed like write_table's columns.
  Id dcpl(check(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate"), H5Pclose);
  if (hd.size() == 1 && n >= 1024 && data.type != Type::kString &&
      H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) {
    const hsize_t ch = std::min<hsize_t>(hd[0], 65536);
    check(H5Pset_chunk(dcpl.get(), 1, &ch), "chunk " + p);
    check(H5Pset_shuffle(dcpl.get()), "shuffle filter " + p);
    check(H5Pset_deflate(dcpl.get(), 4), "deflate filter " + p);
  }
  Id d(check(H5Dcreate2(id(), name.c_str(), ft, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
             "create " + p),
       H5Dclose);
  if (n > 0) {
    if (data.type == Type::kString) {
      std::vector<std::string> safe(n);
      std::vector<const char*> ptrs(n);
      for (size_t i = 0; i < n; ++i) {
        safe[i] = utf8_safe(data.str[i]);
        ptrs[i] = safe[i].c_str();
      }
      check(H5Dwrite(d.get(), strt.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()),
            "write " + p);
    } else if (is_float(data.type)) {
      check(H5Dwrite(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.f64.data()),
            "write " + p);
    } else {
      check(H5Dwrite(d.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.i64.data()),
            "write " + p);
    }
  }
  return Dataset(std::move(d), p);
}

Dataset Group::write(const std::string& name, const std::vector<double>& v,
                     std::vector<uint64_t> dims) {
  return write(name, ColumnData::of(v), std::move(dims));
}
Dataset Group::write(const std::string& name, const std::vector<float>& v,
                     std::vector<uint64_t> dims) {
  ColumnData c;
  c.type = Type::kFloat32;
  c.f64.assign(v.begin(), v.end());
  return write(name, c, std::move(dims));
}
Dataset Group::write(const std::string& name, const std::vector<int64_t>& v,
                     std::vector<uint64_t> dims) {
  return write(name, ColumnData::of(v), std::move(dims));
}
Dataset Group::write(const std::string& name, const std::vector<int32_t>& v,
                     std::vector<uint64_t> dims) {
  ColumnData c;
  c.type = Type::kInt32;
  c.i64.assign(v.begin(), v.end());
  return write(name, c, std::move(dims));
}
Dataset Group::write(const std::string& name, const std::vector<uint8_t>& v,
                     std::vector<uint64_t> dims) {
  ColumnData c;
  c.type = Type::kUInt8;
  c.i64.assign(v.begin(), v.end());
  return write(name, c, std::move(dims));
}
Dataset Group::write(const std::string& name, const std::vector<std::string>& v) {
  return write(name, ColumnData::of(v));
}

Dataset Group::create_appendable(const std::string& name, Type type, uint64_t chunk,
                                 bool compress) {
  const std::string p = join_path(path_, name);
  if (chunk == 0) throw Error("create " + p + ": chunk size must be positive");
  hsize_t zero = 0, maxd = H5S_UNLIMITED, ch = chunk;
  Id space(check(H5Screate_simple(1, &zero, &maxd), "dataspace " + p), H5Sclose);
  Id dcpl(check(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate"), H5Pclose);
  check(H5Pset_chunk(dcpl.get(), 1, &ch), "chunk " + p);
  if (compress && type != Type::kString && H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) {
    // Shuffle groups the bytes of equal significance (exponents with exponents), which is
    // what makes float64 series deflate well; level 4 is fast and most of the gain.
    check(H5Pset_shuffle(dcpl.get()), "shuffle filter " + p);
    check(H5Pset_deflate(dcpl.get(), 4), "deflate filter " + p);
  }
  Id strt;
  hid_t ft;
  if (type == Type::kString) {
    strt = str_type();
    ft = strt.get();
  } else {
    ft = file_type(type);
  }
  Id d(check(H5Dcreate2(id(), name.c_str(), ft, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
             "create " + p),
       H5Dclose);
  return Dataset(std::move(d), p);
}

Dataset Group::open_dataset(const std::string& name) const {
  const std::string p = join_path(path_, name);
  if (!exists(name)) throw Error("dataset " + p + " does not exist");
  Id d(check(H5Dopen2(id(), name.c_str(), H5P_DEFAULT), "open dataset " + p), H5Dclose);
  return Dataset(std::move(d), p);
}

void Group::copy(const std::string& name, Group& dst, const std::string& dst_name) const {
  check(H5Ocopy(id(), name.c_str(), dst.id(), dst_name.c_str(), H5P_DEFAULT, H5P_DEFAULT),
        "copy " + join_path(path_, name) + " to " + join_path(dst.path(), dst_name));
}

// ---- File --------------------------------------------------------------------------------
File::~File() {
  close();
}

void File::close() {
  if (id_.valid()) {
    H5Fflush(id_.get(), H5F_SCOPE_GLOBAL);
    id_.reset();
  }
}

File File::create(const std::string& path, bool overwrite) {
  quiet();
  Id f(check(H5Fcreate(path.c_str(), overwrite ? H5F_ACC_TRUNC : H5F_ACC_EXCL, H5P_DEFAULT,
                       H5P_DEFAULT),
             "create HDF5 file " + path),
       H5Fclose);
  return File(std::move(f), path);
}

File File::open(const std::string& path, bool writable) {
  quiet();
  Id f(check(H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT),
             "open HDF5 file " + path),
       H5Fclose);
  return File(std::move(f), path);
}

namespace {
Id core_fapl() {
  Id fapl(check(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"), H5Pclose);
  // 1 MiB growth steps; no backing store: the caller decides when and how bytes hit disk.
  check(H5Pset_fapl_core(fapl.get(), size_t{1} << 20, 0), "H5Pset_fapl_core");
  return fapl;
}
}  // namespace

File File::create_in_memory(const std::string& name) {
  quiet();
  Id fapl = core_fapl();
  Id f(check(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()),
             "create in-memory HDF5 file " + name),
       H5Fclose);
  return File(std::move(f), name);
}

File File::open_image(const std::vector<unsigned char>& bytes, const std::string& name) {
  quiet();
  Id fapl = core_fapl();
  // HDF5 copies the buffer. The core driver refuses an image whose name exists on disk,
  // so it gets a name no file has; it never reaches the file system.
  check(H5Pset_file_image(fapl.get(), const_cast<unsigned char*>(bytes.data()), bytes.size()),
        "load the image of " + name);
  const std::string mem_name = name + "#in-memory-image";
  Id f(check(H5Fopen(mem_name.c_str(), H5F_ACC_RDWR, fapl.get()),
             "open HDF5 file " + name + " (not HDF5, or corrupt)"),
       H5Fclose);
  return File(std::move(f), name);
}

File File::create_with(const std::string& name, hid_t fapl) {
  quiet();
  Id f(check(H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), "create HDF5 file " + name),
       H5Fclose);
  return File(std::move(f), name);
}

File File::open_with(const std::string& name, hid_t fapl, bool writable) {
  quiet();
  Id f(check(H5Fopen(name.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl),
             "open HDF5 file " + name),
       H5Fclose);
  return File(std::move(f), name);
}

bool File::is_hdf5(const std::string& path) {
  quiet();
  const htri_t r = H5Fis_hdf5(path.c_str());
  H5Eclear2(H5E_DEFAULT);
  return r > 0;
}

void File::flush() {
  check(H5Fflush(id(), H5F_SCOPE_GLOBAL), "flush " + filename_);
}

std::vector<unsigned char> File::image() const {
  const ssize_t n = check(H5Fget_file_image(id(), nullptr, 0), "size of the image of " + filename_);
  std::vector<unsigned char> buf(static_cast<size_t>(n));
  check(H5Fget_file_image(id(), buf.data(), buf.size()), "image of " + filename_);
  return buf;
}

// ---- Table -------------------------------------------------------------------------------
Table Table::create(Group& parent, const std::string& name, const std::vector<Column>& columns,
                    uint64_t chunk, bool compress) {
  Table t;
  t.group_ = parent.create_group(name);
  t.chunk_ = chunk;
  t.compress_ = compress;
  t.group_.set_attr("kvlab_table", int64_t{1});
  t.group_.set_attr("columns", std::vector<std::string>{});
  for (const auto& c : columns) t.add_column(c);
  return t;
}

Table Table::open(const Group& parent, const std::string& name) {
  Table t;
  t.group_ = parent.open_group(name);
  if (!t.group_.has_attr("columns"))
    throw Error(t.group_.path() + " is not a table (no 'columns' attribute)");
  const auto names = t.group_.attr_strings("columns");
  bool first = true;
  for (const auto& n : names) {
    Dataset d = t.group_.open_dataset(n);
    Column c;
    c.name = n;
    c.type = d.type();
    if (d.has_attr("unit")) c.unit = d.attr_string("unit");
    if (d.has_attr("doc")) c.doc = d.attr_string("doc");
    const auto sh = d.shape();
    if (sh.size() != 1) throw Error(d.path() + ": table columns must be 1-D");
    if (first)
      t.rows_ = sh[0];
    else if (sh[0] != t.rows_)
      throw Error(t.group_.path() + ": column '" + n + "' has " + std::to_string(sh[0]) +
                  " rows, expected " + std::to_string(t.rows_) + " (torn table)");
    first = false;
    t.columns_.push_back(c);
  }
  return t;
}

bool Table::has_column(const std::string& name) const {
  return std::any_of(columns_.begin(), columns_.end(),
                     [&](const Column& c) { return c.name == name; });
}

const Table::Column& Table::column(const std::string& name) const {
  for (const auto& c : columns_)
    if (c.name == name) return c;
  throw Error(group_.path() + " has no column '" + name + "'");
}

void Table::add_column(const Column& c) {
  if (c.name.empty() || c.name.find('/') != std::string::npos)
    throw Error(group_.path() + ": invalid column name '" + c.name + "'");
  if (has_column(c.name)) throw Error(group_.path() + ": column '" + c.name + "' already exists");
  Dataset d = group_.create_appendable(c.name, c.type, chunk_, compress_);
  if (!c.unit.empty()) d.set_attr("unit", c.unit);
  if (!c.doc.empty()) d.set_attr("doc", c.doc);
  if (rows_ > 0) d.append(filled(c.type, rows_));
  columns_.push_back(c);
  std::vector<std::string> names;
  for (const auto& x : columns_) names.push_back(x.name);
  group_.set_attr("columns", names);
}

void Table::append(const std::vector<std::pair<std::string, ColumnData>>& cols) {
  if (cols.empty()) return;
  const size_t n = cols.front().second.size();
  for (const auto& [name, data] : cols) {
    column(name);  // throws for unknown columns
    if (data.size() != n)
      throw Error(group_.path() + ": column '" + name + "' has " + std::to_string(data.size()) +
                  " values, expected " + std::to_string(n));
  }
  if (n == 0) return;
  for (const auto& c : columns_) {
    Dataset d = group_.open_dataset(c.name);
    auto it =
        std::find_if(cols.begin(), cols.end(), [&](const auto& p) { return p.first == c.name; });
    if (it != cols.end())
      d.append(it->second);
    else
      d.append(filled(c.type, n));
  }
  rows_ += n;
}

void Table::append_row(const std::vector<std::pair<std::string, Value>>& row) {
  std::vector<std::pair<std::string, ColumnData>> cols;
  for (const auto& [name, v] : row) {
    const Column& c = column(name);
    ColumnData d;
    if (auto* i = std::get_if<int64_t>(&v))
      d = ColumnData::of(std::vector<int64_t>{*i});
    else if (auto* x = std::get_if<double>(&v))
      d = ColumnData::of(std::vector<double>{*x});
    else
      d = ColumnData::of(std::vector<std::string>{std::get<std::string>(v)});
    cols.emplace_back(name, coerce(d, c.type, group_.path() + "/" + name));
  }
  if (cols.empty()) {
    // A row of fill values only.
    for (const auto& c : columns_) cols.emplace_back(c.name, filled(c.type, 1));
  }
  append(cols);
}

std::vector<std::pair<std::string, Value>> Table::row_as_stored(
    const std::vector<std::pair<std::string, Value>>& row) const {
  for (const auto& cell : row) column(cell.first);  // throws for unknown columns
  std::vector<std::pair<std::string, Value>> out;
  for (const auto& c : columns_) {
    auto it = std::find_if(row.begin(), row.end(), [&](const auto& x) { return x.first == c.name; });
    ColumnData d;
    if (it == row.end()) {
      d = filled(c.type, 1);
    } else if (auto* i = std::get_if<int64_t>(&it->second)) {
      d = coerce(ColumnData::of(std::vector<int64_t>{*i}), c.type, group_.path() + "/" + c.name);
    } else if (auto* x = std::get_if<double>(&it->second)) {
      d = coerce(ColumnData::of(std::vector<double>{*x}), c.type, group_.path() + "/" + c.name);
    } else {
      d = coerce(ColumnData::of(std::vector<std::string>{std::get<std::string>(it->second)}),
                 c.type, group_.path() + "/" + c.name);
    }
    if (d.type == Type::kString)
      out.emplace_back(c.name, utf8_safe(d.str[0]));
    else if (d.type == Type::kFloat32)
      out.emplace_back(c.name, static_cast<double>(static_cast<float>(d.f64[0])));
    else if (is_float(d.type))
      out.emplace_back(c.name, d.f64[0]);
    else
      out.emplace_back(c.name, d.i64[0]);
  }
  return out;
}

void Table::set(uint64_t row, const std::string& column_name, const Value& v) {
  column(column_name);
  if (row >= rows_) throw Error(group_.path() + ": row " + std::to_string(row) + " out of range");
  group_.open_dataset(column_name).write_at(row, v);
}

ColumnData Table::read(const std::string& c) const {
  column(c);
  return group_.open_dataset(c).read();
}
std::vector<double> Table::read_doubles(const std::string& c) const {
  column(c);
  return group_.open_dataset(c).read_doubles();
}
std::vector<int64_t> Table::read_ints(const std::string& c) const {
  column(c);
  return group_.open_dataset(c).read_ints();
}
std::vector<std::string> Table::read_strings(const std::string& c) const {
  column(c);
  return group_.open_dataset(c).read_strings();
}

Table write_table(Group& parent, const std::string& name,
                  const std::vector<std::pair<Table::Column, ColumnData>>& cols) {
  std::vector<Table::Column> spec;
  std::vector<std::pair<std::string, ColumnData>> data;
  uint64_t chunk = 1;
  for (const auto& [c, d] : cols) {
    spec.push_back(c);
    data.emplace_back(c.name, d);
    chunk = std::max<uint64_t>(chunk, d.size());
  }
  // One chunk holds the whole table (capped so huge traces stay chunked sensibly).
  Table t = Table::create(parent, name, spec, std::min<uint64_t>(chunk, 65536), /*compress=*/true);
  t.append(data);
  return t;
}

}  // namespace kvlab::exp::h5
