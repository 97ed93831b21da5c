"""v11's cluster merge against v10's merge kernel at K4 / K5's 16 x 8k (session 18 call 3, TUNING.md
step 44), from its three result files:

    python3 data/perf/h100_read_bound/k4k5_cluster/table.py

One line per (format, layout, forced splits): v10's and v11's medians (us) in the three sweeps of
the call, and v11 / v10 - 1 on the medians of the three."""
import glob
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", ".."))
from analysis.load import load  # noqa: E402

NAMES = {"v10_mma_decode_tma_swizzle": "v10", "v11_mma_decode_cluster_merge": "v11"}
rows = {}
for f in sorted(glob.glob(os.path.join(HERE, "k4k5_cluster_[0-9].h5"))):
    d = load(f).index
    d = d[(d["kind"] == "decode_attention") & (d["status"] == "ok") & d["version"].isin(list(NAMES))]
    for _, r in d.iterrows():
        rows.setdefault((r["kv_format"], r["layout"], int(r["num_splits"])), {}).setdefault(
            NAMES[r["version"]], []).append(float(r["median_us"]))
print("| 16 x 8k, format, layout, splits | v10 (merge kernel), us | v11 (cluster merge), us | v11 / v10 - 1 |")
print("|---|---|---|---|")
for (fmt, lay, s), v in sorted(rows.items()):
    a, b = v.get("v10", []), v.get("v11", [])
    d = f"{100 * (statistics.median(b) / statistics.median(a) - 1):+.1f} %" if a and b else "-"
    print(f"| {fmt} {lay} @{s} | {' / '.join(f'{x:.2f}' for x in a)} | {' / '.join(f'{x:.2f}' for x in b)} | {d} |")
