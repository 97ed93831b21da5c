#!/usr/bin/env bash
# ncu_compare_stage.sh: Nsight Compute counters of kvlab's decode and of cuDNN SDPA on the same
# BF16 shapes, one call each, cold caches by ncu's own cache control for both (the measured
# reason behind a row of data/perf/targets.md where kvlab is behind), plus kvlab's NVFP4 decode
# at 64 x 8k (is it memory- or issue-bound?).
#
#   OUT=out experiments/peers/ncu_compare_stage.sh BIN_DIR      # <= 170 s on an H100
#   KVLAB_NCU_HND="v8_mma_decode_bulk_page v10_..." ...          # HND versions at 64 x 8k
#   NCU_SET=page_order OUT=out experiments/peers/ncu_compare_stage.sh BIN_DIR   # <= 200 s
#     v10 (NHD, its plan) on shuffled and on sequential page tables (experiments/configs/
#     page_order.ini, TUNING.md step 19) at 16 x 8k, 16 x 32k and 64 x 8k, with cuDNN on the same
#     shapes: what the page scatter and the per-block stream cost in counters
#   NCU_SET=fixed_cost OUT=out experiments/peers/ncu_compare_stage.sh BIN_DIR  # <= 200 s
#     version auto (NHD, its plan) on shuffled and sequential page tables at the short K1 points
#     where kvlab trails cuDNN on sequential pages too (4 x 512, 16 x 512, 16 x 2k, 64 x 512;
#     TUNING.md step 41), with cuDNN on the same shapes: how much of the gap is inside the kernels
#
# BIN_DIR holds kvlab. Needs ncu and python3 with torch (the H100 machine has both). Writes
# $OUT/ncu_compare/{device.txt, summary.txt, <side>_<shape>.txt} and prints, per file, the
# counters that the comparison reads: duration, DRAM and L2 throughput, L2 requests and sectors,
# shared-memory bank conflicts, registers, grid, achieved occupancy, issue slots busy.
# kvlab's side is `kvlab validate experiments/configs/perf.ini` on one point (version auto, or
# the named one), profiling the decode kernel and its merge (if the plan splits) of the first
# call; cuDNN's side is experiments/peers/peer_ncu.py (the third call, between
# cudaProfilerStart/Stop). ncu runs with --clock-control none (the clocks the timing runs saw).
set -u
BIN=${1:?usage: experiments/peers/ncu_compare_stage.sh BIN_DIR}
case ${NCU_SET:-} in
  ''|page_order|fixed_cost) ;;
  *) echo "ncu_compare_stage.sh: NCU_SET=$NCU_SET is not one of page_order, fixed_cost (or empty)" >&2; exit 2 ;;
esac
OUT=${OUT:-./stage_out}
D="$OUT/ncu_compare"
mkdir -p "$D"
START=$(date +%s)
SUMMARY="$D/summary.txt"
: > "$SUMMARY"
PY=${PYTHON:-python3}

step() {  # step NAME SECONDS CMD...: output to $D/NAME.txt, a line in the summary
  local name=$1 limit=$2
  shift 2
  local t0
  t0=$(date +%s)
  timeout -k 5 "$limit" "$@" > "$D/$name.txt" 2>&1
  local rc=$?
  echo "$name rc=$rc $(($(date +%s) - t0))s (stage at $(($(date +%s) - START))s)" >> "$SUMMARY"
  return $rc
}

nvidia-smi --query-gpu=name,driver_version,uuid,clocks.sm,clocks.mem --format=csv,noheader > "$D/device.txt" 2>&1

METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_requests.sum,lts__t_sectors.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,launch__registers_per_thread,launch__grid_size,launch__block_size,sm__warps_active.avg.pct_of_peak_sustained_active,sm__inst_issued.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum
NCU=(ncu --clock-control none --target-processes all --metrics "$METRICS")

kvlab_point() {  # kvlab_point NAME VERSION LAYOUT FORMAT BATCH CONTEXT
  step "kvlab_$1" 25 "${NCU[@]}" --kernel-name "regex:_decode_kernel|_merge_kernel" --launch-count 2 \
    "$BIN/kvlab" validate experiments/configs/perf.ini --only K2_large --axis "version=$2" \
    --axis "layout=$3" --axis "kv_format=$4" --axis "batch=$5" --axis "context=$6" --progress none
}
cudnn_point() {  # cudnn_point NAME BATCH CONTEXT
  step "cudnn_$1" 40 "${NCU[@]}" --profile-from-start off \
    "$PY" experiments/peers/peer_ncu.py --peer sdpa_cudnn --batch "$2" --context "$3"
}

page_point() {  # page_point NAME ORDER BATCH CONTEXT [VERSION STUDY]: NHD, BF16, its plan, the page order
  #                given (default v10 in page_order.ini's study large)
  step "kvlab_$1" 25 "${NCU[@]}" --kernel-name "regex:_decode_kernel|_merge_kernel" --launch-count 2 \
    "$BIN/kvlab" validate experiments/configs/page_order.ini --only "${6:-large}" \
    --axis "version=${5:-v10_mma_decode_tma_swizzle}" --axis layout=nhd --axis "page_order=$2" \
    --axis "batch=$3" --axis "context=$4" --progress none
}
if [[ ${NCU_SET:-} == page_order ]]; then
  for shape in "16 8192" "16 32768" "64 8192"; do
    set -- $shape
    name="${1}x$2"
    (($(date +%s) - START < 170)) || break
    page_point "v10_shuffled_$name" shuffled "$1" "$2"
    page_point "v10_sequential_$name" sequential "$1" "$2"
    cudnn_point "$name" "$1" "$2"
  done
fi
if [[ ${NCU_SET:-} == fixed_cost ]]; then
  for shape in "4 512 k1_behind" "16 512 k1_behind" "16 2048 large" "64 512 k1_behind"; do
    set -- $shape
    name="${1}x$2"
    (($(date +%s) - START < 170)) || break
    page_point "auto_shuffled_$name" shuffled "$1" "$2" auto "$3"
    page_point "auto_sequential_$name" sequential "$1" "$2" auto "$3"
    cudnn_point "$name" "$1" "$2"
  done
fi
# The shapes: the flagship, a long single sequence, a short batch, a long batch-16, the fixed
# cost's shape.
[[ -n ${NCU_SET:-} ]] ||
for shape in "64 8192" "1 32768" "16 512" "16 32768" "1 512"; do
  set -- $shape
  name="${1}x$2"
  (($(date +%s) - START < 130)) || break
  kvlab_point "auto_nhd_$name" auto nhd bf16 "$1" "$2"
  cudnn_point "$name" "$1" "$2"
done
# The HND versions the auto table may not pick yet (KVLAB_NCU_HND: space-separated versions).
[[ -n ${NCU_SET:-} ]] ||
for v in ${KVLAB_NCU_HND:-v8_mma_decode_bulk_page}; do
  (($(date +%s) - START < 140)) && kvlab_point "${v%%_*}_hnd_64x8192" "$v" hnd bf16 64 8192
done
[[ -z ${NCU_SET:-} ]] && (($(date +%s) - START < 150)) && step kvlab_nvfp4_v5_64x8192 25 ncu --clock-control none --target-processes all \
  --kernel-name "regex:_decode_kernel" --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
  --section WarpStateStats --section InstructionStats --section Occupancy \
  "$BIN/kvlab" validate experiments/configs/perf.ini --only K2_large --axis version=v5_mma_decode_2stage \
  --axis layout=nhd --axis kv_format=nvfp4 --axis batch=64 --axis context=8192 --progress none

echo "== ncu compare stage: $(cat "$D/device.txt")"
cat "$SUMMARY"
for f in "$D"/kvlab_*.txt "$D"/cudnn_*.txt; do
  [[ -f $f ]] || continue
  echo "== $(basename "$f" .txt)"
  grep -E "^  [a-zA-Z_].*\(|gpu__time|dram__|lts__|l1tex__data|launch__|sm__warps|sm__inst|smsp__inst|Issue Slots Busy|Compute \(SM\) Throughput|Memory Throughput|No Eligible|Stall|Achieved Occupancy|Executed Ipc" "$f" | head -40
done
exit 0
