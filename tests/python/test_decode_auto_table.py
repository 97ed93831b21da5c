"""gpu/attention/decode_auto_table.inc, the table `version = auto` picks from, is what its own
header's command makes of the files it names: the command is rerun on the repository's files
and every row must come back the same. A result file replaced under the same name (a later fair
run adopted as data/perf/h100_perf_sweep.h5) would change the table's source silently; this
catches it. Also: the tool refuses a missing file with exit code 2."""
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABLE = os.path.join(ROOT, "gpu", "attention", "decode_auto_table.inc")


def rows(path):
    with open(path) as f:
        return [line.rstrip("\n") for line in f if line.startswith("{")]


def header_command():
    with open(TABLE) as f:
        for line in f:
            if line.startswith("// Command: "):
                return shlex.split(line[len("// Command: "):])
    raise AssertionError("decode_auto_table.inc has no '// Command:' line")


def test_the_table_is_what_its_command_makes_of_its_files(tmp_path):
    argv = header_command()
    assert argv[:2] == ["python3", "gpu/attention/decode_auto_table.py"], argv
    i = argv.index("--out")
    argv[i + 1] = str(tmp_path / "table.inc")
    files, args = [], iter(argv[2:i])
    for a in args:  # the options that take a value skip it
        if a in ("--side-by-side", "--margin", "--sources"):
            next(args)
        elif not a.startswith("--"):
            files.append(a)
    missing = [f for f in files if not os.path.exists(os.path.join(ROOT, f))]
    assert not missing, f"the table's command names files the repository lacks: {missing}"
    r = subprocess.run([sys.executable] + argv[1:], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    want, got = rows(TABLE), rows(tmp_path / "table.inc")
    assert len(want) > 100
    diff = [(a, b) for a, b in zip(want, got) if a != b]
    assert len(want) == len(got) and not diff, (
        f"{len(want)} rows in the table, {len(got)} from its command; first differences: {diff[:3]}")


def test_a_missing_file_exits_2(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "gpu", "attention", "decode_auto_table.py"),
                        str(tmp_path / "none.h5"), "--out", str(tmp_path / "t.inc")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "no such file" in r.stderr


def _sweep(path, rows):
    """A minimal kvlab result index of decode_attention rows (version, num_splits, median_us) at
    one shape (16 x 2048 BF16 NHD, d128, GQA 4, page 16)."""
    import h5py
    import numpy as np
    n = len(rows)
    s = h5py.string_dtype()
    with h5py.File(path, "w") as f:
        f.attrs["device_name"] = "GPU A"
        ix = f.create_group("index")
        for k, v in (("kind", "decode_attention"), ("status", "ok"), ("kv_format", "bf16"),
                     ("layout", "nhd"), ("graph", "off"), ("lengths", "uniform"),
                     ("page_order", "shuffled")):
            ix.create_dataset(k, data=np.array([v] * n, dtype=object), dtype=s)
        ix.create_dataset("version", data=np.array([r[0] for r in rows], dtype=object), dtype=s)
        for k, v in (("head_dim", 128.0), ("gqa_group", 4.0), ("block_size", 16.0), ("batch", 16.0),
                     ("context", 2048.0)):
            ix.create_dataset(k, data=np.array([v] * n))
        ix.create_dataset("num_splits", data=np.array([float(r[1]) for r in rows]))
        ix.create_dataset("median_us", data=np.array([float(r[2]) for r in rows]))
        # An auto row's pick: (version "auto", num_splits, median_us, picked id, picked splits).
        ix.create_dataset("picked_version", data=np.array([float(r[3]) if len(r) > 3 else np.nan
                                                           for r in rows]))
        ix.create_dataset("picked_splits", data=np.array([float(r[4]) if len(r) > 4 else np.nan
                                                          for r in rows]))


def _table(tmp_path, files, mode, *extra):
    out = tmp_path / f"t{mode}{len(extra)}.inc"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "gpu", "attention", "decode_auto_table.py")] +
                       [str(f) for f in files] + [mode, *extra, "--out", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (row,) = rows(out)
    return row


def test_latest_of_all_judges_each_candidate_by_its_newest_file(tmp_path):
    # An old build of A was slow (60); B once ran at 50 (lucky) and at 53 in its newer file; A's
    # newest file has 51.6 and 51.7. --best-of-all takes B's lucky row; --latest-of-all takes A.
    old, lucky, new = tmp_path / "old.h5", tmp_path / "lucky.h5", tmp_path / "new.h5"
    _sweep(old, [("vA_x", 1, 60.0)])
    _sweep(lucky, [("vB_y", 0, 50.0)])
    _sweep(new, [("vA_x", 1, 51.6), ("vA_x", 1, 51.7), ("vB_y", 0, 53.0)])
    assert '"vB_y", 0, 50.000' in _table(tmp_path, [old, lucky, new], "--best-of-all")
    assert '"vA_x", 1, 51.650' in _table(tmp_path, [old, lucky, new], "--latest-of-all")
    # Listed the other way round, B's newest file is the lucky one: the order is the time line.
    assert '"vB_y", 0, 50.000' in _table(tmp_path, [new, lucky, old], "--latest-of-all")


def test_both_aggregations_at_once_exit_2(tmp_path):
    f = tmp_path / "a.h5"
    _sweep(f, [("vA_x", 1, 60.0)])
    r = subprocess.run([sys.executable, os.path.join(ROOT, "gpu", "attention", "decode_auto_table.py"),
                        str(f), "--best-of-all", "--latest-of-all", "--out", str(tmp_path / "t.inc")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "exclude" in r.stderr


def test_side_by_side_run_decides_its_shapes_with_autos_pick_as_the_incumbent(tmp_path):
    # An old file holds v10 at one split at a lucky 49.0. The calibration run (two files) times
    # auto, which ran its pick v10 @ 1, at 51.0 / 51.2 and v14 at its plan at 50.5 / 50.7, side by
    # side. --latest-of-all alone compares v14's new rows against v10's old lucky row (v10 wins
    # across runs); with --side-by-side 2 the run decides: v14 (50.6 against 51.1); with a 2 %
    # margin the incumbent keeps the shape (v14 is 1 % faster).
    old, c1, c2 = tmp_path / "old.h5", tmp_path / "cal_1.h5", tmp_path / "cal_2.h5"
    _sweep(old, [("v10_a", 1, 49.0), ("v10_a", 0, 53.0)])
    _sweep(c1, [("auto", 0, 51.0, 10, 1), ("v14_b", 0, 50.5)])
    _sweep(c2, [("auto", 0, 51.2, 10, 1), ("v14_b", 0, 50.7)])
    files = [old, c1, c2]
    assert '"v10_a", 1, 49.000' in _table(tmp_path, files, "--latest-of-all")
    assert '"v14_b", 0, 50.600' in _table(tmp_path, files, "--latest-of-all", "--side-by-side", "2")
    assert '"v10_a", 1, 51.100' in _table(tmp_path, files, "--latest-of-all", "--side-by-side", "2",
                                          "--margin", "0.02")
    # A challenger slower than the incumbent never wins, margin or not.
    _sweep(c2, [("auto", 0, 50.0, 10, 1), ("v14_b", 0, 52.0)])
    _sweep(c1, [("auto", 0, 50.2, 10, 1), ("v14_b", 0, 52.2)])
    assert '"v10_a", 1, 50.100' in _table(tmp_path, files, "--latest-of-all", "--side-by-side", "2")


def test_no_overlap_moves_a_pick_only_past_the_rows_spread(tmp_path):
    # Four calibration runs: v14's median (50.55) is 1 % below the incumbent's (51.05), but one
    # of its runs (51.3) is slower than the incumbent's fastest (50.9): the ranges overlap, so
    # with --no-overlap the incumbent keeps the shape; without it v14 takes it.
    cal = [tmp_path / f"cal_{i}.h5" for i in range(4)]
    for f, (inc, v14) in zip(cal, ((51.0, 50.4), (51.1, 50.5), (50.9, 51.3), (51.2, 50.6))):
        _sweep(f, [("auto", 0, inc, 10, 1), ("v10_a", 1, inc + 0.05), ("v14_b", 0, v14)])
    base = ["--latest-of-all", "--side-by-side", "4"]
    assert '"v14_b", 0, 50.550' in _table(tmp_path, cal, *base)
    assert '"v10_a", 1, 51.075' in _table(tmp_path, cal, *base, "--no-overlap")
    # Its slow run at 50.8 instead: every v14 row (50.4-50.8) lies below every incumbent row
    # (50.9-51.25), and v14 takes the shape, unless a margin asks for more than the gap.
    _sweep(cal[2], [("auto", 0, 50.9, 10, 1), ("v10_a", 1, 50.95), ("v14_b", 0, 50.8)])
    assert '"v14_b", 0, 50.550' in _table(tmp_path, cal, *base, "--no-overlap")
    assert '"v10_a", 1, 51.075' in _table(tmp_path, cal, *base, "--no-overlap", "--margin", "0.005")


def test_side_by_side_bad_input_exits_2(tmp_path):
    tool = os.path.join(ROOT, "gpu", "attention", "decode_auto_table.py")
    f, g = tmp_path / "a.h5", tmp_path / "b.h5"
    _sweep(f, [("v10_a", 1, 60.0)])
    _sweep(g, [("auto", 0, 50.0, 7, 1)])  # auto picked v7, which no file names
    for argv, msg in (([f, "--side-by-side", "1"], "needs --latest-of-all"),
                      ([f, "--latest-of-all", "--side-by-side", "2"], "needs --latest-of-all"),
                      ([f, "--latest-of-all", "--margin", "0.01"], "--margin F needs"),
                      ([f, "--latest-of-all", "--no-overlap"], "--no-overlap needs"),
                      ([f, g, "--latest-of-all", "--side-by-side", "1"], "no listed file names")):
        r = subprocess.run([sys.executable, tool] + [str(x) for x in argv] +
                           ["--out", str(tmp_path / "t.inc")], capture_output=True, text=True)
        assert r.returncode == 2 and msg in r.stderr, (argv, r.stderr)
