"""gpu/bench's timing harness from Python: the C++ timer that times every `kvlab sweep` point
(an L2 flush before each call, CUDA events on the harness's own stream, warm-up, and the
stopping rule of reference/core/timing.h), callable in any process, e.g. next to a Python
timer or a PyTorch peer, so that two timers can be compared inside one process.

    import kvlab
    t = kvlab.bench.time_bandwidth("read", "cg", depth=4, blocks_per_sm=8, mib=1, min_reps=50)
    p = kvlab.ops.prepare_decode_attention(q, k_cache, v_cache, block_table, seq_lens)
    t = kvlab.bench.time_decode(p, cold_l2=True)
    t["median_us"], t["q1_us"], t["q3_us"], t["samples_us"]

Timing options (keyword arguments, reference/core/timing.h's TimingOptions; those not given
keep its defaults): warmup, min_reps, max_reps, target_rel_iqr, max_seconds, cold_l2, graph,
graph_calls, hold_stream. Each timing returns a dict of the Timing fields: median_us, q1_us,
q3_us, iqr_us, rel_iqr, min_us, mean_us, reps, converged, cold_l2, graph, calls_per_sample,
held, flush, flush_bytes, l2_bytes and samples_us (per call, in order).
"""
from __future__ import annotations

from kvlab._native import gpu as _gpu

TIMING_OPTIONS = ("warmup", "min_reps", "max_reps", "target_rel_iqr", "max_seconds", "cold_l2", "graph",
                  "graph_calls", "hold_stream")


def _options(timing: dict) -> dict:
    bad = sorted(set(timing) - set(TIMING_OPTIONS))
    if bad:
        raise ValueError(f"timing option '{bad[0]}' is not one of {', '.join(TIMING_OPTIONS)}")
    return dict(timing)


def time_bandwidth(op: str, load: str, *, mib: int, depth: int = 4, blocks_per_sm: int = 0, chunk_kib: int = 0,
                   **timing) -> dict:
    """One bandwidth kernel of gpu/bench (the kind "bandwidth" of a sweep: op read or copy;
    load cg, plain, nc, memcpy or bulk), over buffers of `mib` MiB allocated for this call and
    filled with distinct words, timed by the C++ harness on the current device. Also returns
    the kernel's name ("kernel") and the bytes one call moves ("bytes_moved": read + write for
    a copy)."""
    options = _options(timing)
    return _gpu().time_bandwidth(op, load, int(depth), int(blocks_per_sm), int(chunk_kib), int(mib), options)


def time_decode(prepared, **timing) -> dict:
    """A kvlab.ops.PreparedDecode's launch timed by the C++ harness, as a `kvlab sweep` point of
    the same shape and version times it (the launch alone per call; graph=True: replayed from a
    CUDA graph)."""
    options = _options(timing)
    native = getattr(prepared, "_native", None)
    if native is None or not hasattr(native, "time"):
        raise TypeError(f"time_decode takes a kvlab.ops.PreparedDecode, not {type(prepared).__name__}")
    return native.time(options)
