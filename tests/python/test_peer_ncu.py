"""experiments/peers/peer_ncu.py (one peer call inside a profiler range, for ncu) refuses bad
input with exit code 2 before it touches torch or a GPU."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEER_NCU = os.path.join(ROOT, "experiments", "peers", "peer_ncu.py")


def run(*args):
    return subprocess.run([sys.executable, PEER_NCU, *args], capture_output=True, text=True, timeout=60)


def test_unknown_peer_is_bad_input():
    r = run("--peer", "flashinfer_tc", "--batch", "1", "--context", "512")
    assert r.returncode == 2
    assert "unknown peer 'flashinfer_tc'" in r.stderr


def test_non_positive_shape_is_bad_input():
    r = run("--batch", "0", "--context", "512")
    assert r.returncode == 2
    assert "--batch must be positive" in r.stderr
    r = run("--batch", "4", "--context", "512", "--head-dim", "-128")
    assert r.returncode == 2
    assert "--head-dim must be positive" in r.stderr


def test_missing_or_malformed_flag_is_bad_input():
    assert run("--context", "512").returncode == 2
    assert run("--batch", "four", "--context", "512").returncode == 2
