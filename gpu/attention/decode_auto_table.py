#!/usr/bin/env python3
"""Regenerates gpu/attention/decode_auto_table.inc, the calibration table of `version = auto`
(gpu/attention/decode_auto.h), from perf-sweep HDF5 files written by `kvlab sweep`.

For every measured shape (device, kv_format, layout, head_dim, gqa_group, block_size, batch,
context) of the files' ok, timed, eager, uniform-length decode_attention rows, the row with
the lowest median time gives the table entry: its version and its num_splits axis (0 when
the files have no such axis: the version's own plan). Rows run as `auto` are not versions
and are skipped. Later files win over earlier ones on the same shape (pass the newest last);
with --best-of-all the fastest row over all files wins (files of one run, e.g. the
decode-kernels stage's sweeps of different versions). With --latest-of-all every (version,
num_splits) of a shape is timed by the median of its rows in the last file (in the order
given: pass them oldest first) that has it, and the fastest such time wins: a candidate is
judged by its newest build's measurement, not by the luckiest row it ever had. Measured
(session 11): under --best-of-all a v13 row at 51.30 us (its other run: 53.07) beat v10's
51.62 / 51.63 / 51.76 at 16 x 2048 BF16 NHD, and the fair run that followed timed version auto
there at 52.4 us against 50.9-51.4 with v10 in the run before.

With --side-by-side N (and --latest-of-all) the last N files are one calibration run that timed
candidates side by side, twice or more: on every shape they measure, only their candidates
compete, each by its median over those files, and a row run as `auto` counts as the (version,
num_splits) it picked (its picked_version / picked_splits columns): the incumbent, timed in the
same run as its challengers. With --margin F a challenger replaces the incumbent only when it is
faster by more than the fraction F (the run-to-run spread of a median). With --no-overlap it
must also be faster in every row: its slowest calibration row below the incumbent's fastest
(their ranges over the N files apart), so that a pick moves only on a difference larger than
the rows' own spread across the runs (and calls) of the calibration. Shapes the calibration
files do not measure keep --latest-of-all's pick over all files.

    python3 gpu/attention/decode_auto_table.py data/perf/h100_perf_sweep.h5 \
        --out gpu/attention/decode_auto_table.inc

Needs h5py and numpy (analysis/requirements.txt).
"""
import argparse
import math
import os
import sys

import h5py
import numpy as np


def _col(ix, name, n, default):
    if name not in ix:
        return [default] * n
    v = ix[name][:]
    if v.dtype.kind in "SO":
        return [x.decode() if isinstance(x, bytes) else str(x) for x in v]
    return list(v)


def read_rows(path, auto_picks=False):
    """The file's ok, timed, eager, uniform-length decode_attention rows as (shape key, version,
    num_splits, median_us). With auto_picks, a row run as `auto` comes back as
    ("#<picked_version id>", picked_splits, median_us), marked as auto's pick."""
    with h5py.File(path, "r") as f:
        device = f.attrs.get("device_name", b"")
        device = device.decode() if isinstance(device, bytes) else str(device)
        ix = f["index"]
        n = ix["kind"].shape[0]
        cols = {k: _col(ix, k, n, "") for k in ("kind", "status", "version", "kv_format", "layout",
                                                "graph", "lengths", "page_order")}
        nums = {k: _col(ix, k, n, math.nan) for k in ("head_dim", "gqa_group", "block_size", "batch",
                                                      "context", "median_us", "num_splits",
                                                      "picked_version", "picked_splits")}
    rows = []
    for i in range(n):
        if cols["kind"][i] != "decode_attention" or cols["status"][i] != "ok":
            continue
        auto = cols["version"][i] == "auto"
        if cols["version"][i] == "" or (auto and not auto_picks) or cols["graph"][i] == "on":
            continue
        if cols["lengths"][i] not in ("", "uniform"):
            continue
        if cols["page_order"][i] not in ("", "shuffled"):  # pages in pool order: a control
            continue
        t = float(nums["median_us"][i])
        if not math.isfinite(t) or t <= 0:
            continue
        splits = nums["num_splits"][i]
        splits = 0 if not math.isfinite(float(splits)) else int(splits)
        version = cols["version"][i]
        if auto:
            pv, ps = float(nums["picked_version"][i]), float(nums["picked_splits"][i])
            if not (math.isfinite(pv) and math.isfinite(ps)):
                raise KeyError(f"an auto row without picked_version / picked_splits (row {i})")
            version, splits = f"#{int(pv)}", int(ps)
        key = (device, cols["kv_format"][i], cols["layout"][i] or "nhd", int(nums["head_dim"][i]),
               int(nums["gqa_group"][i]), int(nums["block_size"][i]), int(nums["batch"][i]),
               int(nums["context"][i]))
        rows.append((key, version, splits, t))
    return rows


def name_picks(rows_by_file):
    """Replaces every auto pick "#<id>" by the registry name that starts "v<id>_" among the
    version rows of all files; raises KeyError for an id no file names."""
    names = {}
    for rows in rows_by_file:
        for _, v, _, _ in rows:
            if not v.startswith("#") and v.startswith("v") and "_" in v:
                names.setdefault(v[1:v.index("_")], v)
    out = []
    for rows in rows_by_file:
        fixed = []
        for key, v, sp, t in rows:
            if v.startswith("#"):
                if v[1:] not in names:
                    raise KeyError(f"auto picked version id {v[1:]}, which no listed file names")
                v = ("*", names[v[1:]])  # the incumbent
            fixed.append((key, v, sp, t))
        out.append(fixed)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="perf-sweep HDF5 files (kvlab sweep)")
    ap.add_argument("--out", required=True, help="the .inc file to write")
    ap.add_argument("--best-of-all", action="store_true",
                    help="the fastest row over all files wins (default: later files replace "
                    "earlier ones shape by shape)")
    ap.add_argument("--latest-of-all", action="store_true",
                    help="every (version, num_splits) of a shape is timed by the median of its rows "
                    "in the last file (in the order given) that has it; the fastest such time wins")
    ap.add_argument("--sources", default="",
                    help="what the files are (runs, configs), written into the header's comment")
    ap.add_argument("--side-by-side", type=int, default=0, metavar="N",
                    help="with --latest-of-all: the last N files are one calibration run of "
                    "candidates side by side (an auto row counts as the pick it ran); on the shapes "
                    "they measure only their candidates compete, by their medians over the N files")
    ap.add_argument("--margin", type=float, default=0.0, metavar="F",
                    help="with --side-by-side: a challenger replaces auto's pick only when faster "
                    "by more than the fraction F (default 0)")
    ap.add_argument("--no-overlap", action="store_true",
                    help="with --side-by-side: a challenger replaces auto's pick only when its "
                    "slowest calibration row is faster than the incumbent's fastest (and by the "
                    "--margin fraction)")
    a = ap.parse_args(argv)
    if a.best_of_all and a.latest_of_all:
        print("error: --best-of-all and --latest-of-all exclude each other", file=sys.stderr)
        return 2
    if a.side_by_side and (not a.latest_of_all or not 0 < a.side_by_side <= len(a.files)):
        print("error: --side-by-side N needs --latest-of-all and 1 <= N <= the number of files",
              file=sys.stderr)
        return 2
    if a.side_by_side < 0 or not 0.0 <= a.margin < 0.5 or (a.margin and not a.side_by_side):
        print("error: --margin F needs --side-by-side and 0 <= F < 0.5; --side-by-side N >= 0",
              file=sys.stderr)
        return 2
    if a.no_overlap and not a.side_by_side:
        print("error: --no-overlap needs --side-by-side", file=sys.stderr)
        return 2
    first_cal = len(a.files) - a.side_by_side if a.side_by_side else len(a.files)
    all_rows = []
    for order, path in enumerate(a.files):
        if not os.path.exists(path):
            print(f"error: {path}: no such file", file=sys.stderr)
            return 2
        try:
            all_rows.append(read_rows(path, auto_picks=order >= first_cal))
        except (OSError, KeyError) as e:
            print(f"error: {path}: not a kvlab results file ({e})", file=sys.stderr)
            return 2
    try:
        all_rows = name_picks(all_rows)
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    best = {}
    latest = {}  # --latest-of-all: {shape: {(version, splits): (file order, [times])}}
    calib = {}  # --side-by-side: {shape: {(version, splits): [times]}}, incumbents {shape: cand}
    incumbent = {}
    for order, rows in enumerate(all_rows):
        if order >= first_cal:
            for key, version, splits, t in rows:
                if isinstance(version, tuple):
                    version = version[1]
                    incumbent[key] = (version, splits)
                calib.setdefault(key, {}).setdefault((version, splits), []).append(t)
            continue
        shapes = {}
        for key, version, splits, t in rows:
            if key not in shapes or t < shapes[key][2]:
                shapes[key] = (version, splits, t)
            cands = latest.setdefault(key, {})
            if cands.get((version, splits), (-1, None))[0] != order:
                cands[(version, splits)] = (order, [])  # a later file replaces the earlier rows
            cands[(version, splits)][1].append(t)
        if a.latest_of_all:
            continue
        if a.best_of_all:
            for key, val in shapes.items():
                if key not in best or val[2] < best[key][2]:
                    best[key] = val
        else:
            best.update(shapes)  # a later file replaces an earlier one shape by shape
    if a.latest_of_all:
        for key, cands in latest.items():
            timed = {c: float(np.median(ts)) for c, (_, ts) in cands.items()}
            (version, splits), t = min(timed.items(), key=lambda kv: (kv[1], kv[0]))
            best[key] = (version, splits, t)
        for key, cands in calib.items():  # the side-by-side run decides its shapes
            timed = {c: float(np.median(ts)) for c, ts in cands.items()}
            inc = incumbent.get(key)
            if inc is not None:
                # The challengers that clear the incumbent: by the margin on the medians and,
                # with --no-overlap, every row of theirs below every row of the incumbent's.
                bar = timed[inc] * (1.0 - a.margin)
                floor = min(cands[inc]) * (1.0 - a.margin)
                timed = {c: t for c, t in timed.items()
                         if c == inc or (t < bar and (not a.no_overlap or max(cands[c]) < floor))}
            (version, splits), t = min(timed.items(), key=lambda kv: (kv[1], kv[0]))
            best[key] = (version, splits, t)
    if not best:
        print("error: no ok, timed, eager, uniform-length decode_attention rows", file=sys.stderr)
        return 2
    lines = [
        "// decode_auto_table.inc: GENERATED by gpu/attention/decode_auto_table.py; do not edit.",
        "// The measured best (version, num_splits) per shape of `version = auto` "
        "(decode_auto.h).",
        "// Command: python3 gpu/attention/decode_auto_table.py " + " ".join(a.files) +
        (" --best-of-all" if a.best_of_all else "") +
        (" --latest-of-all" if a.latest_of_all else "") +
        (f" --side-by-side {a.side_by_side}" if a.side_by_side else "") +
        (f" --margin {a.margin:g}" if a.margin else "") +
        (" --no-overlap" if a.no_overlap else "") + " --out " + a.out,
    ]
    lines += ["// " + x for x in a.sources.splitlines() if x.strip()]
    lines += [
        "// {device, kv_format, layout, head_dim, gqa_group, block_size, batch, context, version,",
        "//  num_splits, median_us}",
    ]
    for key in sorted(best):
        version, splits, t = best[key]
        dev, fmt, lay, d, g, bs, b, ctx = key
        lines.append(f'{{"{dev}", "{fmt}", "{lay}", {d}, {g}, {bs}, {b}, {ctx}, "{version}", {splits}, '
                     f"{t:.3f}}},")
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{a.out}: {len(best)} shapes from {len(a.files)} file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
