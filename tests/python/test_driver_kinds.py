"""`kvlab simulate` and the sim / DSV4 kinds end to end: the result file, its traces, the
figures drawn from them, and bad input (exit code 2, nothing written or lost)."""
import os

import h5py
import numpy as np
import pandas as pd
import pytest

from analysis import figures
from analysis.load import Results, load
from tests.python.conftest import ROOT

SIM_CONFIG = os.path.join(ROOT, "experiments", "configs", "simulate_chat.ini")

KINDS_INI = """\
name = kinds
seed = 5
[waste]
kind = simulate
workload = chat_poisson
num_requests = 150
kv_gib = 1
block_size = 1, 16, 128
[cap]
kind = dsv4_capacity
csa_ratio = 2, 4, 8
variant = all
context = 8192
[caph]
kind = dsv4_capacity
hca_ratio = 64, 128
context = 8192
[comp]
kind = compression_error
ratio = 2, 8
tokens = 512
queries = 2
heads = 2
[roof]
kind = roofline
batch = 1, 8
context = 1024, 4096
"""


@pytest.fixture(scope="module")
def kinds_results(kvlab_bin, tmp_path_factory):
    import subprocess
    d = tmp_path_factory.mktemp("kinds")
    ini = d / "kinds.ini"
    ini.write_text(KINDS_INI)
    out = d / "kinds.h5"
    r = subprocess.run([kvlab_bin, "sweep", ini, "--out", out, "--progress", "none", "--no-fsync"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def test_simulate_subcommand_writes_one_point_with_traces(run, tmp_path):
    out = tmp_path / "sim.h5"
    r = run("simulate", SIM_CONFIG, "--set", "num_requests=200", "--set", "block_size=32", "--out", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "200/200 requests finished" in r.stdout, r.stdout
    res = load(str(out))
    assert len(res.index) == 1 and res.index["status"].iloc[0] == "ok"
    row = res.index.iloc[0]
    assert row["kind"] == "simulate" and row["block_size"] == 32 and row["kv_gib"] == 8
    assert "workload = chat_poisson" in res.attrs["config_text"]
    steps = res.trace(row, "steps")
    reqs = res.trace(row, "requests")
    assert len(reqs) == 200 and (reqs["status"] == 0).all()
    assert 0 < len(steps) <= 2000
    total = steps[["token_slots", "slack_slots", "reserved_slots", "cached_slots", "free_slots"]].sum(axis=1)
    assert (total == row["capacity_slots"]).all()
    # Same config again: nothing to do with --resume, refused without it (the file kept).
    before = open(out, "rb").read()
    r = run("simulate", SIM_CONFIG, "--set", "num_requests=200", "--set", "block_size=32", "--out", out)
    assert r.returncode == 2 and "--resume" in r.stderr
    assert open(out, "rb").read() == before
    r = run("simulate", SIM_CONFIG, "--set", "num_requests=200", "--set", "block_size=32", "--out", out, "--resume")
    assert r.returncode == 0 and "0 points run" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("args,message", [
    (["simulate", "{cfg}", "--set", "block_size=16,32", "--out", "{out}"], "runs one simulation"),
    (["simulate", "{cfg}", "--set", "blok_size=16", "--out", "{out}"], "--set blok_size=16: unknown axis"),
    (["simulate", "{cfg}", "--set", "workload=nowhere", "--out", "{out}"], "neither a file nor a spec"),
    (["simulate", "{cfg}", "--set", "kv_format=fp7", "--out", "{out}"], "unknown value 'fp7'"),
    (["simulate", "{cfg}", "--set", "block_size", "--out", "{out}"], "expected NAME=VALUES"),
    (["simulate", "{missing}", "--out", "{out}"], "cannot read simulation config"),
    (["simulate", "{sectioned}", "--out", "{out}"], "has no [sections]"),
    (["simulate", "{withkind}", "--out", "{out}"], "'kind' is implied"),
    (["simulate", "--set", "num_requests=10"], "missing --out"),
    (["simulate", "{cfg}", "--out", "{file}/x.h5"], "cannot write the result file"),
])
def test_simulate_bad_input_exit_code_2(run, tmp_path, args, message):
    sectioned = tmp_path / "sectioned.ini"
    sectioned.write_text("[a]\nworkload = chat_poisson\n")
    withkind = tmp_path / "withkind.ini"
    withkind.write_text("kind = simulate\n")
    afile = tmp_path / "afile"
    afile.write_text("x")
    out = tmp_path / "o.h5"
    subst = {"cfg": SIM_CONFIG, "out": out, "missing": tmp_path / "missing.ini", "sectioned": sectioned,
             "withkind": withkind, "file": afile}
    r = run(*[a.format(**subst) for a in args])
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert message in r.stderr, (message, r.stderr)
    assert not out.exists()


def test_bad_point_in_a_sweep_stops_before_writing(run, small_results, small_config, tmp_path):
    """A resumed sweep whose new study names a missing workload: exit 2, the file untouched."""
    ini = tmp_path / "more.ini"
    ini.write_text(small_config.read_text() + "[sim]\nkind = simulate\nworkload = chat_poisson, no_such_load\n"
                   "num_requests = 20\n")
    before = open(small_results, "rb").read()
    r = run("sweep", ini, "--out", small_results, "--resume")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "[sim] simulate" in r.stderr and "no_such_load" in r.stderr
    assert open(small_results, "rb").read() == before
    for bad, msg in ((["[c]\nkind = dsv4_capacity\nmodel = nope\n"], "neither a file nor a stack"),
                     (["[c]\nkind = compression_error\nratio = 1\n"], "ratio = '1': out of range"),
                     (["[c]\nkind = roofline\ngpu = Z80\n"], "Z80")):
        cfg = tmp_path / "bad.ini"
        cfg.write_text(bad[0])
        out = tmp_path / "bad.h5"
        r = run("sweep", cfg, "--out", out)
        assert r.returncode == 2 and msg in r.stderr, r.stderr
        assert not out.exists()


def test_kinds_records_and_figures(kinds_results, tmp_path, capsys):
    res = load(str(kinds_results))
    assert set(res.index["status"]) == {"ok"}, res.index[res.index["status"] != "ok"][["key", "reason"]]
    sim = res.ok("simulate").sort_values("block_size")
    assert list(sim["block_size"]) == [1, 16, 128]
    assert sim["slack_fraction"].iloc[0] == 0 and sim["slack_fraction"].is_monotonic_increasing
    cap = res.ok("dsv4_capacity")
    assert (cap["capacity_gain"] > 1).all()
    comp = res.ok("compression_error").sort_values("ratio")
    assert comp["attn_rel_l2_fp32"].iloc[0] < comp["attn_rel_l2_fp32"].iloc[-1]
    out = tmp_path / "fig"
    assert figures.main([str(kinds_results), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    for name in ("waste_vs_block_size", "capacity_vs_compression_ratio", "compression_error_vs_ratio"):
        assert f"made    {name}" in text, text
        assert (out / f"{name}.png").stat().st_size > 1000 and (out / f"{name}.pdf").stat().st_size > 1000
    assert "skipped simulated_vs_measured: no decode_attention points" in text


def _gpu_rows(kinds_results):
    """The roofline rows the driver wrote, plus decode_attention rows as a GPU run writes them
    (the schema of experiments/kinds/decode_attention.cpp): two kernel versions and a peer."""
    res = load(str(kinds_results))
    roof = res.ok("roofline")
    rows = []
    for _, p in roof.iterrows():
        for version, eff in (("v1_paged_attention", 0.7), ("v3_flash_decoding", 0.9), ("peer:flashinfer", 0.85)):
            t = p["model_bytes"] / (3.0e12 * eff)
            rows.append(dict(kind="decode_attention", status="ok", version=version, layout="nhd",
                             batch=p["batch"], context=p["context"], num_kv_heads=p["num_kv_heads"],
                             gqa_group=p["gqa_group"], head_dim=p["head_dim"], block_size=p["block_size"],
                             kv_format=p["kv_format"], median_us=t * 1e6, bytes_per_s=p["model_bytes"] / t))
    index = pd.concat([res.index, pd.DataFrame(rows)], ignore_index=True)
    attrs = dict(res.attrs, read_ceiling_bytes_per_s=3.09e12, device_name="NVIDIA H100 80GB HBM3",
                 device_peak_bytes_per_s=3.35e12)
    return Results(path=str(kinds_results), attrs=attrs, index=index)


def test_simulated_vs_measured_and_bandwidth_with_peers(kinds_results, tmp_path):
    r = _gpu_rows(kinds_results)
    made, skipped = figures.make_figures(r, str(tmp_path), formats=("png",))
    names = [m[0] for m in made]
    assert "simulated_vs_measured" in names and "decode_bandwidth_vs_context" in names, skipped
    # The figure's join: every measured kernel row (peers excluded) meets its prediction.
    fig = figures.simulated_vs_measured(r)
    scat = fig.axes[0].collections
    assert sum(len(c.get_offsets()) for c in scat) == 2 * len(r.ok("roofline"))
    # Peer rows are drawn as dashed lines labelled with their name.
    fig = figures.decode_bandwidth(r)
    peer = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_label() == "peer:flashinfer"]
    assert peer and all(ln.get_linestyle() == "--" for ln in peer)
    # No shared shape: a clear skip, not an empty figure.
    r.index.loc[r.index["kind"] == "decode_attention", "head_dim"] = 96
    with pytest.raises(figures.Skip, match="shares its shape"):
        figures.simulated_vs_measured(r)


def test_gpu_kinds_without_a_device_are_recorded_as_skipped(run, tmp_path):
    """On a machine without a GPU (this CI), the GPU studies of the main job are in the file as
    skipped points saying why: no device (CUDA build) or built without CUDA."""
    import h5py
    info = run("info", "--no-self-check")
    if "device: " in info.stdout and "GPU points are recorded as skipped" not in info.stdout:
        pytest.skip("a GPU is present: the GPU tests (gpu_tests BenchKinds.*) cover the kinds")
    out = tmp_path / "gpu.h5"
    cfg = os.path.join(ROOT, "experiments", "configs", "default.ini")
    r = run("sweep", cfg, "--only", "decode_graph,append", "--out", out, "--progress", "none")
    assert r.returncode == 0, r.stdout + r.stderr
    with h5py.File(out, "r") as f:
        status = set(f["index/status"].asstr()[()])
        reasons = set(f["index/reason"].asstr()[()])
        kinds = set(f["index/kind"].asstr()[()])
    assert status == {"skipped"} and kinds == {"decode_attention", "append"}
    assert reasons <= {"no device", "built without CUDA"} and len(reasons) == 1, reasons
    r = run("sweep", cfg, "--only", "decode_graph", "--dry-run")
    assert "(skipped: no device)" in r.stdout or "built without CUDA" in r.stdout, r.stdout
