#!/usr/bin/env python3
"""Two or more builds of kvlab timed on one sweep config, alternated (A, B, ..., A, B, ...),
side by side: per decode_attention point (shape, format, layout, page order, version, forced
split and geometry: block size, GQA group, head_dim, graph and lengths where the sweep has them), every
run's median time per build, and each build's
best run against the first build's best run. With --versions BASE,OTHER,... the versions of
one sweep instead (each point run with every version, e.g. `--axis version=v10_...,v12_...`):
per shape and build, every run's median time per version, and each version's best run against
BASE's best run on the same shape (versions are named by their registry names or their
v<N> prefix).

    python3 gpu/attention/build_ab_table.py DIR main,s4,s5      # DIR/main_1.h5, DIR/main_2.h5, ...
    python3 gpu/attention/build_ab_table.py DIR final --versions v10,v12

The files of build NAME are DIR/NAME_*.h5 (one `kvlab sweep` result file per run, the same
config for every build, e.g. experiments/configs/decode_v10_ab.ini). A point that is not ok in
a run shows as nan. Needs h5py. Exit code 0 when every file could be read, 2 when not (a
missing build, a file that is not a kvlab result file, no decode_attention rows).
"""
import argparse
import glob
import math
import os
import sys

import h5py


class BadInput(Exception):
    pass


def _col(ix, name, n):
    if name not in ix:
        return ["-"] * n
    return [x.decode() if isinstance(x, bytes) else x for x in ix[name][:]]


# Geometry axes a point is told apart by, with the value the label leaves out (the A/B configs'
# common shape: page 16, GQA 4, head_dim 128, eager, uniform lengths).
GEOMETRY = (("block_size", 16, "block {}"), ("gqa_group", 4, "gqa {}"), ("head_dim", 128, "d{}"),
            ("graph", "off", "graph {}"), ("lengths", "uniform", "{} lengths"))


def load_run(path):
    """{(batch, context, kv_format, layout, page_order, version, num_splits, geometry):
    median_us (nan when not ok)}; num_splits 0 is the version's own plan (a forced split is its
    own point); geometry is the label of the GEOMETRY axes that differ from their usual value
    ("" for none), so that points of other block sizes, groups, ... are never merged."""
    try:
        with h5py.File(path, "r") as f:
            ix = f["index"]
            n = len(ix["kind"])
            kind, status = _col(ix, "kind", n), _col(ix, "status", n)
            batch, context = ix["batch"][:], ix["context"][:]
            fmt, layout, order = _col(ix, "kv_format", n), _col(ix, "layout", n), _col(ix, "page_order", n)
            version = _col(ix, "version", n)
            med = ix["median_us"][:]
            splits = ix["num_splits"][:] if "num_splits" in ix else [0] * n
            geo_cols = {name: (_col(ix, name, n) if name in ix else [None] * n)
                        for name, _, _ in GEOMETRY}
    except (OSError, KeyError) as e:
        raise BadInput(f"{path}: not a kvlab result file with an index ({e})") from None
    out = {}
    for i in range(n):
        if kind[i] != "decode_attention":
            continue
        sp = 0 if math.isnan(float(splits[i])) else int(splits[i])
        geo = []
        for name, usual, fmt_ in GEOMETRY:
            v = geo_cols[name][i]
            if isinstance(v, float):
                v = None if math.isnan(v) else (int(v) if v == int(v) else v)
            if v not in (None, "", usual):
                geo.append(fmt_.format(v))
        key = (int(batch[i]), int(context[i]), fmt[i], layout[i], order[i], version[i], sp,
               " ".join(geo))
        out[key] = float(med[i]) if status[i] == "ok" else math.nan
    if not out:
        raise BadInput(f"{path}: no decode_attention rows")
    return out


def table(directory, builds):
    runs = {}
    for b in builds:
        files = sorted(glob.glob(os.path.join(directory, f"{b}_*.h5")))
        if not files:
            raise BadInput(f"no runs of build '{b}' ({directory}/{b}_*.h5)")
        runs[b] = [load_run(p) for p in files]
    lines = ["shape".ljust(62) + "".join(f"{b:>22s}" for b in builds) +
             "".join(f"{b + '/' + builds[0]:>14s}" for b in builds[1:])]
    for key in runs[builds[0]][0]:
        best, cells = {}, ""
        for b in builds:
            xs = [r.get(key, math.nan) for r in runs[b]]
            ok = [x for x in xs if not math.isnan(x)]
            best[b] = min(ok) if ok else math.nan
            cells += f"{' / '.join(f'{x:8.2f}' for x in xs):>22s}"
        ratios = "".join(f"{(best[b] / best[builds[0]] - 1) * 100:+13.2f}%" for b in builds[1:])
        lines.append(f"{shape_label(key)} {key[5]}".ljust(62) + cells + ratios)
    return "\n".join(lines)


def shape_label(key):
    """'16x8192 fp8_e4m3 nhd shuffled', then the geometry that differs ('block 128') and
    ' @2 splits' for a forced split."""
    label = f"{key[0]}x{key[1]} {key[2]} {key[3]} {key[4]}"
    if len(key) > 7 and key[7]:
        label += " " + key[7]
    return label + (f" @{key[6]} splits" if key[6] > 0 else "")


def _version_of(name, versions):
    """The entry of `versions` that names registry version `name` (itself or its v<N> prefix)."""
    for v in versions:
        if name == v or name.split("_")[0] == v:
            return v
    return None


def version_table(directory, builds, versions):
    lines = ["shape".ljust(48) + "".join(f"{b + ' ' + v:>24s}" for b in builds for v in versions) +
             "".join(f"{v + '/' + versions[0]:>12s}" for b in builds for v in versions[1:])]
    shapes = {}
    for b in builds:
        files = sorted(glob.glob(os.path.join(directory, f"{b}_*.h5")))
        if not files:
            raise BadInput(f"no runs of build '{b}' ({directory}/{b}_*.h5)")
        for i, path in enumerate(files):
            for key, t in load_run(path).items():
                v = _version_of(key[5], versions)
                if v is not None:
                    shapes.setdefault(key[:5] + key[6:], {}).setdefault((b, v), {})[i] = t
    seen = {v for cells in shapes.values() for (_, v) in cells}
    missing = [v for v in versions if v not in seen]
    if missing:
        raise BadInput(f"no decode_attention rows of version(s) {', '.join(missing)} in the runs")
    for key, cells in shapes.items():
        row, best = "", {}
        for b in builds:
            for v in versions:
                xs = list(cells.get((b, v), {}).values())
                ok = [x for x in xs if not math.isnan(x)]
                best[(b, v)] = min(ok) if ok else math.nan
                row += f"{' / '.join(f'{x:8.2f}' for x in xs) if xs else '-':>24s}"
        ratios = "".join(f"{(best[(b, v)] / best[(b, versions[0])] - 1) * 100:+11.2f}%"
                         for b in builds for v in versions[1:])
        lines.append(shape_label(key[:5] + (None,) + key[5:]).ljust(48) + row + ratios)
    return "\n".join(lines)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="folder with NAME_RUN.h5 files")
    ap.add_argument("builds", help="comma-separated build names; the first is the baseline")
    ap.add_argument("--versions", default="",
                    help="compare these versions (comma-separated, the first is the baseline) "
                         "inside each build's runs instead of builds against the first")
    a = ap.parse_args(argv[1:])
    builds = [b for b in a.builds.split(",") if b]
    versions = [v for v in a.versions.split(",") if v]
    try:
        if a.versions and len(versions) < 2:
            raise BadInput("--versions needs at least two versions (the first is the baseline)")
        if versions:
            if not builds:
                raise BadInput("name at least one build")
            print(version_table(a.dir, builds, versions))
            return 0
        if len(builds) < 2:
            raise BadInput("name at least two builds (the first is the baseline)")
        print(table(a.dir, builds))
    except BadInput as e:
        print(f"build_ab_table.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
