"""What a drawn figure shows, read back from its artists: the plotted data as one tidy table
(written as NAME.csv next to each figure, so every number in a paper figure can be checked or
re-plotted), and the check that no two series hide each other.

The table has one row per plotted point: figure, panel (0-based), panel_title, series (the
legend label; unlabelled artists get their gid, else a description of their style), artist
(line, errorbar, scatter, bar, heatmap, hline, vline), x, y, y_low and y_high (the error
bar's ends: quartiles where the figure draws them), x_label, y_label (with units) and, for
categorical axes, x_category / y_category. Reference lines (ceilings, targets) are rows too.
"""
from __future__ import annotations

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.image import AxesImage

COLUMNS = ["figure", "panel", "panel_title", "series", "artist", "x", "y", "y_low", "y_high", "x_category",
           "y_category", "x_label", "y_label"]


def _is_colorbar(ax) -> bool:
    return hasattr(ax, "_colorbar") or ax.get_label() == "<colorbar>"


def _series_name(artist) -> str:
    label = str(artist.get_label() or "")
    if label and not label.startswith("_"):
        return label
    gid = artist.get_gid()
    if gid:
        return str(gid)
    try:
        color = mcolors.to_hex(artist.get_color() if hasattr(artist, "get_color") else artist.get_facecolor()[0])
    except (ValueError, IndexError, TypeError, AttributeError):
        color = "?"
    ls = artist.get_linestyle() if hasattr(artist, "get_linestyle") else ""
    return f"(unlabelled {color} {ls})".replace("  ", " ")


def _ticks(axis) -> dict:
    """position -> label of a categorical axis (ticks labelled with non-numeric text)."""
    out = {}
    for t in axis.get_ticklabels():
        text = t.get_text()
        if text:
            out[round(float(t.get_position()[0 if axis.axis_name == "x" else 1]), 6)] = text
    try:
        [float(v.replace("−", "-")) for v in out.values()]
        return {}  # numeric labels: not categories
    except ValueError:
        return out


def figure_data(fig, name: str = "") -> pd.DataFrame:
    rows = []
    panels = [ax for ax in fig.axes if not _is_colorbar(ax)]
    for pi, ax in enumerate(panels):
        base = dict(figure=name, panel=pi, panel_title=ax.get_title(), x_label=ax.get_xlabel(),
                    y_label=ax.get_ylabel())
        xcat, ycat = _ticks(ax.xaxis), _ticks(ax.yaxis)
        skip = set()
        for c in ax.containers:
            if isinstance(c, ErrorbarContainer):
                line, _caps, bars = c.lines
                if line is None:  # bars without a data line (fmt="none"): the points are another artist
                    for coll in bars:
                        skip.add(id(coll))
                        for seg in coll.get_segments():
                            rows.append({**base, "series": _series_name(coll), "artist": "errorbar", "x": seg[0][0],
                                         "y_low": min(seg[0][1], seg[-1][1]), "y_high": max(seg[0][1], seg[-1][1])})
                    continue
                skip.add(id(line))
                x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
                lo, hi = np.full_like(y, np.nan), np.full_like(y, np.nan)
                for coll in bars:
                    for seg in coll.get_segments():
                        (x0, y0), y1 = seg[0], seg[-1][1]
                        k = np.nonzero(np.isclose(x, x0))[0]
                        if len(k):
                            lo[k[0]], hi[k[0]] = min(y0, y1), max(y0, y1)
                    skip.add(id(coll))
                name_ = _series_name(c) if not str(c.get_label() or "").startswith("_") else _series_name(line)
                for xi, yi, l_, h_ in zip(x, y, lo, hi):
                    rows.append({**base, "series": name_, "artist": "errorbar", "x": xi, "y": yi, "y_low": l_,
                                 "y_high": h_})
            elif isinstance(c, BarContainer):
                label = c.get_label()
                for p in c.patches:
                    skip.add(id(p))
                    xc = p.get_x() + p.get_width() / 2
                    h = p.get_height()
                    rows.append({**base, "series": label if label and not label.startswith("_") else _series_name(p),
                                 "artist": "bar", "x": xc, "y": h, "x_category": xcat.get(round(xc, 6), np.nan)})
                if c.errorbar is not None:
                    line, _caps, bars = c.errorbar.lines
                    for coll in bars:
                        skip.add(id(coll))
                        for seg, r in zip(coll.get_segments(), [r for r in rows[-len(c.patches):]]):
                            r["y_low"], r["y_high"] = min(seg[0][1], seg[-1][1]), max(seg[0][1], seg[-1][1])
        for line in ax.lines:
            if id(line) in skip:
                continue
            x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
            if x.size == 0:
                continue
            if line.get_transform() != ax.transData:  # axhline / axvline: axes coordinates on one side
                if np.allclose(y, y[0]) and not np.allclose(x, x[0]):
                    rows.append({**base, "series": _series_name(line), "artist": "hline", "y": y[0]})
                    continue
                if np.allclose(x, x[0]):
                    rows.append({**base, "series": _series_name(line), "artist": "vline", "x": x[0]})
                    continue
            name_ = _series_name(line)
            for xi, yi in zip(x, y):
                rows.append({**base, "series": name_, "artist": "line", "x": xi, "y": yi,
                             "x_category": xcat.get(round(xi, 6), np.nan) if xcat else np.nan})
        for coll in ax.collections:
            if id(coll) in skip or not isinstance(coll, PathCollection):
                continue
            off = np.asarray(coll.get_offsets(), float)
            name_ = _series_name(coll)
            for xi, yi in off:
                rows.append({**base, "series": name_, "artist": "scatter", "x": xi, "y": yi})
        for im in ax.images:
            if not isinstance(im, AxesImage):
                continue
            a = np.asarray(im.get_array(), float)
            for (yi, xi), v in np.ndenumerate(a):
                rows.append({**base, "series": _series_name(im), "artist": "heatmap", "x": xi, "y": v,
                             "x_category": xcat.get(round(float(xi), 6), np.nan),
                             "y_category": ycat.get(round(float(yi), 6), np.nan)})
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df


def overplotted(fig) -> list:
    """Pairs of series in one panel that a reader cannot tell apart: the same color, line
    style and marker over overlapping x ranges, or exactly the same points. Returns [(panel title, series a, series b,
    why)]."""
    bad = []
    for ax in fig.axes:
        if _is_colorbar(ax):
            continue
        seen = {}
        for line in ax.lines:
            x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
            if x.size < 2 or line.get_transform() != ax.transData or not line.get_visible():
                continue
            if not line.get_linestyle() or line.get_linestyle() in ("None", "none", " ", ""):
                if line.get_marker() in ("None", "none", "", " ", None):
                    continue
            name = _series_name(line)
            style = (mcolors.to_hex(line.get_color()), str(line.get_linestyle()), str(line.get_marker()))
            data = (tuple(np.round(x, 9)), tuple(np.round(y, 12)))
            for other, (ostyle, odata) in seen.items():
                if other == name:
                    continue
                ox = np.asarray(odata[0], float)
                overlap = min(ox.max(), x.max()) >= max(ox.min(), x.min())
                if ostyle == style and overlap:  # side by side on the x axis is no overplotting
                    bad.append((ax.get_title(), other, name, f"same style {style}"))
                elif odata == data:
                    bad.append((ax.get_title(), other, name, "identical points"))
            seen.setdefault(name, (style, data))
    return bad


def lines_of(fig) -> list:
    """Every data line of the figure's panels (not reference lines): for tests."""
    return [ln for ax in fig.axes if not _is_colorbar(ax) for ln in ax.lines
            if ln.get_transform() == ax.transData and not isinstance(ln, LineCollection)]
