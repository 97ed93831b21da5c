#!/usr/bin/env bash
# h100_stage.sh: the decode-kernels GPU stage, one H100, at most 300 s (each step has its
# own time limit, their sum is 290 s; a fourth ncu run only when the stage is on time).
# Run from the repository root:
#
#   OUT=/some/dir gpu/attention/h100_stage.sh BIN_DIR
#
# BIN_DIR holds gpu_tests and kvlab (built with -DCMAKE_CUDA_ARCHITECTURES=90, static Boost).
# Needs compute-sanitizer, ncu and python3 with h5py (all on the H100 machine). Assumes no
# other stage ran before it. Writes $OUT/kernels/:
#   device.txt                nvidia-smi line
#   smoke.log                 DecodeV6 smoke tests (first, in their own process: a fault of
#                             the new kernel cannot take the other suites with it)
#   tests.log                 every decode test suite, all versions (Curated, Small, Edge,
#                             Registry, BadInput, V4, V6), and the decode step (whose default
#                             attention version is the highest id that supports the cache: v6)
#   memcheck.log racecheck.log  compute-sanitizer on small cases (v6-focused + Small bf16)
#   perf_v45.h5 perf_v6.h5    experiments/configs/perf_kernels.ini: v4+v5, then v6+auto
#   sweep_*.log               their logs
#   ncu_*.txt                 ncu (SpeedOfLight, Occupancy, WarpStateStats, memory) of v6
#                             on 64 x 8k BF16, 1 x 32k BF16, 64 x 8k FP8 (and v4 on 64 x 8k
#                             when the stage is on time)
#   decode_auto_table.inc     the auto calibration table regenerated from these files
#   table.txt                 the compact table (also printed last)
#   summary.txt               one line per step: name, exit code, seconds
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

# 1. v6 smoke (its own process).
step smoke 20 "$BIN/gpu_tests" --gtest_filter='DecodeV6.RegistryHasTheStreamKVersion:DecodeV6.SmokeEveryFormat'
V6_OK=$?

# 2. The decode suites over every registered version.
step tests 45 "$BIN/gpu_tests" \
  --gtest_filter='Curated/*:Small/*:DecodeEdge.*:DecodeRegistry.*:DecodeBadInput.*:DecodeV4.*:DecodeV6.*:StepEngine.EveryVariantMatchesTheReference'

# 3. compute-sanitizer on small cases.
step memcheck 35 compute-sanitizer --tool memcheck --print-limit 10 --error-exitcode 1 "$BIN/gpu_tests" \
  --gtest_filter='DecodeV6.SmokeEveryFormat:DecodeV6.FewerTilesThanBlocks:DecodeV6.BadLengthsAndPages*:Small/DecodeSmall.*/bf16_nhd'
step racecheck 25 compute-sanitizer --tool racecheck --print-limit 10 --error-exitcode 1 "$BIN/gpu_tests" \
  --gtest_filter='DecodeV6.FewerTilesThanBlocks:Small/DecodeSmall.*/fp8_e4m3_hnd:Small/DecodeSmall.*/bf16_split_x'

# 4. Timing: v4 + v5 first (their rows survive a v6 fault), then v6 + auto.
CFG=experiments/configs/perf_kernels.ini
step sweep_v45 60 "$BIN/kvlab" sweep "$CFG" --axis version=v4_mma_decode,v5_mma_decode_2stage \
  --out "$D/perf_v45.h5" --progress plain
NEW=v6_stream_k_decode,auto
[[ $V6_OK -ne 0 ]] && NEW=auto  # the smoke failed: time auto's picks only
step sweep_v6 60 "$BIN/kvlab" sweep "$CFG" --axis version=$NEW --out "$D/perf_v6.h5" --progress plain

# 5. ncu (clocks as they are; a few sections), one launch of each kernel named.
NCU_SECTIONS=(--section SpeedOfLight --section Occupancy --section WarpStateStats
  --section MemoryWorkloadAnalysis --section LaunchStats)
ncu_point() {  # ncu_point NAME KERNEL_REGEX STUDY VERSION FORMAT BATCH CONTEXT
  # `kvlab validate`: the point's one validation launch is the profiled one (no timing loop).
  step "ncu_$1" 15 ncu --clock-control none --target-processes all --kernel-name "regex:$2" \
    --launch-count 1 "${NCU_SECTIONS[@]}" --page details \
    "$BIN/kvlab" validate "$CFG" --only "$3" --axis version="$4" --axis kv_format="$5" \
    --axis batch="$6" --axis context="$7" --progress none
  mv -f "$D/ncu_$1.log" "$D/ncu_$1.txt"
}
if [[ $V6_OK -eq 0 ]]; then
  ncu_point v6_64x8k_bf16 v6_decode_kernel K2 v6_stream_k_decode bf16 64 8192
  ncu_point v6_1x32k_bf16 v6_decode_kernel K3 v6_stream_k_decode bf16 1 32768
  ncu_point v6_64x8k_fp8 v6_decode_kernel K4 v6_stream_k_decode fp8_e4m3 64 8192
fi
# v4 on the same shape for comparison, when the stage is on time.
(($(date +%s) - START < 255)) && ncu_point v4_64x8k_bf16 v4_decode_kernel K2 v4_mma_decode bf16 64 8192

# 6. The auto table from this run, and the table.
FILES=()
for f in "$D/perf_v45.h5" "$D/perf_v6.h5"; do [[ -s $f ]] && FILES+=("$f"); done
if [[ ${#FILES[@]} -gt 0 ]]; then
  python3 gpu/attention/decode_auto_table.py "${FILES[@]}" --out "$D/decode_auto_table.inc" >> "$SUMMARY" 2>&1
  python3 gpu/attention/stage_table.py "${FILES[@]}" > "$D/table.txt" 2>&1
fi

echo "== decode-kernels stage: $(cat "$D/device.txt")"
echo "== steps"
cat "$SUMMARY"
echo "== tests"
grep -hE "^\[  PASSED|^\[  FAILED|tests ran" "$D/smoke.log" "$D/tests.log" | tail -12
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$D/memcheck.log" "$D/racecheck.log"
for f in "$D"/ncu_*.txt; do
  [[ -f $f ]] || continue
  echo "== $(basename "$f" .txt)"
  grep -E "DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Duration|No Eligible|Issued Warp" "$f" | head -9
done
echo "== table"
cat "$D/table.txt" 2>/dev/null
