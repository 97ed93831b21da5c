"""The Slurm array script against a real Slurm, when one answers on this machine
(Debian's slurm-wlm with slurmctld + slurmd + munged running); skipped otherwise."""
import os
import shutil
import subprocess
import time

import h5py
import pytest

from tests.python.conftest import ROOT


def _slurm_up():
    if not shutil.which("sbatch") or not shutil.which("sinfo"):
        return False
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and any(s in r.stdout for s in ("idle", "mixed", "allocated"))


@pytest.mark.skipif(not _slurm_up(), reason="no running Slurm on this machine")
def test_slurm_array_then_merge(kvlab_bin, small_config, tmp_path):
    out = tmp_path / "slurm"
    env = dict(os.environ, KVLAB=kvlab_bin)
    r = subprocess.run(["bash", os.path.join(ROOT, "experiments/slurm/submit.sh"), "3", str(small_config), str(out)],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    merged = out / "merged.h5"
    deadline = time.time() + 240
    while time.time() < deadline and not merged.exists():
        time.sleep(1)
    assert merged.exists(), "merge job did not finish: " + "".join(p.read_text() for p in out.glob("*.out"))
    with h5py.File(merged, "r") as f:
        assert f["index/key"].shape[0] == 12
        assert f["inputs/path"].shape == (3,)
