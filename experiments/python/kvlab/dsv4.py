"""The cache views of the DeepSeek-V4-style substrate (reference/dsv4/views.h) as plain
objects of arrays, for kvlab.ref.dsv4_* (numpy) and kvlab.ops.dsv4_* (CUDA tensors).

    ring = SwaRing.empty(num_slots=4, window=128)                       # numpy, per_token_scales storage
    ring = SwaRing.empty(4, 128, entry_format="fp8_ds_mla", ring_mode="pos_mod_window",
                         like=torch.empty(0, device="cuda"))           # torch on the GPU

Storage variants (reference/dsv4/variant.h): entries "fp8_per_token" (per_token_scales: FP8 NoPE,
BF16 RoPE, one FP32 inverse scale per entry) or "fp8_ds_mla" (public V4: 584-byte records,
64-element tiles with UE8M0 scales, a page = data rows then scale rows); indexer keys
"nvfp4" or "mxfp4_hadamard"; ring slots "atomic_head" or "pos_mod_window".
The `empty` constructors allocate with the library and device of `like` (numpy when None):
that is the only allocation, made by the caller.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from kvlab import _arrays

_LIKE = np.empty(0, dtype=np.float32)


def _alloc(like, shape, kind, fill=None):
    a = _arrays.empty(like if like is not None else _LIKE, shape, kind)
    if fill is not None:
        a[...] = fill
    return a


def _entry_bytes(entry_format, nope_dim, rope_dim):
    if entry_format == "fp8_ds_mla":
        tiles = nope_dim // 64
        return nope_dim + 2 * rope_dim + (tiles + 1 + 7) // 8 * 8
    return nope_dim + 2 * rope_dim + 4


class _View:
    def arrays(self):
        return [getattr(self, f.name) for f in fields(self) if hasattr(getattr(self, f.name), "shape")]

    def exchanged(self, stream):
        """A copy whose arrays are DLPack capsules for a launch on `stream` (kvlab.ops)."""
        return replace(self, **{f.name: _arrays.exchange(getattr(self, f.name), stream) for f in fields(self)
                                if hasattr(getattr(self, f.name), "shape")})


def _pages(num_pages, rows, nope_dim, rope_dim, entry_format, like):
    if entry_format == "fp8_per_token":
        return dict(data=_alloc(like, (num_pages, rows, nope_dim), "u8", 0),
                    rope=_alloc(like, (num_pages, rows, rope_dim), "bf16" if _arrays.library(like) == "torch" else "u16", 0),
                    inv_scale=_alloc(like, (num_pages, rows), "f32", 0))
    if entry_format == "fp8_ds_mla":
        return dict(data=_alloc(like, (num_pages, rows * _entry_bytes(entry_format, nope_dim, rope_dim)), "u8", 0),
                    rope=None, inv_scale=None)
    raise ValueError(f"unknown entry_format {entry_format!r} (allowed: fp8_per_token, fp8_ds_mla)")


@dataclass
class SwaRing(_View):
    """The SWA ring of every request slot of one layer: pages of `window` rows, the position
    each row holds (pos, -1 = empty) and the per-slot head."""
    data: object
    rope: object
    inv_scale: object
    pos: object
    head: object
    nope_dim: int = 448
    rope_dim: int = 64
    entry_format: str = "fp8_per_token"
    ring_mode: str = "atomic_head"

    @classmethod
    def empty(cls, num_slots, window=128, nope_dim=448, rope_dim=64, entry_format="fp8_per_token",
              ring_mode="atomic_head", like=None):
        return cls(**_pages(num_slots, window, nope_dim, rope_dim, entry_format, like),
                   pos=_alloc(like, (num_slots, window), "i32", -1), head=_alloc(like, (num_slots,), "i32", 0),
                   nope_dim=nope_dim, rope_dim=rope_dim, entry_format=entry_format, ring_mode=ring_mode)


@dataclass
class CompressedPool(_View):
    """The compressed ("classical") pool of a CSA / HCA layer: pages of entries_per_block
    entries, addressed through block_table int32 [max_requests, max_blocks_per_request]."""
    data: object
    rope: object
    inv_scale: object
    block_table: object
    ratio: int
    nope_dim: int = 448
    rope_dim: int = 64
    entry_format: str = "fp8_per_token"

    @classmethod
    def empty(cls, num_blocks, entries_per_block, block_table, ratio, nope_dim=448, rope_dim=64,
              entry_format="fp8_per_token", like=None):
        return cls(**_pages(num_blocks, entries_per_block, nope_dim, rope_dim, entry_format, like),
                   block_table=block_table, ratio=ratio, nope_dim=nope_dim, rope_dim=rope_dim,
                   entry_format=entry_format)


@dataclass
class IndexerKeys(_View):
    """FP4 indexer keys of a CSA layer: codes uint8 [num_blocks, rows, dim/2], scales uint8
    [num_blocks, rows, dim/g] (E4M3 for nvfp4 with tensor_scale, UE8M0 for mxfp4_hadamard)."""
    codes: object
    scales: object
    block_table: object
    ratio: int
    tensor_scale: float = 1.0
    indexer_format: str = "nvfp4"

    @classmethod
    def empty(cls, num_blocks, rows, dim, block_table, ratio, indexer_format="nvfp4", tensor_scale=1.0, like=None):
        g = 16 if indexer_format == "nvfp4" else 32
        return cls(codes=_alloc(like, (num_blocks, rows, dim // 2), "u8", 0),
                   scales=_alloc(like, (num_blocks, rows, dim // g), "u8", 0), block_table=block_table, ratio=ratio,
                   tensor_scale=tensor_scale, indexer_format=indexer_format)


@dataclass
class CompressorState(_View):
    """The FP32 rows the streaming compressor keeps per request slot: overlap (CSA) lanes
    ka, za [slots, 2, ratio, dim] and kb, zb [slots, ratio, dim]; single lane (HCA) ka, za
    [slots, ratio, dim]."""
    ka: object
    za: object
    kb: object
    zb: object
    ratio: int
    dim: int
    overlap: bool

    @classmethod
    def empty(cls, num_slots, ratio, dim, overlap, like=None):
        a = (num_slots, 2, ratio, dim) if overlap else (num_slots, ratio, dim)
        b = (num_slots, ratio, dim)
        return cls(ka=_alloc(like, a, "f32", 0), za=_alloc(like, a, "f32", 0),
                   kb=_alloc(like, b, "f32", 0) if overlap else None, zb=_alloc(like, b, "f32", 0) if overlap else None,
                   ratio=ratio, dim=dim, overlap=overlap)
