#!/usr/bin/env bash
# floor_stage.sh: the floor under the fair run's cold decode timings, on the GPU machine, in
# under 60 s (STAGE_S, default 60; every step capped by what is left). Measures, through
# `kvlab sweep` with perf.ini's own [timing] rules (cold L2 flush before every call, eager and one
# call per CUDA-graph replay), perf.ini's K6_floor and K6_floor_primed sections (kind
# launch_floor: an empty kernel; 1-3 dependent cold 4-byte loads; each + one 16 KiB page; the
# L2- and TLB-primed controls) next to the K6 decode shape itself (K6_fixed at BF16 1 x 512,
# every version, eager and graph), so that the decode call's excess and the timing's own floor
# come from one run with one read ceiling R.
#
#   OUT=/some/dir experiments/peers/floor_stage.sh BIN
#
# Run from the repository root; BIN holds gpu_tests and kvlab (sm_90); python3 needs h5py,
# pandas, numpy. Output in $OUT/launch_floor/:
#   gpu_tests.log    gpu_tests LaunchFloor.* (every floor kernel validates; the cold 3-load chain
#                    is slower than its lines-primed twin: the flush evicts the chain)
#   floor_sweep.h5, floor_sweep.log   the sweep: 50 points (10 decode, 16 floor rows, 24 primed
#                    controls), the ceilings measured first as in every run
#   clocks.csv       nvidia-smi every 100 ms (SM / memory clocks, power)
#   summary.txt      the rows (median, quartiles, excess over the bandwidth floor) and K6's
#                    target lines of target_table.py on this file; printed last
set -u
B_ARG=${1:?usage: floor_stage.sh BIN (a folder with gpu_tests and kvlab)}
source "$(dirname "${BASH_SOURCE[0]}")/stage_common.sh"
stage_init floor launch_floor "$B_ARG"
clocks_start

step "gpu_tests LaunchFloor.*"
timeout -k 5 "$(cap 15 40)" "$BIN/gpu_tests" --gtest_filter='LaunchFloor.*' > "$D/gpu_tests.log" 2>&1 || rc=1

step "kvlab sweep perf.ini: K6_floor, K6_floor_primed, K6_fixed (BF16 1 x 512)"
rm -f "$D/floor_sweep.h5"
timeout -s TERM -k 5 "$(cap 40 8)" "$BIN/kvlab" sweep experiments/configs/perf.ini \
  --only K6_fixed,K6_floor,K6_floor_primed -a K6_fixed.kv_format=bf16 -a K6_fixed.context=512 \
  --out "$D/floor_sweep.h5" --progress plain > "$D/floor_sweep.log" 2>&1 || rc=1
clocks_stop

step "summary"
{
  echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  grep -E "^\[ceilings\]" "$D/floor_sweep.log"
  grep -E "^\[floor\]|^\[  (PASSED|FAILED|SKIPPED) " "$D/gpu_tests.log"
  timeout -k 5 20 $PY - "$D/floor_sweep.h5" <<'PYEOF'
import sys
from analysis.load import load
idx = load(sys.argv[1]).index
def name(r):
    if r["kind"] == "decode_attention":
        return f"decode 1x512 bf16 {r['version']}"
    c, t = int(r["chain"]), int(r["tail_kib"])
    n = "empty" if c == 0 and t == 0 else "_".join(x for x in (f"chain{c}" if c else "", f"page{t}k" if t else "") if x)
    return n + ("" if r["primed"] == "none" else f"_primed_{r['primed']}")
print(f"{'row':44s} {'graph':5s} {'median':>8s} {'q1':>8s} {'q3':>8s} {'reps':>5s} {'excess':>8s}  status")
for _, r in idx.iterrows():
    if r["status"] != "ok":
        print(f"{name(r):44s} {r['graph']:5s} {'':>8s} {'':>8s} {'':>8s} {'':>5s} {'':>8s}  {r['status']}: {r['reason']}")
        continue
    print(f"{name(r):44s} {r['graph']:5s} {r['median_us']:8.3f} {r['q1_us']:8.3f} {r['q3_us']:8.3f} "
          f"{int(r['reps']):5d} {r['excess_us']:8.3f}  ok{'' if r['cold_l2'] == 1 else ' (L2 warm by design)'}")
ok = idx[idx["status"] == "ok"].copy()
ok["row"] = [name(r) for _, r in ok.iterrows()]
print("\ndifferences of medians (us), per mode:")
for g in ("off", "on"):
    m = ok[ok["graph"] == g]
    t = {r["row"]: r["median_us"] for _, r in m.iterrows()}
    dec = m[m["kind"] == "decode_attention"]
    def d(a, b):
        return f"{t[a] - t[b]:+.3f}" if a in t and b in t else "-"
    print(f"  {'graph' if g == 'on' else 'eager'}: each cold load: chain1-empty {d('chain1', 'empty')}, "
          f"chain2-chain1 {d('chain2', 'chain1')}, chain3-chain2 {d('chain3', 'chain2')}; "
          f"chain3 primed elsewhere - lines {d('chain3_primed_elsewhere', 'chain3_primed_lines')} (3 loads DRAM vs "
          f"L2; > 0: the flush evicts), elsewhere - pages {d('chain3_primed_elsewhere', 'chain3_primed_pages')} (the "
          f"TLB part), cold - elsewhere {d('chain3', 'chain3_primed_elsewhere')} (after the flush vs after a small "
          f"kernel); "
          f"16 KiB page after the chain {d('chain3_page16k', 'chain3')}")
    if not dec.empty and "empty" in t:
        b = dec.loc[dec["excess_us"].idxmin()]
        print(f"    best decode 1x512 ({b['version']}): excess {b['excess_us']:.3f} = empty launch {t['empty']:.3f}"
              + (f" + chain3+16k over empty {t['chain3_page16k'] - t['empty']:.3f}" if "chain3_page16k" in t else "")
              + (f" + the rest {b['excess_us'] - t['chain3_page16k']:.3f}" if "chain3_page16k" in t else ""))
PYEOF
  timeout -k 5 20 $PY experiments/peers/target_table.py "$D/floor_sweep.h5" --targets-only | grep -E "^K6"
} > "$D/summary.txt" 2>&1 || rc=1
step "done, rc $rc"
cat "$D/summary.txt"
exit $rc
