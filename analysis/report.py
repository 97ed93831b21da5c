"""One self-contained HTML page with every figure and table of a result file.

    python3 -m analysis.report RESULTS.h5 --out report.html

The page holds the provenance, a summary per bench (points ok / skipped / failed), the
failed and skipped points with their reasons, every figure (PNG embedded) and the index
table of every bench.
"""
from __future__ import annotations

import argparse
import base64
import html
import os
import sys
import tempfile

import pandas as pd

from analysis.figures import make_figures
from analysis.load import ResultFileError, load

PROVENANCE_KEYS = ["sweep_name", "created_utc", "argv", "git_commit", "git_dirty", "kvlab_version", "build_type",
                   "compiler", "cuda_version", "cuda_archs", "host", "device_name", "device_sm_count",
                   "device_sm_clock_khz", "device_mem_clock_khz", "device_peak_bytes_per_s",
                   "read_ceiling_bytes_per_s", "copy_ceiling_bytes_per_s", "shard", "points_planned",
                   "sweep_fingerprint"]


def _table(df: pd.DataFrame, max_rows: int = 2000) -> str:
    if len(df) > max_rows:
        note = f"<p>first {max_rows} of {len(df)} rows</p>"
        df = df.head(max_rows)
    else:
        note = ""
    return note + df.to_html(index=False, na_rep="", float_format=lambda v: f"{v:.6g}", border=0, classes="t")


def build_report(path: str, out: str) -> dict:
    r = load(path)
    parts = [f"<h1>kvlab results: {html.escape(str(r.attrs.get('sweep_name', os.path.basename(path))))}</h1>",
             f"<p>{html.escape(path)}: {len(r.index)} points</p>", "<h2>Provenance</h2><table class='t'>"]
    for k in PROVENANCE_KEYS:
        if k in r.attrs:
            parts.append(f"<tr><th>{k}</th><td>{html.escape(str(r.attrs[k]))}</td></tr>")
    parts.append("</table>")
    if "config_text" in r.attrs:
        parts.append(f"<details><summary>config</summary><pre>{html.escape(str(r.attrs['config_text']))}</pre></details>")
    idx = r.index
    if not idx.empty:
        summary = idx.groupby(["kind", "status"]).size().unstack(fill_value=0).reset_index()
        parts += ["<h2>Summary</h2>", _table(summary)]
        bad = idx[idx["status"] != "ok"][["point", "key", "status", "reason"]]
        if not bad.empty:
            parts += ["<h2>Skipped and failed points</h2>", _table(bad)]
    with tempfile.TemporaryDirectory() as tmp:
        made, skipped = make_figures(r, tmp, formats=("png",))
        parts.append("<h2>Figures</h2>")
        for name, paths, caption in made:
            data = base64.b64encode(open(paths[0], "rb").read()).decode("ascii")
            parts.append(f"<figure><img src='data:image/png;base64,{data}' alt='{name}'>"
                         f"<figcaption><b>{name}</b>: {html.escape(caption)}</figcaption></figure>")
        if skipped:
            parts.append("<p>Not made (no data in this file):</p><ul>" +
                         "".join(f"<li>{n}: {html.escape(w)}</li>" for n, w in skipped) + "</ul>")
    parts.append("<h2>Tables</h2>")
    for kind in r.kinds():
        d = idx[idx["kind"] == kind].dropna(axis=1, how="all")
        d = d.loc[:, [c for c in d.columns if not (d[c].astype(str) == "").all()]]
        parts += [f"<h3>{html.escape(kind)}</h3>", _table(d)]
    if not r.runs.empty:
        parts += ["<h2>Runs</h2>", _table(r.runs)]
    style = ("body{font-family:sans-serif;margin:2em;max-width:1400px} table.t{border-collapse:collapse;font-size:12px}"
             " .t td,.t th{border:1px solid #ccc;padding:2px 6px;text-align:left} img{max-width:100%}"
             " figure{margin:1em 0}")
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>kvlab report</title><style>{style}</style>"
            f"</head><body>{''.join(parts)}</body></html>")
    with open(out, "w", encoding="utf-8") as f:
        f.write(page)
    return {"figures": [m[0] for m in made], "skipped": [s[0] for s in skipped], "points": len(idx)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m analysis.report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--out", required=True, help="HTML file to write")
    a = ap.parse_args(argv)
    try:
        info = build_report(a.results, a.out)
    except ResultFileError as e:
        print(f"analysis.report: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"analysis.report: error: cannot write {a.out}: {e}", file=sys.stderr)
        return 2
    print(f"wrote {a.out}: {info['points']} points, {len(info['figures'])} figures ({', '.join(info['figures'])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
