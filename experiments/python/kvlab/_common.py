"""Argument handling shared by kvlab.ref and kvlab.ops (the same signatures on both sides)."""
from __future__ import annotations

import math

from kvlab import paged


def cache_kwargs(k_cache, v_cache, k_scales, v_scales, layout, kv_format, k_scale, v_scale, conv):
    fmt = kv_format or paged.infer_kv_format(k_cache)
    if not fmt:
        raise ValueError(f"k_cache has dtype {getattr(k_cache, 'dtype', '?')}, which holds several formats: "
                         f"name it with kv_format= (one of {', '.join(paged.FORMATS)})")
    return dict(k_cache=conv(k_cache), v_cache=conv(v_cache), k_scales=conv(k_scales), v_scales=conv(v_scales),
                layout=layout, kv_format=fmt, k_scale=float(k_scale), v_scale=float(v_scale))


def head_dim_of(q) -> int:
    return int(q.shape[-1])


def sm_scale_or_default(sm_scale, q) -> float:
    return float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(head_dim_of(q))
