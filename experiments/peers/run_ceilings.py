"""run_ceilings: the read ceiling R and copy ceiling C of a `kvlab sweep` file, the way the sweep
defines them: the best valid cold DRAM read (copy) of the whole run.

The rule (experiments/bench/bench.h raise_run_ceiling; this is its Python twin): R starts as the
ceilings pass's (measured before the first point) and is raised by every ceiling row of the run
that beats it. A ceiling row is a bandwidth row of a contiguous kernel (op read for R, copy for C;
order interleaved or ranges, granule 0: scattered-granule reads never), timed cold (cold_l2 1),
whose validation passed, over a working set of at least MIN_L2_MULTIPLE times the L2 the row
recorded; it counts at its fast edge, working_set_bytes / q1 time, the edge the pass takes a
ceiling at. Such a read streams through L2 eight times before its first byte is needed again, so
L2 cannot have served it: beating R means the pass measured R low.

A sweep that applies the rule itself writes the raised R as the file's read_ceiling_bytes_per_s
and the pass's as ceilings_pass_read_bytes_per_s; a file written before (its ceiling row beating
the pass recorded as failed, "timing invalid ...") gets the same R here, so every table reads one R.

rescale() puts every row's ceiling columns (ceiling_bytes_per_s, pct_read_ceiling /
pct_copy_ceiling, floor_us, excess_us, exceeds_ceiling) on the run's R and C: rows timed before
the raise were judged against the pass's R, which their own columns keep.
"""
from __future__ import annotations

import math

MIN_L2_MULTIPLE = 8  # kCeilingRowMinL2Multiple in experiments/bench/bench.h


def _num(x) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def ceiling_rows(df):
    """The ceiling rows of a result file's index (a DataFrame): contiguous, cold, >= 8 x L2,
    validated (ok, or failed only for beating the ceilings: "timing invalid"), with a fast
    edge; column `fast_bytes_per_s` added."""
    need = ("kind", "op", "cold_l2", "working_set_bytes", "l2_bytes", "q1_us", "status")
    if df is None or df.empty or any(c not in df.columns for c in need):
        return df.iloc[0:0] if df is not None else None
    m = df[df["kind"] == "bandwidth"]
    if "order" in m.columns:
        m = m[m["order"].astype(str) != "scatter"]
    if "granule" in m.columns:
        m = m[(m["granule"].fillna(0).astype(float) == 0)]
    reason = m["reason"].astype(str) if "reason" in m.columns else ""
    m = m[(m["status"] == "ok") | ((m["status"] == "failed") & reason.str.startswith("timing invalid"))]
    ws, l2, q1 = (m["working_set_bytes"].astype(float), m["l2_bytes"].astype(float), m["q1_us"].astype(float))
    m = m[(m["cold_l2"] == 1) & (l2 > 0) & (ws >= MIN_L2_MULTIPLE * l2) & (q1 > 0)]
    m = m[m["op"].isin(["read", "copy"])].copy()
    m["fast_bytes_per_s"] = m["working_set_bytes"].astype(float) / (m["q1_us"].astype(float) * 1e-6)
    return m


class RunCeilings:
    """R and C of a run, the pass's, and the rows that raised them (None when the pass's stand)."""

    def __init__(self, read, copy, pass_read, pass_copy, read_row=None, copy_row=None):
        self.read, self.copy = read, copy
        self.pass_read, self.pass_copy = pass_read, pass_copy
        self.read_row, self.copy_row = read_row, copy_row

    def describe(self) -> str:
        """One line: R and C, and for each, what raised it above the pass."""
        def one(name, v, p, row):
            s = f"{name} {v / 1e12:.4g} TB/s"
            if row is not None and v > p:
                s += (f" (raised from the ceilings pass's {p / 1e12:.4g} by the ceiling row "
                      f"{row.get('kernel', row.get('key', '?'))}, {float(row['working_set_bytes']) / 1e6:.0f} MB "
                      f"cold at its fast edge)")
            return s
        return (one("read ceiling R", self.read, self.pass_read, self.read_row) + ", " +
                one("copy ceiling C", self.copy, self.pass_copy, self.copy_row))


def run_ceilings(res) -> RunCeilings:
    """The run's R and C of a loaded sweep file (analysis.load's result: .attrs, .index)."""
    a = res.attrs
    file_r = _num(a.get("read_ceiling_bytes_per_s", 0) or 0)
    file_c = _num(a.get("copy_ceiling_bytes_per_s", 0) or 0)
    pass_r = _num(a.get("ceilings_pass_read_bytes_per_s", file_r) or 0)
    pass_c = _num(a.get("ceilings_pass_copy_bytes_per_s", file_c) or 0)
    R, C, rrow, crow = file_r, file_c, None, None
    rows = ceiling_rows(res.index)
    if rows is not None and not rows.empty:
        for op in ("read", "copy"):
            m = rows[rows["op"] == op]
            if m.empty:
                continue
            best = m.loc[m["fast_bytes_per_s"].idxmax()]
            cur = R if op == "read" else C
            # A run with no ceilings (0) has nothing to raise, as in the sweep.
            if cur > 0 and float(best["fast_bytes_per_s"]) > cur:
                if op == "read":
                    R, rrow = float(best["fast_bytes_per_s"]), best
                else:
                    C, crow = float(best["fast_bytes_per_s"]), best
            elif cur > 0 and float(best["fast_bytes_per_s"]) >= cur * (1 - 1e-9) and (
                    (pass_r if op == "read" else pass_c) < cur):
                # The sweep already raised it (the file's R is this row's): name the row.
                if op == "read":
                    rrow = best
                else:
                    crow = best
    return RunCeilings(R, C, pass_r, pass_c, rrow, crow)


def rescale(df, R: float, C: float):
    """df (an index of kvlab and/or peer rows) with every row's ceiling columns on the run's R
    and C: ceiling_bytes_per_s, pct_read_ceiling or pct_copy_ceiling, floor_us (working set /
    ceiling), excess_us (median - floor), exceeds_ceiling (the slower quartile beating
    max(R, C)). A row's ceiling kind is the one its own pct column names. Rows without a
    ceiling (NaN) stay NaN."""
    df = df.copy()
    if "ceiling_bytes_per_s" not in df.columns:
        return df
    old = df["ceiling_bytes_per_s"].astype(float)
    copy = df["pct_copy_ceiling"].notna() if "pct_copy_ceiling" in df.columns else old != old
    new = old.where(old.isna(), R)
    new = new.where(~copy | old.isna(), C)
    scale = old / new
    for col in ("pct_read_ceiling", "pct_copy_ceiling", "floor_us"):
        if col in df.columns:
            df[col] = df[col].astype(float) * scale
    if "excess_us" in df.columns and "floor_us" in df.columns:
        df["excess_us"] = df["median_us"].astype(float) - df["floor_us"]
        df.loc[old.isna(), "excess_us"] = math.nan
    if "exceeds_ceiling" in df.columns and {"working_set_bytes", "q3_us"} <= set(df.columns):
        bound = max(R, C)
        slow = df["working_set_bytes"].astype(float) / (df["q3_us"].astype(float) * 1e-6)
        had = df["exceeds_ceiling"].notna()
        df.loc[had, "exceeds_ceiling"] = (slow[had] > bound).astype(float)
    df["ceiling_bytes_per_s"] = new
    return df
