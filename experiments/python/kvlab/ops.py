"""kvlab's GPU kernels on CUDA tensors (PyTorch, CuPy, or any DLPack producer), with the
signatures of kvlab.ref.

    out = kvlab.ops.decode_attention(q, k_cache, v_cache, block_table, seq_lens)   # version "auto"
    out = kvlab.ops.prefill_attention(q, k_cache, v_cache, block_table, seq_lens, q_start)  # chunked prefill

Conventions of every op:
- Arrays are used in place, never copied or converted: they must already have the dtype,
  dense row-major layout and shapes the op needs (kvlab.paged), all on one CUDA device.
- The launch goes on the caller's stream: `stream` when given (an int cudaStream_t, or a
  torch.cuda.Stream / cupy stream), else torch's (or cupy's) current stream of the arrays'
  device, else the legacy default stream. Tensors are handed over by DLPack with that stream,
  so a producer's pending work is ordered before the launch, and a torch call on torch's
  current stream adds nothing to it (CUDA-graph capture works).
- Nothing is allocated behind the caller's back: outputs are allocated with the caller's
  library (torch.empty_like) when not given, and decode's split-KV workspace is the
  caller's (decode_workspace_bytes sizes it; pass workspace=). The optional checks that
  synchronize or allocate (validate_tables, check_slots) are off by default.
- Bad shapes, dtypes or formats raise kvlab.InvalidArgument (a ValueError) with kvlab's
  message before anything is launched; a configuration a kernel version does not handle
  raises kvlab.Unsupported (a NotImplementedError) with the reason.

Decode versions come from the kernel registry (gpu/attention/decode.h) at call time:
decode_versions() lists them, and `version` takes an id, a full name
("v3_flash_decoding"), its "vN" prefix, or "auto": the version and split that
gpu::choose_decode picks for the call's shape on the arrays' device (the calibration table
of gpu/attention/decode_auto.h, else the newest version that supports the shape), the same
rule as `version = auto` in a `kvlab sweep`. choose_decode() says what auto picks and why.
"""
from __future__ import annotations

from collections import namedtuple

from kvlab import _arrays, _common
from kvlab._native import gpu as _gpu

DecodeVersion = namedtuple("DecodeVersion", "id name summary")
DecodeChoice = namedtuple("DecodeChoice", "version name num_splits basis")


def decode_versions() -> list:
    """Every registered decode-attention version, in id order."""
    return [DecodeVersion(*v) for v in _gpu().decode_versions()]


def resolve_version(version) -> int:
    """The registry id of an explicit `version` (id, name or "vN" prefix). "auto" depends on
    the call's shape and device: choose_decode(...) resolves it."""
    if version == "auto":
        raise ValueError("version 'auto' is picked per call from the shape and the device: "
                         "kvlab.ops.choose_decode(q, k_cache, v_cache, block_table, seq_lens) says which")
    versions = decode_versions()
    if isinstance(version, int) and not isinstance(version, bool):
        if any(v.id == version for v in versions):
            return version
    elif isinstance(version, str):
        for v in versions:
            if version == v.name:
                return v.id
        matches = [v for v in versions if v.name.startswith(version + "_")]
        if len(matches) == 1:
            return matches[0].id
    raise ValueError(f"unknown decode version {version!r} (registered: "
                     f"{', '.join(f'{v.id} {v.name}' for v in versions)}; or 'auto')")


def _version_arg(version) -> int:
    """What the binding takes: a registry id, or its AUTO_VERSION for "auto"."""
    return int(_gpu().AUTO_VERSION) if version == "auto" else resolve_version(version)


def device_count() -> int:
    """CUDA devices visible to kvlab (0 without a driver)."""
    return int(_gpu().device_count())


def _decode_kwargs(q, k_cache, v_cache, block_table, seq_lens, out, lse, kv_format, layout, k_scales, v_scales,
                   k_scale, v_scale, sm_scale, max_seq_len, q_dtype, stream):
    s = _arrays.stream_of([q, k_cache, out], stream)

    def x(a):
        return _arrays.exchange(a, s)

    kw = _common.cache_kwargs(k_cache, v_cache, k_scales, v_scales, layout, kv_format, k_scale, v_scale, x)
    kw.update(q=x(q), out=x(out), lse=x(lse), block_table=x(block_table), seq_lens=x(seq_lens),
              sm_scale=_common.sm_scale_or_default(sm_scale, q), max_seq_len=int(max_seq_len), q_dtype=q_dtype or "")
    return kw, s


def decode_workspace_bytes(q, k_cache, v_cache, block_table, seq_lens, *, version="auto", kv_format=None,
                           layout="nhd", k_scales=None, v_scales=None, k_scale=1.0, v_scale=1.0, sm_scale=None,
                           max_seq_len=0, q_dtype=None) -> int:
    """Bytes of device workspace `version` needs for this shape (0: none). Depends on the
    shapes and max_seq_len only, so one buffer serves every call of a shape."""
    kw, _ = _decode_kwargs(q, k_cache, v_cache, block_table, seq_lens, q, None, kv_format, layout, k_scales,
                           v_scales, k_scale, v_scale, sm_scale, max_seq_len, q_dtype, None)
    return int(_gpu().decode_workspace_bytes(version=_version_arg(version), **kw))


def decode_unsupported_reason(q, k_cache, v_cache, block_table, seq_lens, *, version="auto", kv_format=None,
                              layout="nhd", k_scales=None, v_scales=None, k_scale=1.0, v_scale=1.0,
                              max_seq_len=0, q_dtype=None) -> str:
    """'' when `version` handles this configuration, else why not."""
    kw, _ = _decode_kwargs(q, k_cache, v_cache, block_table, seq_lens, q, None, kv_format, layout, k_scales,
                           v_scales, k_scale, v_scale, None, max_seq_len, q_dtype, None)
    return _gpu().decode_unsupported_reason(version=_version_arg(version), **kw)


def choose_decode(q, k_cache, v_cache, block_table, seq_lens, *, kv_format=None, layout="nhd", k_scales=None,
                  v_scales=None, k_scale=1.0, v_scale=1.0, max_seq_len=0, q_dtype=None) -> DecodeChoice:
    """What version "auto" runs for these arguments on their device: DecodeChoice(version id,
    name, num_splits (0: the version's own plan), basis: the calibration row it came from, or
    the default rule). Launches nothing. kvlab.Unsupported when no version handles them."""
    kw, _ = _decode_kwargs(q, k_cache, v_cache, block_table, seq_lens, q, None, kv_format, layout, k_scales,
                           v_scales, k_scale, v_scale, None, max_seq_len, q_dtype, None)
    vid, splits, basis = _gpu().choose_decode(**kw)
    return DecodeChoice(vid, next(v.name for v in decode_versions() if v.id == vid), int(splits), basis)


def decode_attention(q, k_cache, v_cache, block_table, seq_lens, *, version="auto", kv_format=None, layout="nhd",
                     k_scales=None, v_scales=None, k_scale=1.0, v_scale=1.0, sm_scale=None, max_seq_len=0,
                     q_dtype=None, out=None, lse=None, workspace=None, stream=None, validate_tables=False):
    """Decode attention (one query token per sequence) over a paged cache, on the GPU.

    q [num_seqs, num_qo_heads, head_dim] bf16/f16; k_cache, v_cache: pools (kvlab.paged),
    kv_format inferred from their dtype when it says (bfloat16, float16, float8_e4m3fn,
    float8_e5m2), else required; block_table int32 [num_seqs, max_blocks_per_seq]; seq_lens
    int32 [num_seqs] (on the device; max_seq_len, when given, is their host-known bound and
    sizes split-KV plans). Returns out (like q); lse [num_seqs, num_qo_heads] float32 is
    written when given. workspace: a uint8 CUDA buffer of at least decode_workspace_bytes
    (of the same `version`: auto's pick may need a workspace).
    validate_tables=True first checks seq_lens and the block table on the device
    (synchronizes: not for timed loops or graph capture)."""
    if out is None:
        out = _arrays.empty_like(q)
    kw, s = _decode_kwargs(q, k_cache, v_cache, block_table, seq_lens, out, lse, kv_format, layout, k_scales,
                           v_scales, k_scale, v_scale, sm_scale, max_seq_len, q_dtype, stream)
    vid = _version_arg(version)
    if validate_tables:
        _gpu().validate_decode_tables(stream=s, **kw)
    _gpu().decode_attention(version=vid, workspace=_arrays.exchange(workspace, s), stream=s, **kw)
    return out


class PreparedDecode:
    """A decode call checked once and launched by run() (or calling it) with nothing but the
    launch: for timed loops and CUDA-graph capture (FlashInfer's plan / run split). It holds
    its tensors; their contents may change between runs, their shapes and addresses may not.
    `out` is the output tensor every run writes; `version` (registry id), `num_splits` and
    `basis` say what runs (for "auto": what choose_decode picked, and why).

    Stream: prepared with stream=None, each run() launches on the stream current at that run
    (torch's, or cupy's, for the arrays' device), as a torch op does: inside
    torch.cuda.stream(s) it runs on s, inside torch.cuda.graph(g) it is captured, inside a
    timer that makes its own stream current it is timed. `stream` is then None. Prepared with
    stream=S, every run launches on S."""

    def __init__(self, native, out, stream):
        self._native = native
        self.out = out
        self.stream = stream
        self.version = int(native.version)
        self.num_splits = int(native.num_splits)
        self.basis = native.basis

    def run(self):
        if self.stream is None:
            self._native.run(_arrays.stream_of([self.out], None))
        else:
            self._native.run()
        return self.out

    __call__ = run


def prepare_decode_attention(q, k_cache, v_cache, block_table, seq_lens, *, version="auto", kv_format=None,
                             layout="nhd", k_scales=None, v_scales=None, k_scale=1.0, v_scale=1.0, sm_scale=None,
                             max_seq_len=0, q_dtype=None, out=None, lse=None, workspace=None, stream=None):
    """decode_attention's checks now, its launches later: returns a PreparedDecode whose
    run() launches on `stream` when given, else on the stream current at each run. A version
    that does not handle the configuration raises kvlab.Unsupported here."""
    if out is None:
        out = _arrays.empty_like(q)
    kw, s = _decode_kwargs(q, k_cache, v_cache, block_table, seq_lens, out, lse, kv_format, layout, k_scales,
                           v_scales, k_scale, v_scale, sm_scale, max_seq_len, q_dtype, stream)
    p = _gpu().prepare_decode_attention(version=_version_arg(version), workspace=_arrays.exchange(workspace, s),
                                        stream=s, **kw)
    return PreparedDecode(p, out, None if stream is None else s)


PrefillVersion = namedtuple("PrefillVersion", "id name summary")


def prefill_versions() -> list:
    """Every registered paged-prefill version (gpu/attention/prefill.h), in id order."""
    return [PrefillVersion(*v) for v in _gpu().prefill_versions()]


def _prefill_id(version) -> int:
    versions = prefill_versions()
    if version is None:
        return versions[-1].id  # the newest
    for v in versions:
        if version == v.id or version == v.name:
            return v.id
    raise ValueError(f"unknown prefill version {version!r} (registered: "
                     f"{', '.join(f'{v.id} {v.name}' for v in versions)})")


def _prefill_kwargs(q, k_cache, v_cache, block_table, seq_lens, q_start, out, lse, kv_format, layout, k_scales,
                    v_scales, k_scale, v_scale, sm_scale, max_q_len, max_seq_len, q_dtype, stream):
    s = _arrays.stream_of([q, k_cache, out], stream)

    def x(a):
        return _arrays.exchange(a, s)

    kw = _common.cache_kwargs(k_cache, v_cache, k_scales, v_scales, layout, kv_format, k_scale, v_scale, x)
    kw.update(q=x(q), out=x(out), lse=x(lse), block_table=x(block_table), seq_lens=x(seq_lens), q_start=x(q_start),
              sm_scale=_common.sm_scale_or_default(sm_scale, q), max_q_len=int(max_q_len),
              max_seq_len=int(max_seq_len), q_dtype=q_dtype or "")
    return kw, s


def prefill_unsupported_reason(q, k_cache, v_cache, block_table, seq_lens, q_start, *, version=None,
                               kv_format=None, layout="nhd", k_scales=None, v_scales=None, k_scale=1.0, v_scale=1.0,
                               max_q_len=0, max_seq_len=0, q_dtype=None) -> str:
    """'' when the prefill `version` (default: the newest) handles this configuration, else why not."""
    kw, _ = _prefill_kwargs(q, k_cache, v_cache, block_table, seq_lens, q_start, q, None, kv_format, layout,
                            k_scales, v_scales, k_scale, v_scale, None, max_q_len, max_seq_len, q_dtype, None)
    return _gpu().prefill_unsupported_reason(version=_prefill_id(version), **kw)


def prefill_attention(q, k_cache, v_cache, block_table, seq_lens, q_start, *, version=None, kv_format=None,
                      layout="nhd", k_scales=None, v_scales=None, k_scale=1.0, v_scale=1.0, sm_scale=None,
                      max_q_len=0, max_seq_len=0, q_dtype=None, out=None, lse=None, stream=None,
                      validate_tables=False):
    """Paged (chunked) prefill attention on the GPU, with kvlab.ref.paged_prefill_attention's
    arguments (q_start, seq_lens and block_table on the device; max_q_len / max_seq_len,
    when given, are their host-known bounds and size the grid). version: a registered
    prefill version's id or name (default: the newest). Allocates nothing but `out` when it
    is not given. validate_tables=True first checks q_start, seq_lens and the table on the
    device, and that the chunks end at q's last row (synchronizes: not for timed loops)."""
    if out is None:
        out = _arrays.empty_like(q)
    kw, s = _prefill_kwargs(q, k_cache, v_cache, block_table, seq_lens, q_start, out, lse, kv_format, layout,
                            k_scales, v_scales, k_scale, v_scale, sm_scale, max_q_len, max_seq_len, q_dtype, stream)
    _gpu().prefill_attention(version=_prefill_id(version), validate_tables=bool(validate_tables), stream=s, **kw)
    return out


def append_kv(k, v, slot_mapping, k_cache, v_cache, *, kv_format=None, layout="nhd", k_scales=None, v_scales=None,
              k_scale=1.0, v_scale=1.0, in_dtype=None, check_slots=False, stream=None):
    """Append / quantize-on-write into the paged cache, byte-exact to kvlab.ref.append_kv.
    k, v [num_tokens, num_kv_heads, head_dim] (float32, bf16 or f16); slot_mapping int64
    [num_tokens] (block * block_size + slot, -1 = padding). check_slots=True checks the
    slots on the device first (range, duplicates; synchronizes and allocates a temporary
    copy); without it an out-of-range slot is skipped, never written."""
    s = _arrays.stream_of([k, k_cache], stream)

    def x(a):
        return _arrays.exchange(a, s)

    kw = _common.cache_kwargs(k_cache, v_cache, k_scales, v_scales, layout, kv_format, k_scale, v_scale, x)
    _gpu().append_kv(k=x(k), v=x(v), slot_mapping=x(slot_mapping), in_dtype=in_dtype or "",
                     check_slots=bool(check_slots), stream=s, **kw)


def quant_stream_bytes(scheme: str, rows: int, cols: int, page_block_size: int = 0) -> int:
    """Bytes of the quantized stream (the same as kvlab.ref.quant_stream_bytes)."""
    from kvlab import ref
    return ref.quant_stream_bytes(scheme, rows, cols, page_block_size)


def quantize(x, scheme: str, *, tensor_scale=None, page_block_size=0, out=None, stream=None):
    """The scheme's byte stream (uint8) of float32 x [rows, cols], byte-exact to
    kvlab.ref.quantize. A computed tensor scale takes three launches (amax, scale, rows)."""
    s = _arrays.stream_of([x], stream)
    if out is None:
        out = _arrays.empty(x, (quant_stream_bytes(scheme, x.shape[0], x.shape[1], page_block_size),), "u8")
    _gpu().quantize(x=_arrays.exchange(x, s), out=_arrays.exchange(out, s), scheme=scheme,
                    tensor_scale=None if tensor_scale is None else float(tensor_scale),
                    page_block_size=int(page_block_size), stream=s)
    return out


def dequantize(stream_bytes, scheme: str, rows: int, cols: int, *, page_block_size=0, out=None, stream=None):
    """float32 [rows, cols] values of a quantized stream, bitwise equal to kvlab.ref.dequantize."""
    s = _arrays.stream_of([stream_bytes], stream)
    if out is None:
        out = _arrays.empty(stream_bytes, (rows, cols), "f32")
    _gpu().dequantize(stream_bytes=_arrays.exchange(stream_bytes, s), out=_arrays.exchange(out, s), scheme=scheme,
                      page_block_size=int(page_block_size), stream=s)
    return out


# ---- DeepSeek-V4-style substrate (cache views: kvlab.dsv4; arrays on the device) --------------
def _dsv4(name, views, arrays, stream):
    s = _arrays.stream_of(list(arrays) + [a for v in views if v is not None for a in v.arrays()], stream)
    return getattr(_gpu(), name), s, [None if v is None else v.exchanged(s) for v in views], \
        [_arrays.exchange(a, s) for a in arrays]


def dsv4_append_swa(ring, raw_kv, request_slots, positions, *, stream=None):
    """kvlab.ref.dsv4_append_swa on the GPU (kAtomicHead: rows of one slot in arrival order)."""
    fn, s, (r,), a = _dsv4("dsv4_append_swa", [ring], [raw_kv, request_slots, positions], stream)
    fn(r, *a, stream=s)


def dsv4_compress(state, kv, gate, request_slots, start_pos, token_offsets, entry_offsets, *, num_entries,
                  ape=None, out=None, stream=None):
    """kvlab.ref.dsv4_compress on the GPU. entry_offsets (device int32 [R+1]) must be
    planned on the host (kvlab.ref.dsv4_plan_entries of the host copies); num_entries is its
    last value (it sizes the grid)."""
    if out is None:
        out = _arrays.empty(kv, (int(num_entries), state.dim), "f32")
    fn, s, (st,), a = _dsv4("dsv4_compress", [state],
                            [kv, gate, ape, request_slots, start_pos, token_offsets, entry_offsets, out], stream)
    fn(st, *a, stream=s)
    return out


def dsv4_store_entries(pool, entries, request_slots, first_entry, entry_offsets, *, stream=None):
    """kvlab.ref.dsv4_store_entries on the GPU."""
    fn, s, (p,), a = _dsv4("dsv4_store_entries", [pool], [entries, request_slots, first_entry, entry_offsets], stream)
    fn(p, *a, stream=s)


def dsv4_store_indexer_keys(keys, entries, request_slots, first_entry, entry_offsets, *, stream=None):
    """kvlab.ref.dsv4_store_indexer_keys on the GPU."""
    fn, s, (k,), a = _dsv4("dsv4_store_indexer_keys", [keys], [entries, request_slots, first_entry, entry_offsets],
                           stream)
    fn(k, *a, stream=s)


def dsv4_decode_attention(ring, pool, q, request_slots, positions, *, sm_scale=None, out=None, lse=None, stream=None):
    """kvlab.ref.dsv4_decode_attention on the GPU (FP32 online softmax, one rounding)."""
    if out is None:
        out = _arrays.empty_like(q)
    fn, s, (r, p), a = _dsv4("dsv4_decode_attention", [ring, pool], [q, out, lse, request_slots, positions], stream)
    fn(r, p, *a, _common.sm_scale_or_default(sm_scale, q), stream=s)
    return out
