#!/usr/bin/env bash
# Session 11 call 5: is FP8's 16 x 8k stream limited by its 2 KB page runs? v10 and v13 at
# block sizes 16-128 (HND runs of 2-16 KB per KV head), NHD and HND, sequential pages at block
# 16, splits 1 and 2; BF16 at block 16 / 128 as the control.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
K=$B/bin/kvlab
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
V=--axis\ version=v10_mma_decode_tma_swizzle,v13_mma_decode_eight_warps
for r in 1 2; do
  $K sweep experiments/configs/decode_v10_ab.ini --only fp8 --axis batch=16 --axis context=8192 $V --axis num_splits=1,2 --axis block_size=16,32,64,128 --out $W/pages_$r.h5 --progress none > $W/pages_$r.log 2>&1
  $K sweep experiments/configs/decode_v10_ab.ini --only fp8 --axis batch=16 --axis context=8192 $V --axis num_splits=1,2 --axis page_order=sequential --out $W/seq_$r.h5 --progress none > $W/seq_$r.log 2>&1
  $K sweep experiments/configs/decode_v10_ab.ini --only bf16 --axis batch=16 --axis context=8192 --axis version=v10_mma_decode_tma_swizzle --axis num_splits=1 --axis block_size=16,128 --out $W/bf16pages_$r.h5 --progress none > $W/bf16pages_$r.log 2>&1
  echo "run $r at $(($(date +%s)-START)) s"
done
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT
