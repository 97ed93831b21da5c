"""analysis.serving_figures: the fidelity table and both figures from a small serving result file
that the real `kvlab` writes (executor = roofline: sim's roofline clock stands in for the GPU,
so the pipeline runs without one; the prediction is the uncalibrated roofline with another
launch model, so the two clocks differ)."""
import math

import pytest

from analysis import figures, serving_figures
from analysis.load import load

SERVING_INI = """\
name = serving_small
seed = 5
[serve]
kind = serving
preset = tiny
pool_blocks = 512
max_num_seqs = 16
max_num_batched_tokens = 96
max_context = 512
executor = roofline
calibration = none
workload = chat_poisson, offline_batch
length_scale = 0.05
num_requests = 30
kv_blocks = 512, 24
"""


@pytest.fixture
def serving_results(run, tmp_path):
    ini = tmp_path / "serving.ini"
    ini.write_text(SERVING_INI)
    out = tmp_path / "serving.h5"
    r = run("sweep", ini, "--out", out, "--progress", "plain", "--no-fsync")
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def test_fidelity_table_rows_and_targets(serving_results):
    r = load(str(serving_results))
    t = serving_figures.fidelity_table(r)
    assert len(t) == 4 * 4  # 4 metrics x 4 runs
    assert set(t["held"]) <= {"yes", "no"}
    for _, x in t.iterrows():
        if x["measured"] and math.isfinite(x["measured"]):
            assert x["error"] == pytest.approx((x["predicted"] - x["measured"]) / x["measured"])
            bound = float(x["target"].rstrip("%")) / 100
            assert (x["held"] == "yes") == (abs(x["error"]) <= bound)
    d = serving_figures.decisions_table(r)
    assert (d["replay identical"] == 1).all()
    assert (d["explained"] == 1).all()
    text = serving_figures.report(r, md=True)
    assert "| metric | workload | load | measured | predicted | error | target | held |" in text


def test_the_all_at_once_workload_decides_alike_on_any_clock(serving_results):
    df = load(str(serving_results)).ok("serving")
    off = df[df["workload"] == "offline_batch"]
    assert len(off) == 2
    assert (off["decisions_first_divergence"] == -1).all()
    assert (off["measured_preemptions"] == off["predicted_preemptions"]).all()
    assert off["measured_preemptions"].max() > 0  # the small KV budget preempts


def test_both_figures_build_and_register(serving_results, tmp_path):
    r = load(str(serving_results))
    for name, fn in serving_figures.FIGURES:
        fig = fn(r)
        assert fig.axes, name
    assert {"serving_fidelity", "serving_step_residuals"} <= {n for n, _ in figures.FIGURES}
    assert serving_figures.main([str(serving_results), "--out", str(tmp_path / "figs")]) == 0
    assert (tmp_path / "figs" / "serving_fidelity.png").exists()
    assert (tmp_path / "figs" / "serving_step_residuals.pdf").exists()


def test_no_serving_points_is_a_skip(run, small_results):
    r = load(str(small_results))
    with pytest.raises(serving_figures.Skip):
        serving_figures.fidelity_figure(r)
    assert "no serving points" in serving_figures.report(r)
