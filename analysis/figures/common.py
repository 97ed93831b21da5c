"""What every figure module shares: the "no data" exception, the column checks, the notes
of a title, the order formats are listed in, peers versus kernel versions."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import style
from analysis.skip import Skip


def _need(df: pd.DataFrame, kind: str, cols: list[str]) -> pd.DataFrame:
    if df.empty:
        raise Skip(f"no {kind} points with status ok")
    missing = [c for c in cols if c not in df.columns or df[c].isna().all()]
    if missing:
        raise Skip(f"{kind} points lack {', '.join(missing)}")
    return df


def _synthetic(df: pd.DataFrame, col: str = "dist") -> str:
    """'synthetic data (a, b)' from the generator presets the rows name."""
    names = sorted({str(v) for v in df[col].dropna()}) if col in df.columns else []
    return f"synthetic data ({', '.join(names)})" if names else "synthetic data"


def _join(*parts) -> str:
    return "; ".join(p for p in parts if p)


# The order formats are listed in (widest first); others follow alphabetically.
FORMAT_ORDER = ["fp32", "fp16", "bf16", "fp8_e5m2", "fp8_e4m3", "fp8_e4m3_pt", "mxfp8", "nvfp4",
                "mxfp4", "fp4_e2m1"]


def _format_sorted(names) -> list:
    rank = {f: i for i, f in enumerate(FORMAT_ORDER)}
    return sorted({str(n) for n in names}, key=lambda f: (rank.get(f, len(rank)), f))


PEER_PREFIX = "peer:"


def _is_peer(version) -> bool:
    return str(version).startswith(PEER_PREFIX)


def rate_quartiles(d: pd.DataFrame, x: str, rate: str, bytes_col: str, q1: str = "q1_us",
                   q3: str = "q3_us") -> pd.DataFrame:
    """Per x: the median of `rate` (bytes per second) and its quartile band from the timing
    quartiles of the same rows (low = bytes / q3 time, high = bytes / q1 time, medians over
    the rows of one x). lo / hi are NaN where the rows lack the quartiles."""
    g = d.groupby(x, as_index=False)[rate].median()
    if {bytes_col, q1, q3} <= set(d.columns) and d[[bytes_col, q1, q3]].notna().all(axis=None):
        b = d.assign(_lo=d[bytes_col] / (d[q3] * 1e-6), _hi=d[bytes_col] / (d[q1] * 1e-6))
        band = b.groupby(x, as_index=False)[["_lo", "_hi"]].median()
        g = g.merge(band, on=x, how="left").rename(columns={"_lo": "lo", "_hi": "hi"})
    else:
        g = g.assign(lo=np.nan, hi=np.nan)
    return g.sort_values(x)


plot_with_quartiles = style.plot_with_quartiles
