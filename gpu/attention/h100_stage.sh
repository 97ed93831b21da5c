#!/usr/bin/env bash
# h100_stage.sh: the decode-kernels GPU stage, one H100, at most 120 s (each step has its own
# time limit; their sum is 115 s). Run from the repository root:
#
#   OUT=/some/dir gpu/attention/h100_stage.sh BIN_DIR
#
# BIN_DIR holds gpu_tests and kvlab (built with -DCMAKE_CUDA_ARCHITECTURES=90, static Boost).
# Needs ncu and python3 with h5py (both on the H100 machine). Assumes no other stage ran
# before it. This run measures the KV split of v4 / v5 per shape (no kernel changed since
# the previous run, which passed every decode test, memcheck and racecheck): it writes
# $OUT/kernels/:
#   device.txt              nvidia-smi line
#   tests.log               the registry, `version = auto` and the decode-step executor
#                           (whose attention now defaults to auto) against the reference
#   splits.h5 sweep.log     experiments/configs/decode_splits.ini: v4 and v5 at forced splits
#                           on the fair table's grid, auto with the compiled-in table
#   ncu_*.txt               ncu (SpeedOfLight, Occupancy, WarpStateStats, memory) of v4 at
#                           256 x 512 and v5 at 16 x 2048 BF16 (mid shapes, the largest gaps)
#   decode_auto_table.inc   the auto table regenerated from splits.h5
#   split_table.txt         per shape: plan vs best forced split per version, auto (printed)
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

# 1. Tests of what changed: auto, the registry, the executor's default attention.
step tests 30 "$BIN/gpu_tests" \
  --gtest_filter='DecodeRegistry.*:DecodeV6.AutoPicksASupportedVersion:DecodeAuto*:StepEngine.EveryVariantMatchesTheReference:StepEngine.SyntheticContextAndTimingPath'

# 2. The split sweep (about 350 points: ~30 shapes set up once each).
CFG=experiments/configs/decode_splits.ini
step sweep 70 "$BIN/kvlab" sweep "$CFG" --out "$D/splits.h5" --progress plain

# 3. ncu on two mid shapes, one launch of the decode kernel each.
NCU_SECTIONS=(--section SpeedOfLight --section Occupancy --section WarpStateStats
  --section MemoryWorkloadAnalysis --section LaunchStats)
ncu_point() {  # ncu_point NAME KERNEL_REGEX STUDY VERSION BATCH CONTEXT
  step "ncu_$1" 10 ncu --clock-control none --target-processes all --kernel-name "regex:$2" \
    --launch-count 1 "${NCU_SECTIONS[@]}" --page details \
    "$BIN/kvlab" validate "$CFG" --only "$3" --axis version="$4" --axis num_splits=0 \
    --axis batch="$5" --axis context="$6" --progress none
  mv -f "$D/ncu_$1.log" "$D/ncu_$1.txt"
}
ncu_point v4_256x512_bf16 v4_decode_kernel bf16_grid v4_mma_decode 256 512
(($(date +%s) - START < 105)) && ncu_point v5_16x2048_bf16 v4_decode_kernel bf16_grid v5_mma_decode_2stage 16 2048

# 4. The auto table from this run, and the split table.
if [[ -s $D/splits.h5 ]]; then
  python3 gpu/attention/decode_auto_table.py "$D/splits.h5" --out "$D/decode_auto_table.inc" >> "$SUMMARY" 2>&1
  python3 gpu/attention/split_table.py "$D/splits.h5" > "$D/split_table.txt" 2>&1
fi

echo "== decode-kernels stage: $(cat "$D/device.txt")"
echo "== steps"
cat "$SUMMARY"
echo "== tests"
grep -hE "^\[  PASSED|^\[  FAILED|tests ran" "$D/tests.log" | tail -8
for f in "$D"/ncu_*.txt; do
  [[ -f $f ]] || continue
  echo "== $(basename "$f" .txt)"
  grep -E "DRAM Throughput|Achieved Occupancy|Registers Per|Duration|Waves Per SM" "$f" | head -6
done
echo "== split table"
cat "$D/split_table.txt" 2>/dev/null
