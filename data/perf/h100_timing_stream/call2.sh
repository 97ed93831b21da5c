#!/usr/bin/env bash
# Session 15 call 2: the stream drift diagnostic (.final/stream_drift.cu), the second
# side-by-side calibration run of version auto's table, then the bulk-copy suites call 1 left
# (DecodeV8/9/13/14, whose peer comparisons use the new helper).
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
K=$B/bin/kvlab; T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
t() { echo "$1 rc=$2 at $(($(date +%s)-START)) s"; }
timeout 90 $B/bin/stream_drift > $W/stream_drift.log 2>&1; t stream_drift $?
cat $W/stream_drift.log
timeout 300 $K sweep experiments/configs/decode_auto_calibration.ini --out $W/cal_2.h5 --progress none > $W/cal_2.log 2>&1; t cal_2 $?
tail -3 $W/cal_2.log
left=$((590 - $(date +%s) + START))
timeout $left $T --gtest_filter='DecodeV8/*:DecodeV9/*:DecodeV13/*:DecodeV14/*' > $W/gpu_tests.log 2>&1; t gpu_tests $?
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran" $W/gpu_tests.log | tail -6
xz -9 $W/gpu_tests.log
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT
