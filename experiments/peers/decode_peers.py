#!/usr/bin/env python3
"""Peers of kvlab's decode attention, timed on the shapes of a kvlab sweep by kvlab's rules.

    python3 experiments/peers/decode_peers.py peers --kvlab-h5 perf_sweep.h5 --out perf_peers.h5
    python3 experiments/peers/decode_peers.py peers --kvlab-h5 perf_sweep.h5 --out paged.h5 --only cudnn_paged
    python3 experiments/peers/decode_peers.py crosscheck --kvlab-h5 timer_check.h5 --out crosscheck.h5
    python3 experiments/peers/decode_peers.py prewarm      # FlashInfer's JIT modules, no timing

peers: reads the decode_attention rows of a `kvlab sweep` result file (e.g. of
experiments/configs/perf.ini), the run's read and copy ceilings (run_ceilings.py: the pass raised by the sweep's ceiling rows), datasheet figure and [timing] section, and
times on every shape of it, with peer_timer.PeerTimer (the same flush kernel, bytes, events,
warm-up and stopping rule as gpu/bench):
  peer:sdpa_cudnn      PyTorch scaled_dot_product_attention, cuDNN backend, on contiguous
                       BF16 KV: q [batch, qo_heads, 1, d], k/v [batch, kv_heads, context, d],
                       GQA through enable_gqa (layout "contiguous"; block_size is the kvlab
                       row's, for the cost model's sake: contiguous KV has no pages)
  peer:sdpa_flash      the same, FlashAttention backend (--sdpa picks the backends)
  peer:flashinfer_tc   FlashInfer BatchDecodeWithPagedKVCacheWrapper, use_tensor_cores=True
  peer:flashinfer_cc   the same, use_tensor_cores=False (its CUDA-core decode kernels)
  peer:cudnn_paged     cuDNN's paged-KV SDPA (cudnn-frontend graph.sdpa with
                       paged_attention_k_table / v_table, padding mask, seq_len_q = 1 and
                       seq_len_kv = context per sequence) on the SAME page pools, page table and
                       query as the FlashInfer rows: cuDNN's container [pages, kv_heads, block, d]
                       is the HND pool itself, or the NHD pool described by strides
                       (page_pool_as_cudnn_container); BF16 only. One graph per shape (validate,
                       build_operation_graph, plans of heuristics A then FALLBACK, check_support,
                       build_plans) and one workspace; only graph.execute is timed, on the
                       timer's stream (the handle's stream is set to torch's current stream
                       inside the timed call; cudnn.set_stream skips an unchanged stream)
FlashInfer runs on paged caches of the kvlab row's layout (NHD [pages, block, kv_heads, d] or
HND [pages, kv_heads, block, d], separate K and V pools), page size and format (BF16, or FP8
E4M3 with unit K/V scales: FlashInfer 0.5.3 applies a non-unit v_scale as an extra
elementwise kernel on O, which this comparison does not charge it), built by kvlab's
page-table rule: the pool holds exactly the pages the batch needs, handed out as one seeded
random permutation, sequence after sequence (page_table(): the one rule of both paged peers, so
they read the same scatter). Inputs are seeded N(0, 1) (never zeros).
Each peer is validated before it is timed: relative L2 of the first <= 4 sequences' outputs
against float32 math over the same inputs (the same FP8 values for FP8), bound
PEER_REL_L2_MAX. Rows keep the kvlab schema and the kvlab row's study, axes and working set
(min_bytes), with version "peer:NAME" (cudnn_paged rows also name the plan that ran, label engine,
and the seconds its graph took to build, graph_build_s; the rows of the peers named by --kernels,
default sdpa_cudnn, name the GPU kernels one call launched, label kernels: NAME<<<grid; block>>>
in launch order, from one torch.profiler-traced call per shape in a pass after every timing of
the process);
what cannot run is recorded as skipped with the reason
(other KV formats, mixed lengths, a backend's refusal, the time budget). A cold peer row that
beats the run's best DRAM bandwidth (max of its read and copy ceilings) is recorded as failed ("timing invalid"), printed as a WARNING, and
counted in the file's attribute ceiling_exceeded_rows.

crosscheck: the two-timer check. For the bandwidth rows of a kvlab file whose operation the
Python side can issue identically (read with load cg, depth 4: the flush kernel of
gpu/bench/l2_flush.cuh on the row's grid; copy with load memcpy: cudaMemcpyAsync), times the
same operation through PeerTimer and compares the medians with the file's (the `kvlab sweep`
process). Two timings agree when they differ by at most max(--tol x time, --tol-abs-us): 2 %, or
0.32 us for launch-bound calls (peer_timer.TIMER_UNCERTAINTY_US: the level such a call settles
at moves by up to ~0.3 us, either sign, from process to process). With --in-process on (or auto
and the kvlab package with its GPU extension importable), the same operation is also timed by
gpu/bench's C++ harness inside this process (kvlab.bench.time_bandwidth, the C++ and Python
timings of a row back to back, their order alternating from row to row), and the Python timer
must agree with it too. Exit 1 on any disagreement. --diagnose also times each operation on a non-blocking
stream of the timer's own and with a fresh flush buffer, and reports those medians next to the
verdict (columns python_own_stream_us, python_fresh_buffers_us; information only),
and reads once more with l2_flush.cuh's stamped kernel: events and in-kernel duration
(python_stamped_events_us, python_in_kernel_us; gpu_tests BenchHarness.EventsBracketTheKernel
prints the C++ side's).

--only picks peers (sdpa, flashinfer, cudnn_paged; default all), --studies the sweep's studies to take
shapes from (default all). The file's peer_software attribute names torch, CUDA, torch's cuDNN,
FlashInfer and cudnn-frontend with the cuDNN library it drives.

Exit codes: 0 ok, 1 a cross-check disagreed or the peers failed to run at all, 2 bad input.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from peer_results import ROOT, device_attrs, load_results, utc_now, write_result_file  # noqa: E402
from peer_timer import TIMER_UNCERTAINTY_US, PeerTimer, TimingOptions, record_timing  # noqa: E402
from run_ceilings import run_ceilings  # noqa: E402

# A peer is validated against float32 math over its own inputs: BF16 output rounding alone
# gives ~4e-3; a wrong layout, page table or scale gives ~1. Tighter than any real bug, far
# above rounding.
PEER_REL_L2_MAX = 2e-2
VALIDATED_SEQS = 4
FLASHINFER_FORMATS = {"bf16": "bfloat16", "fp8_e4m3": "float8_e4m3fn"}
DECODE_AXES = ["layout", "kv_format", "head_dim", "block_size", "num_kv_heads", "gqa_group", "batch", "context",
               "lengths", "seed", "graph", "version"]
DECODE_NUMERIC = {"head_dim", "block_size", "num_kv_heads", "gqa_group", "batch", "context", "seed"}
TIMING_METRICS = ["median_us", "q1_us", "q3_us", "rel_iqr", "min_us", "reps", "converged", "cold_l2",
                  "calls_per_sample", "flush_bytes", "l2_bytes", "working_set_bytes", "bytes_per_s",
                  "ceiling_bytes_per_s", "pct_read_ceiling", "pct_copy_ceiling", "pct_datasheet", "floor_us",
                  "excess_us", "exceeds_ceiling", "timing_valid"]
PEER_METRICS = TIMING_METRICS + ["min_bytes", "rel_l2", "validated_seqs", "graph_build_s"]
PEER_LABELS = ["flush", "timing", "validation", "engine", "kernels"]
# --kernels: the SDPA peers whose rows record the GPU kernels one call launched (label kernels,
# from one profiled call per shape in a pass after every timing of the process, so that the
# profiler cannot touch a timing). cuDNN picks its SDPA engine inside the library, so its rows
# are the ones a reader cannot otherwise tell apart (cudnn_paged rows name their plan, label
# engine; FlashInfer's plan is its own open code).
KERNEL_PEERS_DEFAULT = "sdpa_cudnn"
KERNEL_PASS_GRACE_S = 10.0  # the kernel pass may run this long past --budget-s
# --only: which peers run (default all).
PEER_GROUPS = ("sdpa", "flashinfer", "cudnn_paged")
# Seed base of the page-table rule: the permutation of a pool of P pages is drawn with seed base + P.
PAGE_TABLE_SEED = 0x7AB1E
# Why the paged peers skip a mixed-length shape (the one reason both give).
MIXED_LENGTHS_REASON = "mixed lengths: kvlab's seeded lengths are not reproduced on the Python side"


class BadInput(Exception):
    pass


def log(msg: str) -> None:
    print(msg, flush=True)


# ----------------------------------------------------------------------------- inputs
def read_sweep(path: str):
    """(results, decode rows as dicts) of a kvlab sweep file."""
    try:
        res = load_results(path)
    except Exception as e:  # analysis.load.ResultFileError and h5py errors: bad input
        raise BadInput(str(e)) from None
    idx = res.index
    if idx.empty or "kind" not in idx.columns:
        return res, []
    rows = idx[(idx["kind"] == "decode_attention") & (idx["status"] != "skipped")]
    return res, [r.to_dict() for _, r in rows.iterrows()]


def shapes_of(rows: list) -> list:
    """The distinct peer shapes, in sweep order: (study, batch, context, lengths, kv_format,
    layout, block_size, gqa_group, num_kv_heads, head_dim, graph) with the kvlab min_bytes."""
    seen, out = set(), []
    for r in rows:
        k = (r["batch"], r["context"], r["lengths"], r["kv_format"], r["layout"], r["block_size"],
             r["gqa_group"], r["num_kv_heads"], r["head_dim"], r["graph"])
        if k in seen:
            continue
        seen.add(k)
        out.append(dict(study=r["study"], batch=int(r["batch"]), context=int(r["context"]), lengths=str(r["lengths"]),
                        kv_format=str(r["kv_format"]), layout=str(r["layout"]), block_size=int(r["block_size"]),
                        gqa_group=int(r["gqa_group"]), num_kv_heads=int(r["num_kv_heads"]),
                        head_dim=int(r["head_dim"]), graph=str(r["graph"]), seed=int(r.get("seed", 0) or 0),
                        min_bytes=float(r.get("min_bytes", float("nan")))))
    return out


def peer_row(shape: dict, version: str, **kw) -> dict:
    row = {k: shape[k] for k in ("study", "batch", "context", "lengths", "kv_format", "layout", "block_size",
                                 "gqa_group", "num_kv_heads", "head_dim", "graph", "seed", "min_bytes")}
    row.update(kind="decode_attention", version=version, status="ok", reason="")
    row.update(kw)
    return row


# ----------------------------------------------------------------------------- paged KV
def page_table(batch: int, context: int, block_size: int):
    """kvlab's page-table rule, shared by every paged peer: the pool holds exactly the pages the
    batch needs (ceil(context / block_size) per sequence), handed out as one seeded random
    permutation of the pool, sequence after sequence (as a running allocator leaves them).
    Returns (pages per sequence, pages in the pool, table: int32 [batch * pages per sequence],
    sequence s's pages at [s * per_seq, (s + 1) * per_seq))."""
    if batch < 1 or context < 1 or block_size < 1:
        raise ValueError(f"page_table: batch {batch}, context {context} and block_size {block_size} must be >= 1")
    per_seq = -(-context // block_size)
    pages = batch * per_seq
    table = np.random.default_rng(PAGE_TABLE_SEED + pages).permutation(pages).astype(np.int32)
    return per_seq, pages, table


def page_pool_as_cudnn_container(layout: str, pages: int, kv_heads: int, block_size: int, head_dim: int):
    """(dims, strides), in elements, that describe a kvlab K or V page pool as cuDNN's paged
    container [pages, kv_heads, block_size, head_dim]: an HND pool [pages, kv_heads, block, d] is
    that container as stored; an NHD pool [pages, block, kv_heads, d] is the same memory with the
    head and token strides exchanged (cuDNN may refuse such strides: the row then says so)."""
    dims = [pages, kv_heads, block_size, head_dim]
    if layout == "hnd":
        return dims, [kv_heads * block_size * head_dim, block_size * head_dim, head_dim, 1]
    if layout == "nhd":
        return dims, [block_size * kv_heads * head_dim, head_dim, kv_heads * head_dim, 1]
    raise ValueError(f"a cuDNN paged container describes an NHD or HND pool, not {layout!r}")


def cudnn_paged_refusal(shape: dict, cudnn_error: str = "") -> str:
    """Why peer:cudnn_paged does not run on this shape ("" when it does): cudnn-frontend not
    importable (cudnn_error), a KV format other than BF16, a layout without pages, mixed lengths."""
    if cudnn_error:
        return cudnn_error
    if shape["kv_format"] != "bf16":
        return (f"BF16 only: cuDNN's FP8 SDPA (sdpa_fp8) takes Q, K and V all in FP8 with descale tensors, "
                f"while kvlab's {shape['kv_format']} decode keeps the query in BF16 over quantized KV: not the "
                f"same computation")
    if shape["layout"] not in ("nhd", "hnd"):
        return f"cuDNN's paged container is an NHD or HND page pool, not {shape['layout']}"
    if shape["lengths"] != "uniform":
        return MIXED_LENGTHS_REASON
    return ""


# ----------------------------------------------------------------------------- reference
def reference_attention(torch, q, k, v):
    """float32 math: q [n, hq, d], k/v [n, L, kvh, d] -> o [n, hq, d]."""
    n, hq, d = q.shape
    kvh = k.shape[2]
    qf = q.float().view(n, kvh, hq // kvh, d)
    kf = k.float().permute(0, 2, 3, 1)  # [n, kvh, d, L]
    vf = v.float().permute(0, 2, 1, 3)  # [n, kvh, L, d]
    s = torch.matmul(qf, kf) / math.sqrt(d)
    return torch.matmul(torch.softmax(s, dim=-1), vf).reshape(n, hq, d)


def rel_l2(torch, got, want) -> float:
    got = got.float()
    if not bool(torch.isfinite(got).all()):
        return float("inf")
    return float(torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want))


# ----------------------------------------------------------------------------- the peers
def kernel_summary(events: list) -> str:
    """The label `kernels` of a peer row: the GPU kernels of one call, in launch order, each as
    NAME<<<grid, block>>> from the profiler's trace events (chrome-trace "kernel" events with
    args grid and block); several launches of one kernel with one grid are counted (x N)."""
    out = []
    for e in sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e.get("ts", 0)):
        args = e.get("args", {})
        grid = ",".join(str(v) for v in args.get("grid", []))
        block = ",".join(str(v) for v in args.get("block", []))
        item = f"{e.get('name', '?')}<<<{grid}; {block}>>>"
        if out and out[-1][0] == item:
            out[-1][1] += 1
        else:
            out.append([item, 1])
    return " ; ".join(f"{k} x {n}" if n > 1 else k for k, n in out)


def launched_kernels(torch, fn) -> str:
    """The kernels that one call of fn launches (kernel_summary of a torch.profiler trace of
    that call alone; CUDA activity only). Information: "" when the profiler is unavailable."""
    import json
    import tempfile
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        with open(f.name) as g:
            trace = json.load(g)
    return kernel_summary(trace.get("traceEvents", []))


class Peers:
    def __init__(self, timer: PeerTimer, ceiling: float, copy_ceiling: float, peak: float, sdpa: list,
                 deadline: float, use_cudnn: bool = True):
        import torch
        self.torch, self.timer, self.ceiling, self.copy_ceiling, self.peak = torch, timer, ceiling, copy_ceiling, peak
        self.sdpa, self.deadline = sdpa, deadline
        self.kernel_peers = set()
        self.flashinfer, self.flashinfer_error = None, ""
        try:
            import flashinfer
            self.flashinfer = flashinfer
        except Exception as e:  # not installed here: every FlashInfer row says so
            self.flashinfer_error = f"flashinfer not importable: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        self.workspace = None
        self.cudnn, self.cudnn_handle, self.cudnn_error = None, None, ""
        if use_cudnn:
            try:
                torch.backends.cudnn.version()  # torch's libcudnn loaded first: the frontend binds the same one
                import cudnn
                self.cudnn_handle = cudnn.create_handle()
                self.cudnn = cudnn
            except Exception as e:  # not installed or no usable cuDNN: every cudnn_paged row says so
                self.cudnn_error = (f"cudnn-frontend not usable: {type(e).__name__}: "
                                    f"{str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}")

    def out_of_time(self) -> bool:
        return time.monotonic() > self.deadline

    def _timed(self, row: dict, fn, graph: bool, nval: int, rel: float) -> dict:
        row.update(rel_l2=rel, validated_seqs=float(nval),
                   validation=f"sequences 0..{nval - 1}: relative L2 vs float32 math over the same inputs")
        if not rel < PEER_REL_L2_MAX:
            row.update(status="failed", reason=f"validation failed: rel_l2 {rel:.3g} >= {PEER_REL_L2_MAX}")
            return row
        t = self.timer.time(fn, graph=graph)
        record_timing(row, t, row["min_bytes"], self.ceiling, "read", self.peak, self.copy_ceiling)
        return row

    def _guard(self, row: dict, body) -> dict:
        """Runs body(row); a refusal (exception) becomes a skipped row with the reason."""
        if self.out_of_time():
            row.update(status="skipped", reason="not run: the peers' time budget ran out")
            return row
        t0 = time.monotonic()
        try:
            body(row)
        except Exception as e:  # a backend that refuses this shape or mode: recorded, not fatal
            msg = str(e).strip().splitlines()[0][:240] if str(e).strip() else ""
            row.update(status="skipped", reason=f"{type(e).__name__}: {msg}")
            try:
                self.torch.cuda.synchronize()
            except Exception as e2:  # a sticky device error: nothing after it can be trusted
                raise RuntimeError(f"the device failed after {row['version']}: {e2}") from e
        row["seconds"] = time.monotonic() - t0
        return row

    # -- cuDNN / FlashAttention SDPA on contiguous KV ---------------------------------------
    def sdpa_rows(self, shape: dict) -> list:
        torch = self.torch
        names = ["sdpa_" + s for s in self.sdpa]
        base = dict(shape, layout="contiguous")
        why = None
        if shape["kv_format"] != "bf16":
            why = f"SDPA takes no quantized KV ({shape['kv_format']})"
        elif shape["lengths"] != "uniform":
            why = "mixed lengths: contiguous SDPA would pad every sequence to the longest"
        if why:
            return [peer_row(base, "peer:" + n, status="skipped", reason=why) for n in names]
        q, k, v = self.sdpa_inputs(shape)
        b = shape["batch"]
        nval = min(b, VALIDATED_SEQS)
        want = reference_attention(torch, q[:nval, :, 0], k[:nval].transpose(1, 2), v[:nval].transpose(1, 2))
        rows = []
        for s in self.sdpa:
            row = peer_row(base, "peer:sdpa_" + s)

            def body(row, s=s):
                fn = self.sdpa_call(s, q, k, v)
                out = fn()
                torch.cuda.synchronize()
                self._timed(row, fn, shape["graph"] == "on", nval, rel_l2(torch, out[:nval, :, 0], want))
            rows.append(self._guard(row, body))
        del q, k, v, want
        return rows

    def sdpa_inputs(self, shape: dict) -> tuple:
        """Seeded q [batch, qo_heads, 1, d], k / v [batch, kv_heads, context, d] (BF16) of a shape."""
        torch = self.torch
        b, L, kvh, d = shape["batch"], shape["context"], shape["num_kv_heads"], shape["head_dim"]
        hq = kvh * shape["gqa_group"]
        gen = torch.Generator(device="cuda")
        gen.manual_seed(1234 + 7 * b + L + 131 * shape["gqa_group"])
        q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(b, kvh, L, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(b, kvh, L, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        return q, k, v

    @staticmethod
    def sdpa_call(backend: str, q, k, v):
        """One SDPA call on `backend` (cudnn, flash, efficient) only."""
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        b = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
             "efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]

        def fn():
            with sdpa_kernel([b]):
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        return fn

    def record_kernels(self, rows: list) -> float:
        """The label kernels of every ok row of a peer in self.kernel_peers (SDPA backends), one
        torch.profiler-traced call per row on its shape's inputs made anew; run after every
        timing of the process. Returns the seconds it took."""
        t0 = time.monotonic()
        for row in rows:
            name = row["version"].removeprefix("peer:")
            if row.get("status") != "ok" or name not in self.kernel_peers:
                continue
            if time.monotonic() > self.deadline + KERNEL_PASS_GRACE_S:  # the file must still be written
                row["kernels"] = "not recorded: the peers' time budget ran out"
                continue
            try:
                q, k, v = self.sdpa_inputs(row)
                fn = self.sdpa_call(name.removeprefix("sdpa_"), q, k, v)
                fn()  # the first call of a shape may build a plan: not the call recorded
                row["kernels"] = launched_kernels(self.torch, fn)
                del q, k, v
            except Exception as e:  # information only: the row's timing stands without it
                row["kernels"] = f"not recorded: {type(e).__name__}: {str(e).strip().splitlines()[0][:120]}"
                self.torch.cuda.synchronize()
        return time.monotonic() - t0

    # -- the paged peers' common inputs ----------------------------------------------------
    def paged_case(self, shape: dict) -> dict:
        """The inputs both paged peers read for a shape: K and V pools of the row's layout and
        format (seeded N(0, 1)), the query, the page table of page_table() and the float32
        reference over the first <= VALIDATED_SEQS sequences, all on the GPU."""
        torch = self.torch
        b, L, kvh, d, bs = (shape["batch"], shape["context"], shape["num_kv_heads"], shape["head_dim"],
                            shape["block_size"])
        hq = kvh * shape["gqa_group"]
        per_seq, pages, table = page_table(b, L, bs)
        gen = torch.Generator(device="cuda")
        gen.manual_seed(4321 + 7 * b + L + 131 * shape["gqa_group"] + bs)
        kv_dtype = getattr(torch, FLASHINFER_FORMATS[shape["kv_format"]])
        nhd = shape["layout"] == "nhd"
        page_shape = (pages, bs, kvh, d) if nhd else (pages, kvh, bs, d)

        def pool():
            x = torch.randn(page_shape, device="cuda", dtype=torch.bfloat16, generator=gen)
            return x if kv_dtype == torch.bfloat16 else x.to(kv_dtype)
        k_cache, v_cache = pool(), pool()
        q = torch.randn(b, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        indices = torch.from_numpy(table).cuda()
        nval = min(b, VALIDATED_SEQS)

        def gathered(cache):  # [nval, L, kvh, d] of the first nval sequences, as stored
            pg = cache[indices[: nval * per_seq].long()].float()
            if not nhd:
                pg = pg.permute(0, 2, 1, 3)
            return pg.reshape(nval, per_seq * bs, kvh, d)[:, :L]
        want = reference_attention(torch, q[:nval], gathered(k_cache), gathered(v_cache))
        return dict(k_cache=k_cache, v_cache=v_cache, q=q, indices=indices, per_seq=per_seq, pages=pages,
                    kv_dtype=kv_dtype, nhd=nhd, hq=hq, nval=nval, want=want)

    def paged_rows(self, shape: dict, which: set) -> list:
        """FlashInfer's rows ("flashinfer" in which) then cuDNN paged's ("cudnn_paged"), on one
        set of inputs (paged_case): both read the same pools through the same page table."""
        fi_why = self.flashinfer_refusal(shape) if "flashinfer" in which else ""
        cu_why = cudnn_paged_refusal(shape, self.cudnn_error) if "cudnn_paged" in which else ""
        fi_names = ["flashinfer_tc", "flashinfer_cc"] if "flashinfer" in which else []
        cu_names = ["cudnn_paged"] if "cudnn_paged" in which else []
        runs = (fi_names if not fi_why else []) + (cu_names if not cu_why else [])
        case, case_error = None, ""
        if runs and not self.out_of_time():
            try:
                case = self.paged_case(shape)
            except Exception as e:  # e.g. out of memory for the pools: every row of the shape says so
                case_error = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
                self.torch.cuda.synchronize()
        rows = []
        for names, why, fn in ((fi_names, fi_why, self.flashinfer_rows), (cu_names, cu_why, self.cudnn_paged_rows)):
            if not names:
                continue
            if why or case_error:
                rows += [peer_row(shape, "peer:" + n, status="skipped", reason=why or case_error) for n in names]
            elif case is None:  # the budget ran out before the inputs were made
                rows += [peer_row(shape, "peer:" + n, status="skipped",
                                  reason="not run: the peers' time budget ran out") for n in names]
            else:
                rows += fn(shape, case)
        del case
        return rows

    # -- FlashInfer's paged decode ----------------------------------------------------------
    def flashinfer_refusal(self, shape: dict) -> str:
        if self.flashinfer is None:
            return self.flashinfer_error
        if shape["kv_format"] not in FLASHINFER_FORMATS:
            return f"FlashInfer 0.5.3's paged decode takes BF16 or FP8 E4M3 KV, not {shape['kv_format']}"
        if shape["layout"] not in ("nhd", "hnd"):
            return f"FlashInfer's paged KV is NHD or HND, not {shape['layout']}"
        if shape["lengths"] != "uniform":
            return MIXED_LENGTHS_REASON
        return ""

    def flashinfer_rows(self, shape: dict, case: dict) -> list:
        torch = self.torch
        b, L, kvh, d, bs = (shape["batch"], shape["context"], shape["num_kv_heads"], shape["head_dim"],
                            shape["block_size"])
        hq, per_seq, nval, want = case["hq"], case["per_seq"], case["nval"], case["want"]
        k_cache, v_cache, q, indices = case["k_cache"], case["v_cache"], case["q"], case["indices"]
        indptr = (torch.arange(b + 1, dtype=torch.int32) * per_seq).cuda()
        last = torch.full((b,), (L - 1) % bs + 1, dtype=torch.int32).cuda()
        if self.workspace is None:
            self.workspace = torch.zeros(128 << 20, dtype=torch.uint8, device="cuda")
        out = torch.empty_like(q)
        rows = []
        for name, tc in (("flashinfer_tc", True), ("flashinfer_cc", False)):
            row = peer_row(shape, "peer:" + name)

            def body(row, tc=tc):
                w = self.flashinfer.BatchDecodeWithPagedKVCacheWrapper(self.workspace,
                                                                       "NHD" if case["nhd"] else "HND",
                                                                       use_tensor_cores=tc)
                w.plan(indptr, indices, last, hq, kvh, d, bs, pos_encoding_mode="NONE",
                       q_data_type=torch.bfloat16, kv_data_type=case["kv_dtype"])
                fn = (lambda: w.run(q, (k_cache, v_cache), out=out))
                fn()
                torch.cuda.synchronize()
                self._timed(row, fn, shape["graph"] == "on", nval, rel_l2(torch, out[:nval], want))
            rows.append(self._guard(row, body))
        del out
        return rows

    # -- cuDNN's paged SDPA -----------------------------------------------------------------
    def cudnn_paged_rows(self, shape: dict, case: dict) -> list:
        torch, cudnn = self.torch, self.cudnn
        b, L, kvh, d, bs = (shape["batch"], shape["context"], shape["num_kv_heads"], shape["head_dim"],
                            shape["block_size"])
        hq, per_seq, nval, want = case["hq"], case["per_seq"], case["nval"], case["want"]
        row = peer_row(shape, "peer:cudnn_paged")
        graph_on = shape["graph"] == "on"

        def body(row):
            t0 = time.monotonic()
            dims, strides = page_pool_as_cudnn_container(shape["layout"], case["pages"], kvh, bs, d)
            kc = case["k_cache"].as_strided(dims, strides)
            vc = case["v_cache"].as_strided(dims, strides)
            q4 = case["q"].view(b, hq, 1, d)  # [batch, qo_heads, 1, d]: BHSD and BSHD alike for one query
            o4 = torch.empty_like(q4)
            table = case["indices"].view(b, 1, per_seq, 1)  # cuDNN's page table [batch, 1, pages/seq, 1]
            seq_q = torch.ones(b, 1, 1, 1, dtype=torch.int32, device="cuda")
            seq_kv = torch.full((b, 1, 1, 1), L, dtype=torch.int32, device="cuda")
            kw = dict(is_cuda_graph_replay_expected=True) if graph_on else {}
            g = cudnn.pygraph(io_data_type=cudnn.data_type.BFLOAT16, intermediate_data_type=cudnn.data_type.FLOAT,
                              compute_data_type=cudnn.data_type.FLOAT, handle=self.cudnn_handle, **kw)
            tq, tk, tv = g.tensor_like(q4), g.tensor_like(kc), g.tensor_like(vc)
            tkt, tvt = g.tensor_like(table), g.tensor_like(table)
            tsq, tskv = g.tensor_like(seq_q), g.tensor_like(seq_kv)
            res = g.sdpa(name="paged_decode", q=tq, k=tk, v=tv, generate_stats=False, attn_scale=1.0 / math.sqrt(d),
                         use_causal_mask=False, use_padding_mask=True, seq_len_q=tsq, seq_len_kv=tskv,
                         paged_attention_k_table=tkt, paged_attention_v_table=tvt,
                         paged_attention_max_seq_len_kv=L)
            to = res[0] if isinstance(res, (tuple, list)) else res
            to.set_output(True).set_dim(list(o4.shape)).set_stride(list(o4.stride()))
            g.validate()
            g.build_operation_graph()
            g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
            g.check_support()
            g.build_plans()
            ws = torch.empty(max(1, int(g.get_workspace_size())), dtype=torch.uint8, device="cuda")
            pack = {tq: q4, tk: kc, tv: vc, tkt: table, tvt: table, tsq: seq_q, tskv: seq_kv, to: o4}
            try:
                row["engine"] = str(g.get_plan_name_at_index(int(getattr(g, "_plan_index", 0))))
            except Exception:  # the name is information only
                row["engine"] = ""
            row["graph_build_s"] = time.monotonic() - t0
            handle = self.cudnn_handle

            def fn():
                # The timer's stream is torch's current one (inside a capture too): the handle
                # launches there, as the other peers' calls do.
                cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
                g.execute(pack, ws, handle=handle)
            fn()
            torch.cuda.synchronize()
            self._timed(row, fn, graph_on, nval, rel_l2(torch, o4[:nval, :, 0], want))
        return [self._guard(row, body)]


def cmd_peers(a) -> int:
    res, rows = read_sweep(a.kvlab_h5)
    if not rows:
        raise BadInput(f"{a.kvlab_h5} has no decode_attention rows to take shapes from")
    if a.studies:
        want = [s.strip() for s in a.studies.split(",") if s.strip()]
        have = {str(r["study"]) for r in rows}
        missing = [s for s in want if s not in have]
        if missing:
            raise BadInput(f"--studies: {a.kvlab_h5} has no decode_attention rows of study '{missing[0]}' "
                           f"(it has: {', '.join(sorted(have))})")
        rows = [r for r in rows if str(r["study"]) in want]
    # The run's R and C (the ceilings pass raised by the sweep's ceiling rows; run_ceilings.py):
    # the peers are judged against the same ceilings as kvlab's rows.
    ceilings = run_ceilings(res)
    ceiling, copy_ceiling = ceilings.read, ceilings.copy
    peak = float(res.attrs.get("device_peak_bytes_per_s", 0) or 0)
    opts = TimingOptions.from_config_text(str(res.attrs.get("config_text", "")))
    if a.max_seconds is not None:
        opts.max_seconds = a.max_seconds
    sdpa = [s for s in a.sdpa.split(",") if s]
    for s in sdpa:
        if s not in ("cudnn", "flash", "efficient"):
            raise BadInput(f"--sdpa: unknown backend '{s}' (allowed: cudnn, flash, efficient)")
    only = parse_only(a.only)
    start = utc_now()
    import torch
    timer = PeerTimer(opts)
    deadline = time.monotonic() + a.budget_s if a.budget_s else float("inf")
    peers = Peers(timer, ceiling, copy_ceiling, peak, sdpa, deadline, use_cudnn="cudnn_paged" in only)
    peers.kernel_peers = parse_kernel_peers(a.kernels)
    log(f"[peers] {len(rows)} kvlab rows; read ceiling {ceiling / 1e12:.4g} TB/s; flush {timer.flush_bytes >> 20} MiB "
        f"(L2 {timer.l2_bytes >> 20} MiB); timing {opts}")
    if peers.flashinfer is not None:
        log(f"[peers] flashinfer {getattr(peers.flashinfer, '__version__', '?')}")
    else:
        log(f"[peers] {peers.flashinfer_error}")
    if "cudnn_paged" in only:
        log(f"[peers] {cudnn_versions(peers.cudnn) if peers.cudnn is not None else peers.cudnn_error}")
    out, seen_sdpa, broken = [], set(), ""
    for shape in shapes_of(rows):
        got = []
        sk = (shape["batch"], shape["context"], shape["gqa_group"], shape["num_kv_heads"], shape["head_dim"],
              shape["kv_format"], shape["lengths"], shape["graph"])
        names = []
        if "sdpa" in only and sk not in seen_sdpa:  # contiguous KV: one row per shape, any layout/page
            seen_sdpa.add(sk)
            names += [("sdpa", "peer:sdpa_" + s) for s in sdpa]
        if "flashinfer" in only:
            names += [("flashinfer", "peer:flashinfer_tc"), ("flashinfer", "peer:flashinfer_cc")]
        if "cudnn_paged" in only:
            names += [("cudnn_paged", "peer:cudnn_paged")]
        if broken:  # the device failed: the rest is recorded, not run (the file is still written)
            got = [peer_row(dict(shape, layout="contiguous") if kind == "sdpa" else shape, v,
                            status="skipped", reason=f"not run: the device failed earlier ({broken})")
                   for kind, v in names]
        else:
            try:
                if any(kind == "sdpa" for kind, _ in names):
                    got += peers.sdpa_rows(shape)
                if only & {"flashinfer", "cudnn_paged"}:
                    got += peers.paged_rows(shape, only)
                torch.cuda.empty_cache()
            except RuntimeError as e:
                broken = str(e).splitlines()[0][:200]
                log(f"ERROR: {broken}: the remaining peers are recorded as not run")
                got = [peer_row(dict(shape, layout="contiguous") if kind == "sdpa" else shape, v,
                                status="skipped", reason=f"not run: the device failed ({broken})")
                       for kind, v in names]
        for r in got:
            print_row(r)
        out += got
    # After every timing of this process (a profiler session cannot touch a timed call).
    kernel_s = peers.record_kernels(out) if peers.kernel_peers and not broken else 0.0
    exceeded = [r for r in out if r.get("exceeds_ceiling") == 1.0]
    for r in exceeded:
        log(f"WARNING: {r['version']} {r['batch']}x{r['context']} {r['kv_format']} moved "
            f"{r['bytes_per_s'] / 1e12:.4g} TB/s, beyond the best DRAM bandwidth {max(ceiling, copy_ceiling) / 1e12:.4g} "
            f"TB/s of this run "
            f"({'cold: recorded as invalid' if r.get('cold_l2') == 1.0 else 'warm L2'})")
    attrs = device_attrs(res)
    attrs.update(read_ceiling_bytes_per_s=np.float64(ceiling), copy_ceiling_bytes_per_s=np.float64(copy_ceiling))
    attrs.update(argv=" ".join(sys.argv), sweep_name="peers", config_path="", config_text=str(res.attrs.get(
        "config_text", "")), peer_source=os.path.abspath(a.kvlab_h5), peer_source_commit=str(res.attrs.get(
            "git_commit", "")), ceiling_exceeded_rows=np.int64(len(exceeded)),
        peer_timing=str(opts), peer_flush_bytes=np.int64(timer.flush_bytes),
        peer_software=software_versions(torch, peers.flashinfer, peers.cudnn))
    write_result_file(a.out, out, attrs, DECODE_AXES, DECODE_NUMERIC, PEER_METRICS, PEER_LABELS,
                      run=dict(started_utc=start, argv=" ".join(sys.argv), resumed=0,
                               device_name=str(res.attrs.get("device_name", "")),
                               read_ceiling_bytes_per_s=ceiling, copy_ceiling_bytes_per_s=copy_ceiling))
    n = {s: sum(r["status"] == s for r in out) for s in ("ok", "skipped", "failed")}
    log(f"[peers] wrote {a.out}: {len(out)} peer rows (ok {n['ok']}, skipped {n['skipped']}, failed {n['failed']}); "
        f"{len(exceeded)} beyond the run's best DRAM bandwidth; kernels recorded for "
        f"{','.join(sorted(peers.kernel_peers)) or 'no peer'} in {kernel_s:.1f} s after the timings")
    return 1 if n["ok"] == 0 else 0


KERNEL_PEER_NAMES = ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient")


def parse_kernel_peers(text: str) -> set:
    """--kernels: a comma list of peer row names (KERNEL_PEER_NAMES), or "none"."""
    names = {s.strip() for s in (text or "").split(",") if s.strip()}
    if names == {"none"}:
        return set()
    bad = sorted(names - set(KERNEL_PEER_NAMES))
    if bad:
        raise BadInput(f"--kernels: unknown peer '{bad[0]}' (allowed: {', '.join(KERNEL_PEER_NAMES)}, or none)")
    return names


def parse_only(text: str) -> set:
    """--only: a comma list of PEER_GROUPS (empty: all of them)."""
    only = {s.strip() for s in (text or "").split(",") if s.strip()}
    bad = sorted(only - set(PEER_GROUPS))
    if bad:
        raise BadInput(f"--only: unknown peer '{bad[0]}' (allowed: {', '.join(PEER_GROUPS)})")
    return only or set(PEER_GROUPS)


def cudnn_versions(cudnn) -> str:
    """cudnn-frontend's version and the cuDNN library it drives."""
    try:
        backend = cudnn.backend_version_string()
    except Exception:
        backend = str(cudnn.backend_version())
    return f"cudnn-frontend {getattr(cudnn, '__version__', '?')} (cuDNN library {backend})"


def software_versions(torch, flashinfer, cudnn=None) -> str:
    parts = [f"torch {torch.__version__}", f"cuda {torch.version.cuda}",
             f"cudnn {torch.backends.cudnn.version()}"]
    if flashinfer is not None:
        parts.append(f"flashinfer {getattr(flashinfer, '__version__', '?')}")
    if cudnn is not None:
        parts.append(cudnn_versions(cudnn))
    try:
        import cupy
        parts.append(f"cupy {cupy.__version__}")
    except Exception:
        pass
    return "; ".join(parts)


def print_row(r: dict) -> None:
    shape = f"{r['study']:10s} {r['batch']}x{r['context']} g{r['gqa_group']} {r['kv_format']:9s} {r['layout']:10s} " \
            f"b{r['block_size']:<3d} graph={r['graph']:3s} {r['version']:20s}"
    if r["status"] == "ok":
        log(f"{shape} {r['median_us']:10.2f} us  iqr {r['rel_iqr']:.3f}  {r['bytes_per_s'] / 1e12:6.3f} TB/s "
            f"{r['pct_read_ceiling']:5.1f} % of R  excess {r['excess_us']:8.2f} us  rel_l2 {r['rel_l2']:.1e}"
            + (f"  engine {r['engine']} (graph built in {r['graph_build_s']:.2f} s)" if r.get("engine") else "")
            + (f"  kernels {r['kernels']}" if r.get("kernels") else ""))
    else:
        log(f"{shape} {r['status']}: {r.get('reason', '')}")


# ----------------------------------------------------------------------------- cross-check
BANDWIDTH_AXES = ["op", "load", "depth", "blocks_per_sm", "chunk_kib", "order", "mib"]
BANDWIDTH_NUMERIC = {"depth", "blocks_per_sm", "chunk_kib", "mib"}
CROSSCHECK_EXTRA = ["kvlab_median_us", "rel_diff_vs_kvlab", "cpp_in_process_us", "cpp_in_process_rel_iqr",
                    "rel_diff_in_process", "python_own_stream_us", "python_fresh_buffers_us",
                    "python_stamped_events_us", "python_in_kernel_us"]


def in_process_timer(mode: str):
    """kvlab.bench (gpu/bench's C++ harness in this process) for --in-process: None when off, or
    auto and not importable (with the reason logged); raises BadInput when on and not importable."""
    if mode == "off":
        return None
    try:
        import kvlab.bench
        from kvlab._native import native
        if not native().has_cuda:
            raise ImportError("the kvlab extension was built without CUDA")
        return kvlab.bench
    except ImportError as e:
        if mode == "on":
            raise BadInput(f"--in-process on: the kvlab package with its GPU extension is not importable ({e})")
        log(f"[crosscheck] no in-process C++ timing (kvlab package not importable: {e}); the file's times decide")
        return None


def within(a_us: float, b_us: float, tol: float, tol_abs_us: float) -> bool:
    """Two timings of one operation agree: |a - b| <= max(tol x b, tol_abs_us)."""
    return abs(a_us - b_us) <= max(tol * b_us, tol_abs_us)


def crosscheck_verdict(python_us: float, sweep_us: float, in_process_us, tol: float, tol_abs_us: float) -> tuple:
    """(status, reason) of one cross-check row: the Python timer against the sweep's file (the
    other process) and, when timed (in_process_us not None), against gpu/bench's C++ timer in
    this process; each must agree within max(tol x time, tol_abs_us) (within()). The absolute
    part is the level a launch-bound call settles at, which moves by up to ~0.3 us, either sign,
    between processes and between the two timers (peer_timer.TIMER_UNCERTAINTY_US says where
    that was measured); a relative tolerance alone would fail a 4 us call on it."""
    bad = []
    if not within(python_us, sweep_us, tol, tol_abs_us):
        bad.append(f"python vs kvlab sweep {python_us - sweep_us:+.3f} us ({python_us / sweep_us - 1:+.2%})")
    if in_process_us is not None and not within(python_us, in_process_us, tol, tol_abs_us):
        bad.append(f"python vs C++ harness in one process {python_us - in_process_us:+.3f} us "
                   f"({python_us / in_process_us - 1:+.2%})")
    if bad:
        return "failed", "; ".join(bad) + f": beyond max({tol:.0%}, {tol_abs_us:.2f} us)"
    return "ok", ""


def cmd_crosscheck(a) -> int:
    try:
        res = load_results(a.kvlab_h5)
    except Exception as e:
        raise BadInput(str(e)) from None
    idx = res.index
    rows = [] if idx.empty else [r.to_dict() for _, r in idx[(idx["kind"] == "bandwidth") &
                                                             (idx["status"] == "ok")].iterrows()]
    if not rows:
        raise BadInput(f"{a.kvlab_h5} has no timed bandwidth rows to cross-check")
    opts = TimingOptions.from_config_text(str(res.attrs.get("config_text", "")))
    start = utc_now()
    import torch
    timer = PeerTimer(opts)
    diag = PeerTimer(opts, stream="own") if a.diagnose else None
    cpp = in_process_timer(a.in_process)
    out, worst, worst_in = [], 0.0, 0.0
    log(f"[crosscheck] the same operation through gpu/bench (kvlab sweep) and peer_timer.py"
        f"{', and through gpu/bench in this process (kvlab.bench)' if cpp else ''}; tolerance max({a.tol:.1%}, "
        f"{a.tol_abs_us:.2f} us)")
    for i, r in enumerate(rows):
        row = {c: r.get(c, 0 if c in BANDWIDTH_NUMERIC else "") for c in BANDWIDTH_AXES}
        row.update(study=r["study"], kind="bandwidth", status="ok", reason="", kvlab_median_us=r["median_us"])
        nbytes = int(r["mib"]) << 20
        buf = torch.arange(1, nbytes // 4 + 1, dtype=torch.int32, device="cuda")
        if r["op"] == "read" and r["load"] == "cg" and int(r["depth"]) == timer.consts["KVLAB_L2_FLUSH_DEPTH"]:
            if int(r["blocks_per_sm"]) <= 0:
                row.update(status="skipped", reason="blocks_per_sm 0 (occupancy) is resolved in C++ only: give it")
                out.append(row)
                continue
            fn = (lambda buf=buf, r=r: timer.read(buf.data_ptr(), nbytes, int(r["blocks_per_sm"])))
            moved = float(nbytes)
        elif r["op"] == "copy" and r["load"] == "memcpy":
            dst = torch.empty_like(buf)
            fn = (lambda buf=buf, dst=dst: timer.memcpy(dst.data_ptr(), buf.data_ptr(), nbytes))
            moved = 2.0 * nbytes
        else:
            row.update(status="skipped", reason=f"{r['op']} {r['load']} d{r['depth']}: its kernel exists in C++ only")
            out.append(row)
            continue
        torch.cuda.synchronize()
        cpp_t = None

        def time_cpp(r=r):
            return cpp.time_bandwidth(str(r["op"]), str(r["load"]), mib=int(r["mib"]), depth=int(r["depth"]),
                                      blocks_per_sm=int(r["blocks_per_sm"]), **dataclasses.asdict(opts))
        if cpp is not None and i % 2 == 0:
            cpp_t = time_cpp()
        t = timer.time(fn, graph=False)
        if cpp is not None and i % 2 == 1:
            cpp_t = time_cpp()
        ceiling_name = "copy" if r["op"] == "copy" else "read"
        other_name = "read" if ceiling_name == "copy" else "copy"
        ceiling = float(res.attrs.get(f"{ceiling_name}_ceiling_bytes_per_s", 0) or 0)
        record_timing(row, t, moved, ceiling, ceiling_name, float(res.attrs.get("device_peak_bytes_per_s", 0) or 0),
                      float(res.attrs.get(f"{other_name}_ceiling_bytes_per_s", 0) or 0))
        diff = row["median_us"] / r["median_us"] - 1.0
        row["rel_diff_vs_kvlab"] = diff
        diff_in = None
        if cpp_t is not None:
            diff_in = row["median_us"] / cpp_t["median_us"] - 1.0
            row.update(cpp_in_process_us=cpp_t["median_us"], cpp_in_process_rel_iqr=cpp_t["rel_iqr"],
                       rel_diff_in_process=diff_in)
            worst_in = max(worst_in, abs(diff_in))
        extra = ""
        if diag is not None:
            # The same call on a non-blocking stream of the timer's own (as gpu/bench times), and
            # with the flush buffer allocated anew (as gpu/bench does per point).
            row["python_own_stream_us"] = diag.time(fn, graph=False)["median_us"]
            fresh = PeerTimer(opts)
            row["python_fresh_buffers_us"] = fresh.time(fn, graph=False)["median_us"]
            del fresh
            extra = (f"; diagnose: own stream {row['python_own_stream_us']:.3f} us, fresh flush buffer "
                     f"{row['python_fresh_buffers_us']:.3f} us")
            if r["op"] == "read":
                # Events vs the kernel's own duration (%globaltimer): the timer's fixed cost.
                ts, kus = timer.time_read_stamped(buf.data_ptr(), nbytes, int(r["blocks_per_sm"]))
                row["python_stamped_events_us"] = ts["median_us"]
                row["python_in_kernel_us"] = float(np.median(kus[-ts["reps"]:]))
                extra += (f", stamped: events {ts['median_us']:.3f} us, in-kernel {row['python_in_kernel_us']:.3f} us")
        worst = max(worst, abs(diff))
        status, reason = crosscheck_verdict(row["median_us"], r["median_us"],
                                            cpp_t["median_us"] if cpp_t else None, a.tol, a.tol_abs_us)
        if status == "failed":
            row.update(status="failed", reason=f"python {row['median_us']:.3f} us, kvlab sweep {r['median_us']:.3f} us"
                                               + (f", C++ in this process {cpp_t['median_us']:.3f} us"
                                                  if cpp_t else "") + f": {reason}")
        inproc = (f", C++ in this process {cpp_t['median_us']:9.3f} us (iqr {cpp_t['rel_iqr']:.3f}): "
                  f"python {row['median_us'] - cpp_t['median_us']:+.3f} us" if cpp_t else "")
        log(f"[crosscheck] {r['op']:4s} {r['load']:6s} d{int(r['depth'])} b{int(r['blocks_per_sm'])} "
            f"{int(r['mib']):5d} MiB: kvlab sweep {r['median_us']:9.3f} us (iqr {r['rel_iqr']:.3f}), python "
            f"{row['median_us']:9.3f} us (iqr {row['rel_iqr']:.3f}): {row['median_us'] - r['median_us']:+.3f} us "
            f"({diff:+.2%}){inproc} {'DISAGREE' if status == 'failed' else 'ok'}{extra}")
        out.append(row)
        del buf
    attrs = device_attrs(res)
    attrs.update(argv=" ".join(sys.argv), sweep_name="timer_crosscheck", config_path="",
                 config_text=str(res.attrs.get("config_text", "")), peer_source=os.path.abspath(a.kvlab_h5),
                 crosscheck_tolerance=float(a.tol), crosscheck_tolerance_abs_us=float(a.tol_abs_us),
                 crosscheck_worst=float(worst),
                 crosscheck_in_process=np.int64(cpp is not None), crosscheck_worst_in_process=float(worst_in),
                 peer_software=software_versions(torch, None))
    write_result_file(a.out, out, attrs, BANDWIDTH_AXES, BANDWIDTH_NUMERIC,
                      TIMING_METRICS + CROSSCHECK_EXTRA, ["flush", "timing"],
                      run=dict(started_utc=start, argv=" ".join(sys.argv), resumed=0))
    checked = [r for r in out if r["status"] != "skipped"]
    bad = [r for r in checked if r["status"] == "failed"]
    log(f"[crosscheck] {len(checked)} operations compared, worst difference {worst:.2%} against the sweep"
        + (f", {worst_in:.2%} in one process" if cpp is not None else "") + ": "
        f"{'AGREE' if checked and not bad else 'DISAGREE'} within max({a.tol:.0%}, {a.tol_abs_us:.2f} us)")
    return 0 if checked and not bad else 1


# ----------------------------------------------------------------------------- prewarm
def cmd_prewarm(a) -> int:
    """Compiles FlashInfer's JIT modules for the configurations the peers use (BF16 and FP8
    KV; tensor-core (batch prefill, fa2) and CUDA-core (batch decode) paths; head_dim 128)
    with the same arguments BatchDecodeWithPagedKVCacheWrapper.plan passes, so the timed run
    finds them built. Compiles only: no CUDA context, nothing runs on the GPU (set
    FLASHINFER_CUDA_ARCH_LIST, e.g. "9.0a", identically here and in the peers run)."""
    import concurrent.futures as cf
    import torch
    from flashinfer.jit import gen_batch_decode_module, gen_batch_prefill_module
    from flashinfer.utils import PosEncodingMode
    posenc = PosEncodingMode["NONE"].value
    specs = []
    for fmt in a.formats.split(","):
        if fmt not in FLASHINFER_FORMATS:
            raise BadInput(f"--formats: {fmt} is not one of {', '.join(FLASHINFER_FORMATS)}")
        kv = getattr(torch, FLASHINFER_FORMATS[fmt])
        args = (torch.bfloat16, kv, torch.bfloat16, torch.int32, a.head_dim, a.head_dim, posenc, False, False)
        specs.append((f"{fmt} cuda-core", gen_batch_decode_module(*args)))
        specs.append((f"{fmt} tensor-core", gen_batch_prefill_module("fa2", *args, False)))

    def build(item):
        name, spec = item
        t0 = time.monotonic()
        try:
            spec.build(verbose=False)
            return f"[prewarm] flashinfer {name}: built in {time.monotonic() - t0:.1f} s"
        except Exception as e:  # the peers run will try again and record the failure per row
            return f"[prewarm] flashinfer {name}: FAILED after {time.monotonic() - t0:.1f} s: {e}"
    with cf.ThreadPoolExecutor(max_workers=len(specs)) as ex:
        for msg in ex.map(build, specs):
            log(msg)
    return 0


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("peers", help="time the peers on the shapes of a kvlab sweep file")
    p.add_argument("--kvlab-h5", required=True, help="a `kvlab sweep` result file with decode_attention rows")
    p.add_argument("--out", required=True, help="HDF5 result file to write (kvlab schema; replaced)")
    p.add_argument("--sdpa", default="cudnn,flash", help="SDPA backends: cudnn, flash, efficient (default cudnn,flash)")
    p.add_argument("--only", default="", help="comma list of sdpa, flashinfer, cudnn_paged (default all three)")
    p.add_argument("--studies", default="", help="comma list of the sweep's studies to take shapes from (default all)")
    p.add_argument("--kernels", default=KERNEL_PEERS_DEFAULT,
                   help="SDPA peers whose rows record the kernels one call launched (one profiled call per "
                        "shape after every timing; label kernels): a comma list of sdpa_cudnn, sdpa_flash, "
                        f"sdpa_efficient, or none (default {KERNEL_PEERS_DEFAULT})")
    p.add_argument("--budget-s", type=float, default=0.0,
                   help="stop starting peers after this many seconds (the rest are recorded as skipped)")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="override [timing] max_seconds of the sweep file")
    c = sub.add_parser("crosscheck", help="time a kvlab file's bandwidth operations from Python and compare")
    c.add_argument("--kvlab-h5", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--tol", type=float, default=0.02, help="allowed |python / kvlab - 1| (default 0.02)")
    c.add_argument("--tol-abs-us", type=float, default=TIMER_UNCERTAINTY_US,
                   help="allowed |python - kvlab| in us when larger than the relative part (default "
                        f"{TIMER_UNCERTAINTY_US}, peer_timer.TIMER_UNCERTAINTY_US)")
    c.add_argument("--in-process", default="auto", choices=("auto", "on", "off"),
                   help="also time each operation with gpu/bench's C++ harness in this process (kvlab.bench); "
                        "auto: when the kvlab package is importable (default auto)")
    c.add_argument("--diagnose", action="store_true",
                   help="also time each operation on the legacy default stream and with a fresh flush buffer")
    w = sub.add_parser("prewarm", help="compile FlashInfer's JIT modules (no timing)")
    w.add_argument("--formats", default="bf16,fp8_e4m3")
    w.add_argument("--head-dim", type=int, default=128)
    a = ap.parse_args(argv[1:])
    try:
        if a.cmd == "peers":
            if a.budget_s < 0:
                raise BadInput("--budget-s must be >= 0")
            parse_only(a.only)
            parse_kernel_peers(a.kernels)
            return cmd_peers(a)
        if a.cmd == "crosscheck":
            if not 0 < a.tol < 1:
                raise BadInput("--tol must be in (0, 1)")
            if not 0 <= a.tol_abs_us < 10:
                raise BadInput("--tol-abs-us must be in [0, 10)")
            return cmd_crosscheck(a)
        return cmd_prewarm(a)
    except BadInput as e:
        print(f"decode_peers.py: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
