#!/usr/bin/env bash
# Session 12 call 1: v14 (a block per sequence x 8 KV heads, producer warp) against v10 and
# v13 in the same sweeps; v14's forced splits at FP8 16 x 8k; v14's GPU suites and the
# registry-wide decode suites; the sanitizers on v14; its planted bugs; ncu at FP8 16 x 8k.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
[ -f .device-carry/mut.tar.xz ] && python3 -c "import tarfile; tarfile.open('.device-carry/mut.tar.xz').extractall('$B')"
K=$B/bin/kvlab; T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
finish() { cd $OUT && tar cJf call.tar.xz w && rm -rf w; ls -la $OUT; }
timeout 120 $T --gtest_filter='DecodeV14/*' > $W/v14_tests.log 2>&1; echo "v14 tests rc=$? at $(($(date +%s)-START)) s"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|SKIPPED \] [0-9]" $W/v14_tests.log | tail -15
V=--axis\ version=v10_mma_decode_tma_swizzle,v13_mma_decode_eight_warps,v14_mma_decode_page_heads
timeout 100 $K sweep experiments/configs/decode_v10_ab.ini --only fp8 --axis batch=16 --axis context=8192 --axis version=v14_mma_decode_page_heads --axis num_splits=0,4,8,16 --out $W/splits_fp8_v14.h5 --progress none > $W/splits_fp8_v14.log 2>&1; echo "v14 splits rc=$? at $(($(date +%s)-START)) s"
for r in 1 2; do
  timeout 150 $K sweep experiments/configs/decode_v10_ab.ini $V --out $W/ab_$r.h5 --progress none > $W/ab_$r.log 2>&1
  echo "ab $r rc=$? at $(($(date +%s)-START)) s"
done
timeout 150 $T --gtest_filter='DecodeRegistry.*:Small/DecodeSmall.*:Curated/DecodeCurated.*:DecodeEdge.*:DecodeBadInput.*:DecodeV13/*.EveryGeometry*:DecodeV10/*.EveryGeometry*' > $W/gpu_tests.log 2>&1; echo "gpu_tests rc=$? at $(($(date +%s)-START)) s"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" $W/gpu_tests.log | tail -12; grep -c "^\[  SKIPPED \]" $W/gpu_tests.log
F='DecodeV14/*.BadTable*:DecodeV14/*.KvHeadCounts*:Small/DecodeSmall.*/fp8_e4m3_nhd:Small/DecodeSmall.*/bf16_hnd'
timeout 100 compute-sanitizer --tool memcheck $T --gtest_filter="$F" > $W/memcheck.log 2>&1; echo "memcheck rc=$? at $(($(date +%s)-START)) s"; grep -E "PASSED|FAILED|SUMMARY" $W/memcheck.log | tail -3
timeout 80 compute-sanitizer --tool racecheck $T --gtest_filter='DecodeV14/*.BadTable*:Small/DecodeSmall.*/fp8_e4m3_nhd' > $W/racecheck.log 2>&1; echo "racecheck rc=$? at $(($(date +%s)-START)) s"; grep -E "PASSED|FAILED|SUMMARY" $W/racecheck.log | tail -3
timeout 60 compute-sanitizer --tool synccheck $T --gtest_filter='DecodeV14/*.BadTable*:Small/DecodeSmall.*/fp8_e4m3_nhd' > $W/synccheck.log 2>&1; echo "synccheck rc=$? at $(($(date +%s)-START)) s"; grep -E "PASSED|FAILED|SUMMARY" $W/synccheck.log | tail -3
if [ -d $B/mut ]; then timeout 120 python3 tests/mutation/run_mutants.py --run-packed $B/mut --bin $B/bin --logs $W/mut --json $W/mut/result.json > $W/mut.log 2>&1; echo "mutants rc=$? at $(($(date +%s)-START)) s"; tail -5 $W/mut.log; fi
NC=$W/ncu; mkdir -p $NC
METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_requests.sum,lts__t_sector_hit_rate.pct,launch__registers_per_thread,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active,sm__inst_issued.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct
ncu_pt() {  # name version layout splits
  timeout 60 ncu --clock-control none --metrics $METRICS --kernel-name "regex:_decode_kernel|_merge_kernel" --launch-count 2 \
    $K validate experiments/configs/decode_v10_ab.ini --only fp8 --axis version=$2 --axis layout=$3 --axis batch=16 --axis context=8192 --axis num_splits=$4 --progress none > $NC/$1.txt 2>&1
}
ncu_pt v14_fp8_nhd_plan v14_mma_decode_page_heads nhd 0
ncu_pt v14_fp8_hnd_plan v14_mma_decode_page_heads hnd 0
echo "ncu done at $(($(date +%s)-START)) s"
finish
