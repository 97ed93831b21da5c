#!/usr/bin/env python3
"""Two timers, one kernel: kvlab's decode attention timed by the C++ harness (a `kvlab sweep`
point, gpu/bench) and, on the same shape, from Python through kvlab.ops with the peer timer
of experiments/peers/peer_timer.py (PeerTimer: the timer PyTorch SDPA and FlashInfer are
measured with, by the C++ harness's rules and flush kernel; it needs torch and CuPy). If both timers flush L2 and count the same way, their medians agree; a ratio away from
1 means one of them, not the kernel, is off, and every kvlab-vs-peer comparison inherits it.

    python3 experiments/python/scripts/timing_crosscheck.py --kvlab build/experiments/kvlab --out DIR
        [--version NAME] [--shape BATCHxCONTEXT ...] [--tolerance 0.02] [--tolerance-abs-us 0.32]

Verdict (the peers' cross-check rule, decode_peers.crosscheck_verdict): the timers agree on a
shape when their medians differ by at most max(--tolerance x time, --tolerance-abs-us) (2 %, or
0.32 us at launch-bound calls: peer_timer.TIMER_UNCERTAINTY_US), both against the `kvlab sweep`
process and against the C++ harness timing the same prepared call inside the Python process
(kvlab.bench.time_decode); the script exits 1 when any shape disagrees (0 only when all agree,
2 for bad arguments or no GPU).

kvlab is the installed package (pip, or PYTHONPATH=build/python): this folder holds no
package, so the script's own directory, first on sys.path, shadows nothing. The version
defaults to auto, resolved by the same C++ rule on both sides (gpu::choose_decode); each
shape's pick must be the same version and split in both, or the script stops.

Shape: BF16 paged decode, NHD, head_dim 128, 8 KV heads, GQA 4 (32 query heads), block 16,
uniform lengths, eager launch, cold L2 in both timers. The Python side calls a
kvlab.ops.prepare_decode_attention handle (checked once; each timed call is the launch
alone, as in the C++ harness), on a cache with a seeded permutation of the pages and random
BF16 data; the handle launches on the stream current at each call, so the peer timer's own
stream (flush, events and call on one stream) times it. Writes DIR/crosscheck.csv, DIR/crosscheck.png / .pdf (median per timer with
quartile bars, and the ratio) and DIR/cpp.h5 (the C++ points); prints the table last.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
HEAD_DIM, KV_HEADS, GQA, BLOCK = 128, 8, 4, 16


def peer_timer(config_text: str):
    """The peers' timer (experiments/peers/peer_timer.py: the C++ harness's flush kernel,
    events and stopping rule), with the [timing] options of the C++ run's own config."""
    sys.path.insert(0, os.path.join(ROOT, "experiments", "peers"))
    from peer_timer import PeerTimer, TimingOptions
    return PeerTimer(TimingOptions.from_config_text(config_text))


def cpp_times(kvlab_bin, version, shapes, out_dir):
    """The C++ harness's median and quartiles per shape (one `kvlab sweep` run)."""
    import kvlab
    ini = os.path.join(out_dir, "crosscheck.ini")
    h5 = os.path.join(out_dir, "cpp.h5")
    if os.path.exists(h5):
        os.remove(h5)
    with open(ini, "w") as f:
        f.write("name = timing_crosscheck\nseed = 1\n")
        for i, (b, ctx) in enumerate(shapes):
            f.write(f"[s{i}]\nkind = decode_attention\nversion = {version}\nkv_format = bf16\nlayout = nhd\n"
                    f"head_dim = {HEAD_DIM}\nnum_kv_heads = {KV_HEADS}\ngqa_group = {GQA}\nblock_size = {BLOCK}\n"
                    f"batch = {b}\ncontext = {ctx}\nlengths = uniform\ngraph = off\n")
    r = subprocess.run([kvlab_bin, "sweep", ini, "--out", h5, "--progress", "none"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"kvlab sweep failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    df = kvlab.load(h5, kind="decode_attention")
    config_text = str(df.attrs["provenance"].get("config_text", ""))
    out = {}
    by_name = {v.id: v.name for v in kvlab.ops.decode_versions()}
    for _, row in df.iterrows():
        if row["status"] != "ok":
            raise SystemExit(f"C++ point {row['key']} {row['status']}: {row['reason']}")
        if version == "auto":  # what the sweep's choose_decode ran
            ran, splits = by_name[int(row["picked_version"])], int(row["picked_splits"])
        else:
            ran, splits = by_name[kvlab.ops.resolve_version(version)], 0
        out[(int(row["batch"]), int(row["context"]))] = dict(median_us=row["median_us"], q1_us=row["q1_us"],
                                                             q3_us=row["q3_us"], reps=row["reps"],
                                                             timing=row.get("timing", ""), ran=ran, splits=splits)
    return out, config_text


def prepared_decode(version, b, ctx):
    """kvlab's BF16 decode of b sequences of ctx tokens, prepared (kvlab.ops.PreparedDecode): seeded
    inputs, NHD page-16 pools holding exactly the pages needed, handed out in a seeded random order,
    8 KV heads x GQA 4, head_dim 128. The call keeps its tensors (`_keep`)."""
    import torch

    import kvlab
    g = torch.Generator(device="cuda").manual_seed(1000 + b + ctx)
    per_seq = (ctx + BLOCK - 1) // BLOCK
    nb = b * per_seq
    k = torch.randn(nb, BLOCK, KV_HEADS, HEAD_DIM, generator=g, device="cuda").to(torch.bfloat16)
    v = torch.randn(nb, BLOCK, KV_HEADS, HEAD_DIM, generator=g, device="cuda").to(torch.bfloat16)
    table = torch.randperm(nb, generator=g, device="cuda").to(torch.int32).view(b, per_seq)
    lens = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
    q = torch.randn(b, KV_HEADS * GQA, HEAD_DIM, generator=g, device="cuda").to(torch.bfloat16)
    ws = torch.empty(kvlab.ops.decode_workspace_bytes(q, k, v, table, lens, version=version, max_seq_len=ctx) + 1,
                     dtype=torch.uint8, device="cuda")
    call = kvlab.ops.prepare_decode_attention(q, k, v, table, lens, version=version, workspace=ws, max_seq_len=ctx)
    call._keep = (k, v, table, lens, q, ws)
    return call


def python_times(version, shapes, config_text):
    import torch

    import kvlab
    timer = peer_timer(config_text)
    out = {}
    for b, ctx in shapes:
        call = prepared_decode(version, b, ctx)
        # The C++ harness on the same prepared call in this process (kvlab.bench), before or
        # after the Python timer by turns: a difference between the timers shows here, a
        # difference between processes only against the sweep's file.
        first_cpp = len(out) % 2 == 0
        c = kvlab.bench.time_decode(call, **dataclasses.asdict(timer.options)) if first_cpp else None
        t = timer.time(call.run)
        if not first_cpp:
            c = kvlab.bench.time_decode(call, **dataclasses.asdict(timer.options))
        ran = next(v.name for v in kvlab.ops.decode_versions() if v.id == call.version)
        out[(b, ctx)] = dict(median_us=t["median_us"], q1_us=t["q1_us"], q3_us=t["q3_us"], reps=t["reps"], ran=ran,
                             splits=call.num_splits, in_process=dict(median_us=c["median_us"], q1_us=c["q1_us"],
                                                                     q3_us=c["q3_us"], reps=c["reps"]))
        del call  # its tensors (call._keep) with it
        torch.cuda.empty_cache()
    return out


def compare(shapes, cpp, py, version, device, tolerance, tolerance_abs_us=0.0):
    """One row per shape: both timers' medians and quartiles, their ratio and the verdict.
    The verdict is decode_peers.crosscheck_verdict's: the Python median within
    max(tolerance x C++, tolerance_abs_us) of the C++ harness's (the sweep's process), and of
    the C++ harness's in the Python process where that was timed (py[...]["in_process"]).
    Stops when the two sides ran different kernels."""
    sys.path.insert(0, os.path.join(ROOT, "experiments", "peers"))
    from decode_peers import crosscheck_verdict
    rows = []
    for b, ctx in shapes:
        c, p = cpp[(b, ctx)], py[(b, ctx)]
        if (c["ran"], c["splits"]) != (p["ran"], p["splits"]):
            raise SystemExit(f"{b} x {ctx}: the C++ run timed {c['ran']} (splits {c['splits']}), Python "
                             f"{p['ran']} (splits {p['splits']}): not one kernel")
        ratio = p["median_us"] / c["median_us"]
        inproc = p.get("in_process")
        in_ratio = p["median_us"] / inproc["median_us"] if inproc else float("nan")
        status, reason = crosscheck_verdict(p["median_us"], c["median_us"], inproc["median_us"] if inproc else None,
                                            tolerance, tolerance_abs_us)
        rows.append(dict(batch=b, context=ctx, version=version, ran=c["ran"], num_splits=c["splits"], device=device,
                         cpp_median_us=c["median_us"], cpp_q1_us=c["q1_us"], cpp_q3_us=c["q3_us"], cpp_reps=c["reps"],
                         py_median_us=p["median_us"], py_q1_us=p["q1_us"], py_q3_us=p["q3_us"], py_reps=p["reps"],
                         cpp_in_process_median_us=inproc["median_us"] if inproc else float("nan"),
                         cpp_in_process_q1_us=inproc["q1_us"] if inproc else float("nan"),
                         cpp_in_process_q3_us=inproc["q3_us"] if inproc else float("nan"),
                         ratio=ratio, in_process_ratio=in_ratio, agree=status == "ok", reason=reason))
    return rows


def figure(rows, path_base, device, version, tolerance):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [f"{r['batch']} x {r['context'] // 1024}k" if r["context"] >= 1024 else f"{r['batch']} x {r['context']}"
              for r in rows]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(7.0, 2.6), layout="constrained",
                                 gridspec_kw={"width_ratios": [2, 1]})
    x = range(len(rows))
    for off, key, color, name in ((-0.18, "cpp", "#1f77b4", "C++ harness (kvlab sweep)"),
                                  (0.18, "py", "#ff7f0e", "Python: peer timer + kvlab.ops")):
        med = [r[f"{key}_median_us"] for r in rows]
        err = [[r[f"{key}_median_us"] - r[f"{key}_q1_us"] for r in rows],
               [r[f"{key}_q3_us"] - r[f"{key}_median_us"] for r in rows]]
        a1.bar([i + off for i in x], med, width=0.34, color=color, yerr=err, capsize=2, label=name,
               error_kw=dict(elinewidth=0.6, capthick=0.6))
    a1.set_yscale("log")
    a1.set_xticks(list(x), labels)
    a1.set_xlabel("batch x context (tokens)")
    a1.set_ylabel("time per call, median (µs)")
    a1.legend(loc="upper left", fontsize=7, frameon=False)
    a2.axhspan(1 - tolerance, 1 + tolerance, color="0.9", lw=0, label=f"agreement band ±{tolerance:.0%}")
    a2.axhline(1.0, color="k", lw=0.8, ls="--")
    a2.plot(list(x), [r["ratio"] for r in rows], marker="o", color="k", ls="")
    a2.set_xticks(list(x), labels)
    a2.set_xlabel("batch x context (tokens)")
    a2.set_ylabel("Python / C++ median")
    lo, hi = min(r["ratio"] for r in rows), max(r["ratio"] for r in rows)
    a2.set_ylim(min(0.95, lo - 0.02), max(1.05, hi + 0.02))
    fig.suptitle(f"Two timers, one kernel: {version}, BF16 paged decode, cold L2, {device}", fontsize=8)
    for ext in ("png", "pdf"):
        fig.savefig(f"{path_base}.{ext}", dpi=300)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvlab", required=True, help="the kvlab binary (C++ harness)")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--version", default="auto",
                    help="decode version: a registered name or 'auto' (default: auto, picked per shape)")
    ap.add_argument("--shape", action="append", help="BATCHxCONTEXT (repeatable; default 64x8192, 1x32768, 8x2048)")
    ap.add_argument("--tolerance", type=float, default=0.02,
                    help="largest |Python / C++ - 1| of agreeing medians (default 0.02)")
    ap.add_argument("--tolerance-abs-us", type=float, default=None,
                    help="largest |Python - C++| in us, when larger than the relative part (default "
                         "peer_timer.TIMER_UNCERTAINTY_US)")
    a = ap.parse_args(argv)
    import kvlab
    print(f"kvlab: {kvlab.__file__}", flush=True)  # the installed package, not a source tree
    import torch
    if not torch.cuda.is_available():
        print("timing_crosscheck: no CUDA device", file=sys.stderr)
        return 2
    version = a.version
    if version != "auto":
        version = next(v.name for v in kvlab.ops.decode_versions() if v.id == kvlab.ops.resolve_version(version))
    shapes = []
    for s in a.shape or ["64x8192", "1x32768", "8x2048"]:
        b, _, c = s.partition("x")
        shapes.append((int(b), int(c)))
    os.makedirs(a.out, exist_ok=True)
    cpp, config_text = cpp_times(a.kvlab, version, shapes, a.out)
    py = python_times(version, shapes, config_text)
    device = torch.cuda.get_device_name(0)
    if a.tolerance_abs_us is None:
        sys.path.insert(0, os.path.join(ROOT, "experiments", "peers"))
        from peer_timer import TIMER_UNCERTAINTY_US
        a.tolerance_abs_us = TIMER_UNCERTAINTY_US
    rows = compare(shapes, cpp, py, version, device, a.tolerance, a.tolerance_abs_us)
    import csv
    with open(os.path.join(a.out, "crosscheck.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    figure(rows, os.path.join(a.out, "crosscheck"), device, version, a.tolerance)
    print(f"two timers, one kernel ({version}, {device}; medians in µs, [q1, q3]):")
    print("| batch x context | kernel (splits) | C++ harness (kvlab sweep) | Python peer timer | Python / C++ | "
          "C++ harness in the Python process | Python / C++ there | verdict |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['batch']} x {r['context']} | {r['ran']} ({r['num_splits']}) | "
              f"{r['cpp_median_us']:.2f} [{r['cpp_q1_us']:.2f}, {r['cpp_q3_us']:.2f}] | "
              f"{r['py_median_us']:.2f} [{r['py_q1_us']:.2f}, {r['py_q3_us']:.2f}] | {r['ratio']:.3f} | "
              f"{r['cpp_in_process_median_us']:.2f} [{r['cpp_in_process_q1_us']:.2f}, "
              f"{r['cpp_in_process_q3_us']:.2f}] | {r['in_process_ratio']:.3f} | "
              f"{'DISAGREE: ' + r['reason'] if not r['agree'] else 'agree'} |")
    bad = [r for r in rows if not r["agree"]]
    print(f"timers {'DISAGREE' if bad else 'agree'} within max({a.tolerance:.1%}, {a.tolerance_abs_us:.2f} us) on "
          f"{len(rows) - len(bad)} of "
          f"{len(rows)} shapes")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
