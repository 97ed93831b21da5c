#!/usr/bin/env bash
# Session 11 call 2: v13's planted bugs (packed mutants), synccheck on v13, ncu of v13 and v10
# at 16 x 8k (FP8 NHD at 1 / 2 splits, BF16 NHD at 1), and v13 against v10 at forced split 1
# / 2 on the batch-16 BF16 shapes behind cuDNN (512, 2k, 4k), alternated twice.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
python3 -c "import tarfile; tarfile.open('.device-carry/mut.tar.xz').extractall('$B')"
K=$B/bin/kvlab; T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
V=--axis\ version=v10_mma_decode_tma_swizzle,v13_mma_decode_eight_warps
for r in 1 2; do
  $K sweep experiments/configs/decode_v10_ab.ini --only bf16 --axis batch=16 --axis context=512,2048,4096,8192 $V --axis num_splits=1,2 --out $W/b16_$r.h5 --progress none > $W/b16_$r.log 2>&1
  echo "b16 $r at $(($(date +%s)-START)) s"
done
timeout 150 python3 tests/mutation/run_mutants.py --run-packed $B/mut --bin $B/bin --logs $W/mut --json $W/mut/result.json > $W/mut.log 2>&1; echo "mutants rc=$? at $(($(date +%s)-START)) s"; tail -4 $W/mut.log
timeout 60 compute-sanitizer --tool synccheck $T --gtest_filter='DecodeV13/*.BadTable*:DecodeV13/*.ForcedSplits*' > $W/synccheck.log 2>&1; echo "synccheck rc=$? at $(($(date +%s)-START)) s"; grep -E "PASSED|FAILED|SUMMARY" $W/synccheck.log | tail -3
NC=$W/ncu; mkdir -p $NC
METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_requests.sum,lts__t_sector_hit_rate.pct,launch__registers_per_thread,launch__grid_size,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,sm__warps_active.avg.pct_of_peak_sustained_active,sm__inst_issued.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__cycles_active.avg,sm__cycles_elapsed.max,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct
ncu_pt() {  # name version format layout splits
  timeout 60 ncu --clock-control none --metrics $METRICS --kernel-name "regex:_decode_kernel|_merge_kernel" --launch-count 2 \
    $K validate experiments/configs/decode_v10_ab.ini --only fp8 --axis version=$2 --axis kv_format=$3 --axis layout=$4 --axis batch=16 --axis context=8192 --axis num_splits=$5 --progress none > $NC/$1.txt 2>&1
}
ncu_pt v13_fp8_nhd_s1 v13_mma_decode_eight_warps fp8_e4m3 nhd 1
ncu_pt v10_fp8_nhd_s1 v10_mma_decode_tma_swizzle fp8_e4m3 nhd 1
ncu_pt v10_fp8_nhd_s2 v10_mma_decode_tma_swizzle fp8_e4m3 nhd 2
ncu_pt v13_fp8_nhd_s2 v13_mma_decode_eight_warps fp8_e4m3 nhd 2
ncu_pt v13_bf16_nhd_s1 v13_mma_decode_eight_warps bf16 nhd 1
ncu_pt v10_bf16_nhd_s1 v10_mma_decode_tma_swizzle bf16 nhd 1
echo "ncu done at $(($(date +%s)-START)) s"
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT
