#!/usr/bin/env bash
# timer_check_stage.sh: the cheap GPU check of kvlab's timing, before a full h100_perf_run.sh:
# the flush test, the ceilings (36 LSU read kernels + 18 bulk-copy reads, 7 copies) and the
# two-timer cross-check, twice, cuDNN next to R, with a clock log. About 70 s on an H100; never more than STAGE_S
# seconds (default 110: every step is capped by what is left, the second round is dropped when
# less than 40 s remain).
#
#   OUT=/some/dir experiments/peers/timer_check_stage.sh BIN
#
# Run from the repository root; BIN holds gpu_tests and kvlab (built for sm_90); python3 needs
# torch, cupy, h5py, pandas, numpy. Output in $OUT/timer_check/:
#   clocks.csv        nvidia-smi every 100 ms: SM / memory clock, power, temperatures, throttle
#   flush_test.log    gpu_tests L2Flush.* and BenchHarness.* (the flush test with its controls,
#                     events vs in-kernel time of the cross-check read,
#                     the ceilings, the bulk read, the stream-kind test)
#   timer_check.h5, crosscheck.h5 (+ _2: a second round)   kvlab sweep timer_check.ini, then
#                     decode_peers.py crosscheck --diagnose (1, 4, 16, 256 MiB reads; 4, 256 MiB
#                     copies; python on its own stream, on the legacy stream, with a fresh flush
#                     buffer)
#   ceiling_size.h5   the best read kernels on 1, 4 and 8 GiB
#   ceiling_vs_peers.h5, ceiling_vs_peers_peers.h5   cuDNN SDPA on the three contiguous BF16 shapes
#                     that beat R in the first H100 run, next to this run's R
#   crosscheck.log, ceiling_size.log, summary.txt
set -u
BIN=${1:?usage: timer_check_stage.sh BIN (a folder with gpu_tests and kvlab)}
BIN=$(cd "$BIN" && pwd)
OUT=${OUT:-./perf_out}
D="$OUT/timer_check"
mkdir -p "$D"
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
PEERS=experiments/peers/decode_peers.py
rc=0
STAGE_S=${STAGE_S:-110}
step() { echo "[timer_check $(( $(date +%s) - T0 )) s] $*" | tee -a "$D/stage.log"; }
left() { echo $(( STAGE_S - ($(date +%s) - T0) )); }
# cap WANT RESERVE: seconds for a step: at most WANT, leaving RESERVE for the steps after it.
cap() { local c=$(( $(left) - $2 )); (( c > $1 )) && c=$1; (( c < 5 )) && c=5; echo $c; }

SMI_Q=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,temperature.memory,clocks_event_reasons.active
nvidia-smi --query-gpu="$SMI_Q" --format=csv,noheader > /dev/null 2>&1 || SMI_Q=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu
nvidia-smi --query-gpu="$SMI_Q" --format=csv -lms 100 > "$D/clocks.csv" 2>&1 &
SMI=$!

step "flush test, ceilings, bulk read, stream kinds"
timeout -k 5 "$(cap 35 70)" "$BIN/gpu_tests" --gtest_filter='L2Flush.*:BenchHarness.*' > "$D/flush_test.log" 2>&1 || rc=1

crosscheck() {  # crosscheck ROUND_SUFFIX
  local round=$1
  step "cross-check$round"
  rm -f "$D/timer_check$round.h5"
  timeout -s TERM -k 5 "$(cap 20 35)" "$BIN/kvlab" sweep experiments/configs/timer_check.ini \
    --out "$D/timer_check$round.h5" --progress none >> "$D/crosscheck.log" 2>&1 || rc=1
  timeout -k 5 "$(cap 30 15)" $PY "$PEERS" crosscheck --diagnose --kvlab-h5 "$D/timer_check$round.h5" \
    --out "$D/crosscheck$round.h5" >> "$D/crosscheck.log" 2>&1 || rc=1
}
crosscheck ""

step "ceiling vs buffer size"
rm -f "$D/ceiling_size.h5"
timeout -s TERM -k 5 "$(cap 20 3)" "$BIN/kvlab" sweep experiments/configs/ceiling_size.ini --out "$D/ceiling_size.h5" \
  --progress none > "$D/ceiling_size.log" 2>&1 || rc=1
$PY - "$D/ceiling_size.h5" >> "$D/ceiling_size.log" 2>&1 <<'PYEOF' || rc=1
import sys, h5py
ix = h5py.File(sys.argv[1], "r")["index"]
s = lambda k, i: (ix[k][i].decode() if isinstance(ix[k][i], bytes) else ix[k][i]) if k in ix else ""
for i in range(len(ix["key"])):
    if s("status", i) != "ok":
        print(f"[size] {s('key', i)}: {s('status', i)} {s('reason', i)}")
        continue
    print(f"[size] {s('kernel', i):24s} {int(ix['mib'][i]):5d} MiB: median {ix['median_us'][i]:10.2f} us, "
          f"{ix['bytes_per_s'][i] / 1e12:.4f} TB/s (q1: {ix['mib'][i] * 1048576 / ix['q1_us'][i] / 1e6:.4f})")
PYEOF
step "cuDNN SDPA on the shapes that beat R"
rm -f "$D/ceiling_vs_peers.h5" "$D/ceiling_vs_peers_peers.h5"
timeout -s TERM -k 5 "$(cap 20 20)" "$BIN/kvlab" sweep experiments/configs/ceiling_vs_peers.ini \
  --out "$D/ceiling_vs_peers.h5" --progress none > "$D/ceiling_vs_peers.log" 2>&1 || rc=1
timeout -k 5 "$(cap 30 5)" $PY "$PEERS" peers --only sdpa --sdpa cudnn --kvlab-h5 "$D/ceiling_vs_peers.h5" \
  --out "$D/ceiling_vs_peers_peers.h5" --budget-s 15 >> "$D/ceiling_vs_peers.log" 2>&1 || rc=1
$PY - "$D/ceiling_vs_peers.h5" "$D/ceiling_vs_peers_peers.h5" >> "$D/ceiling_vs_peers.log" 2>&1 <<'PYEOF' || rc=1
import os, sys, h5py
for f in sys.argv[1:]:
    if not os.path.exists(f):
        print(f"[vs R] {f}: not written")
        continue
    h = h5py.File(f, "r")
    ix, R = h["index"], float(h["runs"]["read_ceiling_bytes_per_s"][-1]) if "read_ceiling_bytes_per_s" in h["runs"] else float(h.attrs.get("read_ceiling_bytes_per_s", 0))
    s = lambda k, i: (ix[k][i].decode() if isinstance(ix[k][i], bytes) else ix[k][i]) if k in ix else ""
    for i in range(len(ix["key"])):
        bps = ix["bytes_per_s"][i] if "bytes_per_s" in ix else float("nan")
        print(f"[vs R] {s('version', i):22s} {int(ix['batch'][i])}x{int(ix['context'][i])}: {ix['median_us'][i]:9.1f} us, "
              f"{bps / 1e12:.4f} TB/s vs R {R / 1e12:.4f} ({100 * bps / R:.1f} %) {s('status', i)} {s('reason', i)[:80]}")
PYEOF

if (( $(left) >= 35 )); then crosscheck _2; else step "second cross-check round dropped: $(left) s left"; fi

step "done, rc $rc"
kill "$SMI" 2>/dev/null

{
  echo "==== timer_check: $(( $(date +%s) - T0 )) s, rc $rc; files in $D"
  grep -E "^\[flush\]|^\[ceilings\]|^\[bulk\]|^\[streams\]|^\[stamps\]|^\[  (PASSED|FAILED) |FAILED  \]" "$D/flush_test.log" | cut -c1-170
  grep -E "^\[ceilings\]|^\[crosscheck\]" "$D/crosscheck.log" | cut -c1-260
  grep -E "^\[ceilings\]|^\[size\]" "$D/ceiling_size.log" | cut -c1-170
  grep -E "^\[ceilings\]|^\[vs R\]|^WARNING" "$D/ceiling_vs_peers.log" | cut -c1-200
  echo "clocks (SM MHz, mem MHz, W, C, mem C): min / max over the stage:"
  awk -F', ' 'NR>1 && $2+0>0 {sm=$2+0; if(!n||sm<smin)smin=sm; if(sm>smax)smax=sm; p=$4+0; if(p>pmax)pmax=p; t=$5+0; if(t>tmax)tmax=t; n++}
    END {printf "  SM %d-%d MHz, power max %.0f W, GPU temp max %d C, %d samples\n", smin, smax, pmax, tmax, n}' "$D/clocks.csv"
} | tee "$D/summary.txt"
exit $rc
