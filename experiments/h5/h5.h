// h5.h: a thin RAII layer over the HDF5 C API (files, groups, attributes, datasets and an
// appendable columnar table).
//
// Why a layer of our own: the C API is the one HDF5 interface present on every target
// machine (Debian 12 ships 1.10; the GPU machine's soname matches), but raw hid_t handles
// leak on every early return and its error stack prints to stderr. Here every handle is
// owned by a move-only object, HDF5's automatic error printing is switched off, and every
// failure throws h5::Error naming the operation, the object path and HDF5's own message.
//
// Conventions of the files this layer writes (readable by h5py, pandas and h5dump):
//   - numbers are little-endian IEEE float64/float32 or two's-complement int64/int32/uint8;
//   - strings (attributes and string columns) are variable-length UTF-8, always valid: bytes
//     of an invalid sequence (and NUL) are stored as the text "\xHH" (file_io.h utf8_safe);
//   - a Table is a group with one 1-D chunked, extendible dataset per column, all of the
//     same length, plus the attribute `columns` (their order) and per-column attributes
//     `unit` and `doc`; pandas reads it as DataFrame({c: g[c][()] for c in columns}).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "reference/core/error.h"

namespace kvlab::exp::h5 {

// Every HDF5 failure: "what we tried (object): HDF5's innermost message".
class Error : public kvlab::Error {
 public:
  using kvlab::Error::Error;
};

// Owner of one hid_t with its close function (H5Fclose, H5Gclose, ...). Move-only.
class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id() = default;
  Id(hid_t id, Closer close) : id_(id), close_(close) {}
  Id(Id&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Id& operator=(Id&& o) noexcept;
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() { reset(); }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

// Element types this layer stores.
enum class Type { kFloat64, kFloat32, kInt64, kInt32, kUInt8, kString };
std::string to_string(Type t);

// One attribute value or table cell.
using Value = std::variant<int64_t, double, std::string>;
std::string to_string(const Value& v);

// A column of values: exactly one of the vectors is used, chosen by `type`.
struct ColumnData {
  Type type = Type::kFloat64;
  std::vector<double> f64;       // kFloat64 and kFloat32
  std::vector<int64_t> i64;      // kInt64, kInt32 and kUInt8
  std::vector<std::string> str;  // kString
  size_t size() const;
  static ColumnData of(std::vector<double> v) {
    ColumnData c;
    c.type = Type::kFloat64;
    c.f64 = std::move(v);
    return c;
  }
  static ColumnData of(std::vector<int64_t> v) {
    ColumnData c;
    c.type = Type::kInt64;
    c.i64 = std::move(v);
    return c;
  }
  static ColumnData of(std::vector<std::string> v) {
    ColumnData c;
    c.type = Type::kString;
    c.str = std::move(v);
    return c;
  }
};

// Anything that carries attributes (groups, files, datasets).
class Object {
 public:
  hid_t id() const { return id_.get(); }
  const std::string& path() const { return path_; }  // HDF5 path, for error messages

  void set_attr(const std::string& name, int64_t v);
  void set_attr(const std::string& name, int v) { set_attr(name, static_cast<int64_t>(v)); }
  void set_attr(const std::string& name, bool v) {
    set_attr(name, static_cast<int64_t>(v ? 1 : 0));
  }
  void set_attr(const std::string& name, double v);
  void set_attr(const std::string& name, const std::string& v);
  void set_attr(const std::string& name, const char* v) { set_attr(name, std::string(v)); }
  void set_attr(const std::string& name, const Value& v);
  void set_attr(const std::string& name, const std::vector<std::string>& v);
  void set_attr(const std::string& name, const std::vector<double>& v);

  bool has_attr(const std::string& name) const;
  std::vector<std::string> attr_names() const;
  Type attr_type(const std::string& name) const;
  int64_t attr_int(const std::string& name) const;                       // integer attributes
  double attr_double(const std::string& name) const;                     // any numeric attribute
  std::string attr_string(const std::string& name) const;                // string attributes
  std::vector<std::string> attr_strings(const std::string& name) const;  // 1-D string attribute
  std::vector<double> attr_doubles(const std::string& name) const;       // 1-D numeric attribute
  Value attr(const std::string& name) const;                             // any scalar attribute
  // Copies attribute `name` (scalar or 1-D, any type this layer reads) to `dst`.
  void copy_attr(const std::string& name, Object& dst) const;

 protected:
  Object() = default;
  Object(Id id, std::string path) : id_(std::move(id)), path_(std::move(path)) {}
  Id id_;
  std::string path_;
};

class Dataset : public Object {
 public:
  Dataset() = default;
  std::vector<uint64_t> shape() const;
  uint64_t size() const;  // product of the shape
  Type type() const;
  std::vector<double> read_doubles() const;       // any numeric type, converted
  std::vector<int64_t> read_ints() const;         // integer types
  std::vector<std::string> read_strings() const;  // string type
  ColumnData read() const;                        // in its own type class

  // 1-D chunked datasets only: grow by data.size() and write it at the end.
  void append(const ColumnData& data);
  // Overwrite element i of a 1-D dataset.
  void write_at(uint64_t i, const Value& v);

 private:
  friend class Group;
  Dataset(Id id, std::string path) : Object(std::move(id), std::move(path)) {}
};

class Group : public Object {
 public:
  Group() = default;

  Group create_group(const std::string& name);
  Group open_group(const std::string& name) const;
  Group require_group(const std::string& name);    // open or create
  bool exists(const std::string& rel_path) const;  // every component checked
  bool is_group(const std::string& name) const;
  bool is_dataset(const std::string& name) const;
  std::vector<std::string> children() const;  // link names, in name order
  void remove(const std::string& name);       // unlink (space is not reclaimed)

  // Fixed-size datasets (dims default to {size}; their product must equal the size).
  Dataset write(const std::string& name, const ColumnData& data, std::vector<uint64_t> dims = {});
  Dataset write(const std::string& name, const std::vector<double>& v,
                std::vector<uint64_t> dims = {});
  Dataset write(const std::string& name, const std::vector<float>& v,
                std::vector<uint64_t> dims = {});
  Dataset write(const std::string& name, const std::vector<int64_t>& v,
                std::vector<uint64_t> dims = {});
  Dataset write(const std::string& name, const std::vector<int32_t>& v,
                std::vector<uint64_t> dims = {});
  Dataset write(const std::string& name, const std::vector<uint8_t>& v,
                std::vector<uint64_t> dims = {});
  Dataset write(const std::string& name, const std::vector<std::string>& v);
  // An empty 1-D dataset that grows by Dataset::append (chunked, unlimited). compress:
  // numeric chunks go through HDF5's shuffle + deflate filters (standard: h5py, pandas and
  // h5dump read them; strings are never compressed); a no-op when this HDF5 lacks deflate.
  Dataset create_appendable(const std::string& name, Type type, uint64_t chunk = 1024,
                            bool compress = false);
  Dataset open_dataset(const std::string& name) const;

  // Deep copy of child `name` (group or dataset) to dst/dst_name, across files.
  void copy(const std::string& name, Group& dst, const std::string& dst_name) const;

 protected:
  friend class File;
  Group(Id id, std::string path) : Object(std::move(id), std::move(path)) {}
};

// A file. Regular files use the POSIX (sec2) driver; `in_memory` files use the core
// driver without a backing store: nothing reaches the disk until the caller writes
// image() somewhere (see durable.h, which builds crash-safe commits on that).
class File : public Group {
 public:
  File() = default;
  File(File&&) = default;
  File& operator=(File&&) = default;
  ~File();

  // Creates a new file; fails if it exists unless overwrite.
  static File create(const std::string& path, bool overwrite = false);
  static File open(const std::string& path, bool writable = false);
  // Core-driver files (never touch the disk): `create_in_memory` starts empty,
  // `open_image` starts from the bytes of a file (`name` is only used in messages).
  static File create_in_memory(const std::string& name);
  static File open_image(const std::vector<unsigned char>& bytes, const std::string& name);
  // Files through a given file access property list (a driver of our own: overlay.h).
  static File create_with(const std::string& name, hid_t fapl);
  static File open_with(const std::string& name, hid_t fapl, bool writable);
  // True when `path` is an HDF5 file (signature check; does not open it).
  static bool is_hdf5(const std::string& path);

  void flush();
  std::vector<unsigned char> image() const;  // the whole file as bytes (after flush)
  const std::string& filename() const { return filename_; }
  void close();

 private:
  File(Id id, std::string filename) : Group(std::move(id), "/"), filename_(std::move(filename)) {}
  std::string filename_;
};

// A columnar, appendable table (see the file header for its on-disk form).
class Table {
 public:
  struct Column {
    std::string name;
    Type type = Type::kFloat64;
    std::string unit;  // "" when dimensionless
    std::string doc;
  };

  Table() = default;
  static Table create(Group& parent, const std::string& name, const std::vector<Column>& columns,
                      uint64_t chunk = 256, bool compress = false);
  static Table open(const Group& parent, const std::string& name);

  const std::vector<Column>& columns() const { return columns_; }
  bool has_column(const std::string& name) const;
  const Column& column(const std::string& name) const;
  uint64_t rows() const { return rows_; }
  Group& group() { return group_; }

  // Adds a column; existing rows get the fill value (NaN, 0 or "").
  void add_column(const Column& c);
  // Appends rows given as named columns of equal length. Columns of the table that are
  // missing get the fill value; a name that is not a column is an error.
  void append(const std::vector<std::pair<std::string, ColumnData>>& cols);
  // Appends one row given as (column, value) pairs (same rules).
  void append_row(const std::vector<std::pair<std::string, Value>>& row);
  void set(uint64_t row, const std::string& column, const Value& v);
  // A row given as (column, value) pairs as append_row would store it: every column of the
  // table in order, values converted to the column's type, missing ones as the fill value.
  std::vector<std::pair<std::string, Value>> row_as_stored(
      const std::vector<std::pair<std::string, Value>>& row) const;

  ColumnData read(const std::string& column) const;
  std::vector<double> read_doubles(const std::string& column) const;
  std::vector<int64_t> read_ints(const std::string& column) const;
  std::vector<std::string> read_strings(const std::string& column) const;

 private:
  Group group_;
  std::vector<Column> columns_;
  uint64_t rows_ = 0;
  uint64_t chunk_ = 256;
  bool compress_ = false;
};

// Writes a whole table at once (fixed size afterwards is fine: it stays appendable). Its
// numeric columns are compressed (shuffle + deflate): traces are written once, read often.
Table write_table(Group& parent, const std::string& name,
                  const std::vector<std::pair<Table::Column, ColumnData>>& cols);

}  // namespace kvlab::exp::h5
