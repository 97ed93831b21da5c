"""analysis/ on a result file the real driver writes inside the test."""
import shutil
import subprocess
import sys

import h5py

from analysis import compare, figures, report
from tests.python.conftest import ROOT


def test_figures_made_and_skipped(small_results, tmp_path, capsys):
    out = tmp_path / "fig"
    assert figures.main([str(small_results), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    for name in ("quant_error_vs_format_block", "quant_error_vs_bits", "format_error"):
        assert f"made    {name}" in text
        assert (out / f"{name}.png").stat().st_size > 1000 and (out / f"{name}.pdf").stat().st_size > 1000
    assert "skipped decode_bandwidth_vs_context: no decode_attention points" in text


def test_figures_cli_module_and_bad_input(small_results, tmp_path):
    r = subprocess.run([sys.executable, "-m", "analysis.figures", str(small_results), "--out", str(tmp_path / "f")],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "made" in r.stdout, r.stderr
    notkv = tmp_path / "x.h5"
    with h5py.File(notkv, "w") as f:
        f["a"] = 1
    assert figures.main([str(notkv), "--out", str(tmp_path / "g")]) == 2
    assert figures.main([str(tmp_path / "missing.h5"), "--out", str(tmp_path / "g")]) == 2


def test_report_has_every_figure_and_table(small_results, tmp_path):
    out = tmp_path / "report.html"
    assert report.main([str(small_results), "--out", str(out)]) == 0
    page = out.read_text()
    assert page.count("<img src='data:image/png;base64,") == 3
    assert "quant_error_vs_bits" in page and "<h3>format_error</h3>" in page and "git_commit" in page


def test_compare_flags_regressions_only_beyond_noise(small_results, tmp_path, capsys):
    same = compare.compare(str(small_results), str(small_results))
    assert same.empty
    worse = tmp_path / "worse.h5"
    shutil.copy(small_results, worse)
    with h5py.File(worse, "a") as f:
        v = f["index/rel_l2_mean"][()]
        v[0] *= 1.5     # a real regression
        v[1] *= 1.001   # within the 1 % tolerance
        f["index/rel_l2_mean"][...] = v
        st = f["index/status"].asstr()[()]
        st[2] = "failed"
        f["index/status"][...] = st.astype(object)
    df = compare.compare(str(small_results), str(worse))
    reg = df[df["verdict"].str.startswith("regression")]
    assert len(reg) == 2
    assert compare.main([str(small_results), str(worse)]) == 1
    assert compare.main([str(small_results), str(small_results)]) == 0
    assert compare.main([str(small_results), str(tmp_path / "nope.h5")]) == 2
