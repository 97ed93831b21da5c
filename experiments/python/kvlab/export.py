"""python -m kvlab export: kvlab result files as plain tables, one per kind.

    python -m kvlab export results/default.h5 --csv out/          # out/<kind>.csv (+ <kind>.columns.csv)
    python -m kvlab export s0.h5 s1.h5 --parquet out/ --kind decode_attention

Each kind's tidy table (kvlab.load(...)[kind]: its own columns, integer axes as integers,
missing values empty). CSV files get a companion <kind>.columns.csv with every column's
unit and description; Parquet files carry both (and the provenance) in their metadata.
--status ok keeps only the points that ran (default: every status, with the reasons).
Exit codes: 0 written, 2 bad input (unreadable file, unknown kind, no pyarrow for --parquet).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import pandas as pd

from kvlab.results import ResultFileError, load


def _columns_table(df: pd.DataFrame) -> pd.DataFrame:
    units, docs, axes = df.attrs.get("units", {}), df.attrs.get("docs", {}), set(df.attrs.get("axes", []))
    return pd.DataFrame({"column": list(df.columns),
                         "role": ["axis" if c in axes else "metric" if c in df.attrs.get("metrics", []) else "identity"
                                  for c in df.columns],
                         "unit": [units.get(c, "") for c in df.columns],
                         "doc": [docs.get(c, "") for c in df.columns]})


def export(paths, out_dir: str, fmt: str, kinds=None, status=None) -> list:
    """Writes one file per kind into out_dir; returns the paths written."""
    r = load(paths)
    wanted = kinds or r.kinds()
    unknown = [k for k in wanted if k not in r.kinds()]
    if unknown:
        raise ResultFileError(f"no points of kind {', '.join(unknown)} (kinds: {', '.join(r.kinds()) or 'none'})")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ResultFileError("--parquet needs pyarrow (pip install pyarrow, pinned in "
                                  "analysis/requirements.txt)") from None
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for kind in wanted:
        df = r.table(kind, status=status)
        if fmt == "csv":
            p = os.path.join(out_dir, f"{kind}.csv")
            df.to_csv(p, index=False)
            c = os.path.join(out_dir, f"{kind}.columns.csv")
            _columns_table(df).to_csv(c, index=False)
            written += [p, c]
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq
            p = os.path.join(out_dir, f"{kind}.parquet")
            table = pa.Table.from_pandas(df, preserve_index=False)
            meta = dict(table.schema.metadata or {})
            meta[b"kvlab"] = json.dumps({k: df.attrs[k] for k in ("kind", "axes", "metrics", "units", "docs", "files")},
                                        default=str).encode()
            meta[b"kvlab_provenance"] = json.dumps(df.attrs.get("provenance", {}), default=str).encode()
            pq.write_table(table.replace_schema_metadata(meta), p)
            written.append(p)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvlab export", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="kvlab result file(s) (HDF5)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--csv", metavar="DIR", help="write DIR/<kind>.csv and DIR/<kind>.columns.csv")
    g.add_argument("--parquet", metavar="DIR", help="write DIR/<kind>.parquet")
    ap.add_argument("--kind", action="append", help="only this kind (repeatable; default: every kind)")
    ap.add_argument("--status", choices=["ok", "skipped", "failed"], help="only points with this status")
    try:
        a = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    fmt, out = ("csv", a.csv) if a.csv else ("parquet", a.parquet)
    try:
        written = export(a.results, out, fmt, a.kind, a.status)
    except ResultFileError as e:
        print(f"kvlab export: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"kvlab export: error: cannot write {out}: {e}", file=sys.stderr)
        return 2
    for p in written:
        print(f"wrote {p}")
    return 0
