"""The driver over the stub library (experiments/stub/): the same driver core as `kvlab`, linked
with the stub instead of the CUDA backend (kvlab_nocuda in CUDA builds; `kvlab` itself in builds
without CUDA). It must say how it was built, record every point of a GPU kind as skipped with
the reason, keep running the CPU kinds, and write provenance without a CUDA version."""
import os
import subprocess

import h5py
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

GPU_KINDS = ("decode_attention", "append", "decode_step", "step_gemm")
INI = """\
name = stub
[cpu]
kind = format_error
tokens = 16
head_dim = 32
[attention]
kind = decode_attention
context = 64
[append]
kind = append
tokens = 32
[step]
kind = decode_step
preset = tiny
[gemm]
kind = step_gemm
preset = tiny
"""


@pytest.fixture(scope="module")
def nocuda():
    path = os.environ.get("KVLAB_NOCUDA_BIN") or os.path.join(ROOT, "build", "experiments", "kvlab_nocuda")
    if not os.path.exists(path):
        pytest.fail(f"the stub-backend driver was not found at {path}: build it, or set KVLAB_NOCUDA_BIN")

    def _run(*args):
        return subprocess.run([path, *map(str, args)], capture_output=True, text=True, timeout=300)
    return _run


def test_info_says_built_without_cuda(nocuda):
    r = nocuda("info")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "built without CUDA" in r.stdout.splitlines()[0], r.stdout
    assert "device: built without CUDA" in r.stdout
    for kind in GPU_KINDS:
        assert f"{kind} [gpu]" in r.stdout


def test_gpu_points_are_skipped_with_the_reason(nocuda, tmp_path):
    cfg = tmp_path / "stub.ini"
    cfg.write_text(INI)
    dry = nocuda("sweep", cfg, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert dry.stdout.count("(skipped: built without CUDA)") == len(GPU_KINDS), dry.stdout
    out = tmp_path / "stub.h5"
    r = nocuda("sweep", cfg, "--out", out, "--progress", "none", "--no-fsync")
    assert r.returncode == 0, r.stdout + r.stderr
    with h5py.File(out, "r") as f:
        assert f.attrs["cuda"] == 0 and f.attrs["cuda_version"] in ("", b"")
        assert f.attrs["device_present"] == 0
        kinds = list(f["index/kind"].asstr()[()])
        status = list(f["index/status"].asstr()[()])
        reason = list(f["index/reason"].asstr()[()])
    by_kind = {k: (s, why) for k, s, why in zip(kinds, status, reason)}
    assert set(by_kind) == set(GPU_KINDS) | {"format_error"}, by_kind
    assert by_kind["format_error"][0] == "ok"
    for kind in GPU_KINDS:
        assert by_kind[kind] == ("skipped", "built without CUDA"), (kind, by_kind[kind])
