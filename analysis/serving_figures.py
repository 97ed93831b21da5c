"""Serving fidelity: real GPU serving runs against the simulator's prediction (bench "serving").

    python3 -m analysis.serving_figures RESULTS.h5 [--out DIR] [--markdown]

Prints the fidelity table (metric | workload | load | measured | predicted | error | target
held?) with the decision comparison and the prediction's sensitivity to its own clock, and
with --out writes the two figures:

  serving_fidelity        predicted vs measured per metric (mean TTFT, mean TPOT, throughput,
                          preemptions), one point per workload and load, with the targets'
                          bands, and the CDF of the per-request |relative error| of TTFT and
                          TPOT per run
  serving_step_residuals  the per-step residual (the model's time for the measured step's own
                          shape vs the measured step) over each run, CUDA-graph and eager steps
                          apart

analysis.figures makes the same figures as part of the standard set. Targets (measured on the
H100 against the simulator): mean TPOT and throughput within 5 %, mean TTFT within 10 %,
preemption count within 10 %.
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

# (metric key in the index, label, unit scale, unit, target |error|)
METRICS = [
    ("mean_ttft_s", "mean TTFT", 1e3, "ms", 0.10),
    ("mean_tpot_s", "mean TPOT", 1e3, "ms", 0.05),
    ("throughput_tok_s", "throughput", 1.0, "tok/s", 0.05),
    ("preemptions", "preemptions", 1.0, "", 0.10),
]


def runs(r: Results) -> pd.DataFrame:
    df = r.ok("serving")
    if df.empty:
        raise Skip("no serving points with status ok")
    df = df.copy()
    if "load" not in df.columns:
        df["load"] = "-"
    df["run"] = df["workload"].astype(str).map(os.path.basename) + " / " + df["load"].astype(str)
    return df


def measured_what(df: pd.DataFrame) -> str:
    """What the 'measured' side is: the GPU, or sim's roofline standing in (a pipeline test)."""
    clocks = df["clock_measured"].astype(str) if "clock_measured" in df.columns else pd.Series([], dtype=str)
    if len(clocks) and clocks.str.contains("roofline").all():
        return "sim's roofline clock (executor = roofline: a pipeline test, not a measurement)"
    return "the GPU measurement"


def model_what(df: pd.DataFrame) -> str:
    models = df["model"].astype(str) if "model" in df.columns else pd.Series([], dtype=str)
    if len(models) and models.str.startswith("serving step model").all():
        return "model fitted to separate serving_step measurements, never to these runs"
    return "prediction: sim's uncalibrated roofline"


def target_held(metric: str, measured: float, predicted: float, bound: float) -> bool:
    if metric == "preemptions" and measured == 0 and predicted == 0:
        return True
    if not (measured and math.isfinite(measured) and math.isfinite(predicted)):
        return False
    return abs(predicted - measured) / abs(measured) <= bound


def fidelity_table(r: Results) -> pd.DataFrame:
    """One row per (metric, run): measured, predicted, error, whether the target holds."""
    df = runs(r)
    rows = []
    for key, label, scale, unit, bound in METRICS:
        for _, x in df.iterrows():
            m, p = float(x[f"measured_{key}"]) * scale, float(x[f"predicted_{key}"]) * scale
            err = (p - m) / m if m else float("nan")
            rows.append({
                "metric": label + (f" ({unit})" if unit else ""), "workload": os.path.basename(str(x["workload"])),
                "load": x["load"], "measured": m, "predicted": p, "error": err,
                "target": f"{bound:.0%}", "held": "yes" if target_held(key, m, p, bound) else "no",
            })
    return pd.DataFrame(rows)


def decisions_table(r: Results) -> pd.DataFrame:
    df = runs(r)
    cols = {"run": "run", "steps_measured": "steps (measured)", "steps_predicted": "steps (predicted)",
            "decisions_identical_steps": "identical steps", "decisions_first_divergence": "first divergence",
            "decisions_explained": "explained", "replay_identical": "replay identical",
            "step_residual_median": "step |residual| median", "step_residual_mean": "step residual mean",
            "elasticity_mean_ttft": "TTFT elasticity", "preemptions_band_min": "preemptions band min",
            "preemptions_band_max": "preemptions band max", "calibration_median_error_loo": "calibration LOO median"}
    return df[[c for c in cols if c in df.columns]].rename(columns=cols)


def _fmt(v) -> str:
    if isinstance(v, str):
        return v
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.4g}"


def markdown(df: pd.DataFrame, pct_cols=("error",)) -> str:
    head = "| " + " | ".join(df.columns) + " |"
    sep = "|" + "|".join("---" for _ in df.columns) + "|"
    lines = [head, sep]
    for _, x in df.iterrows():
        cells = [f"{x[c]:+.1%}" if c in pct_cols and isinstance(x[c], float) and math.isfinite(x[c])
                 else _fmt(x[c]) for c in df.columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(r: Results, md: bool = False) -> str:
    try:
        t = fidelity_table(r)
        d = decisions_table(r)
    except Skip as e:
        return f"serving fidelity: {e}"
    held = (t["held"] == "yes").sum()
    out = [f"serving fidelity ({style.measured_on(r)}): {held} of {len(t)} targets held"]
    if md:
        out += [markdown(d, ()), "", markdown(t)]
    else:
        out.append(d.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        out.append("")
        t2 = t.copy()
        t2["error"] = t2["error"].map(lambda e: f"{e:+.1%}" if math.isfinite(e) else "-")
        out.append(t2.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    return "\n".join(out)


@paper
def fidelity_figure(r: Results):
    """Predicted vs measured mean TTFT, mean TPOT, throughput and preemption count per workload
    and load (the target band shaded), and the CDF of the per-request |relative error| of TTFT
    and TPOT (prediction vs measurement of the same request)."""
    df = runs(r)
    fig = plt.figure(figsize=(style.DOUBLE_COLUMN_IN, 4.9), layout="constrained")
    gs = fig.add_gridspec(2, 4)
    axes = [fig.add_subplot(gs[0, i]) for i in range(4)]
    axes += [fig.add_subplot(gs[1, 0:2]), fig.add_subplot(gs[1, 2]), fig.add_subplot(gs[1, 3])]
    colors = style.series_colors(sorted(df["run"].unique()))
    for ax, (key, label, scale, unit, bound) in zip(axes, METRICS):
        m = df[f"measured_{key}"].to_numpy(float) * scale
        p = df[f"predicted_{key}"].to_numpy(float) * scale
        ok = np.isfinite(m) & np.isfinite(p)
        if not ok.any():
            ax.set_title(f"{label}: no finite values")
            continue
        lo = min(m[ok].min(), p[ok].min())
        hi = max(m[ok].max(), p[ok].max())
        # Log axes where the runs span decades (queueing makes TTFT do so), symlog for counts.
        if key == "preemptions":
            ax.set_xscale("symlog", linthresh=1.0)
            ax.set_yscale("symlog", linthresh=1.0)
            lo, hi = 0.0, max(hi * 1.3, 2.0)
            xs = np.concatenate([np.linspace(0, 1, 20), np.geomspace(1, hi, 40)])
        elif lo > 0 and hi / lo > 20:
            ax.set_xscale("log")
            ax.set_yscale("log")
            lo, hi = lo / 1.3, hi * 1.3
            xs = np.geomspace(lo, hi, 50)
        else:
            pad = 0.08 * (hi - lo) if hi > lo else max(abs(hi), 1.0) * 0.1
            lo, hi = lo - pad, hi + pad
            xs = np.linspace(lo, hi, 50)
        ax.plot(xs, xs, color="k", lw=0.8)
        ax.fill_between(xs, xs * (1 - bound), xs * (1 + bound), color="0.85", lw=0,
                        label="target band (± the metric's target)")
        for (run, mv, pv) in zip(df["run"], m, p):
            ax.scatter([mv], [pv], color=colors[run], s=14, zorder=3, label=run)
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        u = f" ({unit})" if unit else ""
        ax.set_xlabel(f"measured{u}")
        ax.set_ylabel(f"predicted{u}")
        ax.set_title(f"{label}, target ±{bound:.0%}")
    # Every run's relative error per metric, against the targets.
    ax = axes[len(METRICS)]
    names = list(df["run"])
    ypos = np.arange(len(names))
    for k, (key, label, _, _, bound) in enumerate(METRICS):
        m = df[f"measured_{key}"].to_numpy(float)
        p = df[f"predicted_{key}"].to_numpy(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            e = np.where(m != 0, (p - m) / m * 100, np.where(p == 0, 0.0, np.nan))
        ax.scatter(e, ypos + (k - 1.5) * 0.17, s=12, marker="osD^"[k], label=f"{label} error",
                   facecolor="none" if k % 2 else "k", edgecolor="k", lw=0.7, zorder=3)
    for b in (5, 10):
        ax.axvline(b, color="0.6", lw=0.6, ls=":")
        ax.axvline(-b, color="0.6", lw=0.6, ls=":")
    ax.axvline(0, color="k", lw=0.6)
    ax.set_yticks(ypos)
    ax.set_yticklabels(names, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("(predicted - measured) / measured (%)")
    ax.set_title("relative error per run (dotted: ±5 %, ±10 %)")
    for ax, (what, col) in zip(axes[len(METRICS) + 1:], (("TTFT", "ttft"), ("TPOT", "tpot"))):
        any_line = False
        for _, x in df.iterrows():
            q = r.trace(x, "requests")
            m, p = q[f"{col}_measured_s"].to_numpy(float), q[f"{col}_predicted_s"].to_numpy(float)
            ok = np.isfinite(m) & np.isfinite(p) & (m > 0)
            if not ok.any():
                continue
            e = np.sort(np.abs(p[ok] - m[ok]) / m[ok]) * 100
            ax.step(e, np.arange(1, e.size + 1) / e.size, where="post", color=colors[x["run"]],
                    label=x["run"])
            any_line = True
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlabel(f"|{what} error| (%)")
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{what}, per request" if any_line else f"{what}: no requests")
    style.legend_below(fig)
    style.title(fig, "Serving runs: the simulator's prediction vs " + measured_what(df),
                f"{style.measured_on(r)}; synthetic llama-shaped weights; {model_what(df)}")
    return fig


@paper
def residual_figure(r: Results):
    """Per-step residual over each run: (the model's time for the measured step's shape -
    measured) / measured, CUDA-graph (decode-only) and eager (mixed) steps apart, with each
    run's mean."""
    df = runs(r)
    fig, axes = style.grid(len(df), cols=min(4, len(df)), panel_h=1.7, sharey=True)
    for ax, (_, x) in zip(axes, df.iterrows()):
        s = r.trace(x, "steps")
        t = s["time_s"].to_numpy(float)
        res = s["residual"].to_numpy(float) * 100
        g = s["graph"].to_numpy(int) == 1 if "graph" in s.columns else np.zeros(len(s), bool)
        ax.scatter(t[g], res[g], s=2, color="#1f77b4", alpha=0.5, lw=0, label="CUDA-graph (decode) step")
        ax.scatter(t[~g], res[~g], s=2, color="#d62728", alpha=0.6, lw=0, label="eager (mixed) step")
        mean = np.nanmean(res) if np.isfinite(res).any() else float("nan")
        ax.axhline(0, color="k", lw=0.6)
        if math.isfinite(mean):
            ax.axhline(mean, color="0.4", lw=0.8, ls="--", label="mean residual")
        ax.set_title(f"{x['run']}: mean {mean:+.1f} %", fontsize=7)
        ax.set_xlabel("run time (s)")
        ax.set_ylabel("step residual (%)")
        finite = res[np.isfinite(res)]
        if finite.size:
            lo, hi = np.percentile(finite, [0.5, 99.5])
            span = max(abs(lo), abs(hi), 2.0)
            ax.set_ylim(-1.15 * span, 1.15 * span)
    style.legend_below(fig)
    style.title(fig, "Serving step time: the model (same step shape) vs " + measured_what(df) +
                ", over each run", style.measured_on(r))
    return fig


FIGURES = [
    ("serving_fidelity", fidelity_figure),
    ("serving_step_residuals", residual_figure),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m analysis.serving_figures", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="kvlab result file with serving points")
    ap.add_argument("--out", default="", help="directory for the figures (PNG and PDF)")
    ap.add_argument("--markdown", action="store_true", help="tables as Markdown")
    a = ap.parse_args(argv)
    try:
        r = load(a.results)
    except ResultFileError as e:
        print(f"analysis.serving_figures: error: {e}", file=sys.stderr)
        return 2
    print(report(r, a.markdown))
    if a.out:
        try:
            os.makedirs(a.out, exist_ok=True)
        except OSError as e:
            print(f"analysis.serving_figures: error: cannot write to {a.out}: {e}", file=sys.stderr)
            return 2
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
