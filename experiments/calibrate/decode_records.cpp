// decode_records.cpp: decode-attention timings from result files (see decode_records.h).
#include "experiments/calibrate/decode_records.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "experiments/bench/bench.h"
#include "experiments/h5/durable.h"
#include "experiments/h5/h5.h"
#include "experiments/results/result_file.h"
#include "experiments/sweep/spec.h"
#include "experiments/sweep/values.h"
#include "reference/core/error.h"
#include "reference/layout/layout_names.h"
#include "reference/synth/synth.h"
#include "sim/cost/calibration.h"

namespace kvlab::exp {

uint64_t run_seed_of(const std::string& argv, const std::string& config_text,
                     const std::string& file) {
  // `kvlab sweep CONFIG --seed N` (join_argv: space-separated, quoted only when needed).
  std::istringstream in(argv);
  std::string tok, prev;
  while (in >> tok) {
    std::string value;
    if (prev == "--seed")
      value = tok;
    else if (tok.rfind("--seed=", 0) == 0)
      value = tok.substr(7);
    if (!value.empty()) {
      long long s = 0;
      if (!parse_int(value, &s) || s < 0)
        throw InvalidArgument(file + ": argv gives --seed '" + value +
                              "', not a non-negative integer");
      return static_cast<uint64_t>(s);
    }
    prev = tok;
  }
  try {
    return parse_sweep(config_text, file + " (config_text)").seed;
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(file + ": cannot read the run seed from its config_text (" + e.what() +
                          ")");
  }
}

std::vector<int32_t> decode_point_lengths(int64_t batch, int64_t context, bool mixed,
                                          uint64_t run_seed, int64_t point_seed) {
  std::vector<int32_t> lens(static_cast<size_t>(batch), static_cast<int32_t>(context));
  if (!mixed) return lens;
  // The decode_attention kind's lengths: seed = mix_seed(run seed, the point's seed axis);
  // SynthRng(seed ^ 0x1e575eed), lo + floor(uniform * (ctx - lo + 1)).
  const uint64_t seed = mix_seed(run_seed, point_seed);
  ref::SynthRng rng(seed ^ 0x1e575eedull);
  const int64_t lo = std::min<int64_t>(1024, context);
  for (auto& l : lens)
    l = static_cast<int32_t>(lo + static_cast<int64_t>(rng.uniform() * (context - lo + 1)));
  return lens;
}

DecodeAxisValue decode_axis(const DecodeRecord& r, const std::string& axis) {
  const sim::DecodeAttentionShape& s = r.m.shape;
  auto num = [](double v) { return DecodeAxisValue{true, v, ""}; };
  auto txt = [](std::string v) { return DecodeAxisValue{false, 0, std::move(v)}; };
  if (axis == "batch") return num(static_cast<double>(s.batch));
  if (axis == "context") return num(static_cast<double>(r.context));
  if (axis == "head_dim") return num(s.head_dim);
  if (axis == "num_kv_heads") return num(s.num_kv_heads);
  if (axis == "gqa_group") return num(s.num_qo_heads / s.num_kv_heads);
  if (axis == "block_size") return num(s.block_size);
  if (axis == "seed") return num(static_cast<double>(r.seed));
  if (axis == "layout") return txt(r.layout);
  if (axis == "kv_format") return txt(to_string(s.format));
  if (axis == "lengths") return txt(r.lengths);
  if (axis == "graph") return txt(r.graph ? "on" : "off");
  if (axis == "version") return txt(r.version);
  if (axis == "study") return txt(r.study);
  throw InvalidArgument(
      "unknown name '" + axis +
      "' (a decode record has batch, context, head_dim, num_kv_heads, gqa_group, block_size, seed, "
      "layout, kv_format, lengths, graph, version, study)");
}

namespace {

bool is_peer(const std::string& version) {
  return version.rfind("peer:", 0) == 0;
}

// The index columns of one file, read once.
struct IndexColumns {
  const h5::Table* t = nullptr;
  std::string file;
  std::map<std::string, std::vector<double>> num;
  std::map<std::string, std::vector<std::string>> str;

  void need_num(const std::string& c) {
    if (!t->has_column(c))
      throw ResultFileError(file + ": /index has no column '" + c +
                            "' (decode_attention points need it)");
    num[c] = t->read_doubles(c);
  }
  void need_str(const std::string& c) {
    if (!t->has_column(c))
      throw ResultFileError(file + ": /index has no column '" + c +
                            "' (decode_attention points need it)");
    str[c] = t->read_strings(c);
  }
  // An optional text axis: the decode kind's default where the column is absent.
  void opt_str(const std::string& c, const std::string& dflt) {
    str[c] = t->has_column(c) ? t->read_strings(c) : std::vector<std::string>(t->rows(), dflt);
  }
  void opt_num(const std::string& c, double dflt) {
    num[c] = t->has_column(c) ? t->read_doubles(c) : std::vector<double>(t->rows(), dflt);
  }
};

int64_t as_int(double v, const std::string& what, const std::string& where) {
  if (!std::isfinite(v) || v != std::floor(v) || std::fabs(v) > 9.0e15)
    throw InvalidArgument(where + ": " + what + " = " + std::to_string(v) + " is not an integer");
  return static_cast<int64_t>(v);
}

// The bytes the decode kind counts (min_bytes): the sim's bytes without the block-table
// entries, seq_lens and LSE, which the kind leaves out.
double kind_min_bytes(const sim::DecodeAttentionShape& s) {
  sim::GpuSpec unit;  // bytes do not depend on the GPU; any positive rates do
  unit.name = "bytes only";
  unit.hbm_bytes_per_s = 1;
  unit.bf16_flops = 1;
  const double all = sim::decode_attention_cost(unit, s, sim::CostModelConfig{}).bytes;
  const double meta =
      4.0 * static_cast<double>(s.total_blocks()) + 4.0 * static_cast<double>(s.batch);
  const double lse = s.write_lse ? 4.0 * static_cast<double>(s.batch) * s.num_qo_heads : 0.0;
  return all - meta - lse;
}

// The schema attributes and an /index table: what this reader needs. (Peer files written
// by experiments/peers/decode_peers.py hold no /points groups.)
void check_index_schema(const h5::File& f, const std::string& path) {
  if (!f.has_attr("kvlab_schema") || f.attr_type("kvlab_schema") != h5::Type::kString ||
      f.attr_string("kvlab_schema") != kSchemaName)
    throw ResultFileError(path +
                          " is an HDF5 file but not a kvlab result file (no kvlab_schema = \"" +
                          std::string(kSchemaName) + "\" attribute)");
  if (!f.has_attr("schema_version") || f.attr_type("schema_version") == h5::Type::kString ||
      f.attr_int("schema_version") < kOldestReadableSchema ||
      f.attr_int("schema_version") > kSchemaVersion)
    throw ResultFileError(path + " is not kvlab result schema version " +
                          std::to_string(kOldestReadableSchema) + " to " +
                          std::to_string(kSchemaVersion));
  if (!f.is_group("index")) throw ResultFileError(path + " has no /index table");
}

struct FileRows {
  std::vector<DecodeRecord> rows;  // every ok decode_attention row, one record each
  std::string device;
  double read_ceiling = 0;
};

FileRows read_file(const std::string& path) {
  if (access(path.c_str(), R_OK) != 0)
    throw InvalidArgument("result file " + path + " does not exist or is unreadable");
  if (access(h5::DurableFile::journal_path(path).c_str(), F_OK) == 0)
    throw ResultFileError(path + " has an interrupted commit (" +
                          h5::DurableFile::journal_path(path) + "): run `kvlab recover " + path +
                          "` first");
  if (!h5::File::is_hdf5(path)) throw ResultFileError(path + " is not an HDF5 file");
  h5::File f;
  try {
    f = h5::File::open(path);
  } catch (const h5::Error& e) {
    throw ResultFileError(path + " cannot be opened: " + e.what());
  }
  check_index_schema(f, path);
  FileRows out;
  // device_name holds the reason when no device was present (provenance.h).
  const bool present = !f.has_attr("device_present") ||
                       f.attr_type("device_present") == h5::Type::kString ||
                       f.attr_double("device_present") != 0;
  out.device =
      present && f.has_attr("device_name") && f.attr_type("device_name") == h5::Type::kString
          ? f.attr_string("device_name")
          : "";
  out.read_ceiling =
      f.has_attr("read_ceiling_bytes_per_s") ? f.attr_double("read_ceiling_bytes_per_s") : 0.0;
  if (!(out.read_ceiling > 0)) out.read_ceiling = 0;
  const h5::Table t = h5::Table::open(f, "index");
  IndexColumns c;
  c.t = &t;
  c.file = path;
  c.need_str("kind");
  c.need_str("status");
  std::vector<size_t> rows;
  for (size_t i = 0; i < t.rows(); ++i)
    if (c.str["kind"][i] == "decode_attention" && c.str["status"][i] == "ok") rows.push_back(i);
  if (rows.empty()) return out;
  for (const char* n : {"batch", "context", "head_dim", "num_kv_heads", "gqa_group", "block_size",
                        "median_us", "min_bytes"})
    c.need_num(n);
  c.need_str("kv_format");
  c.need_str("version");
  c.opt_num("seed", 0);
  c.opt_str("layout", "nhd");
  c.opt_str("lengths", "uniform");
  c.opt_str("graph", "off");
  c.opt_str("study", "");
  c.opt_str("page_order", "shuffled");
  bool need_seed = false;
  for (size_t i : rows) need_seed |= c.str["lengths"][i] == "mixed";
  uint64_t run_seed = 0;
  if (need_seed) {
    auto text_attr = [&](const char* a) {
      return f.has_attr(a) && f.attr_type(a) == h5::Type::kString ? f.attr_string(a)
                                                                  : std::string();
    };
    run_seed = run_seed_of(text_attr("argv"), text_attr("config_text"), path);
  }
  for (size_t i : rows) {
    const std::string where = path + " /index row " + std::to_string(i);
    const double med = c.num["median_us"][i];
    if (!(std::isfinite(med) && med > 0)) continue;  // validated but not timed (kvlab validate)
    // Pages in pool order are a control (the cost of the scatter), not what a serving pool
    // holds: the calibration is of shuffled pools only.
    if (c.str["page_order"][i] != "shuffled") continue;
    DecodeRecord r;
    r.source = path;
    r.row = static_cast<int64_t>(i);
    r.study = c.str["study"][i];
    r.version = c.str["version"][i];
    r.layout = c.str["layout"][i];
    r.lengths = c.str["lengths"][i];
    r.graph = c.str["graph"][i] == "on";
    r.context = as_int(c.num["context"][i], "context", where);
    r.seed = as_int(c.num["seed"][i], "seed", where);
    r.min_bytes = c.num["min_bytes"][i];
    if (r.lengths != "uniform" && r.lengths != "mixed")
      throw InvalidArgument(where + ": lengths '" + r.lengths + "' (allowed: uniform, mixed)");
    sim::DecodeAttentionShape& s = r.m.shape;
    s.batch = as_int(c.num["batch"][i], "batch", where);
    s.head_dim = static_cast<int32_t>(as_int(c.num["head_dim"][i], "head_dim", where));
    s.num_kv_heads = static_cast<int32_t>(as_int(c.num["num_kv_heads"][i], "num_kv_heads", where));
    s.num_qo_heads =
        static_cast<int32_t>(s.num_kv_heads * as_int(c.num["gqa_group"][i], "gqa_group", where));
    s.block_size = static_cast<int32_t>(as_int(c.num["block_size"][i], "block_size", where));
    s.q_dtype = DType::kBF16;
    s.write_lse = true;
    try {
      s.format = parse_kv_format(c.str["kv_format"][i]);
    } catch (const kvlab::Error& e) {
      throw InvalidArgument(where + ": " + e.what());
    }
    if (r.lengths == "mixed") {
      s.seq_lens = decode_point_lengths(s.batch, r.context, true, run_seed, r.seed);
    } else {
      s.context = r.context;
    }
    r.m.measured_s = med * 1e-6;
    r.m.launch = r.graph ? sim::LaunchMode::kCudaGraph : sim::LaunchMode::kEager;
    double bytes = 0;
    try {
      s.validate();
      bytes = kind_min_bytes(s);
    } catch (const kvlab::Error& e) {
      throw InvalidArgument(where + ": the sim cannot model this shape: " + e.what());
    }
    if (!(std::fabs(bytes - r.min_bytes) <= 1e-12 * std::max(1.0, r.min_bytes)))
      throw InvalidArgument(where + " (" + r.version + ", lengths " + r.lengths +
                            "): the sim counts " + std::to_string(bytes) +
                            " bytes, the file recorded min_bytes " + std::to_string(r.min_bytes) +
                            (r.lengths == "mixed"
                                 ? " (the mixed lengths could not be reconstructed: run seed " +
                                       std::to_string(run_seed) + ")"
                                 : ""));
    out.rows.push_back(std::move(r));
  }
  return out;
}

// Everything of a record but the version: the shape key.
std::string shape_key(const DecodeRecord& r) {
  const auto& s = r.m.shape;
  std::ostringstream os;
  os << r.layout << "|" << to_string(s.format) << "|" << s.head_dim << "|" << s.block_size << "|"
     << s.num_kv_heads << "|" << s.num_qo_heads << "|" << s.batch << "|" << r.context << "|"
     << r.lengths << "|" << r.seed << "|" << r.graph;
  return os.str();
}

std::string describe(const DecodeRecord& r) {
  const auto& s = r.m.shape;
  std::ostringstream os;
  os << r.version << " " << r.layout << " " << to_string(s.format) << " b" << s.batch << " c"
     << r.context << (r.lengths == "mixed" ? " mixed" : "") << " bs" << s.block_size << " g"
     << s.num_qo_heads / s.num_kv_heads;
  if (s.head_dim != 128 || s.num_kv_heads != 8) os << " d" << s.head_dim << " kv" << s.num_kv_heads;
  if (r.graph) os << " graph";
  return os.str();
}

}  // namespace

DecodeSelection load_decode_records(const std::vector<std::string>& files,
                                    const std::string& version) {
  if (files.empty()) throw InvalidArgument("no result files given");
  if (version.empty()) throw InvalidArgument("empty version (give 'best' or a version name)");
  DecodeSelection sel;
  std::vector<DecodeRecord> all;
  std::vector<double> ceilings;
  for (const auto& path : files) {
    FileRows fr = read_file(path);
    if (fr.rows.empty()) continue;
    if (!sel.device_name.empty() && fr.device != sel.device_name)
      throw InvalidArgument("the files were measured on different devices: '" + sel.device_name +
                            "' and '" + fr.device + "' (" + path +
                            "); calibrate one device at a time");
    sel.device_name = fr.device;
    if (fr.read_ceiling > 0) ceilings.push_back(fr.read_ceiling);
    for (auto& r : fr.rows) all.push_back(std::move(r));
  }
  sel.points_read = static_cast<int64_t>(all.size());
  if (all.empty()) {
    std::string list;
    for (const auto& f : files) list += (list.empty() ? "" : ", ") + f;
    throw InvalidArgument(
        "no timed decode_attention points with status ok in " + list +
        " (kvlab calibrate needs the output of a kvlab sweep with kind = decode_attention)");
  }
  sel.read_ceiling_bytes_per_s = sim::median(ceilings);
  // One record per (shape, version): the median of its repeats.
  std::map<std::pair<std::string, std::string>, std::vector<size_t>> groups;
  std::vector<std::pair<std::string, std::string>> order;
  for (size_t i = 0; i < all.size(); ++i) {
    const auto k = std::make_pair(shape_key(all[i]), all[i].version);
    if (!groups.count(k)) order.push_back(k);
    groups[k].push_back(i);
  }
  std::vector<DecodeRecord> merged;
  for (const auto& k : order) {
    const auto& idx = groups[k];
    DecodeRecord r = all[idx.front()];
    std::vector<double> t;
    for (size_t i : idx) t.push_back(all[i].m.measured_s);
    r.m.measured_s = sim::median(t);
    r.repeats = static_cast<int64_t>(idx.size());
    merged.push_back(std::move(r));
  }
  std::vector<std::string> known;
  for (const auto& r : merged)
    if (std::find(known.begin(), known.end(), r.version) == known.end()) known.push_back(r.version);
  if (version == "best") {
    std::map<std::string, size_t> best;  // shape -> index into merged
    std::vector<std::string> shape_order;
    for (size_t i = 0; i < merged.size(); ++i) {
      if (is_peer(merged[i].version)) continue;
      const std::string k = shape_key(merged[i]);
      auto it = best.find(k);
      if (it == best.end()) {
        best[k] = i;
        shape_order.push_back(k);
      } else if (merged[i].m.measured_s < merged[it->second].m.measured_s) {
        it->second = i;
      }
    }
    if (best.empty())
      throw InvalidArgument(
          "--version best: every decode_attention point is a peer (peer:...); name a version to "
          "calibrate a peer");
    for (const auto& k : shape_order) sel.records.push_back(merged[best[k]]);
  } else {
    for (auto& r : merged)
      if (r.version == version) sel.records.push_back(r);
    if (sel.records.empty()) {
      std::string list;
      for (const auto& v : known) list += " " + v;
      throw InvalidArgument("version '" + version +
                            "' has no timed decode_attention points (the files hold:" + list +
                            "; or give 'best')");
    }
  }
  for (auto& r : sel.records) r.m.label = describe(r);
  if (version == "best") {
    for (const auto& v : known)
      if (!is_peer(v)) sel.versions.push_back(v);
  } else {
    sel.versions = {version};
  }
  return sel;
}

}  // namespace kvlab::exp
