"""Session 17 call 5: where kvlab's extra time at the short K1 points goes, inside the timed loop.

Under ncu (call 4, one launch, ncu's cache control) kvlab's decode kernel at 16 x 512 took as long
as cuDNN SDPA's (17.18 us both), while the fair runs time kvlab 0.8 us slower. Here, in one
process, each call is timed by the peer timer (held stream, cold L2: the fair runs' rules), then
timed again under torch.profiler, whose CUDA activity trace gives, for every sample, the GPU
timestamps of the flush kernel and of the call's kernels: the gap from the flush's end to the
call's first kernel, the call's span (first kernel start to last kernel end) and its kernels'
summed durations. kvlab: version auto prepared on shuffled page-16 NHD pools (the fair runs'
shapes); cuDNN: SDPA on contiguous KV. Medians over the samples, in us.

With --prime-tlb (call 6), each side is also timed with a kernel between the flush and the call
that loads one 4-byte word per 2 MiB of every input buffer (the pools or K / V, the table, Q):
the address translations of the call's buffers are then warm, and their data not (17-70 lines
of 128 B). Its span is the call's kernels only; the events then include the priming kernel and
are not compared.

With --shapes BxC,... (session 18 call 5) the shapes are those instead of the short K1 points,
and each side's line is followed by its kernels one by one: every kernel's median duration and
the median gap from the end of the one before it (for a split call: the decode kernel, then the
gap to the split merge and the merge's duration).

    python3 data/perf/h100_repeated_runs/kernel_gap.py OUT_DIR [--prime-tlb] [--shapes 1x131072,...]
"""
import json
import os
import statistics
import sys

sys.path.insert(0, "experiments/peers")
sys.path.insert(0, "experiments/python/scripts")
import torch  # noqa: E402

import kvlab  # noqa: E402
import decode_peers  # noqa: E402
from peer_timer import PeerTimer, TimingOptions  # noqa: E402
from timing_crosscheck import prepared_decode  # noqa: E402

out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
PRIME = "--prime-tlb" in sys.argv[2:]
SHAPES = ((1, 512), (4, 512), (16, 512), (16, 2048), (64, 512), (64, 8192))
if "--shapes" in sys.argv[2:]:
    SHAPES = tuple(tuple(int(x) for x in s.split("x")) for s in sys.argv[sys.argv.index("--shapes") + 1].split(","))
opts = TimingOptions(warmup=3, min_reps=30, max_reps=60, target_rel_iqr=0.0, max_seconds=1.0, cold_l2=True)
timer = PeerTimer(opts)
print("device", torch.cuda.get_device_name(0), "torch", torch.__version__, flush=True)
H, D, G, BS = 8, 128, 4, 16


def kvlab_call(b, ctx):
    # The cross-check's inputs (experiments/python/scripts/timing_crosscheck.py), version auto.
    return prepared_decode("auto", b, ctx)


_touch = None


def primer(tensors):
    """A callable that enqueues one kernel loading a word per 2 MiB of each tensor's bytes."""
    global _touch
    import cupy
    if _touch is None:
        _touch = cupy.RawKernel(r"""
extern "C" __global__ void kvlab_tlb_touch(const char* const* bases, const unsigned long long* sizes,
                                           int n, unsigned int* sink) {
  unsigned int acc = 0;
  for (int b = 0; b < n; ++b)
    for (unsigned long long off = (unsigned long long)(blockIdx.x * blockDim.x + threadIdx.x) << 21;
         off < sizes[b]; off += (unsigned long long)gridDim.x * blockDim.x << 21)
      acc += *(const volatile unsigned int*)(bases[b] + off);
  if (acc == 0x12345678u) sink[0] = acc;
}""", "kvlab_tlb_touch")
    bases = torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64, device="cuda")
    sizes = torch.tensor([t.numel() * t.element_size() for t in tensors], dtype=torch.int64, device="cuda")
    sink = torch.zeros(1, dtype=torch.int32, device="cuda")
    keep = (bases, sizes, sink)

    def run():
        s = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        _touch((8,), (128,), (cupy.uint64(keep[0].data_ptr()), cupy.uint64(keep[1].data_ptr()),
                              cupy.int32(len(tensors)), cupy.uint64(keep[2].data_ptr())), stream=s)
    return run


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
        if "kvlab_hold_stream" in name or "kvlab_tlb_touch" in name:
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
    # Kernel by kernel (the samples with the most common kernel count): median duration, and the
    # median gap from the end of the kernel before it (the first: from the flush's end).
    nk = statistics.mode(len(s) for s in samples if s)
    per = [s for s in samples if len(s) == nk]
    kernels = [(per[0][i][4][:40], statistics.median(s[i][3] for s in per),
                statistics.median(s[i][1] - (s[i - 1][2] if i else s[i][1] - s[i][0]) for s in per))
               for i in range(nk)]
    return t["median_us"], gap, span, busy, len(samples), names, kernels


peers = decode_peers.Peers(timer, 3.17e12, 3.03e12, 3.35e12, ["cudnn"], float("inf"), use_cudnn=False)
rows = []
for rnd in range(2):
    for b, ctx in SHAPES:
        p = kvlab_call(b, ctx)
        name = next(v.name for v in kvlab.ops.decode_versions() if v.id == p.version)
        q, k, v = peers.sdpa_inputs(dict(batch=b, context=ctx, num_kv_heads=H, head_dim=D, gqa_group=G))
        cud = peers.sdpa_call("cudnn", q, k, v)
        sides = [(f"kvlab {name} ({p.num_splits})", p.run, list(p._keep)), ("cudnn sdpa", cud, [q, k, v])]
        for side, fn, bufs in sides:
            ev_us = timer.time(fn)["median_us"]
            tr_us, gap, span, busy, n, names, kernels = traced(fn, f"{b}x{ctx}")
            line = (f"[gap] r{rnd} {b}x{ctx} {side}: events {ev_us:.2f} (traced {tr_us:.2f}); flush end -> first "
                    f"kernel {gap:.2f}; span {span:.2f}; kernels busy {busy:.2f}; events - span {ev_us - span:.2f}; "
                    f"{n} samples; {' + '.join(names)}")
            print(line, flush=True)
            print(f"[kernels] r{rnd} {b}x{ctx} {side}: " + "; ".join(
                f"{name} {dur:.2f} us after a gap of {g:.2f}" for name, dur, g in kernels), flush=True)
            if PRIME:
                touch = primer(bufs)

                def primed(fn=fn, touch=touch):
                    touch()
                    fn()
                _, _, pspan, _, pn, _, _ = traced(primed, f"{b}x{ctx}_primed")
                print(f"[gap] r{rnd} {b}x{ctx} {side}: TLB primed after the flush: span {pspan:.2f} "
                      f"(unprimed {span:.2f}, {pspan - span:+.2f}); {pn} samples", flush=True)
        del p, q, k, v, cud
        torch.cuda.empty_cache()
