"""The standard kvlab figures, from result files only.

    python3 -m analysis.figures RESULTS.h5 [MORE.h5 ...] --out DIR [--format png,pdf]
                                [--no-title] [--only NAME[,NAME...]] [--list]

Each figure is made only when its data is in the file(s); the list of what was made and what
was skipped (and why) is printed. Figures are written as PNG (300 dpi) and PDF (TrueType
text), drawn at the width they are printed at (analysis/style.py: single column 3.4 in,
double column 7 in). Several files of one device are read as one (e.g. a GPU sweep and the
peers measured beside it: `data/perf/h100_perf_sweep.h5 data/perf/h100_perf_peers.h5`).

Next to each figure NAME.{png,pdf} go NAME.csv, the plotted data as one tidy table (every
series, point and error bar, read back from the figure: analysis/figures/data.py), and
NAME.caption.txt: what the figure shows (the title's text, then the figure's description,
then the source files and their git commit). --no-title leaves the title out of the image
for a paper, whose caption (that text file) says it instead. --only makes just the named
figures (--list prints the names).

Conventions of every figure: units on every axis; log axes where values span decades; one
color per kernel version / KV format / step variant in every figure (style.py); legends below
the panels, naming only what varies within the figure, the constants in the title; the title
says what was measured or computed, on which device (the file's provenance) and, where the
input is synthetic, that it is.

Layout: one module per subject (quant, gpu, cost_model, capacity, serving, dsv4, model, and the
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

from analysis import serving_figures, step_figures, style  # noqa: E402
from analysis.figures.data import figure_data  # noqa: E402
from analysis.figures import capacity, cost_model, dsv4, gpu, model, quant, serving  # noqa: E402
from analysis.figures.common import PEER_PREFIX, Skip  # noqa: E402,F401  (re-exported)
from analysis.load import ResultFileError, Results, load_many  # noqa: E402

# The figure modules, in the order their figures are listed and made.
MODULES = [quant, gpu, capacity, cost_model, serving, dsv4, model]

FIGURES = [entry for m in MODULES for entry in m.FIGURES]
FIGURES += step_figures.FIGURES
FIGURES += serving_figures.FIGURES  # GPU serving runs vs the simulator

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


def names() -> list:
    return [n for n, _ in FIGURES]


def caption(fig, fn, r: Results) -> str:
    """The caption of a figure: its title, its description, its sources."""
    what, detail = getattr(fig, "kvlab_title", (fig.get_suptitle().replace("\n", " ").strip(), ""))
    title = f"{what.rstrip('.')}. {detail}" if detail else what
    doc = " ".join((fn.__doc__ or "").split())
    files = getattr(r, "paths", None) or [r.path]
    commit = str(r.attrs.get("git_commit", "") or "")
    dirty = str(r.attrs.get("git_dirty", "0")) not in ("0", "False", "false", "")
    src = f"Source: {', '.join(os.path.basename(str(f)) for f in files)}"
    if commit:
        src += f" (kvlab {commit[:12]}{', uncommitted changes' if dirty else ''})"
    return "\n\n".join(p for p in (title + ("." if title and not title.endswith(".") else ""), doc, src + ".") if p) + "\n"


def make_figures(r: Results, out: str, formats=("png", "pdf"), only=None, titles: bool = True,
                 data: bool = True):
    """Makes the figures the data allows (only those named in `only` when given) into `out`:
    NAME.<format> for each format, NAME.csv (the plotted data) and NAME.caption.txt.
    titles=False leaves the title out of the images (paper mode: the caption file says it).
    Returns (made: list of (name, [paths], caption), skipped: list of (name, reason))."""
    os.makedirs(out, exist_ok=True)
    made, skipped = [], []
    for name, fn in FIGURES:
        if only is not None and name not in only:
            continue
        try:
            fig = fn(r)
        except Skip as e:
            skipped.append((name, str(e)))
            continue
        text = caption(fig, fn, r)
        extra = []
        if data:
            fig.canvas.draw()  # tick labels (categories) exist once drawn
            p = os.path.join(out, f"{name}.csv")
            figure_data(fig, name).to_csv(p, index=False)
            extra.append(p)
        p = os.path.join(out, f"{name}.caption.txt")
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
        extra.append(p)
        if not titles and fig._suptitle is not None:
            fig._suptitle.remove()
            fig._suptitle = None
        made.append((name, save(fig, out, name, formats) + extra, text))
    return made, skipped


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m analysis.figures", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="*", help="kvlab result file(s) (HDF5) of one device")
    ap.add_argument("--out", help="output directory")
    ap.add_argument("--format", default="png,pdf", help="comma-separated: png, pdf, svg")
    ap.add_argument("--no-title", action="store_true",
                    help="paper mode: no title in the images (NAME.caption.txt holds it)")
    ap.add_argument("--only", action="append", metavar="NAME[,NAME]",
                    help="make only these figures (repeatable; --list prints the names)")
    ap.add_argument("--list", action="store_true", help="print the figure names and exit")
    try:
        a = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    if a.list:
        print("\n".join(names()))
        return 0
    if not a.results or not a.out:
        print("analysis.figures: error: give the result file(s) and --out DIR", file=sys.stderr)
        return 2
    formats = [f.strip() for f in a.format.split(",") if f.strip()]
    bad = [f for f in formats if f not in ("png", "pdf", "svg")]
    if bad:
        print(f"analysis.figures: error: unknown format {bad[0]!r} (allowed: png, pdf, svg)", file=sys.stderr)
        return 2
    only = None
    if a.only:
        only = {n.strip() for item in a.only for n in item.split(",") if n.strip()}
        unknown = sorted(only - set(names()))
        if unknown:
            print(f"analysis.figures: error: unknown figure {', '.join(unknown)} (figures: {', '.join(names())})",
                  file=sys.stderr)
            return 2
    try:
        r = load_many(a.results)
    except ResultFileError as e:
        print(f"analysis.figures: error: {e}", file=sys.stderr)
        return 2
    try:
        made, skipped = make_figures(r, a.out, formats, only=only, titles=not a.no_title)
    except OSError as e:
        print(f"analysis.figures: error: cannot write to {a.out}: {e}", file=sys.stderr)
        return 2
    print(f"{' + '.join(a.results)}: {len(r.index)} points ({', '.join(r.kinds()) or 'none'})")
    for name, paths, _ in made:
        print(f"made    {name}: {', '.join(paths)}")
    for name, why in skipped:
        print(f"skipped {name}: {why}")
    return 0
