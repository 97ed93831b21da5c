#!/usr/bin/env python3
"""The split table of the decode-kernel GPU stage: for every shape of one or more
`kvlab sweep` files (experiments/configs/decode_splits.ini, perf_kernels.ini), each tensor-core
version's time with its own plan (num_splits = 0) and at its fastest forced split,
`version = auto`'s time and pick, and the gain of the best forced split over the best plan
(a later file's row replaces an earlier one's).

    python3 gpu/attention/split_table.py splits.h5 v7.h5

Needs h5py. Exit code 0 when the file could be read, 2 when not.
"""
import argparse
import math
import sys
from collections import defaultdict

import h5py

SHORT = {"v4_mma_decode": "v4", "v5_mma_decode_2stage": "v5", "v6_stream_k_decode": "v6",
         "auto": "auto"}


def _col(ix, name, n, default):
    if name not in ix:
        return [default] * n
    v = ix[name][:]
    if v.dtype.kind in "SO":
        return [x.decode() if isinstance(x, bytes) else str(x) for x in v]
    return [float(x) for x in v]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="kvlab sweep files (HDF5)")
    a = ap.parse_args(argv)
    s = defaultdict(list)
    x = defaultdict(list)
    device = ""
    for path in a.files:
        try:
            with h5py.File(path, "r") as f:
                dev = f.attrs.get("device_name", b"")
                device = dev.decode() if isinstance(dev, bytes) else str(dev)
                ix = f["index"]
                n = ix["kind"].shape[0]
                for k in ("kind", "status", "version", "kv_format", "graph", "layout", "lengths"):
                    s[k] += _col(ix, k, n, "")
                for k in ("batch", "context", "num_splits", "median_us", "picked_version",
                          "picked_splits", "gqa_group", "block_size"):
                    x[k] += _col(ix, k, n, math.nan)
        except (OSError, KeyError) as e:
            print(f"error: {path}: not a kvlab results file ({e})", file=sys.stderr)
            return 2
    n = len(s["kind"])
    plan = {}                      # (shape, version) -> us
    forced = defaultdict(dict)     # (shape, version) -> {splits: us}
    auto = {}                      # shape -> (us, picked version id, picked splits)
    for i in range(n):
        if s["kind"][i] != "decode_attention" or s["status"][i] != "ok" or s["graph"][i] == "on":
            continue
        # the default shape only (8 KV heads, group 4, block 16, NHD, uniform lengths)
        if (s["layout"][i] or "nhd") != "nhd" or (s["lengths"][i] or "uniform") != "uniform" or \
                x["gqa_group"][i] != 4 or x["block_size"][i] != 16:
            continue
        t = x["median_us"][i]
        if not math.isfinite(t):
            continue
        shape = (s["kv_format"][i], int(x["batch"][i]), int(x["context"][i]))
        v = s["version"][i]
        if v == "auto":
            if int(x["num_splits"][i]) == 0:  # auto's own pick, not a forced split
                auto[shape] = (t, x["picked_version"][i], x["picked_splits"][i])
        elif int(x["num_splits"][i]) == 0:
            plan[(shape, v)] = t
        else:
            forced[(shape, v)][int(x["num_splits"][i])] = t
    shapes = sorted({k[0] for k in list(plan) + list(forced)} | set(auto))
    print(f"device {device}; us (median); 'plan' = the version's own split, 'best@k' = fastest "
          "forced split k")
    hdr = (f"{'format':9} {'shape':>13}  {'v4 plan':>8} {'v4 best@k':>13}  {'v5 plan':>8} "
           f"{'v5 best@k':>13}  {'v7 plan':>8} {'v7 best@k':>13}  {'auto':>8} {'pick':>8}  "
           f"{'gain %':>6}")
    print(hdr)
    for sh in shapes:
        cells, best_plan, best_forced = [], math.inf, math.inf
        for v in ("v4_mma_decode", "v5_mma_decode_2stage", "v7_mma_decode_l2_prefetch"):
            p = plan.get((sh, v), math.nan)
            fo = forced.get((sh, v), {})
            k, t = min(fo.items(), key=lambda kv: kv[1]) if fo else (0, math.nan)
            cells.append(f"{p:8.1f} {t:8.1f}@{k:<4d}")
            if math.isfinite(p):
                best_plan = min(best_plan, p)
            if math.isfinite(t):
                best_forced = min(best_forced, t)
        at, pv, ps = auto.get(sh, (math.nan, math.nan, math.nan))
        pick = f"v{int(pv)}:{int(ps)}" if math.isfinite(pv) else "-"
        gain = (best_plan / best_forced - 1) * 100 if math.isfinite(best_plan) and \
            math.isfinite(best_forced) else math.nan
        print(f"{sh[0]:9} {sh[1]:>5} x {sh[2]:<6}  {cells[0]}  {cells[1]}  {cells[2]}  {at:8.1f} "
              f"{pick:>8}  {gain:6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
