"""Capacity planner figures (computed): concurrent sequences vs block size and KV format."""
from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")
from matplotlib.lines import Line2D  # noqa: E402

from analysis import style  # noqa: E402
from analysis.figures.common import _format_sorted, _need  # noqa: E402
from analysis.load import Results  # noqa: E402
from analysis.style import paper  # noqa: E402


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
                        gid=f"{fmt} KV, context {style.value(ctx)} tokens",
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


FIGURES = [
    ("capacity_vs_block_size", capacity_vs_block),
]
