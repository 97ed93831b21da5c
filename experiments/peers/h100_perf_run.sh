#!/usr/bin/env bash
# h100_perf_run.sh: the one GPU-machine run behind gpu/attention/TUNING.md's tables:
# validation of the decode versions, then kvlab's timing suite and the peers on the same
# shapes, everything written under OUT (default ./perf_out).
#
#   experiments/peers/h100_perf_run.sh BIN_DIR [MODE]
#     BIN_DIR  holds gpu_tests and kvlab_decode_check built with -DCMAKE_CUDA_ARCHITECTURES=90
#              (static Boost), and this folder's decode_peers.py
#     MODE     validate | targets | grid | all (default all = validate + targets (VERSIONS)
#              + grid (GRID_VERSIONS) + peers)
# Output: OUT/{tests.log,sanitize.log}, OUT/decode.csv (kvlab rows),
# OUT/decode.log, OUT/perf.h5 (kvlab + peer rows, the kvlab result schema), OUT/peers.log,
# OUT/sweep.h5 + sweep.log (SWEEP_ONLY); the closing summary table is printed last.
set -u
# Stage time limits (seconds) come from T_TESTS, T_MEM, T_RACE, T_BENCH, T_PEERS.
BIN=${1:?usage: h100_perf_run.sh BIN_DIR [MODE]}
MODE=${2:-all}
OUT=${OUT:-./perf_out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
rc=0
if [[ $MODE == validate || $MODE == all ]]; then
  timeout ${T_TESTS:-100} "$BIN/gpu_tests" --gtest_filter="${TESTS:-Decode*:Curated/*:Small/*:All/AppendExact*:AppendBadInput*:BenchKinds*:BenchHarness*}" > "$OUT/tests.log" 2>&1 || rc=1
  grep -E "^\[  PASSED|^\[  FAILED|tests ran" "$OUT/tests.log" | tail -25
  grep -B1 -A5 "Failure$" "$OUT/tests.log" | cut -c1-300 | head -${FAIL_LINES:-40}
  timeout ${T_MEM:-50} compute-sanitizer --tool memcheck --print-limit 5 "$BIN/gpu_tests" \
    --gtest_filter='Small/DecodeSmall.*nhd*:Small/DecodeSmall.*split_x*:DecodeV4.GroupsAboveEight*:All/AppendExact.*_nhd_*' > "$OUT/sanitize.log" 2>&1 || rc=1
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/sanitize.log" | tail -4
  timeout ${T_RACE:-40} compute-sanitizer --tool racecheck --print-limit 5 "$BIN/gpu_tests" \
    --gtest_filter='Small/DecodeSmall.*/bf16_nhd:Small/DecodeSmall.*/fp8_e4m3_hnd:Small/DecodeSmall.*/nvfp4_hnd:Small/DecodeSmall.*/mxfp4_split_x:All/AppendExact.*nvfp4_nhd*' >> "$OUT/sanitize.log" 2>&1 || rc=1
  grep -E "RACECHECK SUMMARY" "$OUT/sanitize.log" | tail -2
fi
if [[ $MODE == targets || $MODE == grid || $MODE == all ]]; then
  suite=$MODE
  [[ $MODE == all ]] && suite=targets
  timeout ${T_BENCH:-150} "$BIN/kvlab_decode_check" --time --suite "$suite" --versions "${VERSIONS:-3,4,5}" --csv "$OUT/decode.csv" --append \
    > "$OUT/decode.log" 2>&1 || rc=1
  if [[ $MODE == all ]]; then  # the grid: only the best versions (GRID_VERSIONS)
    timeout ${T_GRID:-120} "$BIN/kvlab_decode_check" --time --suite grid --versions "${GRID_VERSIONS:-4,5}" --csv "$OUT/grid.csv" \
      >> "$OUT/decode.log" 2>&1 || rc=1
    grep -v '^#\|^target,' "$OUT/grid.csv" >> "$OUT/decode.csv" && rm -f "$OUT/grid.csv"
  fi
  PYTHONUNBUFFERED=1 timeout ${T_PEERS:-60} python3 "$BIN/decode_peers.py" --kvlab-csv "$OUT/decode.csv" --out "$OUT/perf.h5" \
    > "$OUT/peers.log" 2>&1 || rc=1
  grep -v "^P\|^grid\|^tgt" "$OUT/decode.log" | head -5
  sed -n '/^summary/,/^device/p' "$OUT/decode.log"
  grep -E " ok|GB/s" "$OUT/peers.log" | grep peer | awk '{print "  peer:", $0}' | cut -c1-150
  tail -1 "$OUT/peers.log"
fi
# The same benchmark as a kvlab sweep (experiments/configs/perf.ini), for the studies in
# SWEEP_ONLY (e.g. P8,P9); needs BIN/kvlab and the repository root as working directory.
if [[ -n "${SWEEP_ONLY:-}" && -x "$BIN/kvlab" ]]; then
  timeout ${T_SWEEP:-60} "$BIN/kvlab" sweep "${SWEEP_CONFIG:-experiments/configs/perf.ini}" --only "$SWEEP_ONLY" --out "$OUT/sweep.h5" \
    > "$OUT/sweep.log" 2>&1 || rc=1
  tail -3 "$OUT/sweep.log"
fi
exit $rc
