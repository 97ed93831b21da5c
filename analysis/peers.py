"""Reference figures of other implementations, for the bandwidth plots.

Source: DESIGN.md "Peers measured on the same H100 for contiguous BF16 KV (PyTorch SDPA)".
They are drawn only when the result file's device is an H100, since they were measured there.
"""

H100_PEERS = [
    # (label, batch, context, bytes/s)
    ("cuDNN SDPA, batch 1 x 32k", 1, 32768, 2.07e12),
    ("FlashAttention SDPA, batch 1 x 32k", 1, 32768, 1.84e12),
]
H100_PEER_LINES = [("cuDNN SDPA, large batch", 3.0e12)]


def applicable(device_name: str) -> bool:
    return "H100" in (device_name or "")
