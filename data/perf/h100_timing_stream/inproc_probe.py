"""Diagnostic: gpu/bench's C++ harness (through ctypes) and the Python peer timer timing the same
cold 1 MiB read (the flush kernel, 8 blocks per SM) in one process, rounds interleaved; and the
C++ harness alone in a plain Python process (no torch)."""
import ctypes
import os
import sys

sys.path.insert(0, "experiments/peers")
lib = ctypes.CDLL(os.path.abspath(sys.argv[2]))
lib.kvlab_time_read_1mib.restype = ctypes.c_double
if sys.argv[1] == "plain":
    for r in range(8):
        print(f"[inproc] round {r}: plain python process, C++ harness {lib.kvlab_time_read_1mib():.3f} us")
else:
    import torch
    from peer_timer import PeerTimer, TimingOptions
    o = TimingOptions(warmup=5, min_reps=50, max_reps=400, target_rel_iqr=0.01, max_seconds=1.0, cold_l2=True)
    timer = PeerTimer(o)
    nbytes = 1 << 20
    buf = torch.arange(1, nbytes // 4 + 1, dtype=torch.int32, device="cuda")
    for r in range(8):
        first_cpp = (r % 2 == 0)
        if first_cpp:
            c = lib.kvlab_time_read_1mib()
        p = timer.time(lambda: timer.read(buf.data_ptr(), nbytes, 8))["median_us"]
        if not first_cpp:
            c = lib.kvlab_time_read_1mib()
        print(f"[inproc] round {r}: torch process, C++ harness {c:.3f} us, python timer {p:.3f} us")
