"""numpy_llama.py: an independent forward pass of a Llama-family GGUF, in numpy over gguf-py.

Written apart from kvlab's C++ on purpose: it reads the GGUF itself (not kvlab's model file),
keeps llama.cpp's own Q/K row order and rotates adjacent pairs (2i, 2i+1) as llama.cpp's RoPE
does (kvlab un-permutes the rows and rotates NeoX halves), and computes with numpy/BLAS. It
follows kvlab's documented precision contract, which is part of the model kvlab runs:
  - weights: gguf-py's float32 dequantization rounded to BF16 (nearest even);
  - BF16 roundings at RMSNorm outputs, queries after RoPE, the cache's K (after RoPE) and V,
    the attention output and the SwiGLU output; the residual stream stays float32;
  - RMSNorm: x * (1 / sqrt(mean(x^2) + eps)) * gain; SwiGLU: silu(gate) * up;
    attention with scale 1/sqrt(head_dim), causal.
"""
from __future__ import annotations

import numpy as np


def bf16(x):
    """Round to BF16 (nearest even) and back to float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


class NumpyLlama:
    def __init__(self, gguf_path: str):
        import gguf

        r = gguf.GGUFReader(gguf_path)
        f = {k: v.contents() for k, v in r.fields.items()
             if not k.startswith("tokenizer.ggml.")}
        a = f["general.architecture"]
        assert a == "llama", a
        self.layers = int(f[f"{a}.block_count"])
        self.hidden = int(f[f"{a}.embedding_length"])
        self.q_heads = int(f[f"{a}.attention.head_count"])
        self.kv_heads = int(f.get(f"{a}.attention.head_count_kv", self.q_heads))
        self.head_dim = self.hidden // self.q_heads
        self.theta = float(f.get(f"{a}.rope.freq_base", 10000.0))
        self.eps = float(f[f"{a}.attention.layer_norm_rms_epsilon"])
        t = {x.name: x for x in r.tensors}

        def w(name):
            x = t[name]
            v = gguf.quants.dequantize(x.data, x.tensor_type).astype(np.float32)
            return bf16(v)

        self.emb = w("token_embd.weight")                      # [vocab, hidden]
        self.lm = w("output.weight") if "output.weight" in t else self.emb
        self.out_norm = w("output_norm.weight")
        self.L = []
        for l in range(self.layers):
            b = f"blk.{l}."
            self.L.append({k: w(b + n + ".weight") for k, n in [
                ("an", "attn_norm"), ("wq", "attn_q"), ("wk", "attn_k"), ("wv", "attn_v"),
                ("wo", "attn_output"), ("mn", "ffn_norm"), ("wg", "ffn_gate"), ("wu", "ffn_up"),
                ("wd", "ffn_down")]})
        D = self.head_dim
        inv = self.theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)   # [D/2]
        self.inv_freq = inv
        self.reset()

    def reset(self):
        """Empties the cache: the next forward() starts at position 0."""
        self.k_cache = [None] * self.layers
        self.v_cache = [None] * self.layers
        self.pos = 0

    def _norm(self, h, g):
        ss = np.mean(h.astype(np.float64) ** 2, axis=-1, keepdims=True)
        inv = (1.0 / np.sqrt(ss + self.eps)).astype(np.float32)
        return bf16((h * inv) * g)

    def _rope_interleaved(self, x, pos):
        """x [n, heads, D] in llama.cpp's row order: rotate pairs (2i, 2i+1)."""
        ang = np.outer(pos, self.inv_freq)                      # [n, D/2]
        c = np.cos(ang).astype(np.float32)[:, None, :]
        s = np.sin(ang).astype(np.float32)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        y = np.empty_like(x)
        y[..., 0::2] = x0 * c - x1 * s
        y[..., 1::2] = x1 * c + x0 * s
        return y

    def forward(self, tokens):
        """Feeds tokens at the next positions; returns float32 logits [n, vocab]."""
        tokens = np.asarray(tokens)
        n, D, Hq, Hk = len(tokens), self.head_dim, self.q_heads, self.kv_heads
        pos = np.arange(self.pos, self.pos + n)
        h = self.emb[tokens].astype(np.float32)
        for l, W in enumerate(self.L):
            x = self._norm(h, W["an"])
            q = self._rope_interleaved((x @ W["wq"].T).reshape(n, Hq, D), pos)
            k = self._rope_interleaved((x @ W["wk"].T).reshape(n, Hk, D), pos)
            v = (x @ W["wv"].T).reshape(n, Hk, D)
            q, k, v = bf16(q), bf16(k), bf16(v)
            self.k_cache[l] = k if self.k_cache[l] is None else np.concatenate([self.k_cache[l], k])
            self.v_cache[l] = v if self.v_cache[l] is None else np.concatenate([self.v_cache[l], v])
            K = self.k_cache[l].astype(np.float64)
            V = self.v_cache[l].astype(np.float64)
            total = K.shape[0]
            o = np.empty((n, Hq, D), dtype=np.float64)
            g = Hq // Hk
            mask = np.arange(total)[None, :] <= pos[:, None]       # [n, total]
            for hq in range(Hq):
                z = (q[:, hq, :].astype(np.float64) @ K[:, hq // g, :].T) / np.sqrt(D)
                z = np.where(mask, z, -np.inf)
                z -= z.max(axis=1, keepdims=True)
                p = np.exp(z)
                p /= p.sum(axis=1, keepdims=True)
                o[:, hq, :] = p @ V[:, hq // g, :]
            o = bf16(o.astype(np.float32).reshape(n, Hq * D))
            h = h + o @ W["wo"].T
            x = self._norm(h, W["mn"])
            gt = x @ W["wg"].T
            up = x @ W["wu"].T
            act = bf16((gt / (1.0 + np.exp(-gt))) * up)
            h = h + act @ W["wd"].T
        self.pos += n
        return self._norm(h, self.out_norm) @ self.lm.T
