#!/usr/bin/env python3
"""What the page scatter costs, from result files only.

    python3 experiments/peers/page_order_table.py page_order.h5 [page_order_peers.h5] [--markdown]

Reads the decode_attention rows of a `kvlab sweep` of experiments/configs/page_order.ini (kvlab's
versions with page_order = shuffled and sequential) and, optionally, the peer rows
decode_peers.py wrote for its shapes, and prints one line per (batch, context, KV format, layout):
kvlab's best time and DRAM rate on shuffled pages (what every target is judged on) and on
sequential pages (sequence after sequence in pool order), the cost of the scatter (shuffled /
sequential - 1), cuDNN SDPA on contiguous KV, kvlab against it on each order (shuffled / cuDNN - 1
and sequential / cuDNN - 1: where kvlab is behind on shuffled pages and level or ahead on
sequential ones, the scatter is the whole gap; what stays on sequential pages is the kernel's), and
cuDNN's paged SDPA (peer:cudnn_paged, the row's layout,
on the shuffled page table every paged peer reads: decode_peers.page_table). Above the table: the run's read ceiling R (the
best valid cold contiguous read, run_ceilings.py) and its best scattered-granule read per granule
(bandwidth rows of order scatter: the same bytes in granules of G bytes in a seeded random order).
Rates are working set / median time. Only ok rows are results.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from analysis.load import ResultFileError, load  # noqa: E402
from run_ceilings import run_ceilings  # noqa: E402


def _rate(ws, us):
    return ws / (us * 1e-6) / 1e12 if us and us > 0 and not math.isnan(us) else math.nan


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sweep", help="kvlab sweep file of experiments/configs/page_order.ini")
    ap.add_argument("peers", nargs="?", help="decode_peers.py file of the same run's shapes")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    try:
        res = load(a.sweep)
        peers = load(a.peers).index if a.peers else None
    except (ResultFileError, OSError) as e:
        print(f"page_order_table.py: error: {e}", file=sys.stderr)
        return 2
    df = res.index
    if df.empty or "page_order" not in df.columns:
        print(f"page_order_table.py: error: {a.sweep} has no decode_attention rows with a page_order axis "
              "(a sweep of experiments/configs/page_order.ini)", file=sys.stderr)
        return 2
    R = run_ceilings(res).read
    dev = res.attrs.get("device_name", "?")
    out = [f"device: {dev}; read ceiling R {R / 1e12:.4g} TB/s (contiguous)"]
    bw = df[(df["kind"] == "bandwidth") & (df["status"] == "ok")] if "order" in df.columns else df.iloc[0:0]
    sc = bw[bw["order"] == "scatter"] if not bw.empty else bw
    if not sc.empty:
        parts = []
        for g, rows in sc.groupby("granule"):
            parts.append(f"{int(g)} B {rows['bytes_per_s'].max() / 1e12:.4g}")
        out.append("best scattered-granule read (TB/s): " + ", ".join(parts))
    dec = df[(df["kind"] == "decode_attention") & (df["status"] == "ok")]
    dec = dec[dec["median_us"] > 0]
    cudnn = paged = None
    if peers is not None and not peers.empty:
        cudnn = peers[(peers["status"] == "ok") & (peers["version"] == "peer:sdpa_cudnn")]
        paged = peers[(peers["status"] == "ok") & (peers["version"] == "peer:cudnn_paged")]
    hdr = ["shape", "format", "layout", "shuffled us (TB/s, version)", "sequential us (TB/s, version)",
           "scatter costs", "cuDNN contiguous us (TB/s)", "shuffled vs cuDNN", "sequential vs cuDNN",
           "cuDNN paged, shuffled us (TB/s)"]
    rows = []
    for (b, c, f, lay), g in dec.groupby(["batch", "context", "kv_format", "layout"], sort=True):
        cell = {}
        for order in ("shuffled", "sequential"):
            m = g[g["page_order"] == order]
            if m.empty:
                cell[order] = None
                continue
            best = m.loc[m["median_us"].idxmin()]
            cell[order] = (float(best["median_us"]), _rate(float(best["min_bytes"]), float(best["median_us"])),
                           str(best["version"]))
        ws = float(g["min_bytes"].iloc[0])
        cu, vs = "-", {"shuffled": "-", "sequential": "-"}
        if cudnn is not None:
            m = cudnn[(cudnn["batch"] == b) & (cudnn["context"] == c) & (cudnn["kv_format"] == f)]
            if not m.empty:
                t = float(m["median_us"].min())
                cu = f"{t:.1f} ({_rate(ws, t):.3f})"
                for order, x in cell.items():
                    if x is not None:
                        vs[order] = f"{100 * (x[0] / t - 1):+.1f} %"
        cp = "-"
        if paged is not None:
            m = paged[(paged["batch"] == b) & (paged["context"] == c) & (paged["kv_format"] == f) &
                      (paged["layout"] == lay)]
            if not m.empty:
                t = float(m["median_us"].min())
                cp = f"{t:.1f} ({_rate(ws, t):.3f})"
        fmt = lambda x: "-" if x is None else f"{x[0]:.1f} ({x[1]:.3f}, {x[2]})"  # noqa: E731
        cost = "-"
        if cell["shuffled"] and cell["sequential"]:
            cost = f"{100 * (cell['shuffled'][0] / cell['sequential'][0] - 1):+.1f} %"
        rows.append([f"{int(b)} x {int(c)}", str(f), str(lay), fmt(cell["shuffled"]), fmt(cell["sequential"]), cost,
                     cu, vs["shuffled"], vs["sequential"], cp])
    if a.markdown:
        out.append("| " + " | ".join(hdr) + " |")
        out.append("|" + "---|" * len(hdr))
        out += ["| " + " | ".join(r) + " |" for r in rows]
    else:
        w = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(hdr)]
        out.append("  ".join(h.ljust(w[i]) for i, h in enumerate(hdr)))
        out += ["  ".join(x.ljust(w[i]) for i, x in enumerate(r)) for r in rows]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
