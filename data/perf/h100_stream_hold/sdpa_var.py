"""Session 16 call 4: where cuDNN SDPA's timing spread comes from (call 3: 13-40 us at 1 x 2048,
34-53 us at 1 x 8192, 697-779 us at 64 x 8192 between timings of one process). For each shape:
five fresh allocations of q / k / v, each timed three times in a row (the peer timer, legacy
stream, cold L2); the host time of one call (50 calls without a sync, divided); the flush's own
GPU time; and per timing the samples' spread."""
import dataclasses
import sys
import time

sys.path.insert(0, "experiments/peers")
import numpy as np  # noqa: E402
import torch  # noqa: E402

import decode_peers  # noqa: E402
from peer_timer import PeerTimer, TimingOptions  # noqa: E402

opts = TimingOptions(warmup=3, min_reps=20, max_reps=100, target_rel_iqr=0.02, max_seconds=1.0, cold_l2=True)
timer = PeerTimer(opts)
peers = decode_peers.Peers(timer, 3.17e12, 3.03e12, 3.35e12, ["cudnn"], float("inf"), use_cudnn=False)
print("device", torch.cuda.get_device_name(0), "torch", torch.__version__, "cudnn", torch.backends.cudnn.version())
# The flush alone: its GPU time (events around it, warm-up first).
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
for _ in range(3):
    timer.flush()
torch.cuda.synchronize()
fl = []
for _ in range(10):
    s.record(); timer.flush(); e.record(); e.synchronize(); fl.append(s.elapsed_time(e) * 1000)
print(f"[sdpa_var] flush {timer.flush_bytes >> 20} MiB: {np.median(fl):.1f} us GPU")
for b, ctx in ((1, 2048), (1, 8192), (8, 2048), (16, 512), (64, 8192)):
    shape = dict(batch=b, context=ctx, num_kv_heads=8, head_dim=128, gqa_group=4)
    for alloc in range(5):
        q, k, v = peers.sdpa_inputs(shape)
        fn = peers.sdpa_call("cudnn", q, k, v)
        fn(); torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(50):
            fn()
        host = (time.perf_counter() - t0) / 50 * 1e6
        torch.cuda.synchronize()
        ts = []
        for rep in range(3):
            t = timer.time(fn)
            sm = np.array(t["samples_us"])
            ts.append(f"{t['median_us']:.2f} [{sm.min():.1f}-{sm.max():.1f}, n {len(sm)}]")
        print(f"[sdpa_var] {b}x{ctx} alloc {alloc} k@{k.data_ptr():#x}: host {host:.1f} us/call; timings: "
              + " | ".join(ts), flush=True)
        del q, k, v, fn
        torch.cuda.empty_cache()
    # The same with the caching allocator kept warm (no empty_cache between allocations).
    keep = []
    for alloc in range(3):
        q, k, v = peers.sdpa_inputs(shape)
        keep.append((q, k, v))
        fn = peers.sdpa_call("cudnn", q, k, v)
        fn(); torch.cuda.synchronize()
        t = timer.time(fn)
        print(f"[sdpa_var] {b}x{ctx} kept alloc {alloc} k@{k.data_ptr():#x}: {t['median_us']:.2f}", flush=True)
    del keep
    torch.cuda.empty_cache()
