"""Serving-simulation figures: last-block waste vs block size and what it costs."""
from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis import style  # noqa: E402
from analysis.figures.common import Skip, _join, _need  # noqa: E402
from analysis.load import Results  # noqa: E402
from analysis.style import paper  # noqa: E402


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


FIGURES = [
    ("waste_vs_block_size", waste_vs_block_size),
]
