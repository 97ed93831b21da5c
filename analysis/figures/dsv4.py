"""DeepSeek-V4-style substrate figures: capacity vs compression ratio (computed) and the
compressors' decode-attention error vs ratio (CPU reference, synthetic data)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
from matplotlib.lines import Line2D  # noqa: E402

from analysis import style  # noqa: E402
from analysis.figures.common import Skip, _join, _need, _synthetic  # noqa: E402
from analysis.load import Results  # noqa: E402
from analysis.style import paper  # noqa: E402


VARIANT_STYLES = {"public_v4": dict(marker="o", ls="-", ms=4, mfc=None),
                  "per_token_scales": dict(marker="x", ls=":", ms=5, mfc=None)}


def _variant_style(v, i) -> dict:
    st = VARIANT_STYLES.get(str(v))
    if st is None:
        st = [dict(marker="^", ls="-.", ms=4), dict(marker="s", ls="--", ms=4)][i % 2]
    return {k: val for k, val in st.items() if val is not None}


@paper
def capacity_vs_compression(r: Results):
    """DSV4-style stack: concurrent requests vs CSA and HCA compression ratio per storage variant
    (marker) and context (color), against the dense BF16 baseline (dashed)."""
    df = _need(r.ok("dsv4_capacity"), "dsv4_capacity",
               ["csa_ratio_used", "hca_ratio_used", "max_seqs", "dense_max_seqs", "variant", "context"])
    panels = []
    if "hca_ratio" in df.columns:
        d = df[df["hca_ratio"] == 0]
        fixed = style.constants(d, ["hca_ratio_used"], {"hca_ratio_used": lambda v: f"HCA ratio fixed at the stack's {style.value(v)}"})
        panels.append(("csa_ratio_used", "CSA compression ratio (tokens per entry)", fixed, d))
    if "csa_ratio" in df.columns:
        d = df[df["csa_ratio"] == 0]
        fixed = style.constants(d, ["csa_ratio_used"], {"csa_ratio_used": lambda v: f"CSA ratio fixed at the stack's {style.value(v)}"})
        panels.append(("hca_ratio_used", "HCA compression ratio (tokens per entry)", fixed, d))
    panels = [p for p in panels if p[3][p[0]].nunique() > 1]
    if not panels:
        raise Skip("dsv4_capacity points vary no compression ratio")
    fig, axes = style.grid(len(panels), cols=len(panels),
                           width=style.DOUBLE_COLUMN_IN if len(panels) > 1 else style.SINGLE_COLUMN_IN, panel_h=2.4,
                           sharey=True)
    contexts = sorted(df["context"].unique())
    variants = sorted(df["variant"].unique())
    colors = style.series_colors(contexts)
    for i, (ax, (x, xl, fixed, d)) in enumerate(zip(axes, panels)):
        for vi, var in enumerate(variants):
            for ctx in contexts:
                dv = d[(d["variant"] == var) & (d["context"] == ctx)].groupby(x, as_index=False)[
                    ["max_seqs", "dense_max_seqs"]].median().sort_values(x)
                if dv.empty:
                    continue
                ax.plot(dv[x], dv["max_seqs"], color=colors[ctx], gid=f"{var} storage, context {style.value(ctx)}",
                        **_variant_style(var, vi))
                if vi == 0:
                    ax.plot(dv[x], dv["dense_max_seqs"], ls="--", lw=0.8, color=colors[ctx],
                            gid=f"dense BF16 baseline, context {style.value(ctx)}")
        style.log2_axis(ax.xaxis, d[x].unique())
        ax.set_yscale("log")
        style.plain_log(ax.yaxis)
        ax.set_xlabel(xl)
        if i == 0:
            ax.set_ylabel("max concurrent requests")
        ax.set_title(fixed)
    proxies = [(Line2D([], [], color=colors[c], lw=2), f"context {style.tokens_label(c)} tokens") for c in contexts]
    proxies += [(Line2D([], [], color="k", **_variant_style(v, i)), f"{v} storage") for i, v in enumerate(variants)]
    proxies.append((Line2D([], [], color="k", ls="--", lw=0.8), "dense BF16 baseline"))
    style.legend_below(fig, [], extra=proxies)
    m = df.iloc[0]
    const = style.constants(df, ["kv_gib", "gpu"], {"kv_gib": lambda v: f"{style.value(v)} GiB KV budget",
                                                    "gpu": lambda v: f"{v} (modelled)" if v else ""})
    style.title(fig, f"DSV4-style capacity vs compression ratio ({m.get('stack_name', m.get('model', '?'))}, computed)",
                const)
    return fig


@paper
def compression_error_vs_ratio(r: Results):
    """DSV4 compressors on synthetic KV: decode-attention error against the uncompressed cache vs
    compression ratio per layer type (lines: FP32 entries, compression alone; markers: the stored
    entries of each storage variant), the storage loss alone per variant, and the CSA indexer's
    top-k recall."""
    df = _need(r.ok("compression_error"), "compression_error",
               ["layer", "ratio", "attn_rel_l2", "attn_rel_l2_fp32", "attn_storage_rel_l2", "dist", "variant"])
    layers = sorted(df["layer"].unique())
    has_recall = "topk_recall" in df.columns and df["topk_recall"].notna().any()
    n = len(layers) + 1 + int(has_recall)
    fig, axes = style.grid(n, cols=2, width=style.DOUBLE_COLUMN_IN, panel_h=2.0)
    dists = sorted(df["dist"].unique())
    variants = sorted(df["variant"].unique())
    for i, (ax, layer) in enumerate(zip(axes, layers)):
        d = df[df["layer"] == layer]
        for dist in dists:
            dd = d[d["dist"] == dist]
            c = style.dist_color(dist)
            f32 = dd.groupby("ratio", as_index=False)["attn_rel_l2_fp32"].median().sort_values("ratio")
            ax.plot(f32["ratio"], f32["attn_rel_l2_fp32"], color=c, lw=1.0, gid=f"{dist}, FP32 entries")
            for vi, var in enumerate(variants):
                dv = dd[dd["variant"] == var].groupby("ratio", as_index=False)["attn_rel_l2"].median()
                st = _variant_style(var, vi)
                ax.plot(dv["ratio"], dv["attn_rel_l2"], ls="", marker=st["marker"], ms=st.get("ms", 4), gid=f"{dist}, {var} storage",
                        color=c, mfc="none" if st["marker"] in "o^sD" else c)
        style.log2_axis(ax.xaxis, d["ratio"].unique())
        ax.set_yscale("log")
        style.plain_log(ax.yaxis)
        ax.set_xlabel("compression ratio (tokens per entry)")
        ax.set_ylabel("attention rel. L2 error\nvs uncompressed cache")
        ax.set_title(f"{layer.upper()}: compression + storage")
    ax = axes[len(layers)]
    for dist in dists:
        for vi, var in enumerate(variants):
            st = _variant_style(var, vi)
            for layer in layers:
                dv = df[(df["dist"] == dist) & (df["variant"] == var) & (df["layer"] == layer)].groupby(
                    "ratio", as_index=False)["attn_storage_rel_l2"].median()
                # CSA and HCA ratios do not overlap on the x axis: one style per (distribution, variant).
                ax.plot(dv["ratio"], dv["attn_storage_rel_l2"], color=style.dist_color(dist), ls=st["ls"],
                        gid=f"{dist}, {var} storage, {layer.upper()}",
                        marker=st["marker"], ms=st.get("ms", 4), mfc="none" if st["marker"] in "o^sD" else None)
    style.log2_axis(ax.xaxis, df["ratio"].unique())
    ax.set_yscale("log")
    style.plain_log(ax.yaxis)
    ax.set_xlabel("compression ratio (tokens per entry)")
    ax.set_ylabel("attention rel. L2 error,\nstored vs FP32 entries")
    ax.set_title("storage loss alone (" + ", ".join(f"{lay.upper()} {r_}" for lay, r_ in
                                                     ((lay, f"{style.value(df[df['layer'] == lay]['ratio'].min())}-"
                                                            f"{style.value(df[df['layer'] == lay]['ratio'].max())}")
                                                      for lay in layers)) + ")")
    if has_recall:
        ax = axes[len(layers) + 1]
        rec = df[df["topk_recall"].notna()]
        for dist in dists:
            for vi, var in enumerate(variants):
                st = _variant_style(var, vi)
                dv = rec[(rec["dist"] == dist) & (rec["variant"] == var)].groupby("ratio", as_index=False)[
                    "topk_recall"].median()
                if dv.empty:
                    continue
                ax.plot(dv["ratio"], dv["topk_recall"], color=style.dist_color(dist), ls=st["ls"], gid=f"{dist}, {var} storage",
                        marker=st["marker"], ms=st.get("ms", 4), mfc="none" if st["marker"] in "o^sD" else None)
        style.log2_axis(ax.xaxis, rec["ratio"].unique())
        lo = float(rec["topk_recall"].min())
        ax.set_ylim(max(0.0, lo - 0.1 * (1.0 - lo) - 0.02), 1.005)
        ax.set_xlabel("CSA compression ratio (tokens per entry)")
        ax.set_ylabel("indexer top-k recall")
        k = style.constants(rec, ["topk"], {"topk": lambda v: f"top-{style.value(v)}"})
        ax.set_title(f"CSA indexer recall ({k} of the FP32 entries)" if k else "CSA indexer recall")
    proxies = [(Line2D([], [], color=style.dist_color(d_), lw=2), d_) for d_ in dists]
    proxies.append((Line2D([], [], color="k", lw=1.0), "FP32 entries, compression alone (top: lines)"))
    for vi, var in enumerate(variants):
        st = _variant_style(var, vi)
        proxies.append((Line2D([], [], color="k", ls=st["ls"], marker=st["marker"], ms=st.get("ms", 4),
                               mfc="none" if st["marker"] in "o^sD" else None), f"{var} storage (top: markers)"))
    # Rows: the distributions, then the entry kinds (while they fit in a row).
    style.legend_below(fig, [], extra=proxies, ncol=min(4, max(len(dists), 1 + len(variants))))
    shape = style.constants(df, ["queries", "heads"], {"queries": lambda v: f"{style.value(v)} queries",
                                                        "heads": lambda v: f"{style.value(v)} heads"})
    toks = ", ".join(f"{lay.upper()} {style.value(df[df['layer'] == lay]['tokens'].iloc[0])} tokens"
                     for lay in layers) if "tokens" in df.columns else ""
    style.title(fig, "DSV4-style compression: decode-attention error vs compression ratio",
                _join("CPU reference", _synthetic(df), toks, shape))
    return fig


FIGURES = [
    ("capacity_vs_compression_ratio", capacity_vs_compression),
    ("compression_error_vs_ratio", compression_error_vs_ratio),
]
