"""The standard kvlab figures, from result files only.

    python3 -m analysis.figures RESULTS.h5 [MORE.h5 ...] --out DIR [--format png,pdf]

Each figure is made only when its data is in the file(s); the list of what was made and what
was skipped (and why) is printed. Figures are written as PNG (300 dpi) and PDF (TrueType
text), drawn at the width they are printed at (analysis/style.py: single column 3.4 in,
double column 7 in). Several files of one device are read as one (e.g. a GPU sweep and the
peers measured beside it: `data/perf/h100_perf_sweep.h5 data/perf/h100_perf_peers.h5`).

Conventions of every figure: units on every axis; log axes where values span decades; one
color per kernel version / KV format / step variant in every figure (style.py); legends below
the panels, naming only what varies within the figure, the constants in the title; the title
says what was measured or computed, on which device (the file's provenance) and, where the
input is synthetic, that it is.
"""
from __future__ import annotations

import argparse
import itertools
import math
import os
import sys

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from analysis import step_figures, style  # noqa: E402
from analysis.load import ResultFileError, Results, load_many  # noqa: E402
from analysis.style import paper  # noqa: E402


class Skip(Exception):
    """A figure whose data is not in the file."""


def _need(df: pd.DataFrame, kind: str, cols: list[str]) -> pd.DataFrame:
    if df.empty:
        raise Skip(f"no {kind} points with status ok")
    missing = [c for c in cols if c not in df.columns or df[c].isna().all()]
    if missing:
        raise Skip(f"{kind} points lack {', '.join(missing)}")
    return df


def _synthetic(df: pd.DataFrame, col: str = "dist") -> str:
    """'synthetic data (a, b)' from the generator presets the rows name."""
    names = sorted({str(v) for v in df[col].dropna()}) if col in df.columns else []
    return f"synthetic data ({', '.join(names)})" if names else "synthetic data"


def _join(*parts) -> str:
    return "; ".join(p for p in parts if p)


# The order formats are listed in (widest first); others follow alphabetically.
FORMAT_ORDER = ["fp32", "fp16", "bf16", "fp8_e5m2", "fp8_e4m3", "fp8_e4m3_pt", "mxfp8", "nvfp4", "mxfp4", "fp4_e2m1"]


def _format_sorted(names) -> list:
    rank = {f: i for i, f in enumerate(FORMAT_ORDER)}
    return sorted({str(n) for n in names}, key=lambda f: (rank.get(f, len(rank)), f))


# ---- quantization -------------------------------------------------------------------------
def _quant_problem(df: pd.DataFrame) -> str:
    """The tensor the schemes quantized ('4096 tokens x 128 dims'), exceptions per scheme."""
    if not {"tokens", "head_dim"} <= set(df.columns):
        return ""
    shape = df.assign(_s=[f"{style.value(t)} tokens x {style.value(h)} dims" for t, h in
                          zip(df["tokens"], df["head_dim"])])
    common = shape["_s"].mode().iloc[0]
    other = shape[shape["_s"] != common].groupby("_s")["scheme"].agg(lambda s: ", ".join(sorted(set(s))))
    return common + "".join(f" ({schemes}: {s})" for s, schemes in other.items())


@paper
def quant_error_heatmap(r: Results):
    """Error vs format x block size: rel. L2 (mean per token) of every scheme and scale group,
    one panel per synthetic distribution, one color scale for all panels."""
    df = _need(r.ok("quant_error"), "quant_error", ["scheme", "rel_l2_mean", "scale_group"])
    dists = sorted(df["dist"].unique())
    if "granularity" in df.columns:
        lab = [style.value(g) if gr == "group" else gr for g, gr in zip(df["scale_group"], df["granularity"])]
    else:
        lab = [style.value(g) if g == g else "?" for g in df["scale_group"]]
    df = df.assign(group=lab)
    pv_all = df.pivot_table(index="scheme", columns="group", values="rel_l2_mean", aggfunc="median")
    rank = {"token": 1, "tensor": 2, "none": 3}
    order = sorted(pv_all.columns, key=lambda g: (rank.get(g, 0), float(g) if g.replace(".", "").isdigit() else 0))
    schemes = list(pv_all.index)
    vals = df["rel_l2_mean"][df["rel_l2_mean"] > 0]
    norm = LogNorm(vmin=float(vals.min()), vmax=float(vals.max()))
    cols = 2 if len(dists) > 1 else 1
    fig, axes = style.grid(len(dists), cols=cols, width=style.DOUBLE_COLUMN_IN if cols > 1 else style.SINGLE_COLUMN_IN,
                           panel_h=0.19 * len(schemes) + 0.7)
    cmap = plt.get_cmap("viridis_r")
    im = None
    for i, (ax, dist) in enumerate(zip(axes, dists)):
        pv = df[df["dist"] == dist].pivot_table(index="scheme", columns="group", values="rel_l2_mean",
                                                aggfunc="median").reindex(index=schemes, columns=order)
        v = pv.values.astype(float)
        im = ax.imshow(np.where(v > 0, v, np.nan), aspect="auto", cmap=cmap, norm=norm)
        ax.set_xticks(range(len(order)), order)
        ax.set_yticks(range(len(schemes)), schemes if i % cols == 0 else [""] * len(schemes))
        ax.grid(False)
        for (y, x), val in np.ndenumerate(v):
            if np.isfinite(val) and val > 0:
                dark = norm(val) > 0.55  # viridis_r: dark at the large errors
                ax.text(x, y, f"{val:.2g}", ha="center", va="center", fontsize=5.5, color="w" if dark else "k")
        ax.set_xlabel("elements per scale (or scale granularity)")
        ax.set_title(dist)
    cb = fig.colorbar(im, ax=axes, label="per-token rel. L2 error (mean)", shrink=0.8)
    style.plain_log(cb.ax.yaxis)
    style.title(fig, "KV quantization error by scheme and scale-group size",
                _join("CPU reference", _synthetic(df), _quant_problem(df)))
    return fig


@paper
def quant_error_vs_bits(r: Results):
    """Storage cost vs error: bits per value (scales included) against the p99 per-token rel. L2
    of every scheme (block-scaled schemes joined across their group sizes), one row per synthetic
    distribution. The bits axis is broken into its clusters (4, 8, 16 bits): within a cluster the
    spread is the cost of the scales, which one linear axis would squeeze to a point."""
    df = _need(r.ok("quant_error"), "quant_error", ["bits_per_value", "rel_l2_p99", "scheme"])
    df = df[df["bits_per_value"] > 0]
    df = df.assign(_cls=np.floor(np.log2(df["bits_per_value"]) + 1e-9).astype(int))
    classes = sorted(df["_cls"].unique())
    spans = [max(0.5, float(df[df["_cls"] == c]["bits_per_value"].max() - df[df["_cls"] == c]["bits_per_value"].min()))
             for c in classes]
    dists = sorted(df["dist"].unique()) if "dist" in df.columns else [None]
    fig, grid = plt.subplots(len(dists), len(classes), figsize=(style.DOUBLE_COLUMN_IN, 1.15 * len(dists) + 1.3),
                             squeeze=False, sharey=True, layout="constrained", gridspec_kw={"width_ratios": spans})
    schemes = _format_sorted(df["scheme"].unique())
    ylo, yhi = float(df["rel_l2_p99"][df["rel_l2_p99"] > 0].min()), float(df["rel_l2_p99"].max())
    for ri, dist in enumerate(dists):
        d = df if dist is None else df[df["dist"] == dist]
        for ci, cls in enumerate(classes):
            ax = grid[ri][ci]
            dc = d[d["_cls"] == cls]
            for scheme in schemes:
                ds = dc[dc["scheme"] == scheme].groupby("bits_per_value", as_index=False)["rel_l2_p99"].median()
                if ds.empty:
                    continue
                ax.plot(ds["bits_per_value"], ds["rel_l2_p99"], marker=style.format_marker(scheme), lw=0.8, ms=3.5,
                        color=style.format_color(scheme), label=scheme)
            allc = df[df["_cls"] == cls]["bits_per_value"]
            lo, hi = float(allc.min()), float(allc.max())
            pad = max(0.08, 0.08 * (hi - lo))
            ax.set_xlim(lo - pad, hi + pad)
            if hi - lo < 0.3:
                ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator(sorted(allc.unique())))
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _p: f"{x:g}"))
            ax.set_yscale("log")
            ax.set_ylim(ylo / 1.6, yhi * 1.6)
            style.plain_log(ax.yaxis)
            ax.tick_params(labelbottom=ri == len(dists) - 1)
            if ri == 0:
                ax.set_title(f"{2 ** cls}-bit class")
            if ci == 0:
                ax.set_ylabel(f"{dist}\np99 rel. L2" if dist is not None else "p99 per-token rel. L2 error")
            else:
                ax.spines["left"].set_linestyle((0, (2, 2)))  # the broken axis
    grid[-1][int(np.argmax(spans))].set_xlabel("storage bits per value, scales included (axis broken between "
                                               "the classes)")
    style.legend_below(fig, ncol=5)
    style.title(fig, "KV quantization: storage cost vs p99 per-token error",
                _join("CPU reference", _synthetic(df), _quant_problem(df)))
    return fig


@paper
def format_error_bars(r: Results):
    """Element formats alone: rel. L2 per synthetic distribution, with one tensor-wide amax scale
    and (where the file has them) unscaled."""
    df = _need(r.ok("format_error"), "format_error", ["format", "rel_l2_mean"])
    scalings = sorted(df["scaling"].dropna().unique()) if "scaling" in df.columns else [None]
    names = {"amax": "one tensor-wide scale (amax)", "none": "no scale"}
    counts = [(df if sc is None else df[df["scaling"] == sc])["format"].nunique() + 1 for sc in scalings]
    fig, axes = style.grid(len(scalings), cols=len(scalings),
                           width=style.DOUBLE_COLUMN_IN if len(scalings) > 1 else style.SINGLE_COLUMN_IN,
                           panel_h=2.2, sharey=True, width_ratios=counts)
    dists = sorted(df["dist"].unique())
    formats = _format_sorted(df["format"].unique())
    for i, (ax, sc) in enumerate(zip(axes, scalings)):
        d = df if sc is None else df[df["scaling"] == sc]
        pv = d.pivot_table(index="format", columns="dist", values="rel_l2_mean", aggfunc="median")
        pv = pv.reindex(index=[f for f in formats if f in pv.index], columns=dists)
        w = 0.8 / len(dists)
        x = np.arange(len(pv.index))
        for j, dist in enumerate(dists):
            ax.bar(x + (j - (len(dists) - 1) / 2) * w, pv[dist].values, width=w, color=style.dist_color(dist),
                   label=dist)
        ax.set_xticks(x, pv.index)
        ax.set_yscale("log")
        style.plain_log(ax.yaxis)
        ax.grid(axis="x", visible=False)
        ax.set_xlabel("element format")
        if i == 0:
            ax.set_ylabel("mean per-token rel. L2 error")
        ax.set_title(names.get(sc, str(sc)) if sc is not None else "")
    style.legend_below(fig, axes)
    sat = style.constants(df, ["saturation", "tokens"], {"saturation": lambda v: f"saturation {v}",
                                                          "tokens": lambda v: f"{style.value(v)} tokens"})
    style.title(fig, "Element-format round-trip error", _join("CPU reference", _synthetic(df), sat))
    return fig


# ---- GPU ------------------------------------------------------------------------------------
PEER_PREFIX = "peer:"


def _is_peer(version) -> bool:
    return str(version).startswith(PEER_PREFIX)


# Decode axes the bandwidth figure holds fixed (at their most common value in the file).
DECODE_FIXED = ["layout", "head_dim", "block_size", "num_kv_heads", "gqa_group"]


def _main_slice(df: pd.DataFrame) -> pd.DataFrame:
    """Uniform-length, eager rows at the most common value of every DECODE_FIXED axis. Peer rows
    (another implementation on contiguous KV) are held to the kernels' values of every fixed
    axis but the layout."""
    if "lengths" in df.columns:
        df = df[df["lengths"].fillna("uniform").replace("", "uniform") == "uniform"]
    if "graph" in df.columns:
        df = df[df["graph"].fillna("off").replace("", "off") == "off"]
    peer = df["version"].map(_is_peer) if "version" in df.columns else pd.Series(False, index=df.index)
    base = df[~peer] if (~peer).any() else df
    keep = pd.Series(True, index=df.index)
    for a in DECODE_FIXED:
        if a in base.columns and base[a].notna().any():
            same = df[a] == base[a].mode().iloc[0]
            keep &= (same | peer) if (a == "layout" and (~peer).any()) else same
    return df[keep]


def _tb(x) -> float:
    return float(x) / 1e12


@paper
def decode_bandwidth(r: Results):
    """Decode attention: achieved bandwidth vs context per kernel version, one panel per KV format
    (rows) and batch (columns), with the measured read ceiling, the datasheet peak and the peers
    (rows whose version is "peer:NAME", e.g. PyTorch SDPA measured beside the kernels; pass their
    file with the sweep's). Uniform lengths, eager launches, the most common layout / head_dim /
    block size / heads (the other studies have figures of their own axes)."""
    df = _need(r.ok("decode_attention"), "decode_attention", ["context", "version", "bytes_per_s"])
    df = _main_slice(df)
    if df.empty:
        raise Skip("no uniform-length eager decode_attention points")
    formats = _format_sorted(df["kv_format"].unique()) if "kv_format" in df.columns else [None]
    batches = sorted(df["batch"].unique()) if "batch" in df.columns else [None]
    cells = {}
    for fi, fmt in enumerate(formats):
        for bi, b in enumerate(batches):
            sel = pd.Series(True, index=df.index)
            if fmt is not None:
                sel &= df["kv_format"] == fmt
            if b is not None:
                sel &= df["batch"] == b
            d = df[sel]
            if not d.empty:
                cells[(fi, bi)] = d
    nr, nc = len(formats), len(batches)
    panel_w = min(2.3, style.DOUBLE_COLUMN_IN / nc)
    fig, grid = plt.subplots(nr, nc, figsize=(max(style.SINGLE_COLUMN_IN, panel_w * nc), 1.55 * nr + 1.0),
                             squeeze=False, layout="constrained")
    peak = float(r.attrs.get("device_peak_bytes_per_s", 0) or r.attrs.get("datasheet_bytes_per_s", 0) or 0)
    ymax = max([_tb(df["bytes_per_s"].max())] + [_tb(v) for v in (peak, r.read_ceiling) if v > 0]) * 1.06
    contexts = sorted(df["context"].unique())
    for (fi, bi), ax in np.ndenumerate(grid):
        if (fi, bi) not in cells:
            fig.delaxes(ax)
            continue
        d = cells[(fi, bi)]
        versions = sorted(d["version"].unique(), key=lambda v: (_is_peer(v), str(v)))
        for version in versions:
            dv = d[d["version"] == version].groupby("context", as_index=False)["bytes_per_s"].median()
            if _is_peer(version):
                st = dict(ls="--", marker="x", lw=1.0, ms=3.5)
            else:
                st = dict(ls="-", marker="o")
            ax.plot(dv["context"], dv["bytes_per_s"] / 1e12, color=style.version_color(version), label=str(version),
                    **st)
        if r.read_ceiling > 0:
            ax.axhline(_tb(r.read_ceiling), color="k", ls="--", lw=0.8,
                       label=f"measured read ceiling ({_tb(r.read_ceiling):.2f} TB/s)")
        if peak > 0:
            ax.axhline(_tb(peak), color="0.5", ls=":", lw=0.8, label=f"datasheet peak ({_tb(peak):.2f} TB/s)")
        style.log2_axis(ax.xaxis, contexts, tokens=True, max_labels=3 if nc > 3 else 5)
        ax.set_xlim(min(contexts) / 1.4, max(contexts) * 1.4)
        ax.set_ylim(0, ymax)
        left = not any((fi, c) in cells for c in range(bi))
        below = any((f, bi) in cells for f in range(fi + 1, nr))
        ax.tick_params(labelleft=left, labelbottom=not below)
        if left:
            ax.set_ylabel(f"{formats[fi]}\nbandwidth (TB/s)" if formats[fi] is not None else "bandwidth (TB/s)")
        if fi == nr - 1:
            ax.set_xlabel("context (tokens)")
        if fi == 0 or not any((f, bi) in cells for f in range(fi)):  # column titles on top
            ax.set_title(f"batch {style.value(batches[bi])}" if batches[bi] is not None else "")
    style.legend_below(fig)
    kern = df[~df["version"].map(_is_peer)]
    shape = style.constants(kern if not kern.empty else df, ["layout", "block_size", "num_kv_heads", "gqa_group",
                                                             "head_dim"], {
        "layout": lambda v: f"{v} layout", "block_size": lambda v: f"block {style.value(v)}",
        "num_kv_heads": lambda v: f"{style.value(v)} KV heads", "gqa_group": lambda v: f"GQA {style.value(v)}",
        "head_dim": lambda v: f"head_dim {style.value(v)}"})
    peers = df[df["version"].map(_is_peer)]
    peer_note = ""
    if not peers.empty:
        pl = style.constants(peers, ["layout"], {"layout": lambda v: f"{v} KV"})
        peer_note = f"dashed: peers{' (' + pl + ')' if pl else ''}"
    style.title(fig, f"Decode attention bandwidth vs context, {style.measured_on(r)}",
                _join(shape, "uniform lengths, eager launch, median of timed runs", peer_note))
    return fig


@paper
def append_bandwidth(r: Results):
    """Append / quantize-on-write: bandwidth per KV format (bars when one token count was timed,
    lines vs tokens otherwise), against the measured copy ceiling; one panel per configuration
    that varies in the file (layout, input dtype, block size, heads, head_dim), never a median
    across them (the split-x layout takes another kernel path than NHD/HND)."""
    df = _need(r.ok("append"), "append", ["tokens", "bytes_per_s"])
    key = "kv_format" if "kv_format" in df.columns else "kind"
    formats = _format_sorted(df[key].unique())
    tokens = sorted(df["tokens"].unique())
    shape_keys = ["layout", "in_dtype", "block_size", "num_kv_heads", "head_dim"]
    fmt = {"in_dtype": lambda v: f"{v} in", "layout": lambda v: f"{v} layout",
           "block_size": lambda v: f"block {style.value(v)}", "num_kv_heads": lambda v: f"{style.value(v)} KV heads",
           "head_dim": lambda v: f"d {style.value(v)}"}
    vary = style.varying(df, shape_keys)
    panels = [((), df)] if not vary else list(df.groupby(vary, sort=True))
    if len(panels) == 1:
        fig, ax = style.figure(style.SINGLE_COLUMN_IN, 2.6)
        axes = [ax]
    else:
        fig, axes = style.grid(len(panels), cols=min(len(panels), 3), panel_h=2.1, sharey=True)
    top = _tb(max(r.copy_ceiling, df["bytes_per_s"].max())) * 1.15
    for ax, (pkey, d) in zip(axes, panels):
        if vary:
            pkey = pkey if isinstance(pkey, tuple) else (pkey,)
            ax.set_title(", ".join(fmt[k](v) for k, v in zip(vary, pkey)))
        if len(tokens) == 1:
            med = d.groupby(key)["bytes_per_s"].median().reindex(formats) / 1e12
            bars = ax.bar(range(len(formats)), med.values, color=[style.format_color(f) for f in formats], width=0.6)
            ax.set_xticks(range(len(formats)), formats, rotation=30, ha="right")
            ax.grid(axis="x", visible=False)
            ax.set_xlabel("KV storage format")
            if "pct_copy_ceiling" in d.columns and d["pct_copy_ceiling"].notna().any():
                pct = d.groupby(key)["pct_copy_ceiling"].median().reindex(formats)
                for b, v, pc in zip(bars, med.values, pct.values):
                    if pc == pc:
                        ax.annotate(f"{pc:.0f} %", (b.get_x() + b.get_width() / 2, v), xytext=(0, 2),
                                    textcoords="offset points", ha="center", va="bottom", fontsize=6)
        else:
            for f in formats:
                dd = d[d[key] == f].groupby("tokens", as_index=False)["bytes_per_s"].median()
                if dd.empty:
                    continue
                ax.plot(dd["tokens"], dd["bytes_per_s"] / 1e12, marker=style.format_marker(f),
                        color=style.format_color(f), label=str(f))
            style.log2_axis(ax.xaxis, tokens, tokens=True)
            ax.set_xlabel("tokens appended per call")
        if r.copy_ceiling > 0:
            ax.axhline(_tb(r.copy_ceiling), color="k", ls="--", lw=0.8,
                       label=f"measured copy ceiling, {_tb(r.copy_ceiling):.2f} TB/s"
                             + (" (100 %)" if len(tokens) == 1 else ""))
        ax.set_ylim(0, top)
    axes[0].set_ylabel("bandwidth, read + write (TB/s)")
    style.legend_below(fig, axes)
    what = f"{style.value(tokens[0])} tokens/call" if len(tokens) == 1 else ""
    shape = style.constants(df, shape_keys, fmt)
    style.title(fig, f"Append / quantize-on-write bandwidth, {style.measured_on(r)}", _join(what, shape))
    return fig


# The shape axes shared by the roofline bench (op=decode_attention) and the GPU decode bench.
DECODE_SHAPE = ["batch", "context", "num_kv_heads", "gqa_group", "head_dim", "block_size", "kv_format"]


# The fidelity trace of a calibrate point (experiments/calibrate/calibrate_bench.cpp).
FIDELITY_COLUMNS = ["kv_format", "graph", "heldout", "bytes", "measured_s", "predicted_uncalibrated_s",
                    "predicted_pooled_s", "predicted_s", "predicted_loo_s"]
FORMAT_MARKERS = style.FORMAT_MARKERS

# The error-distribution curves of the fidelity figure: neutral colors (the formats own the hues).
_CDF_STYLES = {"uncalibrated": dict(color="0.55", ls=":", lw=1.3), "pooled": dict(color="0.35", ls="-.", lw=1.1),
               "in-sample": dict(color="k", ls="--", lw=0.9), "loo": dict(color="k", ls="-", lw=1.4),
               "held out": dict(color="#7b4173", ls="-", lw=1.4)}


def _fidelity(r: Results, cal: pd.DataFrame):
    """The calibrate points' fidelity tables (`kvlab calibrate`): per calibration, predicted vs
    measured (calibrated and uncalibrated), the signed error vs bytes moved (in-sample and
    leave-one-out, held-out records ringed), and the distribution of |error| per model."""
    fig, axes = plt.subplots(len(cal), 3, figsize=(style.DOUBLE_COLUMN_IN, 2.45 * len(cal) + 1.0), squeeze=False,
                             layout="constrained")
    formats_seen = []
    for (a1, a2, a3), (_, row) in zip(axes, cal.iterrows()):
        t = r.trace(row, "fidelity")
        missing = [c for c in FIDELITY_COLUMNS if c not in t.columns]
        if missing:
            raise Skip(f"calibrate point {row['group']} lacks fidelity columns {', '.join(missing)}")
        meas = t["measured_s"] * 1e6
        for fmt in _format_sorted(t["kv_format"].unique()):
            d = t[t["kv_format"] == fmt]
            if fmt not in formats_seen:
                formats_seen.append(fmt)
            mk, col = style.format_marker(fmt), style.format_color(fmt)
            m = d["measured_s"] * 1e6
            a1.scatter(d["predicted_uncalibrated_s"] * 1e6, m, s=9, marker=mk, facecolors="none", edgecolors="0.6",
                       linewidths=0.6)
            a1.scatter(d["predicted_s"] * 1e6, m, s=9, marker=mk, color=col, linewidths=0)
            err = (d["predicted_s"] - d["measured_s"]) / d["measured_s"]
            loo = (d["predicted_loo_s"] - d["measured_s"]) / d["measured_s"]
            a2.scatter(d["bytes"], 100 * err, s=9, marker=mk, color=col, linewidths=0)
            a2.scatter(d["bytes"], 100 * loo, s=16, marker=mk, facecolors="none", edgecolors=col, linewidths=0.6)
            held = d[d["heldout"] == 1]
            if not held.empty:
                a2.scatter(held["bytes"], 100 * (held["predicted_s"] - held["measured_s"]) / held["measured_s"],
                           s=40, marker="o", facecolors="none", edgecolors="k", linewidths=0.8)
        lo = float(min(meas.min(), (t["predicted_uncalibrated_s"] * 1e6).min(), (t["predicted_s"] * 1e6).min()))
        hi = float(max(meas.max(), (t["predicted_s"] * 1e6).max()))
        x = np.array([lo / 1.3, hi * 1.3])
        a1.plot(x, x, color="k", lw=0.8, ls="--")
        a1.fill_between(x, x / 1.1, x / 0.9, color="k", alpha=0.08, linewidth=0)
        a1.set_xscale("log")
        a1.set_yscale("log")
        a1.set_xlim(x[0], x[1])
        a1.set_ylim(x[0], x[1])
        style.plain_log(a1.xaxis)
        style.plain_log(a1.yaxis)
        a1.set_xlabel("predicted time (µs)")
        a1.set_ylabel("measured time, median (µs)")
        hold = row.get("holdout", "none")
        a1.set_title(f"version {row.get('version', '?')}"
                     + (f", held out: {hold}" if isinstance(hold, str) and hold not in ("none", "") else "")
                     + f", {int(row['records'])} records")
        a2.axhspan(-10, 10, color="k", alpha=0.08, linewidth=0)
        a2.axhline(0, color="k", lw=0.8)
        a2.set_xscale("log")
        style.plain_log(a2.xaxis)
        a2.set_xlabel("bytes moved per call")
        a2.set_ylabel("signed error of the calibrated\nprediction (%)")
        a2.set_title("error vs size")
        fitted = t[t["heldout"] == 0]
        curves = [("uncalibrated", "bytes / R (uncalibrated)", fitted, "predicted_uncalibrated_s"),
                  ("pooled", "pooled: fixed + bytes / (R eff)", fitted, "predicted_pooled_s"),
                  ("in-sample", "calibrated, in-sample", fitted, "predicted_s"),
                  ("loo", "calibrated, leave-one-out", fitted, "predicted_loo_s")]
        if (t["heldout"] == 1).any():
            curves.append(("held out", "calibrated, held out", t[t["heldout"] == 1], "predicted_s"))
        # The medians: a dot where each curve crosses 0.5 and their values listed in the free
        # upper-left corner (text at the crossings collides when two medians are close).
        for li, (key, name, d, col) in enumerate(curves):
            e = np.sort(np.abs(d[col] - d["measured_s"]) / d["measured_s"]) * 100
            a3.step(e, np.arange(1, len(e) + 1) / len(e), where="post", label=f"{name}", **_CDF_STYLES[key])
            a3.plot([np.median(e)], [0.5], ls="", marker="o", ms=2.5, color=_CDF_STYLES[key]["color"])
            short = {"uncalibrated": "uncal.", "loo": "leave-1-out"}.get(key, key)
            a3.text(0.03, 0.97 - 0.075 * (li + 1), f"{short} {np.median(e):.1f} %", transform=a3.transAxes,
                    ha="left", va="top", fontsize=5.5, color=_CDF_STYLES[key]["color"])
        a3.text(0.03, 0.97, "median |error|:", transform=a3.transAxes, ha="left", va="top", fontsize=5.5)
        a3.axvline(10, color="#d62728", lw=0.8, ls="--", label="10 % (the fidelity target for the median)")
        a3.axhline(0.5, color="0.7", lw=0.5)
        a3.set_xscale("log")
        style.plain_log(a3.xaxis)
        a3.set_ylim(0, 1.02)
        a3.set_xlabel("|error| (%)")
        a3.set_ylabel("fraction of records")
        a3.set_title("error distribution (medians: dots)")
    proxies = [(Line2D([], [], ls="", marker=style.format_marker(f), color=style.format_color(f), ms=4), f)
               for f in formats_seen]
    proxies += [(Line2D([], [], ls="", marker="o", mfc="none", mec="0.6", ms=4), "uncalibrated (bytes / R)"),
                (Line2D([], [], ls="", marker="o", mfc="none", mec="k", ms=4), "hollow in (b): leave-one-out"),
                (Line2D([], [], ls="", marker="o", mfc="none", mec="k", ms=7), "ringed: held out (not fitted)"),
                (plt.Rectangle((0, 0), 1, 1, color="k", alpha=0.08), "|error| <= 10 %")]
    style.legend_below(fig, [a for row in axes for a in row[2:]], extra=proxies, ncol=4)
    row = cal.iloc[0]
    dev = row.get("device", "") or style.device(r)
    summary = (f"median |error| {100 * row['err_loo_median']:.1f} % calibrated (leave-one-out), "
               f"{100 * row['err_uncalibrated_median']:.1f} % uncalibrated" if len(cal) == 1 else "")
    style.title(fig, f"Decode-attention cost model vs measurement ({row.get('gpu_name', '?')} model; "
                     f"measured on {dev or 'a device not recorded'})",
                _join(str(row.get("selection", "")), summary))
    return fig


@paper
def simulated_vs_measured(r: Results):
    """Predicted vs measured decode-attention time. From the calibrate points of `kvlab calibrate`
    when the file has them (calibrated, uncalibrated, leave-one-out, held out); otherwise the
    roofline prediction (roofline bench, op decode_attention) against the measured decode time of
    every version on the same shape: measured vs predicted, and their ratio vs context."""
    cal = r.ok("calibrate")
    if not cal.empty:
        return _fidelity(r, cal)
    meas = _need(r.ok("decode_attention"), "decode_attention", DECODE_SHAPE + ["version", "median_us"])
    pred = _need(r.ok("roofline"), "roofline", DECODE_SHAPE + ["op", "predicted_s"])
    pred = pred[pred["op"] == "decode_attention"]
    meas = meas[~meas["version"].map(_is_peer)]
    if "lengths" in meas.columns:  # the roofline rows model uniform lengths only
        meas = meas[meas["lengths"].fillna("uniform") == "uniform"]
    # One index holds every kind's columns: keep the measurement's own before the join.
    meas = meas[DECODE_SHAPE + ["version", "median_us"] + [c for c in ("layout",) if c in meas.columns]]
    if pred.empty:
        raise Skip("no roofline points with op=decode_attention")
    cols = DECODE_SHAPE + ["predicted_s"] + (["ceiling"] if "ceiling" in pred.columns else [])
    j = meas.merge(pred[cols], on=DECODE_SHAPE, how="inner")
    if j.empty:
        raise Skip("no decode_attention measurement shares its shape with a roofline prediction")
    if "ceiling" in j.columns and j["ceiling"].nunique() > 1:  # one prediction per shape: prefer this run's ceiling
        order = {"run": 0, "measured": 1, "datasheet": 2}
        j = j.assign(_o=j["ceiling"].map(order)).sort_values("_o").drop_duplicates(
            subset=DECODE_SHAPE + ["version"] + [c for c in ("layout",) if c in j.columns]).drop(columns="_o")
    j = j.assign(measured_s=j["median_us"] * 1e-6)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(style.DOUBLE_COLUMN_IN, 3.0), layout="constrained")
    for version, d in j.groupby("version"):
        c = style.version_color(version)
        a1.scatter(d["predicted_s"] * 1e6, d["measured_s"] * 1e6, s=10, color=c, label=str(version))
        dd = d.assign(ratio=d["measured_s"] / d["predicted_s"]).groupby("context", as_index=False)["ratio"].median()
        a2.plot(dd["context"], dd["ratio"], marker="o", color=c, label=str(version))
    lo = float(min(j["predicted_s"].min(), j["measured_s"].min()) * 1e6) / 1.3
    hi = float(max(j["predicted_s"].max(), j["measured_s"].max()) * 1e6) * 1.3
    a1.plot([lo, hi], [lo, hi], color="k", lw=0.8, ls="--", label="measured = predicted")
    a1.set_xscale("log")
    a1.set_yscale("log")
    a1.set_xlim(lo, hi)
    a1.set_ylim(lo, hi)
    style.plain_log(a1.xaxis)
    style.plain_log(a1.yaxis)
    a1.set_xlabel("roofline prediction (µs)")
    a1.set_ylabel("measured time, median (µs)")
    a1.set_title("measured vs predicted")
    a2.axhline(1.0, color="k", lw=0.8, ls="--")
    style.log2_axis(a2.xaxis, j["context"].unique(), tokens=True)
    a2.set_xlabel("context (tokens)")
    a2.set_ylabel("measured / predicted time\n(median over shapes)")
    a2.set_title("model error vs context")
    style.legend_below(fig)
    med = float(np.median(np.abs(j["measured_s"] / j["predicted_s"] - 1)))
    style.title(fig, f"Decode attention: roofline model vs measurement, {style.measured_on(r)}",
                f"{len(j)} shape x version pairs, median |error| {100 * med:.1f} %")
    return fig


@paper
def capacity_vs_block(r: Results):
    """Capacity planner: concurrent sequences vs block size per KV format (color) and context
    (line style), one panel per model."""
    df = _need(r.ok("capacity"), "capacity", ["block_size", "max_seqs", "kv_format", "context"])
    models = sorted(df["model"].unique())
    fig, axes = style.grid(len(models), cols=min(len(models), 2),
                           width=style.DOUBLE_COLUMN_IN if len(models) > 1 else style.SINGLE_COLUMN_IN, panel_h=2.3)
    formats = _format_sorted(df["kv_format"].unique())
    contexts = sorted(df["context"].unique())
    dashes = ["-", "--", ":", "-."]
    ctx_style = {c: dashes[i % len(dashes)] for i, c in enumerate(contexts)}
    ctx_marker = {c: m for c, m in zip(contexts, itertools.cycle("os^Dv"))}
    for i, (ax, model) in enumerate(zip(axes, models)):
        d = df[df["model"] == model]
        for fmt in formats:
            for ctx in contexts:
                dv = d[(d["kv_format"] == fmt) & (d["context"] == ctx)].groupby("block_size", as_index=False)[
                    "max_seqs"].median()
                if dv.empty:
                    continue
                ax.plot(dv["block_size"], dv["max_seqs"], color=style.format_color(fmt), ls=ctx_style[ctx],
                        marker=ctx_marker[ctx], ms=2.5)
        style.log2_axis(ax.xaxis, df["block_size"].unique())
        ax.set_yscale("log")
        style.plain_log(ax.yaxis)
        ax.set_xlabel("block size (tokens)")
        if i % 2 == 0:
            ax.set_ylabel("max concurrent sequences")
        ax.set_title(str(model))
    proxies = [(Line2D([], [], color=style.format_color(f)), f"{f} KV") for f in formats]
    proxies += [(Line2D([], [], color="k", ls=ctx_style[c], marker=ctx_marker[c], ms=2.5),
                 f"context {style.value(c)} tokens") for c in contexts]
    # One row of formats, one of contexts (while they fit in a row).
    style.legend_below(fig, [], extra=proxies, ncol=max(len(formats), len(contexts)) if
                       max(len(formats), len(contexts)) <= 5 else None)
    const = style.constants(df, ["gpu", "gpu_mem_util", "activation_reserve_mib"], {
        "gpu": lambda v: f"{v} (modelled)", "gpu_mem_util": lambda v: f"gpu_mem_util {style.value(v)}",
        "activation_reserve_mib": lambda v: f"activation reserve {style.value(v)} MiB"})
    style.title(fig, "Capacity vs block size and KV format (capacity planner, computed)", const)
    return fig


# GEMM points are drawn hollow and neutral so that the decode-attention points keep their
# KV format's color.
GEMM_MARKERS = {16: "o", 8: "D", 4: "v"}


@paper
def roofline_chart(r: Results):
    """Roofline of the cost model: attainable FLOP/s vs arithmetic intensity per GPU, with the
    predicted GEMM (batch sweep) and decode-attention points; left of the ridge memory-bound."""
    df = _need(r.ok("roofline"), "roofline", ["intensity", "model_flops", "predicted_s", "ridge", "op"])
    gpus = sorted(df["gpu"].unique()) if "gpu" in df.columns else ["?"]
    fig, axes = style.grid(len(gpus), cols=min(len(gpus), 2),
                           width=style.DOUBLE_COLUMN_IN if len(gpus) > 1 else style.SINGLE_COLUMN_IN, panel_h=2.4,
                           sharey=True)
    xs = df["intensity"][df["intensity"] > 0]
    x = np.logspace(math.log10(xs.min()) - 0.5, math.log10(xs.max()) + 0.5, 80)
    rate = df["model_flops"] / df["predicted_s"] / 1e12
    bits_col = "weight_bits" if "weight_bits" in df.columns else None
    for i, (ax, gpu) in enumerate(zip(axes, gpus)):
        d = df[df["gpu"] == gpu] if "gpu" in df.columns else df
        for op, dv in d.groupby("op"):
            if op == "gemm":
                for bits, db in (dv.groupby(bits_col) if bits_col else [(16, dv)]):
                    ax.scatter(db["intensity"], rate[db.index], s=12, marker=GEMM_MARKERS.get(int(bits), "s"),
                               facecolors="none", edgecolors="k", linewidths=0.6,
                               label=f"GEMM, {int(bits)}-bit weights", zorder=3)
            elif op == "decode_attention" and "kv_format" in dv.columns:
                for fmt, dfm in dv.groupby("kv_format"):
                    ax.scatter(dfm["intensity"], rate[dfm.index], s=12, marker=style.format_marker(fmt),
                               color=style.format_color(fmt), label=f"decode attention, {fmt} KV", zorder=4)
            else:
                ax.scatter(dv["intensity"], rate[dv.index], s=12, color=style._hashed("op:" + str(op)),
                           label=str(op), zorder=4)
        roofs = []
        for ridge, dv in d.groupby("ridge"):
            bw = float(dv["ceiling_bytes_per_s"].iloc[0])
            ax.plot(x, np.minimum(x * bw, ridge * bw) / 1e12, color="0.4", lw=0.7, zorder=2)
            g = dv[dv["op"] == "gemm"]
            bits = sorted({int(b) for b in g[bits_col].dropna()}) if bits_col and not g.empty else []
            roofs.append(f"{ridge * bw / 1e12:.0f}" + (f" ({'/'.join(map(str, bits))}-bit)" if bits else ""))
        ax.set_xscale("log")
        ax.set_yscale("log")
        style.plain_log(ax.xaxis)
        style.plain_log(ax.yaxis)
        ax.set_xlim(x[0], x[-1])
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        if i % 2 == 0:
            ax.set_ylabel("attainable TFLOP/s (predicted)")
        bw = float(d["ceiling_bytes_per_s"].iloc[0]) if "ceiling_bytes_per_s" in d.columns else 0
        ax.set_title(f"{gpu}: " + (f"{bw / 1e12:.2f} TB/s, " if bw > 0 else "") + f"roofs {', '.join(roofs)} TFLOP/s")
    ymax = max(float((df["ridge"] * df["ceiling_bytes_per_s"]).max()) / 1e12, float(rate.max()))
    axes[0].set_ylim(top=ymax * 2.5)
    style.legend_below(fig)
    ceil = style.constants(df, ["ceiling"], {"ceiling": lambda v: f"memory roof at the {v} bandwidth ceiling"})
    style.title(fig, "Roofline of the cost model (sim/cost, predicted): memory-bound left of the ridge",
                _join("GPU parameters from data/gpus", ceil))
    return fig


# ---- simulation and DSV4 -------------------------------------------------------------------
# The simulate bench's axes other than block_size (experiments/kinds/simulate.cpp).
SIMULATE_AXES = ["workload", "num_requests", "rate", "workload_seed", "model", "gpu", "kv_format", "kv_gib",
                 "gpu_mem_util", "watermark", "preemption", "swap_gib", "prefix_caching", "reserve", "max_num_seqs",
                 "max_num_batched_tokens", "chunked_prefill", "launch", "calibration", "max_steps"]

_SIM_FMT = {
    "workload": lambda v, row: str(v),
    "kv_gib": lambda v, row: (f"{style.value(v)} GiB KV" if v and v > 0 else
                              f"KV = {style.value(row.get('gpu_mem_util', '?'))} of GPU memory"),
    "watermark": lambda v, row: f"watermark {style.value(100 * v)} %",
    "preemption": lambda v, row: f"preempt by {v}",
    "prefix_caching": lambda v, row: f"prefix caching {v}",
    "gpu_mem_util": lambda v, row: f"gpu_mem_util {style.value(v)}",
    "kv_format": lambda v, row: f"{v} KV",
    "model": lambda v, row: str(v),
    "gpu": lambda v, row: f"{v} (modelled)",
    "launch": lambda v, row: f"{v} launch",
    "calibration": lambda v, row: f"calibration {v}",
    "num_requests": lambda v, row: f"{style.value(v)} requests" if v else "",
    "rate": lambda v, row: f"{style.value(v)} req/s" if v else "",
    "workload_seed": lambda v, row: f"seed {style.value(v)}" if v else "",
    "max_steps": lambda v, row: f"{style.value(v)} steps max" if v else "",
}


def _sim_value(k, v, row) -> str:
    f = _SIM_FMT.get(k)
    return f(v, row) if f else f"{k} {style.value(v)}"


def _distinguishing(configs: pd.DataFrame, keys: list) -> list:
    """The fewest keys (earliest in `keys` first) whose values tell every row of configs apart."""
    for n in range(1, len(keys) + 1):
        for sub in itertools.combinations(keys, n):
            if not configs.duplicated(subset=list(sub)).any():
                return list(sub)
    return list(keys)


@paper
def waste_vs_block_size(r: Results):
    """Serving simulation: last-block waste vs block size per configuration (slack share of the
    used KV slots and slack per running request, with PagedAttention's (block-1)/2), and what it
    does to throughput and preemptions. Lines are labelled by the fewest settings that tell them
    apart; the other settings are in the title."""
    df = _need(r.ok("simulate"), "simulate", ["block_size", "slack_fraction", "mean_slack_per_seq", "workload"])
    # One line per configuration that varies the block size (every other axis fixed).
    keys = [k for k in SIMULATE_AXES if k in df.columns and df[k].nunique() > 1] or ["workload"]
    df = df.groupby(keys).filter(lambda d: d["block_size"].nunique() > 1)
    if df.empty:
        raise Skip("no simulate configuration spans two block sizes")
    present = [k for k in SIMULATE_AXES if k in df.columns]
    lines = df[present].drop_duplicates(subset=[k for k in keys if k in df.columns]).reset_index(drop=True)
    vary = [k for k in keys if lines[k].nunique() > 1] or ["workload"]
    label_keys = _distinguishing(lines[vary], vary)
    metrics = [("slack_fraction", 100.0, "slack (% of used KV slots)", "last-block waste"),
               ("mean_slack_per_seq", 1.0, "slack slots per request", "slack per request"),
               ("output_tokens_per_s", 1.0, "output tokens/s", "throughput"),
               ("num_preemptions", 1.0, "preemptions per run", "preemptions")]
    metrics = [m for m in metrics if m[0] in df.columns]
    fig, axes = style.grid(len(metrics), cols=2, width=style.DOUBLE_COLUMN_IN, panel_h=1.9)
    palette = style.series_colors(range(len(lines)))
    label_of = {}
    for li, line in lines.iterrows():
        sel = np.logical_and.reduce([df[k] == line[k] for k in keys])
        d = df[sel].groupby("block_size", as_index=False)[[m[0] for m in metrics]].median().sort_values("block_size")
        # " / " between settings: the title's notes list labels with ", " between them.
        label = " / ".join(s for s in (_sim_value(k, line[k], line) for k in label_keys) if s)
        label_of[li] = label
        for ax, (col, scale, _, _) in zip(axes, metrics):
            ax.plot(d["block_size"], scale * d[col], marker="o", color=palette[li], label=label)
    bs = np.array(sorted(df["block_size"].unique()), dtype=float)
    axes[1].plot(bs, (bs - 1) / 2, color="k", ls="--", lw=0.8, label="(block - 1) / 2, PagedAttention's estimate")
    for ax, (col, _, yl, t) in zip(axes, metrics):
        style.log2_axis(ax.xaxis, bs)
        ax.set_xlabel("block size (tokens)")
        ax.set_ylabel(yl)
        ax.set_title(t)
    # Slack and preemptions start at 0 (block 1, no pressure) and span decades: symlog, with
    # head room above the largest value (symlog's autoscale puts it on the frame).
    for i in (1, 3):
        if i < len(metrics):
            top = max(float(np.nanmax([l_.get_ydata().max() for l_ in axes[i].get_lines()] + [1.0])), 1.0)
            axes[i].set_yscale("symlog", linthresh=1.0)
            axes[i].set_ylim(0, top * 2.0)
            style.plain_log(axes[i].yaxis)
    style.legend_below(fig, ncol=min(len(lines) + 1, 3))
    # Settings that differ between lines but are not in the labels, then the constant ones.
    notes = []
    for k in [k for k in vary if k not in label_keys]:
        by = {}
        for li, line in lines.iterrows():
            by.setdefault(_sim_value(k, line[k], line), []).append(label_of[li])
        notes.append("; ".join(f"{v}: {', '.join(ls)}" for v, ls in by.items()))
    const_keys = [k for k in ("model", "gpu", "kv_format", "kv_gib", "watermark", "preemption", "prefix_caching",
                              "launch") if k in lines.columns and lines[k].nunique() == 1]
    const = ", ".join(s for s in (_sim_value(k, lines[k].iloc[0], lines.iloc[0]) for k in const_keys) if s)
    style.title(fig, "Last-block waste vs block size (serving simulation, roofline clock; synthetic workloads)",
                _join(const, *notes))
    return fig


VARIANT_STYLES = {"public_v4": dict(marker="o", ls="-", ms=4, mfc=None),
                  "per_token_scales": dict(marker="x", ls=":", ms=5, mfc=None)}


def _variant_style(v, i) -> dict:
    st = VARIANT_STYLES.get(str(v))
    if st is None:
        st = [dict(marker="^", ls="-.", ms=4), dict(marker="s", ls="--", ms=4)][i % 2]
    return {k: val for k, val in st.items() if val is not None}


@paper
def capacity_vs_compression(r: Results):
    """DSV4-style stack: concurrent requests vs CSA and HCA compression ratio per storage variant
    (marker) and context (color), against the dense BF16 baseline (dashed)."""
    df = _need(r.ok("dsv4_capacity"), "dsv4_capacity",
               ["csa_ratio_used", "hca_ratio_used", "max_seqs", "dense_max_seqs", "variant", "context"])
    panels = []
    if "hca_ratio" in df.columns:
        d = df[df["hca_ratio"] == 0]
        fixed = style.constants(d, ["hca_ratio_used"], {"hca_ratio_used": lambda v: f"HCA ratio fixed at the stack's {style.value(v)}"})
        panels.append(("csa_ratio_used", "CSA compression ratio (tokens per entry)", fixed, d))
    if "csa_ratio" in df.columns:
        d = df[df["csa_ratio"] == 0]
        fixed = style.constants(d, ["csa_ratio_used"], {"csa_ratio_used": lambda v: f"CSA ratio fixed at the stack's {style.value(v)}"})
        panels.append(("hca_ratio_used", "HCA compression ratio (tokens per entry)", fixed, d))
    panels = [p for p in panels if p[3][p[0]].nunique() > 1]
    if not panels:
        raise Skip("dsv4_capacity points vary no compression ratio")
    fig, axes = style.grid(len(panels), cols=len(panels),
                           width=style.DOUBLE_COLUMN_IN if len(panels) > 1 else style.SINGLE_COLUMN_IN, panel_h=2.4,
                           sharey=True)
    contexts = sorted(df["context"].unique())
    variants = sorted(df["variant"].unique())
    colors = style.series_colors(contexts)
    for i, (ax, (x, xl, fixed, d)) in enumerate(zip(axes, panels)):
        for vi, var in enumerate(variants):
            for ctx in contexts:
                dv = d[(d["variant"] == var) & (d["context"] == ctx)].groupby(x, as_index=False)[
                    ["max_seqs", "dense_max_seqs"]].median().sort_values(x)
                if dv.empty:
                    continue
                ax.plot(dv[x], dv["max_seqs"], color=colors[ctx], **_variant_style(var, vi))
                if vi == 0:
                    ax.plot(dv[x], dv["dense_max_seqs"], ls="--", lw=0.8, color=colors[ctx])
        style.log2_axis(ax.xaxis, d[x].unique())
        ax.set_yscale("log")
        style.plain_log(ax.yaxis)
        ax.set_xlabel(xl)
        if i == 0:
            ax.set_ylabel("max concurrent requests")
        ax.set_title(fixed)
    proxies = [(Line2D([], [], color=colors[c], lw=2), f"context {style.tokens_label(c)} tokens") for c in contexts]
    proxies += [(Line2D([], [], color="k", **_variant_style(v, i)), f"{v} storage") for i, v in enumerate(variants)]
    proxies.append((Line2D([], [], color="k", ls="--", lw=0.8), "dense BF16 baseline"))
    style.legend_below(fig, [], extra=proxies)
    m = df.iloc[0]
    const = style.constants(df, ["kv_gib", "gpu"], {"kv_gib": lambda v: f"{style.value(v)} GiB KV budget",
                                                    "gpu": lambda v: f"{v} (modelled)" if v else ""})
    style.title(fig, f"DSV4-style capacity vs compression ratio ({m.get('stack_name', m.get('model', '?'))}, computed)",
                const)
    return fig


@paper
def compression_error_vs_ratio(r: Results):
    """DSV4 compressors on synthetic KV: decode-attention error against the uncompressed cache vs
    compression ratio per layer type (lines: FP32 entries, compression alone; markers: the stored
    entries of each storage variant), the storage loss alone per variant, and the CSA indexer's
    top-k recall."""
    df = _need(r.ok("compression_error"), "compression_error",
               ["layer", "ratio", "attn_rel_l2", "attn_rel_l2_fp32", "attn_storage_rel_l2", "dist", "variant"])
    layers = sorted(df["layer"].unique())
    has_recall = "topk_recall" in df.columns and df["topk_recall"].notna().any()
    n = len(layers) + 1 + int(has_recall)
    fig, axes = style.grid(n, cols=2, width=style.DOUBLE_COLUMN_IN, panel_h=2.0)
    dists = sorted(df["dist"].unique())
    variants = sorted(df["variant"].unique())
    for i, (ax, layer) in enumerate(zip(axes, layers)):
        d = df[df["layer"] == layer]
        for dist in dists:
            dd = d[d["dist"] == dist]
            c = style.dist_color(dist)
            f32 = dd.groupby("ratio", as_index=False)["attn_rel_l2_fp32"].median().sort_values("ratio")
            ax.plot(f32["ratio"], f32["attn_rel_l2_fp32"], color=c, lw=1.0)
            for vi, var in enumerate(variants):
                dv = dd[dd["variant"] == var].groupby("ratio", as_index=False)["attn_rel_l2"].median()
                st = _variant_style(var, vi)
                ax.plot(dv["ratio"], dv["attn_rel_l2"], ls="", marker=st["marker"], ms=st.get("ms", 4),
                        color=c, mfc="none" if st["marker"] in "o^sD" else c)
        style.log2_axis(ax.xaxis, d["ratio"].unique())
        ax.set_yscale("log")
        style.plain_log(ax.yaxis)
        ax.set_xlabel("compression ratio (tokens per entry)")
        ax.set_ylabel("attention rel. L2 error\nvs uncompressed cache")
        ax.set_title(f"{layer.upper()}: compression + storage")
    ax = axes[len(layers)]
    layer_ls = {layer: ls for layer, ls in zip(layers, ["-", "--", ":", "-."])}
    for dist in dists:
        for vi, var in enumerate(variants):
            st = _variant_style(var, vi)
            for layer in layers:
                dv = df[(df["dist"] == dist) & (df["variant"] == var) & (df["layer"] == layer)].groupby(
                    "ratio", as_index=False)["attn_storage_rel_l2"].median()
                ax.plot(dv["ratio"], dv["attn_storage_rel_l2"], color=style.dist_color(dist), ls=st["ls"],
                        marker=st["marker"], ms=st.get("ms", 4), mfc="none" if st["marker"] in "o^sD" else None)
    style.log2_axis(ax.xaxis, df["ratio"].unique())
    ax.set_yscale("log")
    style.plain_log(ax.yaxis)
    ax.set_xlabel("compression ratio (tokens per entry)")
    ax.set_ylabel("attention rel. L2 error,\nstored vs FP32 entries")
    ax.set_title("storage loss alone (" + ", ".join(f"{lay.upper()} {r_}" for lay, r_ in
                                                     ((lay, f"{style.value(df[df['layer'] == lay]['ratio'].min())}-"
                                                            f"{style.value(df[df['layer'] == lay]['ratio'].max())}")
                                                      for lay in layers)) + ")")
    if has_recall:
        ax = axes[len(layers) + 1]
        rec = df[df["topk_recall"].notna()]
        for dist in dists:
            for vi, var in enumerate(variants):
                st = _variant_style(var, vi)
                dv = rec[(rec["dist"] == dist) & (rec["variant"] == var)].groupby("ratio", as_index=False)[
                    "topk_recall"].median()
                if dv.empty:
                    continue
                ax.plot(dv["ratio"], dv["topk_recall"], color=style.dist_color(dist), ls=st["ls"],
                        marker=st["marker"], ms=st.get("ms", 4), mfc="none" if st["marker"] in "o^sD" else None)
        style.log2_axis(ax.xaxis, rec["ratio"].unique())
        lo = float(rec["topk_recall"].min())
        ax.set_ylim(max(0.0, lo - 0.1 * (1.0 - lo) - 0.02), 1.005)
        ax.set_xlabel("CSA compression ratio (tokens per entry)")
        ax.set_ylabel("indexer top-k recall")
        k = style.constants(rec, ["topk"], {"topk": lambda v: f"top-{style.value(v)}"})
        ax.set_title(f"CSA indexer recall ({k} of the FP32 entries)" if k else "CSA indexer recall")
    proxies = [(Line2D([], [], color=style.dist_color(d_), lw=2), d_) for d_ in dists]
    proxies.append((Line2D([], [], color="k", lw=1.0), "FP32 entries, compression alone (top: lines)"))
    for vi, var in enumerate(variants):
        st = _variant_style(var, vi)
        proxies.append((Line2D([], [], color="k", ls=st["ls"], marker=st["marker"], ms=st.get("ms", 4),
                               mfc="none" if st["marker"] in "o^sD" else None), f"{var} storage (top: markers)"))
    # Rows: the distributions, then the entry kinds (while they fit in a row).
    style.legend_below(fig, [], extra=proxies, ncol=min(4, max(len(dists), 1 + len(variants))))
    shape = style.constants(df, ["queries", "heads"], {"queries": lambda v: f"{style.value(v)} queries",
                                                        "heads": lambda v: f"{style.value(v)} heads"})
    toks = ", ".join(f"{lay.upper()} {style.value(df[df['layer'] == lay]['tokens'].iloc[0])} tokens"
                     for lay in layers) if "tokens" in df.columns else ""
    style.title(fig, "DSV4-style compression: decode-attention error vs compression ratio",
                _join("CPU reference", _synthetic(df), toks, shape))
    return fig


FIGURES = [
    ("quant_error_vs_format_block", quant_error_heatmap),
    ("quant_error_vs_bits", quant_error_vs_bits),
    ("format_error", format_error_bars),
    ("decode_bandwidth_vs_context", decode_bandwidth),
    ("append_bandwidth", append_bandwidth),
    ("capacity_vs_block_size", capacity_vs_block),
    ("simulated_vs_measured", simulated_vs_measured),
    ("roofline", roofline_chart),
    ("waste_vs_block_size", waste_vs_block_size),
    ("capacity_vs_compression_ratio", capacity_vs_compression),
    ("compression_error_vs_ratio", compression_error_vs_ratio),
]
FIGURES += step_figures.figures_for(Skip)  # the full decode step (decode_step, step_gemm)


def save(fig, out: str, name: str, formats=("png", "pdf")) -> list:
    """Write fig as OUT/NAME.EXT for each format (PNG at style.PNG_DPI) and close it."""
    paths = []
    with style.rc():
        if fig.get_layout_engine() is None:
            fig.tight_layout()
        for ext in formats:
            p = os.path.join(out, f"{name}.{ext}")
            fig.savefig(p, dpi=style.PNG_DPI, bbox_inches="tight", pad_inches=0.03)
            paths.append(p)
    plt.close(fig)
    return paths


def make_figures(r: Results, out: str, formats=("png", "pdf")):
    """Returns (made: list of (name, [paths], caption), skipped: list of (name, reason))."""
    os.makedirs(out, exist_ok=True)
    made, skipped = [], []
    for name, fn in FIGURES:
        try:
            fig = fn(r)
        except Skip as e:
            skipped.append((name, str(e)))
            continue
        made.append((name, save(fig, out, name, formats), (fn.__doc__ or "").strip()))
    return made, skipped


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m analysis.figures", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="kvlab result file(s) (HDF5) of one device")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--format", default="png,pdf", help="comma-separated: png, pdf, svg")
    a = ap.parse_args(argv)
    formats = [f.strip() for f in a.format.split(",") if f.strip()]
    bad = [f for f in formats if f not in ("png", "pdf", "svg")]
    if bad:
        print(f"analysis.figures: error: unknown format {bad[0]!r} (allowed: png, pdf, svg)", file=sys.stderr)
        return 2
    try:
        r = load_many(a.results)
    except ResultFileError as e:
        print(f"analysis.figures: error: {e}", file=sys.stderr)
        return 2
    try:
        made, skipped = make_figures(r, a.out, formats)
    except OSError as e:
        print(f"analysis.figures: error: cannot write to {a.out}: {e}", file=sys.stderr)
        return 2
    print(f"{' + '.join(a.results)}: {len(r.index)} points ({', '.join(r.kinds()) or 'none'})")
    for name, paths, _ in made:
        print(f"made    {name}: {', '.join(paths)}")
    for name, why in skipped:
        print(f"skipped {name}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
