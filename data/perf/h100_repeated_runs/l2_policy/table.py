"""The L2-policy A/B of session 17 call 7 (TUNING.md step 42), from its result files:

    python3 data/perf/h100_repeated_runs/l2_policy/table.py

One line per point: the medians (us) of main's binary (TMA loads with an L2 evict-first policy)
and of the scratch binary with l2_evict_normal.patch (evict-normal), three sweeps each,
alternated in one call, and normal / first - 1 on the medians of the three."""
import glob
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", ".."))
from analysis.load import load  # noqa: E402

rows = {}
for f in sorted(glob.glob(os.path.join(HERE, "*_[0-9].h5"))):
    side = os.path.basename(f).split("_")[0]
    d = load(f).index
    d = d[(d["kind"] == "decode_attention") & (d["status"] == "ok")]
    for _, r in d.iterrows():
        rows.setdefault((r["kv_format"], int(r["batch"]), int(r["context"])), {}).setdefault(side, []).append(
            float(r["median_us"]))
print("| shape | evict-first (main), us | evict-normal, us | normal / first - 1 |")
print("|---|---|---|---|")
for (fmt, b, c), v in sorted(rows.items()):
    f, n = v.get("first", []), v.get("normal", [])
    d = f"{100 * (statistics.median(n) / statistics.median(f) - 1):+.1f} %" if f and n else "-"
    print(f"| {b} x {c} {fmt} | {' / '.join(f'{x:.2f}' for x in f)} | {' / '.join(f'{x:.2f}' for x in n)} | {d} |")
