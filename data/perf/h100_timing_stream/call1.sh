#!/usr/bin/env bash
# Session 15 call 1 (main 21ba1a5 + the bitwise-comparison helper in the GPU tests):
#  1. the stream-kind diagnostic: gpu/bench's cold 1 / 4 / 16 MiB read (the flush kernel, b8)
#     and the 4 MiB memcpy on five stream kinds, rounds interleaved (.final/stream_kind.cu);
#  2. the two-timer cross-check twice (kvlab sweep timer_check.ini, decode_peers.py crosscheck --diagnose);
#  3. the GPU test suites the helper and 21ba1a5's refactor touch: DecodeV10/11/12/15/16,
#     DecodeEdge.RepeatedRunsAreBitwiseIdentical, BenchHarness.EventsBracketTheKernel;
#  4. one side-by-side calibration run of version auto's table (decode_auto_calibration.ini).
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
K=$B/bin/kvlab; T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
t() { echo "$1 rc=$2 at $(($(date +%s)-START)) s"; }
timeout 90 $B/bin/stream_kind > $W/stream_kind.log 2>&1; t stream_kind $?
for r in 1 2; do
  timeout 40 $K sweep experiments/configs/timer_check.ini --out $W/timer_check_$r.h5 --progress none > $W/crosscheck_$r.log 2>&1; t timer_check_$r $?
  timeout 60 python3 experiments/peers/decode_peers.py crosscheck --diagnose --kvlab-h5 $W/timer_check_$r.h5 --out $W/crosscheck_$r.h5 >> $W/crosscheck_$r.log 2>&1; t crosscheck_$r $?
  grep -E "^\[crosscheck\]" $W/crosscheck_$r.log | cut -c1-260
done
timeout 200 $T --gtest_filter='DecodeV10/*:DecodeV11/*:DecodeV12/*:DecodeV15/*:DecodeV16/*:DecodeEdge.RepeatedRunsAreBitwiseIdentical:BenchHarness.EventsBracketTheKernel' > $W/gpu_tests.log 2>&1; t gpu_tests $?
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran|\[stamps\]" $W/gpu_tests.log | tail -12
left=$((590 - $(date +%s) + START))
timeout $left $K sweep experiments/configs/decode_auto_calibration.ini --out $W/cal_1.h5 --progress none > $W/cal_1.log 2>&1; t cal_1 $?
tail -3 $W/cal_1.log
grep "\[stream_kind\]" $W/stream_kind.log | awk '{k=$4" "$5" "$6; s[k]=s[k]" "$9} END{for(x in s) print x":"s[x]}' | sort
xz -9 $W/gpu_tests.log
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT
