"""Session 16 call 2: the planted errors the cross-check's bound must still catch, measured.
The 1, 4, 16 MiB reads (flush kernel, 8 blocks per SM) and the 4 MiB memcpy, timed cold and warm
(cold_l2 False: a flush that left the buffer in L2) by gpu/bench's C++ harness (kvlab.bench)
and by the Python peer timer, in one process, three interleaved rounds."""
import dataclasses
import sys

sys.path.insert(0, "experiments/peers")
import torch  # noqa: E402

import kvlab  # noqa: E402
from peer_timer import PeerTimer, TimingOptions  # noqa: E402

base = TimingOptions(warmup=5, min_reps=50, max_reps=400, target_rel_iqr=0.01, max_seconds=1.0, cold_l2=True)
print("device", torch.cuda.get_device_name(0))
for rnd in range(3):
    for cold in (True, False):
        o = dataclasses.replace(base, cold_l2=cold)
        timer = PeerTimer(o)
        for mib in (1, 4, 16):
            n = mib << 20
            buf = torch.arange(1, n // 4 + 1, dtype=torch.int32, device="cuda")
            c = kvlab.bench.time_bandwidth("read", "cg", mib=mib, depth=4, blocks_per_sm=8, **dataclasses.asdict(o))
            p = timer.time(lambda: timer.read(buf.data_ptr(), n, 8))
            print(f"[warm_cold] round {rnd} {'cold' if cold else 'warm'} read {mib:3d} MiB: C++ {c['median_us']:.3f} us"
                  f" python {p['median_us']:.3f} us")
        n = 4 << 20
        src = torch.arange(1, n // 4 + 1, dtype=torch.int32, device="cuda")
        dst = torch.empty_like(src)
        c = kvlab.bench.time_bandwidth("copy", "memcpy", mib=4, **dataclasses.asdict(o))
        p = timer.time(lambda: timer.memcpy(dst.data_ptr(), src.data_ptr(), n))
        print(f"[warm_cold] round {rnd} {'cold' if cold else 'warm'} copy   4 MiB: C++ {c['median_us']:.3f} us"
              f" python {p['median_us']:.3f} us")
        del timer
