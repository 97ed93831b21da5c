"""Shapes of kvlab's paged KV caches (reference/layout/kv_layout.h), for building caches that
kvlab.ops and kvlab.ref accept.

Pools, in storage elements (N blocks, B slots per block, H KV heads, D = head_dim; FP4 pools
hold two E2M1 codes per byte):
    nhd      K, V  [N, B, H, D]          FP4 [N, B, H, D/2]
    hnd      K, V  [N, H, B, D]          FP4 [N, H, B, D/2]
    split_x  K     [N, H, D/x, B, x]     x = elements per 16 bytes: 8 (16-bit), 16 (FP8), 32 (FP4,
                                         stored as 16 bytes)
             V     [N, H, D, B]          FP4 [N, H, D, B/2]
Scales: fp8_e4m3_pt float32 [N, H, B]; nvfp4 (E4M3 codes) / mxfp4 (UE8M0 codes) uint8
[N, H, B, D/g], g = 16 / 32. fp8_e4m3, fp8_e5m2 and nvfp4 also take pool-wide FP32 scales
(k_scale, v_scale: real = stored * scale).
Block tables: int32 [num_seqs, max_blocks_per_seq]; token t of sequence s is in block
block_table[s, t // B], slot t % B. Append slots: int64, block * B + slot (-1 = padding).
"""
from __future__ import annotations

FORMATS = ("bf16", "fp16", "fp8_e4m3", "fp8_e4m3_pt", "fp8_e5m2", "nvfp4", "mxfp4")
LAYOUTS = ("nhd", "hnd", "split_x")
_BITS = {"bf16": 16, "fp16": 16, "fp8_e4m3": 8, "fp8_e4m3_pt": 8, "fp8_e5m2": 8, "nvfp4": 4, "mxfp4": 4}
_GROUP = {"nvfp4": 16, "mxfp4": 32}


def _check(layout, kv_format):
    if kv_format not in _BITS:
        raise ValueError(f"unknown kv_format {kv_format!r} (allowed: {', '.join(FORMATS)})")
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r} (allowed: {', '.join(LAYOUTS)})")


def storage_kind(kv_format: str) -> str:
    """The element kind of a pool: 'bf16', 'f16' or 'u8' (FP8 codes, packed FP4)."""
    _check("nhd", kv_format)
    return {"bf16": "bf16", "fp16": "f16"}.get(kv_format, "u8")


def pool_shapes(layout: str, kv_format: str, num_blocks: int, block_size: int, num_kv_heads: int,
                head_dim: int) -> tuple[tuple, tuple]:
    """(K shape, V shape) of the pools, in storage elements."""
    _check(layout, kv_format)
    bits = _BITS[kv_format]
    n, b, h, d = num_blocks, block_size, num_kv_heads, head_dim
    inner = d // 2 if bits == 4 else d
    if layout == "nhd":
        return (n, b, h, inner), (n, b, h, inner)
    if layout == "hnd":
        return (n, h, b, inner), (n, h, b, inner)
    x = 128 // bits
    return (n, h, d // x, b, x // 2 if bits == 4 else x), (n, h, d, b // 2 if bits == 4 else b)


def scales_shape(kv_format: str, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int):
    """Shape of each of k_scales / v_scales (None for formats without scale arrays) and their
    element kind ('f32' or 'u8')."""
    _check("nhd", kv_format)
    if kv_format == "fp8_e4m3_pt":
        return (num_blocks, num_kv_heads, block_size), "f32"
    if kv_format in _GROUP:
        return (num_blocks, num_kv_heads, block_size, head_dim // _GROUP[kv_format]), "u8"
    return None, ""


def infer_kv_format(k_cache) -> str:
    """The format a pool's dtype implies (bfloat16 -> bf16, float16 -> fp16, float8_e4m3fn ->
    fp8_e4m3, float8_e5m2 -> fp8_e5m2); '' when it does not say (uint8 holds several)."""
    name = str(getattr(k_cache, "dtype", "")).replace("torch.", "")
    return {"bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2"}.get(name, "")
