"""kvlab.ops on the GPU against kvlab.ref and against PyTorch's own attention, on random paged
inputs built in PyTorch. Needs torch with CUDA and a kvlab extension built with CUDA: skips
otherwise (the CPU parts are in test_kvlab_package.py).

Every case is seeded (the seed is in the test), uses awkward sizes (sequences of 1 token,
block_size +- 1, primes), shuffled pages, NaN in every unused slot of the pools, outputs
pre-filled with NaN inside guard regions that must stay untouched, and kvlab's tolerance
table (kvlab.ref.check_close) for every comparison that is not byte-exact."""
import numpy as np
import pytest

from tests.python.conftest import ROOT  # noqa: F401

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
try:
    import kvlab
    from kvlab import formats, ops, paged, ref
    from kvlab._native import native
    if not native().has_cuda:
        raise ImportError("kvlab extension built without CUDA")
except ImportError as e:
    pytest.skip(f"kvlab GPU extension not importable: {e}", allow_module_level=True)

DEV = "cuda"
GUARD = 64
FORMATS = ["bf16", "fp16", "fp8_e4m3", "fp8_e4m3_pt", "fp8_e5m2", "nvfp4", "mxfp4"]
LAYOUTS = ["nhd", "hnd", "split_x"]
POOL_SCALE = {"fp8_e4m3": 0.02, "fp8_e5m2": 0.02, "nvfp4": 0.5}


def guarded(shape, dtype, fill=float("nan")):
    """(tensor of `shape` inside a NaN-filled buffer, the whole buffer): the view is
    contiguous; the GUARD elements on either side must stay as they are."""
    n = int(np.prod(shape))
    buf = torch.full((n + 2 * GUARD,), fill, dtype=dtype, device=DEV)
    return buf[GUARD:GUARD + n].view(*shape), buf


def guards_intact(buf, fill_is_nan=True):
    g = torch.cat([buf[:GUARD], buf[-GUARD:]]).float()
    return bool(torch.isnan(g).all()) if fill_is_nan else True


def host_case(seed, kv_format, layout, lens=(1, 15, 17, 40), heads=2, group=4, head_dim=64, block_size=16):
    """A paged cache written on the host by kvlab.ref.append_kv (quantize-on-write), pages
    shuffled, unused slots NaN (16-bit pools) or 0xFF bytes; returns numpy arrays."""
    rng = np.random.default_rng(seed)
    per_seq = [(n + block_size - 1) // block_size for n in lens]
    num_blocks = sum(per_seq) + 3
    order = rng.permutation(num_blocks)
    table = np.full((len(lens), max(per_seq) + 1), 10 ** 6, dtype=np.int32)  # unread entries: junk
    kshape, vshape = paged.pool_shapes(layout, kv_format, num_blocks, block_size, heads, head_dim)
    kind = paged.storage_kind(kv_format)
    if kind == "u8":
        kp, vp = np.full(kshape, 0xFF, np.uint8), np.full(vshape, 0xFF, np.uint8)
    else:
        nan = formats.encode(np.float32([np.nan]), "bf16" if kind == "bf16" else "fp16")[0]
        kp, vp = np.full(kshape, nan, np.uint16), np.full(vshape, nan, np.uint16)
    sshape, skind = paged.scales_shape(kv_format, num_blocks, block_size, heads, head_dim)
    ks = vs = None
    if sshape is not None:
        ks = np.full(sshape, np.nan if skind == "f32" else 0, np.float32 if skind == "f32" else np.uint8)
        vs = ks.copy()
    scale = POOL_SCALE.get(kv_format, 1.0)
    nxt = 0
    for s, n in enumerate(lens):
        table[s, :per_seq[s]] = order[nxt:nxt + per_seq[s]]
        nxt += per_seq[s]
        t = np.arange(n)
        slots = table[s, t // block_size].astype(np.int64) * block_size + t % block_size
        k = rng.standard_normal((n, heads, head_dim)).astype(np.float32)
        v = rng.standard_normal((n, heads, head_dim)).astype(np.float32)
        ref.append_kv(k, v, slots, kp, vp, kv_format=kv_format, layout=layout, k_scales=ks, v_scales=vs,
                      k_scale=scale, v_scale=scale)
    q = formats.encode(rng.standard_normal((len(lens), heads * group, head_dim)).astype(np.float32), "bf16")
    return dict(q=q, k=kp, v=vp, ks=ks, vs=vs, table=table, lens=np.asarray(lens, np.int32), scale=scale,
                kv_format=kv_format, layout=layout)


def to_dev(a, bf16=False):
    a = np.ascontiguousarray(a)
    if a.dtype == np.uint16:
        a = a.view(np.int16)  # 16-bit codes travel as int16 (torch's uint16 has few operations)
    t = torch.from_numpy(a).to(DEV)
    return t.view(torch.bfloat16) if bf16 else t


def run_both(c, version):
    """(gpu out as float32 numpy, ref out as float32 numpy, guards intact) of one case."""
    q = to_dev(c["q"], bf16=True)
    fmt = c["kv_format"]
    pool_bf16 = paged.storage_kind(fmt) == "bf16"
    k, v = to_dev(c["k"], pool_bf16), to_dev(c["v"], pool_bf16)
    if paged.storage_kind(fmt) == "f16":
        k, v = k.view(torch.float16), v.view(torch.float16)
    ks = None if c["ks"] is None else to_dev(c["ks"])
    vs = None if c["vs"] is None else to_dev(c["vs"])
    table, lens = to_dev(c["table"]), to_dev(c["lens"])
    kw = dict(kv_format=fmt, layout=c["layout"], k_scales=ks, v_scales=vs, k_scale=c["scale"], v_scale=c["scale"])
    why = ops.decode_unsupported_reason(q, k, v, table, lens, version=version, **kw)
    if why:
        return None, why
    ws_bytes = ops.decode_workspace_bytes(q, k, v, table, lens, version=version, **kw)
    ws = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=DEV)
    out, buf = guarded(q.shape, torch.bfloat16)
    lse, lbuf = guarded(q.shape[:2], torch.float32)
    ops.decode_attention(q, k, v, table, lens, version=version, out=out, lse=lse, workspace=ws, **kw)
    torch.cuda.synchronize()
    host_kw = dict(kv_format=fmt, layout=c["layout"], k_scales=c["ks"], v_scales=c["vs"], k_scale=c["scale"],
                   v_scale=c["scale"], q_dtype="bf16")
    exp_lse = np.empty(q.shape[:2], np.float32)
    expect = ref.decode_attention(c["q"], c["k"], c["v"], c["table"], c["lens"], lse=exp_lse, **host_kw)
    got = out.float().cpu().numpy()
    return dict(out=got, ref=formats.decode(expect, "bf16"), lse=lse.cpu().numpy(), ref_lse=exp_lse,
                guards=guards_intact(buf) and guards_intact(lbuf)), ""


def versions():
    return [v.name for v in ops.decode_versions()] + ["auto"]


@pytest.mark.parametrize("version", versions())
def test_decode_every_version_format_layout_against_ref(version):
    ran, skipped = 0, []
    for fi, fmt in enumerate(FORMATS):
        for li, layout in enumerate(LAYOUTS):
            seed = 1000 + 10 * fi + li
            c = host_case(seed, fmt, layout)
            r, why = run_both(c, version)
            if r is None:
                skipped.append(f"{fmt}/{layout}: {why}")
                continue
            ran += 1
            ok, msg = ref.check_close(r["out"], r["ref"], "decode_attention", fmt, "bf16")
            assert ok, f"{version} {fmt} {layout} seed {seed}: {msg}"
            ok, msg = ref.check_close(r["lse"], r["ref_lse"], "decode_lse", fmt, "bf16")
            assert ok, f"{version} {fmt} {layout} seed {seed} lse: {msg}"
            assert r["guards"], f"{version} {fmt} {layout}: wrote outside out / lse"
    assert ran > 0, f"{version} ran no configuration: {skipped}"


@pytest.mark.parametrize("batch,context", [(1, 300), (8, 2048), (64, 1024)])
def test_auto_is_the_cpp_choice_for_the_shape(batch, context):
    """version="auto" runs what gpu::choose_decode picks for this shape on this device (the
    rule of a sweep's version = auto), with its split; a prepared handle reports the same
    pick; when the pick forces no split, auto's output is bitwise the named version's."""
    g = torch.Generator(device=DEV).manual_seed(31 + batch + context)
    heads, group, d, bs = 8, 4, 128, 16
    per_seq = (context + bs - 1) // bs
    nb = batch * per_seq
    k = torch.randn(nb, bs, heads, d, generator=g, device=DEV).to(torch.bfloat16)
    v = torch.randn(nb, bs, heads, d, generator=g, device=DEV).to(torch.bfloat16)
    table = torch.randperm(nb, generator=g, device=DEV).to(torch.int32).view(batch, per_seq)
    lens = torch.full((batch,), context, dtype=torch.int32, device=DEV)
    q = torch.randn(batch, heads * group, d, generator=g, device=DEV).to(torch.bfloat16)
    ch = ops.choose_decode(q, k, v, table, lens, max_seq_len=context)
    assert ch.version in [x.id for x in ops.decode_versions()] and ch.num_splits >= 0
    assert ch.basis.startswith(("calibrated", "no calibration", "the nearest", "the table")), ch.basis
    ws = torch.empty(ops.decode_workspace_bytes(q, k, v, table, lens, max_seq_len=context) + 1, dtype=torch.uint8,
                     device=DEV)
    h = ops.prepare_decode_attention(q, k, v, table, lens, workspace=ws, max_seq_len=context)
    assert (h.version, h.num_splits, h.basis) == (ch.version, ch.num_splits, ch.basis)
    auto_out = h.run().clone()
    direct = ops.decode_attention(q, k, v, table, lens, workspace=ws, max_seq_len=context)
    torch.cuda.synchronize()
    assert torch.equal(direct.view(torch.int16), auto_out.view(torch.int16))
    if ch.num_splits == 0:
        ws2 = torch.empty(ops.decode_workspace_bytes(q, k, v, table, lens, version=ch.name, max_seq_len=context) + 1,
                          dtype=torch.uint8, device=DEV)
        named = ops.decode_attention(q, k, v, table, lens, version=ch.name, workspace=ws2, max_seq_len=context)
        torch.cuda.synchronize()
        assert torch.equal(named.view(torch.int16), auto_out.view(torch.int16)), ch


def test_sixteen_bit_containers_are_one_call_on_the_device():
    """q as torch bfloat16 or as its int16 bits (q_dtype="bf16"), out as bfloat16 or int16:
    the same launch, bitwise the same output; a float16 out for a bf16 q is refused."""
    c = host_case(77, "bf16", "nhd")
    k, v = to_dev(c["k"], True), to_dev(c["v"], True)
    table, lens = to_dev(c["table"]), to_dev(c["lens"])
    q = to_dev(c["q"], bf16=True)
    name = next(x.name for x in ops.decode_versions() if not ops.decode_unsupported_reason(q, k, v, table, lens,
                                                                                         version=x.id))
    ws = torch.empty(ops.decode_workspace_bytes(q, k, v, table, lens, version=name) + 1, dtype=torch.uint8, device=DEV)
    a = ops.decode_attention(q, k, v, table, lens, version=name, workspace=ws)
    assert a.dtype == torch.bfloat16
    b = ops.decode_attention(q.view(torch.int16), k, v, table, lens, version=name, workspace=ws, q_dtype="bf16")
    assert b.dtype == torch.int16  # the caller's container
    out = torch.empty_like(q, dtype=torch.int16)
    ops.decode_attention(q, k, v, table, lens, version=name, workspace=ws, out=out)
    torch.cuda.synchronize()
    assert torch.equal(a.view(torch.int16), b) and torch.equal(b, out)
    with pytest.raises(ValueError, match="out: dtype float16"):
        ops.decode_attention(q, k, v, table, lens, version=name, workspace=ws,
                             out=torch.empty_like(q, dtype=torch.float16))


def test_prefill_every_version_format_layout_against_ref():
    """kvlab.ops.prefill_attention (chunked prefill over the paged cache) against
    kvlab.ref.paged_prefill_attention on the same bytes: chunks of 1 token, a whole prompt and
    chunks over a cached prefix; outputs in NaN guard regions; the prefill tolerance entry."""
    q_lens = [1, 15, 5, 33]
    ran, skipped, first = 0, [], None
    for pv in ops.prefill_versions():
        for fi, fmt in enumerate(FORMATS):
            for li, layout in enumerate(LAYOUTS):
                seed = 3000 + 10 * fi + li
                c = host_case(seed, fmt, layout)
                rng = np.random.default_rng(seed)
                q_start = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
                qh = formats.encode(rng.standard_normal((int(q_start[-1]), 8, 64)).astype(np.float32), "bf16")
                q = to_dev(qh, bf16=True)
                pool_bf16 = paged.storage_kind(fmt) == "bf16"
                k, v = to_dev(c["k"], pool_bf16), to_dev(c["v"], pool_bf16)
                if paged.storage_kind(fmt) == "f16":
                    k, v = k.view(torch.float16), v.view(torch.float16)
                ks = None if c["ks"] is None else to_dev(c["ks"])
                vs = None if c["vs"] is None else to_dev(c["vs"])
                table, lens, qs = to_dev(c["table"]), to_dev(c["lens"]), to_dev(q_start)
                kw = dict(kv_format=fmt, layout=layout, k_scales=ks, v_scales=vs, k_scale=c["scale"],
                          v_scale=c["scale"])
                why = ops.prefill_unsupported_reason(q, k, v, table, lens, qs, version=pv.id, **kw)
                if why:
                    skipped.append(f"{pv.name} {fmt}/{layout}: {why}")
                    continue
                out, buf = guarded(q.shape, torch.bfloat16)
                lse, lbuf = guarded(q.shape[:2], torch.float32)
                ops.prefill_attention(q, k, v, table, lens, qs, version=pv.id, out=out, lse=lse,
                                      validate_tables=True, **kw)
                torch.cuda.synchronize()
                exp_lse = np.empty(q.shape[:2], np.float32)
                expect = ref.paged_prefill_attention(qh, c["k"], c["v"], c["table"], c["lens"], q_start,
                                                     kv_format=fmt, layout=layout, k_scales=c["ks"],
                                                     v_scales=c["vs"], k_scale=c["scale"], v_scale=c["scale"],
                                                     q_dtype="bf16", lse=exp_lse)
                ok, msg = ref.check_close(out.float().cpu().numpy(), formats.decode(expect, "bf16"),
                                          "prefill_attention", fmt, "bf16")
                assert ok, f"{pv.name} {fmt} {layout} seed {seed}: {msg}"
                assert guards_intact(buf) and guards_intact(lbuf), f"{pv.name} {fmt} {layout}: wrote outside"
                ran += 1
                first = first or (q, k, v, table, lens, kw)
    assert ran > 0, skipped
    q, k, v, table, lens, kw = first
    bad = to_dev(np.int32([0, 1, 16, 21, 53]))  # ends one row short of q
    with pytest.raises(ValueError, match="q_start: the chunks end at row 53 but q has 54 rows"):
        ops.prefill_attention(q, k, v, table, lens, bad, validate_tables=True, **kw)


def test_decode_against_pytorch_attention():
    """kvlab's paged decode vs PyTorch's scaled_dot_product_attention (float64 math) on the
    same bf16 values gathered into contiguous K/V per sequence, GQA through enable_gqa."""
    g = torch.Generator(device=DEV).manual_seed(20241126)
    heads, group, d, bs = 4, 4, 128, 16
    lens = [1, 16, 17, 300, 1021]
    per_seq = [(n + bs - 1) // bs for n in lens]
    nb = sum(per_seq) + 5
    k_cache = torch.randn(nb, bs, heads, d, generator=g, device=DEV).to(torch.bfloat16)
    v_cache = torch.randn(nb, bs, heads, d, generator=g, device=DEV).to(torch.bfloat16)
    perm = torch.randperm(nb, generator=g, device=DEV).to(torch.int32)
    table = torch.zeros(len(lens), max(per_seq), dtype=torch.int32, device=DEV)
    used = 0
    for s, p in enumerate(per_seq):
        table[s, :p] = perm[used:used + p]
        used += p
    q = torch.randn(len(lens), heads * group, d, generator=g, device=DEV).to(torch.bfloat16)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    ws = torch.empty(ops.decode_workspace_bytes(q, k_cache, v_cache, table, seq_lens) + 1, dtype=torch.uint8,
                     device=DEV)
    out = ops.decode_attention(q, k_cache, v_cache, table, seq_lens, workspace=ws)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    for s, n in enumerate(lens):
        blocks = table[s, :per_seq[s]].long()
        k = k_cache[blocks].reshape(-1, heads, d)[:n].transpose(0, 1).double()  # [heads, n, d]
        v = v_cache[blocks].reshape(-1, heads, d)[:n].transpose(0, 1).double()
        expect = torch.nn.functional.scaled_dot_product_attention(
            q[s].double().unsqueeze(1), k, v, enable_gqa=True).squeeze(1)  # [heads * group, d]
        ok, msg = ref.check_close(out[s].float().cpu().numpy(), expect.float().cpu().numpy(), "decode_attention",
                                  "bf16", "bf16")
        assert ok, f"sequence {s} ({n} tokens): {msg}"


@pytest.mark.parametrize("kv_format", FORMATS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("in_dtype", ["bf16", "f32"])
def test_append_is_byte_exact_to_ref(kv_format, layout, in_dtype):
    rng = np.random.default_rng(77)
    heads, d, bs, nb, n = 2, 64, 8, 7, 29
    kshape, vshape = paged.pool_shapes(layout, kv_format, nb, bs, heads, d)
    kind = paged.storage_kind(kv_format)
    npdt = np.uint8 if kind == "u8" else np.uint16
    kp = rng.integers(0, 255, size=kshape).astype(npdt)  # untouched bytes must stay as they are
    vp = rng.integers(0, 255, size=vshape).astype(npdt)
    sshape, skind = paged.scales_shape(kv_format, nb, bs, heads, d)
    ks = vs = None
    if sshape is not None:
        ks = np.full(sshape, 7, np.float32 if skind == "f32" else np.uint8)
        vs = ks.copy()
    x = rng.standard_normal((2, n, heads, d)).astype(np.float32) * 3
    if in_dtype == "bf16":
        kin, vin = formats.encode(x[0], "bf16"), formats.encode(x[1], "bf16")
    else:
        kin, vin = x[0], x[1]
    slots = rng.permutation(nb * bs)[:n].astype(np.int64)
    slots[3] = -1  # padding
    scale = POOL_SCALE.get(kv_format, 1.0)
    kw = dict(kv_format=kv_format, layout=layout, k_scale=scale, v_scale=scale)
    dev = [to_dev(a) if a is not None else None for a in (kin, vin, slots, kp, vp, ks, vs)]
    if in_dtype == "bf16":
        dev[0], dev[1] = dev[0].view(torch.bfloat16), dev[1].view(torch.bfloat16)
    ops.append_kv(dev[0], dev[1], dev[2], dev[3], dev[4], k_scales=dev[5], v_scales=dev[6], check_slots=True, **kw)
    ref.append_kv(kin, vin, slots, kp, vp, k_scales=ks, v_scales=vs, in_dtype=in_dtype, **kw)
    torch.cuda.synchronize()
    for name, got, want in (("k", dev[3], kp), ("v", dev[4], vp), ("k_scales", dev[5], ks), ("v_scales", dev[6], vs)):
        if want is None:
            continue
        g_ = got.cpu().numpy()
        diff = int((np.frombuffer(g_.tobytes(), np.uint8) != np.frombuffer(want.tobytes(), np.uint8)).sum())
        assert diff == 0, f"{kv_format} {layout} {in_dtype}: {name} differs in {diff} bytes"


@pytest.mark.parametrize("scheme", ["bf16", "fp16", "fp8_e4m3_per_tensor", "fp8_e5m2_per_tensor", "fp8_e4m3_per_token",
                                    "fp8_ds_mla", "mxfp4", "mxfp4_hadamard", "nvfp4", "mxfp8"])
def test_quantize_and_dequantize_are_exact_to_ref(scheme):
    rng = np.random.default_rng(31)
    cols = 512 if scheme == "fp8_ds_mla" else 384
    x = (rng.standard_normal((37, cols)) * rng.uniform(0.01, 30, size=(37, 1))).astype(np.float32)
    for page in (0, 8) if scheme == "fp8_ds_mla" else (0,):
        want = ref.quantize(x, scheme, page_block_size=page)
        got = ops.quantize(to_dev(x), scheme, page_block_size=page)
        assert got.cpu().numpy().tobytes() == want.tobytes(), scheme
        back = ops.dequantize(got, scheme, 37, cols, page_block_size=page)
        torch.cuda.synchronize()
        assert back.cpu().numpy().tobytes() == ref.dequantize(want, scheme, 37, cols, page_block_size=page).tobytes()


def test_dsv4_ring_and_decode_against_ref():
    from kvlab import dsv4
    rng = np.random.default_rng(41)
    window, nope, rope, slots = 16, 128, 64, 3
    like = torch.empty(0, device=DEV)
    host = dsv4.SwaRing.empty(slots, window, nope, rope, "fp8_ds_mla", "pos_mod_window")
    dev = dsv4.SwaRing.empty(slots, window, nope, rope, "fp8_ds_mla", "pos_mod_window", like=like)
    t = 21
    raw = formats.encode(rng.standard_normal((t, nope + rope)).astype(np.float32), "bf16")
    slot = (np.arange(t) % slots).astype(np.int32)
    pos = (np.arange(t) // slots).astype(np.int32)
    ref.dsv4_append_swa(host, raw, slot, pos)
    ops.dsv4_append_swa(dev, to_dev(raw).view(torch.bfloat16), to_dev(slot), to_dev(pos))
    torch.cuda.synchronize()
    assert dev.data.cpu().numpy().tobytes() == host.data.tobytes()
    assert np.array_equal(dev.pos.cpu().numpy(), host.pos)
    q = formats.encode(rng.standard_normal((slots, 8, nope + rope)).astype(np.float32), "bf16")
    last = np.array([pos[slot == s].max() for s in range(slots)], np.int32)
    want = ref.dsv4_decode_attention(host, None, q, np.arange(slots, dtype=np.int32), last)
    got = ops.dsv4_decode_attention(dev, None, to_dev(q).view(torch.bfloat16),
                                    to_dev(np.arange(slots, dtype=np.int32)), to_dev(last))
    ok, msg = ref.check_close(got.float().cpu().numpy(), formats.decode(want, "bf16"), "decode_attention", "fp8_e4m3_pt",
                              "bf16")
    assert ok, msg


def test_runs_on_the_callers_stream_and_inside_a_cuda_graph():
    c = host_case(5, "bf16", "nhd", lens=(33, 64, 100))
    q, k, v = to_dev(c["q"], True), to_dev(c["k"], True), to_dev(c["v"], True)
    table, lens = to_dev(c["table"]), to_dev(c["lens"])
    ws = torch.empty(ops.decode_workspace_bytes(q, k, v, table, lens, max_seq_len=128) + 1, dtype=torch.uint8,
                     device=DEV)
    eager = ops.decode_attention(q, k, v, table, lens, workspace=ws, max_seq_len=128)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        prepared = ops.prepare_decode_attention(q, k, v, table, lens, workspace=ws, max_seq_len=128)
        assert prepared._native.stream == side.cuda_stream and prepared.stream is None  # follows
        prepared.run()
    side.synchronize()
    assert torch.equal(prepared.out, eager)
    prepared.out.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = ops.prepare_decode_attention(q, k, v, table, lens, workspace=ws, max_seq_len=128)
        captured.run()
    captured.out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured.out, eager)
    # Prepared outside, run inside a capture (FlashInfer's plan outside / run inside): each run
    # follows the current stream, here the capture stream (a launch on the stream of
    # preparation, the legacy one, would break the capture).
    planned = ops.prepare_decode_attention(q, k, v, table, lens, workspace=ws, max_seq_len=128)
    graph2 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph2):
        planned.run()
    planned.out.fill_(float("nan"))
    torch.cuda.synchronize()
    graph2.replay()
    torch.cuda.synchronize()
    assert torch.equal(planned.out, eager)
    # A timer's own stream (the peer timer's rule): events around run() on that stream see it.
    timer_stream = torch.cuda.Stream()
    timer_stream.wait_stream(torch.cuda.current_stream())
    planned.out.fill_(float("nan"))
    with torch.cuda.stream(timer_stream):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        planned.run()
        stop.record()
    stop.synchronize()
    assert torch.equal(planned.out, eager)  # finished by the stop event: it ran on timer_stream
    fixed = ops.prepare_decode_attention(q, k, v, table, lens, workspace=ws, max_seq_len=128, stream=side)
    assert fixed.stream == side.cuda_stream


def test_bad_inputs_raise_before_launch():
    c = host_case(6, "bf16", "nhd")
    q, k, v = to_dev(c["q"], True), to_dev(c["k"], True), to_dev(c["v"], True)
    table, lens = to_dev(c["table"]), to_dev(c["lens"])
    with pytest.raises(ValueError, match="CUDA"):
        ops.decode_attention(q.cpu(), k, v, table, lens)
    with pytest.raises(ValueError, match="block_table: dtype int64, expected int32"):
        ops.decode_attention(q, k, v, table.long(), lens)
    with pytest.raises(ValueError, match="head_dim"):
        ops.decode_attention(q[..., :32].contiguous(), k, v, table, lens)
    needing = [v_.name for v_ in ops.decode_versions()
               if ops.decode_workspace_bytes(q, k, v, table, lens, version=v_.name) > 0]
    if needing:  # a split-KV version without its workspace: refused, nothing allocated behind the caller
        with pytest.raises(ValueError, match="workspace"):
            ops.decode_attention(q, k, v, table, lens, version=needing[0])
    with pytest.raises(kvlab.InvalidArgument):
        ops.quantize(torch.zeros(4, 30, device=DEV), "mxfp4")  # 30 columns: not a multiple of 32


def test_cpp_harness_in_process_flushes_and_times_the_prepared_launch():
    """kvlab.bench: gpu/bench's C++ timer called from this process. A cold read must pay DRAM
    (the flush ran: a 16 MiB buffer, inside the 50 MB L2, reads faster warm than cold), a cold
    256 MiB read stays below the datasheet bandwidth, and a prepared decode times both eagerly
    and from a CUDA graph, its samples in the dict."""
    opts = dict(warmup=3, min_reps=20, max_reps=60, target_rel_iqr=0.02, max_seconds=1.0)
    big = kvlab.bench.time_bandwidth("read", "cg", mib=256, depth=4, blocks_per_sm=8, cold_l2=True, **opts)
    assert big["cold_l2"] and big["flush_bytes"] > big["l2_bytes"] > 0 and big["flush"] == "read_allocate"
    assert big["reps"] >= 20 and len(big["samples_us"]) == big["reps"]
    assert big["kernel"] == "read_cg_d4_b8" and big["bytes_moved"] == 256 << 20
    peak = torch.cuda.get_device_properties(0)
    tbps = big["bytes_moved"] / (big["q3_us"] * 1e-6) / 1e12
    assert 0.3 < tbps < 4.9, f"cold 256 MiB read at {tbps:.3f} TB/s ({peak.name})"
    warm = kvlab.bench.time_bandwidth("read", "cg", mib=16, depth=4, blocks_per_sm=8, cold_l2=False, **opts)
    cold = kvlab.bench.time_bandwidth("read", "cg", mib=16, depth=4, blocks_per_sm=8, cold_l2=True, **opts)
    assert not warm["cold_l2"] and warm["flush_bytes"] == 0
    assert warm["median_us"] < 0.9 * cold["median_us"], (warm["median_us"], cold["median_us"])
    copy = kvlab.bench.time_bandwidth("copy", "memcpy", mib=8, **opts)
    assert copy["kernel"] == "copy_memcpy" and copy["bytes_moved"] == 2 * (8 << 20)

    c = host_case(7, "bf16", "nhd", lens=(300, 301, 17))
    q, k, v = to_dev(c["q"], True), to_dev(c["k"], True), to_dev(c["v"], True)
    table, lens = to_dev(c["table"]), to_dev(c["lens"])
    ws = torch.empty(ops.decode_workspace_bytes(q, k, v, table, lens) + 1, dtype=torch.uint8, device=DEV)
    want = ops.decode_attention(q, k, v, table, lens, workspace=ws)
    p = ops.prepare_decode_attention(q, k, v, table, lens, workspace=ws)
    p.out.fill_(float("nan"))
    eager = kvlab.bench.time_decode(p, **opts)
    graph = kvlab.bench.time_decode(p, graph=True, **opts)
    torch.cuda.synchronize()
    assert torch.equal(p.out, want)  # the timed launches wrote the output
    assert eager["cold_l2"] and not eager["graph"] and graph["graph"] and graph["calls_per_sample"] == 1
    assert 0 < eager["q1_us"] <= eager["median_us"] <= eager["q3_us"] < 1e4
