// model_file.h: kvlab's model file (HDF5), written by the GGUF importer
// (experiments/model/gguf_import.py, `kvlab model import`), read here with the HDF5 library.
//
// The file's layout is documented in gguf_import.py's header (schema "kvlab-model/1"). Reading
// gives a DecoderConfig, the weights as a DecoderWeights (BF16: every stored value dequantized
// in float32 exactly as gguf-py does, then rounded to BF16, nearest even), the token ids of the
// study texts with their provenance, and the file's own provenance attributes. The Q and K rows
// are already in kvlab's RoPE pairing (NeoX halves): the importer un-permuted them.
//
// Dequantization of the block encodings (32 values per block along a row, fp16 little-endian):
//   q8_0  [d fp16][32 x int8 q]           value = float(q) * float(d)
//   q4_0  [d fp16][16 bytes]              q_j = byte j & 15 (j < 16), byte j-16 >> 4 (j >= 16);
//                                         value = float(d) * float(q - 8)
//   q4_1  [d fp16][m fp16][16 bytes]      value = float(d) * float(q) + float(m)
// (float32 products and sums, never contracted into a fused multiply-add.)
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "reference/step/decoder_config.h"
#include "reference/step/decoder_weights.h"

namespace kvlab::exp {

struct ModelText {
  std::string name;
  std::vector<int32_t> tokens;
  std::string path, sha256, licence, tokenizer;
  int64_t bytes = 0;
};

struct ModelFile {
  std::string path;
  std::string name;  // the model's name (GGUF general.name)
  DecoderConfig config;
  DecoderWeights weights;
  int64_t context_length = 0;
  std::map<std::string, ModelText> texts;
  std::vector<std::pair<std::string, std::string>> provenance;  // root attributes, as text
  std::vector<int32_t> vocab_map;  // original token id per row (a vocabulary-restricted slice)
  std::string slice;               // "" for the whole model
};

// Reads a whole model file. Throws InvalidArgument naming the file and what is wrong (missing,
// not HDF5, another schema, missing or mis-sized tensors, unknown encoding).
ModelFile read_model_file(const std::string& path);

// Cheap check for a sweep's check_point: the file exists, is HDF5 of the model schema, and has
// the text `text` ("" = any) of at least `tokens` tokens (0 = any). Throws InvalidArgument.
void check_model_file(const std::string& path, const std::string& text = "", int64_t tokens = 0);

// The config alone (attributes only: cheap). Throws InvalidArgument like read_model_file.
DecoderConfig read_model_config(const std::string& path);

// One read per process per path (the weights of a 135M model are ~270 MB as BF16): every point
// of a sweep shares it.
std::shared_ptr<const ModelFile> load_model_cached(const std::string& path);

// The text, or InvalidArgument listing the file's texts.
const ModelText& model_text(const ModelFile& m, const std::string& name);

// Dequantization of one row of block-encoded values (exposed for tests): `blocks` holds
// cols/32 blocks of `encoding` ("q8_0", "q4_0", "q4_1"); writes cols BF16 bits.
void dequantize_blocks_bf16(const std::string& encoding, const uint8_t* blocks, int64_t cols,
                            uint16_t* out);

}  // namespace kvlab::exp
