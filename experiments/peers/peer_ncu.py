#!/usr/bin/env python3
"""One peer decode call inside a CUDA profiler range, for Nsight Compute to count.

    ncu --profile-from-start off --target-processes all ... \
        python3 experiments/peers/peer_ncu.py --peer sdpa_cudnn --batch 64 --context 8192

Builds the same inputs decode_peers.py times for peer:sdpa_cudnn / sdpa_flash (contiguous BF16
KV: q [batch, kv_heads * group, 1, d], k/v [batch, kv_heads, context, d], seeded N(0, 1)),
runs the call twice outside the range (cuDNN builds its plan on the first call), then once
between cudaProfilerStart and cudaProfilerStop, so that ncu profiles exactly that call's
kernels. ncu's own cache control (--cache-control all, its default) flushes the caches before
every profiled kernel, the same way it does for kvlab's kernels in gpu/attention/h100_stage.sh,
so the counters of both sides are taken cold under one rule.

Exit codes: 0 ok, 2 bad input (an unknown peer, a shape that is not positive).
"""
from __future__ import annotations

import argparse
import sys

BACKENDS = ("sdpa_cudnn", "sdpa_flash")


def main(argv) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--peer", default="sdpa_cudnn", help="sdpa_cudnn or sdpa_flash")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--context", type=int, required=True)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=128)
    try:
        a = p.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    if a.peer not in BACKENDS:
        print(f"peer_ncu: unknown peer '{a.peer}' (allowed: {', '.join(BACKENDS)})", file=sys.stderr)
        return 2
    for name in ("batch", "context", "kv_heads", "group", "head_dim"):
        if getattr(a, name) <= 0:
            print(f"peer_ncu: --{name.replace('_', '-')} must be positive (got {getattr(a, name)})", file=sys.stderr)
            return 2

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"sdpa_cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa_flash": SDPBackend.FLASH_ATTENTION}[a.peer]
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234 + 7 * a.batch + a.context + 131 * a.group)
    hq = a.kv_heads * a.group
    q = torch.randn(a.batch, hq, 1, a.head_dim, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(a.batch, a.kv_heads, a.context, a.head_dim, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(a.batch, a.kv_heads, a.context, a.head_dim, device="cuda", dtype=torch.bfloat16, generator=gen)
    with sdpa_kernel([backend]):
        for _ in range(2):
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
    if not torch.isfinite(out.float()).all():
        print("peer_ncu: the peer's output is not finite", file=sys.stderr)
        return 1
    print(f"peer_ncu: {a.peer} {a.batch} x {a.context}, {a.kv_heads} KV heads x group {a.group}, d {a.head_dim}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
