#!/usr/bin/env python3
"""Peers of kvlab's decode attention, timed on the shapes of a kvlab sweep by kvlab's rules.

    python3 experiments/peers/decode_peers.py peers --kvlab-h5 perf_sweep.h5 --out perf_peers.h5
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
FlashInfer runs on paged caches of the kvlab row's layout (NHD [pages, block, kv_heads, d] or
HND [pages, kv_heads, block, d], separate K and V pools), page size and format (BF16, or FP8
E4M3 with unit K/V scales: FlashInfer 0.5.3 applies a non-unit v_scale as an extra
elementwise kernel on O, which this comparison does not charge it), built by kvlab's
page-table rule: the pool holds exactly the pages the batch needs, handed out as one seeded
random permutation, sequence after sequence. Inputs are seeded N(0, 1) (never zeros).
Each peer is validated before it is timed: relative L2 of the first <= 4 sequences' outputs
against float32 math over the same inputs (the same FP8 values for FP8), bound
PEER_REL_L2_MAX. Rows keep the kvlab schema and the kvlab row's study, axes and working set
(min_bytes), with version "peer:NAME"; what cannot run is recorded as skipped with the reason
(other KV formats, mixed lengths, a backend's refusal, the time budget). A cold peer row that
beats the run's best DRAM bandwidth (max of its read and copy ceilings) is recorded as failed ("timing invalid"), printed as a WARNING, and
counted in the file's attribute ceiling_exceeded_rows.

crosscheck: the two-timer check. For the bandwidth rows of a kvlab file whose operation the
Python side can issue identically (read with load cg, depth 4: the flush kernel of
gpu/bench/l2_flush.cuh on the row's grid; copy with load memcpy: cudaMemcpyAsync), times the
same operation through PeerTimer and compares the medians: |python / kvlab - 1| must be at
most --tol (2 %). Exit 1 otherwise. --diagnose also times each operation on a non-blocking
stream of the timer's own and with a fresh flush buffer, and reports those medians next to the
verdict (columns python_own_stream_us, python_fresh_buffers_us; information only),
and reads once more with l2_flush.cuh's stamped kernel: events and in-kernel duration
(python_stamped_events_us, python_in_kernel_us; gpu_tests BenchHarness.EventsBracketTheKernel
prints the C++ side's).

Exit codes: 0 ok, 1 a cross-check disagreed or the peers failed to run at all, 2 bad input.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from peer_results import ROOT, device_attrs, load_results, utc_now, write_result_file  # noqa: E402
from peer_timer import PeerTimer, TimingOptions, record_timing  # noqa: E402
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
PEER_METRICS = TIMING_METRICS + ["min_bytes", "rel_l2", "validated_seqs"]
PEER_LABELS = ["flush", "timing", "validation"]


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
class Peers:
    def __init__(self, timer: PeerTimer, ceiling: float, copy_ceiling: float, peak: float, sdpa: list,
                 deadline: float):
        import torch
        self.torch, self.timer, self.ceiling, self.copy_ceiling, self.peak = torch, timer, ceiling, copy_ceiling, peak
        self.sdpa, self.deadline = sdpa, deadline
        self.flashinfer, self.flashinfer_error = None, ""
        try:
            import flashinfer
            self.flashinfer = flashinfer
        except Exception as e:  # not installed here: every FlashInfer row says so
            self.flashinfer_error = f"flashinfer not importable: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        self.workspace = None

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
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        b, L, kvh, d = shape["batch"], shape["context"], shape["num_kv_heads"], shape["head_dim"]
        hq = kvh * shape["gqa_group"]
        gen = torch.Generator(device="cuda")
        gen.manual_seed(1234 + 7 * b + L + 131 * shape["gqa_group"])
        q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(b, kvh, L, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(b, kvh, L, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        nval = min(b, VALIDATED_SEQS)
        want = reference_attention(torch, q[:nval, :, 0], k[:nval].transpose(1, 2), v[:nval].transpose(1, 2))
        rows = []
        backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                    "efficient": SDPBackend.EFFICIENT_ATTENTION}
        for s in self.sdpa:
            row = peer_row(base, "peer:sdpa_" + s)

            def body(row, s=s):
                with sdpa_kernel([backends[s]]):
                    fn = (lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
                    out = fn()
                    torch.cuda.synchronize()
                    self._timed(row, fn, shape["graph"] == "on", nval, rel_l2(torch, out[:nval, :, 0], want))
            rows.append(self._guard(row, body))
        del q, k, v, want
        return rows

    # -- FlashInfer's paged decode ----------------------------------------------------------
    def flashinfer_rows(self, shape: dict) -> list:
        torch = self.torch
        names = ["flashinfer_tc", "flashinfer_cc"]
        why = None
        if self.flashinfer is None:
            why = self.flashinfer_error
        elif shape["kv_format"] not in FLASHINFER_FORMATS:
            why = f"FlashInfer 0.5.3's paged decode takes BF16 or FP8 E4M3 KV, not {shape['kv_format']}"
        elif shape["layout"] not in ("nhd", "hnd"):
            why = f"FlashInfer's paged KV is NHD or HND, not {shape['layout']}"
        elif shape["lengths"] != "uniform":
            why = "mixed lengths: kvlab's seeded lengths are not reproduced on the Python side"
        if why:
            return [peer_row(shape, "peer:" + n, status="skipped", reason=why) for n in names]
        b, L, kvh, d, bs = (shape["batch"], shape["context"], shape["num_kv_heads"], shape["head_dim"],
                            shape["block_size"])
        hq = kvh * shape["gqa_group"]
        per_seq = (L + bs - 1) // bs
        pages = max(1, b * per_seq)
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
        # kvlab's page-table rule: one seeded permutation of the pages, sequence after sequence.
        perm = torch.randperm(pages, generator=torch.Generator().manual_seed(0x7AB1E + pages)).to(torch.int32)
        indices = perm[: b * per_seq].cuda()
        indptr = (torch.arange(b + 1, dtype=torch.int32) * per_seq).cuda()
        last = torch.full((b,), (L - 1) % bs + 1 if L > 0 else 0, dtype=torch.int32).cuda()
        nval = min(b, VALIDATED_SEQS)

        def gathered(cache):  # [nval, L, kvh, d] of the first nval sequences, as stored
            pg = cache[indices[: nval * per_seq].long()].float()
            if not nhd:
                pg = pg.permute(0, 2, 1, 3)
            return pg.reshape(nval, per_seq * bs, kvh, d)[:, :L]
        want = reference_attention(torch, q[:nval], gathered(k_cache), gathered(v_cache))
        if self.workspace is None:
            self.workspace = torch.zeros(128 << 20, dtype=torch.uint8, device="cuda")
        out = torch.empty_like(q)
        rows = []
        for name, tc in (("flashinfer_tc", True), ("flashinfer_cc", False)):
            row = peer_row(shape, "peer:" + name)

            def body(row, tc=tc):
                w = self.flashinfer.BatchDecodeWithPagedKVCacheWrapper(self.workspace, "NHD" if nhd else "HND",
                                                                       use_tensor_cores=tc)
                w.plan(indptr, indices, last, hq, kvh, d, bs, pos_encoding_mode="NONE",
                       q_data_type=torch.bfloat16, kv_data_type=kv_dtype)
                fn = (lambda: w.run(q, (k_cache, v_cache), out=out))
                fn()
                torch.cuda.synchronize()
                self._timed(row, fn, shape["graph"] == "on", nval, rel_l2(torch, out[:nval], want))
            rows.append(self._guard(row, body))
        del k_cache, v_cache, q, want, out
        return rows


def cmd_peers(a) -> int:
    res, rows = read_sweep(a.kvlab_h5)
    if not rows:
        raise BadInput(f"{a.kvlab_h5} has no decode_attention rows to take shapes from")
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
    only = set(a.only.split(",")) if a.only else {"sdpa", "flashinfer"}
    start = utc_now()
    import torch
    timer = PeerTimer(opts)
    deadline = time.monotonic() + a.budget_s if a.budget_s else float("inf")
    peers = Peers(timer, ceiling, copy_ceiling, peak, sdpa, deadline)
    log(f"[peers] {len(rows)} kvlab rows; read ceiling {ceiling / 1e12:.4g} TB/s; flush {timer.flush_bytes >> 20} MiB "
        f"(L2 {timer.l2_bytes >> 20} MiB); timing {opts}")
    if peers.flashinfer is not None:
        log(f"[peers] flashinfer {getattr(peers.flashinfer, '__version__', '?')}")
    else:
        log(f"[peers] {peers.flashinfer_error}")
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
        if broken:  # the device failed: the rest is recorded, not run (the file is still written)
            got = [peer_row(dict(shape, layout="contiguous") if kind == "sdpa" else shape, v,
                            status="skipped", reason=f"not run: the device failed earlier ({broken})")
                   for kind, v in names]
        else:
            try:
                if any(kind == "sdpa" for kind, _ in names):
                    got += peers.sdpa_rows(shape)
                if "flashinfer" in only:
                    got += peers.flashinfer_rows(shape)
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
        peer_software=software_versions(torch, peers.flashinfer))
    write_result_file(a.out, out, attrs, DECODE_AXES, DECODE_NUMERIC, PEER_METRICS, PEER_LABELS,
                      run=dict(started_utc=start, argv=" ".join(sys.argv), resumed=0,
                               device_name=str(res.attrs.get("device_name", "")),
                               read_ceiling_bytes_per_s=ceiling, copy_ceiling_bytes_per_s=copy_ceiling))
    n = {s: sum(r["status"] == s for r in out) for s in ("ok", "skipped", "failed")}
    log(f"[peers] wrote {a.out}: {len(out)} peer rows (ok {n['ok']}, skipped {n['skipped']}, failed {n['failed']}); "
        f"{len(exceeded)} beyond the run's best DRAM bandwidth")
    return 1 if n["ok"] == 0 else 0


def software_versions(torch, flashinfer) -> str:
    parts = [f"torch {torch.__version__}", f"cuda {torch.version.cuda}",
             f"cudnn {torch.backends.cudnn.version()}"]
    if flashinfer is not None:
        parts.append(f"flashinfer {getattr(flashinfer, '__version__', '?')}")
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
            f"{r['pct_read_ceiling']:5.1f} % of R  excess {r['excess_us']:8.2f} us  rel_l2 {r['rel_l2']:.1e}")
    else:
        log(f"{shape} {r['status']}: {r.get('reason', '')}")


# ----------------------------------------------------------------------------- cross-check
BANDWIDTH_AXES = ["op", "load", "depth", "blocks_per_sm", "chunk_kib", "order", "mib"]
BANDWIDTH_NUMERIC = {"depth", "blocks_per_sm", "chunk_kib", "mib"}
CROSSCHECK_EXTRA = ["kvlab_median_us", "rel_diff_vs_kvlab", "python_own_stream_us", "python_fresh_buffers_us",
                    "python_stamped_events_us", "python_in_kernel_us"]


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
    out, worst = [], 0.0
    log(f"[crosscheck] the same operation through gpu/bench (kvlab sweep) and peer_timer.py; tolerance {a.tol:.1%}")
    for r in rows:
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
        t = timer.time(fn, graph=False)
        ceiling_name = "copy" if r["op"] == "copy" else "read"
        other_name = "read" if ceiling_name == "copy" else "copy"
        ceiling = float(res.attrs.get(f"{ceiling_name}_ceiling_bytes_per_s", 0) or 0)
        record_timing(row, t, moved, ceiling, ceiling_name, float(res.attrs.get("device_peak_bytes_per_s", 0) or 0),
                      float(res.attrs.get(f"{other_name}_ceiling_bytes_per_s", 0) or 0))
        diff = row["median_us"] / r["median_us"] - 1.0
        row["rel_diff_vs_kvlab"] = diff
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
        if abs(diff) > a.tol:
            row.update(status="failed", reason=f"python {row['median_us']:.3f} us vs kvlab {r['median_us']:.3f} us: "
                                               f"{diff:+.2%}, beyond {a.tol:.0%}")
        log(f"[crosscheck] {r['op']:4s} {r['load']:6s} d{int(r['depth'])} b{int(r['blocks_per_sm'])} "
            f"{int(r['mib']):5d} MiB: kvlab {r['median_us']:9.3f} us (iqr {r['rel_iqr']:.3f}), python "
            f"{row['median_us']:9.3f} us (iqr {row['rel_iqr']:.3f}): {diff:+.2%} "
            f"{'ok' if abs(diff) <= a.tol else 'DISAGREE'}{extra}")
        out.append(row)
        del buf
    attrs = device_attrs(res)
    attrs.update(argv=" ".join(sys.argv), sweep_name="timer_crosscheck", config_path="",
                 config_text=str(res.attrs.get("config_text", "")), peer_source=os.path.abspath(a.kvlab_h5),
                 crosscheck_tolerance=float(a.tol), crosscheck_worst=float(worst),
                 peer_software=software_versions(torch, None))
    write_result_file(a.out, out, attrs, BANDWIDTH_AXES, BANDWIDTH_NUMERIC,
                      TIMING_METRICS + CROSSCHECK_EXTRA, ["flush", "timing"],
                      run=dict(started_utc=start, argv=" ".join(sys.argv), resumed=0))
    checked = [r for r in out if r["status"] != "skipped"]
    bad = [r for r in checked if r["status"] == "failed"]
    log(f"[crosscheck] {len(checked)} operations compared, worst difference {worst:.2%}: "
        f"{'AGREE' if checked and not bad else 'DISAGREE'} within {a.tol:.0%}")
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
    p.add_argument("--only", default="", help="sdpa and/or flashinfer (default both)")
    p.add_argument("--budget-s", type=float, default=0.0,
                   help="stop starting peers after this many seconds (the rest are recorded as skipped)")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="override [timing] max_seconds of the sweep file")
    c = sub.add_parser("crosscheck", help="time a kvlab file's bandwidth operations from Python and compare")
    c.add_argument("--kvlab-h5", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--tol", type=float, default=0.02, help="allowed |python / kvlab - 1| (default 0.02)")
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
            return cmd_peers(a)
        if a.cmd == "crosscheck":
            if not 0 < a.tol < 1:
                raise BadInput("--tol must be in (0, 1)")
            return cmd_crosscheck(a)
        return cmd_prewarm(a)
    except BadInput as e:
        print(f"decode_peers.py: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
