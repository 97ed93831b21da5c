"""peer_timer.PeerTimer enqueues the L2 flush, both CUDA events and the timed call on one stream:
the caller's current stream by default, or (stream="own") a non-blocking stream of its own, ordered
after the caller's stream and before it again; and it refuses a flush that
would land on another stream than the events. Checked without a GPU: torch and CuPy are
replaced by fakes that record on which stream every flush kernel, event and call was
enqueued."""
import contextlib
import os
import sys
import types

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "experiments", "peers"))
import peer_timer  # noqa: E402


class FakeGpu:
    """What the fakes share: the current stream and the log of (what, stream pointer)."""

    def __init__(self):
        self.log = []
        self.flush_ptrs = []
        self.hold_gives_up = False  # the hold kernel reports that it gave up waiting
        self.next_ptr = 0x1000
        self.legacy = FakeStream(self, 0)
        self.current = self.legacy


class FakeStream:
    def __init__(self, gpu, ptr=None):
        self.gpu = gpu
        if ptr is None:
            gpu.next_ptr += 0x10
            ptr = gpu.next_ptr
        self.cuda_stream = ptr

    def wait_stream(self, other):
        self.gpu.log.append(("wait", self.cuda_stream, other.cuda_stream))


class FakeEvent:
    def __init__(self, gpu):
        self.gpu = gpu

    def record(self, stream=None):
        s = stream if stream is not None else self.gpu.current
        self.gpu.log.append(("event", s.cuda_stream))

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return 0.010  # ms


def fake_modules(gpu):
    cuda = types.SimpleNamespace()
    cuda.Stream = lambda: FakeStream(gpu)
    cuda.current_stream = lambda: gpu.current
    cuda.current_device = lambda: 0
    cuda.synchronize = lambda: None
    cuda.get_device_properties = lambda d: types.SimpleNamespace(multi_processor_count=132,
                                                                 L2_cache_size=50 << 20)
    cuda.Event = lambda enable_timing=True: FakeEvent(gpu)

    @contextlib.contextmanager
    def stream_ctx(s):
        before, gpu.current = gpu.current, s
        try:
            yield
        finally:
            gpu.current = before

    cuda.stream = stream_ctx
    tensor = types.SimpleNamespace(data_ptr=lambda: 0xABC000)
    words = np.zeros(2, dtype=np.int32)  # the hold's pinned words: [release, gave up]
    pinned = types.SimpleNamespace(data_ptr=lambda: 0xF00000, numpy=lambda: words)
    torch = types.SimpleNamespace(cuda=cuda, int32="int32", arange=lambda *a, **k: tensor,
                                  zeros=lambda *a, pin_memory=False, **k: pinned if pin_memory else tensor)

    def flush_kernel(grid, block, args, stream=None):
        gpu.log.append(("flush", stream.ptr if stream is not None else None))
        gpu.flush_ptrs.append(int(args[0]))

    def hold_kernel(grid, block, args, stream=None):
        assert words[0] == 0 and int(args[0]) == 0xF00000 and int(args[2]) == 0xF00004
        gpu.log.append(("hold", stream.ptr if stream is not None else None))
        if gpu.hold_gives_up:
            words[1] = 1

    module = types.SimpleNamespace(get_function=lambda name: hold_kernel if name == "kvlab_hold_stream"
                                   else flush_kernel)
    cupy = types.SimpleNamespace(RawModule=lambda code, options=(): module,
                                 cuda=types.SimpleNamespace(ExternalStream=lambda p: types.SimpleNamespace(ptr=p)))
    return torch, cupy


@pytest.fixture
def gpu(monkeypatch):
    g = FakeGpu()
    torch, cupy = fake_modules(g)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return g


def options():
    return peer_timer.TimingOptions(warmup=2, min_reps=10, max_reps=10, cold_l2=True)


def test_flush_events_and_call_share_the_timers_own_stream(gpu):
    timer = peer_timer.PeerTimer(options(), stream="own")
    own = timer.stream.cuda_stream
    assert own != gpu.legacy.cuda_stream
    calls = []
    t = timer.time(lambda: (calls.append(gpu.current.cuda_stream), gpu.log.append(("call", gpu.current.cuda_stream))))
    assert t["reps"] == 10 and t["stream"] == "own non-blocking"
    assert set(calls) == {own}
    timed = [e for e in gpu.log if e[0] in ("hold", "flush", "event", "call")]
    assert {e[1] for e in timed} == {own}
    # Every timed call: the hold, flush, start event, call, stop event, in that order.
    seq = [e[0] for e in timed][-50:]
    assert seq == ["hold", "flush", "event", "call", "event"] * 10
    assert t["held"] and "stream held until enqueued" in peer_timer.record_timing({}, t, 1e6, 3e12)["timing"]
    # Ordered after the caller's stream, and the caller after it.
    waits = [e for e in gpu.log if e[0] == "wait"]
    assert waits[0] == ("wait", own, 0) and waits[-1] == ("wait", 0, own)
    assert gpu.current is gpu.legacy  # the caller's stream is current again
    assert [w for w, _ in timer.launch_log] == ["hold", "flush", "start", "call", "stop"]
    assert {p for _, p in timer.launch_log} == {own}


def test_default_mode_uses_the_callers_stream(gpu):
    timer = peer_timer.PeerTimer(options())
    assert timer.stream is None
    timer.time(lambda: gpu.log.append(("call", gpu.current.cuda_stream)))
    assert {e[1] for e in gpu.log if e[0] in ("flush", "event", "call")} == {0}
    with pytest.raises(ValueError):
        peer_timer.PeerTimer(options(), stream="default")


def test_a_flush_on_another_stream_than_the_events_is_refused(gpu):
    timer = peer_timer.PeerTimer(options(), stream="own")
    other = FakeStream(gpu)
    with pytest.raises(RuntimeError, match="not be ordered"):
        timer.flush(other)  # current is the legacy stream, the events would be on `other`


def test_a_call_that_leaves_another_stream_current_is_refused(gpu):
    timer = peer_timer.PeerTimer(options(), stream="own")
    stray = FakeStream(gpu)

    def switches():
        gpu.current = stray

    with pytest.raises(RuntimeError):
        timer.time(switches)


def test_each_timing_walks_the_flush_rotation_of_the_cpp_harness(gpu):
    c = peer_timer.flush_constants()
    span, step = c["KVLAB_L2_FLUSH_ROTATE_SPAN_MIB"] << 20, c["KVLAB_L2_FLUSH_ROTATE_STEP_KIB"] << 10
    timer = peer_timer.PeerTimer(options())
    timer.time(lambda: None)
    first = list(gpu.flush_ptrs)
    gpu.flush_ptrs.clear()
    timer.time(lambda: None)
    assert gpu.flush_ptrs == first  # restarted: the same windows as gpu/bench's per-timing flusher
    base = 0xABC000
    assert first == [base + (k * step) % span for k in range(len(first))]
    assert len(set(first)) == len(first) == 2 + 10  # warm-up and samples, all distinct windows


def test_the_hold_is_released_after_each_sample_and_given_up_on_a_waiting_call(gpu):
    """The host releases the hold once the sample is enqueued (its word 1 after every sample);
    when the hold reports that it gave up (the call waited on the stream from the host), the
    timing starts again without it and says so; hold_stream off never holds."""
    timer = peer_timer.PeerTimer(options())
    released = []
    timer.time(lambda: released.append(int(timer._hold_view[0])))
    assert released[-10:] == [0] * 10 and timer._hold_view[0] == 1  # enqueued, then released
    gpu.log.clear()
    gpu.hold_gives_up = True
    t = timer.time(lambda: gpu.log.append(("call", gpu.current.cuda_stream)))
    assert not t["held"] and t["reps"] == 10
    kinds = [e[0] for e in gpu.log if e[0] in ("hold", "flush", "call")]
    assert kinds.count("hold") == 1 and kinds[-20:] == ["flush", "call"] * 10
    gpu.hold_gives_up = False
    gpu.log.clear()
    o = options()
    o.hold_stream = False
    t = peer_timer.PeerTimer(o).time(lambda: None)
    assert not t["held"] and not [e for e in gpu.log if e[0] == "hold"]
    assert "stream not held" in peer_timer.record_timing({}, t, 1e6, 3e12)["timing"]
