"""Full decode step figures and tables (kinds decode_step and step_gemm).

    python3 -m analysis.step_figures RESULTS.h5 [--out DIR]

Prints the step-time table (variant columns, one row per batch and context) and the GEMM
crossover table (measured knee vs sim's roofline ridge), and with --out writes the two
figures. analysis.figures makes the same figures as part of the standard set.

Measured crossover of a linear layer: the GEMM time is flat while the weight bytes dominate
(memory-bound) and grows with the batch once the FLOPs do. We fit the two roofline
segments: the flat level t0 is the median time over batches <= 8; the compute-bound slope s
is the median of time / batch over batches >= 512 (t = s * batch through the origin, as a
roofline's compute segment; the median shrugs off the few batch sizes where cuBLAS's
heuristics pick a slow kernel); the knee is the batch where they meet, t0 / s. sim's prediction is the ridge batch of its roofline (the
smallest batch whose FLOP time exceeds its byte time), with the datasheet BF16 rate and with
the matrix rate measured in the same run.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis import style  # noqa: E402
from analysis.load import ResultFileError, Results, load  # noqa: E402
from analysis.skip import Skip  # noqa: E402
from analysis.style import paper  # noqa: E402

FLAT_MAX_BATCH = 8
SLOPE_MIN_BATCH = 512
VARIANTS = ["eager_unfused", "eager_fused", "graph_fused", "graph_unfused"]
COLORS = style.VARIANT_COLORS


def measured_crossover(batch, time_us) -> tuple[float, float, float]:
    """(knee batch, flat level t0 in us, slope in us per row) of a GEMM time-vs-batch curve.

    NaN knee when the curve lacks points on either side (batch <= 8, batch >= 512) or the
    slope is not positive."""
    b = np.asarray(batch, dtype=float)
    t = np.asarray(time_us, dtype=float)
    flat, big = t[b <= FLAT_MAX_BATCH], (b >= SLOPE_MIN_BATCH)
    if flat.size == 0 or not big.any():
        return math.nan, math.nan, math.nan
    t0 = float(np.median(flat))
    s = float(np.median(t[big] / b[big]))
    if not s > 0:
        return math.nan, t0, s
    return t0 / s, t0, s


def crossover_table(r: Results) -> pd.DataFrame:
    df = r.ok("step_gemm")
    if df.empty or "time_us" not in df.columns:
        raise Skip("no step_gemm points with status ok")
    rows = []
    nk = ("gemm_n", "gemm_k") if "gemm_n" in df.columns else ("n", "k")  # files before the rename
    for (preset, linear), d in df.groupby(["preset", "linear"], sort=False):
        d = d.sort_values("batch")
        knee, t0, s = measured_crossover(d["batch"], d["time_us"])
        rows.append({
            "preset": preset, "linear": linear, "n": int(d[nk[0]].iloc[0]), "k": int(d[nk[1]].iloc[0]),
            "t_flat_us": t0, "us_per_row": s, "measured_knee": knee,
            "predicted_ridge": float(d["ridge_batch"].iloc[0]),
            "predicted_ridge_measured_rate": float(d["ridge_batch_measured_rate"].iloc[0]),
            "matmul_tflops": float(d["matmul_tflops_measured"].iloc[0]),
        })
    return pd.DataFrame(rows)


def step_table(r: Results) -> pd.DataFrame:
    df = r.ok("decode_step")
    if df.empty or "step_us" not in df.columns:
        raise Skip("no decode_step points with status ok")
    keys = [k for k in ("preset", "kv_format", "context", "batch") if k in df.columns]
    t = df.pivot_table(index=keys, columns="variant", values="step_us", aggfunc="median")
    t = t[[v for v in VARIANTS if v in t.columns]] / 1000.0  # ms
    if "eager_unfused" in t.columns and "graph_fused" in t.columns:
        t["graph_speedup"] = t["eager_unfused"] / t["graph_fused"]
    pred = df[df["variant"] == "graph_fused"].set_index(keys)["predicted_us"] / 1000.0 if "predicted_us" in df else None
    if pred is not None and not pred.empty:
        t["roofline_graph_ms"] = pred
    return t.reset_index()


@paper
def step_time_vs_batch(r: Results):
    """Decode step time vs batch per variant (eager unfused / eager fused / CUDA graph), per model
    preset, KV format and context, with sim's roofline for the graph-fused step."""
    df = r.ok("decode_step")
    if df.empty or "step_us" not in df.columns:
        raise Skip("no decode_step points with status ok")
    groups = list(df.groupby(["preset", "kv_format", "context"]))
    fig, axes = style.grid(len(groups), cols=min(len(groups), 3), width=style.DOUBLE_COLUMN_IN, panel_h=1.85)
    for i, (ax, ((preset, fmt, ctx), d)) in enumerate(zip(axes, groups)):
        for v in VARIANTS + sorted(set(d["variant"]) - set(VARIANTS)):
            q = [c for c in ("step_us_q1", "step_us_q3") if c in d.columns]
            dv = d[d["variant"] == v].groupby("batch", as_index=False)[["step_us"] + q].median()
            if dv.empty:
                continue
            lo, hi = (dv["step_us_q1"], dv["step_us_q3"]) if len(q) == 2 else (dv["step_us"] * np.nan,) * 2
            style.plot_with_quartiles(ax, dv["batch"], dv["step_us"], lo, hi, 1e-3, marker="o",
                                      color=style.variant_color(v), label=v)
        g = d[d["variant"] == "graph_fused"].groupby("batch", as_index=False)["predicted_us"].median() \
            if "predicted_us" in d.columns else pd.DataFrame()
        if not g.empty:
            ax.plot(g["batch"], g["predicted_us"] / 1000.0, color="k", ls="--", lw=0.8,
                    label="roofline prediction (sim, graph-fused)")
        style.log2_axis(ax.xaxis, d["batch"].unique())
        ax.set_yscale("log")
        style.plain_log(ax.yaxis)
        ax.set_xlabel("batch (sequences)")
        if i % 3 == 0:
            ax.set_ylabel("step time (ms)")
        ax.set_title(f"{preset}, {fmt} KV, context {style.tokens_label(ctx)}")
    style.legend_below(fig, ncol=3)
    style.title(fig, f"Full decode step time vs batch, {style.measured_on(r)}",
                "synthetic decoder (generated weights and KV); median step time of timed runs")
    return fig


@paper
def gemm_crossover(r: Results):
    """Linear-layer GEMM time vs batch: flat (memory-bound) then growing (compute-bound), measured knee vs sim's ridge."""
    df = r.ok("step_gemm")
    if df.empty or "time_us" not in df.columns:
        raise Skip("no step_gemm points with status ok")
    table = crossover_table(r)
    many_presets = table["preset"].nunique() > 1
    fig, axes = style.grid(len(table), cols=min(len(table), 3), width=style.DOUBLE_COLUMN_IN, panel_h=1.85)
    for i, (ax, (_, row)) in enumerate(zip(axes, table.iterrows())):
        d = df[(df["linear"] == row["linear"]) & (df["preset"] == row["preset"])].sort_values("batch")
        ax.plot(d["batch"], d["time_us"], marker="o", ms=2.5, color="#1f77b4", label="measured (cuBLAS)")
        ax.plot(d["batch"], d["predicted_us"], ls="--", color="k", lw=0.8, label="roofline (sim, datasheet rate)")
        ax.plot(d["batch"], d["predicted_us_measured_rate"], ls=":", color="0.45", lw=1.0,
                label="roofline (sim, measured matrix rate)")
        knee = row["measured_knee"]
        if np.isfinite(knee):
            ax.axvline(knee, color="#d62728", lw=0.8, label="measured knee")
        ax.axvline(row["predicted_ridge"], color="k", lw=0.6, ls="-.", label="predicted ridge (sim)")
        style.log2_axis(ax.xaxis, None, max_labels=6)
        ax.set_yscale("log")
        style.plain_log(ax.yaxis)
        ax.set_xlabel("batch (GEMM rows M)")
        if i % 3 == 0:
            ax.set_ylabel("time per GEMM (µs)")
        knee_txt = f"knee {knee:.0f}" if np.isfinite(knee) else "no knee"
        ax.set_title(f"{row['preset'] + ' ' if many_presets else ''}{row['linear']} (N {row['n']}, K {row['k']})\n"
                     f"{knee_txt} measured, ridge {row['predicted_ridge']:.0f} predicted", fontsize=7)
    style.legend_below(fig, ncol=3)
    presets = ", ".join(sorted(table["preset"].unique()))
    style.title(fig, f"Linear layers: memory-bound to compute-bound, {style.measured_on(r)}",
                f"{presets} shapes; cuBLAS, BF16 in, FP32 out; synthetic weights; median time of timed runs")
    return fig


FIGURES = [
    ("decode_step_time_vs_batch", step_time_vs_batch),
    ("decode_step_gemm_crossover", gemm_crossover),
]


def report(r: Results) -> str:
    out = []
    for title, fn in (("decode step time (ms)", step_table), ("GEMM crossover (batch)", crossover_table)):
        try:
            t = fn(r)
        except Skip as e:
            out.append(f"{title}: {e}")
            continue
        out.append(f"{title}:")
        out.append(t.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m analysis.step_figures", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--out", default="", help="directory for the figures (PNG and PDF)")
    a = ap.parse_args(argv)
    try:
        r = load(a.results)
    except ResultFileError as e:
        print(f"analysis.step_figures: error: {e}", file=sys.stderr)
        return 2
    print(report(r))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        for name, fn in FIGURES:
            try:
                fig = fn(r)
            except Skip as e:
                print(f"skipped {name}: {e}")
                continue
            with style.rc():
                for ext in ("png", "pdf"):
                    fig.savefig(os.path.join(a.out, f"{name}.{ext}"), dpi=style.PNG_DPI, bbox_inches="tight",
                                pad_inches=0.03)
            plt.close(fig)
            print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
