"""Small real-model inputs for the tests: a random Llama GGUF imported by `kvlab model import`,
and a result file of the real-model kinds over it (used by test_model_kinds.py and by
test_figures_all.py for the real-model figures)."""
import subprocess

from tests.python.test_model_forward import tiny_gguf

RESULT_INI = """\
name = tinymodel
[r]
kind = real_kv_error
model = MODEL
text = a
tokens = 96
tensor = k_pre_rope, k_post_rope, v
scheme = fp8_e4m3_per_token, nvfp4
hadamard = 0, 64
[q]
kind = model_quality
model = MODEL
text = a, b
context = 96
k_format = bf16, fp8_e4m3_per_tensor, nvfp4
v_format = bf16, fp8_e4m3_per_tensor, nvfp4
where = k_format == v_format
"""


def tiny_model(kvlab_bin, folder):
    """A 2-layer random Llama (hidden 128, 2/1 heads of 64) with two ASCII study texts a, b."""
    (folder / "a.txt").write_text("he wow! " * 60)
    (folder / "b.txt").write_text("wow he, he! " * 40)
    src = tiny_gguf(folder / "tiny.gguf", hidden=128, layers=2)
    out = folder / "tiny.h5"
    r = subprocess.run([kvlab_bin, "model", "import", str(src), "--out", str(out), "--text",
                        f"a={folder / 'a.txt'}", "--text", f"b={folder / 'b.txt'}"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def tiny_model_results(kvlab_bin, folder):
    """A result file of real_kv_error and model_quality rows over tiny_model()."""
    model = tiny_model(kvlab_bin, folder)
    ini = folder / "tinymodel.ini"
    ini.write_text(RESULT_INI.replace("MODEL", str(model)))
    out = folder / "tinymodel.h5"
    r = subprocess.run([kvlab_bin, "sweep", str(ini), "--out", str(out), "--progress", "none"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return out
