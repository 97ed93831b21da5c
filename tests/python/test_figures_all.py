"""Every standard figure (analysis.figures.FIGURES) builds on small inputs, on the Agg backend
(no display), as PNG and PDF, and keeps the house style of analysis/style.py: the legend outside
every panel's data area, a title, labelled axes, no empty panel, text readable at print size,
the device (or "synthetic" / "computed") in the title, and one color per kernel version.

Inputs: a small CPU sweep written here by the real driver (the kinds of test_analysis.py and
test_driver_kinds.py plus the capacity planner), the shipped H100 runs (decode and append
bandwidth, PyTorch peers) with their `kvlab calibrate` output, and decode-step / GEMM rows
built here on an exact roofline (the step kinds need a GPU)."""
import subprocess

import matplotlib
import numpy as np
import pandas as pd
import pytest

from analysis import figures, style
from analysis.load import Results, load, load_many
from tests.python.conftest import ROOT, SMALL_INI
from tests.python.test_driver_kinds import KINDS_INI

H100_SWEEP = f"{ROOT}/data/perf/h100_perf_sweep.h5"
H100_PEERS = f"{ROOT}/data/perf/h100_perf_peers.h5"
H100 = "NVIDIA H100 80GB HBM3"

CAPACITY_INI = """\
[capacity]
kind = capacity
model = llama3.1-8b
gpu = H100
kv_format = bf16, nvfp4
block_size = 1, 16, 256
context = 1000, 32000
"""

# The serving pipeline on sim's roofline clock (no GPU): the serving figures' input.
SERVING_INI = """\
[serving]
kind = serving
preset = tiny
pool_blocks = 256
max_num_seqs = 16
max_num_batched_tokens = 96
max_context = 512
executor = roofline
workload = chat_poisson, offline_batch
length_scale = 0.05
num_requests = 20
kv_blocks = 24
"""

# What each figure's title must say about where its numbers come from.
PROVENANCE = {
    "quant_error_vs_format_block": "synthetic", "quant_error_vs_bits": "synthetic", "format_error": "synthetic",
    "compression_error_vs_ratio": "synthetic", "waste_vs_block_size": "synthetic",
    "capacity_vs_block_size": "computed", "capacity_vs_compression_ratio": "computed", "roofline": "predicted",
    "decode_bandwidth_vs_context": H100, "append_bandwidth": H100, "simulated_vs_measured": H100,
    "decode_step_time_vs_batch": H100, "decode_step_gemm_crossover": H100,
    "model_quality_pareto": "real model", "model_quality_vs_decode": "real model",
    "real_kv_error_per_layer": "real model", "real_k_channels": "real model",
    "serving_fidelity": "not a measurement", "serving_step_residuals": "not a measurement",
}


@pytest.fixture(scope="module")
def cpu_results(kvlab_bin, tmp_path_factory):
    d = tmp_path_factory.mktemp("allfig")
    ini = d / "all.ini"
    kinds = KINDS_INI.split("\n", 2)[2]  # without its name and seed lines
    ini.write_text(SMALL_INI.replace("name = small", "name = allfig") + kinds + CAPACITY_INI + SERVING_INI)
    out = d / "all.h5"
    r = subprocess.run([kvlab_bin, "sweep", str(ini), "--out", str(out), "--progress", "none", "--no-fsync"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    res = load(str(out))
    assert set(res.index["status"]) == {"ok"}, res.index[res.index["status"] != "ok"][["key", "reason"]]
    return res


@pytest.fixture(scope="module")
def calibration(kvlab_bin, tmp_path_factory):
    out = tmp_path_factory.mktemp("allcal") / "cal.h5"
    r = subprocess.run([kvlab_bin, "calibrate", H100_SWEEP, "--out", str(out)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return load(str(out))


def step_results() -> Results:
    """decode_step and step_gemm rows as a GPU run writes them, on an exact roofline (knee at
    t0 / slope), measured on an H100 per the provenance."""
    rows = []
    for preset, ctx, fmt in (("small", 64, "bf16"), ("small", 64, "nvfp4"), ("llama3-8b", 2048, "bf16")):
        for b in (1, 7, 32, 256):
            base = 0.1e3 * (1 + ctx / 2048) * (1 + b / 64)
            for i, v in enumerate(("eager_unfused", "eager_fused", "graph_fused", "graph_unfused")):
                rows.append(dict(kind="decode_step", status="ok", preset=preset, context=ctx, kv_format=fmt,
                                 batch=b, variant=v, step_us=base * (1.3 - 0.1 * i), predicted_us=0.6 * base))
    for linear, n, k in (("qkv", 6144, 4096), ("down", 4096, 14336)):
        t0, s = 20.0 * k / 4096, 0.05 * n / 4096
        for b in (1, 2, 4, 8, 64, 256, 512, 1024, 2048):
            t = max(t0, s * b)
            rows.append(dict(kind="step_gemm", status="ok", preset="llama3-8b", linear=linear, n=n, k=k, batch=b,
                             time_us=t, predicted_us=0.8 * t, predicted_us_measured_rate=0.9 * t,
                             ridge_batch=1.1 * t0 / s, ridge_batch_measured_rate=t0 / s,
                             matmul_tflops_measured=700.0))
    attrs = {"device_name": H100, "device_present": 1, "device_peak_bytes_per_s": 3.35e12}
    return Results(path="synthetic-step.h5", attrs=attrs, index=pd.DataFrame(rows))


@pytest.fixture(scope="module")
def model_results(kvlab_bin, tmp_path_factory):
    from tests.python.model_fixtures import tiny_model_results
    return load(str(tiny_model_results(kvlab_bin, tmp_path_factory.mktemp("allmodel"))))


@pytest.fixture(scope="module")
def inputs(cpu_results, calibration, model_results):
    return [cpu_results, load_many([H100_SWEEP, H100_PEERS]), calibration, step_results(),
            model_results]


def _is_colorbar(ax) -> bool:
    return hasattr(ax, "_colorbar") or ax.get_label() == "<colorbar>"


def _check_style(name, fig):
    fig.canvas.draw()
    assert fig.get_suptitle(), f"{name}: no title"
    assert PROVENANCE[name] in fig.get_suptitle(), f"{name}: title lacks {PROVENANCE[name]!r}: {fig.get_suptitle()}"
    assert fig.get_figwidth() <= style.DOUBLE_COLUMN_IN + 1e-6, f"{name}: wider than a double column"
    panels = [ax for ax in fig.axes if not _is_colorbar(ax)]
    assert panels, name
    for ax in panels:
        # Legends belong to the figure, outside the panels; none sits on a panel's data area.
        assert ax.get_legend() is None, f"{name}: legend inside panel {ax.get_title()!r}"
        drawn = ax.lines + ax.collections + ax.images + ax.patches
        assert drawn, f"{name}: empty panel {ax.get_title()!r}"
    for leg in fig.legends:
        box = leg.get_window_extent()
        for ax in panels:
            assert not box.overlaps(ax.bbox), f"{name}: figure legend over panel {ax.get_title()!r}"
    assert any(ax.get_xlabel() for ax in panels), f"{name}: no x-axis label"
    assert any(ax.get_ylabel() for ax in fig.axes), f"{name}: no y-axis label"
    # Readable at print size: no text below 5.5 pt, axis labels at the house size.
    for t in fig.findobj(matplotlib.text.Text):
        if t.get_text().strip() and t.get_visible():
            assert t.get_fontsize() >= 5.5, f"{name}: {t.get_text()!r} at {t.get_fontsize()} pt"
    for ax in panels:
        if ax.get_xlabel():
            assert ax.xaxis.label.get_fontsize() >= style.RC["axes.labelsize"] - 1e-9, name


def test_the_backend_is_agg():
    assert matplotlib.get_backend().lower() == "agg"


def test_every_standard_figure_builds(inputs, tmp_path):
    made = {}
    for r in inputs:
        for name, fn in figures.FIGURES:
            if name in made:
                continue
            try:
                fig = fn(r)
            except figures.Skip:
                continue
            _check_style(name, fig)
            made[name] = figures.save(fig, str(tmp_path), name)
    missing = [n for n, _ in figures.FIGURES if n not in made]
    assert not missing, f"standard figures never built on the test inputs: {missing}"
    assert set(PROVENANCE) == {n for n, _ in figures.FIGURES}
    for name, paths in made.items():
        assert [p.rsplit(".", 1)[1] for p in paths] == ["png", "pdf"], name
        for p in paths:
            with open(p, "rb") as f:
                head = f.read(8)
            assert head.startswith(b"\x89PNG" if p.endswith(".png") else b"%PDF"), p


def test_one_color_per_version_and_format_across_figures(inputs):
    """A kernel version has the same color in the bandwidth figure and the style table; a KV
    format the same in the capacity figure and the fidelity figure."""
    gpu = inputs[1]
    fig = figures.decode_bandwidth(gpu)
    by_label = {}
    for ax in fig.axes:
        for ln in ax.get_lines():
            lab = ln.get_label()
            if lab.startswith("v") or lab.startswith(figures.PEER_PREFIX):
                by_label.setdefault(lab, set()).add(matplotlib.colors.to_hex(ln.get_color()))
    assert by_label and any(lab.startswith(figures.PEER_PREFIX) for lab in by_label), by_label
    for lab, colors in by_label.items():
        assert colors == {matplotlib.colors.to_hex(style.version_color(lab))}, (lab, colors)
    assert len({c for cs in by_label.values() for c in cs}) == len(by_label), "two versions share a color"
    cap = figures.capacity_vs_block(inputs[0])
    fid = figures.simulated_vs_measured(inputs[2])
    for f in (cap, fid):
        handles = {t.get_text(): h for leg in f.legends for h, t in zip(leg.legend_handles, leg.get_texts())}
        for fmt in ("bf16", "nvfp4"):
            h = handles.get(fmt) or handles.get(f"{fmt} KV")
            assert h is not None, (fmt, list(handles))
            assert matplotlib.colors.to_hex(h.get_color()) == style.format_color(fmt)


def test_every_registered_version_has_its_own_fixed_color():
    """Every decode version in the registry (the `v.info = {id, "name"` lines of gpu/attention,
    and the bulk-copy family's `kName = "vN_..."` policy names) has an entry of its own in the
    color table, no two versions or peers share a color, and a name outside the table never
    takes a table color."""
    import glob
    import re
    names, bulk = set(), set()
    for path in glob.glob(f"{ROOT}/gpu/attention/*.cu"):
        with open(path) as f:
            text = f.read()
        names.update(re.findall(r'v\.info\s*=\s*\{\s*\d+,\s*"([a-z0-9_]+)"', text))
        bulk.update(re.findall(r'kName\s*=\s*"(v\d+_[a-z0-9_]+)"', text))
    assert len(names) >= 6, names
    assert {"v10_mma_decode_tma_swizzle", "v13_mma_decode_eight_warps"} <= bulk, bulk
    names |= bulk
    missing = sorted(n for n in names if n not in style.VERSION_COLORS)
    assert not missing, f"versions without a fixed color in analysis/style.py: {missing}"
    fixed = [matplotlib.colors.to_hex(c) for k, c in style.VERSION_COLORS.items() if k != "peer:sdpa_efficient+repeat"]
    assert len(set(fixed)) == len(fixed), "two table entries share a color"
    for n in ("v6_future_kernel", "v7_other", "my_version"):
        assert style.version_color(n) not in set(fixed), n


def test_constant_settings_go_to_the_title_not_the_legend(inputs):
    """The waste figure labels its lines by the settings that vary only; the fixed ones
    (model, KV format, preemption, ...) are in the title."""
    fig = figures.waste_vs_block_size(inputs[0])
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert labels and not any("recompute" in s or "watermark" in s or "bf16" in s for s in labels), labels
    assert "recompute" in fig.get_suptitle() and "bf16" in fig.get_suptitle()


def test_log2_tick_labels_do_not_collide():
    # 256 and 512 on a 1..512 axis print on top of each other at panel width: one is dropped.
    shown = style._spread([1, 4, 16, 64, 256, 512], 8)
    assert shown[0] == 1 and shown[-1] == 512 and 256 not in shown
    assert style._spread([1, 8, 16, 32, 64, 128, 256], 8) == [1, 8, 16, 32, 64, 128, 256]
    assert np.all(np.diff(np.log2(style._spread(list(2.0 ** np.arange(20)), 8))) >= 19 / 9)


def test_append_figure_keeps_layouts_apart():
    """Append rows of two layouts (as default.ini's [append] study writes them on a GPU): one
    panel per layout, each line the layout's own values, never a median across layouts."""
    rows = []
    for layout, bw in (("nhd", 2.6e12), ("split_x", 0.6e12)):
        for fmt in ("bf16", "fp8_e4m3", "nvfp4"):
            for t in (8192, 262144):
                rows.append(dict(kind="append", status="ok", layout=layout, kv_format=fmt, tokens=t,
                                 in_dtype="bf16", block_size=16, num_kv_heads=8, head_dim=128,
                                 bytes_per_s=bw * (1.0 if t > 8192 else 0.8)))
    attrs = {"device_name": H100, "device_present": 1, "copy_ceiling_bytes_per_s": 2.97e12}
    fig = figures.append_bandwidth(Results(path="synthetic-append.h5", attrs=attrs, index=pd.DataFrame(rows)))
    _check_style("append_bandwidth", fig)
    panels = {ax.get_title(): ax for ax in fig.axes}
    assert set(panels) == {"nhd layout", "split_x layout"}, list(panels)
    for title, want in (("nhd layout", 2.6), ("split_x layout", 0.6)):
        ys = {round(float(y), 6) for ln in panels[title].get_lines() if ln.get_label() == "bf16" for y in ln.get_ydata()}
        assert ys == {round(want * 0.8, 6), round(want, 6)}, (title, ys)
