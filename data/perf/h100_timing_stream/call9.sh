#!/usr/bin/env bash
# Session 15 call 9: the final main's gpu_tests binary whole (the kernels are 9910ab5's; the
# harness's timing stream and the tests' helper are new), then compute-sanitizer memcheck on the
# harness's stream test (a graph capture that throws) and the small decode cases.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
t() { echo "$1 rc=$2 at $(($(date +%s)-START)) s"; }
timeout 440 $T > $OUT/gpu_tests_all.log 2>&1; t gpu_tests_all $?
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran" $OUT/gpu_tests_all.log | tail -8
left=$((580 - $(date +%s) + START)); [ $left -gt 90 ] && left=90
[ $left -gt 15 ] && { timeout $left compute-sanitizer --tool memcheck $T --gtest_filter='BenchHarness.TimesOnTheProcessTimingStream:Small/DecodeSmall.*' > $OUT/memcheck.log 2>&1; t memcheck $?; grep -E "PASSED|FAILED|SUMMARY" $OUT/memcheck.log | tail -3; }
xz -9 $OUT/gpu_tests_all.log
