#!/usr/bin/env python3
"""Peers of kvlab's decode attention, timed on the same shapes in the same run.

    python3 experiments/peers/decode_peers.py --kvlab-csv decode.csv --out perf.h5 [--csv peers.csv]
    python3 experiments/peers/decode_peers.py --kvlab-h5 results/perf.h5 --out results/peers.h5

Reads the rows that `kvlab_decode_check --time --csv decode.csv` wrote (or the points of a
`kvlab sweep experiments/configs/perf.ini` result file): their shapes, the measured read /
copy ceilings and the device; times the peers on every uniform-length BF16 point of the
same shapes, and writes a result file in the kvlab HDF5 schema
(experiments/results/result_file.h: schema "kvlab.results" version 1, root provenance
attributes, an /index table with one row per (point, version), a /runs table), with the
axes and metric names of the `decode_attention` sweep kind, so analysis/ reads kvlab rows
and peer rows alike. Peer rows have version "peer:NAME".

Peers (PyTorch scaled_dot_product_attention on contiguous KV, one query token):
  peer:sdpa_cudnn     SDPBackend.CUDNN_ATTENTION
  peer:sdpa_flash     SDPBackend.FLASH_ATTENTION
  peer:sdpa_efficient SDPBackend.EFFICIENT_ATTENTION
  q [batch, heads, 1, 128], k/v [batch, kv_heads, context, 128] bf16, GQA through
  enable_gqa=True; a backend that refuses GQA gets K/V repeated per query head (the row's
  version then ends in "+repeat": it reads every KV byte `group` times, the bytes counted
  stay the floor, as for kvlab).
Not run: FlashInfer's paged decode. The GPU machine has no network; flashinfer-python
compiles its kernels just in time (minutes of nvcc per configuration on the device) and
its ahead-of-time kernel wheel is far larger than the 64 MiB a device call may carry.
Skipped points (recorded with the reason): FP8 / FP4 KV (SDPA takes no quantized KV),
mixed lengths (contiguous SDPA would pad every sequence to the longest), block sizes other
than 16 (contiguous KV has no pages: one row per shape).

Timing as kvlab's harness: CUDA events around each call, cold L2 (a 2 x L2 buffer is
rewritten before every timed call), >= 10 reps until the relative IQR <= 2 % (<= 200 reps,
<= 2 s), median and quartiles; CUDA-graph replay (20 calls per graph, warm L2) for the
launch-bound points kvlab timed that way. Every peer row is validated first: relative L2
against a float32 math computation of the same inputs (first <= 4 sequences).
"""
from __future__ import annotations

import argparse
import csv
import datetime as _dt
import math
import os
import socket
import sys

import numpy as np

SCHEMA_NAME = "kvlab.results"
SCHEMA_VERSION = 1
HEAD_DIM = 128
KV_HEADS = 8
AXES_STR = ["layout", "kv_format", "lengths", "graph", "version"]
AXES_NUM = ["head_dim", "block_size", "num_kv_heads", "gqa_group", "batch", "context", "seed"]
METRICS = ["median_us", "q1_us", "q3_us", "rel_iqr", "min_us", "reps", "converged", "bytes_per_s",
           "pct_read_ceiling", "pct_datasheet", "rel_l2", "min_bytes"]


def read_kvlab_csv(path):
    meta = {}
    with open(path) as f:
        first = f.readline()
        if first.startswith("#"):
            for tok in first[1:].strip().split(";"):
                k, _, v = tok.partition("=")
                meta[k] = v
        rows = list(csv.DictReader(f))
    return meta, rows


def floor_bytes(batch, ctx, group):
    # bf16 K and V of every attended token of every KV head + Q + O (as kvlab counts it).
    return 2.0 * batch * ctx * KV_HEADS * HEAD_DIM * 2 + 2.0 * batch * KV_HEADS * group * HEAD_DIM * 2


class Timer:
    def __init__(self, torch, device_l2_bytes):
        self.torch = torch
        self.flush_buf = torch.empty(max(2 * device_l2_bytes, 64 << 20), dtype=torch.uint8, device="cuda")

    def time(self, fn, graph=False, target_rel_iqr=0.02, min_reps=10, max_reps=200, max_seconds=2.0):
        torch = self.torch
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        calls = 1
        if graph:
            calls = 20
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                fn()
                with torch.cuda.graph(g, stream=s):
                    for _ in range(calls):
                        fn()
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            run = g.replay
        else:
            run = fn
        samples = []
        t0 = _dt.datetime.now()
        while True:
            if not graph:
                self.flush_buf.add_(1)  # cold L2: rewrite 2 x L2 before the timed call
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            run()
            b.record()
            b.synchronize()
            samples.append(a.elapsed_time(b) * 1000.0 / calls)
            n = len(samples)
            if n >= min_reps:
                q1, med, q3 = np.percentile(samples, [25, 50, 75])
                if (q3 - q1) / med <= target_rel_iqr or n >= max_reps or \
                        (_dt.datetime.now() - t0).total_seconds() > max_seconds:
                    break
        q1, med, q3 = np.percentile(samples, [25, 50, 75])
        return dict(median_us=med, q1_us=q1, q3_us=q3, rel_iqr=(q3 - q1) / med, min_us=min(samples),
                    reps=len(samples), converged=float((q3 - q1) / med <= target_rel_iqr))


def run_peers(points, ceilings, max_gib, log):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    props = torch.cuda.get_device_properties(0)
    timer = Timer(torch, getattr(props, "L2_cache_size", 50 << 20))
    backends = [("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION),
                ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION)]
    rows = []
    gen = torch.Generator(device="cuda")
    for pt in points:
        b, ctx, grp = pt["batch"], pt["context"], pt["gqa_group"]
        base = dict(pt)
        why = None
        if pt["kv_format"] != "bf16":
            why = "SDPA takes no quantized KV (" + pt["kv_format"] + ")"
        elif pt["lengths"] != "uniform":
            why = "contiguous SDPA would pad every sequence to the longest"
        elif pt["block_size"] != 16:
            why = "contiguous KV has no pages (timed once, at block 16)"
        elif 2.0 * floor_bytes(b, ctx, grp) > max_gib * (1 << 30):
            why = "K+V exceed the --max-gib budget"
        if why:
            for name, _ in backends:
                rows.append(dict(base, version="peer:" + name, status="skipped", reason=why))
            continue
        gen.manual_seed(1234 + b * 7 + ctx)
        hq = KV_HEADS * grp
        q = torch.randn(b, hq, 1, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(b, KV_HEADS, ctx, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(b, KV_HEADS, ctx, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=gen)
        nval = min(b, 4)
        qr, kr, vr = (x[:nval].float() for x in (q, k, v))
        ref = torch.softmax((qr.view(nval, KV_HEADS, grp, HEAD_DIM) @ kr.transpose(-1, -2)) / math.sqrt(HEAD_DIM),
                            dim=-1) @ vr
        ref = ref.reshape(nval, hq, 1, HEAD_DIM)
        del qr, kr, vr
        nbytes = floor_bytes(b, ctx, grp)
        for name, be in backends:
            row = dict(base, version="peer:" + name, min_bytes=nbytes)
            variants = [("", lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))]
            if grp > 1:
                variants.append(("+repeat", None))
            done = False
            err = ""
            for suffix, fn in variants:
                if fn is None:
                    kk = k.repeat_interleave(grp, dim=1)
                    vv = v.repeat_interleave(grp, dim=1)
                    fn = (lambda kk=kk, vv=vv: F.scaled_dot_product_attention(q, kk, vv))
                try:
                    with sdpa_kernel([be]):
                        out = fn()
                        torch.cuda.synchronize()
                        rel = (torch.linalg.vector_norm(out[:nval].float() - ref) /
                               torch.linalg.vector_norm(ref)).item()
                        t = timer.time(fn, graph=pt["graph"] == "on")
                    bps = nbytes / (t["median_us"] * 1e-6)
                    row.update(t, version="peer:" + name + suffix, status="ok" if rel < 2e-2 else "failed",
                               reason="" if rel < 2e-2 else f"rel_l2 {rel:.2e} vs float32 math", rel_l2=rel,
                               bytes_per_s=bps, pct_read_ceiling=100 * bps / ceilings["read"],
                               pct_datasheet=100 * bps / ceilings["sheet"] if ceilings["sheet"] else float("nan"))
                    done = True
                    break
                except Exception as e:  # a backend that refuses this shape: recorded, not fatal
                    err = (err + " | " if err else "") + f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                    torch.cuda.synchronize()
            if not done:
                row.update(status="skipped", reason=err)
            rows.append(row)
            log(row)
        del q, k, v, ref
        torch.cuda.empty_cache()
    return rows


def write_h5(path, rows, meta, argv, run_start):
    import h5py
    if os.path.exists(path):
        os.remove(path)
    with h5py.File(path, "w") as f:
        a = f.attrs
        a["kvlab_schema"] = SCHEMA_NAME
        a["schema_version"] = np.int64(SCHEMA_VERSION)
        a["created_utc"] = _dt.datetime.utcnow().isoformat() + "Z"
        a["argv"] = " ".join(argv)
        a["sweep_name"] = "perf"
        a["config_path"] = ""
        a["config_text"] = ""
        a["shard"] = "0/1"
        a["points_planned"] = np.int64(len(rows))
        a["host"] = socket.gethostname()
        a["device_name"] = meta.get("device", "")
        a["read_ceiling_bytes_per_s"] = float(meta.get("read_ceiling", 0) or 0)
        a["copy_ceiling_bytes_per_s"] = float(meta.get("copy_ceiling", 0) or 0)
        a["datasheet_bytes_per_s"] = float(meta.get("datasheet", 0) or 0)
        a["git_commit"] = meta.get("git", "")
        str_t = h5py.string_dtype("utf-8")

        def table(name, cols):
            g = f.create_group(name)
            g.attrs.create("columns", data=list(cols.keys()), dtype=str_t)
            for c, vals in cols.items():
                if vals and isinstance(vals[0], str):
                    g.create_dataset(c, data=np.array(vals, dtype=object), dtype=str_t, maxshape=(None,), chunks=True)
                else:
                    g.create_dataset(c, data=np.array(vals, dtype=np.float64), maxshape=(None,), chunks=True)

        cols = {"point": [float(i) for i in range(len(rows))]}
        keys = []
        for r in rows:
            keys.append(",".join(f"{k}={r.get(k)}" for k in AXES_STR[:-1] + AXES_NUM) + ",version=" + r["version"])
        cols["key"] = keys
        cols["study"] = ["perf"] * len(rows)
        cols["kind"] = ["append" if r.get("target") == "P9" else "decode_attention" for r in rows]
        cols["status"] = [r.get("status", "") for r in rows]
        cols["reason"] = [r.get("reason", "") or "" for r in rows]
        cols["seconds"] = [float("nan")] * len(rows)
        cols["group"] = [""] * len(rows)
        for c in AXES_STR:
            cols[c] = [str(r.get(c, "")) for r in rows]
        for c in AXES_NUM:
            cols[c] = [float(r.get(c, float("nan"))) for r in rows]
        for c in METRICS:
            cols[c] = [float(r.get(c, float("nan")) if r.get(c, "") != "" else float("nan")) for r in rows]
        cols["target"] = [r.get("target", "") for r in rows]
        table("index", cols)
        table("runs", {"start": [run_start], "end": [_dt.datetime.utcnow().isoformat() + "Z"],
                       "argv": [" ".join(argv)], "points_run": [float(len(rows))],
                       "points_failed": [float(sum(r.get("status") == "failed" for r in rows))]})


def read_kvlab_h5(path):
    """Shapes and ceilings of a `kvlab sweep` result file (its decode_attention rows)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    from analysis.load import load
    res = load(path)
    meta = {"device": res.attrs.get("device_name", ""), "read_ceiling": res.read_ceiling,
            "copy_ceiling": res.copy_ceiling, "datasheet": 0.0, "git": res.attrs.get("git_commit", "")}
    idx = res.index[res.index["kind"] == "decode_attention"]
    rows = []
    for _, r in idx.iterrows():
        if r.get("head_dim", HEAD_DIM) != HEAD_DIM or r.get("num_kv_heads", KV_HEADS) != KV_HEADS:
            continue  # the peers here are built for 8 KV heads x d128
        rows.append(dict(target=str(r.get("study", "")), layout=str(r["layout"]), kv_format=str(r["kv_format"]),
                         lengths=str(r["lengths"]), graph=str(r["graph"]), version=str(r["version"]),
                         head_dim=HEAD_DIM, block_size=int(r["block_size"]), num_kv_heads=KV_HEADS,
                         gqa_group=int(r["gqa_group"]), batch=int(r["batch"]), context=int(r["context"]), seed=0))
        if "pct_datasheet" in r and r["bytes_per_s"] == r["bytes_per_s"] and r["pct_datasheet"] > 0:
            meta["datasheet"] = float(r["bytes_per_s"] / (r["pct_datasheet"] / 100.0))
    return meta, rows


def kvlab_rows(csv_rows, meta):
    out = []
    for r in csv_rows:
        ok = r["status"] == "ok"
        med = float(r["median_us"]) if ok else float("nan")
        out.append(dict(
            target=r["target"], layout=r["layout"], kv_format=r["kv_format"], lengths=r["lengths"],
            graph="on" if r["graph"] == "1" else "off", version=r["version"], head_dim=HEAD_DIM,
            block_size=int(r["block_size"]), num_kv_heads=KV_HEADS, gqa_group=int(r["gqa_group"]),
            batch=int(r["batch"]), context=int(r["context"]), seed=0, status=r["status"], reason=r["reason"],
            median_us=med, q1_us=float(r["q1_us"]) if ok else float("nan"),
            q3_us=float(r["q3_us"]) if ok else float("nan"), rel_iqr=float(r["rel_iqr"]) if ok else float("nan"),
            reps=float(r["reps"]), bytes_per_s=float(r["gbps"]) * 1e9 if ok else float("nan"),
            pct_read_ceiling=float(r["pct_ceiling"]) if ok else float("nan"),
            pct_datasheet=float(r["pct_datasheet"]) if ok else float("nan"),
            rel_l2=float(r["rel_l2"]), min_bytes=float(r["bytes"])))
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--kvlab-csv", help="rows of kvlab_decode_check --time --csv (copied into --out with the peers)")
    src.add_argument("--kvlab-h5", help="a `kvlab sweep` result file (e.g. of experiments/configs/perf.ini): its "
                                        "decode_attention shapes and ceilings; --out then holds the peer rows only")
    ap.add_argument("--out", required=True, help="HDF5 result file to write (kvlab schema)")
    ap.add_argument("--csv", help="also write the peer rows as CSV")
    ap.add_argument("--max-gib", type=float, default=24.0)
    ap.add_argument("--no-peers", action="store_true", help="only convert the kvlab rows")
    args = ap.parse_args(argv[1:])
    start = _dt.datetime.utcnow().isoformat() + "Z"
    if args.kvlab_csv:
        meta, crow = read_kvlab_csv(args.kvlab_csv)
        rows = kvlab_rows(crow, meta)
    else:
        meta, rows = read_kvlab_h5(args.kvlab_h5)
    ceil = {"read": float(meta.get("read_ceiling", 0) or 0), "sheet": float(meta.get("datasheet", 0) or 0)}
    # The distinct shapes kvlab timed (one peer row per shape and backend).
    seen, points = set(), []
    for r in rows:
        if r["target"] == "P9":
            continue
        k = (r["target"], r["batch"], r["context"], r["lengths"], r["kv_format"], r["gqa_group"], r["block_size"], r["graph"])
        if k in seen:
            continue
        seen.add(k)
        pt = {kk: r[kk] for kk in ("target", "batch", "context", "lengths", "kv_format", "gqa_group",
                                   "block_size", "graph", "head_dim", "num_kv_heads", "seed")}
        pt["layout"] = "contiguous"  # SDPA reads [batch, kv_heads, context, head_dim]
        points.append(pt)

    def log(row):
        if row.get("status") == "ok":
            print(f"{row['target']:5s} {row['batch']}x{row['context']} g{row['gqa_group']} {row['version']:26s} "
                  f"{row['median_us']:10.1f} us {row['rel_iqr']:.3f} {row['bytes_per_s'] / 1e9:8.1f} GB/s "
                  f"{row['pct_read_ceiling']:5.1f}% rel_l2={row['rel_l2']:.1e}", flush=True)
        else:
            print(f"{row['target']:5s} {row['batch']}x{row['context']} g{row['gqa_group']} {row['version']:26s} "
                  f"{row['status']}: {row.get('reason', '')}", flush=True)

    peer = [] if args.no_peers else run_peers(points, ceil, args.max_gib, log)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=sorted({k for r in peer for k in r}))
            w.writeheader()
            w.writerows(peer)
    kept = rows if args.kvlab_csv else []  # a sweep's own rows stay in its file
    write_h5(args.out, kept + peer, meta, argv, start)
    print(f"wrote {args.out}: {len(kept)} kvlab rows, {len(peer)} peer rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
