// decode_records.h: measured decode-attention timings read back from kvlab result files,
// as the sim cost model's DecodeAttentionMeasurement records (the input of `kvlab calibrate`).
//
// A record is one shape (every decode_attention axis but `version`) and one version:
//   - the shape becomes a sim::DecodeAttentionShape: batch, num_qo_heads = num_kv_heads *
//     gqa_group, head_dim, block_size, kv_format, BF16 Q/O, LSE written (the kind passes an
//     LSE buffer); lengths = uniform -> `context` each; lengths = mixed -> the exact seeded
//     lengths the kind generated (experiments/kinds/decode_attention.cpp, lengths_of):
//     seed = mix_seed(run seed, the point's `seed` axis), SynthRng(seed ^ 0x1e575eed),
//     uniform in [min(1024, context), context]. The run seed is the file's --seed (argv)
//     or its config's `seed`. Every record's bytes are checked against the file's own
//     min_bytes (Q + K/V + scales + O): a reconstruction or byte-accounting drift is an
//     error, never a silently wrong table;
//   - the measured time is the point's median_us; a shape measured more than once with the
//     same version (e.g. in two studies) counts once, with the median of its repeats;
//   - graph = on (CUDA-graph replay) -> LaunchMode::kCudaGraph, else kEager.
// Version selection: "best" keeps, per shape, the fastest kvlab version (peers, versions
// named "peer:...", are not kvlab kernels and are left out); a version name keeps that one.
// Only points with status ok and a finite median count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/cost/calibration.h"

namespace kvlab::exp {

struct DecodeRecord {
  std::string source;   // the result file
  int64_t row = 0;      // its /index row (the first one for repeated shapes)
  int64_t repeats = 1;  // rows of this shape and version (median taken)
  std::string study, version, layout, lengths;
  int64_t context = 0;  // the `context` axis (the longest length for mixed batches)
  int64_t seed = 0;     // the `seed` axis
  bool graph = false;
  double min_bytes = 0;  // as the file recorded it
  sim::DecodeAttentionMeasurement m;
};

struct DecodeSelection {
  std::vector<DecodeRecord> records;
  std::vector<std::string> versions;    // the versions the selection chose from
  std::string device_name;              // the files' device (all must agree)
  double read_ceiling_bytes_per_s = 0;  // the files' measured read ceiling (median; 0 = none)
  int64_t points_read = 0;              // ok, timed decode_attention rows seen
};

// Reads the files (kvlab result files of this schema) and selects `version` ("best" or a
// name). InvalidArgument / ResultFileError with the file and row for: a missing file, a
// non-HDF5 file or another schema, a file without decode_attention points, an unknown
// version (the known ones are listed), different devices across files, a row whose shape
// the sim rejects or whose bytes disagree with its min_bytes.
DecodeSelection load_decode_records(const std::vector<std::string>& files,
                                    const std::string& version);

// The axis value of a record, for holdout expressions and labels: numbers for numeric
// axes (batch, context, head_dim, num_kv_heads, gqa_group, block_size, seed), text for
// layout, kv_format, lengths, graph, version, study. InvalidArgument for other names.
struct DecodeAxisValue {
  bool numeric = false;
  double number = 0;
  std::string text;
};
DecodeAxisValue decode_axis(const DecodeRecord& r, const std::string& axis);

// The run seed a result file's points were generated with (argv --seed, else the config's).
uint64_t run_seed_of(const std::string& argv, const std::string& config_text,
                     const std::string& file);

// The lengths of a decode_attention point (the kind's lengths_of, see the file header).
std::vector<int32_t> decode_point_lengths(int64_t batch, int64_t context, bool mixed,
                                          uint64_t run_seed, int64_t point_seed);

}  // namespace kvlab::exp
