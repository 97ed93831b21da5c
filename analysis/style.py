"""The house style of every kvlab figure: sizes for a two-column paper, fonts readable at that
size, one color per kernel version / KV format / step variant across all figures, legends outside
the data, titles that say what was measured, where, and whether the data is synthetic.

Sizes: a figure is drawn at the width it will be printed at (single column 3.4 in, double
column 7.0 in) with 7-8 pt text, so no figure has to be shrunk (and its text with it) to fit.
Colors: a fixed table for the names kvlab writes today; any other name gets a color derived
from the name itself (not from its position in one file), so a new version keeps its color in
every figure and every file.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker as mticker  # noqa: E402
import numpy as np  # noqa: E402

from analysis.load import canonical_format  # noqa: E402

SINGLE_COLUMN_IN = 3.4
DOUBLE_COLUMN_IN = 7.0
PNG_DPI = 300

RC = {
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "legend.title_fontsize": 7,
    "figure.titlesize": 8.5,
    "lines.linewidth": 1.2,
    "lines.markersize": 3.5,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "axes.linewidth": 0.6,
    "legend.frameon": False,
    "legend.handlelength": 1.8,
    "legend.columnspacing": 1.2,
    "savefig.dpi": PNG_DPI,
    "pdf.fonttype": 42,  # TrueType in the PDF: editable text, accepted by every publisher
    "ps.fonttype": 42,
    "axes.formatter.use_mathtext": False,
}

# tab10 without the two pale colors (gray, olive) that vanish on a projector, plus darker tones.
_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
            "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354"]

VERSION_COLORS = {
    "v0_cached_attention": "#393b79",
    "v1_paged_attention": "#8c564b",
    "v2_paged_attention_partitioned": "#e377c2",
    "v3_flash_decoding": "#1f77b4",
    "v4_mma_decode": "#ff7f0e",
    "v5_mma_decode_2stage": "#2ca02c",
    "v6_stream_k_decode": "#7b4173",
    "v7_mma_decode_l2_prefetch": "#e6550d",
    "v8_mma_decode_bulk_page": "#bd9e39",
    "v9_mma_decode_bulk_rows": "#6b6ecf",
    "v10_mma_decode_tma_swizzle": "#08519c",
    "v11_mma_decode_cluster_merge": "#a63603",
    "v12_mma_decode_last_block_merge": "#006d2c",
    "v13_mma_decode_eight_warps": "#54278f",
    "v14_mma_decode_page_heads": "#9e9ac8",
    "v15_mma_decode_stream_k": "#de2d26",
    "v16_mma_decode_shared_tiles": "#41ab5d",
    "auto": "#843c39",
    "peer:sdpa_cudnn": "#d62728",
    "peer:sdpa_flash": "#9467bd",
    "peer:sdpa_efficient": "#7f7f7f",
    "peer:sdpa_efficient+repeat": "#bcbd22",
    "peer:flashinfer": "#17becf",
}
# KV formats (kv_format), element formats (format_error) and quantization schemes (quant_error)
# share one table, one key per format in its canonical spelling (reference/layout/
# layout_names.h; older spellings are mapped by load.canonical_format): a scheme has the
# color of the KV format it stores as.
FORMAT_COLORS = {
    "fp32": "#000000",
    "bf16": "#1f77b4",
    "fp16": "#17becf",
    "fp8_e4m3": "#ff7f0e",
    "fp8_e4m3_pt": "#d62728",
    "fp8_e5m2": "#8c564b",
    "fp8_ds_mla": "#e377c2",
    "mxfp8": "#637939",
    "nvfp4": "#2ca02c",
    "fp4_e2m1": "#2ca02c",
    "mxfp4": "#9467bd",
    "mxfp4_hadamard": "#8c6d31",
}
FORMAT_MARKERS = {"bf16": "o", "fp16": "o", "fp8_e4m3": "s", "fp8_e4m3_pt": "s", "fp8_e5m2": "D",
                  "fp8_ds_mla": "P", "mxfp8": "X", "nvfp4": "^", "mxfp4": "v", "mxfp4_hadamard": "<"}
VARIANT_COLORS = {"eager_unfused": "#1f77b4", "eager_fused": "#ff7f0e", "graph_fused": "#2ca02c",
                  "graph_unfused": "#d62728"}
# Synthetic distributions (reference/synth presets and the format_error generators).
DIST_COLORS = {"gaussian": "#1f77b4", "heavy_tailed": "#ff7f0e", "ar1": "#2ca02c", "kcache": "#d62728",
               "laplace": "#9467bd", "student_t3": "#8c564b", "outlier_channels": "#e377c2", "uniform": "#17becf"}


def _hashed(name: str) -> str:
    h = int(hashlib.sha1(name.encode("utf-8")).hexdigest(), 16)
    return _PALETTE[h % len(_PALETTE)]


def version_color(v) -> str:
    """The fixed color of a registered version or peer; a name outside the table gets a hashed
    color from the palette colors that no table entry uses, so it never looks like another."""
    fixed = VERSION_COLORS.get(str(v))
    if fixed:
        return fixed
    used = set(VERSION_COLORS.values())
    free = [c for c in _PALETTE if c not in used]
    h = int(hashlib.sha1(("version:" + str(v)).encode("utf-8")).hexdigest(), 16)
    return free[h % len(free)]


# Markers per version, so that versions whose lines coincide stay visible (the color alone
# would hide one under the other); peers are crosses.
VERSION_MARKERS = {"v0_cached_attention": "v", "v1_paged_attention": "s", "v2_paged_attention_partitioned": "D",
                   "v3_flash_decoding": "o", "v4_mma_decode": "^", "v5_mma_decode_2stage": "P", "auto": "*"}
_MARKER_CYCLE = ["<", ">", "h", "p", "X", "d"]


def version_marker(v) -> str:
    v = str(v)
    if v.startswith("peer:"):
        return "x"
    fixed = VERSION_MARKERS.get(v)
    if fixed:
        return fixed
    return _MARKER_CYCLE[int(hashlib.sha1(("marker:" + v).encode("utf-8")).hexdigest(), 16) % len(_MARKER_CYCLE)]


def format_color(f) -> str:
    f = canonical_format(str(f))
    return FORMAT_COLORS.get(f) or _hashed("format:" + f)


def format_marker(f) -> str:
    return FORMAT_MARKERS.get(canonical_format(str(f)), "o")


def variant_color(v) -> str:
    return VARIANT_COLORS.get(str(v)) or _hashed("variant:" + str(v))


def dist_color(d) -> str:
    return DIST_COLORS.get(str(d)) or _hashed("dist:" + str(d))


def series_colors(names) -> dict:
    """Distinct colors for series that have no fixed meaning across figures (contexts, GPUs):
    palette order over the sorted names."""
    return {n: _PALETTE[i % len(_PALETTE)] for i, n in enumerate(sorted(names, key=str))}


# ---- figures ----------------------------------------------------------------------------------
def paper(fn):
    """Decorator: build the figure under RC (fonts are fixed when the artists are made)."""
    @functools.wraps(fn)
    def wrapped(*a, **k):
        with plt.rc_context(RC):
            return fn(*a, **k)
    return wrapped


@contextlib.contextmanager
def rc():
    with plt.rc_context(RC):
        yield


def figure(width: float = SINGLE_COLUMN_IN, height: float = 2.5):
    fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    return fig, ax


def grid(n: int, cols: int | None = None, width: float = DOUBLE_COLUMN_IN, panel_h: float = 2.0,
         sharex=False, sharey=False, width_ratios=None):
    """n panels on a grid of at most `cols` columns; unused cells removed (no empty panels)."""
    cols = cols or min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width, panel_h * rows + 0.2), squeeze=False,
                             layout="constrained", sharex=sharex, sharey=sharey,
                             gridspec_kw={"width_ratios": width_ratios} if width_ratios else None)
    for ax in axes.flat[n:]:
        fig.delaxes(ax)
    return fig, list(axes.flat[:n])


def _figure_handles(fig, axes=None):
    """The labelled artists of the panels, first occurrence of each label, in drawing order."""
    handles, labels = {}, []
    for ax in (axes if axes is not None else fig.axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab and not lab.startswith("_") and lab not in handles:
                handles[lab] = h
                labels.append(lab)
    return handles, labels


def legend_below(fig, axes=None, ncol: int | None = None, extra=None):
    """One legend for the whole figure, outside and below the panels, without duplicates."""
    handles, labels = _figure_handles(fig, axes)
    for h, lab in (extra or []):
        if lab not in handles:
            handles[lab] = h
            labels.append(lab)
    if not labels:
        return None
    if ncol is None:
        longest = max(len(s) for s in labels)
        width_in = fig.get_figwidth()
        ncol = max(1, min(len(labels), int(width_in / (0.4 + 0.045 * longest))))
    ncol = min(ncol, len(labels))
    # Matplotlib fills a legend column by column; read row by row, the entries keep their order.
    rows = math.ceil(len(labels) / ncol)
    order = [r * ncol + c for c in range(ncol) for r in range(rows) if r * ncol + c < len(labels)]
    labels = [labels[i] for i in order]
    return fig.legend([handles[lab] for lab in labels], labels, loc="outside lower center", ncol=ncol)


def legend_right(fig, axes=None):
    """One legend outside, right of the panels (for tall single-column figures)."""
    handles, labels = _figure_handles(fig, axes)
    if not labels:
        return None
    return fig.legend([handles[lab] for lab in labels], labels, loc="outside right center")


def title(fig, what: str, detail: str = ""):
    """The figure title: what was measured, then the constants and provenance, wrapped to the
    figure's width (one suptitle, so the constrained layout keeps the panels clear of it)."""
    chars = int(fig.get_figwidth() * 15)
    lines = textwrap.wrap(what, chars, break_on_hyphens=False)
    if detail:
        lines += textwrap.wrap(detail, chars, break_on_hyphens=False)
    fig.suptitle("\n".join(lines), fontsize=RC["figure.titlesize"])
    fig.kvlab_title = (what, detail)  # for the caption file (analysis/figures: caption())


def plot_with_quartiles(ax, x, y, lo, hi, scale: float = 1.0, **kw):
    """A line with quartile error bars where lo / hi are known (else a plain line)."""
    x, y, lo, hi = (np.asarray(v, dtype=float) for v in (x, y, lo, hi))
    if np.isfinite(lo).all() and np.isfinite(hi).all() and len(y):
        err = np.vstack([np.maximum(y - lo, 0), np.maximum(hi - y, 0)]) * scale
        c = ax.errorbar(x, y * scale, yerr=err, capsize=1.5, elinewidth=0.6, capthick=0.6, **kw)
        # The label on the data line, as for a plain line (legends and readers find it there).
        c.lines[0].set_label(kw.get("label", ""))
        c.set_label("_" + str(kw.get("label", "")))
        return c
    return ax.plot(x, y * scale, **kw)


# ---- provenance ---------------------------------------------------------------------------------
def device(r) -> str:
    """The device a measurement ran on, from the file's provenance ('' when the file has none)."""
    name = str(r.attrs.get("device_name", "") or "").strip()
    present = str(r.attrs.get("device_present", "1")).strip()
    return name if name and present not in ("0", "False", "false") else ""


def measured_on(r) -> str:
    d = device(r)
    return f"measured on {d}" if d else "device not recorded in the file"


def constants(df, keys, fmt=None) -> str:
    """'key value, ...' for the keys that hold one value in df (for a title or footnote)."""
    out = []
    for k in keys:
        if k in df.columns and df[k].nunique(dropna=True) == 1:
            v = df[k].dropna().iloc[0]
            out.append((fmt or {}).get(k, lambda x, k=k: f"{k} {value(x)}")(v))
    return ", ".join(s for s in out if s)


def value(v) -> str:
    if isinstance(v, (float, np.floating)):
        if math.isfinite(v) and float(v).is_integer():
            return str(int(v))
        return f"{v:g}"
    return str(v)


def varying(df, keys) -> list:
    return [k for k in keys if k in df.columns and df[k].nunique(dropna=True) > 1]


# ---- axes -------------------------------------------------------------------------------------
def tokens_label(x, _pos=None) -> str:
    """512, 2k, 128k, 1M: token counts as people write them."""
    if x <= 0:
        return ""
    if x >= 1 << 20 and x % (1 << 20) == 0:
        return f"{int(x) >> 20}M"
    if x >= 1024 and x % 1024 == 0:
        return f"{int(x) >> 10}k"
    return f"{x:g}"


def log2_axis(axis, values=None, tokens: bool = False, max_labels: int = 8):
    """A base-2 log axis with plain labels (1, 16, 128; or 512, 8k, 128k for token counts):
    ticks at the data's own values when there are few of them, at most max_labels labelled
    (evenly spread, the ends kept)."""
    if axis is axis.axes.xaxis:
        axis.axes.set_xscale("log", base=2)
    else:
        axis.axes.set_yscale("log", base=2)
    fmt = tokens_label if tokens else (lambda x, _p=None: f"{x:g}")
    vals = sorted({float(v) for v in values if v == v and v > 0}) if values is not None else []
    if 0 < len(vals) <= 12:
        axis.set_major_locator(mticker.FixedLocator(vals))
        shown = _spread(vals, max_labels)
        axis.set_major_formatter(mticker.FuncFormatter(lambda x, _p: fmt(x) if any(
            abs(x - v) <= 1e-9 * v for v in shown) else ""))
    else:
        axis.set_major_locator(mticker.LogLocator(base=2, numticks=max_labels + 1))
        axis.set_major_formatter(mticker.FuncFormatter(lambda x, _p: fmt(x)))
    axis.set_minor_locator(mticker.NullLocator())


def _spread(vals, n: int) -> list:
    """At most n of the sorted positive vals, evenly spread on a log scale, both ends kept."""
    if len(vals) <= 2:
        return list(vals)
    lo, hi = math.log2(vals[0]), math.log2(vals[-1])
    # Labels closer than 1/9 of the span collide at panel width (256 and 512 on 1..512), however few.
    gap = max((hi - lo) / max(1, n - 1) * 0.99 if len(vals) > n else 0.0, (hi - lo) / 9.0 * 1.01)
    out = [vals[0]]
    for v in vals[1:-1]:
        if math.log2(v) - math.log2(out[-1]) >= gap and hi - math.log2(v) >= gap:
            out.append(v)
    out.append(vals[-1])
    return out


def plain_log(axis):
    """A base-10 log axis labelled 0.1, 1, 10, 100 instead of 10^-1..10^2."""
    axis.set_major_formatter(mticker.FuncFormatter(_plain))
    axis.set_minor_formatter(mticker.FuncFormatter(lambda x, _p: _plain(x) if _minor_labelled(axis, x) else ""))


def _is_2_or_5(x) -> bool:
    if x <= 0:
        return False
    m = x / 10 ** math.floor(math.log10(x) + 1e-9)
    return abs(m - 2) < 1e-6 or abs(m - 5) < 1e-6


def _minor_labelled(axis, x) -> bool:
    """Below ~1.5 decades the 2s and 5s are labelled too; below one decade also the 3s and 7s
    (else a panel can show a single labelled tick)."""
    lo, hi = axis.get_view_interval()
    if not (lo > 0 and x > 0):
        return False
    if hi / lo < 10:
        m = x / 10 ** math.floor(math.log10(x) + 1e-9)
        return any(abs(m - k) < 1e-6 for k in (2, 3, 5, 7))
    return _sparse_minor(axis) and _is_2_or_5(x)


def _sparse_minor(axis) -> bool:
    lo, hi = axis.get_view_interval()
    return lo > 0 and hi / lo < 30  # fewer than ~1.5 decades: label 2 and 5 too


def _plain(x, _pos=None) -> str:
    if x == 0:
        return "0"  # the floor of a symlog axis
    if x < 0:
        return ""
    if 1e-3 <= x < 1e5:
        return f"{x:g}"
    e = math.floor(math.log10(x) + 1e-9)
    m = x / 10 ** e
    return f"{m:g}e{e}" if abs(m - 1) > 1e-9 else f"1e{e}"
