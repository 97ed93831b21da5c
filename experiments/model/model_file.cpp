// model_file.cpp: reading kvlab's model file (see model_file.h).
#include "experiments/model/model_file.h"

#include <hdf5.h>

#include <mutex>
#include <sstream>

#include "experiments/h5/h5.h"
#include "reference/core/error.h"
#include "reference/formats/formats.h"

namespace kvlab::exp {
namespace {

constexpr const char* kSchema = "kvlab-model/1";

uint16_t bf16(float x) {
  return float_to_bf16_bits(x, Saturation::kSatFinite);
}

float f16_at(const uint8_t* p) {
  return fp16_bits_to_float(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}

// Raw read of a whole dataset whose element is `bytes` wide integers of class H5T_INTEGER.
template <class T>
std::vector<T> read_raw(const h5::Dataset& ds, hid_t mem_type, const std::string& file) {
  const hid_t ft = H5Dget_type(ds.id());
  const bool ok = ft >= 0 && H5Tget_class(ft) == H5T_INTEGER && H5Tget_size(ft) == sizeof(T);
  if (ft >= 0) H5Tclose(ft);
  KVLAB_REQUIRE(ok, "model file " << file << ": dataset " << ds.path() << " is not "
                                  << 8 * sizeof(T) << "-bit integers");
  std::vector<T> v(ds.size());
  if (!v.empty())
    KVLAB_REQUIRE(H5Dread(ds.id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0,
                  "model file " << file << ": reading " << ds.path() << " failed");
  return v;
}

// One weight tensor as BF16 bits [rows, cols] (checked against the expected shape).
std::vector<uint16_t> read_weight(const h5::Group& g, const std::string& name, int64_t rows,
                                  int64_t cols, const std::string& file) {
  KVLAB_REQUIRE(g.is_dataset(name),
                "model file " << file << ": weight " << g.path() << "/" << name << " is missing");
  const h5::Dataset ds = g.open_dataset(name);
  const std::string enc = ds.has_attr("encoding") ? ds.attr_string("encoding") : "";
  const int64_t r = ds.has_attr("rows") ? ds.attr_int("rows") : -1;
  const int64_t c = ds.has_attr("cols") ? ds.attr_int("cols") : -1;
  KVLAB_REQUIRE(r == rows && c == cols, "model file " << file << ": weight " << ds.path() << " is ["
                                                      << r << ", " << c << "], the config needs ["
                                                      << rows << ", " << cols << "]");
  std::vector<uint16_t> out(static_cast<size_t>(rows * cols));
  if (enc == "bf16") {
    std::vector<uint16_t> v = read_raw<uint16_t>(ds, H5T_NATIVE_UINT16, file);
    KVLAB_REQUIRE(static_cast<int64_t>(v.size()) == rows * cols,
                  "model file " << file << ": " << ds.path() << " holds " << v.size()
                                << " values, not " << rows * cols);
    return v;
  }
  KVLAB_REQUIRE(enc == "q8_0" || enc == "q4_0" || enc == "q4_1",
                "model file " << file << ": weight " << ds.path() << " has encoding '" << enc
                              << "' (known: bf16, q8_0, q4_0, q4_1)");
  KVLAB_REQUIRE(cols % 32 == 0, "model file " << file << ": " << ds.path() << " has " << cols
                                              << " columns, not whole blocks of 32");
  const int64_t bb = enc == "q8_0" ? 34 : (enc == "q4_0" ? 18 : 20);
  const std::vector<uint8_t> blocks = read_raw<uint8_t>(ds, H5T_NATIVE_UINT8, file);
  KVLAB_REQUIRE(static_cast<int64_t>(blocks.size()) == rows * (cols / 32) * bb,
                "model file " << file << ": " << ds.path() << " holds " << blocks.size()
                              << " bytes, " << enc << " [" << rows << ", " << cols << "] needs "
                              << rows * (cols / 32) * bb);
  for (int64_t i = 0; i < rows; ++i)
    dequantize_blocks_bf16(enc, blocks.data() + i * (cols / 32) * bb, cols, out.data() + i * cols);
  return out;
}

std::string attr_text(const h5::Object& o, const std::string& name) {
  return h5::to_string(o.attr(name));
}

h5::File open_model(const std::string& path) {
  KVLAB_REQUIRE(h5::File::is_hdf5(path),
                "model file '" << path << "' does not exist or is not HDF5 (write one with: "
                               << "kvlab model import GGUF --out " << path << ")");
  h5::File f = [&] {
    try {
      return h5::File::open(path);
    } catch (const h5::Error& e) {
      throw InvalidArgument("model file '" + path + "' cannot be opened: " + e.what());
    }
  }();
  const std::string schema = f.has_attr("schema") ? f.attr_string("schema") : "(none)";
  KVLAB_REQUIRE(schema == kSchema, "model file '" << path << "' has schema '" << schema
                                                  << "', expected '" << kSchema << "'");
  return f;
}

}  // namespace

void dequantize_blocks_bf16(const std::string& encoding, const uint8_t* blocks, int64_t cols,
                            uint16_t* out) {
  const int64_t nb = cols / 32;
  if (encoding == "q8_0") {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = blocks + b * 34;
      const float d = f16_at(p);
      for (int j = 0; j < 32; ++j)
        out[b * 32 + j] = bf16(static_cast<float>(static_cast<int8_t>(p[2 + j])) * d);
    }
  } else if (encoding == "q4_0" || encoding == "q4_1") {
    const bool q41 = encoding == "q4_1";
    const int64_t bb = q41 ? 20 : 18;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = blocks + b * bb;
      const float d = f16_at(p), m = q41 ? f16_at(p + 2) : 0.0f;
      const uint8_t* qs = p + (q41 ? 4 : 2);
      for (int j = 0; j < 32; ++j) {
        const int q = j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
        // float32 product then sum (gguf-py: d * q + m; q4_0: d * (q - 8))
        const float prod = d * static_cast<float>(q41 ? q : q - 8);
        out[b * 32 + j] = bf16(q41 ? prod + m : prod);
      }
    }
  } else {
    throw InvalidArgument("dequantize_blocks_bf16: unknown encoding '" + encoding +
                          "' (known: q8_0, q4_0, q4_1)");
  }
}

namespace {

DecoderConfig config_of(const h5::File& f, const std::string& path, int64_t* context_length) {
  try {
    const h5::Group cg = f.open_group("config");
    DecoderConfig c;
    c.name = f.has_attr("name") ? f.attr_string("name") : path;
    c.layers = static_cast<int32_t>(cg.attr_int("layers"));
    c.hidden = static_cast<int32_t>(cg.attr_int("hidden"));
    c.q_heads = static_cast<int32_t>(cg.attr_int("q_heads"));
    c.kv_heads = static_cast<int32_t>(cg.attr_int("kv_heads"));
    c.head_dim = static_cast<int32_t>(cg.attr_int("head_dim"));
    c.ffn = static_cast<int32_t>(cg.attr_int("ffn"));
    c.vocab = static_cast<int32_t>(cg.attr_int("vocab"));
    c.rope_theta = static_cast<float>(cg.attr_double("rope_theta"));
    c.rms_eps = static_cast<float>(cg.attr_double("rms_eps"));
    if (context_length) *context_length = cg.attr_int("context_length");
    validate(c);
    return c;
  } catch (const h5::Error& e) {
    throw InvalidArgument("model file '" + path + "' has no readable /config: " + e.what());
  }
}

}  // namespace

DecoderConfig read_model_config(const std::string& path) {
  return config_of(open_model(path), path, nullptr);
}

ModelFile read_model_file(const std::string& path) {
  h5::File f = open_model(path);
  ModelFile m;
  m.path = path;
  try {
    for (const std::string& a : f.attr_names()) m.provenance.emplace_back(a, attr_text(f, a));
    m.name = f.has_attr("name") ? f.attr_string("name") : path;
    m.slice = f.has_attr("slice") ? f.attr_string("slice") : "";
    m.config = config_of(f, path, &m.context_length);
    const DecoderConfig& c = m.config;
    const bool tied = f.open_group("config").attr_int("tied_embeddings") != 0;

    const h5::Group wg = f.open_group("weights");
    DecoderWeights& w = m.weights;
    w.source = path;
    const int64_t H = c.hidden, V = c.vocab, F = c.ffn, qd = c.q_dim(), kvd = c.kv_dim();
    w.embedding = read_weight(wg, "embedding", V, H, path);
    if (!tied) w.lm_head = read_weight(wg, "lm_head", V, H, path);
    w.final_norm = read_weight(wg, "final_norm", 1, H, path);
    for (int l = 0; l < c.layers; ++l) {
      char name[32];
      std::snprintf(name, sizeof name, "layer_%02d", l);
      KVLAB_REQUIRE(wg.is_group(name), "model file " << path << ": /weights/" << name
                                                     << " is missing (config says " << c.layers
                                                     << " layers)");
      const h5::Group lg = wg.open_group(name);
      DecoderWeights::Layer L;
      L.attn_norm = read_weight(lg, "attn_norm", 1, H, path);
      L.mlp_norm = read_weight(lg, "mlp_norm", 1, H, path);
      // wqkv = [wq; wk; wv], w_gate_up = [w_gate; w_up] (decoder_weights.h)
      for (const auto& [part, rows] :
           std::vector<std::pair<std::string, int64_t>>{{"wq", qd}, {"wk", kvd}, {"wv", kvd}}) {
        const std::vector<uint16_t> t = read_weight(lg, part, rows, H, path);
        L.wqkv.insert(L.wqkv.end(), t.begin(), t.end());
      }
      L.wo = read_weight(lg, "wo", H, qd, path);
      for (const char* part : {"w_gate", "w_up"}) {
        const std::vector<uint16_t> t = read_weight(lg, part, F, H, path);
        L.w_gate_up.insert(L.w_gate_up.end(), t.begin(), t.end());
      }
      L.w_down = read_weight(lg, "w_down", H, F, path);
      w.layers.push_back(std::move(L));
    }
    validate(w, c);

    if (f.is_group("texts")) {
      const h5::Group tg = f.open_group("texts");
      for (const std::string& name : tg.children()) {
        const h5::Dataset ds = tg.open_group(name).open_dataset("tokens");
        ModelText t;
        t.name = name;
        t.tokens = read_raw<int32_t>(ds, H5T_NATIVE_INT32, path);
        t.path = ds.has_attr("path") ? ds.attr_string("path") : "";
        t.sha256 = ds.has_attr("sha256") ? ds.attr_string("sha256") : "";
        t.licence = ds.has_attr("licence") ? ds.attr_string("licence") : "";
        t.tokenizer = ds.has_attr("tokenizer") ? ds.attr_string("tokenizer") : "";
        t.bytes = ds.has_attr("bytes") ? ds.attr_int("bytes") : 0;
        for (int32_t id : t.tokens)
          KVLAB_REQUIRE(id >= 0 && id < c.vocab, "model file "
                                                     << path << ": text " << name << " holds token "
                                                     << id << " outside [0, " << c.vocab << ")");
        m.texts.emplace(name, std::move(t));
      }
    }
    if (f.is_dataset("vocab_map"))
      m.vocab_map = read_raw<int32_t>(f.open_dataset("vocab_map"), H5T_NATIVE_INT32, path);
  } catch (const h5::Error& e) {
    throw InvalidArgument("model file '" + path + "' is damaged or incomplete: " + e.what());
  }
  return m;
}

void check_model_file(const std::string& path, const std::string& text, int64_t tokens) {
  h5::File f = open_model(path);
  if (text.empty()) return;
  std::string known;
  if (f.is_group("texts"))
    for (const std::string& n : f.open_group("texts").children()) {
      known += (known.empty() ? "" : ", ") + n;
      if (n != text) continue;
      const int64_t have =
          static_cast<int64_t>(f.open_group("texts").open_group(n).open_dataset("tokens").size());
      KVLAB_REQUIRE(tokens <= have, "model file '" << path << "': text '" << text << "' has "
                                                   << have << " tokens, " << tokens
                                                   << " asked for");
      return;
    }
  throw InvalidArgument("model file '" + path + "' has no text '" + text +
                        "' (it has: " + (known.empty() ? std::string("none") : known) + ")");
}

std::shared_ptr<const ModelFile> load_model_cached(const std::string& path) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const ModelFile>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(path);
  if (it != cache.end()) return it->second;
  // One model at a time stays resident: a sweep over two model files reads each once per run.
  cache.clear();
  auto m = std::make_shared<const ModelFile>(read_model_file(path));
  cache.emplace(path, m);
  return m;
}

const ModelText& model_text(const ModelFile& m, const std::string& name) {
  auto it = m.texts.find(name);
  if (it != m.texts.end()) return it->second;
  std::string known;
  for (const auto& t : m.texts) known += (known.empty() ? "" : ", ") + t.first;
  throw InvalidArgument("model file '" + m.path + "' has no text '" + name +
                        "' (it has: " + (known.empty() ? std::string("none") : known) + ")");
}

}  // namespace kvlab::exp
