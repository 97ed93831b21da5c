#!/usr/bin/env python3
"""The compact table of the decode-kernel GPU stage (gpu/attention/h100_stage.sh): the
decode_attention rows of one or more `kvlab sweep experiments/configs/perf_kernels.ini`
files, one line per shape with every version's median time, the best one's % of the read
ceiling measured in the same run, and the K-targets of gpu/attention/TUNING.md checked on
the rows present (peers are not in these files: K1's comparison with cuDNN / FlashInfer
needs experiments/peers/ on the same shapes).

    python3 gpu/attention/stage_table.py perf_kernels.h5 decode_bulk_copy.h5 [--markdown]

Needs h5py and numpy. Exit code 0 when the files could be read (whatever the targets say),
2 when not.
"""
import argparse
import math
import sys
from collections import defaultdict

import h5py

VERSIONS = ["v4_mma_decode", "v5_mma_decode_2stage", "v6_stream_k_decode",
            "v7_mma_decode_l2_prefetch", "v8_mma_decode_bulk_page", "v9_mma_decode_bulk_rows",
            "v10_mma_decode_tma_swizzle", "v11_mma_decode_cluster_merge", "auto"]
SHORT = {"v4_mma_decode": "v4", "v5_mma_decode_2stage": "v5", "v6_stream_k_decode": "v6",
         "v7_mma_decode_l2_prefetch": "v7", "v8_mma_decode_bulk_page": "v8",
         "v9_mma_decode_bulk_rows": "v9", "v10_mma_decode_tma_swizzle": "v10",
         "v11_mma_decode_cluster_merge": "v11", "auto": "auto"}
NEW = "v11_mma_decode_cluster_merge"  # a column: NEW / the best of the older versions
PREV = "v10_mma_decode_tma_swizzle"   # and NEW / PREV on the same shape (and forced split)


def _col(ix, name, n, default):
    if name not in ix:
        return [default] * n
    v = ix[name][:]
    if v.dtype.kind in "SO":
        return [x.decode() if isinstance(x, bytes) else str(x) for x in v]
    return [float(x) for x in v]


def read(paths):
    rows, ceilings, device = [], [], ""
    for path in paths:
        with h5py.File(path, "r") as f:
            ceil = float(f.attrs.get("read_ceiling_bytes_per_s", math.nan))
            ceilings.append(ceil)
            d = f.attrs.get("device_name", b"")
            device = d.decode() if isinstance(d, bytes) else str(d)
            ix = f["index"]
            n = ix["kind"].shape[0]
            txt = {k: _col(ix, k, n, "") for k in ("study", "kind", "status", "reason", "version",
                                                  "kv_format", "layout", "graph", "lengths", "picked")}
            num = {k: _col(ix, k, n, math.nan) for k in ("batch", "context", "block_size", "gqa_group",
                                                        "num_splits", "median_us", "min_bytes",
                                                        "pct_read_ceiling", "picked_version",
                                                        "picked_splits")}
        for i in range(n):
            if txt["kind"][i] != "decode_attention":
                continue
            r = {k: v[i] for k, v in txt.items()}
            r.update({k: v[i] for k, v in num.items()})
            r["ceiling"] = ceil
            rows.append(r)
    return rows, ceilings, device


def shape_key(r):
    splits = 0 if math.isnan(r["num_splits"]) else int(r["num_splits"])
    return (r["study"], r["kv_format"], r["layout"] or "nhd", int(r["block_size"]),
            int(r["gqa_group"]), int(r["batch"]), int(r["context"]), r["graph"] or "off",
            r["lengths"] or "uniform", splits)


def label(k):
    study, fmt, lay, bs, g, b, ctx, graph, lengths, splits = k
    s = f"{study:6s} {fmt:8s} {b:>3d} x {ctx:<6d}"
    extra = []
    if lay != "nhd":
        extra.append(lay)
    if bs != 16:
        extra.append(f"b{bs}")
    if g != 4:
        extra.append(f"g{g}")
    if graph == "on":
        extra.append("graph")
    if lengths != "uniform":
        extra.append(lengths)
    if splits:
        extra.append(f"splits={splits}")
    return s + (" " + ",".join(extra) if extra else "")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--markdown", action="store_true", help="a markdown table")
    a = ap.parse_args(argv)
    try:
        rows, ceilings, device = read(a.files)
    except (OSError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    R = max([c for c in ceilings if math.isfinite(c)] or [math.nan])
    by = defaultdict(dict)
    bad = []
    for r in rows:
        if r["status"] != "ok" or not math.isfinite(r["median_us"]):
            bad.append(r)
            continue
        by[shape_key(r)][r["version"]] = r
    sep = " | " if a.markdown else "  "
    present = {r["version"] for r in rows}
    cols = [v for v in VERSIONS if v in present]  # versions without rows take no column
    head = ["shape"] + [SHORT[v] + " us" for v in cols] + ["auto pick", "best", "%R",
                                                          SHORT[NEW] + "/best older",
                                                          SHORT[NEW] + "/" + SHORT[PREV]]
    print(f"device {device}; read ceiling R = {R / 1e12:.3f} TB/s (the best of the files)")
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    else:
        print(sep.join(f"{h:>12s}" if i else f"{h:44s}" for i, h in enumerate(head)))
    best_of = {}
    for k in sorted(by):
        vs = by[k]
        cells = [label(k)]
        for v in cols:
            cells.append(f"{vs[v]['median_us']:.1f}" if v in vs else "-")
        pick = "-"
        if "auto" in vs and math.isfinite(vs["auto"]["picked_version"]):
            pid = int(vs["auto"]["picked_version"])
            pick = f"v{pid}" + (f":{int(vs['auto']['picked_splits'])}"
                                if vs["auto"]["picked_splits"] and math.isfinite(vs["auto"]["picked_splits"]) else "")
        real = {v: r for v, r in vs.items() if v != "auto"}
        if real:
            bv = min(real, key=lambda v: real[v]["median_us"])
            br = real[bv]
            best_of[k] = br
            pct = 100.0 * br["min_bytes"] / (br["median_us"] * 1e-6) / R if math.isfinite(R) else math.nan
            old = [r["median_us"] for v, r in real.items() if v != NEW]
            ratio = f"{real[NEW]['median_us'] / min(old):.3f}" if NEW in real and old else "-"
            vs_prev = (f"{real[NEW]['median_us'] / real[PREV]['median_us']:.3f}"
                       if NEW in real and PREV in real else "-")
            cells += [pick, SHORT.get(bv, bv), f"{pct:.1f}", ratio, vs_prev]
        else:
            cells += [pick, "-", "-", "-", "-"]
        if a.markdown:
            print("| " + " | ".join(cells) + " |")
        else:
            print(sep.join(f"{c:>12s}" if i else f"{c:44s}" for i, c in enumerate(cells)))

    # The K-targets on the rows present (best kvlab version per shape).
    def best(study, fmt, b, ctx, **kw):
        for k, r in best_of.items():
            if k[0] == study and k[1] == fmt and k[5] == b and k[6] == ctx and k[9] == 0 and \
               all(dict(graph=k[7], layout=k[2], block_size=k[3], gqa_group=k[4])[n] == v for n, v in kw.items()):
                return r
        return None

    def pct(r):
        return 100.0 * r["min_bytes"] / (r["median_us"] * 1e-6) / R

    print("\ntargets (best kvlab version per shape; R measured in this run):")
    for b, ctx in ((64, 8192), (64, 32768)):
        r = best("K2", "bf16", b, ctx)
        if r:
            print(f"  K2 {b} x {ctx} bf16: {pct(r):.1f} % of R ({r['median_us']:.1f} us, {SHORT.get(r['version'])})"
                  f" -> {'holds' if pct(r) >= 97 else 'NO'} (>= 97 %)")
    for b, ctx in ((1, 32768), (1, 131072), (4, 32768)):
        r = best("K3", "bf16", b, ctx)
        if r:
            print(f"  K3 {b} x {ctx} bf16: {pct(r):.1f} % of R ({r['median_us']:.1f} us, {SHORT.get(r['version'])})"
                  f" -> {'holds' if pct(r) >= 88 else 'NO'} (>= 88 %)")
    for b, ctx in ((16, 8192), (16, 32768), (64, 8192), (8, 8192), (1, 32768)):
        f8 = best("K4", "fp8_e4m3", b, ctx)
        bf = best("K2", "bf16", b, ctx) or best("K1", "bf16", b, ctx) or best("K3", "bf16", b, ctx)
        if f8 and bf:
            x = bf["median_us"] / f8["median_us"]
            need = b >= 16 and ctx >= 8192
            print(f"  K4 {b} x {ctx} fp8 vs own bf16: {x:.2f}x ({f8['median_us']:.1f} vs {bf['median_us']:.1f} us)"
                  + (f" -> {'holds' if x >= 1.85 else 'NO'} (>= 1.85x)" if need else " (info)"))
    for b in (16, 64):
        f4 = best("K5", "nvfp4", b, 8192)
        bf = best("K2", "bf16", b, 8192) or best("K1", "bf16", b, 8192)
        if f4 and bf:
            x = bf["median_us"] / f4["median_us"]
            print(f"  K5 {b} x 8192 nvfp4 vs own bf16: {x:.2f}x -> {'holds' if x >= 3.0 else 'NO'} (>= 3.0x)")
    for graph, limit in (("off", 5.0), ("on", 3.0)):
        r = best("K6", "bf16", 1, 512, graph=graph)
        if r:
            floor = r["min_bytes"] / R * 1e6
            ex = r["median_us"] - floor
            print(f"  K6 1 x 512 {'graph' if graph == 'on' else 'eager'}: {r['median_us']:.2f} us, excess over the "
                  f"floor {ex:.2f} us -> {'holds' if ex <= limit else 'NO'} (<= {limit:.0f} us)")
    k7 = [(k, r) for k, r in best_of.items() if k[0] in ("K7", "K2") and k[5] == 64 and k[6] == 8192
          and k[1] == "bf16" and k[9] == 0 and k[7] == "off"]
    if k7:
        top = min(r["median_us"] for _, r in k7)
        for k, r in sorted(k7, key=lambda kr: kr[1]["median_us"]):
            print(f"  K7 {label(k)}: {r['median_us']:.1f} us, +{100 * (r['median_us'] / top - 1):.1f} % "
                  f"({SHORT.get(r['version'])}) -> {'holds' if r['median_us'] <= 1.03 * top else 'NO'} (within 3 %)")
    sp = defaultdict(list)
    for k, vs in by.items():
        if k[0] in ("splits", "cluster_splits", "cluster"):
            for v, r in vs.items():
                sp[(v, k[5], k[6])].append((k[9], r["median_us"]))
    for (v, b, ctx), xs in sorted(sp.items()):
        xs.sort()
        print(f"  splits {SHORT.get(v, v)} {b} x {ctx}: " + ", ".join(f"{s}: {t:.1f}" for s, t in xs)
              + "  (0: the version's plan)")
    # The split merge: NEW (one launch, cluster merge) / PREV (merge kernel) per shape, at each
    # version's plan and at the same forced split; the plan's best of each.
    cl = defaultdict(dict)
    for (v, b, ctx), xs in sp.items():
        if v in (NEW, PREV):
            cl[(b, ctx)][v] = dict(xs)
    for (b, ctx), d in sorted(cl.items()):
        if NEW not in d or PREV not in d:
            continue
        same = [f"{s}: {d[NEW][s] / d[PREV][s]:.3f}" for s in sorted(d[NEW]) if s in d[PREV]]
        bn, bp = min(d[NEW].values()), min(d[PREV].values())
        print(f"  {SHORT[NEW]}/{SHORT[PREV]} {b} x {ctx}: " + ", ".join(same)
              + f"; best of each {bn:.1f} / {bp:.1f} us = {bn / bp:.3f}")
    if bad:
        print(f"\n{len(bad)} rows not ok:")
        for r in bad[:20]:
            print(f"  {r['status']}: {r['study']} {SHORT.get(r['version'], r['version'])} {r['kv_format']} "
                  f"{int(r['batch'])} x {int(r['context'])}: {r['reason'][:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
