"""The standard kvlab figures, from result files only.

    python3 -m analysis.figures RESULTS.h5 [MORE.h5 ...] --out DIR [--format png,pdf]

Each figure is made only when its data is in the file(s); the list of what was made and what
was skipped (and why) is printed. Figures are written as PNG (300 dpi) and PDF (TrueType
text), drawn at the width they are printed at (analysis/style.py: single column 3.4 in,
double column 7 in). Several files of one device are read as one (e.g. a GPU sweep and the
peers measured beside it: `data/perf/h100_perf_sweep.h5 data/perf/h100_perf_peers.h5`).

Conventions of every figure: units on every axis; log axes where values span decades; one
color per kernel version / KV format / step variant in every figure (style.py); legends below
the panels, naming only what varies within the figure, the constants in the title; the title
says what was measured or computed, on which device (the file's provenance) and, where the
input is synthetic, that it is.

Layout: one module per subject (quant, gpu, cost_model, capacity, serving, dsv4, and the
decode-step figures of analysis/step_figures.py), each with a FIGURES list of (name,
function); this package's FIGURES is their concatenation in MODULES order. A new subject is
a new module plus one line in MODULES. A figure function takes the loaded results and
returns a matplotlib figure, or raises Skip when its data is not in the file(s).
"""
from __future__ import annotations

import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from analysis import step_figures, style  # noqa: E402
from analysis.figures import capacity, cost_model, dsv4, gpu, quant, serving  # noqa: E402
from analysis.figures.common import PEER_PREFIX, Skip  # noqa: E402,F401  (re-exported)
from analysis.load import ResultFileError, Results, load_many  # noqa: E402

# The figure modules, in the order their figures are listed and made.
MODULES = [quant, gpu, capacity, cost_model, serving, dsv4]

FIGURES = [entry for m in MODULES for entry in m.FIGURES]
FIGURES += step_figures.figures_for(Skip)

# The figure functions under their historical names (callers and tests use these).
quant_error_heatmap = quant.quant_error_heatmap
quant_error_vs_bits = quant.quant_error_vs_bits
format_error_bars = quant.format_error_bars
decode_bandwidth = gpu.decode_bandwidth
append_bandwidth = gpu.append_bandwidth
capacity_vs_block = capacity.capacity_vs_block
simulated_vs_measured = cost_model.simulated_vs_measured
roofline_chart = cost_model.roofline_chart
waste_vs_block_size = serving.waste_vs_block_size
capacity_vs_compression = dsv4.capacity_vs_compression
compression_error_vs_ratio = dsv4.compression_error_vs_ratio


def save(fig, out: str, name: str, formats=("png", "pdf")) -> list:
    """Write fig as OUT/NAME.EXT for each format (PNG at style.PNG_DPI) and close it."""
    paths = []
    with style.rc():
        if fig.get_layout_engine() is None:
            fig.tight_layout()
        for ext in formats:
            p = os.path.join(out, f"{name}.{ext}")
            fig.savefig(p, dpi=style.PNG_DPI, bbox_inches="tight", pad_inches=0.03)
            paths.append(p)
    plt.close(fig)
    return paths


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
        made.append((name, save(fig, out, name, formats), (fn.__doc__ or "").strip()))
    return made, skipped


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m analysis.figures", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="kvlab result file(s) (HDF5) of one device")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--format", default="png,pdf", help="comma-separated: png, pdf, svg")
    a = ap.parse_args(argv)
    formats = [f.strip() for f in a.format.split(",") if f.strip()]
    bad = [f for f in formats if f not in ("png", "pdf", "svg")]
    if bad:
        print(f"analysis.figures: error: unknown format {bad[0]!r} (allowed: png, pdf, svg)", file=sys.stderr)
        return 2
    try:
        r = load_many(a.results)
    except ResultFileError as e:
        print(f"analysis.figures: error: {e}", file=sys.stderr)
        return 2
    try:
        made, skipped = make_figures(r, a.out, formats)
    except OSError as e:
        print(f"analysis.figures: error: cannot write to {a.out}: {e}", file=sys.stderr)
        return 2
    print(f"{' + '.join(a.results)}: {len(r.index)} points ({', '.join(r.kinds()) or 'none'})")
    for name, paths, _ in made:
        print(f"made    {name}: {', '.join(paths)}")
    for name, why in skipped:
        print(f"skipped {name}: {why}")
    return 0

