"""gpu/attention/build_ab_table.py: builds of kvlab side by side on one sweep config. The
table takes each build's best run, compares it with the first build's, shows a point that
failed in a run as nan, and refuses bad input with exit code 2."""
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "gpu", "attention", "build_ab_table.py")


def write_run(path, medians, status=None):
    """A minimal kvlab result index: 16 x 8192 BF16 NHD / HND shuffled, one decode row each,
    plus a bandwidth row the table must ignore."""
    status = status or ["ok"] * len(medians)
    n = len(medians) + 1
    with h5py.File(path, "w") as f:
        ix = f.create_group("index")
        s = h5py.string_dtype()
        ix.create_dataset("kind", data=np.array(["decode_attention"] * len(medians) + ["bandwidth"], dtype=object), dtype=s)
        ix.create_dataset("status", data=np.array(list(status) + ["ok"], dtype=object), dtype=s)
        ix.create_dataset("batch", data=np.array([16.0] * n))
        ix.create_dataset("context", data=np.array([8192.0] * n))
        ix.create_dataset("kv_format", data=np.array(["bf16"] * n, dtype=object), dtype=s)
        layouts = ["nhd", "hnd", "hnd", "nhd"][: len(medians)] + [""]
        ix.create_dataset("layout", data=np.array(layouts, dtype=object), dtype=s)
        ix.create_dataset("page_order", data=np.array(["shuffled"] * n, dtype=object), dtype=s)
        ix.create_dataset("median_us", data=np.array(list(medians) + [1.0]))


def run(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=60)


def test_best_run_of_each_build_against_the_first(tmp_path):
    write_run(tmp_path / "base_1.h5", [200.0, 100.0])
    write_run(tmp_path / "base_2.h5", [190.0, 101.0])
    write_run(tmp_path / "new_1.h5", [180.5, 103.0])
    write_run(tmp_path / "new_2.h5", [171.0, 102.0])
    r = run(str(tmp_path), "base,new")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3  # header + the two decode points; the bandwidth row is not a point
    nhd = next(l for l in lines if "nhd" in l)
    hnd = next(l for l in lines if "hnd" in l)
    assert nhd.strip().endswith("-10.00%")  # 171 / 190 - 1
    assert hnd.strip().endswith("+2.00%")   # 102 / 100 - 1
    assert "190.00" in nhd and "200.00" in nhd  # every run is shown


def test_a_failed_point_is_nan_and_not_the_best(tmp_path):
    write_run(tmp_path / "base_1.h5", [200.0, 100.0])
    write_run(tmp_path / "new_1.h5", [1.0, 90.0], status=["failed", "ok"])
    write_run(tmp_path / "new_2.h5", [210.0, 95.0])
    r = run(str(tmp_path), "base,new")
    assert r.returncode == 0, r.stderr
    nhd = next(l for l in r.stdout.splitlines() if "nhd" in l)
    assert "nan" in nhd
    assert nhd.strip().endswith("+5.00%")  # 210 / 200: the failed 1.0 is not taken


@pytest.mark.parametrize("builds", ["base,missing", "base"])
def test_bad_input_exits_2(tmp_path, builds):
    write_run(tmp_path / "base_1.h5", [200.0])
    r = run(str(tmp_path), builds)
    assert r.returncode == 2
    assert "error" in r.stderr


def test_a_file_that_is_not_a_result_file_exits_2(tmp_path):
    write_run(tmp_path / "base_1.h5", [200.0])
    (tmp_path / "new_1.h5").write_bytes(b"not hdf5")
    r = run(str(tmp_path), "base,new")
    assert r.returncode == 2
    assert "new_1.h5" in r.stderr
