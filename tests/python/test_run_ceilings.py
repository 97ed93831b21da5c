"""The run's read ceiling R from a result file (experiments/peers/run_ceilings.py, the twin of
experiments/bench/bench.h raise_run_ceiling): R is the best valid cold DRAM read of the run. A
synthetic run whose big-working-set bulk read beat the ceilings pass (recorded, as sweeps before
the rule did, as "timing invalid") gets R raised to that row's fast edge, and target_table.py then
reports every % of R, floor and excess on it, with no "TIMING INVALID" for that row; a small
working-set read or a decode row that beats R never raises it and is still shouted. Also the
fair run of 9a8b6c8 (data/perf/h100_perf_sweep_9a8b6c8.h5): R 3.158 -> 3.174 TB/s. And perf.ini measures the
layouts the tables choose between: FP8 and BF16 on HND pages on every K1 grid point."""
import math
import os
import subprocess
import sys

import pytest

from analysis.load import load

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS_DIR = os.path.join(ROOT, "experiments", "peers")
sys.path.insert(0, PEERS_DIR)
import peer_results  # noqa: E402
import peer_timer  # noqa: E402
import run_ceilings  # noqa: E402

TABLE = os.path.join(PEERS_DIR, "target_table.py")
PASS_R, PASS_C = 3.158e12, 3.03e12
L2 = 50 << 20
AXES = ["op", "load", "depth", "blocks_per_sm", "chunk_kib", "order", "granule", "mib", "layout", "kv_format",
        "head_dim", "block_size", "num_kv_heads", "gqa_group", "batch", "context", "lengths", "seed", "graph", "version"]
NUMERIC = {"depth", "blocks_per_sm", "chunk_kib", "granule", "mib", "head_dim", "block_size", "num_kv_heads",
           "gqa_group", "batch", "context", "seed"}
METRICS = ["median_us", "q1_us", "q3_us", "rel_iqr", "min_us", "reps", "converged", "cold_l2", "l2_bytes",
           "working_set_bytes", "bytes_per_s", "ceiling_bytes_per_s", "pct_read_ceiling", "pct_copy_ceiling",
           "floor_us", "excess_us", "exceeds_ceiling", "timing_valid", "min_bytes"]
LABELS = ["flush", "timing", "kernel"]


def timed(row, nbytes, bps, op="read", cold=True):
    us = nbytes / bps * 1e6
    t = peer_timer.summarize([us * (1 + 0.001 * (i - 5)) for i in range(11)], 0.02)
    t.update(cold_l2=cold, graph=False, calls_per_sample=1, flush="read_allocate" if cold else "none",
             flush_bytes=(200 << 20) if cold else 0, l2_bytes=L2, samples_us=[us] * 11)
    ceiling, other = (PASS_R, PASS_C) if op == "read" else (PASS_C, PASS_R)
    return peer_timer.record_timing(row, t, nbytes, ceiling, op, 3.35e12, other)


def bw_row(study, mib, bps, op="read", order="interleaved", granule=0, cold=True, load="bulk"):
    nbytes = (2.0 if op == "copy" else 1.0) * mib * (1 << 20)
    row = dict(study=study, kind="bandwidth", op=op, load=load, depth=8, blocks_per_sm=1, chunk_kib=16,
               order=order, granule=granule, mib=mib, kernel=f"{op}_{load}_{order}_{mib}mib")
    return timed(row, nbytes, bps, op, cold)


def decode_row(batch, context, bps, version="v10_mma_decode_tma_swizzle"):
    mb = 2.0 * batch * context * 8 * 128 * 2 + 2.0 * batch * 8 * 4 * 128 * 2
    row = dict(study="K2", kind="decode_attention", version=version, batch=batch, context=context, kv_format="bf16",
               layout="nhd", graph="off", block_size=16, gqa_group=4, num_kv_heads=8, head_dim=128,
               lengths="uniform", seed=0, min_bytes=mb)
    return timed(row, mb, bps)


def write(path, rows):
    peer_results.write_result_file(str(path), rows, {"device_name": "NVIDIA H100 80GB HBM3",
                                                     "read_ceiling_bytes_per_s": PASS_R,
                                                     "copy_ceiling_bytes_per_s": PASS_C,
                                                     "device_peak_bytes_per_s": 3.35e12},
                                   AXES, NUMERIC, METRICS, LABELS, run={"started_utc": "x", "argv": "test"})
    return str(path)


def table(*paths):
    r = subprocess.run([sys.executable, TABLE, *paths], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_big_bulk_row_beating_the_pass_raises_r_and_is_no_failure(tmp_path):
    big = bw_row("ceilings_bulk", 4096, 3.172e12)
    assert big["status"] == "failed" and big["reason"].startswith("timing invalid")  # as the sweep recorded it
    rows = [big, bw_row("ceilings_read", 4096, 3.10e12, load="nc"),
            decode_row(64, 8192, 3.03e12), decode_row(64, 32768, 3.07e12)]
    path = write(tmp_path / "sweep.h5", rows)
    rc = run_ceilings.run_ceilings(load(path))
    fast = big["working_set_bytes"] / (big["q1_us"] * 1e-6)
    assert rc.read == pytest.approx(fast, rel=1e-12) and rc.read > 3.172e12
    assert rc.pass_read == PASS_R and rc.copy == PASS_C and rc.read_row["study"] == "ceilings_bulk"
    out = table(path)
    assert "TIMING INVALID" not in out, out
    assert f"read ceiling R {fast / 1e12:.4g} TB/s (raised from the ceilings pass's 3.158" in out
    # K2 at the run's R, not the pass's: 3.03 / R.
    k2 = [ln for ln in out.splitlines() if ln.startswith("K2") and "64 x 8k" in ln][0]
    assert f"{100 * 3.03e12 / fast:.1f} %" in k2, k2
    assert f"{100 * 3.03e12 / PASS_R:.1f} %" not in k2
    # Floors and excess on the run's R too (the comparison table's excess column).
    res = load(path)
    df = run_ceilings.rescale(res.index, rc.read, rc.copy)
    d = df[df["kind"] == "decode_attention"].iloc[0]
    assert d["floor_us"] == pytest.approx(d["working_set_bytes"] / rc.read * 1e6, rel=1e-12)
    assert d["excess_us"] == pytest.approx(d["median_us"] - d["floor_us"], rel=1e-12)
    assert d["pct_read_ceiling"] == pytest.approx(100 * d["bytes_per_s"] / rc.read, rel=1e-12)
    assert d["ceiling_bytes_per_s"] == rc.read and d["exceeds_ceiling"] == 0


def test_small_read_or_decode_row_beating_r_is_still_flagged(tmp_path):
    small = bw_row("ceilings_small", 16, 3.40e12)  # 16 MiB: L2 could serve it
    scatter = bw_row("ceilings_scatter", 4096, 3.25e12, order="scatter", granule=4096)  # never part of R
    warm = bw_row("warm", 4096, 3.30e12, cold=False)
    fast_decode = decode_row(64, 8192, 3.30e12)  # a decode row, however big
    rows = [bw_row("ceilings_read", 4096, 3.10e12, load="nc"), small, scatter, warm, fast_decode]
    path = write(tmp_path / "sweep.h5", rows)
    rc = run_ceilings.run_ceilings(load(path))
    assert rc.read == PASS_R and rc.read_row is None, rc.describe()
    out = table(path)
    assert "!!! CEILING EXCEEDED / TIMING INVALID: 3 rows recorded as timing invalid" in out, out
    for study in ("ceilings_small/", "ceilings_scatter/", "K2/decode_attention"):
        assert any(ln.startswith("!!!   " + study) for ln in out.splitlines()), (study, out)
    assert "raised from" not in out
    # 7.9 x L2 is not a ceiling row; 8 x L2 is.
    edge = bw_row("edge", 8 * L2 / (1 << 20) - 1, 3.25e12)
    path2 = write(tmp_path / "edge.h5", [edge])
    assert run_ceilings.run_ceilings(load(path2)).read == PASS_R
    edge8 = bw_row("edge", 8 * L2 / (1 << 20), 3.25e12)
    path3 = write(tmp_path / "edge8.h5", [edge8])
    assert run_ceilings.run_ceilings(load(path3)).read > PASS_R


def test_copy_rows_raise_c_not_r(tmp_path):
    path = write(tmp_path / "sweep.h5", [bw_row("ceilings_memcpy", 4096, 3.05e12, op="copy", load="memcpy")])
    rc = run_ceilings.run_ceilings(load(path))
    assert rc.read == PASS_R and rc.copy > 3.05e12 and rc.copy_row["op"] == "copy"


def test_a_file_whose_sweep_already_raised_r_names_the_row(tmp_path):
    big = bw_row("ceilings_bulk", 4096, 3.172e12)
    fast = big["working_set_bytes"] / (big["q1_us"] * 1e-6)
    rows = [big]
    path = str(tmp_path / "sweep.h5")
    peer_results.write_result_file(path, rows, {"device_name": "x", "read_ceiling_bytes_per_s": fast,
                                                "copy_ceiling_bytes_per_s": PASS_C,
                                                "ceilings_pass_read_bytes_per_s": PASS_R,
                                                "ceilings_pass_copy_bytes_per_s": PASS_C},
                                   AXES, NUMERIC, METRICS, LABELS, run={"started_utc": "x", "argv": "test"})
    rc = run_ceilings.run_ceilings(load(path))
    assert rc.read == fast and rc.pass_read == PASS_R and rc.read_row is not None


SHIPPED = os.path.join(ROOT, "data", "perf", "h100_perf_sweep.h5")
# Session 17's fair run (call 3), the shipped one before session 18's: run 3 of the adopted runs.
SHIPPED_SESSION17 = os.path.join(ROOT, "data", "perf", "h100_perf_runs", "run_3", "perf_sweep.h5")
# The fair run of main 12e9891, the one before (version auto's table reads it too).
SHIPPED_12E9891 = os.path.join(ROOT, "data", "perf", "h100_perf_sweep_12e9891.h5")
# The fair run of session 16 (sources a3cd968), the first timed with the stream held.
SHIPPED_A3CD968 = os.path.join(ROOT, "data", "perf", "h100_perf_sweep_a3cd968.h5")
# The fair run of main 91ab35b.
SHIPPED_91AB35B = os.path.join(ROOT, "data", "perf", "h100_perf_sweep_91ab35b.h5")
# The fair run of main 4323a0e.
SHIPPED_4323A0E = os.path.join(ROOT, "data", "perf", "h100_perf_sweep_4323a0e.h5")
# The fair run of main e91b383.
SHIPPED_E91B383 = os.path.join(ROOT, "data", "perf", "h100_perf_sweep_e91b383.h5")
# The fair run of main bb7cb48.
SHIPPED_BB7CB48 = os.path.join(ROOT, "data", "perf", "h100_perf_sweep_bb7cb48.h5")
# The fair run of main 2d52096, the first whose sweep applied the rule itself.
SHIPPED_2D52096 = os.path.join(ROOT, "data", "perf", "h100_perf_sweep_2d52096.h5")
# The fair run of main 9a8b6c8, written before the sweep raised R itself.
SHIPPED_9A8B6C8 = os.path.join(ROOT, "data", "perf", "h100_perf_sweep_9a8b6c8.h5")


# (file, pass R, run R, the study of the row that raised R, pass C, run C, the study of the row
# that raised C or None): a cold 4 GiB bulk read (one block per SM; 32 KiB chunks at depth 4 in
# e91b383's and bb7cb48's runs, 16 KiB at depth 8 in 4323a0e's, 16 KiB at depth 4 over address
# ranges in 91ab35b's, 16 KiB at depth 4 with two blocks per SM in 12e9891's, 32 KiB at depth 4
# in 05c3b71's (not kept) after 16 KiB at depth 8 had raised it first, and in 698fe67's (not kept);
# 16 KiB at depth 4 over address ranges in 9910ab5's (not kept), 32 KiB at depth 4 in 8c9989a's (not kept),
# 16 KiB at depth 4 over address ranges in session 16's (a3cd968's), the first timed with the stream held;
# 32 KiB at depth 4 in session 17's; in session 18's, the first with perf.ini's read_bound sections, its
# 2 GiB read by the same kernel) raised the ceilings pass's R last, and the cold 4 GiB memcpy raised C
# (not in 91ab35b's run nor in sessions 16's to 18's, where C is the pass's); the file's R and C are those rows' (the sweep
# applied the rule when it wrote them).
RAISED_RUNS = [
    (SHIPPED, 3.1761e12, 3.1786e12, "read_bound_bulk", 3.0286e12, 3.0286e12, None),  # session 18
    (SHIPPED_SESSION17, 3.1694e12, 3.1796e12, "ceilings_bulk_32k", 3.0310e12, 3.0310e12, None),  # session 17, held
    (SHIPPED_A3CD968, 3.1572e12, 3.1585e12, "ceilings_bulk_ranges_4", 3.0220e12, 3.0220e12, None),  # session 16
    (SHIPPED_12E9891, 3.1567e12, 3.1575e12, "ceilings_bulk_2_per_sm", 3.0316e12, 3.0358e12, "ceilings_memcpy"),
    (SHIPPED_91AB35B, 3.1567e12, 3.1572e12, "ceilings_bulk_ranges_4", 3.0247e12, 3.0247e12, None),
    (SHIPPED_4323A0E, 3.1610e12, 3.1753e12, "ceilings_bulk", 3.0310e12, 3.0365e12, "ceilings_memcpy"),
    (SHIPPED_E91B383, 3.1682e12, 3.1753e12, "ceilings_bulk_32k", 3.0294e12, 3.0353e12, "ceilings_memcpy"),
    (SHIPPED_BB7CB48, 3.1586e12, 3.1680e12, "ceilings_bulk_32k", 3.0288e12, 3.0359e12, "ceilings_memcpy"),
]


@pytest.mark.parametrize("path,pass_r,r,read_study,pass_c,c,copy_study", RAISED_RUNS,
                         ids=[os.path.basename(x[0]) for x in RAISED_RUNS])
def test_shipped_fair_run_names_the_rows_that_raised_r_and_c(path, pass_r, r, read_study, pass_c, c,
                                                             copy_study):
    if not os.path.isfile(path):
        pytest.skip(f"no {os.path.basename(path)}")
    res = load(path)
    rc = run_ceilings.run_ceilings(res)
    assert rc.pass_read == pytest.approx(pass_r, rel=1e-4) and rc.read == pytest.approx(r, rel=1e-4)
    assert rc.read_row["study"] == read_study and rc.read_row["status"] == "ok"
    assert rc.pass_copy == pytest.approx(pass_c, rel=1e-4) and rc.copy == pytest.approx(c, rel=1e-4)
    if copy_study is None:
        assert rc.copy_row is None
    else:
        assert rc.copy_row["study"] == copy_study and rc.copy_row["status"] == "ok"
    assert float(res.attrs["read_ceiling_bytes_per_s"]) == pytest.approx(rc.read, rel=1e-9)
    assert float(res.attrs["copy_ceiling_bytes_per_s"]) == pytest.approx(rc.copy, rel=1e-9)


# (file, R = the pass's R, pass C, run C): the fair run of main 2d52096 (the first whose sweep
# applied the rule itself).
KEPT_R_RUNS = [
    (SHIPPED_2D52096, 3.1645e12, 3.0316e12, 3.0359e12),
]


@pytest.mark.parametrize("path,r,pass_c,c", KEPT_R_RUNS, ids=[os.path.basename(x[0]) for x in KEPT_R_RUNS])
def test_shipped_fair_run_keeps_the_pass_r_and_names_the_row_that_raised_c(path, r, pass_c, c):
    """No contiguous read beat the ceilings pass's R; the cold 4 GiB memcpy raised C, and the
    file's C is that row's."""
    if not os.path.isfile(path):
        pytest.skip(f"no {os.path.basename(path)}")
    res = load(path)
    rc = run_ceilings.run_ceilings(res)
    assert rc.read == rc.pass_read == pytest.approx(r, rel=1e-4) and rc.read_row is None
    assert rc.pass_copy == pytest.approx(pass_c, rel=1e-4) and rc.copy == pytest.approx(c, rel=1e-4)
    assert rc.copy_row["study"] == "ceilings_memcpy" and rc.copy_row["status"] == "ok"
    assert float(res.attrs["copy_ceiling_bytes_per_s"]) == pytest.approx(rc.copy, rel=1e-9)


@pytest.mark.skipif(not os.path.isfile(SHIPPED_9A8B6C8), reason="no fair run of 9a8b6c8")
def test_shipped_fair_run_r_is_its_best_cold_read():
    res = load(SHIPPED_9A8B6C8)
    rc = run_ceilings.run_ceilings(res)
    assert rc.pass_read == pytest.approx(3.1577e12, rel=1e-4)
    # The ceilings_bulk row c16k d8 b1 (median 3.172, slower quartile 3.168 TB/s) at its fast edge.
    assert rc.read == pytest.approx(3.1737e12, rel=1e-4)
    assert rc.read_row["study"] == "ceilings_bulk" and rc.read_row["status"] == "failed"
    assert not math.isnan(rc.copy) and rc.copy >= rc.pass_copy


def test_perf_ini_measures_every_grid_point_in_both_layouts(run):
    """K4, K5 and K1 take the best layout per shape: perf.ini must run FP8 E4M3 and NVFP4 on HND
    pages (v10 and auto) and BF16 HND (auto) on every K1 grid point, each HND point once."""
    perf = os.path.join(ROOT, "experiments", "configs", "perf.ini")
    r = run("sweep", perf, "--dry-run")
    assert r.returncode == 0, r.stderr
    pts = []
    for ln in r.stdout.splitlines():
        if " decode_attention " not in ln:
            continue
        ax = dict(kv.split("=", 1) for kv in ln.split() if "=" in kv)
        pts.append((ln.split()[1], ax))
    grid = {(ax["batch"], ax["context"]) for st, ax in pts if st == "K1_grid"}
    assert len(grid) == 22
    for fmt, version in (("fp8_e4m3", "v10_mma_decode_tma_swizzle"), ("fp8_e4m3", "auto"), ("bf16", "auto"),
                         ("nvfp4", "v10_mma_decode_tma_swizzle"), ("nvfp4", "auto")):
        for layout in ("nhd", "hnd"):
            have = [(ax["batch"], ax["context"]) for st, ax in pts
                    if ax["kv_format"] == fmt and ax["version"] == version and ax["layout"] == layout and
                    ax["lengths"] == "uniform" and ax["graph"] == "off" and ax["block_size"] == "16" and
                    ax["gqa_group"] == "4" and (ax["batch"], ax["context"]) in grid]
            assert set(have) == grid, (fmt, version, layout, sorted(grid - set(have)))
            if layout == "hnd":  # K1_grid_hnd leaves out what K2_large, K3_long and K4_mid run
                assert len(have) == len(set(have)), (fmt, version, layout, "a grid point twice")
