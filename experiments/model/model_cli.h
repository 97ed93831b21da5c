// model_cli.h: `kvlab model`, the real-model commands.
//
//   kvlab model import GGUF --out FILE [--text NAME=PATH ...] [--layers N]
//                                      [--vocab-from-texts N]
//       runs experiments/model/gguf_import.py with the build's Python (KVLAB_PYTHON overrides):
//       a Llama-family GGUF -> kvlab's model file (HDF5). GGUF = a path or package:NAME.
//   kvlab model info FILE
//       config, provenance, texts.
//   kvlab model generate FILE --out OUT.h5 [--text gpl3] [--prompt 64] [--steps 64]
//       the CPU reference on the text's first `prompt` tokens (teacher-forced, BF16 cache), then
//       `steps` greedy decode steps: logits and tokens for an independent check of the forward
//       pass (tests/python/test_model_forward.py compares them with a numpy implementation).
//   kvlab model dump-kv FILE --out OUT.h5 [--text gpl3] [--tokens 512] [--layers 0,last]
//       the BF16 run's real K, V (float32 [tokens, kv_heads, head_dim], post-RoPE, before the
//       cache) and queries (BF16 bits [tokens, q_heads, head_dim]) of a few layers: a few MB that
//       the GPU tests validate the decode and append kernels on (tests/gpu/test_real_kv.cu).
// Exit codes: 0 ok; 2 bad input (missing or malformed file, unknown text, bad option).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace kvlab::exp {

int cmd_model(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace kvlab::exp
