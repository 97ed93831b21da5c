import torch, flashinfer, kvlab

# A paged BF16 cache in PyTorch: 8 sequences, 16-token pages in a shuffled order, NHD pools.
torch.manual_seed(0)
batch, heads_q, heads_kv, head_dim, page = 8, 32, 8, 128, 16
lens = torch.randint(1, 4096, (batch,), dtype=torch.int32, device="cuda")
pages = (lens + page - 1) // page
num_pages = int(pages.sum())
k_cache = torch.randn(num_pages, page, heads_kv, head_dim, device="cuda", dtype=torch.bfloat16)
v_cache = torch.randn_like(k_cache)
order = torch.randperm(num_pages, device="cuda", dtype=torch.int32)           # page ids, sequence after sequence
indptr = torch.cat([torch.zeros(1, dtype=torch.int32, device="cuda"), pages.cumsum(0).int()])
block_table = torch.zeros(batch, int(pages.max()), dtype=torch.int32, device="cuda")
for s in range(batch):
    block_table[s, :pages[s]] = order[indptr[s]:indptr[s + 1]]
q = torch.randn(batch, heads_q, head_dim, device="cuda", dtype=torch.bfloat16)

# kvlab: the block table as it is; the split-KV workspace is the caller's.
ws = torch.empty(kvlab.ops.decode_workspace_bytes(q, k_cache, v_cache, block_table, lens), dtype=torch.uint8,
                 device="cuda")
out_kvlab = kvlab.ops.decode_attention(q, k_cache, v_cache, block_table, lens, workspace=ws)

# FlashInfer: the same pages as CSR (indptr, indices, last page length).
fi = flashinfer.BatchDecodeWithPagedKVCacheWrapper(torch.empty(128 << 20, dtype=torch.uint8, device="cuda"), "NHD")
fi.plan(indptr, order, (lens - 1) % page + 1, heads_q, heads_kv, head_dim, page,
        q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
out_fi = fi.run(q, (k_cache, v_cache))

# Compare both with kvlab's CPU reference over the same bytes, under kvlab's decode tolerance.
bits = lambda t: t.view(torch.int16).cpu().numpy()  # numpy has no bfloat16: BF16 bits
ref = kvlab.formats.decode(kvlab.ref.decode_attention(bits(q), bits(k_cache), bits(v_cache), block_table.cpu().numpy(),
                                                      lens.cpu().numpy(), kv_format="bf16", q_dtype="bf16"), "bf16")
for name, out in (("kvlab", out_kvlab), ("flashinfer", out_fi)):
    got = out.float().cpu().numpy()
    ok, why = kvlab.ref.check_close(got, ref, "decode_attention", "bf16", "bf16")
    print(f"{name:10s} max |out - ref| = {abs(got - ref).max():.3g}, within kvlab's decode tolerance: {ok} {why}")
