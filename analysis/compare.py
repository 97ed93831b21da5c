"""Compare two kvlab result files: regressions beyond the noise.

    python3 -m analysis.compare BASE.h5 NEW.h5 [--time-tol 0.03] [--err-tol 0.01] [--csv OUT.csv]

Points are matched by key (study/kind:axes). For each metric present in both:
  time (median, microseconds; columns *_us with an IQR companion *_iqr_us):
      a regression when NEW - BASE > max(1.5 x (IQR_base + IQR_new), time_tol x BASE);
      an improvement symmetrically. Noise-free differences below that are "same".
  error metrics (rel_l2*, nmse, max_abs_err, err_*, nonfinite; lower is better):
      a regression when NEW > BASE x (1 + err_tol) + 1e-12.
  status: ok -> failed is a regression; points missing from NEW are listed.
Exit code: 0 no regression, 1 regressions found, 2 bad input.
"""
from __future__ import annotations

import argparse
import math
import sys

import pandas as pd

from analysis.load import ResultFileError, load

ERROR_PREFIXES = ("rel_l2", "nmse", "max_abs_err", "err_", "nonfinite")


def _is_error_metric(c: str) -> bool:
    return c.startswith(ERROR_PREFIXES)


def _is_time_metric(c: str, cols) -> bool:
    return c.endswith("_us") and not c.endswith("_iqr_us") and (c[:-3] + "_iqr_us") in cols


def compare(base_path: str, new_path: str, time_tol: float = 0.03, err_tol: float = 0.01) -> pd.DataFrame:
    a, b = load(base_path), load(new_path)
    ia = a.index.set_index("key")
    ib = b.index.set_index("key")
    rows = []
    for key in ia.index.difference(ib.index):
        rows.append({"key": key, "metric": "", "base": math.nan, "new": math.nan, "verdict": "missing in new"})
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
        for c in cols:
            va, vb = ra[c], rb[c]
            if not isinstance(va, (int, float)) or not isinstance(vb, (int, float)):
                continue
            if math.isnan(va) or math.isnan(vb):
                continue
            verdict = None
            if _is_time_metric(c, cols):
                noise = max(1.5 * (float(ra[c[:-3] + "_iqr_us"]) + float(rb[c[:-3] + "_iqr_us"])), time_tol * va)
                if vb - va > noise:
                    verdict = "regression"
                elif va - vb > noise:
                    verdict = "improvement"
            elif _is_error_metric(c):
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
    ap.add_argument("--time-tol", type=float, default=0.03, help="relative time change below which it is noise")
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
    print(f"compare {a.base} -> {a.new}: {len(regressions)} regressions, {len(improvements)} improvements, "
          f"{len(missing)} points missing in new")
    with pd.option_context("display.width", 200, "display.max_colwidth", 80):
        if not regressions.empty:
            print(regressions.to_string(index=False))
    return 1 if not regressions.empty else 0


if __name__ == "__main__":
    sys.exit(main())
