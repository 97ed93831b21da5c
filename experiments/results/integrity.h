// integrity.h: the checksums of result files (schema 2) and their verification.
//
// The rules (result_file.h documents the byte encoding; analysis/result_integrity.py
// implements the same rules in Python, so files written by Python carry the same data):
//   - row_crc of a table row (a column of /index and /runs): covers every cell of the row
//     except `row_crc` itself and `group` (merge renumbers groups), in column-name order, and
//     skips cells that hold their column's fill value ("" for text, the quiet NaN
//     0x7FF8000000000000 for floating point): so a row keeps its checksum when another
//     kind or another file adds columns, and through merge, which copies rows unchanged.
//   - content_crc of a group (each /points/NNNNNN, and /sweep): covers its attributes
//     (except content_crc), datasets (shape, attributes, values) and subgroups, recursively,
//     in name order.
//   - attrs_crc of the root group: covers the root attributes except attrs_crc.
// Verification recomputes them from the stored bytes; any difference is damage.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "experiments/h5/h5.h"

namespace kvlab::exp {

constexpr const char* kRowCrc = "row_crc";
constexpr const char* kContentCrc = "content_crc";
constexpr const char* kAttrsCrc = "attrs_crc";

// The checksum of one row given as (column, stored value) pairs in any order.
uint32_t row_checksum(const std::vector<std::pair<std::string, h5::Value>>& row);
// The checksum of a group's contents as stored.
uint32_t group_checksum(const h5::Group& g);
// The checksum of an object's attributes as stored, except `skip`.
uint32_t attrs_checksum(const h5::Object& o, const std::string& skip);

// Appends a row to `t` (a table with a row_crc column) with its checksum.
void append_sealed_row(h5::Table& t, const std::vector<std::pair<std::string, h5::Value>>& row);
// Recomputes the checksum of an existing row of `t` (after Table::set changed a cell).
void reseal_row(h5::Table& t, uint64_t row);
// Stores the checksum of g's contents as its content_crc attribute.
void seal_group(h5::Group& g);
// Stores the checksum of the root attributes as attrs_crc.
void seal_root(h5::File& f);

// What verification found. `problems` names each damaged thing (capped at `limit` entries;
// `damaged` counts them all).
struct Verification {
  int64_t rows = 0, groups = 0;
  int64_t damaged = 0;
  std::vector<std::string> problems;
  bool ok() const { return damaged == 0; }
  void add(const std::string& what, size_t limit = 20);
};

// Verifies every row_crc of the table `name` under `parent` (rows whose row_crc is 0 and a
// table without the column count as unsealed: reported as damage).
void verify_table(const h5::Group& parent, const std::string& name, Verification* v);
// Verifies a group's content_crc.
void verify_group(const h5::Group& g, const std::string& what, Verification* v);

}  // namespace kvlab::exp
