#!/usr/bin/env bash
# Session 14 call 4: the side-by-side calibration of version auto's table with every candidate
# (experiments/configs/decode_auto_calibration.ini: auto against v10 at its plan and forced
# splits, v14, and on NVFP4 v10 at its plan and forced splits and v5), twice, on the binaries of
# session 14 call 3 (v4 / v5 / v7 / v14 trigger the merge's launch at the end of each block's
# stream: TUNING.md step 38).
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/all.tar.xz').extractall('$B')"
K=$B/bin/kvlab
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
t() { echo "$1 rc=$2 at $(($(date +%s)-START)) s"; }
for r in 1 2; do
  timeout 280 $K sweep experiments/configs/decode_auto_calibration.ini --out $W/cal_$r.h5 --progress none > $W/cal_$r.log 2>&1; t cal_$r $?
  tail -4 $W/cal_$r.log
done
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT
