"""Results from Python: the console summary after a sweep (and `kvlab summary`, --markdown,
--json), kvlab.load's tidy tables (types, missing values, units, several files), `python -m
kvlab export`, and the figures in paper mode (--no-title, captions, the plotted data as CSV,
--only, no overplotted series, one colour per format and version). Every input is written
here by the real driver."""
import json
import os
import subprocess
import sys

import matplotlib
import numpy as np
import pandas as pd
import pytest

from analysis import figures, style
from analysis.figures.data import figure_data, overplotted
from tests.python.conftest import ROOT

EXPERIMENTS_PY = os.path.join(ROOT, "experiments", "python")
if EXPERIMENTS_PY not in sys.path:
    sys.path.append(EXPERIMENTS_PY)
import kvlab  # noqa: E402
from kvlab import results as kvresults  # noqa: E402

# A CPU sweep with an integer axis (tokens), a string axis (scheme), a float metric, and a
# GPU kind whose points are skipped here (no device, or a build without CUDA).
MIXED_INI = """\
name = mixed
seed = 9
[quant]
kind = quant_error
scheme = mxfp4, nvfp4, bf16
group_size = 0
dist = gaussian
tokens = 64, 96
[decode]
kind = decode_attention
version = v3_flash_decoding
kv_format = bf16, fp8_e4m3
batch = 1
context = 512, 1024
"""


@pytest.fixture(scope="module")
def mixed(kvlab_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("mixed")
    ini = d / "mixed.ini"
    ini.write_text(MIXED_INI)
    out = d / "mixed.h5"
    md, js = d / "summary.md", d / "summary.json"
    r = subprocess.run([kvlab_bin, "sweep", ini, "--out", out, "--progress", "none", "--no-fsync",
                        "--markdown", md, "--json", js], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return dict(dir=d, ini=ini, out=out, md=md, json=js, stdout=r.stdout)


def test_console_summary_counts_skip_reasons(mixed):
    text = mixed["stdout"]
    assert "| kind | points | ok | skipped | failed |" in text
    lines = [ln for ln in text.splitlines() if ln.startswith("| quant_error |")]
    assert lines and "| 6 | 6 | 0 | 0 |" in lines[0] and "rel_l2" in lines[0], text
    # Four decode points skipped for one reason: counted once, not listed four times.
    reason_rows = [ln for ln in text.splitlines() if ln.startswith("| ") and "decode_attention" in ln
                   and ("no device" in ln or "without CUDA" in ln)]
    assert len(reason_rows) == 1 and "| 4 |" in reason_rows[0], text
    assert mixed["md"].read_text().strip() in text
    s = json.loads(mixed["json"].read_text())
    kinds = {k["kind"]: k for k in s["kinds"]}
    assert kinds["quant_error"]["ok"] == 6 and kinds["decode_attention"]["skipped"] == 4
    assert kinds["quant_error"]["headline"]["n"] == 6 and s["skip_reasons"][0]["points"] == 4


def test_summary_subcommand_and_bad_output(run, mixed, tmp_path):
    r = run("summary", mixed["out"], "--json", tmp_path / "s.json")
    assert r.returncode == 0 and "| quant_error |" in r.stdout
    assert json.loads((tmp_path / "s.json").read_text())["points"] == 10
    # An unwritable summary path is bad input, found before any point runs: nothing written.
    out = tmp_path / "never.h5"
    r = run("sweep", mixed["ini"], "--out", out, "--markdown", tmp_path / "no" / "such" / "dir" / "s.md")
    assert r.returncode == 2 and not out.exists() and "summary" in r.stderr
    assert run("summary", tmp_path / "missing.h5").returncode == 2


def test_load_tidy_tables(mixed):
    df = kvlab.load(str(mixed["out"]))["quant_error"]  # the one-liner
    assert len(df) == 6 and df["tokens"].dtype == np.int64 and df["point"].dtype == np.int64
    assert df["reason"].isna().all()  # ok points have no reason: NaN, never ""
    assert "version" not in df.columns  # another kind's axis
    assert df.attrs["axes"][:2] == ["scheme", "group_size"] or "scheme" in df.attrs["axes"]
    assert df.attrs["kind"] == "quant_error" and df.attrs["provenance"]["sweep_name"] == "mixed"
    assert df.attrs["units"].get("seconds") == "s" and df.attrs["docs"]["tokens"].startswith("axis")
    skipped = kvlab.load(str(mixed["out"]), kind="decode_attention")
    assert set(skipped["status"]) == {"skipped"} and skipped["reason"].notna().all()
    assert skipped["batch"].dtype == np.int64 and skipped["context"].tolist() == [512, 1024, 512, 1024]
    r = kvlab.load(str(mixed["out"]))
    assert r.table("decode_attention").empty  # status ok by default
    with pytest.raises(KeyError, match="kinds: decode_attention, quant_error"):
        r["simulate"]


def test_load_several_files_as_one_table(mixed, kvlab_bin, tmp_path):
    outs = []
    for k in (0, 1):
        o = tmp_path / f"s{k}.h5"
        r = subprocess.run([kvlab_bin, "sweep", mixed["ini"], "--only", "quant", "--shard", f"{k}/2", "--out", o,
                            "--progress", "none", "--no-fsync"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        outs.append(str(o))
    df = kvlab.load(outs)["quant_error"]
    assert len(df) == 6 and set(df["file"]) == set(outs) and df["tokens"].dtype == np.int64
    assert sorted(df["point"]) == sorted(kvlab.load(str(mixed["out"]))["quant_error"]["point"])
    with pytest.raises(kvresults.ResultFileError, match="no such file"):
        kvlab.load([outs[0], str(tmp_path / "missing.h5")])


def test_pandas_read_hdf_cannot_and_the_docs_say_what_to_use(mixed):
    with pytest.raises(Exception):
        pd.read_hdf(str(mixed["out"]))
    assert "pandas.read_hdf cannot read these files" in kvresults.__doc__
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert "read_hdf" in readme and "kvlab.load" in readme


def test_export_csv_and_parquet(mixed, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([EXPERIMENTS_PY, ROOT]))
    r = subprocess.run([sys.executable, "-m", "kvlab", "export", str(mixed["out"]), "--csv", str(tmp_path / "c")],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    back = pd.read_csv(tmp_path / "c" / "quant_error.csv")
    assert len(back) == 6 and back["tokens"].dtype == np.int64
    cols = pd.read_csv(tmp_path / "c" / "quant_error.columns.csv")
    assert set(cols[cols["role"] == "axis"]["column"]) >= {"scheme", "tokens"}
    assert cols.set_index("column").loc["seconds", "unit"] == "s"
    r = subprocess.run([sys.executable, "-m", "kvlab", "export", str(mixed["out"]), "--parquet", str(tmp_path / "p"),
                        "--kind", "quant_error"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    pq = pd.read_parquet(tmp_path / "p" / "quant_error.parquet")
    assert len(pq) == 6 and pq["tokens"].dtype == np.int64
    import pyarrow.parquet as papq
    meta = json.loads(papq.read_schema(tmp_path / "p" / "quant_error.parquet").metadata[b"kvlab"])
    assert meta["units"]["seconds"] == "s"
    for bad in (["--csv", str(tmp_path / "x"), "--kind", "nope"], ["--csv"], []):
        r = subprocess.run([sys.executable, "-m", "kvlab", "export", str(mixed["out"]), *bad], capture_output=True,
                           text=True, env=env)
        assert r.returncode == 2, (bad, r.stdout, r.stderr)


# ---- figures in paper mode --------------------------------------------------------------------
def test_paper_mode_writes_captions_and_data(mixed, tmp_path):
    out = tmp_path / "paper"
    assert figures.main([str(mixed["out"]), "--out", str(out), "--no-title", "--format", "png"]) == 0
    made = sorted(p.stem for p in out.glob("*.png"))
    assert "quant_error_vs_format_block" in made
    for name in made:
        cap = (out / f"{name}.caption.txt").read_text()
        assert "Source: mixed.h5" in cap and len(cap) > 80, name
        data = pd.read_csv(out / f"{name}.csv")
        assert len(data) > 0 and {"series", "x", "y", "panel"} <= set(data.columns), name
    # The heatmap's CSV holds every cell with its row / column names.
    hm = pd.read_csv(out / "quant_error_vs_format_block.csv")
    assert set(hm["artist"]) == {"heatmap"} and set(hm["y_category"].dropna()) >= {"mxfp4", "nvfp4"}


def test_no_title_only_and_list(mixed, tmp_path, capsys):
    out = tmp_path / "only"
    assert figures.main([str(mixed["out"]), "--out", str(out), "--only", "format_error,quant_error_vs_bits",
                         "--format", "png"]) == 0
    text = capsys.readouterr().out
    assert "made    quant_error_vs_bits" in text and "quant_error_vs_format_block" not in text
    assert figures.main([str(mixed["out"]), "--out", str(out), "--only", "no_such_figure"]) == 2
    assert figures.main(["--list"]) == 0 and "decode_bandwidth_vs_context" in capsys.readouterr().out
    r = kvlab.load(str(mixed["out"]))
    made, _ = figures.make_figures(r, str(tmp_path / "t"), ("png",), only={"quant_error_vs_bits"}, titles=False)
    assert len(made) == 1 and "storage cost vs p99" in made[0][2]  # the title went to the caption


H100_SWEEP = f"{ROOT}/data/perf/h100_perf_sweep.h5"
H100_PEERS = f"{ROOT}/data/perf/h100_perf_peers.h5"


def test_decode_bandwidth_has_quartile_bars_and_distinct_series():
    """One row per point: the error bar is the timing quartiles' band exactly (low = bytes /
    q3 time, high = bytes / q1 time); on the shipped H100 files no two series hide each other."""
    rows = []
    for version, base in (("v3_flash_decoding", 100.0), ("v5_mma_decode_2stage", 80.0)):
        for ctx in (512, 2048, 8192):
            med = base * ctx / 512
            rows.append(dict(kind="decode_attention", status="ok", version=version, kv_format="bf16", layout="nhd",
                             head_dim=128, block_size=16, num_kv_heads=8, gqa_group=4, batch=1, context=ctx,
                             min_bytes=1e6 * ctx, median_us=med, q1_us=0.97 * med, q3_us=1.05 * med,
                             bytes_per_s=1e6 * ctx / (med * 1e-6)))
    res = kvresults.ResultSet(path="synthetic.h5", attrs={"device_name": "H100", "device_present": 1},
                              index=pd.DataFrame(rows))
    data = figure_data(figures.decode_bandwidth(res))
    bars = data[data["artist"] == "errorbar"].sort_values(["series", "x"])
    want = pd.DataFrame(rows).sort_values(["version", "context"])
    assert np.allclose(bars["y"], want["bytes_per_s"] / 1e12, rtol=1e-12)
    assert np.allclose(bars["y_low"], want["min_bytes"] / (want["q3_us"] * 1e-6) / 1e12, rtol=1e-12)
    assert np.allclose(bars["y_high"], want["min_bytes"] / (want["q1_us"] * 1e-6) / 1e12, rtol=1e-12)
    fig = figures.decode_bandwidth(figures.load_many([H100_SWEEP, H100_PEERS]))
    assert overplotted(fig) == []
    plt_close(fig)


def plt_close(fig):
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_overplotting_is_detected():
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4], color="C0", label="a")
    ax.plot([1, 2], [3, 5], color="C0", label="b")   # same style: indistinguishable
    ax.plot([1, 2], [3, 4], color="C1", label="c")   # same points as a
    ax.plot([5, 6], [3, 5], color="C0", label="d")   # a's style, but beside it: fine
    bad = overplotted(fig)
    assert {(a, b) for _, a, b, _ in bad} == {("a", "b"), ("a", "c")}
    plt.close(fig)


def test_every_standard_figure_keeps_series_apart_and_colours_fixed(mixed, kvlab_bin, tmp_path_factory):
    """On every figure the test inputs make: no two series hide each other, and every series
    named after a KV format or kernel version has that name's colour from analysis/style.py."""
    from tests.python.test_figures_all import CAPACITY_INI, step_results
    from tests.python.test_driver_kinds import KINDS_INI
    d = tmp_path_factory.mktemp("colours")
    ini = d / "all.ini"
    ini.write_text(KINDS_INI + CAPACITY_INI)
    out = d / "all.h5"
    r = subprocess.run([kvlab_bin, "sweep", str(ini), "--out", str(out), "--progress", "none", "--no-fsync"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    inputs = [kvlab.load(str(mixed["out"])), kvlab.load(str(out)), figures.load_many([H100_SWEEP, H100_PEERS]),
              step_results()]
    checked = set()
    for res in inputs:
        for name, fn in figures.FIGURES:
            try:
                fig = fn(res)
            except figures.Skip:
                continue
            checked.add(name)
            assert overplotted(fig) == [], (name, overplotted(fig))
            for ax in fig.axes:
                for ln in ax.lines:
                    lab = str(ln.get_label()).replace(" KV", "")
                    want = style.VERSION_COLORS.get(lab) or (style.FORMAT_COLORS.get(lab) if lab in style.FORMAT_COLORS
                                                             else None)
                    if want:
                        assert matplotlib.colors.to_hex(ln.get_color()) == want, (name, lab)
            plt_close(fig)
    assert len(checked) >= 10, checked


def test_the_readme_example_is_the_script_the_gpu_stage_runs():
    """README's kvlab-and-FlashInfer example is experiments/python/scripts/example_flashinfer.py,
    verbatim (the GPU stage runs that file), and it compiles."""
    script = open(os.path.join(ROOT, "experiments", "python", "scripts", "example_flashinfer.py")).read().rstrip()
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert "```python\n" + script + "\n```" in readme
    compile(script, "example_flashinfer.py", "exec")


def test_step_time_has_quartile_bars_when_the_rows_have_them():
    from analysis import step_figures
    rows = [dict(kind="decode_step", status="ok", preset="small", kv_format="bf16", context=64, batch=b,
                 variant=v, step_us=100.0 * b, step_us_q1=90.0 * b, step_us_q3=120.0 * b, predicted_us=50.0 * b)
            for b in (1, 8, 64) for v in ("eager_unfused", "graph_fused")]
    res = kvresults.ResultSet(path="synthetic.h5", attrs={"device_name": "H100", "device_present": 1},
                              index=pd.DataFrame(rows))
    fig = step_figures.step_time_vs_batch(res)
    bars = figure_data(fig)
    bars = bars[(bars["artist"] == "errorbar") & (bars["series"] == "graph_fused")].sort_values("x")
    assert np.allclose(bars["y"], [0.1, 0.8, 6.4]) and np.allclose(bars["y_low"], [0.09, 0.72, 5.76])
    assert np.allclose(bars["y_high"], [0.12, 0.96, 7.68])
    plt_close(fig)
