// identity.h: what makes two runs parts of the same sweep (its identity), stored in every
// result file (schema 2) as the /sweep group and checked by --resume and merge.
//
// The identity is: the sweep's points (every point key of the whole sweep, in order, and
// their fingerprint), the sweep seed in effect (config `seed` or --seed), the timing rules
// ([timing] options, or "off" for `kvlab validate`) and the version of every kind the sweep
// uses (Bench::version()). Shards of one sweep share it; a resume or a merge of files with
// different identities is refused (exit code 2) with the differences spelled out, unless
// --allow-mixed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "experiments/bench/bench.h"
#include "experiments/bench/kind_list.h"
#include "experiments/h5/h5.h"

namespace kvlab::exp {

struct SweepSpec;

struct SweepIdentity {
  std::vector<std::string> keys;   // every point of the whole sweep, in sweep order
  std::string points_fingerprint;  // fingerprint of the keys (spec.h)
  uint64_t seed = 0;
  std::string timing;  // timing_rules_text(), or "off"
  std::string kinds;   // "name=version,..." in name order

  // 16 hex digits: FNV-1a 64 of canonical_text() (result_file.h gives the exact text).
  std::string digest() const;
  std::string canonical_text() const;
};

// The timing rules as text ("warmup=3 min_reps=10 ..."): every field of TimingConfig.
std::string timing_rules_text(const TimingConfig& t);

// The identity of a sweep: `all` is its whole expansion (not a shard).
SweepIdentity make_identity(const SweepSpec& spec, const std::vector<Point>& all, bool timing,
                            const KindList& kinds);

// Writes the identity as the group /sweep of `f` (sealed with its content_crc).
void write_identity(h5::File& f, const SweepIdentity& id);
// The identity stored in `f`; nullopt for files without one (schema 1).
std::optional<SweepIdentity> read_identity(const h5::File& f);

// "" when equal; otherwise one line per difference, naming `file_label` and "this run":
// the seed, the timing rules, the kind versions, and which points are only on one side.
std::string identity_difference(const SweepIdentity& file, const SweepIdentity& run,
                                const std::string& file_label, const std::string& run_label);

// A fresh id for this invocation: "<UTC yyyymmddThhmmssZ>-<8 hex>".
std::string new_run_id();

}  // namespace kvlab::exp
