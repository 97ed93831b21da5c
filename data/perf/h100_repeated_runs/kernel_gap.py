"""Session 17 call 5: where kvlab's extra time at the short K1 points goes, inside the timed loop.

Under ncu (call 4, one launch, ncu's cache control) kvlab's decode kernel at 16 x 512 took as long
as cuDNN SDPA's (17.18 us both), while the fair runs time kvlab 0.8 us slower. Here, in one
process, each call is timed by the peer timer (held stream, cold L2: the fair runs' rules), then
timed again under torch.profiler, whose CUDA activity trace gives, for every sample, the GPU
timestamps of the flush kernel and of the call's kernels: the gap from the flush's end to the
call's first kernel, the call's span (first kernel start to last kernel end) and its kernels'
summed durations. kvlab: version auto prepared on shuffled page-16 NHD pools (the fair runs'
shapes); cuDNN: SDPA on contiguous KV. Medians over the samples, in us.

    python3 data/perf/h100_repeated_runs/kernel_gap.py OUT_DIR
"""
import dataclasses
import json
import os
import statistics
import sys

sys.path.insert(0, "experiments/peers")
import torch  # noqa: E402

import kvlab  # noqa: E402
import decode_peers  # noqa: E402
from peer_timer import PeerTimer, TimingOptions  # noqa: E402

out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
opts = TimingOptions(warmup=3, min_reps=30, max_reps=60, target_rel_iqr=0.0, max_seconds=1.0, cold_l2=True)
timer = PeerTimer(opts)
print("device", torch.cuda.get_device_name(0), "torch", torch.__version__, flush=True)
H, D, G, BS = 8, 128, 4, 16


def kvlab_call(b, ctx):
    g = torch.Generator(device="cuda").manual_seed(1000 + b + ctx)
    per_seq = (ctx + BS - 1) // BS
    nb = b * per_seq
    k = torch.randn(nb, BS, H, D, generator=g, device="cuda").to(torch.bfloat16)
    v = torch.randn(nb, BS, H, D, generator=g, device="cuda").to(torch.bfloat16)
    table = torch.randperm(nb, generator=g, device="cuda").to(torch.int32).view(b, per_seq)
    lens = torch.full((b,), ctx, dtype=torch.int32, device="cuda")
    q = torch.randn(b, H * G, D, generator=g, device="cuda").to(torch.bfloat16)
    ws = torch.empty(kvlab.ops.decode_workspace_bytes(q, k, v, table, lens, max_seq_len=ctx) + 1,
                     dtype=torch.uint8, device="cuda")
    p = kvlab.ops.prepare_decode_attention(q, k, v, table, lens, workspace=ws, max_seq_len=ctx)
    p._keep = (k, v, table, lens, q, ws)
    return p


def traced(fn, tag):
    """The peer timer's loop under torch.profiler: per sample (a flush kernel followed by the
    call's kernels up to the next hold), gap flush end -> first call kernel, span, busy."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t = timer.time(fn)
    path = os.path.join(out_dir, f"trace_{tag}.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    os.remove(path)
    ev.sort(key=lambda e: e["ts"])
    samples, cur, flush_end = [], None, None
    for e in ev:
        name = e["name"]
        if "kvlab_hold_stream" in name:
            continue
        if "kvlab_l2_flush" in name:
            if cur:
                samples.append(cur)
            cur, flush_end = [], e["ts"] + e["dur"]
            continue
        if cur is not None:
            cur.append((e["ts"] - flush_end, e["ts"], e["ts"] + e["dur"], e["dur"], name))
    if cur:
        samples.append(cur)
    samples = samples[opts.warmup:]  # the warm-up calls come first, each after a flush
    gap = statistics.median(s[0][0] for s in samples if s)
    span = statistics.median(s[-1][2] - s[0][1] for s in samples if s)
    busy = statistics.median(sum(k[3] for k in s) for s in samples if s)
    names = sorted({k[4][:60] for s in samples for k in s})
    return t["median_us"], gap, span, busy, len(samples), names


peers = decode_peers.Peers(timer, 3.17e12, 3.03e12, 3.35e12, ["cudnn"], float("inf"), use_cudnn=False)
rows = []
for rnd in range(2):
    for b, ctx in ((1, 512), (4, 512), (16, 512), (16, 2048), (64, 512), (64, 8192)):
        p = kvlab_call(b, ctx)
        name = next(v.name for v in kvlab.ops.decode_versions() if v.id == p.version)
        q, k, v = peers.sdpa_inputs(dict(batch=b, context=ctx, num_kv_heads=H, head_dim=D, gqa_group=G))
        cud = peers.sdpa_call("cudnn", q, k, v)
        for side, fn in ((f"kvlab {name} ({p.num_splits})", p.run), ("cudnn sdpa", cud)):
            ev_us = timer.time(fn)["median_us"]
            tr_us, gap, span, busy, n, names = traced(fn, f"{b}x{ctx}")
            line = (f"[gap] r{rnd} {b}x{ctx} {side}: events {ev_us:.2f} (traced {tr_us:.2f}); flush end -> first "
                    f"kernel {gap:.2f}; span {span:.2f}; kernels busy {busy:.2f}; events - span {ev_us - span:.2f}; "
                    f"{n} samples; {' + '.join(names)}")
            print(line, flush=True)
        del p, q, k, v, cud
        torch.cuda.empty_cache()
