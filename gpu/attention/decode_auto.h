// decode_auto.h: `version = auto`: the decode version and split picked per shape from a
// calibration table measured by the perf sweep (host code; the lookup is g++-compilable
// and CPU-tested, tests/cpu/test_decode_auto.cpp).
//
// The table (decode_auto_table.inc) holds, for every shape a perf sweep timed, the fastest
// (version, num_splits) and its median time; gpu/attention/decode_auto_table.py regenerates
// it from the sweep's HDF5 files (the command is in the file's header). The model is a
// nearest-neighbour rule over the measured shapes:
//   1. rows of the same device (name) and KV format only;
//   2. the nearest by: layout, head_dim, GQA group and block size mismatches (penalties
//      4, 4, 2, 1) plus |log2(batch / b)| + |log2(context / c)|;
//   2a. among the rows whose version's scope holds the query's geometry
//      (DecodeVersionInfo::in_scope);
//   3. its version; its num_splits only when batch and context match the measured shape
//      exactly (a forced split measured at one batch is no plan for another: elsewhere the
//      version's own plan splits).
// Without a row for the device and format (another GPU, an unmeasured format), or when the
// picked version declines the arguments, the default rule applies: v5, else v4, else the
// newest registered version that supports them.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/attention/decode_plan.h"
#include "reference/attention/args.h"

namespace kvlab::gpu {

struct DecodeAutoRow {
  const char* device;     // cudaDeviceProp::name of the measuring GPU
  const char* kv_format;  // layout_names.h spelling (bf16, fp8_e4m3, ...)
  const char* layout;     // nhd, hnd, split_x
  int head_dim;
  int gqa_group;
  int block_size;
  int64_t batch;
  int64_t context;
  const char* version;  // registry name of the fastest version
  int num_splits;       // its num_splits (0: the version's plan)
  double median_us;     // its median time
};

struct DecodeAutoQuery {
  std::string device, kv_format, layout;
  int head_dim = 0, gqa_group = 0, block_size = 0;
  int64_t batch = 0, context = 0;
};

// The distance of rule 2 (rows of another device or format are not candidates: +inf).
inline double auto_row_distance(const DecodeAutoRow& r, const DecodeAutoQuery& q) {
  if (q.device != r.device || q.kv_format != r.kv_format) return INFINITY;
  auto lg = [](double x) { return std::log2(x < 1 ? 1.0 : x); };
  return 4.0 * (q.layout != r.layout) + 4.0 * (q.head_dim != r.head_dim) +
         2.0 * (q.gqa_group != r.gqa_group) + 1.0 * (q.block_size != r.block_size) +
         std::fabs(lg(static_cast<double>(q.batch)) - lg(static_cast<double>(r.batch))) +
         std::fabs(lg(static_cast<double>(q.context)) - lg(static_cast<double>(r.context)));
}

// Every row is a candidate (nearest_auto_row without a scope).
struct AnyAutoRow {
  bool operator()(const DecodeAutoRow&) const { return true; }
};

// The nearest row among those `usable` accepts (the first of equally near ones, in table
// order); nullptr when no such row has the query's device and format. choose_decode passes
// the row's version's scope for the query's geometry, so an unmeasured shape that a nearby
// row's version declines (v8-v10's layout / block_size / format scopes) takes the nearest
// row of a version that serves it, never a version out of its scope.
template <class Usable = AnyAutoRow>
const DecodeAutoRow* nearest_auto_row(const std::vector<DecodeAutoRow>& rows,
                                      const DecodeAutoQuery& q, Usable usable = Usable{}) {
  const DecodeAutoRow* best = nullptr;
  double best_d = INFINITY;
  for (const DecodeAutoRow& r : rows) {
    const double d = auto_row_distance(r, q);
    if (d < best_d && usable(r)) best = &r, best_d = d;
  }
  return best;
}

// Rule 3: the split of the nearest row applies only to its own batch and context.
inline int auto_row_splits(const DecodeAutoRow& r, const DecodeAutoQuery& q) {
  return (r.batch == q.batch && r.context == q.context) ? r.num_splits : 0;
}

// The table compiled into kvlab (decode_auto_table.inc).
const std::vector<DecodeAutoRow>& decode_auto_table();

struct DecodeChoice {
  int version = -1;     // registry id
  DecodeTuning tuning;  // num_splits as calibrated (0: the version's plan)
  std::string basis;    // how the choice was made (recorded with the result)
};

// The version and plan knobs for these arguments on the current device (never launches;
// throws kvlab::Unsupported when no version supports them). The query's context is the
// sequence-length bound (max_seq_len, or the table's capacity when 0).
DecodeChoice choose_decode(const DecodeArgs& args);

}  // namespace kvlab::gpu
