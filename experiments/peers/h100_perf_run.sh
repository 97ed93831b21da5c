#!/usr/bin/env bash
# h100_perf_run.sh: the one reproduction command for kvlab's performance numbers on an H100
# (gpu/attention/TUNING.md, gpu/step/NOTES.md, experiments/calibrate/FIDELITY.md, data/perf/).
#
#   OUT=/some/dir WHEELS=/path/to/wheels experiments/peers/h100_perf_run.sh BIN
#
# Run from the repository root. BIN holds the binaries built with -DCMAKE_CUDA_ARCHITECTURES=90:
# gpu_tests and kvlab. WHEELS (optional) holds flashinfer_python-0.5.3 and its dependencies
# (apache_tvm_ffi, einops, nvidia_cudnn_frontend, nvidia_ml_py); without it the FlashInfer
# rows are recorded as skipped (and so are the cuDNN paged rows: cudnn-frontend comes from the same
# wheels). python3 must have torch, cupy, h5py, pandas, numpy. PEERS_ONLY (optional): the peer
# groups that run, as decode_peers.py --only names them (default sdpa,flashinfer,cudnn_paged;
# PEERS_ONLY=sdpa,flashinfer STAGE_S=430 is the stage as it was before cuDNN's paged SDPA joined).
# Steps (each bounded; the whole stage by STAGE_S seconds, default 520), all output in
# $OUT/fair_timing/:
#   0. after step 2, in the background, niced: FlashInfer wheels installed into a scratch folder
#      and its four JIT modules compiled (CPU only: no GPU context) prewarm.log     ~60-80 s CPU
#   1. the flush-validity test and the harness tests (gpu_tests L2Flush.*, BenchHarness.*)
#                                                                   flush_test.log   ~20 s
#   2. the two-timer cross-check: kvlab sweep timer_check.ini, then decode_peers.py crosscheck
#      --diagnose (1, 4, 16, 256 MiB reads, 4 and 256 MiB copies), with --in-process on when a
#      kvlab wheel is given (KVLAB_WHEEL, or BIN/kvlab-*-abi3-*.whl): gpu/bench's C++ timer also
#      times each operation inside the Python timer's process, and decides the verdict there
#                                                timer_check.h5, crosscheck.h5, crosscheck.log ~40 s
#   3. kvlab sweep experiments/configs/perf.ini (1049 points)    perf_sweep.h5, perf_sweep.log ~160 s
#   4. the peers on perf_sweep.h5's shapes, in two processes, so that a refusal, hang or device
#      fault of one cannot cost the other's rows:
#      4a. cuDNN / FlashAttention SDPA (contiguous KV), FlashInfer tensor-core and CUDA-core (paged)
#                                                                perf_peers.h5, peers.log ~100 s
#      4b. cuDNN's paged SDPA on the same pools and page table as FlashInfer
#                                   perf_peers_cudnn_paged.h5, peers_cudnn_paged.log ~40-180 s
#      (the run of main 2d52096 on an H100, 945 points: steps 3 and 4a took 98 s and 99 s; the
#      whole stage 413 s, of which the decode-step sweep 188 s. 4b was estimated before its first
#      run: one graph build per BF16 paged shape, ~55 shapes, 0.5-2 s each plus <= 1.2 s of
#      timing; STAGE_S grew from 430 to 520 s for it)
#   4r. REPEATS=N (default 1): steps 3 and 4a again, N - 1 times, with the same binaries and in the
#      same order, each into repeat_K/ (K = 2..N; perf_sweep.h5, perf_peers.h5, their logs, table.md):
#      the run-to-run spread of every target from one machine      ~200 s per repeat
#   5. kvlab sweep experiments/configs/decode_step.ini              step_sweep.h5, step_sweep.log
#      (the rest of the budget, ~120 s wanted; a cut sweep resumes with
#       `kvlab sweep experiments/configs/decode_step.ini --resume --out step_sweep.h5`;
#       STEP_SWEEP=0 leaves it out, for a call that has the time for the repeats only)
#   6. experiments/peers/target_table.py perf_sweep.h5 perf_peers.h5 perf_peers_cudnn_paged.h5
#                                                                        table.md, table.txt
#      with repeats, experiments/peers/target_runs.py over this run and its repeats
#                                                                        runs.md, runs.txt
# The summary (flush test, cross-check, ceilings, table of targets) is printed last.
set -u
BIN=${1:?usage: h100_perf_run.sh BIN (a folder with gpu_tests and kvlab)}
BIN=$(cd "$BIN" && pwd)
OUT=${OUT:-./perf_out}
D="$OUT/fair_timing"
mkdir -p "$D"
STAGE_S=${STAGE_S:-520}
REPEATS=${REPEATS:-1}
STEP_SWEEP=${STEP_SWEEP:-1}
[[ $REPEATS =~ ^[1-9][0-9]*$ ]] || { echo "h100_perf_run.sh: REPEATS=$REPEATS is not a count >= 1" >&2; exit 2; }
[[ $STEP_SWEEP == 0 || $STEP_SWEEP == 1 ]] || { echo "h100_perf_run.sh: STEP_SWEEP=$STEP_SWEEP is not 0 or 1" >&2; exit 2; }
T0=$(date +%s)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
export FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a}  # prewarm and peers: the same flags
export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-/tmp/kvlab_flashinfer}
PY=${PYTHON:-python3}
PEERS=experiments/peers/decode_peers.py
rc=0
elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( STAGE_S - $(elapsed) )); }
# cap WANT RESERVE: seconds for a step: at most WANT, leaving RESERVE for the steps after it.
cap() { local c=$(( $(left) - $2 )); (( c > $1 )) && c=$1; (( c < 5 )) && c=5; echo $c; }
step() { echo "[stage $(elapsed) s] $*" | tee -a "$D/stage.log"; }
# sweep_limit RESERVE: the perf sweep's limit (at most SWEEP_MAX_S, leaving RESERVE), and a warning in
# stage.log (repeated in the summary) when STAGE_S leaves it less: a sweep cut by its limit is
# partial, and adopt_perf_run.sh refuses a partial file.
# The whole sweep took 111-131 s on an H100 before perf.ini's read_bound sections (60 reads of 2 MiB
# to 8 GiB) were added.
SWEEP_MAX_S=200
sweep_limit() {
  local c
  c=$(cap $SWEEP_MAX_S "$1")
  (( c < SWEEP_MAX_S )) && echo "WARNING: STAGE_S=$STAGE_S leaves the perf sweep ${c} s of the $SWEEP_MAX_S s it" \
    "may need; a sweep cut short is partial and cannot be adopted" >> "$D/stage.log"
  echo "$c"
}

# The card by name and UUID (target_runs.py shows which card each run had).
nvidia-smi --query-gpu=name,driver_version,uuid,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader \
  | tee "$D/device.txt"
# Clocks, power and temperatures every 200 ms for the whole stage (a timing that moved with the
# clock shows here).
SMI_Q=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,temperature.memory,clocks_event_reasons.active
nvidia-smi --query-gpu="$SMI_Q" --format=csv,noheader > /dev/null 2>&1 || SMI_Q=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu
nvidia-smi --query-gpu="$SMI_Q" --format=csv -lms 200 > "$D/clocks.csv" 2>&1 &
SMI=$!

# 1. The flush-validity test (and the harness's own tests).
step "1 flush-validity test"
timeout -k 10 "$(cap 60 300)" "$BIN/gpu_tests" --gtest_filter='L2Flush.*:BenchHarness.*' \
  > "$D/flush_test.log" 2>&1 || rc=1

# 2. The two-timer cross-check.
step "2 two-timer cross-check"
rm -f "$D/timer_check.h5"
timeout -s TERM -k 20 "$(cap 30 280)" "$BIN/kvlab" sweep experiments/configs/timer_check.ini \
  --out "$D/timer_check.h5" --progress plain > "$D/crosscheck.log" 2>&1 || rc=1
# The C++ timer in the Python timer's process: the kvlab wheel (cp312-abi3, `pip wheel . -w DIR`
# with Python 3.12) from KVLAB_WHEEL, else BIN/kvlab-*.whl, installed into a scratch folder.
# Without one the cross-check compares the two processes only (and says so in its log).
INPROC=auto
KVLAB_WHEEL=${KVLAB_WHEEL:-$(ls "$BIN"/kvlab-*-abi3-*.whl 2>/dev/null | head -1)}
if [[ -n "$KVLAB_WHEEL" ]]; then
  KVLAB_SITE=/tmp/kvlab_pkg_site
  rm -rf "$KVLAB_SITE"
  if $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$KVLAB_SITE" "$KVLAB_WHEEL" \
       >> "$D/crosscheck.log" 2>&1; then
    INPROC=on
  else
    echo "kvlab wheel $KVLAB_WHEEL did not install: no in-process C++ timing" | tee -a "$D/crosscheck.log"
  fi
fi
( [[ $INPROC == on ]] && export PYTHONPATH="$KVLAB_SITE${PYTHONPATH:+:$PYTHONPATH}"
  timeout -k 10 "$(cap 60 260)" $PY "$PEERS" crosscheck --diagnose --in-process "$INPROC" \
    --kvlab-h5 "$D/timer_check.h5" --out "$D/crosscheck.h5" ) >> "$D/crosscheck.log" 2>&1 || rc=1

# 0. FlashInfer: wheels and JIT modules, in the background (CPU only, niced), started only after
#    the flush test and the cross-check, so that nothing else runs on the machine while they time.
SITE=/tmp/kvlab_peer_site
if [[ -n "${WHEELS:-}" && -d "${WHEELS}" ]]; then
  (
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
      "$WHEELS"/flashinfer_python-*.whl "$WHEELS"/apache_tvm_ffi-*.whl "$WHEELS"/einops-*.whl \
      "$WHEELS"/nvidia_cudnn_frontend-*.whl "$WHEELS"/nvidia_ml_py-*.whl && echo "[prewarm] wheels installed" &&
      PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" MAX_JOBS=3 nice -n 10 $PY "$PEERS" prewarm
  ) > "$D/prewarm.log" 2>&1 &
  PREWARM=$!
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
else
  echo "WHEELS not set: FlashInfer rows will be recorded as skipped" | tee "$D/prewarm.log"
  PREWARM=
fi

# 3. kvlab's decode versions on the targets' shapes and the grid.
step "3 kvlab sweep perf.ini"
rm -f "$D/perf_sweep.h5"
timeout -s TERM -k 30 "$(sweep_limit 200)" "$BIN/kvlab" sweep experiments/configs/perf.ini --out "$D/perf_sweep.h5" \
  --progress plain > "$D/perf_sweep.log" 2>&1 || rc=1

# 4. The peers on the same shapes (after the JIT prewarm, which has had steps 1-3 to finish).
step "4 peers"
if [[ -n "$PREWARM" ]]; then
  for _ in $(seq 1 "$(cap 60 180)"); do kill -0 "$PREWARM" 2>/dev/null || break; sleep 1; done
  kill -0 "$PREWARM" 2>/dev/null && echo "[prewarm] still compiling: the peers wait on its locks" >> "$D/prewarm.log"
fi
PEERS_ONLY=${PEERS_ONLY:-sdpa,flashinfer,cudnn_paged}
MAIN_PEERS=$(tr ',' '\n' <<< "$PEERS_ONLY" | grep -vx cudnn_paged | paste -sd, -)
rm -f "$D/perf_peers.h5" "$D/perf_peers_cudnn_paged.h5"
if [[ -n $MAIN_PEERS ]]; then
  PEER_CAP=$(cap 150 160)
  timeout -k 15 $(( PEER_CAP + 20 )) $PY "$PEERS" peers --kvlab-h5 "$D/perf_sweep.h5" --out "$D/perf_peers.h5" \
    --only "$MAIN_PEERS" --budget-s $(( PEER_CAP - 15 )) > "$D/peers.log" 2>&1 || rc=1
fi
if [[ ,$PEERS_ONLY, == *,cudnn_paged,* ]]; then
  step "4b cuDNN paged"
  PEER_CAP=$(cap 150 60)
  timeout -k 15 $(( PEER_CAP + 20 )) $PY "$PEERS" peers --kvlab-h5 "$D/perf_sweep.h5" \
    --out "$D/perf_peers_cudnn_paged.h5" --only cudnn_paged --budget-s $(( PEER_CAP - 15 )) \
    > "$D/peers_cudnn_paged.log" 2>&1 || rc=1
fi

# 4r. The repeats: steps 3 and 4a again, as they ran above.
RUN_DIRS=("$D")
for (( k = 2; k <= REPEATS; ++k )); do
  RD="$D/repeat_$k"
  mkdir -p "$RD"
  RUN_DIRS+=("$RD")
  cp "$D/device.txt" "$RD/"
  rm -f "$RD/perf_sweep.h5" "$RD/perf_peers.h5"
  step "4r run $k of $REPEATS: kvlab sweep perf.ini"
  timeout -s TERM -k 30 "$(sweep_limit 70)" "$BIN/kvlab" sweep experiments/configs/perf.ini --out "$RD/perf_sweep.h5" \
    --progress plain > "$RD/perf_sweep.log" 2>&1 || rc=1
  if [[ -n $MAIN_PEERS ]]; then
    step "4r run $k of $REPEATS: peers"
    PEER_CAP=$(cap 150 20)
    timeout -k 15 $(( PEER_CAP + 20 )) $PY "$PEERS" peers --kvlab-h5 "$RD/perf_sweep.h5" --out "$RD/perf_peers.h5" \
      --only "$MAIN_PEERS" --budget-s $(( PEER_CAP - 15 )) > "$RD/peers.log" 2>&1 || rc=1
  fi
done

# 5. The full decode step (resumable: a cut run continues with --resume).
if [[ $STEP_SWEEP == 1 ]]; then
  step "5 kvlab sweep decode_step.ini"
  rm -f "$D/step_sweep.h5"
  timeout -s TERM -k 20 "$(cap 200 25)" "$BIN/kvlab" sweep experiments/configs/decode_step.ini \
    --out "$D/step_sweep.h5" --progress plain > "$D/step_sweep.log" 2>&1 || rc=1
else
  step "5 decode_step.ini left out (STEP_SWEEP=0)"
fi
[[ -n "$PREWARM" ]] && kill "$PREWARM" 2>/dev/null

# 6. The table.
step "6 table"
TABLE_IN=("$D/perf_sweep.h5")
[[ -f "$D/perf_peers.h5" ]] && TABLE_IN+=("$D/perf_peers.h5")
[[ -f "$D/perf_peers_cudnn_paged.h5" ]] && TABLE_IN+=("$D/perf_peers_cudnn_paged.h5")
$PY experiments/peers/target_table.py "${TABLE_IN[@]}" --markdown > "$D/table.md" 2>&1 || rc=1
$PY experiments/peers/target_table.py "${TABLE_IN[@]}" > "$D/table.txt" 2>&1 || rc=1
if (( REPEATS > 1 )); then
  for RD in "${RUN_DIRS[@]:1}"; do
    RIN=("$RD/perf_sweep.h5")
    [[ -f "$RD/perf_peers.h5" ]] && RIN+=("$RD/perf_peers.h5")
    $PY experiments/peers/target_table.py "${RIN[@]}" --markdown > "$RD/table.md" 2>&1 || rc=1
  done
  $PY experiments/peers/target_runs.py "${RUN_DIRS[@]}" --markdown > "$D/runs.md" 2>&1 || rc=1
  $PY experiments/peers/target_runs.py "${RUN_DIRS[@]}" > "$D/runs.txt" 2>&1 || rc=1
fi
step "done, rc $rc"
kill "$SMI" 2>/dev/null

# Summary (last).
{
  echo "==== fair_timing: $(elapsed) s, rc $rc; files in $D"
  grep -h "^WARNING" "$D/stage.log"
  grep -E "^\[flush\]|^\[ceilings\]|^\[stamps\]|^\[streams\]|^\[bulk\]|^\[  (PASSED|FAILED) |FAILED  \]" "$D/flush_test.log" | cut -c1-160
  grep -E "^\[crosscheck\]" "$D/crosscheck.log" | cut -c1-330
  grep -E "\[ceilings\]|^done:|FAILED|interrupted" "$D/perf_sweep.log" | cut -c1-200 | head -12
  grep -E "^\[prewarm\]" "$D/prewarm.log" | cut -c1-160
  grep -hE "^\[peers\]|^WARNING" "$D/peers.log" "$D/peers_cudnn_paged.log" 2>/dev/null | cut -c1-200 | head -16
  echo "cudnn_paged: $(grep -cE 'peer:cudnn_paged +[0-9.]+ us' "$D/peers_cudnn_paged.log" 2>/dev/null) rows timed; first refusals:"
  grep -E "peer:cudnn_paged +(skipped|failed)" "$D/peers_cudnn_paged.log" 2>/dev/null | grep -v "BF16 only" | cut -c1-240 | head -3
  grep -E "^done:|interrupted" "$D/step_sweep.log" | cut -c1-200
  sed -n '/^!!!/p;/^targets:/,$p' "$D/table.txt"
  if (( REPEATS > 1 )); then
    for RD in "${RUN_DIRS[@]:1}"; do
      echo "== $(basename "$RD"):"
      grep -E "^done:|FAILED|interrupted" "$RD/perf_sweep.log" | cut -c1-200 | head -4
      grep -hE "^\[peers\]|^WARNING" "$RD/peers.log" 2>/dev/null | cut -c1-200 | head -6
    done
    sed -n '/^targets over the runs/,/^$/p' "$D/runs.txt"
  fi
} | tee "$D/summary.txt"
exit $rc
