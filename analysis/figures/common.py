"""What every figure module shares: the "no data" exception, the column checks, the notes
of a title, the order formats are listed in, peers versus kernel versions."""
from __future__ import annotations

import pandas as pd


class Skip(Exception):
    """A figure whose data is not in the file."""


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
FORMAT_ORDER = ["fp32", "fp16", "bf16", "fp8_e5m2", "e5m2", "fp8_e4m3", "e4m3", "fp8_e4m3_pt", "mxfp8", "nvfp4",
                "mxfp4", "e2m1"]


def _format_sorted(names) -> list:
    rank = {f: i for i, f in enumerate(FORMAT_ORDER)}
    return sorted({str(n) for n in names}, key=lambda f: (rank.get(f, len(rank)), f))


PEER_PREFIX = "peer:"


def _is_peer(version) -> bool:
    return str(version).startswith(PEER_PREFIX)
