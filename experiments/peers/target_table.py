#!/usr/bin/env python3
"""The decode targets' table from one result file: every target P1-P9 of gpu/README.md, the
measured figure (the best kvlab version on each target shape), the best peer on the same
shape, and whether the target holds.

    python3 experiments/peers/target_table.py results/perf.h5 [more.h5 ...] [--markdown]

Reads only the HDF5 result file (analysis.load): rows of kind decode_attention / append
written by experiments/peers/decode_peers.py (or by `kvlab sweep experiments/configs/perf.ini`).
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from analysis.load import load  # noqa: E402

MUST = {"P1": 90, "P2": 80, "P3": 75, "P4": 70}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("h5", nargs="+", help="result files (kvlab rows and peer rows; the first one's ceilings)")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv[1:])
    import pandas as pd
    files = [load(p) for p in a.h5]
    r = files[0]
    df = pd.concat([x.index for x in files], ignore_index=True)
    if "target" not in df.columns:  # a `kvlab sweep` file: the study names the target
        df["target"] = df["study"]
    df["target"] = df["target"].fillna(df.get("study"))
    ok = df[df["status"] == "ok"].copy()
    kv = ok[~ok["version"].str.startswith("peer:")]
    peers = ok[ok["version"].str.startswith("peer:")]

    def best(target, batch, ctx, fmt="bf16", group=4, block=16, layout=None, graph=None):
        m = kv[(kv["target"] == target) & (kv["batch"] == batch) & (kv["context"] == ctx) & (kv["kv_format"] == fmt)
               & (kv["gqa_group"] == group) & (kv["block_size"] == block)]
        if layout:
            m = m[m["layout"] == layout]
        if graph:
            m = m[m["graph"] == graph]
        return None if m.empty else m.loc[m["median_us"].idxmin()]

    def best_peer(batch, ctx, group=4, graph=None):
        m = peers[(peers["batch"] == batch) & (peers["context"] == ctx) & (peers["gqa_group"] == group)]
        if graph:
            m = m[m["graph"] == graph]
        return None if m.empty else m.loc[m["median_us"].idxmin()]

    lines = []

    def row(tid, shape, meas, peer, holds):
        lines.append((tid, shape, meas, peer, holds))

    def fmt_pct(x):
        return f"{x['pct_read_ceiling']:.1f} % ({x['median_us']:.1f} us, {x['version']}, {x['layout']})"

    def fmt_peer(p):
        return "-" if p is None else f"{p['pct_read_ceiling']:.1f} % ({p['median_us']:.1f} us, {p['version'][5:]})"

    shapes = {"P1": [(64, 8192), (64, 32768)], "P2": [(1, 32768), (1, 131072), (4, 32768)],
              "P3": [(8, 2048), (8, 8192), (16, 2048), (16, 4096), (16, 8192)], "P4": [(32, 65536)]}
    for tid, lst in shapes.items():
        for b, c in lst:
            x = best(tid, b, c)
            p = best_peer(b, c) if tid != "P4" else None
            shape = f"{b} x {'1k-64k mixed' if tid == 'P4' else str(c // 1024) + 'k'} bf16"
            if x is None:
                row(tid, shape, "not measured", fmt_peer(p), "n/a")
            else:
                row(tid, shape, fmt_pct(x), fmt_peer(p), "yes" if x["pct_read_ceiling"] >= MUST[tid] else "NO")
    # P5: FP8 vs BF16 on the same shape (each the best version)
    for tid, lst in shapes.items():
        for b, c in lst:
            x16, x8 = best(tid, b, c, "bf16"), best(tid, b, c, "fp8_e4m3")
            if x16 is None or x8 is None:
                continue
            ratio = x16["median_us"] / x8["median_us"]
            shape = f"{b} x {c // 1024}k ({tid})"
            row("P5", shape, f"{ratio:.2f}x ({x8['median_us']:.1f} vs {x16['median_us']:.1f} us; fp8 {x8['pct_read_ceiling']:.1f} %)",
                "- (no FP8 KV in SDPA)", "yes" if ratio >= 1.7 else ("no (never slower)" if ratio >= 1 else "NO (slower)"))
    # P6: block 16/32/64 vs 128 on P1 64 x 8k, each version separately (the best one shown)
    for blk in (16, 32, 64):
        xb, x128 = best("P6" if blk != 16 else "P1", 64, 8192, block=blk), best("P6", 64, 8192, block=128)
        if xb is None or x128 is None:
            continue
        d = 100 * (xb["median_us"] / x128["median_us"] - 1)
        row("P6", f"block {blk} vs 128, 64 x 8k", f"{d:+.1f} % ({xb['median_us']:.1f} vs {x128['median_us']:.1f} us)", "-",
            "yes" if abs(d) <= 3 else "NO")
    x1 = best("P6", 64, 8192, block=1)
    if x1 is not None and best("P6", 64, 8192, block=128) is not None:
        d = 100 * (x1["median_us"] / best("P6", 64, 8192, block=128)["median_us"] - 1)
        row("P6", "block 1 vs 128 (info)", f"{d:+.1f} %", "-", "(not a target)")
    # P7: groups 1, 4, 8: each KV byte once per group => the same time for every group
    x4 = best("P1", 64, 8192)
    for g in (1, 8):
        xg = best("P7", 64, 8192, group=g)
        p = best_peer(64, 8192, group=g)
        if xg is None or x4 is None:
            continue
        d = 100 * (xg["median_us"] / x4["median_us"] - 1)
        row("P7", f"group {g} vs 4, 64 x 8k", f"{d:+.1f} % time; {xg['pct_read_ceiling']:.1f} % of R counting bytes once",
            fmt_peer(p), "yes" if abs(d) <= 3 else "NO")
    # P8
    for c in (512, 1024):
        for f8 in ("bf16", "fp8_e4m3"):
            x = best("P8", 1, c, f8, graph="on")
            if x is None:
                continue
            p = best_peer(1, c, graph="on") if f8 == "bf16" else None
            row("P8", f"1 x {c} {f8}, CUDA graph", f"{x['median_us']:.1f} us ({x['version']})",
                "-" if p is None else f"{p['median_us']:.1f} us ({p['version'][5:]})", "yes" if x["median_us"] <= 15 else "NO")
    # P9
    ap9 = ok[ok["target"] == "P9"]
    for _, x in ap9.iterrows():  # decode_check rows carry the % of copy in pct_read_ceiling; sweep rows in pct_copy_ceiling
        pct = x["pct_copy_ceiling"] if "pct_copy_ceiling" in x and x["pct_copy_ceiling"] == x["pct_copy_ceiling"] else x["pct_read_ceiling"]
        row("P9", f"append 64k tokens {x['kv_format']}", f"{pct:.1f} % of copy ({x['median_us']:.1f} us)", "-",
            "yes" if pct >= 80 else "NO")

    dev = r.attrs.get("device_name", "?")
    print(f"device: {dev}; read ceiling {r.read_ceiling / 1e12:.3f} TB/s, copy {r.copy_ceiling / 1e12:.3f} TB/s")
    if a.markdown:
        print("| target | shape | measured | best peer, same shape | holds |")
        print("|---|---|---|---|---|")
        for t in lines:
            print("| " + " | ".join(t) + " |")
    else:
        for t in lines:
            print(f"{t[0]:3s} {t[1]:30s} {t[2]:58s} {t[3]:36s} {t[4]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
