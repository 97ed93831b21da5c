"""Real-model figures and tables (benches model_quality and real_kv_error).

    python3 -m analysis.figures.model RESULTS.h5 [--out DIR] [--perf data/perf/h100_perf_sweep.h5]

Prints the quality table (format K/V | group | rotation | bytes per token | dPPL | KLD | top-1
agreement, per text and engine) as Markdown and with --out writes the figures; analysis.figures
makes the same figures as part of the standard set.

  model_quality_pareto      bytes per token vs KL divergence and vs dPPL, one marker per K/V
                            format (and rotation / group / scale-rule variant), per text
  model_quality_vs_decode   decode time of each cache format on the H100 perf sweep (the given
                            perf file; data/perf/h100_perf_sweep.h5 by default) vs its dPPL on the
                            real model: the formats both files have
  real_kv_error_per_layer   heatmaps of the per-layer round-trip error (mean relative L2) of the
                            model's real K (pre- and post-RoPE) and V, per scheme and rotation
  real_k_channels           the real K's channel statistics per layer (max |x| per channel, pre
                            RoPE, with V for contrast): the outlier channels
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
from matplotlib.colors import LogNorm  # noqa: E402

from analysis import style  # noqa: E402
from analysis.figures.common import Skip  # noqa: E402
from analysis.load import ResultFileError, Results, load  # noqa: E402
from analysis.style import paper  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_PERF = os.path.join(ROOT, "data", "perf", "h100_perf_sweep.h5")
# Scheme presets of model_quality that are a paged cache format of the perf sweep.
# (One spelling: a scheme preset and its paged format share the canonical name.)
PAGED_FORMAT = {f: f for f in ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3_pt", "nvfp4",
                               "mxfp4")}


def _fmt_label(row) -> str:
    """'K=V nvfp4', 'K fp8_e4m3_pt / V mxfp4', plus the variant (group, rule, rotation,
    BF16 layers, unit scales) when it is not the preset's."""
    k, v = row["k_format"], row["v_format"]
    s = f"K=V {k}" if k == v else f"K {k} / V {v}"
    extra = []
    if int(row.get("group_size", 0) or 0):
        extra.append(f"g{int(row['group_size'])}")
    if str(row.get("scale_rule", "preset")) not in ("preset", "nan"):
        extra.append(str(row["scale_rule"]))
    if int(row.get("hadamard", 0) or 0):
        extra.append(f"H{int(row['hadamard'])}")
    if str(row.get("bf16_layers", "none")) not in ("none", "", "nan"):
        extra.append(f"bf16 layers {row['bf16_layers']}")
    if str(row.get("pool_scale", "calibrated")) == "unit":
        extra.append("unit scales")
    return s + (f" ({', '.join(extra)})" if extra else "")


def quality(r: Results) -> pd.DataFrame:
    df = r.ok("model_quality")
    if df.empty:
        raise Skip("no model_quality rows")
    df = df.copy()
    df["label"] = [_fmt_label(row) for _, row in df.iterrows()]
    return df


def quality_table(r: Results) -> pd.DataFrame:
    """format (K/V) | group | rotation | bytes/token | dPPL | KLD | top-1 agreement, per text."""
    df = quality(r)
    cols = {"text": "text", "engine": "engine", "context": "context", "label": "format (K/V)",
            "group_size": "group", "hadamard": "rotation", "bytes_per_token": "bytes/token",
            "ppl": "ppl", "dppl": "dPPL", "dppl_rel": "dPPL %", "kld_mean": "KLD",
            "kld_p99": "KLD p99", "top1_agree": "top-1 agree"}
    t = df[[c for c in cols if c in df.columns]].rename(columns=cols)
    t["group"] = t["group"].map(lambda g: "preset" if int(g) == 0 else int(g))
    t["rotation"] = t["rotation"].map(lambda h: "none" if int(h) == 0 else f"Hadamard {int(h)}")
    return t.sort_values(["text", "engine", "bytes/token", "KLD"], ascending=[True, True, False, True])


def markdown(t: pd.DataFrame) -> str:
    def cell(x):
        if isinstance(x, float):
            return f"{x:.4g}"
        return str(x)
    lines = ["| " + " | ".join(t.columns) + " |", "|" + "---|" * len(t.columns)]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in t.itertuples(index=False)]
    return "\n".join(lines)


def _model_detail(df: pd.DataFrame) -> str:
    name = df["model_name"].iloc[0] if "model_name" in df.columns else "model"
    sl = str(df["model_slice"].iloc[0]) if "model_slice" in df.columns else ""
    ctx = ", ".join(str(int(c)) for c in sorted(df["context"].unique()))
    return f"{name}{' (slice: ' + sl + ')' if sl and sl != 'nan' else ''}; {ctx} tokens per text; " \
           "KL against the BF16-KV run of the same engine"


@paper
def model_quality_pareto(r: Results):
    """KV-cache bytes per token against the KL divergence (left) and the perplexity change (right)
    of each cache format on real text: lower left is better."""
    df = quality(r)
    texts = sorted(df["text"].unique())
    fig, axes = style.grid(2 * len(texts), cols=2, panel_h=2.4)
    labels = sorted(df["label"].unique())
    colors = style.series_colors(labels)
    for ti, text in enumerate(texts):
        d = df[df["text"] == text]
        for j, (metric, name) in enumerate((("kld_mean", "mean KL(p_bf16 || q) (nat)"),
                                            ("dppl", "dPPL (ppl - ppl_bf16)"))):
            ax = axes[2 * ti + j]
            for lab in labels:
                s = d[d["label"] == lab]
                for eng, mk in (("cpu", "o"), ("gpu", "^")):
                    e = s[s["engine"] == eng] if "engine" in s.columns else s
                    if e.empty:
                        continue
                    y = e[metric].to_numpy(dtype=float)
                    if metric == "kld_mean":
                        y = np.maximum(y, 1e-7)  # the BF16 row itself has KL 0: drawn at 1e-7
                    ax.scatter(e["bytes_per_token"], y, color=colors[lab], marker=mk, s=22,
                               label=lab if eng == "cpu" else f"{lab} (GPU engine)")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("KV-cache bytes per token (all layers, K + V)")
            if metric == "kld_mean":
                ax.set_yscale("log")
            else:
                ax.axhline(0, color="0.6", lw=0.6)
            ax.set_ylabel(name)
            ax.set_title(f"text {text}" + (" (KL 0 drawn at 1e-7)" if metric == "kld_mean" else ""),
                         fontsize=7)
    style.legend_below(fig, ncol=2)
    style.title(fig, "What each KV-cache format does to a real model's next-token distribution",
                _model_detail(df))
    return fig


def _perf_times(perf: Results) -> pd.DataFrame:
    """Best decode time per KV format at the (batch, context) all formats share (graph off)."""
    d = perf.ok("decode_attention")
    if d.empty:
        raise Skip("the perf file has no decode_attention rows")
    if "graph" in d.columns:
        d = d[d["graph"].astype(str) == "off"]
    shapes = d.groupby(["batch", "context"])["kv_format"].nunique()
    best_shape = shapes[shapes == shapes.max()].index.max()
    b, c = best_shape
    s = d[(d["batch"] == b) & (d["context"] == c)]
    t = s.groupby("kv_format")["median_us"].min().reset_index()
    t["perf_batch"], t["perf_context"] = b, c
    t["perf_head_dim"] = s["head_dim"].iloc[0] if "head_dim" in s.columns else math.nan
    return t


@paper
def model_quality_vs_decode(r: Results, perf_path: str = DEFAULT_PERF):
    """Decode-attention time of each cache format (the H100 perf sweep) against the dPPL and KL
    the same format causes on the real model (CPU run): the price of quality in time."""
    df = quality(r)
    df = df[(df["k_format"] == df["v_format"]) & (df["group_size"] == 0) & (df["hadamard"] == 0)]
    df = df[df["k_format"].isin(PAGED_FORMAT)]
    if "bf16_layers" in df.columns:
        df = df[df["bf16_layers"].astype(str) == "none"]
    if df.empty:
        raise Skip("no model_quality rows of a paged cache format")
    if not os.path.exists(perf_path):
        raise Skip(f"no perf file {perf_path}")
    perf = load(perf_path)
    times = _perf_times(perf)
    keep = ["text", "k_format", "dppl", "kld_mean", "context", "model_name", "model_slice"]
    df = df[[c for c in keep if c in df.columns]]  # a mixed result file has other kinds' columns
    df = df.assign(kv_format=df["k_format"].map(PAGED_FORMAT)).merge(times, on="kv_format")
    if df.empty:
        raise Skip("no cache format in both the quality rows and the perf file")
    texts = sorted(df["text"].unique())
    fig, axes = style.grid(2, cols=2, panel_h=2.4)
    for j, (metric, name) in enumerate((("dppl", "dPPL (ppl - ppl_bf16)"),
                                        ("kld_mean", "mean KL(p_bf16 || q) (nat)"))):
        ax = axes[j]
        for text, mk in zip(texts, "osD^v"):
            d = df[df["text"] == text]
            for _, row in d.iterrows():
                y = max(row[metric], 1e-7) if metric == "kld_mean" else row[metric]
                ax.scatter(row["median_us"], y, color=style.format_color(row["kv_format"]), marker=mk,
                           s=26, label=f"{row['kv_format']}")
                ax.annotate(row["kv_format"], (row["median_us"], y), fontsize=6, xytext=(3, 2),
                            textcoords="offset points")
            ax.scatter([], [], color="0.4", marker=mk, label=f"text {text}")
        ax.set_xlabel("decode-attention time (µs, H100, best version)")
        ax.set_ylabel(name)
        if metric == "kld_mean":
            ax.set_yscale("log")
    style.legend_below(fig, ncol=4)
    t0 = df.iloc[0]
    style.title(fig, "Decode time (H100) vs a real model's quality, per KV-cache format",
                f"time: {os.path.basename(perf_path)}, {style.device(perf) or 'H100'}, batch "
                f"{int(t0['perf_batch'])} x context {int(t0['perf_context'])}, head_dim {style.value(t0['perf_head_dim'])}; "
                f"quality: {_model_detail(df)}")
    return fig


def _layer_errors(r: Results, df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for _, row in df.iterrows():
        t = r.trace(row, "layers")
        g, h = int(float(row["group_size"])), int(float(row["hadamard"]))
        lab = row["scheme"] + (f" g{g}" if g else "") + \
            (f" {row['scale_rule']}" if row["scale_rule"] != "preset" else "") + (f" H{h}" if h else "")
        for _, tr in t.iterrows():
            rows.append({"tensor": row["tensor"], "label": lab, "layer": int(tr["layer"]),
                         "rel_l2_mean": tr["rel_l2_mean"]})
    return pd.DataFrame(rows)


@paper
def real_kv_error_per_layer(r: Results):
    """Per-layer round-trip error (mean relative L2 over (token, head) rows) of the real model's K
    before and after RoPE and of V, for each scheme and rotation."""
    df = r.ok("real_kv_error")
    if df.empty:
        raise Skip("no real_kv_error rows")
    df = df[pd.to_numeric(df["layer"], errors="coerce") == -1]  # a mixed file's column: text
    if df.empty:
        raise Skip("no real_kv_error rows over every layer (layer = -1)")
    e = _layer_errors(r, df)
    tensors = [t for t in ("k_pre_rope", "k_post_rope", "v") if t in set(e["tensor"])]
    labels = sorted(e["label"].unique())
    fig, axes = style.grid(len(tensors), cols=1, panel_h=0.35 + 0.16 * len(labels), width=style.DOUBLE_COLUMN_IN)
    vmin, vmax = e["rel_l2_mean"].min(), e["rel_l2_mean"].max()
    im = None
    for ax, tensor in zip(axes, tensors):
        m = e[e["tensor"] == tensor].pivot_table(index="label", columns="layer", values="rel_l2_mean")
        m = m.reindex(labels)
        im = ax.imshow(m.to_numpy(), aspect="auto", cmap="viridis",
                       norm=LogNorm(vmin=max(vmin, 1e-6), vmax=vmax))
        ax.grid(False)
        ax.set_yticks(range(len(labels)), labels, fontsize=6)
        ax.set_xticks(range(0, m.shape[1], max(1, m.shape[1] // 15)))
        ax.set_xlabel("layer")
        ax.set_title({"k_pre_rope": "K before RoPE", "k_post_rope": "K after RoPE (cached)",
                      "v": "V"}[tensor], fontsize=7)
    fig.colorbar(im, ax=axes, label="mean relative L2 error", shrink=0.8)
    tokens = int(float(df["tokens"].iloc[0]))
    style.title(fig, "Quantization error of a real model's K and V, per layer",
                f"{df['model_name'].iloc[0] if 'model_name' in df.columns else ''}, {df['text'].iloc[0]}, "
                f"{tokens} tokens, BF16-KV run; one scale set per (token, head) row of the scheme")
    return fig


@paper
def real_k_channels(r: Results):
    """The real K's channels: max |x| over tokens per layer and channel (head x head_dim), before
    RoPE and after it, with V for contrast; a few channels carry outliers in every layer."""
    df = r.ok("real_kv_error")
    if df.empty:
        raise Skip("no real_kv_error rows")
    df = df[pd.to_numeric(df["layer"], errors="coerce") == -1]
    panels = []
    for tensor, name in (("k_pre_rope", "K before RoPE"), ("k_post_rope", "K after RoPE"), ("v", "V")):
        d = df[df["tensor"] == tensor]
        if not d.empty:
            panels.append((name, r.trace(d.iloc[0], "channels")))
    if not panels:
        raise Skip("no real_kv_error rows over every layer")
    fig, axes = style.grid(len(panels), cols=len(panels), panel_h=2.6)
    vmax = max(t["amax"].max() for _, t in panels)
    im = None
    for ax, (name, t) in zip(axes, panels):
        m = t.pivot_table(index="layer", columns="channel", values="amax")
        im = ax.imshow(m.to_numpy(), aspect="auto", cmap="magma", norm=LogNorm(vmin=1e-2, vmax=vmax))
        ax.grid(False)
        ax.set_xlabel("channel (head x head_dim + dim)")
        ax.set_ylabel("layer")
        ratio = (m.max(axis=1) / m.median(axis=1)).median()
        ax.set_title(f"{name}\nmax / median channel {ratio:.1f}x (median layer)", fontsize=7)
    fig.colorbar(im, ax=axes, label="max |x| over tokens", shrink=0.8)
    d0 = df.iloc[0]
    style.title(fig, "Channel statistics of a real model's K and V: outlier channels",
                f"{d0.get('model_name', '')}, {d0['text']}, {int(float(d0['tokens']))} tokens, BF16-KV run")
    return fig


FIGURES = [
    ("model_quality_pareto", model_quality_pareto),
    ("model_quality_vs_decode", model_quality_vs_decode),
    ("real_kv_error_per_layer", real_kv_error_per_layer),
    ("real_k_channels", real_k_channels),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m analysis.figures.model", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--out", default="", help="directory for the figures (PNG and PDF)")
    ap.add_argument("--perf", default=DEFAULT_PERF, help="perf sweep file for the decode-time join")
    a = ap.parse_args(argv)
    try:
        r = load(a.results)
    except ResultFileError as e:
        print(f"analysis.figures.model: error: {e}", file=sys.stderr)
        return 2
    try:
        print(markdown(quality_table(r)))
    except Skip as e:
        print(f"quality table: {e}")
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        for name, fn in FIGURES:
            try:
                fig = fn(r, a.perf) if fn is model_quality_vs_decode else fn(r)
            except Skip as e:
                print(f"skipped {name}: {e}")
                continue
            with style.rc():
                for ext in ("png", "pdf"):
                    fig.savefig(os.path.join(a.out, f"{name}.{ext}"), dpi=style.PNG_DPI,
                                bbox_inches="tight", pad_inches=0.03)
            plt.close(fig)
            print(f"wrote {a.out}/{name}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
