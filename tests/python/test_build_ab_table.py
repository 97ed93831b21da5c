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


def write_run(path, medians, status=None, versions=None):
    """A minimal kvlab result index: 16 x 8192 BF16 NHD / HND shuffled, one decode row each,
    plus a bandwidth row the table must ignore; `versions` adds the index's version column."""
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
        if versions:
            ix.create_dataset("version", data=np.array(list(versions) + [""], dtype=object), dtype=s)


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


def test_two_versions_at_one_shape_are_two_points(tmp_path):
    # The same shape and layout timed by two versions in one config: two rows, each compared
    # with its own version's baseline, not one row overwritten by the other.
    vs = ["v5_mma_decode_2stage", "v10_mma_decode_tma_swizzle"]
    write_run(tmp_path / "base_1.h5", [200.0, 150.0], versions=vs)
    write_run(tmp_path / "new_1.h5", [200.0, 120.0], versions=vs)
    with h5py.File(tmp_path / "base_1.h5", "r+") as f:  # both rows NHD
        del f["index/layout"]
        f["index"].create_dataset("layout", data=np.array(["nhd", "nhd", ""], dtype=object),
                                  dtype=h5py.string_dtype())
    with h5py.File(tmp_path / "new_1.h5", "r+") as f:
        del f["index/layout"]
        f["index"].create_dataset("layout", data=np.array(["nhd", "nhd", ""], dtype=object),
                                  dtype=h5py.string_dtype())
    r = run(str(tmp_path), "base,new")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3, r.stdout
    v5 = next(l for l in lines if "v5_mma_decode_2stage" in l)
    v10 = next(l for l in lines if "v10_mma_decode_tma_swizzle" in l)
    assert v5.strip().endswith("+0.00%")
    assert v10.strip().endswith("-20.00%")  # 120 / 150 - 1


def test_versions_of_one_sweep_against_the_first_version(tmp_path):
    # Each shape run with two versions: NHD and HND rows of v10, then HND and NHD rows of v12.
    names = ["v10_mma_decode_tma_swizzle", "v10_mma_decode_tma_swizzle",
             "v12_mma_decode_last_block_merge", "v12_mma_decode_last_block_merge"]
    write_run(tmp_path / "final_1.h5", [200.0, 100.0, 99.0, 210.0], versions=names)
    write_run(tmp_path / "final_2.h5", [190.0, 101.0, 98.0, 209.0], versions=names)
    r = run(str(tmp_path), "final", "--versions", "v10,v12")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3  # header + one row per shape (the versions are columns)
    nhd = next(l for l in lines if "nhd" in l)
    hnd = next(l for l in lines if "hnd" in l)
    assert nhd.strip().endswith("+10.00%")  # 209 / 190 - 1
    assert hnd.strip().endswith("-2.00%")   # 98 / 100 - 1
    assert "210.00" in nhd and "200.00" in nhd


def test_forced_splits_of_one_shape_are_separate_points(tmp_path):
    # One shape at forced splits 1 and 2 (and the plan) for two versions: a row per split,
    # never one split's time standing in for another's.
    names = ["v10_mma_decode_tma_swizzle"] * 3 + ["v13_mma_decode_eight_warps"] * 3
    write_run(tmp_path / "s_1.h5", [104.0, 99.0, 100.0, 100.5, 107.0, 106.0], versions=names)
    with h5py.File(tmp_path / "s_1.h5", "r+") as f:
        for k in ("layout",):
            del f["index/" + k]
            f["index"].create_dataset(k, data=np.array(["nhd"] * 6 + [""], dtype=object),
                                      dtype=h5py.string_dtype())
        f["index"].create_dataset("num_splits", data=np.array([1.0, 2.0, 0.0] * 2 + [np.nan]))
    r = run(str(tmp_path), "s", "--versions", "v10,v13")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 4, r.stdout  # header + splits 1, 2 and the plan
    s1 = next(l for l in lines if "@1 splits" in l)
    s2 = next(l for l in lines if "@2 splits" in l)
    plan = next(l for l in lines[1:] if "splits" not in l)
    assert "104.00" in s1 and "100.50" in s1 and s1.strip().endswith("-3.37%")  # 100.5 / 104 - 1
    assert "99.00" in s2 and s2.strip().endswith("+8.08%")                       # 107 / 99 - 1
    assert plan.strip().endswith("+6.00%")                                      # 106 / 100 - 1


def test_block_sizes_of_one_shape_are_separate_points(tmp_path):
    # One shape at block sizes 16 and 128 (and GQA 8 once): a row each, the geometry in the
    # label where it differs from the usual page 16 / GQA 4, never one block size's time
    # standing in for another's.
    names = ["v10_mma_decode_tma_swizzle"] * 3 + ["v13_mma_decode_eight_warps"] * 3
    write_run(tmp_path / "p_1.h5", [100.0, 99.0, 98.0, 97.0, 99.0, 101.0], versions=names)
    with h5py.File(tmp_path / "p_1.h5", "r+") as f:
        del f["index/layout"]
        f["index"].create_dataset("layout", data=np.array(["nhd"] * 6 + [""], dtype=object),
                                  dtype=h5py.string_dtype())
        f["index"].create_dataset("block_size", data=np.array([16.0, 128.0, 16.0] * 2 + [np.nan]))
        f["index"].create_dataset("gqa_group", data=np.array([4.0, 4.0, 8.0] * 2 + [np.nan]))
    r = run(str(tmp_path), "p", "--versions", "v10,v13")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 4, r.stdout
    plain = next(l for l in lines[1:] if "block" not in l and "gqa" not in l)
    b128 = next(l for l in lines if "block 128" in l)
    g8 = next(l for l in lines if "gqa 8" in l)
    assert plain.strip().endswith("-3.00%")  # 97 / 100 - 1
    assert b128.strip().endswith("+0.00%")   # 99 / 99 - 1
    assert g8.strip().endswith("+3.06%")     # 101 / 98 - 1


@pytest.mark.parametrize("versions", ["v10", "v10,v99"])
def test_bad_versions_exit_2(tmp_path, versions):
    write_run(tmp_path / "final_1.h5", [200.0, 100.0],
              versions=["v10_mma_decode_tma_swizzle", "v10_mma_decode_tma_swizzle"])
    r = run(str(tmp_path), "final", "--versions", versions)
    assert r.returncode == 2
    assert "error" in r.stderr
