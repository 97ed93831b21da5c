#!/usr/bin/env bash
# scatter_stage.sh: what HBM gives scattered small pieces against long runs, on the GPU machine,
# in under 60 s (STAGE_S, default 60; every step capped by what is left). A paged decode with
# block_size 1 reads each token's K and V rows (256 B for d128 BF16) scattered over the pool in
# the page table's seeded order; at block 16 it reads 4 KB runs (HND). This stage measures,
# through `kvlab sweep` with perf.ini's own [timing] rules (cold L2 flush before every call),
# perf.ini's contiguous read-ceiling sections (the rows R is the best of) and its scattered-
# granule sections (ceilings_scatter, ceilings_scatter_bulk: granules of 256 B - 16 KiB read once
# each in one seeded random order, by 16-byte nc loads and by one bulk copy per granule), so that
# R_scatter(G) and R come from one run.
#
#   OUT=/some/dir experiments/peers/scatter_stage.sh BIN
#
# Run from the repository root; BIN holds gpu_tests and kvlab (sm_90); python3 needs h5py,
# pandas, numpy. Output in $OUT/scatter/:
#   gpu_tests.log       gpu_tests ScatterRead.* (every byte read exactly once, in the given
#                       order, at an awkward size, by both kernels: four checksums against the
#                       host's; a doubled granule, a read one vector off inside every granule
#                       and a read that ignores the order are caught)
#   memcheck.log        the checking test again under compute-sanitizer memcheck (last, ~20 s cap)
#   scatter_sweep.h5, scatter_sweep.log   the sweep: 54 contiguous read rows + 35 scattered rows,
#                       the ceilings measured first as in every run
#   clocks.csv          nvidia-smi every 100 ms (SM / memory clocks, power)
#   summary.txt         every row (GB/s at the median, % of the run's R), then R_scatter(G) per
#                       granule and the block-1 line target_table.py prints beside K7; printed last
set -u
B_ARG=${1:?usage: scatter_stage.sh BIN (a folder with gpu_tests and kvlab)}
source "$(dirname "${BASH_SOURCE[0]}")/stage_common.sh"
stage_init scatter scatter "$B_ARG"
clocks_start

step "gpu_tests ScatterRead.*"
timeout -k 5 "$(cap 15 45)" "$BIN/gpu_tests" --gtest_filter='ScatterRead.*' > "$D/gpu_tests.log" 2>&1 || rc=1

SECTIONS=ceilings_read,ceilings_bulk,ceilings_bulk_32k,ceilings_bulk_deep,ceilings_bulk_2_per_sm
SECTIONS=$SECTIONS,ceilings_bulk_ranges,ceilings_bulk_ranges_4,ceilings_bulk_ranges_2_per_sm
SECTIONS=$SECTIONS,ceilings_scatter,ceilings_scatter_bulk
step "kvlab sweep perf.ini: the contiguous read ceilings and the scattered granules"
rm -f "$D/scatter_sweep.h5"
timeout -s TERM -k 5 "$(cap 45 8)" "$BIN/kvlab" sweep experiments/configs/perf.ini --only "$SECTIONS" \
  --out "$D/scatter_sweep.h5" --progress plain > "$D/scatter_sweep.log" 2>&1 || rc=1
clocks_stop

# The checking kernels under compute-sanitizer memcheck (out-of-bounds reads of the short last
# granule, the index array, the shared rings), with what time is left.
step "compute-sanitizer memcheck: ScatterRead.EveryByteIsReadExactlyOnce"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout -k 5 "$(cap 20 3)" "$SAN" --tool memcheck --error-exitcode 9 "$BIN/gpu_tests" \
  --gtest_filter='ScatterRead.EveryByteIsReadExactlyOnce' > "$D/memcheck.log" 2>&1 || rc=1

step "summary"
{
  echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  grep -E "^\[ceilings\]" "$D/scatter_sweep.log"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]" "$D/gpu_tests.log"
  if ! grep -q "^\[  PASSED  \]" "$D/gpu_tests.log" || grep -q "^\[  FAILED  \]" "$D/gpu_tests.log"; then
    echo "ScatterRead checks did not all pass: the scattered rows below are NOT proven to read every byte once"
  fi
  MC=$(grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) " "$D/memcheck.log" | tr '\n' ' ')
  echo "memcheck: ${MC:-no summary line (timed out or crashed: see memcheck.log)}"
  timeout -k 5 20 $PY - "$D/scatter_sweep.h5" <<'PYEOF'
import sys
from analysis.load import load
f = load(sys.argv[1])
idx = f.index
R = f.read_ceiling
print(f"read ceiling R (best contiguous read, q1 edge): {R / 1e9:.1f} GB/s")
bw = idx[idx["kind"] == "bandwidth"]
bad = bw[bw["status"] != "ok"]
for _, r in bad.iterrows():
    print(f"NOT OK {r['key']}: {r['status']}: {r['reason']}")
ok = bw[bw["status"] == "ok"].copy()
scat = ok[ok["order"] == "scatter"] if "order" in ok.columns else ok.iloc[0:0]
cont = ok.drop(scat.index)
best_cont = cont["bytes_per_s"].max() if not cont.empty else float("nan")
print(f"best contiguous row (median): {best_cont / 1e9:.1f} GB/s ({len(cont)} rows)\n")
print(f"{'row':36s} {'median us':>10s} {'GB/s':>8s} {'% of R':>7s} {'rel_iqr':>8s} {'reps':>5s}")
for _, r in scat.sort_values(["granule", "bytes_per_s"], ascending=[True, False]).iterrows():
    print(f"{r['kernel']:36s} {r['median_us']:10.1f} {r['bytes_per_s'] / 1e9:8.1f} {r['pct_read_ceiling']:7.2f} "
          f"{r['rel_iqr']:8.4f} {int(r['reps']):5d}")
print("\nR_scatter(G): the best scattered row per granule (GB/s at the median; bytes include the "
      "order's 4-byte index words)")
per = {int(g): m.loc[m["bytes_per_s"].idxmax()] for g, m in scat.groupby("granule")}
r4k = per[4096]["bytes_per_s"] if 4096 in per else float("nan")
print(f"{'granule':>8s} {'GB/s':>8s} {'% of R':>7s} {'vs 4 KB':>8s} {'vs best contiguous row':>23s}  kernel")
for g, r in sorted(per.items()):
    print(f"{g:8d} {r['bytes_per_s'] / 1e9:8.1f} {r['pct_read_ceiling']:7.2f} "
          f"{100 * (r['bytes_per_s'] / r4k - 1):+7.1f} % {100 * (r['bytes_per_s'] / best_cont - 1):+21.1f} %  "
          f"{r['kernel']}")
if 256 in per and 4096 in per:
    print(f"\nK7 block 1 (d128 BF16): scattered 256 B reads: {100 * (per[256]['bytes_per_s'] / r4k - 1):+.1f} % "
          "vs 4 KB runs")
PYEOF
  echo "stage rc=$rc, $(( $(date +%s) - T0 )) s"
} 2>&1 | tee "$D/summary.txt"
exit $rc
