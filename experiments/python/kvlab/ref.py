"""The CPU reference of kvlab on host arrays (numpy, or CPU tensors through DLPack): the
definitions every GPU kernel is validated against (reference/), with the signatures of
kvlab.ops.

    out = kvlab.ref.decode_attention(q, k_cache, v_cache, block_table, seq_lens)

Decode attention computes in float64 and rounds once into q's dtype; exact=True returns the
unrounded float64 result. numpy has no bfloat16: BF16 arrays are uint16 bits there (pass
q_dtype='bf16', and kvlab.formats.decode(out, 'bf16') reads the result), while CPU torch
tensors of dtype bfloat16 work as they are. Pool shapes and formats: kvlab.paged. Outputs
are allocated with the library of the inputs unless out= is given. Bad shapes, dtypes or
formats raise kvlab.InvalidArgument (a ValueError) with kvlab's message; nothing is written
then.
"""
from __future__ import annotations

import numpy as np

from kvlab import _arrays, _common
from kvlab._native import native


def _ref():
    return native().ref


def decode_attention(q, k_cache, v_cache, block_table, seq_lens, *, kv_format=None, layout="nhd", k_scales=None,
                     v_scales=None, k_scale=1.0, v_scale=1.0, sm_scale=None, max_seq_len=0, q_dtype=None, out=None,
                     lse=None, exact=False):
    """Decode attention (one query token per sequence) over a paged cache.

    q [num_seqs, num_qo_heads, head_dim] bf16/f16; k_cache, v_cache: pools (kvlab.paged);
    block_table int32 [num_seqs, max_blocks_per_seq]; seq_lens int32 [num_seqs]. Returns out
    (q's shape and dtype; float64 with exact=True); lse [num_seqs, num_qo_heads] (float32,
    float64 with exact) is filled when given. sm_scale defaults to 1/sqrt(head_dim)."""
    h = _arrays.host
    q = h(q)
    if out is None:
        out = _arrays.empty(q, q.shape, "f64") if exact else _arrays.empty_like(q)
    kw = _common.cache_kwargs(k_cache, v_cache, k_scales, v_scales, layout, kv_format, k_scale, v_scale, h)
    fn = _ref().decode_attention_exact if exact else _ref().decode_attention
    fn(q=q, out=h(out), lse=h(lse), block_table=h(block_table), seq_lens=h(seq_lens),
       sm_scale=_common.sm_scale_or_default(sm_scale, q), max_seq_len=int(max_seq_len), q_dtype=q_dtype or "", **kw)
    return out


def paged_prefill_attention(q, k_cache, v_cache, block_table, seq_lens, q_start, *, kv_format=None, layout="nhd",
                            k_scales=None, v_scales=None, k_scale=1.0, v_scale=1.0, sm_scale=None, max_q_len=0,
                            max_seq_len=0, q_dtype=None, out=None, lse=None):
    """Paged (chunked) prefill attention: sequence s computes query rows q_start[s] ..
    q_start[s+1] - 1, the last q_len of its seq_lens[s] cached tokens (append them first);
    row i sees keys 0 .. seq_lens[s] - q_len + i (its cached prefix plus the chunk, causal).

    q [q_start[-1], num_qo_heads, head_dim] bf16/f16; q_start int32 [num_seqs + 1] (0,
    non-decreasing); seq_lens int32 [num_seqs]; block_table int32 [num_seqs,
    max_blocks_per_seq]; pools as decode_attention. Returns out (q's shape and dtype, rounded
    once from float64); lse [rows, num_qo_heads] float32 is filled when given."""
    h = _arrays.host
    q = h(q)
    if out is None:
        out = _arrays.empty_like(q)
    kw = _common.cache_kwargs(k_cache, v_cache, k_scales, v_scales, layout, kv_format, k_scale, v_scale, h)
    _ref().paged_prefill_attention(q=q, out=h(out), lse=h(lse), block_table=h(block_table), seq_lens=h(seq_lens),
                                   q_start=h(q_start), sm_scale=_common.sm_scale_or_default(sm_scale, q),
                                   max_q_len=int(max_q_len), max_seq_len=int(max_seq_len), q_dtype=q_dtype or "",
                                   **kw)
    return out


def append_kv(k, v, slot_mapping, k_cache, v_cache, *, kv_format=None, layout="nhd", k_scales=None, v_scales=None,
              k_scale=1.0, v_scale=1.0, in_dtype=None):
    """Append / quantize-on-write (vLLM's reshape_and_cache): token i of k, v [num_tokens,
    num_kv_heads, head_dim] (float32, bf16 or f16) goes to slot slot_mapping[i] (int64, -1 =
    padding) of the cache, quantized by kv_format's rule; per-token and block scales are
    written into k_scales / v_scales. In place; every slot is checked first."""
    h = _arrays.host
    kw = _common.cache_kwargs(k_cache, v_cache, k_scales, v_scales, layout, kv_format, k_scale, v_scale, h)
    _ref().append_kv(k=h(k), v=h(v), slot_mapping=h(slot_mapping), in_dtype=in_dtype or "", **kw)


def tolerance(op: str, kv_format: str, out_dtype: str = "bf16") -> dict:
    """kvlab's tolerance for an operation and format (reference/metrics/tolerance.h, the one
    table every test uses): atol, rtol (elementwise |out - ref| <= atol + rtol |ref|),
    nmse_max, nmse_max_small and nmse_small_below (an array of fewer than nmse_small_below
    elements is held to nmse_max_small instead; 0, 0: one NMSE bound for every size),
    allow_nonfinite, why."""
    return dict(_ref().tolerance(op, kv_format, out_dtype))


def check_close(out, expected, op: str, kv_format: str, out_dtype: str = "bf16"):
    """(passed, explanation) of float32 `out` against float32 `expected` under kvlab's
    tolerance table (the same check the C++ tests make)."""
    out = np.ascontiguousarray(np.asarray(out, dtype=np.float32))
    expected = np.ascontiguousarray(np.asarray(expected, dtype=np.float32))
    ok, why = _ref().check_close(out, expected, op, kv_format, out_dtype)
    return bool(ok), why


def scheme_names() -> list:
    """The preset quantization schemes (reference/quant/schemes.h)."""
    return list(_ref().scheme_names())


def scheme_spec(scheme: str) -> str:
    """Every parameter of a scheme (a preset name, optionally with overrides such as
    'mxfp4 group=16 rule=ceil_pow2')."""
    return _ref().scheme_spec(scheme)


def quant_stream_bytes(scheme: str, rows: int, cols: int, page_block_size: int = 0) -> int:
    """Bytes of the quantized stream of a [rows, cols] tensor (paged with page_block_size rows
    per page when > 0, e.g. fp8_ds_mla pages)."""
    return int(_ref().quant_stream_bytes(scheme, int(rows), int(cols), int(page_block_size)))


def quantize(x, scheme: str, *, tensor_scale=None, page_block_size=0, out=None):
    """The byte stream (uint8) of float32 x [rows, cols] (a row = one token) under `scheme`:
    header, records (codes, BF16 tail, scales, padding), as reference/quant/schemes.h lays
    it out. tensor_scale overrides a computed per-tensor / two-level scale."""
    x = _arrays.host(x)
    n = quant_stream_bytes(scheme, x.shape[0], x.shape[1], page_block_size)
    if out is None:
        out = _arrays.empty(x, (n,), "u8")
    _ref().quantize(x=x, out=_arrays.host(out), scheme=scheme,
                    tensor_scale=None if tensor_scale is None else float(tensor_scale),
                    page_block_size=int(page_block_size))
    return out


def dequantize(stream, scheme: str, rows: int, cols: int, *, page_block_size=0, out=None):
    """float32 [rows, cols] values of a stream written by quantize."""
    stream = _arrays.host(stream)
    if out is None:
        out = _arrays.empty(stream, (rows, cols), "f32")
    _ref().dequantize(stream=stream, out=_arrays.host(out), scheme=scheme, page_block_size=int(page_block_size))
    return out


# ---- DeepSeek-V4-style substrate (cache views: kvlab.dsv4) ---------------------------------------
def dsv4_plan_entries(start_pos, token_offsets, ratio: int):
    """(entry_offsets [R+1], first_entry [R]) int32 of a compressor call: the output rows of
    each request's entries completed in the call."""
    start_pos = np.ascontiguousarray(np.asarray(start_pos, dtype=np.int32))
    token_offsets = np.ascontiguousarray(np.asarray(token_offsets, dtype=np.int32))
    eo = np.empty(len(start_pos) + 1, dtype=np.int32)
    fe = np.empty(len(start_pos), dtype=np.int32)
    _ref().dsv4_plan_entries(start_pos, token_offsets, int(ratio), eo, fe)
    return eo, fe


def dsv4_append_swa(ring, raw_kv, request_slots, positions):
    """Raw BF16 tokens raw_kv [T, head_dim] into the SWA ring (kvlab.dsv4.SwaRing), slot
    request_slots[i], absolute position positions[i]."""
    h = _arrays.host
    _ref().dsv4_append_swa(ring, h(raw_kv), h(request_slots), h(positions))


def dsv4_compress(state, kv, gate, request_slots, start_pos, token_offsets, *, ape=None, entry_offsets=None, out=None):
    """The CSA / HCA compressor over one call's projection rows (kvlab.dsv4.CompressorState):
    returns the completed entries float32 [E, dim] (E from dsv4_plan_entries)."""
    h = _arrays.host
    if entry_offsets is None:
        entry_offsets, _ = dsv4_plan_entries(start_pos, token_offsets, state.ratio)
    if out is None:
        out = _arrays.empty(h(kv), (int(entry_offsets[-1]), state.dim), "f32")
    _ref().dsv4_compress(state, h(kv), h(gate), h(ape), h(request_slots), h(start_pos), h(token_offsets),
                         h(entry_offsets), h(out))
    return out


def dsv4_store_entries(pool, entries, request_slots, first_entry, entry_offsets):
    """FP32 entries [E, head_dim] into the compressed pool (kvlab.dsv4.CompressedPool)."""
    h = _arrays.host
    _ref().dsv4_store_entries(pool, h(entries), h(request_slots), h(first_entry), h(entry_offsets))


def dsv4_store_indexer_keys(keys, entries, request_slots, first_entry, entry_offsets):
    """FP32 indexer keys [E, dim] into FP4 storage (kvlab.dsv4.IndexerKeys)."""
    h = _arrays.host
    _ref().dsv4_store_indexer_keys(keys, h(entries), h(request_slots), h(first_entry), h(entry_offsets))


def dsv4_decode_attention(ring, pool, q, request_slots, positions, *, sm_scale=None, out=None, lse=None):
    """One query per sequence (q [S, heads, head_dim] BF16) over its visible compressed
    entries (pool, None for SWA layers) and its raw window; returns out (BF16, like q)."""
    h = _arrays.host
    q = h(q)
    if out is None:
        out = _arrays.empty_like(q)
    _ref().dsv4_decode_attention(ring, pool, q, h(out), h(lse), h(request_slots), h(positions),
                                 _common.sm_scale_or_default(sm_scale, q))
    return out
