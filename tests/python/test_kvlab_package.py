"""The kvlab Python package on the CPU: kvlab.formats (bit-exact codes), kvlab.ref (the
reference through the binding, against an independent numpy computation and against the
formats), the argument checks shared with kvlab.ops (kvlab's messages as Python
exceptions), and kvlab.ops' registry and device checks where no GPU is needed.

The extension module is required when CTest says it was built (KVLAB_EXTENSION=required);
run by hand without it, these tests skip. Inputs are seeded (the seed is in each test);
tolerances come from kvlab's one tolerance table (kvlab.ref.check_close), never from here."""
import os

import numpy as np
import pytest

from tests.python.conftest import ROOT  # noqa: F401  (puts the checkout on sys.path)

try:
    import kvlab
    from kvlab import formats, paged, ref
    from kvlab._native import native
    native()
except ImportError as e:  # pragma: no cover - depends on the build
    if os.environ.get("KVLAB_EXTENSION") == "required":
        raise
    pytest.skip(f"kvlab extension not built: {e}", allow_module_level=True)


# ---- formats ---------------------------------------------------------------------------------
def test_documented_codes():
    e4m3 = formats.encode(np.float32([0.0, 448.0, 500.0, -500.0, 2 ** -9, 2 ** -10, np.inf, np.nan]), "fp8_e4m3")
    assert e4m3.tolist() == [0x00, 0x7E, 0x7E, 0xFE, 0x01, 0x00, 0x7E, 0x7F]
    assert formats.encode(np.float32([500.0, np.inf]), "fp8_e4m3", "nonsaturating").tolist() == [0x7F, 0x7F]
    assert formats.encode(np.float32([np.inf, 1e6]), "fp8_e5m2", "nonsaturating").tolist() == [0x7C, 0x7C]
    # E2M1 ties to the even code: 0.75 -> 1, 2.5 -> 2, 5 -> 4; beyond 6 saturates.
    e2m1 = formats.decode(formats.encode(np.float32([0.75, 2.5, 5.0, 7.0, -0.25]), "e2m1"), "e2m1")
    assert e2m1.tolist() == [1.0, 2.0, 4.0, 6.0, -0.0]
    assert formats.decode(np.uint8([127, 0, 254, 255]), "ue8m0")[:3].tolist() == [1.0, 2.0 ** -127, 2.0 ** 127]
    assert np.isnan(formats.decode(np.uint8([255]), "ue8m0")[0])
    assert formats.ue8m0_from_exponent([-3, 0, 5]).tolist() == [124, 127, 132]
    assert formats.max_finite("fp8_e4m3") == 448 and formats.max_finite("fp8_e5m2") == 57344


@pytest.mark.parametrize("fmt,n", [("fp8_e4m3", 256), ("fp8_e5m2", 256), ("fp4_e2m1", 16), ("bf16", 65536),
                                   ("fp16", 65536)])
def test_every_finite_code_round_trips(fmt, n):
    codes = np.arange(n, dtype=np.uint16 if n > 256 else np.uint8)
    vals = formats.decode(codes, fmt)
    fin = np.isfinite(vals)
    back = formats.encode(vals[fin], fmt)
    # -0 and +0 are distinct codes; every finite code comes back as itself.
    assert np.array_equal(back, codes[fin]), fmt


def test_bf16_encode_matches_numpy_rounding():
    rng = np.random.default_rng(11)
    x = rng.standard_normal(4096).astype(np.float32) * np.float32(100)
    bits = x.view(np.uint32)
    rne = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    assert np.array_equal(formats.encode(x, "bf16"), rne)


def test_fp4_packing_low_nibble_first():
    packed = formats.pack_fp4(np.uint8([[1, 2, 15, 0]]))
    assert packed.tolist() == [[0x21, 0x0F]]
    assert formats.unpack_fp4(packed).tolist() == [[1, 2, 15, 0]]


def test_format_errors_name_what_is_allowed():
    with pytest.raises(ValueError, match="fp8_e4m3, fp8_e5m2, fp4_e2m1"):
        formats.encode(np.float32([1]), "fp7")
    with pytest.raises(TypeError, match="round twice"):
        formats.encode(np.float64([1.0]), "bf16")
    with pytest.raises(ValueError, match="always saturates"):
        formats.encode(np.float32([1]), "e2m1", "nonsaturating")
    with pytest.raises(ValueError, match="4-bit"):
        formats.decode(np.uint8([16]), "e2m1")
    assert issubclass(kvlab.InvalidArgument, ValueError) and issubclass(kvlab.Unsupported, NotImplementedError)


# ---- a paged case, built in numpy -------------------------------------------------------------
def bf16_bits(x):
    return formats.encode(np.asarray(x, dtype=np.float32), "bf16")


def paged_case(seed, layout="nhd", num_seqs=3, heads=2, group=3, head_dim=16, block_size=5, lens=(1, 7, 11)):
    """K/V pools in BF16 bits, pages in a shuffled order, NaN in every unused slot."""
    rng = np.random.default_rng(seed)
    blocks_per_seq = [(n + block_size - 1) // block_size for n in lens]
    num_blocks = sum(blocks_per_seq) + 2
    order = rng.permutation(num_blocks)
    table = np.zeros((num_seqs, max(blocks_per_seq)), dtype=np.int32)
    k_logical = [rng.standard_normal((n, heads, head_dim)).astype(np.float32) for n in lens]
    v_logical = [rng.standard_normal((n, heads, head_dim)).astype(np.float32) for n in lens]
    kshape, vshape = paged.pool_shapes(layout, "bf16", num_blocks, block_size, heads, head_dim)
    nan = bf16_bits(np.float32(np.nan))
    kp, vp = np.full(kshape, nan, dtype=np.uint16), np.full(vshape, nan, dtype=np.uint16)
    nxt = 0
    for s, n in enumerate(lens):
        for b in range(blocks_per_seq[s]):
            table[s, b] = order[nxt]
            nxt += 1
        slots = np.arange(n)
        blocks = table[s, slots // block_size]
        # Write through the reference's own append (bf16 in -> bf16 pool) so that every layout
        # is addressed by kvlab's layout header, then compare the math with numpy.
        ref.append_kv(bf16_bits(k_logical[s]), bf16_bits(v_logical[s]),
                      (blocks.astype(np.int64) * block_size + slots % block_size), kp, vp, kv_format="bf16",
                      layout=layout, in_dtype="bf16")
    q = bf16_bits(rng.standard_normal((num_seqs, heads * group, head_dim)))
    return dict(q=q, k=kp, v=vp, table=table, lens=np.asarray(lens, dtype=np.int32), k_logical=k_logical,
                v_logical=v_logical, heads=heads, group=group)


def numpy_decode(c, sm_scale):
    """Decode attention in float64 from the logical K/V (rounded to bf16 as stored)."""
    q = formats.decode(c["q"], "bf16").astype(np.float64)
    out = np.zeros(q.shape)
    for s, n in enumerate(c["lens"]):
        k = formats.roundtrip(c["k_logical"][s], "bf16").astype(np.float64)
        v = formats.roundtrip(c["v_logical"][s], "bf16").astype(np.float64)
        for h in range(q.shape[1]):
            kh = h // c["group"]
            z = sm_scale * (k[:, kh, :] @ q[s, h])
            p = np.exp(z - z.max())
            out[s, h] = (p / p.sum()) @ v[:, kh, :]
    return out


@pytest.mark.parametrize("layout", ["nhd", "hnd", "split_x"])
def test_ref_decode_matches_an_independent_numpy_computation(layout):
    c = paged_case(seed=20241126 + len(layout), layout=layout)
    sm = 1 / np.sqrt(16)
    expect = numpy_decode(c, sm)
    exact = ref.decode_attention(c["q"], c["k"], c["v"], c["table"], c["lens"], kv_format="bf16", layout=layout,
                                 q_dtype="bf16", exact=True)
    assert exact.dtype == np.float64 and np.isfinite(exact).all()  # the NaN slots were never read
    ok, why = ref.check_close(exact, expect, "reference_cross_check", "bf16", "f32")
    assert ok, why
    out = ref.decode_attention(c["q"], c["k"], c["v"], c["table"], c["lens"], kv_format="bf16", layout=layout,
                               q_dtype="bf16")
    assert out.dtype == np.uint16 and out.shape == c["q"].shape
    ok, why = ref.check_close(formats.decode(out, "bf16"), expect, "reference_cross_check", "bf16", "bf16")
    assert ok, why


@pytest.mark.parametrize("layout", ["nhd", "split_x"])
def test_ref_paged_prefill_matches_an_independent_numpy_computation(layout):
    """Chunked prefill over the paged cache: sequence s's chunk is the last q_len of its
    cached tokens (a 1-token chunk, a 3-token chunk over a cached prefix, a whole prompt),
    row i sees the prefix plus the chunk causally. numpy in float64 from the logical K/V."""
    c = paged_case(seed=515 + len(layout), layout=layout)
    q_lens = [1, 3, 11]
    q_start = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    rng = np.random.default_rng(516)
    heads, group = c["heads"], c["group"]
    q = bf16_bits(rng.standard_normal((int(q_start[-1]), heads * group, 16)))
    sm = 1 / np.sqrt(16)
    expect = np.zeros(q.shape)
    qf = formats.decode(q, "bf16").astype(np.float64)
    for s, n in enumerate(c["lens"]):
        k = formats.roundtrip(c["k_logical"][s], "bf16").astype(np.float64)
        v = formats.roundtrip(c["v_logical"][s], "bf16").astype(np.float64)
        for i in range(q_lens[s]):
            row, visible = q_start[s] + i, n - q_lens[s] + i + 1
            for h in range(heads * group):
                z = sm * (k[:visible, h // group, :] @ qf[row, h])
                p = np.exp(z - z.max())
                expect[row, h] = (p / p.sum()) @ v[:visible, h // group, :]
    lse = np.full(q.shape[:2], np.nan, np.float32)
    out = ref.paged_prefill_attention(q, c["k"], c["v"], c["table"], c["lens"], q_start, kv_format="bf16",
                                      layout=layout, q_dtype="bf16", lse=lse)
    assert out.dtype == np.uint16 and out.shape == q.shape and np.isfinite(lse).all()
    ok, why = ref.check_close(formats.decode(out, "bf16"), expect, "reference_cross_check", "bf16", "bf16")
    assert ok, why
    # A 1-token chunk is decode: the same bits as kvlab.ref.decode_attention for that sequence.
    dec = ref.decode_attention(q[:1], c["k"], c["v"], c["table"][:1], c["lens"][:1], kv_format="bf16", layout=layout,
                               q_dtype="bf16")
    ok, why = ref.check_close(formats.decode(out[:1], "bf16"), formats.decode(dec, "bf16"), "reference_cross_check",
                              "bf16", "bf16")
    assert ok, why
    kw = dict(kv_format="bf16", layout=layout, q_dtype="bf16")
    with pytest.raises(ValueError, match="q_start"):
        ref.paged_prefill_attention(q, c["k"], c["v"], c["table"], c["lens"], np.int32([1, 2, 5, 15]), **kw)
    with pytest.raises(ValueError, match=r"q_start: the chunks end at row 14 but q has 15 rows"):
        ref.paged_prefill_attention(q, c["k"], c["v"], c["table"], c["lens"], np.int32([0, 1, 4, 14]), **kw)
    with pytest.raises(ValueError, match=r"q_start: shape"):
        ref.paged_prefill_attention(q, c["k"], c["v"], c["table"], c["lens"], q_start[:-1], **kw)


def test_ref_decode_lse_and_empty_sequence():
    c = paged_case(seed=7, lens=(0, 5, 3))
    lse = np.full((3, 6), np.nan, dtype=np.float32)
    out = ref.decode_attention(c["q"], c["k"], c["v"], c["table"], c["lens"], kv_format="bf16", q_dtype="bf16",
                               lse=lse)
    assert np.all(formats.decode(out[0], "bf16") == 0) and np.all(np.isneginf(lse[0]))
    assert np.isfinite(lse[1:]).all()


@pytest.mark.parametrize("kv_format", ["fp8_e4m3", "fp8_e4m3_pt", "fp8_e5m2", "nvfp4", "mxfp4"])
def test_ref_append_then_decode_every_quantized_format(kv_format):
    """append_kv quantizes with the format's rule; decode over the stored bytes stays within
    kvlab's decode_attention_vs_original tolerance of the unquantized math."""
    rng = np.random.default_rng(99)
    heads, head_dim, block_size, n = 2, 32, 4, 9
    num_blocks = 4
    kshape, vshape = paged.pool_shapes("nhd", kv_format, num_blocks, block_size, heads, head_dim)
    kp, vp = np.zeros(kshape, np.uint8), np.zeros(vshape, np.uint8)
    sshape, skind = paged.scales_shape(kv_format, num_blocks, block_size, heads, head_dim)
    ks = vs = None
    if sshape is not None:
        dt = np.float32 if skind == "f32" else np.uint8
        ks, vs = np.zeros(sshape, dt), np.zeros(sshape, dt)
    k = rng.standard_normal((n, heads, head_dim)).astype(np.float32)
    v = rng.standard_normal((n, heads, head_dim)).astype(np.float32)
    table = np.array([[2, 0, 3]], dtype=np.int32)
    slots = (table[0, np.arange(n) // block_size].astype(np.int64) * block_size + np.arange(n) % block_size)
    scale = 0.01 if kv_format in ("fp8_e4m3", "fp8_e5m2") else 1.0
    ref.append_kv(k, v, slots, kp, vp, kv_format=kv_format, k_scales=ks, v_scales=vs, k_scale=scale, v_scale=scale)
    q = bf16_bits(rng.standard_normal((1, heads * 2, head_dim)))
    out = ref.decode_attention(q, kp, vp, table, np.array([n], np.int32), kv_format=kv_format, k_scales=ks,
                               v_scales=vs, k_scale=scale, v_scale=scale, q_dtype="bf16")
    expect = numpy_decode(dict(q=q, k_logical=[k], v_logical=[v], lens=[n], group=2), 1 / np.sqrt(head_dim))
    ok, why = ref.check_close(formats.decode(out, "bf16"), expect, "decode_attention_vs_original", kv_format, "bf16")
    assert ok, why


def test_ref_append_bf16_is_the_bf16_cast():
    rng = np.random.default_rng(5)
    k = rng.standard_normal((3, 1, 8)).astype(np.float32)
    kp, vp = np.zeros((2, 4, 1, 8), np.uint16), np.zeros((2, 4, 1, 8), np.uint16)
    ref.append_kv(k, k, np.array([5, -1, 0], np.int64), kp, vp, kv_format="bf16")
    assert np.array_equal(kp[1, 1, 0], formats.encode(k[0, 0], "bf16"))
    assert np.array_equal(kp[0, 0, 0], formats.encode(k[2, 0], "bf16"))
    assert not kp[0, 1:].any()  # the padding token (-1) wrote nothing


@pytest.mark.parametrize("scheme", ["bf16", "fp8_e4m3", "fp8_e4m3_pt", "mxfp4", "nvfp4",
                                    "mxfp4_hadamard", "mxfp8", "fp8_ds_mla"])
def test_ref_quantize_round_trip_every_preset(scheme):
    assert scheme in ref.scheme_names()
    rng = np.random.default_rng(3)
    cols = 512 if scheme == "fp8_ds_mla" else 256
    x = rng.standard_normal((6, cols)).astype(np.float32)
    stream = ref.quantize(x, scheme)
    assert stream.dtype == np.uint8 and stream.size == ref.quant_stream_bytes(scheme, 6, cols)
    y = ref.dequantize(stream, scheme, 6, cols)
    assert y.shape == x.shape
    ok, why = ref.check_close(y, x, "quant_round_trip", "bf16", "f32") if scheme == "bf16" else (True, "")
    assert ok, why
    rel = np.linalg.norm(y - x, axis=1) / np.linalg.norm(x, axis=1)
    assert np.all(rel < 1.0) and np.all(rel > 0 if scheme != "bf16" else rel >= 0)
    if scheme == "fp8_ds_mla":
        assert ref.quant_stream_bytes(scheme, 1, 512) == 584
        paged_stream = ref.quantize(x, scheme, page_block_size=4)
        assert np.array_equal(ref.dequantize(paged_stream, scheme, 6, cols, page_block_size=4), y)
    if scheme == "bf16":
        assert np.array_equal(y, formats.roundtrip(x, "bf16"))


# ---- argument checks (shared with kvlab.ops) -------------------------------------------------
def test_tolerance_dict_carries_the_small_unit_nmse_bound():
    # A row with a small-unit bound (the table's FP8 E4M3 vs-original row) and one without.
    t = ref.tolerance("decode_attention_vs_original", "fp8_e4m3", "bf16")
    assert set(t) >= {"atol", "rtol", "nmse_max", "nmse_max_small", "nmse_small_below"}
    assert t["nmse_small_below"] > 0 and t["nmse_max_small"] > t["nmse_max"] > 0
    plain = ref.tolerance("decode_attention", "bf16", "bf16")
    assert plain["nmse_max_small"] == 0 and plain["nmse_small_below"] == 0
    # check_close holds an array below nmse_small_below to nmse_max_small: an error with an
    # NMSE between the two bounds passes a small array and fails a large one.
    rng = np.random.default_rng(19)
    nmse = (t["nmse_max"] + t["nmse_max_small"]) / 2
    for n, passes in ((t["nmse_small_below"] // 2, True), (t["nmse_small_below"] * 2, False)):
        expected = rng.standard_normal(n).astype(np.float32)
        d = rng.standard_normal(n)
        d *= np.sqrt(nmse * np.sum(expected.astype(np.float64) ** 2) / np.sum(d ** 2))
        ok, why = ref.check_close((expected + d).astype(np.float32), expected,
                                  "decode_attention_vs_original", "fp8_e4m3", "bf16")
        assert ok == passes, (n, why)


def test_bad_arguments_raise_kvlab_messages():
    c = paged_case(seed=1)
    args = (c["q"], c["k"], c["v"], c["table"], c["lens"])
    kw = dict(kv_format="bf16", q_dtype="bf16")
    with pytest.raises(ValueError, match=r"block_table: dtype int64, expected int32"):
        ref.decode_attention(*args[:3], c["table"].astype(np.int64), c["lens"], **kw)
    with pytest.raises(ValueError, match=r"v_cache: shape .* expected"):
        ref.decode_attention(c["q"], c["k"], c["v"][:, :, :1], c["table"], c["lens"], **kw)
    with pytest.raises(ValueError, match="C-contiguous"):
        ref.decode_attention(c["q"][:, ::2], *args[1:], **kw)
    with pytest.raises(ValueError, match="q_dtype"):
        ref.decode_attention(*args, kv_format="bf16")  # uint16 codes without saying which
    with pytest.raises(ValueError, match="kv_format"):
        ref.decode_attention(*args, q_dtype="bf16")  # uint16 pools: say the format
    with pytest.raises(ValueError, match="seq_len"):
        ref.decode_attention(*args[:4], np.array([1, 7, 99], np.int32), **kw)
    with pytest.raises(ValueError, match="unknown KV format|allowed"):
        ref.decode_attention(*args, kv_format="fp9", q_dtype="bf16")
    with pytest.raises(ValueError, match=r"block_table: 2 rows for 3 sequences"):
        ref.decode_attention(*args[:3], c["table"][:2], c["lens"][:2], **kw)
    with pytest.raises(ValueError, match=r"q: head_dim .* but the cache's head_dim"):
        ref.decode_attention(c["q"][:, :, :-2].copy(), *args[1:], **kw)
    with pytest.raises(ValueError, match=r"not a positive multiple of the"):
        ref.decode_attention(c["q"][:, :1].copy(), *args[1:], **kw)  # 1 query head, 2 KV heads
    with pytest.raises(ValueError, match="slot"):
        ref.append_kv(np.zeros((1, 2, 16), np.float32), np.zeros((1, 2, 16), np.float32), np.array([10 ** 6]),
                      c["k"], c["v"], kv_format="bf16")


def test_sixteen_bit_dtype_rule_one_for_every_argument():
    """A 16-bit argument holds its format as the matching float type or as 16-bit integers of
    its bits, whichever container each array comes in: torch's `t.view(torch.int16)` of a bf16
    q (the stage's one-liner and the README example) with a uint16 or default out is one call.
    A float type of the other format is refused, naming the argument and what it expected."""
    c = paged_case(seed=11)
    kw = dict(kv_format="bf16", q_dtype="bf16")
    base = ref.decode_attention(c["q"], c["k"], c["v"], c["table"], c["lens"], **kw)  # uint16 q, uint16 out
    q16 = c["q"].view(np.int16)
    k16, v16 = c["k"].view(np.int16), c["v"].view(np.int16)
    got = ref.decode_attention(q16, k16, v16, c["table"], c["lens"], **kw)  # out: the caller's container
    assert got.dtype == np.int16 and np.array_equal(got.view(np.uint16), base)
    assert np.array_equal(formats.decode(got, "bf16"), formats.decode(base, "bf16"), equal_nan=True)
    out = np.full(c["q"].shape, 0x7FC0, np.uint16)
    ref.decode_attention(q16, c["k"], v16, c["table"], c["lens"], out=out, **kw)  # int16 q, uint16 out
    assert np.array_equal(out, base)
    out16 = np.zeros(c["q"].shape, np.int16)
    ref.decode_attention(c["q"], c["k"], c["v"], c["table"], c["lens"], out=out16, **kw)
    assert np.array_equal(out16.view(np.uint16), base)
    with pytest.raises(ValueError, match=r"out: dtype float16, expected"):
        ref.decode_attention(c["q"], c["k"], c["v"], c["table"], c["lens"], out=np.zeros(c["q"].shape, np.float16),
                             **kw)
    with pytest.raises(ValueError, match=r"out: dtype float32, expected"):
        ref.decode_attention(c["q"], c["k"], c["v"], c["table"], c["lens"], out=np.zeros(c["q"].shape, np.float32),
                             **kw)
    with pytest.raises(ValueError, match=r"q: dtype float16 does not hold bf16"):
        ref.decode_attention(c["q"].view(np.float16), c["k"], c["v"], c["table"], c["lens"], **kw)
    # f16 queries: float16 or 16-bit codes; a float16 q's out may be its uint16 bits.
    qf = formats.decode(c["q"], "bf16").astype(np.float16)
    o_f = ref.decode_attention(qf, c["k"], c["v"], c["table"], c["lens"], kv_format="bf16")
    assert o_f.dtype == np.float16
    o_bits = np.zeros(qf.shape, np.uint16)
    ref.decode_attention(qf, c["k"], c["v"], c["table"], c["lens"], kv_format="bf16", out=o_bits)
    assert np.array_equal(o_bits, o_f.view(np.uint16))
    # append: k and v each float32, or each a 16-bit holder of in_dtype; a float type of another
    # width or format is refused for v as for k.
    k = bf16_bits(np.random.default_rng(3).standard_normal((2, 2, 16)))
    kp, vp = np.zeros_like(c["k"]), np.zeros_like(c["v"])
    ref.append_kv(k, k.view(np.int16), np.array([0, 1]), kp, vp, kv_format="bf16", in_dtype="bf16")
    assert np.array_equal(kp[0, :2], k) and np.array_equal(vp[0, :2], k)
    with pytest.raises(ValueError, match=r"v: dtype float16, expected float32"):
        ref.append_kv(np.zeros((2, 2, 16), np.float32), np.zeros((2, 2, 16), np.float16), np.array([0, 1]), kp, vp,
                      kv_format="bf16")


def test_ref_rejects_a_scale_array_the_format_does_not_use():
    c = paged_case(seed=2)
    with pytest.raises(ValueError, match="no scale arrays"):
        ref.decode_attention(c["q"], c["k"], c["v"], c["table"], c["lens"], kv_format="bf16", q_dtype="bf16",
                             k_scales=np.zeros(1, np.float32), v_scales=np.zeros(1, np.float32))


# ---- DSV4 substrate (reference) --------------------------------------------------------------
@pytest.mark.parametrize("entry_format,ring_mode", [("fp8_per_token", "atomic_head"),
                                                    ("fp8_ds_mla", "pos_mod_window")])
def test_dsv4_append_then_decode_over_the_window(entry_format, ring_mode):
    from kvlab import dsv4
    rng = np.random.default_rng(17)
    window, nope, rope = 8, 64, 16
    ring = dsv4.SwaRing.empty(2, window, nope, rope, entry_format, ring_mode)
    t = 11
    raw = rng.standard_normal((t, nope + rope)).astype(np.float32)
    # At most `window` tokens of a slot per call: two calls.
    for lo, hi in ((0, window), (window, t)):
        ref.dsv4_append_swa(ring, bf16_bits(raw[lo:hi]), np.zeros(hi - lo, np.int32), np.arange(lo, hi, dtype=np.int32))
    assert sorted(ring.pos[0].tolist()) == list(range(t - window, t)) and (ring.pos[1] == -1).all()
    q = bf16_bits(rng.standard_normal((1, 4, nope + rope)))
    out = ref.dsv4_decode_attention(ring, None, q, np.zeros(1, np.int32), np.array([t - 1], np.int32))
    # The window's rows, dequantized by the reference, attended in numpy.
    keys = formats.roundtrip(raw[t - window:], "bf16").astype(np.float64)
    qq = formats.decode(q, "bf16")[0].astype(np.float64)
    z = keys @ qq.T / np.sqrt(nope + rope)
    p = np.exp(z - z.max(0))
    expect = (p / p.sum(0)).T @ keys
    ok, why = ref.check_close(formats.decode(out, "bf16")[0], expect, "decode_attention_vs_original", "fp8_e4m3_pt",
                              "bf16")
    assert ok, why


def test_dsv4_compress_plans_and_emits_entries():
    from kvlab import dsv4
    rng = np.random.default_rng(23)
    ratio, dim, t = 4, 8, 9
    state = dsv4.CompressorState.empty(1, ratio, dim, overlap=True)
    kv = rng.standard_normal((t, 2 * dim)).astype(np.float32)
    gate = rng.standard_normal((t, 2 * dim)).astype(np.float32)
    out = ref.dsv4_compress(state, kv, gate, np.array([0], np.int32), np.array([0], np.int32),
                            np.array([0, t], np.int32))
    assert out.shape == (t // ratio, dim) and np.isfinite(out).all()
    eo, fe = ref.dsv4_plan_entries([0], [0, t], ratio)
    assert eo.tolist() == [0, 2] and fe.tolist() == [0]


# ---- kvlab.ops without a GPU -----------------------------------------------------------------
def test_ops_registry_and_host_arrays_refused():
    if not native().has_cuda:
        with pytest.raises(ImportError, match="without CUDA"):
            kvlab.ops.decode_versions()
        return
    versions = kvlab.ops.decode_versions()
    assert versions and [v.id for v in versions] == sorted(v.id for v in versions)
    newest = max(versions, key=lambda v: v.id)
    assert kvlab.ops.resolve_version(newest.name) == newest.id
    assert kvlab.ops.resolve_version(newest.name.split("_")[0]) == newest.id
    # "auto" is the C++ choose_decode's pick per shape and device (one meaning, the sweep's):
    # no shape-free id to resolve it to.
    with pytest.raises(ValueError, match="choose_decode"):
        kvlab.ops.resolve_version("auto")
    assert kvlab.ops._version_arg("auto") == native().gpu.AUTO_VERSION < 0
    assert kvlab.ops._version_arg(newest.name) == newest.id
    with pytest.raises(ValueError, match="registered"):
        kvlab.ops.resolve_version("v99_nothing")
    c = paged_case(seed=4)
    with pytest.raises(ValueError, match="CUDA"):
        kvlab.ops.decode_attention(c["q"], c["k"], c["v"], c["table"], c["lens"], kv_format="bf16",
                                   q_dtype="bf16", out=np.empty_like(c["q"]), version=newest.id)
    with pytest.raises(ValueError, match="CUDA"):
        kvlab.ops.choose_decode(c["q"], c["k"], c["v"], c["table"], c["lens"], kv_format="bf16", q_dtype="bf16")


def test_bench_refuses_bad_timing_options_and_kernels_before_the_device():
    """kvlab.bench (gpu/bench's C++ timer): a misspelt option, an unknown kernel or size is
    refused with the allowed values before anything touches a device (so this runs without
    one)."""
    with pytest.raises(ValueError, match="min_rep.*not one of warmup"):
        kvlab.bench.time_bandwidth("read", "cg", mib=1, min_rep=5)
    with pytest.raises(ValueError, match="not one of warmup"):
        kvlab.bench.time_decode(object(), cold=True)
    if not native().has_cuda:
        with pytest.raises(ImportError, match="without CUDA"):
            kvlab.bench.time_bandwidth("read", "cg", mib=1)
        return
    with pytest.raises(TypeError, match="PreparedDecode"):
        kvlab.bench.time_decode(object())
    with pytest.raises(kvlab.InvalidArgument, match="not one of read, copy"):
        kvlab.bench.time_bandwidth("write", "cg", mib=1)
    with pytest.raises(kvlab.InvalidArgument, match="not one of cg, plain, nc, memcpy, bulk"):
        kvlab.bench.time_bandwidth("read", "ca", mib=1)
    with pytest.raises(kvlab.InvalidArgument, match="depth 3"):
        kvlab.bench.time_bandwidth("read", "cg", mib=1, depth=3)
    with pytest.raises(kvlab.InvalidArgument, match="mib 0"):
        kvlab.bench.time_bandwidth("read", "cg", mib=0)
    with pytest.raises(kvlab.InvalidArgument, match="min_reps <= max_reps"):
        kvlab.bench.time_bandwidth("read", "cg", mib=1, min_reps=9, max_reps=3)


# ---- the scripts the GPU stage runs import the installed kvlab -------------------------------
SCRIPTS = os.path.join(ROOT, "experiments", "python", "scripts")


def _installed_kvlab_env():
    """An environment whose only kvlab is the one these tests imported (pip's site, or the
    build's staged package with its extension module), as the GPU stage sets PYTHONPATH."""
    site = os.path.dirname(os.path.dirname(os.path.abspath(kvlab.__file__)))
    env = dict(os.environ, PYTHONPATH=site + os.pathsep + ROOT)
    return site, env


@pytest.mark.parametrize("script", ["example_flashinfer.py", "timing_crosscheck.py"])
def test_a_script_run_by_path_imports_the_installed_package(script):
    """`python DIR/script.py` puts DIR first on sys.path, before PYTHONPATH: a DIR holding the
    kvlab sources (no extension module there) would shadow the installed package. Python's
    rule, applied to each script's folder."""
    import subprocess
    import sys
    path = os.path.join(SCRIPTS, script)
    assert os.path.exists(path)
    site, env = _installed_kvlab_env()
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import kvlab; from kvlab._native import native; "
            "native(); print(kvlab.__file__)")
    r = subprocess.run([sys.executable, "-c", code, os.path.dirname(path)], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert os.path.abspath(r.stdout.strip()).startswith(site + os.sep), (r.stdout, site)
    # The guard itself: the package's source folder, first on sys.path, does shadow it.
    r = subprocess.run([sys.executable, "-c", code, os.path.join(ROOT, "experiments", "python")], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 or not os.path.abspath(r.stdout.strip()).startswith(site + os.sep)


def test_timing_crosscheck_run_as_the_stage_runs_it_reports_the_installed_package(tmp_path):
    """The real script, run by path with the stage's PYTHONPATH: its first line names the kvlab
    it imported (the installed one); without a GPU (or torch) it then stops with its own
    message, never kvlab's 'extension module not built'."""
    import subprocess
    import sys
    site, env = _installed_kvlab_env()
    r = subprocess.run([sys.executable, os.path.join(SCRIPTS, "timing_crosscheck.py"), "--kvlab", "/nonexistent",
                        "--out", str(tmp_path)], env=env, capture_output=True, text=True, timeout=120)
    first = r.stdout.splitlines()[0] if r.stdout else ""
    assert first.startswith("kvlab: "), (r.stdout, r.stderr)
    assert os.path.abspath(first[len("kvlab: "):]).startswith(site + os.sep), first
    assert "not built or not importable" not in r.stderr


def test_timing_crosscheck_verdict_fails_outside_the_tolerance():
    """The cross-check's verdict (compare): a Python median of 3.4 us against the C++ 751.1 us
    (a call that escaped the timer's events) disagrees, 1.5 % agrees at 2 %, and two sides
    that ran different kernels stop the script."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("timing_crosscheck", os.path.join(SCRIPTS, "timing_crosscheck.py"))
    tc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tc)

    def t(med, ran="v4_mma_decode", splits=0):
        return dict(median_us=med, q1_us=0.99 * med, q3_us=1.01 * med, reps=10, ran=ran, splits=splits)

    shapes = [(64, 8192), (8, 2048)]
    rows = tc.compare(shapes, {shapes[0]: t(751.1), shapes[1]: t(34.0)}, {shapes[0]: t(3.4), shapes[1]: t(34.51)},
                      "auto", "H100", 0.02)
    assert [r["agree"] for r in rows] == [False, True]
    assert abs(rows[0]["ratio"] - 3.4 / 751.1) < 1e-12
    with pytest.raises(SystemExit, match="not one kernel"):
        tc.compare(shapes[:1], {shapes[0]: t(751.1)}, {shapes[0]: t(751.1, ran="v5_mma_decode_2stage")}, "auto", "H100",
                   0.02)
    # With the C++ harness also timed in the Python process: the Python timer must agree with
    # both within max(2 %, tolerance_abs_us): 0.3 us apart passes at 0.32 us, fails at 0.
    near = t(9.61)
    near["in_process"] = t(9.60)
    rows = tc.compare(shapes[1:], {shapes[1]: t(9.91)}, {shapes[1]: near}, "auto", "H100", 0.02, 0.32)
    assert rows[0]["agree"] and abs(rows[0]["in_process_ratio"] - 9.61 / 9.6) < 1e-12
    rows = tc.compare(shapes[1:], {shapes[1]: t(9.91)}, {shapes[1]: near}, "auto", "H100", 0.02, 0.0)
    assert not rows[0]["agree"] and "kvlab sweep -0.300 us" in rows[0]["reason"]
    far = t(9.61)
    far["in_process"] = t(9.0)
    rows = tc.compare(shapes[1:], {shapes[1]: t(9.61)}, {shapes[1]: far}, "auto", "H100", 0.02, 0.32)
    assert not rows[0]["agree"] and "one process +0.610 us" in rows[0]["reason"]
