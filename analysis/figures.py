"""The standard kvlab figures, from a result file only.

    python3 -m analysis.figures RESULTS.h5 --out DIR [--format png,pdf]

Each figure is made only when its data is in the file; the list of what was made and what
was skipped (and why) is printed. Figures are written as PNG and PDF.
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

from analysis import peers, step_figures  # noqa: E402
from analysis.load import ResultFileError, Results, load  # noqa: E402


class Skip(Exception):
    """A figure whose data is not in the file."""


def _need(df: pd.DataFrame, kind: str, cols: list[str]) -> pd.DataFrame:
    if df.empty:
        raise Skip(f"no {kind} points with status ok")
    missing = [c for c in cols if c not in df.columns or df[c].isna().all()]
    if missing:
        raise Skip(f"{kind} points lack {', '.join(missing)}")
    return df


def _panels(n: int, w: float = 5.0, h: float = 3.6):
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(w * cols, h * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _group_label(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "?"
    return str(int(v))


# ---- quantization -------------------------------------------------------------------------
def quant_error_heatmap(r: Results):
    """Error vs format x block size: rel. L2 (mean per token) of every scheme and scale group."""
    df = _need(r.ok("quant_error"), "quant_error", ["scheme", "rel_l2_mean", "scale_group"])
    dists = sorted(df["dist"].unique())
    fig, axes = _panels(len(dists), 6.0, 4.2)
    for ax, dist in zip(axes, dists):
        d = df[df["dist"] == dist]
        if "granularity" in d.columns:
            lab = [str(int(g)) if gr == "group" else gr for g, gr in zip(d["scale_group"], d["granularity"])]
        else:
            lab = d["scale_group"].map(_group_label)
        d = d.assign(group=lab)
        pv = d.pivot_table(index="scheme", columns="group", values="rel_l2_mean", aggfunc="mean")
        rank = {"token": 1, "tensor": 2, "none": 3}
        order = sorted(pv.columns, key=lambda g: (rank.get(g, 0), int(g) if g.isdigit() else 0))
        pv = pv[order]
        im = ax.imshow(np.log10(pv.values.astype(float)), aspect="auto", cmap="viridis_r")
        ax.set_xticks(range(len(pv.columns)), pv.columns)
        ax.set_yticks(range(len(pv.index)), pv.index, fontsize=8)
        for (i, j), v in np.ndenumerate(pv.values):
            if not np.isnan(v):
                ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=7, color="w")
        ax.set_xlabel("elements per scale")
        ax.set_title(f"per-token rel. L2 (mean), {dist}")
        fig.colorbar(im, ax=ax, label="log10 rel. L2")
    fig.suptitle("Quantization error vs format x scale-group size")
    return fig


def quant_error_vs_bits(r: Results):
    """Storage cost vs error: bits per value against p99 per-token rel. L2."""
    df = _need(r.ok("quant_error"), "quant_error", ["bits_per_value", "rel_l2_p99"])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for dist, d in df.groupby("dist"):
        ax.scatter(d["bits_per_value"], d["rel_l2_p99"], label=dist, s=18)
    best = df.sort_values("bits_per_value").groupby("scheme").first()
    for scheme, row in best.iterrows():
        ax.annotate(scheme, (row["bits_per_value"], row["rel_l2_p99"]), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    ax.set_yscale("log")
    ax.set_xlabel("storage bits per value (scales included)")
    ax.set_ylabel("p99 per-token rel. L2")
    ax.set_title("Quantization: bits vs error")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def format_error_bars(r: Results):
    """Element formats alone (one tensor-wide scale): rel. L2 per distribution."""
    df = _need(r.ok("format_error"), "format_error", ["format", "rel_l2_mean"])
    pv = df.pivot_table(index="format", columns="dist", values="rel_l2_mean", aggfunc="mean")
    fig, ax = plt.subplots(figsize=(7, 4))
    pv.plot.bar(ax=ax, logy=True, rot=0)
    ax.set_ylabel("mean per-token rel. L2")
    ax.set_title("Element format round trip (tensor-wide scale)")
    ax.grid(alpha=0.3, axis="y")
    return fig


# ---- GPU ------------------------------------------------------------------------------------
PEER_PREFIX = "peer:"


def _is_peer(version) -> bool:
    return str(version).startswith(PEER_PREFIX)


# Decode axes the bandwidth figure holds fixed (at their most common value in the file).
DECODE_FIXED = ["layout", "head_dim", "block_size", "num_kv_heads", "gqa_group"]


def _main_slice(df: pd.DataFrame) -> pd.DataFrame:
    """Uniform-length, eager rows at the most common value of every DECODE_FIXED axis."""
    if "lengths" in df.columns:
        df = df[df["lengths"].fillna("uniform") == "uniform"]
    if "graph" in df.columns:
        df = df[df["graph"].fillna("off") == "off"]
    for a in DECODE_FIXED:
        if a in df.columns and df[a].notna().any():
            df = df[df[a] == df[a].mode().iloc[0]]
    return df


def decode_bandwidth(r: Results):
    """Decode attention: achieved bandwidth vs context per version, with the measured read
    ceiling, the datasheet peak and the peers (rows whose version is "peer:NAME", written by a
    peers script in the same schema, and DESIGN.md's H100 figures). One panel per batch and
    KV format; uniform lengths, eager launches, the most common layout / head_dim / block size /
    heads (the other studies have figures of their own axes)."""
    df = _need(r.ok("decode_attention"), "decode_attention", ["context", "version", "bytes_per_s"])
    df = _main_slice(df)
    keys = [k for k in ("batch", "kv_format") if k in df.columns]
    groups = list(df.groupby(keys)) if keys else [((), df)]
    groups = groups[:6]
    fig, axes = _panels(len(groups))
    peak = float(r.attrs.get("device_peak_bytes_per_s", 0) or 0)
    device = str(r.attrs.get("device_name", ""))
    for ax, (key, d) in zip(axes, groups):
        for version, dv in d.groupby("version"):
            dv = dv.groupby("context", as_index=False)["bytes_per_s"].median().sort_values("context")
            style = dict(ls="--", marker="x", lw=1.2) if _is_peer(version) else dict(marker="o")
            ax.plot(dv["context"], dv["bytes_per_s"] / 1e12, label=str(version), **style)
        if r.read_ceiling > 0:
            ax.axhline(r.read_ceiling / 1e12, color="k", ls="--", lw=1, label="measured read ceiling")
        if peak > 0:
            ax.axhline(peak / 1e12, color="gray", ls=":", lw=1, label="datasheet peak")
        if peers.applicable(device):
            batch = key[0] if keys and keys[0] == "batch" else None
            for label, pb, pc, bps in peers.H100_PEERS:
                if batch is None or int(batch) == pb:
                    ax.scatter([pc], [bps / 1e12], marker="x", s=50, label=label)
            for label, bps in peers.H100_PEER_LINES:
                if batch is not None and int(batch) >= 32:
                    ax.axhline(bps / 1e12, color="tab:red", ls="-.", lw=1, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("TB/s")
        title = ", ".join(f"{k}={v}" for k, v in zip(keys, key if isinstance(key, tuple) else (key,)))
        ax.set_title(title or "decode")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(f"Decode attention bandwidth ({device})")
    return fig


def append_bandwidth(r: Results):
    """Append / quantize-on-write: bandwidth vs tokens per format, against the copy ceiling."""
    df = _need(r.ok("append"), "append", ["tokens", "bytes_per_s"])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for fmt, d in df.groupby("kv_format" if "kv_format" in df.columns else "kind"):
        d = d.groupby("tokens", as_index=False)["bytes_per_s"].median().sort_values("tokens")
        ax.plot(d["tokens"], d["bytes_per_s"] / 1e12, marker="o", label=str(fmt))
    if r.copy_ceiling > 0:
        ax.axhline(r.copy_ceiling / 1e12, color="k", ls="--", lw=1, label="measured copy ceiling")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("tokens appended")
    ax.set_ylabel("TB/s (read + write)")
    ax.set_title("Append / quantize-on-write bandwidth")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return fig


# The shape axes shared by the roofline bench (op=decode_attention) and the GPU decode bench.
DECODE_SHAPE = ["batch", "context", "num_kv_heads", "gqa_group", "head_dim", "block_size", "kv_format"]


# The fidelity trace of a calibrate point (experiments/calibrate/calibrate_bench.cpp).
FIDELITY_COLUMNS = ["kv_format", "graph", "heldout", "bytes", "measured_s", "predicted_uncalibrated_s",
                    "predicted_pooled_s", "predicted_s", "predicted_loo_s"]
FORMAT_MARKERS = {"bf16": "o", "fp16": "o", "fp8_e4m3": "s", "fp8_e4m3_pt": "s", "fp8_e5m2": "D", "nvfp4": "^",
                  "mxfp4": "v"}


def _fidelity(r: Results, cal: pd.DataFrame):
    """The calibrate points' fidelity tables (`kvlab calibrate`): per calibration, predicted vs
    measured (calibrated and uncalibrated), the signed error vs bytes moved (in-sample and
    leave-one-out, held-out records ringed), and the distribution of |error| per model."""
    cal = cal.head(4)
    fig, axes = plt.subplots(len(cal), 3, figsize=(16.5, 4.8 * len(cal)), squeeze=False)
    for (a1, a2, a3), (_, row) in zip(axes, cal.iterrows()):
        t = r.trace(row, "fidelity")
        missing = [c for c in FIDELITY_COLUMNS if c not in t.columns]
        if missing:
            raise Skip(f"calibrate point {row['group']} lacks fidelity columns {', '.join(missing)}")
        meas = t["measured_s"] * 1e6
        held_labelled = False
        for fmt, d in t.groupby("kv_format"):
            mk = FORMAT_MARKERS.get(fmt, "o")
            m = d["measured_s"] * 1e6
            a1.scatter(d["predicted_s"] * 1e6, m, s=18, marker=mk, label=f"{fmt} calibrated")
            a1.scatter(d["predicted_uncalibrated_s"] * 1e6, m, s=18, marker=mk, facecolors="none",
                       edgecolors="grey", linewidths=0.7, label="uncalibrated (bytes / R)" if fmt == t["kv_format"].iloc[0]
                       else None)
            err = (d["predicted_s"] - d["measured_s"]) / d["measured_s"]
            loo = (d["predicted_loo_s"] - d["measured_s"]) / d["measured_s"]
            p = a2.scatter(d["bytes"], 100 * err, s=18, marker=mk, label=f"{fmt} in-sample")
            a2.scatter(d["bytes"], 100 * loo, s=30, marker=mk, facecolors="none", edgecolors=p.get_facecolor(),
                       linewidths=0.8, label=f"{fmt} leave-one-out")
            held = d[d["heldout"] == 1]
            if not held.empty:
                a2.scatter(held["bytes"], 100 * (held["predicted_s"] - held["measured_s"]) / held["measured_s"],
                           s=70, marker="o", facecolors="none", edgecolors="k", linewidths=1.0,
                           label=None if held_labelled else "held out (not fitted)")
                held_labelled = True
        lo = float(min(meas.min(), (t["predicted_uncalibrated_s"] * 1e6).min()))
        hi = float(max(meas.max(), (t["predicted_s"] * 1e6).max()))
        x = np.array([lo, hi])
        a1.plot(x, x, color="k", lw=1, ls="--", label="predicted = measured")
        a1.fill_between(x, x / 1.1, x / 0.9, color="k", alpha=0.07, label="|error| <= 10 %")
        a1.set_xscale("log")
        a1.set_yscale("log")
        a1.set_xlabel("predicted (us)")
        a1.set_ylabel("measured median (us)")
        hold = row.get("holdout", "none")
        # (Titles, not a suptitle: make_figures' tight_layout would lay a suptitle over them.)
        a1.set_title(f"{row.get('gpu_name', '?')}, version {row.get('version', '?')}"
                     + (f", held out: {hold}" if isinstance(hold, str) and hold != "none" else "")
                     + f"\n{int(row['records'])} records: median |error| {100 * row['err_loo_median']:.1f} % "
                     f"calibrated (leave-one-out), {100 * row['err_uncalibrated_median']:.1f} % uncalibrated",
                     fontsize=9)
        a2.axhspan(-10, 10, color="k", alpha=0.07)
        a2.axhline(0, color="k", lw=1)
        a2.set_xscale("log")
        a2.set_xlabel("bytes moved per call")
        a2.set_ylabel("(predicted - measured) / measured (%)")
        a2.set_title("Decode attention: calibrated model error vs size")
        fitted = t[t["heldout"] == 0]
        curves = [("bytes / R (uncalibrated)", fitted, "predicted_uncalibrated_s"),
                  ("pooled: fixed + bytes / (R eff)", fitted, "predicted_pooled_s"),
                  ("calibrated, in-sample", fitted, "predicted_s"),
                  ("calibrated, leave-one-out", fitted, "predicted_loo_s")]
        if (t["heldout"] == 1).any():
            curves.append(("calibrated, held out", t[t["heldout"] == 1], "predicted_s"))
        for name, d, col in curves:
            e = np.sort(np.abs(d[col] - d["measured_s"]) / d["measured_s"]) * 100
            a3.step(e, np.arange(1, len(e) + 1) / len(e), where="post",
                    label=f"{name} (median {np.median(e):.1f} %)")
        a3.axvline(10, color="k", lw=1, ls="--", label="10 % (issue #6 target: median)")
        a3.set_xscale("log")
        a3.set_xlabel("|error| (%)")
        a3.set_ylabel("fraction of records")
        a3.set_title("Error distribution")
        for a in (a1, a2, a3):
            a.grid(alpha=0.3)
            a.legend(fontsize=6)
    return fig


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
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.6))
    for version, d in j.groupby("version"):
        a1.scatter(d["predicted_s"] * 1e6, d["measured_s"] * 1e6, s=16, label=str(version))
        dd = d.assign(ratio=d["measured_s"] / d["predicted_s"]).groupby("context", as_index=False)["ratio"].median()
        a2.plot(dd["context"], dd["ratio"], marker="o", label=str(version))
    lo = float(min(j["predicted_s"].min(), j["measured_s"].min()) * 1e6)
    hi = float(max(j["predicted_s"].max(), j["measured_s"].max()) * 1e6)
    a1.plot([lo, hi], [lo, hi], color="k", lw=1, ls="--", label="measured = predicted")
    a1.set_xscale("log")
    a1.set_yscale("log")
    a1.set_xlabel("roofline prediction (us)")
    a1.set_ylabel("measured median (us)")
    a1.set_title("Decode attention: measured vs roofline")
    a2.axhline(1.0, color="k", lw=1, ls="--")
    a2.set_xscale("log", base=2)
    a2.set_xlabel("context (tokens)")
    a2.set_ylabel("measured / predicted (median over shapes)")
    a2.set_title("Model error vs context")
    for a in (a1, a2):
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    med = float(np.median(np.abs(j["measured_s"] / j["predicted_s"] - 1)))
    fig.suptitle(f"Simulated vs measured ({len(j)} pairs, median |error| {100 * med:.1f} %)")
    return fig


def capacity_vs_block(r: Results):
    """Capacity planner: concurrent sequences vs block size per KV format and context."""
    df = _need(r.ok("capacity"), "capacity", ["block_size", "max_seqs", "kv_format", "context"])
    models = sorted(df["model"].unique())
    fig, axes = _panels(len(models))
    for ax, model in zip(axes, models):
        d = df[df["model"] == model]
        for (fmt, ctx), dv in d.groupby(["kv_format", "context"]):
            dv = dv.sort_values("block_size")
            ax.plot(dv["block_size"], dv["max_seqs"], marker="o", label=f"{fmt}, ctx {int(ctx)}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("block size (tokens)")
        ax.set_ylabel("max concurrent sequences")
        ax.set_title(f"{model} on {d['gpu'].iloc[0]}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle("Capacity vs block size and KV format")
    return fig


def roofline_chart(r: Results):
    """Roofline of the cost model: attainable FLOP/s vs arithmetic intensity per GPU, with the
    predicted GEMM (batch sweep) and decode-attention points; left of the ridge memory-bound."""
    df = _need(r.ok("roofline"), "roofline", ["intensity", "model_flops", "predicted_s", "ridge", "op"])
    gpus = sorted(df["gpu"].unique()) if "gpu" in df.columns else ["?"]
    fig, axes = _panels(len(gpus), 6.0, 4.4)
    for ax, gpu in zip(axes, gpus):
        d = df[df["gpu"] == gpu] if "gpu" in df.columns else df
        for (op, extra), dv in d.groupby(["op", "weight_bits" if "weight_bits" in d.columns else "op"]):
            label = f"{op}" + (f", {int(extra)}-bit weights" if op == "gemm" and extra != op else "")
            ax.scatter(dv["intensity"], dv["model_flops"] / dv["predicted_s"], s=14, label=label)
        for rate_col in ("ridge",):
            for ridge, dv in d.groupby(rate_col):
                bw = float(dv["ceiling_bytes_per_s"].iloc[0])
                x = np.logspace(-1, 4, 60)
                ax.plot(x, np.minimum(x * bw, ridge * bw), color="k", lw=0.8, alpha=0.5)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("attainable FLOP/s (predicted)")
        ax.set_title(str(gpu))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle("Roofline (sim/cost): memory-bound left of the ridge")
    return fig


# ---- simulation and DSV4 -------------------------------------------------------------------
# The simulate bench's axes other than block_size (experiments/kinds/simulate.cpp).
SIMULATE_AXES = ["workload", "num_requests", "rate", "workload_seed", "model", "gpu", "kv_format", "kv_gib",
                 "gpu_mem_util", "watermark", "preemption", "swap_gib", "prefix_caching", "reserve", "max_num_seqs",
                 "max_num_batched_tokens", "chunked_prefill", "launch", "max_steps"]


def waste_vs_block_size(r: Results):
    """Serving simulation: last-block waste vs block size per workload (slack share of the used
    KV slots and slack per running request, with PagedAttention's (block-1)/2), and what it does
    to throughput and preemptions."""
    df = _need(r.ok("simulate"), "simulate", ["block_size", "slack_fraction", "mean_slack_per_seq", "workload"])
    # One line per configuration that varies the block size (every other axis fixed).
    keys = [k for k in SIMULATE_AXES if k in df.columns and df[k].nunique() > 1] or ["workload"]
    df = df.groupby(keys).filter(lambda d: d["block_size"].nunique() > 1)
    if df.empty:
        raise Skip("no simulate configuration spans two block sizes")
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    for key, d in df.groupby(keys):
        d = d.groupby("block_size", as_index=False)[
            ["slack_fraction", "mean_slack_per_seq", "output_tokens_per_s", "num_preemptions"]].median()
        d = d.sort_values("block_size")
        label = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in zip(keys, key if isinstance(key, tuple) else (key,)))
        axes[0].plot(d["block_size"], 100 * d["slack_fraction"], marker="o", label=label)
        axes[1].plot(d["block_size"], d["mean_slack_per_seq"], marker="o", label=label)
        axes[2].plot(d["block_size"], d["output_tokens_per_s"], marker="o", label=label)
    bs = np.array(sorted(df["block_size"].unique()), dtype=float)
    axes[1].plot(bs, (bs - 1) / 2, color="k", ls="--", lw=1, label="(block - 1) / 2")
    for ax, yl, t in ((axes[0], "slack, % of used slots", "Last-block waste"),
                      (axes[1], "slack slots per running request", "Slack per request"),
                      (axes[2], "output tokens/s (simulated)", "Throughput")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("block size (tokens)")
        ax.set_ylabel(yl)
        ax.set_title(t)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[1].set_yscale("log")
    m = df.iloc[0]
    fig.suptitle(f"Waste vs block size ({m.get('model', '?')} on {m.get('gpu', '?')}, {m.get('kv_format', '?')} KV)")
    return fig


def capacity_vs_compression(r: Results):
    """DSV4-style stack: concurrent requests vs CSA and HCA compression ratio per storage variant
    and context, against the dense BF16 baseline (dashed)."""
    df = _need(r.ok("dsv4_capacity"), "dsv4_capacity",
               ["csa_ratio_used", "hca_ratio_used", "max_seqs", "dense_max_seqs", "variant", "context"])
    panels = []
    if "hca_ratio" in df.columns:
        panels.append(("csa_ratio_used", "CSA ratio (HCA as the stack)", df[df["hca_ratio"] == 0]))
    if "csa_ratio" in df.columns:
        panels.append(("hca_ratio_used", "HCA ratio (CSA as the stack)", df[df["csa_ratio"] == 0]))
    panels = [p for p in panels if p[2][p[0]].nunique() > 1]
    if not panels:
        raise Skip("dsv4_capacity points vary no compression ratio")
    fig, axes = _panels(len(panels), 6.0, 4.4)
    contexts = sorted(df["context"].unique())
    variants = sorted(df["variant"].unique())
    colors = {c: f"C{i}" for i, c in enumerate(contexts)}
    styles = [dict(marker="o", ls="-", ms=7), dict(marker="x", ls=":", ms=8), dict(marker="^", ls="-.", ms=6)]
    for ax, (x, title, d) in zip(axes, panels):
        for (var, ctx), dv in d.groupby(["variant", "context"]):
            dv = dv.groupby(x, as_index=False)[["max_seqs", "dense_max_seqs"]].median().sort_values(x)
            st = styles[variants.index(var) % len(styles)]
            ax.plot(dv[x], dv["max_seqs"], color=colors[ctx], label=f"{var}, ctx {int(ctx)}", **st)
            if var == variants[0]:
                ax.plot(dv[x], dv["dense_max_seqs"], ls="--", lw=1, color=colors[ctx], label=f"dense BF16, ctx {int(ctx)}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(title)
        ax.set_ylabel("max concurrent requests")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    m = df.iloc[0]
    budget = f", {m['kv_gib']:g} GiB KV" if "kv_gib" in df.columns else ""
    fig.suptitle(f"Capacity vs compression ratio ({m.get('stack_name', m.get('model', '?'))}{budget})")
    return fig


def compression_error_vs_ratio(r: Results):
    """DSV4 compressors on synthetic KV: decode-attention error against the uncompressed cache vs
    compression ratio (solid: stored entries; dashed: FP32 entries, compression alone), the
    storage loss per variant, and the CSA indexer's top-k recall."""
    df = _need(r.ok("compression_error"), "compression_error",
               ["layer", "ratio", "attn_rel_l2", "attn_rel_l2_fp32", "attn_storage_rel_l2", "dist", "variant"])
    layers = sorted(df["layer"].unique())
    fig, axes = _panels(len(layers) + 1, 5.2, 4.0)
    for ax, layer in zip(axes, layers):
        d = df[df["layer"] == layer]
        for dist, dv in d.groupby("dist"):
            dv = dv.groupby("ratio", as_index=False)[["attn_rel_l2", "attn_rel_l2_fp32"]].median().sort_values("ratio")
            line, = ax.plot(dv["ratio"], dv["attn_rel_l2"], marker="o", label=f"{dist}")
            ax.plot(dv["ratio"], dv["attn_rel_l2_fp32"], ls="--", lw=1, color=line.get_color())
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("compression ratio (tokens per entry)")
        ax.set_ylabel("attention rel. L2 vs uncompressed")
        ax.set_title(f"{layer.upper()} compression")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ax = axes[-1]
    for (layer, var), dv in df.groupby(["layer", "variant"]):
        dv = dv.groupby("ratio", as_index=False)["attn_storage_rel_l2"].median().sort_values("ratio")
        ax.plot(dv["ratio"], dv["attn_storage_rel_l2"], marker="s", label=f"{layer} {var}: storage")
    if "topk_recall" in df.columns and df["topk_recall"].notna().any():
        ax2 = ax.twinx()
        for var, dv in df[df["topk_recall"].notna()].groupby("variant"):
            dv = dv.groupby("ratio", as_index=False)["topk_recall"].median().sort_values("ratio")
            ax2.plot(dv["ratio"], dv["topk_recall"], ls=":", marker="^", label=f"indexer recall, {var}")
        ax2.set_ylim(0, 1.05)
        ax2.set_ylabel("indexer top-k recall")
        ax2.legend(fontsize=6, loc="lower right")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("compression ratio")
    ax.set_ylabel("stored vs FP32 entries: attention rel. L2")
    ax.set_title("Storage variants")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="upper left")
    fig.suptitle("DSV4 compression error on synthetic KV")
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
FIGURES += step_figures.figures_for(Skip)  # decode step (issue #8)


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
        fig.tight_layout()
        paths = []
        for ext in formats:
            p = os.path.join(out, f"{name}.{ext}")
            fig.savefig(p, dpi=130)
            paths.append(p)
        plt.close(fig)
        made.append((name, paths, (fn.__doc__ or "").strip()))
    return made, skipped


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m analysis.figures", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="kvlab result file (HDF5)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--format", default="png,pdf", help="comma-separated: png, pdf, svg")
    a = ap.parse_args(argv)
    formats = [f.strip() for f in a.format.split(",") if f.strip()]
    bad = [f for f in formats if f not in ("png", "pdf", "svg")]
    if bad:
        print(f"analysis.figures: error: unknown format {bad[0]!r} (allowed: png, pdf, svg)", file=sys.stderr)
        return 2
    try:
        r = load(a.results)
    except ResultFileError as e:
        print(f"analysis.figures: error: {e}", file=sys.stderr)
        return 2
    try:
        made, skipped = make_figures(r, a.out, formats)
    except OSError as e:
        print(f"analysis.figures: error: cannot write to {a.out}: {e}", file=sys.stderr)
        return 2
    print(f"{a.results}: {len(r.index)} points ({', '.join(r.kinds()) or 'none'})")
    for name, paths, _ in made:
        print(f"made    {name}: {', '.join(paths)}")
    for name, why in skipped:
        print(f"skipped {name}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
