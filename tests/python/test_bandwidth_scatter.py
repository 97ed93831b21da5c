"""The scattered-granule reads of the bandwidth kind (order = scatter) through `kvlab sweep` on a
machine without a GPU: perf.ini's scatter sections expand to the documented rows (granules 256 B
to 16 KiB over the same 4 GiB as the contiguous ceilings), and a bad granule is refused with exit
code 2 before anything is written, an existing result file left byte for byte as it was. The
kernels run in gpu_tests ScatterRead.* and experiments/peers/scatter_stage.sh."""
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PERF = os.path.join(ROOT, "experiments", "configs", "perf.ini")


def axes(line):
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


def test_perf_scatter_sections_expand_to_the_granule_rows(run):
    r = run("sweep", PERF, "--only", "ceilings_scatter,ceilings_scatter_bulk", "--dry-run")
    assert r.returncode == 0, r.stderr
    pts = [axes(ln) for ln in r.stdout.splitlines() if " bandwidth " in ln]
    assert len(pts) == 35, r.stdout
    assert all(p["order"] == "scatter" and p["op"] == "read" and p["mib"] == "4096" for p in pts)
    granules = {"256", "512", "1024", "4096", "16384"}
    lsu = [p for p in pts if p["load"] == "nc"]
    # nc loads, depth 4 and 8, 4 blocks per SM and as many as fit, at every granule.
    assert len(lsu) == 20 and {p["granule"] for p in lsu} == granules
    assert {(p["depth"], p["blocks_per_sm"]) for p in lsu} == {("4", "4"), ("4", "0"), ("8", "4"), ("8", "0")}
    bulk = [p for p in pts if p["load"] == "bulk"]
    assert len(bulk) == 15 and {p["granule"] for p in bulk} == granules
    # 64 or 128 KiB of copies in flight per SM, each ring within the 192 KiB of an SM.
    inflight = {int(p["blocks_per_sm"]) * int(p["depth"]) * int(p["granule"]) for p in bulk}
    assert inflight == {65536, 131072}
    # 256 B granules (one d128 BF16 row, a page of block_size 1) get both in-flight sizes.
    assert {p["blocks_per_sm"] for p in bulk if p["granule"] == "256"} == {"16", "32"}


def test_the_scatter_sections_read_what_the_contiguous_ceilings_read(run):
    r = run("sweep", PERF, "--only", "ceilings_read,ceilings_scatter", "--dry-run")
    assert r.returncode == 0, r.stderr
    mib = {axes(ln)["mib"] for ln in r.stdout.splitlines() if " bandwidth " in ln}
    assert mib == {"4096"}


@pytest.mark.parametrize("body,message", [
    ("order = scatter\ngranule = 0", "order scatter needs granule a positive multiple of 16 bytes, got 0"),
    ("order = scatter", "order scatter needs granule a positive multiple of 16 bytes, got 0"),
    ("order = scatter\ngranule = 100", "order scatter needs granule a positive multiple of 16 bytes, got 100"),
    ("order = scatter\ngranule = -16", "granule = '-16': out of range"),
    ("order = scatter\ngranule = 256, 24", "got 24"),
    ("order = scatter\nmib = 1\ngranule = 2097152", "granule 2097152 bytes exceeds the working set of 1 MiB"),
    ("order = scatter\nmib = 65536\ngranule = 256", "fewer than 2^32 16-byte vectors"),
    ("order = ranges\nload = bulk\nchunk_kib = 16\ngranule = 256", "granule is for order scatter only"),
    ("granule = 4096", "granule is for order scatter only"),
    ("order = scatter\ngranule = 4k", "granule"),
])
def test_bad_granules_exit_2_and_nothing_written_is_lost(run, small_results, small_config, tmp_path, body, message):
    fresh = tmp_path / "bad.ini"
    fresh.write_text(f"name = scatter\n[s]\nkind = bandwidth\n{body}\n")
    out = tmp_path / "fresh.h5"
    r = run("sweep", fresh, "--out", out)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not out.exists()
    more = tmp_path / "more.ini"
    more.write_text(small_config.read_text() + f"[s]\nkind = bandwidth\n{body}\n")
    before = open(small_results, "rb").read()
    r = run("sweep", more, "--out", small_results, "--resume")
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert open(small_results, "rb").read() == before


def test_the_read_bound_sections_read_every_k1_points_bytes(run):
    """target_table.py's read bound sets each BF16 K1 point (GQA 4, page 16, uniform lengths)
    against a cold read of its K/V bytes: perf.ini must read each such working set both
    contiguously and as 4 KiB granules (an HND page of 16 tokens), or a point goes without its
    bound."""
    r = run("sweep", PERF, "--dry-run")
    assert r.returncode == 0, r.stderr
    pts = [axes(ln) for ln in r.stdout.splitlines()]
    k1 = {int(p["batch"]) * int(p["context"]) * int(p["num_kv_heads"]) * int(p["head_dim"]) * 4 >> 20
          for p in pts if p.get("kv_format") == "bf16" and p.get("gqa_group") == "4" and p.get("block_size") == "16"
          and p.get("lengths") == "uniform" and "batch" in p}
    assert {2, 32, 2048, 8192} <= k1, k1  # 1 x 512, 16 x 512, 64 x 8k, 64 x 32k among them
    reads = [p for p in pts if p.get("op") == "read" and p.get("mib") and p.get("mib") != "4096"]
    contiguous = {int(p["mib"]) for p in reads if p["order"] != "scatter"}
    paged = {int(p["mib"]) for p in reads if p["order"] == "scatter" and p["granule"] == "4096"}
    assert k1 <= contiguous and k1 <= paged, (sorted(k1 - contiguous), sorted(k1 - paged))
    # No row of another granule or size sneaks into the bound's sections.
    assert all(p["granule"] in ("0", "4096") for p in reads)
