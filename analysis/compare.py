"""Compare two kvlab result files: regressions beyond the noise, missing and new points.

    python3 -m analysis.compare BASE.h5 NEW.h5 [--time-tol 0.03] [--err-tol 0.01] [--csv OUT.csv]

Points are matched by key (study/kind:axes).
  time: the median of a timed point (median_us with its quartiles q1_us / q3_us; decode_step's
      step_us with step_us_q1 / step_us_q3; any X_us with an X_iqr_us companion, band
      median +- IQR / 2; a row with only rel_iqr, band median x (1 +- rel_iqr / 2)). A
      regression when the two noise bands are disjoint (NEW's first quartile above BASE's
      third) AND the median moved by more than time_tol x BASE; an improvement symmetrically.
      Overlapping bands are noise, whatever the medians say.
  timing method: points timed differently (the `flush` label or cold_l2 differ) are listed as
      "timing method changed" and their times are not compared.
  error metrics (rel_l2*, nmse, max_abs_err, err_*, nonfinite; lower is better): a regression
      when NEW > BASE x (1 + err_tol) + 1e-12.
  status: ok -> failed is a regression (a timing recorded as invalid is such a failure).
  points in BASE but not in NEW are "missing in new", points only in NEW are "new in new":
      both listed, neither a regression.
Exit code: 0 no regression, 1 regressions found, 2 bad input.
"""
from __future__ import annotations

import argparse
import math
import sys

import pandas as pd

from analysis.load import ResultFileError, load

ERROR_PREFIXES = ("rel_l2", "nmse", "max_abs_err", "err_", "nonfinite")
# Median columns and their quartile columns, in order of preference (one time per point).
QUARTILE_TIMES = [("median_us", "q1_us", "q3_us"), ("step_us", "step_us_q1", "step_us_q3")]
LISTED = 20  # missing / new keys printed (all of them go to --csv)


def _is_error_metric(c: str) -> bool:
    return c.startswith(ERROR_PREFIXES)


def _num(row, c) -> float:
    v = row.get(c, math.nan) if hasattr(row, "get") else math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def time_band(row, cols) -> tuple[str, float, float, float] | None:
    """(metric, median, low, high) of a timed row's noise band, or None when untimed."""
    for med, q1, q3 in QUARTILE_TIMES:
        if med in cols and not math.isnan(_num(row, med)):
            m = _num(row, med)
            lo, hi = _num(row, q1), _num(row, q3)
            if math.isnan(lo) or math.isnan(hi):
                rel = _num(row, "rel_iqr")
                rel = 0.0 if math.isnan(rel) else rel
                lo, hi = m * (1 - rel / 2), m * (1 + rel / 2)
            return med, m, lo, hi
    for c in cols:
        if c.endswith("_us") and not c.endswith("_iqr_us") and (c[:-3] + "_iqr_us") in cols:
            m, iqr = _num(row, c), _num(row, c[:-3] + "_iqr_us")
            if not math.isnan(m):
                iqr = 0.0 if math.isnan(iqr) else iqr
                return c, m, m - iqr / 2, m + iqr / 2
    return None


def _method(row) -> tuple:
    flush = row.get("flush", "") if hasattr(row, "get") else ""
    cold = _num(row, "cold_l2")
    return ("" if not isinstance(flush, str) else flush, None if math.isnan(cold) else cold)


def _methods_differ(ra, rb) -> bool:
    (fa, ca), (fb, cb) = _method(ra), _method(rb)
    return (fa and fb and fa != fb) or (ca is not None and cb is not None and ca != cb)


def compare(base_path: str, new_path: str, time_tol: float = 0.03, err_tol: float = 0.01) -> pd.DataFrame:
    a, b = load(base_path), load(new_path)
    ia = a.index.set_index("key") if not a.index.empty else pd.DataFrame()
    ib = b.index.set_index("key") if not b.index.empty else pd.DataFrame()
    rows = []
    for key in ia.index.difference(ib.index):
        rows.append({"key": key, "metric": "", "base": math.nan, "new": math.nan, "verdict": "missing in new"})
    for key in ib.index.difference(ia.index):
        rows.append({"key": key, "metric": "", "base": math.nan, "new": math.nan, "verdict": "new in new"})
    shared = ia.index.intersection(ib.index)
    cols = [c for c in ia.columns if c in ib.columns]
    for key in shared:
        ra, rb = ia.loc[key], ib.loc[key]
        if ra["status"] != rb["status"]:
            verdict = "regression" if rb["status"] == "failed" else "status changed"
            rows.append({"key": key, "metric": "status", "base": math.nan, "new": math.nan,
                         "verdict": f"{verdict}: {ra['status']} -> {rb['status']}", "reason": rb["reason"]})
        if ra["status"] != "ok" or rb["status"] != "ok":
            continue
        ta, tb = time_band(ra, cols), time_band(rb, cols)
        if ta and tb and ta[0] == tb[0]:
            if _methods_differ(ra, rb):
                fa, fb = _method(ra)[0], _method(rb)[0]
                rows.append({"key": key, "metric": ta[0], "base": ta[1], "new": tb[1],
                             "verdict": f"timing method changed ({fa or '?'} -> {fb or '?'}): not compared"})
            else:
                (m, va, la, ha), (_, vb, lb, hb) = ta, tb
                verdict = None
                if lb > ha and vb - va > time_tol * va:
                    verdict = "regression"
                elif la > hb and va - vb > time_tol * va:
                    verdict = "improvement"
                if verdict:
                    rows.append({"key": key, "metric": m, "base": va, "new": vb, "verdict": verdict,
                                 "reason": f"{100 * (vb / va - 1):+.1f} %; bands [{la:.4g}, {ha:.4g}] -> "
                                           f"[{lb:.4g}, {hb:.4g}] us"})
        for c in cols:
            if not _is_error_metric(c):
                continue
            va, vb = _num(ra, c), _num(rb, c)
            if math.isnan(va) or math.isnan(vb):
                continue
            verdict = None
            if vb > va * (1 + err_tol) + 1e-12:
                verdict = "regression"
            elif va > vb * (1 + err_tol) + 1e-12:
                verdict = "improvement"
            if verdict:
                rows.append({"key": key, "metric": c, "base": va, "new": vb, "verdict": verdict})
    return pd.DataFrame(rows, columns=["key", "metric", "base", "new", "verdict", "reason"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m analysis.compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--time-tol", type=float, default=0.03,
                    help="relative median change below which a time is the same even with disjoint bands")
    ap.add_argument("--err-tol", type=float, default=0.01, help="relative error increase allowed")
    ap.add_argument("--csv", help="also write the comparison table here")
    a = ap.parse_args(argv)
    if a.time_tol < 0 or a.err_tol < 0:
        print("analysis.compare: error: tolerances must be >= 0", file=sys.stderr)
        return 2
    try:
        df = compare(a.base, a.new, a.time_tol, a.err_tol)
    except ResultFileError as e:
        print(f"analysis.compare: error: {e}", file=sys.stderr)
        return 2
    if a.csv:
        df.to_csv(a.csv, index=False)
    regressions = df[df["verdict"].str.startswith("regression")]
    improvements = df[df["verdict"] == "improvement"]
    missing = df[df["verdict"] == "missing in new"]
    new = df[df["verdict"] == "new in new"]
    changed = df[df["verdict"].str.startswith("timing method changed")]
    print(f"compare {a.base} -> {a.new}: {len(regressions)} regressions, {len(improvements)} improvements, "
          f"{len(missing)} points missing in new, {len(new)} new points, {len(changed)} timed differently")
    with pd.option_context("display.width", 200, "display.max_colwidth", 100):
        for title, part in (("regressions", regressions), ("improvements", improvements),
                            ("timed differently (not compared)", changed)):
            if not part.empty:
                print(f"{title}:")
                print(part.to_string(index=False))
        for title, part in (("missing in new", missing), ("new in new", new)):
            if not part.empty:
                print(f"{title}: " + ", ".join(part["key"].head(LISTED)) +
                      (f" (+{len(part) - LISTED} more)" if len(part) > LISTED else ""))
    return 1 if not regressions.empty else 0


if __name__ == "__main__":
    sys.exit(main())
