"""peer_timer: times a CUDA callable from Python by the rules of kvlab's C++ harness.

The rules are reference/core/timing.h's, applied here to PyTorch / FlashInfer calls so that a peer
and a kvlab kernel are timed alike:
  - one stream for everything: the flush, the two CUDA events and the timed call are all
    enqueued on one stream, the caller's current torch stream (stream="current", the default:
    the legacy default stream unless the caller chose one) or a non-blocking stream of the
    timer's own (stream="own", made current while the callable runs, ordered after the caller's
    stream and before it again). Every flush asserts that the stream it is launched on is the
    one the events are recorded on and the one current for the callable (a flush on another
    stream would not be ordered before the timed call). The default is the caller's stream
    because a library call that launches on a stream it was bound to earlier (the legacy
    default stream, typically) stays between the events there: the legacy stream orders with
    every blocking stream; on an own non-blocking stream such a call escapes the events and
    times as nothing. The stream kind does not change a time (H100: a cold 16 MiB read 9.728
    us on gpu/bench's own, legacy and per-thread streams alike; 256 MiB within 0.3 %);
  - `warmup` untimed calls, then one CUDA event pair around each timed call;
  - the stream held (hold_stream, reference/core/timing.h): before each timed sample,
    l2_flush.cuh's kvlab_hold_stream kernel holds the stream until the whole sample (flush,
    events, call) is enqueued and the host releases it through a word of pinned (mapped) host
    memory, so a library's host time to launch its call never falls between the events. A
    call that waits on the stream from the host makes the hold give up after its timeout; the
    timing is then taken again unheld (the result's "held" says which);
  - cold L2 (cold_l2): before every call, warm-up included, THE flush kernel of
    gpu/bench/l2_flush.cuh (compiled from that file's text with CuPy's RawModule, launched
    on the same grid as the C++ harness) reads as many bytes as the C++ harness's flush (the
    KVLAB_L2_FLUSH_* constants of that file) with allocating loads, from the same rotating
    window over a buffer KVLAB_L2_FLUSH_ROTATE_SPAN_MIB MiB longer;
  - sampling until rel_iqr <= target_rel_iqr, checked once min_reps samples exist and then
    every 5 samples, stopping at max_reps samples or after max_seconds;
  - median and quartiles with numpy's default (linear) percentiles, as the C++ summarize;
  - CUDA graphs: cold -> a graph of one call replayed after each (eager) flush; warm -> a graph
    of graph_calls calls, each sample one replay / graph_calls.

Use (the one entry point; also importable by path, e.g. from a bindings cross-check):

    import sys; sys.path.insert(0, "experiments/peers")
    from peer_timer import PeerTimer, TimingOptions
    timer = PeerTimer(TimingOptions())            # or TimingOptions.from_config_text(text)
    t = timer.time(lambda: f(x))                  # -> dict: median_us, q1_us, q3_us, rel_iqr,
                                                  #    min_us, reps, converged, cold_l2,
                                                  #    calls_per_sample, flush, flush_bytes,
                                                  #    l2_bytes, samples_us
    t = timer.time(lambda: f(x), graph=True)      # CUDA-graph replay (cold: one call per replay)

Statistics and the stopping rule (summarize, sampling_done) need only numpy; PeerTimer needs
torch and CuPy (both on the GPU machine).
"""
from __future__ import annotations

import configparser
import dataclasses
import os
import re
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# How far apart two timings of one call may lie although nothing is wrong: the level a
# launch-bound call (a few microseconds) settles at moves from process to process and from
# timer to timer. Measured on the H100 (NVIDIA H100 80GB HBM3, driver 580.159.04) by the
# two-timer cross-check of 19 fair runs (data/perf/README.md, "The timers' uncertainty"): the
# Python timer minus the `kvlab sweep` process at 1 and 4 MiB, -0.29 to +0.29 us, both signs;
# in one process against gpu/bench's C++ harness (kvlab.bench), up to 0.16 us. Ten ticks of the
# 32 ns event clock. Used as the absolute part of the cross-check's tolerance and as the margin
# below which target_table.py calls kvlab and a peer level.
TIMER_UNCERTAINTY_US = 0.32
FLUSH_SOURCE = os.path.join(ROOT, "gpu", "bench", "l2_flush.cuh")
FLUSH_KERNEL = "kvlab_l2_flush"
HOLD_KERNEL = "kvlab_hold_stream"


@dataclasses.dataclass
class TimingOptions:
    """gpu::bench::TimingOptions, field for field (a sweep's [timing] section)."""
    warmup: int = 3
    min_reps: int = 10
    max_reps: int = 200
    target_rel_iqr: float = 0.02
    max_seconds: float = 2.0
    cold_l2: bool = True
    graph: bool = False
    graph_calls: int = 20
    hold_stream: bool = True

    @classmethod
    def from_config_text(cls, text: str) -> "TimingOptions":
        """The [timing] section of a kvlab sweep config (a result file's config_text)."""
        cp = configparser.ConfigParser(inline_comment_prefixes=("#",), strict=False, interpolation=None,
                                       delimiters=("=",))
        cp.read_string("[__top__]\n" + (text or ""))
        o = cls()
        if not cp.has_section("timing"):
            return o
        for f in dataclasses.fields(cls):
            if cp.has_option("timing", f.name):
                v = cp.get("timing", f.name).strip()
                if f.type in ("bool", bool):
                    setattr(o, f.name, v.lower() in ("1", "true", "on", "yes"))
                elif f.type in ("int", int):
                    setattr(o, f.name, int(v))
                else:
                    setattr(o, f.name, float(v))
        return o


def flush_constants(path: str = FLUSH_SOURCE) -> dict:
    """The KVLAB_L2_FLUSH_* constants of l2_flush.cuh (grid, multiple of L2, minimum) and its
    KVLAB_HOLD_TIMEOUT_NS (the stream hold's patience)."""
    consts = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"\s*#define\s+(KVLAB_(?:L2_FLUSH|HOLD)_\w+)\s+(\d+)\s*$", line)
            if m:
                consts[m.group(1)] = int(m.group(2))
    need = ("KVLAB_L2_FLUSH_THREADS", "KVLAB_L2_FLUSH_BLOCKS_PER_SM", "KVLAB_L2_FLUSH_L2_MULTIPLE",
            "KVLAB_L2_FLUSH_MIN_MIB", "KVLAB_L2_FLUSH_ROTATE_SPAN_MIB", "KVLAB_L2_FLUSH_ROTATE_STEP_KIB",
            "KVLAB_HOLD_TIMEOUT_NS")
    missing = [n for n in need if n not in consts]
    if missing:
        raise ValueError(f"{path} does not define {', '.join(missing)}")
    return consts


def l2_flush_bytes(l2_bytes: int, consts: dict) -> int:
    """gpu::bench::l2_flush_bytes: max(multiple x L2, minimum), a multiple of 16."""
    b = max(consts["KVLAB_L2_FLUSH_L2_MULTIPLE"] * int(l2_bytes), consts["KVLAB_L2_FLUSH_MIN_MIB"] << 20)
    return b // 16 * 16


def summarize(samples, target_rel_iqr: float) -> dict:
    """gpu::bench::summarize: median, quartiles (numpy's linear rule), IQR, min, mean."""
    s = np.asarray(samples, dtype=np.float64)
    if s.size == 0:
        return dict(median_us=float("nan"), q1_us=float("nan"), q3_us=float("nan"), iqr_us=float("nan"),
                    rel_iqr=float("nan"), min_us=float("nan"), mean_us=float("nan"), reps=0, converged=False)
    q1, med, q3 = (float(x) for x in np.percentile(s, [25, 50, 75]))
    rel = (q3 - q1) / med if med > 0 else 0.0
    return dict(median_us=med, q1_us=q1, q3_us=q3, iqr_us=q3 - q1, rel_iqr=rel, min_us=float(s.min()),
                mean_us=float(s.mean()), reps=int(s.size), converged=bool(rel <= target_rel_iqr))


def sampling_done(samples, wall_seconds: float, o: TimingOptions):
    """gpu::bench::sampling_done: (done, summary or None)."""
    n = len(samples)
    out = n >= o.max_reps or wall_seconds > o.max_seconds
    if n < o.min_reps or not (n % 5 == 0 or out):
        return False, None
    s = summarize(samples, o.target_rel_iqr)
    return bool(s["converged"] or out), s


class PeerTimer:
    """Times callables that enqueue work on torch's current CUDA stream (see the module doc)."""

    def __init__(self, options: TimingOptions | None = None, flush_source: str = FLUSH_SOURCE,
                 stream: str = "current"):
        import cupy
        import torch
        if stream not in ("own", "current"):
            raise ValueError(f"stream must be 'own' or 'current', not {stream!r}")
        self.torch, self.cupy = torch, cupy
        self.options = options or TimingOptions()
        self.stream_mode = stream
        # "own": a stream of the timer's own, non-blocking (torch's pool streams are).
        self.stream = torch.cuda.Stream() if stream == "own" else None
        self.launch_log = []  # (what, stream pointer) of the first timed sample: the guard's record
        self.consts = flush_constants(flush_source)
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        self.sm_count = int(props.multi_processor_count)
        self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0)
        if self.l2_bytes <= 0:
            raise RuntimeError("torch reports no L2 size for this device: the flush size is undefined")
        self.flush_bytes = l2_flush_bytes(self.l2_bytes, self.consts)
        with open(flush_source) as f:
            self._module = cupy.RawModule(code=f.read(), options=("-std=c++17",))
        self._flush_kernel = self._module.get_function(FLUSH_KERNEL)
        self._hold_kernel = self._module.get_function(HOLD_KERNEL)
        # The hold's words, [release, gave up], in pinned host memory (mapped: with unified
        # addressing the kernel reads and writes them at their host address).
        self._hold_words = torch.zeros(2, dtype=torch.int32, pin_memory=True)
        self._hold_view = self._hold_words.numpy()
        # Distinct non-zero words, as the C++ flush buffer (never read zeros), with the rotation
        # span of l2_flush.cuh beyond the flush's own bytes.
        self._span = self.consts["KVLAB_L2_FLUSH_ROTATE_SPAN_MIB"] << 20
        self._step = self.consts["KVLAB_L2_FLUSH_ROTATE_STEP_KIB"] << 10
        self._flushes = 0
        self._flush_buf = torch.arange(1, (self.flush_bytes + self._span) // 4 + 1, dtype=torch.int32, device="cuda")
        self._sink = torch.zeros(1, dtype=torch.int32, device="cuda")
        torch.cuda.synchronize()

    # -- the kernel of l2_flush.cuh --------------------------------------------------------
    def read(self, ptr: int, nbytes: int, blocks_per_sm: int) -> int:
        """One pass of the flush kernel over [ptr, ptr + nbytes) on the current torch stream,
        with gpu/bench's grid rule (blocks_per_sm per SM, never more than the work). Returns
        the stream pointer it was launched on."""
        threads = self.consts["KVLAB_L2_FLUSH_THREADS"]
        n = nbytes // 16
        blocks = max(1, min((n + threads - 1) // threads, self.sm_count * blocks_per_sm))
        ptr_stream = self.torch.cuda.current_stream().cuda_stream
        self._flush_kernel((blocks,), (threads,),
                           (np.uint64(ptr), np.uint64(n), np.uint64(self._sink.data_ptr())),
                           stream=self.cupy.cuda.ExternalStream(ptr_stream))
        return ptr_stream

    def flush(self, stream=None) -> None:
        """Empties the L2 exactly as the C++ harness does before each timed call, on `stream`
        (a torch stream; None: the current one), which must be the current torch stream."""
        cur = self.torch.cuda.current_stream()
        if stream is not None and cur.cuda_stream != stream.cuda_stream:
            raise RuntimeError(f"L2 flush on stream {cur.cuda_stream:#x}, but the timed call's events are on "
                               f"{stream.cuda_stream:#x}: the flush would not be ordered before the call")
        offset = (self._flushes * self._step) % self._span  # l2_flush.cuh's rotating window
        self._flushes += 1
        launched = self.read(self._flush_buf.data_ptr() + offset, self.flush_bytes,
                             self.consts["KVLAB_L2_FLUSH_BLOCKS_PER_SM"])
        if launched != cur.cuda_stream:
            raise RuntimeError(f"L2 flush launched on stream {launched:#x}, not the current {cur.cuda_stream:#x}")

    def time_read_stamped(self, ptr: int, nbytes: int, blocks_per_sm: int, options: TimingOptions | None = None):
        """Diagnostic (gpu::bench::time_read_stamped's twin): times the flush kernel's read of
        [ptr, ptr + nbytes) with l2_flush.cuh's stamped kernel, which also measures each call
        inside the kernel (%globaltimer). Returns (timing dict, in-kernel microseconds of every
        call, warm-up first)."""
        torch = self.torch
        o = dataclasses.replace(options or self.options, graph=False)
        slots = max(o.warmup, 0) + max(o.max_reps, 1) + 1
        stamps = torch.zeros(2 * slots, dtype=torch.int64, device="cuda")
        kernel = self._module.get_function("kvlab_read_stamped")
        threads = self.consts["KVLAB_L2_FLUSH_THREADS"]
        n = nbytes // 16
        blocks = max(1, min((n + threads - 1) // threads, self.sm_count * blocks_per_sm))
        calls = [0]

        def fn():
            if calls[0] >= slots:
                raise RuntimeError("time_read_stamped: more calls than its stamp slots")
            kernel((blocks,), (threads,),
                   (np.uint64(ptr), np.uint64(n), np.uint64(self._sink.data_ptr()),
                    np.uint64(stamps.data_ptr() + 16 * calls[0])),
                   stream=self.cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream))
            calls[0] += 1

        t = self.time(fn, graph=False, options=o)
        torch.cuda.synchronize()
        h = stamps.cpu().numpy().view(np.uint64)[: 2 * calls[0]]
        return t, list((h[1::2] - ~h[0::2]).astype(np.float64) * 1e-3)

    def memcpy(self, dst_ptr: int, src_ptr: int, nbytes: int) -> None:
        """cudaMemcpyAsync device to device on the current torch stream (what the C++ side's
        copy_memcpy kernel issues)."""
        rt = self.cupy.cuda.runtime
        rt.memcpyAsync(dst_ptr, src_ptr, nbytes, rt.memcpyDeviceToDevice,
                       self.torch.cuda.current_stream().cuda_stream)

    def _hold(self, stream) -> None:
        """Enqueues the stream hold (l2_flush.cuh kvlab_hold_stream) on `stream`, the current one;
        the timing loop releases it once the sample is enqueued."""
        self._hold_view[0] = 0
        self._hold_view[1] = 0
        ptr = self._hold_words.data_ptr()
        self._hold_kernel((1,), (1,), (np.uint64(ptr), np.uint64(self.consts["KVLAB_HOLD_TIMEOUT_NS"]), np.uint64(ptr + 4)),
                          stream=self.cupy.cuda.ExternalStream(stream.cuda_stream))

    # -- timing -----------------------------------------------------------------------------
    def time(self, fn, graph: bool | None = None, options: TimingOptions | None = None) -> dict:
        """Times fn() (which enqueues its work on torch's current stream) by gpu/bench's rules.
        graph: CUDA-graph replay (default: options.graph). Raises what fn or the capture
        raises (a peer that cannot run this way)."""
        torch = self.torch
        o = options or self.options
        graph = o.graph if graph is None else graph
        caller = torch.cuda.current_stream()
        if self.stream is None:
            return self._time_on(caller, fn, graph, o)
        self.stream.wait_stream(caller)  # inputs made on the caller's stream are ready
        try:
            with torch.cuda.stream(self.stream):
                return self._time_on(self.stream, fn, graph, o)
        finally:
            caller.wait_stream(self.stream)  # and the caller sees what the calls wrote

    def _time_on(self, stream, fn, graph: bool, o: TimingOptions) -> dict:
        """The timing loop; `stream` is current. Flush, events and calls all on it."""
        torch = self.torch
        cold = bool(o.cold_l2)
        self._flushes = 0  # each timing walks the same rotation as gpu/bench's (one flusher per timing)
        per_sample = max(1, int(o.graph_calls)) if graph and not cold else 1
        run = fn
        g = None
        if graph:
            fn()  # one eager call first: lazy loading must not happen inside the capture
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(per_sample):
                    fn()
            torch.cuda.synchronize()
            run = g.replay
        for _ in range(o.warmup):
            if cold:
                self.flush(stream)
            run()
        torch.cuda.synchronize()
        if torch.cuda.current_stream().cuda_stream != stream.cuda_stream:
            raise RuntimeError("the timed callable left another stream current: its work would not be timed")
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples = []
        self.launch_log = []
        held = bool(o.hold_stream)
        t0 = time.perf_counter()
        while True:
            if held:
                self._hold(stream)
                if not samples:
                    self.launch_log.append(("hold", torch.cuda.current_stream().cuda_stream))
            if cold:
                self.flush(stream)
                if not samples:
                    self.launch_log.append(("flush", torch.cuda.current_stream().cuda_stream))
            start.record(stream)
            try:
                run()
                stop.record(stream)
            finally:
                self._hold_view[0] = 1  # release: the sample is enqueued (or the call raised)
            if not samples:
                self.launch_log += [("start", stream.cuda_stream), ("call", torch.cuda.current_stream().cuda_stream),
                                    ("stop", stream.cuda_stream)]
            stop.synchronize()
            if held and self._hold_view[1] != 0:
                # The call waited on its stream from the host, behind the hold: time it unheld.
                held, samples, self.launch_log = False, [], []
                t0 = time.perf_counter()
                continue
            samples.append(start.elapsed_time(stop) * 1000.0 / per_sample)
            done, summary = sampling_done(samples, time.perf_counter() - t0, o)
            if done:
                break
        del g
        summary.update(cold_l2=cold, graph=bool(graph), calls_per_sample=per_sample, held=held,
                       flush="read_allocate" if cold else "none", flush_bytes=self.flush_bytes if cold else 0,
                       l2_bytes=self.l2_bytes, samples_us=samples,
                       stream="own non-blocking" if self.stream is not None else f"caller's ({stream.cuda_stream:#x})")
        return summary


def record_timing(row: dict, t: dict, nbytes: float, ceiling: float, ceiling_name: str = "read",
                  peak: float = 0.0, other_ceiling: float = 0.0) -> dict:
    """experiments/bench/bench.h record_timing for a peer row (a dict of columns): the same
    columns, the same NaN rule and the same invalid rule (a cold row whose slower quartile
    beats the best DRAM bandwidth of the run, max(ceiling, other_ceiling) = max(R, C), becomes
    failed, "timing invalid: ..."). ceiling: the row's own ceiling (R for reads, C for copies);
    other_ceiling: the other one (0: not known). Returns row."""
    nan = float("nan")
    have = ceiling > 0
    bound = max(ceiling, other_ceiling)
    med, q3 = t["median_us"], t["q3_us"]
    bps = nbytes / (med * 1e-6) if med > 0 else nan
    bps_slow = nbytes / (q3 * 1e-6) if q3 > 0 else nan
    floor_us = nbytes / ceiling * 1e6 if have else nan
    exceeds = bool(bound > 0 and bps_slow > bound)
    invalid = exceeds and t["cold_l2"]
    row.update(median_us=med, q1_us=t["q1_us"], q3_us=q3, rel_iqr=t["rel_iqr"], min_us=t["min_us"],
               reps=float(t["reps"]), converged=1.0 if t["converged"] else 0.0, cold_l2=1.0 if t["cold_l2"] else 0.0,
               calls_per_sample=float(t["calls_per_sample"]), flush_bytes=float(t["flush_bytes"]),
               l2_bytes=float(t["l2_bytes"]), working_set_bytes=float(nbytes), bytes_per_s=bps,
               ceiling_bytes_per_s=ceiling if have else nan,
               pct_datasheet=100.0 * bps / peak if peak > 0 else nan, floor_us=floor_us,
               excess_us=med - floor_us if have else nan, exceeds_ceiling=(1.0 if exceeds else 0.0) if bound > 0 else nan,
               timing_valid=0.0 if invalid else 1.0, flush=t["flush"])
    row["pct_read_ceiling" if ceiling_name == "read" else "pct_copy_ceiling"] = 100.0 * bps / ceiling if have else nan
    how = (f"cold L2: {t['flush_bytes'] / 2**20:.0f} MiB read with ld.global.cg (allocating) before each call"
           if t["cold_l2"] else "warm L2: calls back to back")
    cps = t["calls_per_sample"]
    how += (f"; CUDA graph, {cps} call{'s' if cps != 1 else ''} per replay" if t["graph"] else "; eager")
    how += "; stream held until enqueued" if t.get("held") else "; stream not held"
    row["timing"] = how + " (peer timer)"
    row["samples_us"] = list(t["samples_us"])
    if invalid and row.get("status", "ok") == "ok":
        row["status"] = "failed"
        row["reason"] = (f"timing invalid: a cold-L2 call moved its {nbytes / 1e6:.4g} MB at {bps / 1e12:.4g} TB/s "
                         f"(slower quartile {bps_slow / 1e12:.4g} TB/s), above the best DRAM bandwidth of this run "
                         f"{bound / 1e12:.4g} TB/s ({ceiling_name} ceiling {ceiling / 1e12:.4g}): the flush left bytes "
                         f"in L2, or the ceilings are too low")
    return row
