#!/usr/bin/env bash
# h100_stage.sh: the decode-kernels GPU stage, one H100, about 2 minutes (each step has its
# own time limit, their sum is 210 s; the ncu steps run only while the stage is on time).
# Run from the repository root:
#
#   OUT=/some/dir gpu/attention/h100_stage.sh BIN_DIR
#
# BIN_DIR holds gpu_tests and kvlab (built with -DCMAKE_CUDA_ARCHITECTURES=90, static Boost).
# Needs compute-sanitizer, ncu and python3 with h5py (all on the H100 machine). Assumes no
# other stage ran before it. New since the previous run: v7_mma_decode_l2_prefetch, auto as
# the default of the decode_attention kind and the decode-step executor, the split measured
# per shape. Writes $OUT/kernels/:
#   device.txt              nvidia-smi line
#   smoke.log               the small decode cases over every version (v7 included), first
#                           and in their own process: a fault of v7 cannot take the rest
#   tests.log               every decode suite (all versions), the registry, auto, and the
#                           decode-step executor (attention = auto) against the reference
#   memcheck.log racecheck.log  compute-sanitizer on small cases (every version)
#   splits.h5               experiments/configs/decode_splits.ini, v4/v5 studies: forced
#                           splits on the fair table's grid (sweep_splits.log)
#   v7.h5                   the same file's v7 studies and auto (sweep_v7.log)
#   perf_kernels.h5         experiments/configs/perf_kernels.ini with v4, v5, v7, auto: the
#                           target shapes (FP8, NVFP4, K6 graph, K7) in one run (sweep_targets.log)
#   ncu_*.txt               ncu (SpeedOfLight, Occupancy, WarpStateStats, memory) of v7 and
#                           v4 at 64 x 8k BF16
#   decode_auto_table.inc   the auto table regenerated from these files (best of all)
#   split_table.txt         per shape: plan vs best forced split per version, auto
#   table.txt               per target shape: v4 / v5 / v7 / auto (stage_table.py)
#   summary.txt             one line per step: name, exit code, seconds
set -u
BIN=${1:?usage: gpu/attention/h100_stage.sh BIN_DIR}
OUT=${OUT:-./stage_out}
D="$OUT/kernels"
mkdir -p "$D"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
START=$(date +%s)
SUMMARY="$D/summary.txt"
: > "$SUMMARY"

# step NAME SECONDS CMD...: stdout+stderr to $D/NAME.log, a summary line; returns the rc.
step() {
  local name=$1 limit=$2
  shift 2
  local t0
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@" > "$D/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $(($(date +%s) - t0))s (stage at $(($(date +%s) - START))s)" >> "$SUMMARY"
  return $rc
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader \
  > "$D/device.txt" 2>&1

# 1. Smoke (own process), then the decode suites, then the sanitizers on small cases.
step smoke 20 "$BIN/gpu_tests" --gtest_filter='Small/*:DecodeRegistry.*'
step tests 40 "$BIN/gpu_tests" \
  --gtest_filter='Curated/*:DecodeEdge.*:DecodeBadInput.*:DecodeV4.*:DecodeV6.AutoPicksASupportedVersion:StepEngine.EveryVariantMatchesTheReference:StepEngine.SyntheticContextAndTimingPath'
step memcheck 15 compute-sanitizer --tool memcheck --print-limit 10 --error-exitcode 1 "$BIN/gpu_tests" \
  --gtest_filter='Small/DecodeSmall.*/bf16_nhd:Small/DecodeSmall.*/fp8_e4m3_hnd'
step racecheck 20 compute-sanitizer --tool racecheck --print-limit 10 --error-exitcode 1 "$BIN/gpu_tests" \
  --gtest_filter='Small/DecodeSmall.*/bf16_hnd:Small/DecodeSmall.*/nvfp4_nhd'

# 2. Timing: the v4/v5 split sweep first (its rows survive a v7 fault), then v7 and auto,
# then the target shapes.
CFG=experiments/configs/decode_splits.ini
step sweep_splits 45 "$BIN/kvlab" sweep "$CFG" --only bf16_grid,bf16_mid,fp8 \
  --out "$D/splits.h5" --progress plain
step sweep_v7 20 "$BIN/kvlab" sweep "$CFG" --only v7_grid,v7_fp8,auto --out "$D/v7.h5" --progress plain
step sweep_targets 30 "$BIN/kvlab" sweep experiments/configs/perf_kernels.ini \
  --axis version=v4_mma_decode,v5_mma_decode_2stage,v7_mma_decode_l2_prefetch,auto \
  --out "$D/perf_kernels.h5" --progress plain

# 3. ncu: v7 and v4 on 64 x 8k BF16, one launch of the decode kernel each.
NCU_SECTIONS=(--section SpeedOfLight --section Occupancy --section WarpStateStats
  --section MemoryWorkloadAnalysis --section LaunchStats)
ncu_point() {  # ncu_point NAME VERSION BATCH CONTEXT
  step "ncu_$1" 10 ncu --clock-control none --target-processes all --kernel-name "regex:v4_decode_kernel" \
    --launch-count 1 "${NCU_SECTIONS[@]}" --page details \
    "$BIN/kvlab" validate experiments/configs/perf_kernels.ini --only K2 --axis version="$2" \
    --axis batch="$3" --axis context="$4" --progress none
  mv -f "$D/ncu_$1.log" "$D/ncu_$1.txt"
}
(($(date +%s) - START < 150)) && ncu_point v7_64x8k_bf16 v7_mma_decode_l2_prefetch 64 8192
(($(date +%s) - START < 165)) && ncu_point v4_64x8k_bf16 v4_mma_decode 64 8192

# 4. The auto table from this run (the fastest (version, split) over all files), the tables.
FILES=()
for f in "$D/perf_kernels.h5" "$D/splits.h5" "$D/v7.h5"; do [[ -s $f ]] && FILES+=("$f"); done
if [[ ${#FILES[@]} -gt 0 ]]; then
  python3 gpu/attention/decode_auto_table.py "${FILES[@]}" --best-of-all \
    --out "$D/decode_auto_table.inc" >> "$SUMMARY" 2>&1
  python3 gpu/attention/split_table.py "${FILES[@]}" > "$D/split_table.txt" 2>&1
fi
[[ -s $D/perf_kernels.h5 ]] && python3 gpu/attention/stage_table.py "$D/perf_kernels.h5" > "$D/table.txt" 2>&1

echo "== decode-kernels stage: $(cat "$D/device.txt")"
echo "== steps"
cat "$SUMMARY"
echo "== tests"
grep -hE "^\[  PASSED|^\[  FAILED|tests ran" "$D/smoke.log" "$D/tests.log" | tail -12
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$D/memcheck.log" "$D/racecheck.log"
for f in "$D"/ncu_*.txt; do
  [[ -f $f ]] || continue
  echo "== $(basename "$f" .txt)"
  grep -E "DRAM Throughput|L2 Cache Throughput|L2 Hit Rate|Achieved Occupancy|Registers Per|Duration" "$f" | head -7
done
echo "== table"
cat "$D/table.txt" 2>/dev/null
echo "== split table"
cat "$D/split_table.txt" 2>/dev/null
