// dsv4_model_stack.h: the layer stack of a DeepSeek-V4-style model, as the KV cache sees it.
//
// A layer is one of three kinds (reference/README.md, "The DSV4 substrate"):
//   SWA  sliding window only: a ring of `window` raw tokens, no compressed pool
//   CSA  compressed sparse attention: entries pooled over `csa_ratio` (4) tokens with
//        overlapping windows, plus FP4 indexer keys for the top-k indexer, plus the ring
//   HCA  heavily compressed attention: entries pooled over `hca_ratio` (128) tokens,
//        single lane, no indexer, plus the ring
// Every layer keeps its SWA ring (as public V4 does: one ring per layer).
//
// Stacks live in data/models/*.ini, a plain INI text the driver names by path:
//
//   # comment (also ';')
//   [model]
//   name = v4-flash-like
//   nope_dim = 448        # FP8-stored dims of an entry (multiple of 64: the 64-tiles)
//   rope_dim = 64         # BF16-stored RoPE dims (even)
//   indexer_dim = 128     # CSA indexer key dims (multiple of 32; 128 for the Hadamard variant)
//   window = 128          # SWA ring length in raw tokens
//   csa_ratio = 4
//   hca_ratio = 128
//   [layers]
//   swa x 2               # each line: one or more kinds, optionally "x N" repeating the group
//   csa hca x 20
//   csa
//
// Every key of [model] is required; unknown keys, sections and kinds are errors naming
// what is allowed, with the file and line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvlab::sim {

enum class Dsv4LayerKind : int32_t { kSWA = 0, kCSA = 1, kHCA = 2 };

std::string to_string(Dsv4LayerKind k);                     // "swa", "csa", "hca"
Dsv4LayerKind parse_dsv4_layer_kind(const std::string& s);  // throws InvalidArgument

struct Dsv4ModelStack {
  std::string name;
  std::string source;  // file path or "<text>" (error messages, provenance)
  int32_t nope_dim = 448;
  int32_t rope_dim = 64;
  int32_t indexer_dim = 128;
  int32_t window = 128;
  int32_t csa_ratio = 4;
  int32_t hca_ratio = 128;
  std::vector<Dsv4LayerKind> layers;

  int32_t head_dim() const { return nope_dim + rope_dim; }
  int32_t num_layers() const { return static_cast<int32_t>(layers.size()); }
  int32_t count(Dsv4LayerKind k) const;
  // Compression ratio of a layer kind (0 for SWA).
  int32_t ratio(Dsv4LayerKind k) const;
};

// Parses the INI text above; `source` names it in errors. Validates (see validate()).
Dsv4ModelStack parse_dsv4_model_stack(const std::string& text,
                                      const std::string& source = "<text>");
// Reads and parses a file; a missing file is an InvalidArgument naming the path.
Dsv4ModelStack load_dsv4_model_stack(const std::string& path);

// Throws InvalidArgument for: no layers; non-positive dims; nope_dim not a multiple of 64;
// odd rope_dim; indexer_dim not a multiple of 32 when the stack has CSA layers; ratios
// < 2; window < 1.
void validate(const Dsv4ModelStack& s);

// The stack as INI text (parse_dsv4_model_stack(to_ini(s)) == s, up to `source`).
std::string to_ini(const Dsv4ModelStack& s);

}  // namespace kvlab::sim
