// model_cli.cpp: `kvlab model` (see model_cli.h).
#include "experiments/model/model_cli.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdlib>
#include <iostream>
#include <numeric>

#include "experiments/h5/h5.h"
#include "experiments/model/model_eval.h"
#include "experiments/model/model_file.h"
#include "reference/core/error.h"
#include "reference/metrics/tolerance.h"
#include "reference/step/decode_step.h"

extern char** environ;

namespace kvlab::exp {
namespace {

namespace po = boost::program_options;
constexpr int kExitBadInput = 2;

#ifndef KVLAB_PYTHON
#define KVLAB_PYTHON "python3"
#endif

void usage(std::ostream& os) {
  os << "usage: kvlab model <import|info|generate|dump-kv> ...\n"
        "  import GGUF --out FILE [--text NAME=PATH ...] [--layers N] [--vocab-from-texts N]\n"
        "  info FILE\n"
        "  generate FILE --out OUT.h5 [--text gpl3] [--prompt 64] [--steps 64]\n"
        "  dump-kv FILE --out OUT.h5 [--text gpl3] [--tokens 512] [--layers 0,last]\n";
}

int run_import(const std::vector<std::string>& args, std::ostream& err) {
  const char* env = std::getenv("KVLAB_PYTHON");
  const std::string py = env && *env ? env : KVLAB_PYTHON;
  const std::string script = std::string(KVLAB_SOURCE_DIR) + "/experiments/model/gguf_import.py";
  std::vector<std::string> argv = {py, script};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::cout.flush();
  pid_t pid = 0;
  if (posix_spawnp(&pid, py.c_str(), nullptr, nullptr, cargv.data(), environ) != 0) {
    err << "kvlab model import: error: cannot run the Python interpreter '" << py
        << "' (set KVLAB_PYTHON, or run cmake/quickstart.sh to create build/venv)\n";
    return kExitBadInput;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int run_info(const std::vector<std::string>& args, std::ostream& out) {
  KVLAB_REQUIRE(args.size() == 1, "kvlab model info takes one model file");
  const ModelFile m = read_model_file(args[0]);
  out << m.path << ": " << to_string(m.config) << " theta " << m.config.rope_theta << " eps "
      << m.config.rms_eps << " context " << m.context_length
      << (m.weights.tied() ? " tied embeddings" : "") << "\n";
  for (const auto& [k, v] : m.provenance) out << "  " << k << ": " << v << "\n";
  for (const auto& [name, t] : m.texts)
    out << "  text " << name << ": " << t.tokens.size() << " tokens, " << t.bytes << " bytes, "
        << t.path << " sha256 " << t.sha256 << "\n";
  return 0;
}

struct Common {
  std::string file, out, text = "gpl3";
};

po::variables_map parse(const std::vector<std::string>& args, po::options_description& d,
                        Common* c) {
  d.add_options()("out", po::value(&c->out)->required(), "output HDF5 file")(
      "text", po::value(&c->text)->default_value("gpl3"), "study text of the model file")(
      "file", po::value(&c->file)->required(), "model file");
  po::positional_options_description pos;
  pos.add("file", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(d).positional(pos).run(), vm);
  po::notify(vm);
  return vm;
}

std::vector<int32_t> table_of(int n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), 0);
  return t;
}

h5::File create_out(const std::string& path, const ModelFile& m, const ModelText& t) {
  h5::File f = h5::File::create(path, true);
  f.set_attr("model_file", m.path);
  f.set_attr("model_name", m.name);
  f.set_attr("text", t.name);
  f.set_attr("text_sha256", t.sha256);
  f.set_attr("text_path", t.path);
  return f;
}

int run_generate(const std::vector<std::string>& args, std::ostream& out) {
  Common c;
  int prompt = 64, steps = 64;
  po::options_description d("kvlab model generate");
  d.add_options()("prompt", po::value(&prompt)->default_value(64), "teacher-forced tokens")(
      "steps", po::value(&steps)->default_value(64), "greedy decode steps after the prompt");
  parse(args, d, &c);
  KVLAB_REQUIRE(prompt >= 1 && steps >= 0, "--prompt must be >= 1 and --steps >= 0");
  const std::shared_ptr<const ModelFile> m = load_model_cached(c.file);
  const ModelText& t = model_text(*m, c.text);
  KVLAB_REQUIRE(prompt <= static_cast<int>(t.tokens.size()),
                "--prompt " << prompt << " exceeds the text's " << t.tokens.size() << " tokens");
  const DecoderConfig& cfg = m->config;
  ref::StepCacheOptions co;  // BF16 cache, block 16
  ref::DecoderRef r(cfg, m->weights, co, 1, prompt + steps);
  r.start(1, table_of(r.blocks_per_seq()));
  const std::vector<int32_t> ptoks(t.tokens.begin(), t.tokens.begin() + prompt);
  r.forward_sequence(ptoks);
  const std::vector<float> prompt_logits = r.logits();
  std::vector<int32_t> gen;
  std::vector<float> gen_logits;
  int32_t next = ref::greedy_token(
      prompt_logits.data() + static_cast<size_t>(prompt - 1) * cfg.vocab, cfg.vocab);
  for (int s = 0; s < steps; ++s) {
    gen.push_back(next);
    next = r.step({next})[0];
    gen_logits.insert(gen_logits.end(), r.logits().begin(), r.logits().end());
  }
  h5::File f = create_out(c.out, *m, t);
  f.set_attr("doc",
             "CPU reference (BF16 KV cache): prompt_logits [prompt, vocab] teacher-forced on the "
             "text's first tokens; generated [steps] greedy tokens (generated[0] = argmax of the "
             "last prompt row); step_logits [steps, vocab]: the logits after feeding generated[i]");
  // The tolerance an independent implementation's logits must meet (the decode-step entry of
  // the tolerance table for a BF16 cache: a different accumulation order, same roundings).
  const Tolerance tol = tolerance(Op::kDecodeStepLogits, KvFormat::kBF16, DType::kF32, cfg.layers);
  f.set_attr("tolerance_nmse_max", tol.nmse_max);
  f.set_attr("tolerance_atol", tol.atol);
  f.write("prompt_tokens", ptoks);
  f.write("prompt_logits", prompt_logits, {uint64_t(prompt), uint64_t(cfg.vocab)});
  f.write("generated", gen);
  if (steps > 0) f.write("step_logits", gen_logits, {uint64_t(steps), uint64_t(cfg.vocab)});
  f.close();
  out << "wrote " << c.out << ": " << prompt << " prompt tokens, " << steps << " greedy tokens\n";
  return 0;
}

int run_dump_kv(const std::vector<std::string>& args, std::ostream& out) {
  Common c;
  int tokens = 512;
  std::string layer_list = "0,last";
  po::options_description d("kvlab model dump-kv");
  d.add_options()("tokens", po::value(&tokens)->default_value(512), "tokens of the text")(
      "layers", po::value(&layer_list)->default_value("0,last"), "layers to dump");
  parse(args, d, &c);
  const std::shared_ptr<const ModelFile> m = load_model_cached(c.file);
  const ModelText& t = model_text(*m, c.text);
  const DecoderConfig& cfg = m->config;
  const std::vector<int> layers = parse_layer_list(layer_list, cfg.layers);
  KVLAB_REQUIRE(!layers.empty(), "--layers: no layer given");
  KVLAB_REQUIRE(tokens >= 1 && tokens <= static_cast<int>(t.tokens.size()),
                "--tokens " << tokens << " outside [1, " << t.tokens.size() << "]");
  const size_t kvd = cfg.kv_dim(), qd = cfg.q_dim();
  std::vector<std::vector<float>> k(cfg.layers), v(cfg.layers);
  std::vector<std::vector<int32_t>> q(cfg.layers);
  ref::StepCacheOptions co;
  ref::DecoderRef r(cfg, m->weights, co, 1, tokens);
  r.start(1, table_of(r.blocks_per_seq()));
  const ref::KvObserver obs = [&](int l, int, int rows, const float*, const float* kp,
                                  const float* vp, const uint16_t* qb) {
    k[l].insert(k[l].end(), kp, kp + rows * kvd);
    v[l].insert(v[l].end(), vp, vp + rows * kvd);
    q[l].insert(q[l].end(), qb, qb + rows * qd);
  };
  for (int p0 = 0; p0 < tokens; p0 += 256) {
    const int rows = std::min(256, tokens - p0);
    r.forward_sequence(std::vector<int32_t>(t.tokens.begin() + p0, t.tokens.begin() + p0 + rows),
                       obs);
  }
  h5::File f = create_out(c.out, *m, t);
  f.set_attr("doc",
             "real K/V of the BF16 run: /layer_NN/k, v float32 [tokens, kv_heads, head_dim] "
             "(K after RoPE, as the cache receives them), q int32 holding BF16 bits "
             "[tokens, q_heads, head_dim] (the queries attention uses)");
  f.set_attr("kv_heads", int64_t{cfg.kv_heads});
  f.set_attr("q_heads", int64_t{cfg.q_heads});
  f.set_attr("head_dim", int64_t{cfg.head_dim});
  f.set_attr("tokens", int64_t{tokens});
  const std::vector<uint64_t> kdims = {uint64_t(tokens), uint64_t(cfg.kv_heads),
                                       uint64_t(cfg.head_dim)};
  const std::vector<uint64_t> qdims = {uint64_t(tokens), uint64_t(cfg.q_heads),
                                       uint64_t(cfg.head_dim)};
  for (int l : layers) {
    char name[32];
    std::snprintf(name, sizeof name, "layer_%02d", l);
    h5::Group g = f.create_group(name);
    g.set_attr("layer", int64_t{l});
    g.write("k", k[l], kdims);
    g.write("v", v[l], kdims);
    g.write("q", q[l], qdims);
  }
  f.close();
  out << "wrote " << c.out << ": " << layers.size() << " layers x " << tokens << " tokens\n";
  return 0;
}

}  // namespace

int cmd_model(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    usage(args.empty() ? err : out);
    return args.empty() ? kExitBadInput : 0;
  }
  const std::string sub = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "import") return run_import(rest, err);
  if (sub == "info") return run_info(rest, out);
  if (sub == "generate") return run_generate(rest, out);
  if (sub == "dump-kv") return run_dump_kv(rest, out);
  err << "kvlab model: unknown command '" << sub << "'\n";
  usage(err);
  return kExitBadInput;
}

}  // namespace kvlab::exp
