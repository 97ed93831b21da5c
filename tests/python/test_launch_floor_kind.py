"""The launch_floor kind through `kvlab sweep` on a machine without a GPU: perf.ini's floor
sections expand to the documented rows (recorded as skipped here, saying why), and bad values
are refused with exit code 2 before anything is written, an existing result file left byte for
byte as it was. The kernels themselves run in gpu_tests LaunchFloor.* and floor_stage.sh."""
import os

import pytest

from analysis.load import load

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PERF = os.path.join(ROOT, "experiments", "configs", "perf.ini")


def test_perf_floor_sections_expand_to_the_floor_rows(run):
    r = run("sweep", PERF, "--only", "K6_floor,K6_floor_primed", "--dry-run")
    assert r.returncode == 0, r.stderr
    pts = [ln for ln in r.stdout.splitlines() if " launch_floor " in ln]
    assert len(pts) == 40, r.stdout
    floor = [ln for ln in pts if ln.split()[1] == "K6_floor"]
    # chain 0-3 x page 0/16 KiB x eager/graph, nothing primed; the controls prime chains 1 and 3.
    assert len(floor) == 16 and all("primed=none" in ln for ln in floor)
    assert any("chain=0 tail_kib=0 primed=none graph=on" in ln for ln in floor)
    ctl = [ln for ln in pts if ln.split()[1] == "K6_floor_primed"]
    assert {ln.split("primed=")[1].split()[0] for ln in ctl} == {"elsewhere", "pages", "lines"} and len(ctl) == 24
    assert all("chain=0" not in ln for ln in ctl)


def test_floor_rows_without_a_device_are_skipped_saying_why(run, tmp_path):
    info = run("info", "--no-self-check")
    if "device: " in info.stdout and "GPU points are recorded as skipped" not in info.stdout:
        pytest.skip("a GPU is present: gpu_tests LaunchFloor.* and floor_stage.sh cover the kind")
    out = tmp_path / "floor.h5"
    r = run("sweep", PERF, "--only", "K6_floor", "--out", out, "--progress", "none", "--no-fsync")
    assert r.returncode == 0, r.stdout + r.stderr
    idx = load(str(out)).index
    assert len(idx) == 16 and set(idx["kind"]) == {"launch_floor"} and set(idx["status"]) == {"skipped"}
    assert set(idx["reason"]) <= {"no device", "built without CUDA"}
    assert sorted(set(idx["chain"])) == [0, 1, 2, 3] and sorted(set(idx["tail_kib"])) == [0, 16]


@pytest.mark.parametrize("body,message", [
    ("chain = 4", "launch_floor axis chain = '4': out of range"),
    ("chain = -1", "out of range"),
    ("tail_kib = 8", "tail_kib must be 0 or 16"),
    ("tail_kib = 32", "out of range"),
    ("primed = both", "unknown value 'both'"),
    ("chain = 0\nprimed = lines", "needs something to prime"),
    ("chain = 0, 3\nprimed = pages", "needs something to prime"),
    ("chain = 0\nprimed = elsewhere", "needs something to prime"),
    ("graph = maybe", "unknown value 'maybe'"),
    ("chain = two", "chain"),
])
def test_bad_values_exit_2_and_nothing_written_is_lost(run, small_results, small_config, tmp_path, body, message):
    fresh = tmp_path / "bad.ini"
    fresh.write_text(f"name = floor\n[f]\nkind = launch_floor\n{body}\n")
    out = tmp_path / "fresh.h5"
    r = run("sweep", fresh, "--out", out)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not out.exists()
    # The same study appended to an existing file: refused, the file untouched.
    more = tmp_path / "more.ini"
    more.write_text(small_config.read_text() + f"[f]\nkind = launch_floor\n{body}\n")
    before = open(small_results, "rb").read()
    r = run("sweep", more, "--out", small_results, "--resume")
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert open(small_results, "rb").read() == before
