"""Measured GPU figures: decode-attention bandwidth vs context (kernel versions and peers)
and append / quantize-on-write bandwidth."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis import style  # noqa: E402
from analysis.figures.common import plot_with_quartiles, rate_quartiles, Skip, _format_sorted, _is_peer, _join, _need  # noqa: E402
from analysis.load import Results  # noqa: E402
from analysis.style import paper  # noqa: E402


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
            dv = rate_quartiles(d[d["version"] == version], "context", "bytes_per_s", "min_bytes")
            st = dict(ls="--" if _is_peer(version) else "-", marker=style.version_marker(version),
                      lw=1.0 if _is_peer(version) else None, ms=3.5)
            plot_with_quartiles(ax, dv["context"], dv["bytes_per_s"], dv["lo"], dv["hi"], 1e-12,
                                color=style.version_color(version), label=str(version),
                                **{k: v for k, v in st.items() if v is not None})
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
            q = rate_quartiles(d, key, "bytes_per_s", "append_bytes").set_index(key).reindex(formats)
            med = q["bytes_per_s"] / 1e12
            yerr = None
            if q[["lo", "hi"]].notna().all(axis=None):
                yerr = np.vstack([(q["bytes_per_s"] - q["lo"]).clip(lower=0), (q["hi"] - q["bytes_per_s"]).clip(lower=0)]) / 1e12
            bars = ax.bar(range(len(formats)), med.values, color=[style.format_color(f) for f in formats], width=0.6,
                          yerr=yerr, capsize=2, error_kw=dict(elinewidth=0.6, capthick=0.6))
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
                dd = rate_quartiles(d[d[key] == f], "tokens", "bytes_per_s", "append_bytes")
                if dd.empty:
                    continue
                plot_with_quartiles(ax, dd["tokens"], dd["bytes_per_s"], dd["lo"], dd["hi"], 1e-12,
                                    marker=style.format_marker(f), color=style.format_color(f), label=str(f))
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


FIGURES = [
    ("decode_bandwidth_vs_context", decode_bandwidth),
    ("append_bandwidth", append_bandwidth),
]
