"""Quantization figures: error of every scheme by scale-group size, storage cost vs error,
element formats alone (CPU reference, synthetic data)."""
from __future__ import annotations

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402

from analysis import style  # noqa: E402
from analysis.figures.common import _format_sorted, _join, _need, _synthetic  # noqa: E402
from analysis.load import Results  # noqa: E402
from analysis.style import paper  # noqa: E402


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


FIGURES = [
    ("quant_error_vs_format_block", quant_error_heatmap),
    ("quant_error_vs_bits", quant_error_vs_bits),
    ("format_error", format_error_bars),
]
