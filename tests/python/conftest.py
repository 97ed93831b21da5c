"""Shared fixtures: the real `kvlab` binary (KVLAB_BIN, set by CTest) and small sweeps."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(scope="session")
def kvlab_bin():
    path = os.environ.get("KVLAB_BIN") or os.path.join(ROOT, "build", "experiments", "kvlab")
    if not os.path.exists(path):
        pytest.fail(f"kvlab binary not found at {path}: build it, or set KVLAB_BIN")
    return path


@pytest.fixture
def run(kvlab_bin):
    """run(args..., check=None) -> CompletedProcess (text)."""
    def _run(*args, timeout=300, env=None):
        return subprocess.run([kvlab_bin, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)
    return _run


SMALL_INI = """\
name = small
seed = 3
[quant]
kind = quant_error
scheme = mxfp4, nvfp4, fp8_e4m3_per_token, bf16
group_size = 0
dist = gaussian, heavy_tailed
tokens = 128
[fmt]
kind = format_error
format = e4m3, e2m1
dist = gaussian, outlier_channels
tokens = 64
"""


@pytest.fixture
def small_config(tmp_path):
    p = tmp_path / "small.ini"
    p.write_text(SMALL_INI)
    return p


@pytest.fixture
def small_results(run, small_config, tmp_path):
    out = tmp_path / "small.h5"
    r = run("sweep", small_config, "--out", out, "--progress", "plain", "--no-fsync")
    assert r.returncode == 0, r.stdout + r.stderr
    return out
