"""The cost model against measurement: predicted vs measured decode time (roofline or
`kvlab calibrate` fidelity tables), and the roofline of the model itself."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from analysis import style  # noqa: E402
from analysis.figures.common import Skip, _format_sorted, _is_peer, _join, _need  # noqa: E402
from analysis.load import Results  # noqa: E402
from analysis.style import paper  # noqa: E402


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
    meas = meas[DECODE_SHAPE + ["version", "median_us"] + [c for c in ("layout", "q1_us", "q3_us") if c in meas.columns]]
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
        # The measured medians, with their timing quartiles as bars where the rows have them.
        a1.scatter(d["predicted_s"] * 1e6, d["measured_s"] * 1e6, s=12, marker=style.version_marker(version),
                   facecolors="none", edgecolors=c, linewidths=0.8, label=str(version))
        if {"q1_us", "q3_us"} <= set(d.columns) and d[["q1_us", "q3_us"]].notna().all(axis=None):
            y = d["measured_s"] * 1e6
            a1.errorbar(d["predicted_s"] * 1e6, y, yerr=[(y - d["q1_us"]).clip(lower=0), (d["q3_us"] - y).clip(lower=0)],
                        fmt="none", ecolor=c, elinewidth=0.6, capsize=1.5, capthick=0.6)
        dd = d.assign(ratio=d["measured_s"] / d["predicted_s"]).groupby("context", as_index=False)["ratio"].median()
        a2.plot(dd["context"], dd["ratio"], marker=style.version_marker(version), color=c, label=str(version))
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


FIGURES = [
    ("simulated_vs_measured", simulated_vs_measured),
    ("roofline", roofline_chart),
]
