"""`kvlab calibrate` through the real binary: the fidelity table on the shipped H100 run, the
output file as analysis/ reads it (summary metrics recomputed here from the per-record trace),
the simulated-vs-measured figure drawn from it (PNG + PDF), its use by `kvlab simulate`, and bad
input (exit code 2, nothing written)."""
import h5py
import numpy as np
import pytest

from analysis import figures
from analysis.load import load
from tests.python.conftest import ROOT

H100_RUN = f"{ROOT}/data/perf/h100_perf_sweep.h5"


@pytest.fixture(scope="module")
def calibration(kvlab_bin, tmp_path_factory):
    import subprocess
    out = tmp_path_factory.mktemp("cal") / "h100_cal.h5"
    r = subprocess.run([kvlab_bin, "calibrate", H100_RUN, "--out", str(out)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return out, r.stdout


def _abs_err(pred, meas):
    return np.abs(pred - meas) / meas


def test_h100_table_and_summary(calibration):
    out, stdout = calibration
    assert "fidelity: 160 records" in stdout and "on H100-SXM5-80GB" in stdout, stdout[-2000:]
    assert "calibrated, leave-one-out" in stdout and "fidelity target" in stdout
    res = load(str(out))
    cal = res.ok("calibrate")
    assert len(cal) == 1
    row = cal.iloc[0]
    t = res.trace(row, "fidelity")
    assert len(t) == row["records"] == 160
    assert set(t["kv_format"]) == {"bf16", "fp8_e4m3", "nvfp4"}
    assert (t["lengths"] == "mixed").sum() == 4 and (t["graph"] == "on").sum() == 4
    assert np.isclose(row["fit_read_ceiling_bytes_per_s"], load(H100_RUN).read_ceiling, rtol=1e-12)
    # Every summary metric is what the per-record trace gives.
    m = t["measured_s"]
    for metric, col in (("err_uncalibrated_median", "predicted_uncalibrated_s"), ("err_pooled_median",
                        "predicted_pooled_s"), ("err_median", "predicted_s"), ("err_loo_median", "predicted_loo_s")):
        assert np.isclose(row[metric], np.median(_abs_err(t[col], m)), rtol=1e-12, atol=0), metric
    assert np.isclose(row["err_max"], _abs_err(t["predicted_s"], m).max(), rtol=1e-12)
    np.testing.assert_allclose(t["err"], (t["predicted_s"] - m) / m, rtol=1e-12)
    # The trace's bytes are the kind's min_bytes plus the block table, seq_lens and LSE.
    extra = t["bytes"] - t["min_bytes"]
    assert (extra > 0).all() and (extra < 1e-3 * t["min_bytes"] + 2e6).all()
    fm = res.trace(row, "formats")
    assert list(fm["kv_format"]) == ["bf16", "fp8_e4m3", "nvfp4"] and fm["records"].sum() == 160
    # The measured times are the sweep's own medians (best version per shape).
    src = load(H100_RUN).ok("decode_attention")
    for _, rec in t.head(12).iterrows():
        got = src.loc[int(rec["row"])]
        assert got["version"] == rec["version"] and got["batch"] == rec["batch"]
        same = src[(src["version"] == rec["version"]) & (src["batch"] == rec["batch"]) &
                   (src["context"] == rec["context"]) & (src["kv_format"] == rec["kv_format"]) &
                   (src["layout"] == rec["layout"]) & (src["block_size"] == rec["block_size"]) &
                   (src["gqa_group"] == rec["gqa_group"]) & (src["graph"] == rec["graph"]) &
                   (src["lengths"] == rec["lengths"])]
        assert np.isclose(rec["measured_s"], np.median(same["median_us"]) * 1e-6, rtol=1e-12)


def test_figure_from_the_calibration(calibration, tmp_path, capsys):
    out, _ = calibration
    d = tmp_path / "fig"
    assert figures.main([str(out), "--out", str(d)]) == 0
    text = capsys.readouterr().out
    assert "made    simulated_vs_measured" in text, text
    for ext in ("png", "pdf"):
        assert (d / f"simulated_vs_measured.{ext}").stat().st_size > 10000
    fig = figures.simulated_vs_measured(load(str(out)))
    # Panel 1: each record twice (calibrated and uncalibrated).
    assert sum(len(c.get_offsets()) for c in fig.axes[0].collections if len(c.get_offsets())) >= 2 * 106


def test_simulate_with_the_calibration(run, calibration, tmp_path):
    out, _ = calibration
    ini = f"{ROOT}/experiments/configs/simulate_chat.ini"
    base = run("simulate", ini, "--set", "num_requests=80", "--out", tmp_path / "a.h5")
    cal = run("simulate", ini, "--set", "num_requests=80", "--set", f"calibration={out}", "--out", tmp_path / "b.h5")
    assert base.returncode == 0 and cal.returncode == 0, base.stderr + cal.stderr
    a = load(str(tmp_path / "a.h5")).ok("simulate").iloc[0]
    b = load(str(tmp_path / "b.h5")).ok("simulate").iloc[0]
    assert b["calibration"] == str(out)
    assert b["p50_tpot_s"] > a["p50_tpot_s"]  # calibrated attention: overheads, < 100 % of R
    bad = run("simulate", ini, "--set", f"calibration={H100_RUN}", "--out", tmp_path / "c.h5")
    assert bad.returncode == 2 and "holds no calibrate point" in bad.stderr
    assert not (tmp_path / "c.h5").exists()


def test_bad_input_exit_code_2(run, tmp_path, small_results):
    (tmp_path / "text.h5").write_text("not hdf5")
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f.attrs["schema"] = "something else"
    cases = [
        ((tmp_path / "text.h5",), "is not an HDF5 file"),
        ((tmp_path / "other.h5",), "not a kvlab result file"),
        ((small_results,), "no timed decode_attention points"),
        ((H100_RUN, "--gpu", "TPUv9"), "unknown GPU 'TPUv9'"),
        ((H100_RUN, "--gpu", "B200"), "does not match the device"),
        ((H100_RUN, "--version", "v0_nonexistent"), "version 'v0_nonexistent' has no timed"),
        ((H100_RUN, "--holdout", "kv_format == 'bf16' and"), "unexpected end at column 24"),
    ]
    for args, needle in cases:
        out = tmp_path / "cal.h5"
        r = run("calibrate", *args, "--out", out)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert needle in r.stderr, (needle, r.stderr)
        assert not out.exists()
