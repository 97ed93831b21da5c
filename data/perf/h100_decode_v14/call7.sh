#!/usr/bin/env bash
# Session 12 call 7: ncu's memory-workload, warp-state and scheduler sections at 16 x 8192 NHD
# (FP8: v14 at its plan, v10 at 2 splits, v13 at 1 split on pages of 16 and of 32; BF16: v10 at
# 1 split), one launch each: why FP8 decode reads ~21 GB/s per SM where BF16 reads ~23.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
K=$B/bin/kvlab
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
prof() {  # name section version splits block
  timeout 60 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    --kernel-name "regex:_decode_kernel" --launch-count 1 \
    $K validate experiments/configs/decode_v10_ab.ini --only $2 --axis version=$3 --axis layout=nhd --axis batch=16 --axis context=8192 --axis num_splits=$4 --axis block_size=$5 --progress none > $W/$1.txt 2>&1
  echo "$1 rc=$? at $(($(date +%s)-START)) s"
}
prof fp8_v14_plan_b16 fp8 v14_mma_decode_page_heads 0 16
prof fp8_v10_s2_b16 fp8 v10_mma_decode_tma_swizzle 2 16
prof fp8_v13_s1_b16 fp8 v13_mma_decode_eight_warps 1 16
prof fp8_v13_s1_b32 fp8 v13_mma_decode_eight_warps 1 32
prof bf16_v10_s1_b16 bf16 v10_mma_decode_tma_swizzle 1 16
cd $OUT && tar cJf call.tar.xz w && rm -rf w; ls -la $OUT
