// serving_common.cpp: see serving_common.h.
#include "experiments/kinds/serving_common.h"

#include <unistd.h>

#include <cmath>
#include <memory>
#include <set>
#include <sstream>

#include "experiments/h5/durable.h"
#include "experiments/h5/h5.h"
#include "experiments/results/result_file.h"
#include "reference/core/error.h"

namespace kvlab::exp {

std::vector<AxisSpec> serving_executor_axes() {
  return {
      {"preset", AxisType::kEnum, "llama3-8b", decoder_preset_names(),
       "decoder shape (weights synthetic: step time does not depend on their values)"},
      {"layers", AxisType::kInt, "0", {}, "decoder layers (0: the preset's)"},
      {"block_size", AxisType::kInt, "16", {}, "tokens per KV block"},
      {"pool_blocks",
       AxisType::kInt,
       "4096",
       {},
       "KV blocks of the executor's pool (the engine may use fewer: kv_blocks)"},
      {"max_num_seqs",
       AxisType::kInt,
       "64",
       {},
       "sequences per step at most (the engine's limit; CUDA-graph buckets up to it)"},
      {"max_num_batched_tokens",
       AxisType::kInt,
       "512",
       {},
       "token rows per step at most (the engine's budget; chunked prefill)"},
      {"max_context", AxisType::kInt, "4096", {}, "tokens per sequence at most"},
      {"graph",
       AxisType::kEnum,
       "on",
       {"on", "off"},
       "decode-only steps as CUDA graphs of their batch bucket (mixed steps run eager)"},
  };
}

ServingExecutorConfig serving_executor_config(const Point& p) {
  ServingExecutorConfig c;
  c.decoder = decoder_preset(p.str("preset"));
  const int64_t layers = p.integer("layers");
  KVLAB_REQUIRE(layers >= 0 && layers <= 4096,
                "layers " << layers << " outside [0, 4096] (0 = the preset's)");
  if (layers > 0) c.decoder.layers = static_cast<int32_t>(layers);
  auto in = [&](const char* axis, int64_t lo, int64_t hi) {
    const int64_t v = p.integer(axis);
    KVLAB_REQUIRE(v >= lo && v <= hi, axis << " " << v << " outside [" << lo << ", " << hi << "]");
    return static_cast<int32_t>(v);
  };
  c.block_size = in("block_size", 1, 4096);
  c.pool_blocks = in("pool_blocks", 1, int64_t{1} << 30);
  c.max_num_seqs = in("max_num_seqs", 1, 4096);
  c.max_num_batched_tokens = in("max_num_batched_tokens", 1, 65535);
  c.max_context = in("max_context", 2, 1 << 24);
  c.graph = p.str("graph") == "on";
  validate(c.decoder);
  return c;
}

std::vector<sim::StepPartsRecord> read_serving_step_records(const std::string& path,
                                                            const ServingExecutorConfig& c,
                                                            std::string* device) {
  if (access(path.c_str(), R_OK) != 0)
    throw InvalidArgument("calibration: result file " + path + " does not exist or is unreadable");
  if (access(h5::DurableFile::journal_path(path).c_str(), F_OK) == 0)
    throw ResultFileError(path + " has an interrupted commit: run `kvlab recover " + path +
                          "` first");
  if (!h5::File::is_hdf5(path)) throw ResultFileError(path + " is not an HDF5 file");
  h5::File f;
  try {
    f = h5::File::open(path);
  } catch (const h5::Error& e) {
    throw ResultFileError(path + " cannot be opened: " + e.what());
  }
  ResultFile::check_schema(f, path);
  if (device)
    *device = f.has_attr("device_name") && f.attr_type("device_name") == h5::Type::kString
                  ? f.attr_string("device_name")
                  : "";
  const h5::Table t = h5::Table::open(f, "index");
  const std::vector<std::string> kind = t.read_strings("kind"), status = t.read_strings("status");
  std::vector<size_t> rows;
  for (size_t i = 0; i < t.rows(); ++i)
    if (kind[i] == "serving_step" && status[i] == "ok") rows.push_back(i);
  if (rows.empty())
    throw InvalidArgument("calibration: " + path +
                          " holds no ok serving_step point (run `kvlab sweep` "
                          "with a serving_step study first)");
  auto num = [&](const char* col) {
    if (!t.has_column(col))
      throw ResultFileError(path + ": /index has no column '" + col + "' (serving_step needs it)");
    return t.read_doubles(col);
  };
  auto str = [&](const char* col) {
    if (!t.has_column(col))
      throw ResultFileError(path + ": /index has no column '" + col + "' (serving_step needs it)");
    return t.read_strings(col);
  };
  const auto preset = str("preset"), graph = str("graph");
  const auto layers = num("layers"), block = num("block_size"), seqs = num("max_num_seqs");
  const auto nd = num("num_decode_seqs"), dctx = num("decode_context_tokens"),
             np = num("num_prefill_seqs"), pt = num("prefill_tokens_total"),
             pairs = num("prefill_attn_pairs"), pctx = num("prefill_context_tokens"),
             ns = num("num_sampled"), rws = num("rows"), lmr = num("lm_rows"),
             step = num("step_us"), gemm = num("gemm_us"), lm = num("lm_head_us"),
             da = num("decode_attn_us"), pa = num("prefill_attn_us"), gr = num("graph_step");
  std::vector<sim::StepPartsRecord> out;
  std::set<std::string> seen;
  for (size_t i : rows) {
    const int64_t L = layers[i] > 0 ? static_cast<int64_t>(layers[i]) : -1;
    const DecoderConfig d = decoder_preset(preset[i]);
    const int64_t eff_layers = L > 0 ? L : d.layers;
    std::ostringstream what;
    what << preset[i] << " L" << eff_layers << " bs" << block[i] << " seqs" << seqs[i] << " graph "
         << graph[i];
    seen.insert(what.str());
    if (preset[i] != c.decoder.name || eff_layers != c.decoder.layers ||
        static_cast<int32_t>(block[i]) != c.block_size ||
        static_cast<int32_t>(seqs[i]) != c.max_num_seqs || (graph[i] == "on") != c.graph)
      continue;
    sim::StepPartsRecord r;
    r.label = path + " row " + std::to_string(i);
    r.shape.num_decode_seqs = static_cast<int64_t>(nd[i]);
    r.shape.decode_context_tokens = static_cast<int64_t>(dctx[i]);
    r.shape.num_prefill_seqs = static_cast<int64_t>(np[i]);
    r.shape.prefill_tokens = static_cast<int64_t>(pt[i]);
    r.shape.prefill_attn_pairs = pairs[i];
    r.shape.prefill_context_tokens = static_cast<int64_t>(pctx[i]);
    r.shape.num_sampled = static_cast<int64_t>(ns[i]);
    r.graph = gr[i] != 0;
    r.rows = static_cast<int64_t>(rws[i]);
    r.lm_rows = static_cast<int64_t>(lmr[i]);
    r.total_s = step[i] * 1e-6;
    r.gemm_s = gemm[i] * 1e-6;
    r.lm_head_s = lm[i] * 1e-6;
    r.decode_attn_s = da[i] * 1e-6;
    r.prefill_attn_s = pa[i] * 1e-6;
    out.push_back(r);
  }
  if (out.empty()) {
    std::string held;
    for (const auto& s : seen) held += "\n  " + s;
    throw InvalidArgument("calibration: " + path + " has no serving_step point for " +
                          c.decoder.name + " L" + std::to_string(c.decoder.layers) + " bs" +
                          std::to_string(c.block_size) + " seqs" + std::to_string(c.max_num_seqs) +
                          " graph " + (c.graph ? "on" : "off") + "; it holds:" + held);
  }
  return out;
}

}  // namespace kvlab::exp
