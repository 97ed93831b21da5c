"""Session 16 call 3: does the stream a call is timed on change its time? kvlab's prepared decode
(version auto) and the peers (cuDNN SDPA, FlashInfer TC / CC, cuDNN paged), each timed in one
process on: the legacy default stream (the peer timer's default, the caller's current stream),
a non-blocking torch stream made current (torch.cuda.stream), the peer timer's own non-blocking
stream, and (kvlab) gpu/bench's C++ harness on its own stream (kvlab.bench)."""
import dataclasses
import sys

sys.path.insert(0, "experiments/peers")
sys.path.insert(0, "experiments/python/scripts")
import torch  # noqa: E402

import kvlab  # noqa: E402
import decode_peers  # noqa: E402
from peer_timer import PeerTimer, TimingOptions  # noqa: E402
from timing_crosscheck import prepared_decode  # noqa: E402

opts = TimingOptions(warmup=3, min_reps=20, max_reps=100, target_rel_iqr=0.02, max_seconds=1.0, cold_l2=True)
cur, own = PeerTimer(opts), PeerTimer(opts, stream="own")
side = torch.cuda.Stream()
print("device", torch.cuda.get_device_name(0), "side stream", hex(side.cuda_stream), flush=True)
H, D, G, BS = 8, 128, 4, 16


def kvlab_call(b, ctx):
    # The cross-check's inputs (experiments/python/scripts/timing_crosscheck.py), version auto.
    return prepared_decode("auto", b, ctx)


def three(fn):
    a = cur.time(fn)["median_us"]
    with torch.cuda.stream(side):
        b = cur.time(fn)["median_us"]
    torch.cuda.synchronize()
    c = own.time(fn)["median_us"]
    return a, b, c


peers = decode_peers.Peers(cur, 3.17e12, 3.03e12, 3.35e12, ["cudnn"], float("inf"), use_cudnn=True)
for rnd in range(2):
    for b, ctx in ((1, 32768), (1, 8192), (1, 2048), (16, 512), (8, 2048), (16, 8192), (64, 8192)):
        p = kvlab_call(b, ctx)
        name = next(v.name for v in kvlab.ops.decode_versions() if v.id == p.version)
        cpp = kvlab.bench.time_decode(p, **dataclasses.asdict(opts))["median_us"]
        leg, sd, ow = three(p.run)
        print(f"[streams] r{rnd} {b}x{ctx} kvlab {name} ({p.num_splits}): legacy {leg:.2f} side {sd:.2f} "
              f"own {ow:.2f} C++ {cpp:.2f} us", flush=True)
        del p
        shape = dict(study="s", batch=b, context=ctx, lengths="uniform", kv_format="bf16", layout="nhd",
                     block_size=BS, gqa_group=G, num_kv_heads=H, head_dim=D, graph="off", seed=0,
                     min_bytes=2.0 * b * ctx * H * D * 2)
        for mode in ("legacy", "side", "own"):
            peers.timer = own if mode == "own" else cur
            if mode == "side":
                with torch.cuda.stream(side):
                    rows = peers.sdpa_rows(shape) + peers.paged_rows(shape, {"flashinfer", "cudnn_paged"})
                torch.cuda.synchronize()
            else:
                rows = peers.sdpa_rows(shape) + peers.paged_rows(shape, {"flashinfer", "cudnn_paged"})
            print(f"[streams] r{rnd} {b}x{ctx} peers on {mode}: " + ", ".join(
                f"{r['version'][5:]} {r['median_us']:.2f}" if r["status"] == "ok" else f"{r['version'][5:]} {r['status']}: {r['reason'][:60]}"
                for r in rows), flush=True)
        torch.cuda.empty_cache()
