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
def decode_bandwidth(r: Results):
    """Decode attention: achieved bandwidth vs context per version, with the ceilings and peers."""
    df = _need(r.ok("decode_attention"), "decode_attention", ["context", "version", "bytes_per_s"])
    keys = [k for k in ("batch", "kv_format") if k in df.columns]
    groups = list(df.groupby(keys)) if keys else [((), df)]
    groups = groups[:6]
    fig, axes = _panels(len(groups))
    peak = float(r.attrs.get("device_peak_bytes_per_s", 0) or 0)
    device = str(r.attrs.get("device_name", ""))
    for ax, (key, d) in zip(axes, groups):
        for version, dv in d.groupby("version"):
            dv = dv.groupby("context", as_index=False)["bytes_per_s"].median().sort_values("context")
            ax.plot(dv["context"], dv["bytes_per_s"] / 1e12, marker="o", label=str(version))
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


FIGURES = [
    ("quant_error_vs_format_block", quant_error_heatmap),
    ("quant_error_vs_bits", quant_error_vs_bits),
    ("format_error", format_error_bars),
    ("decode_bandwidth_vs_context", decode_bandwidth),
    ("append_bandwidth", append_bandwidth),
    ("capacity_vs_block_size", capacity_vs_block),
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
