#!/usr/bin/env bash
# Session 14 call 7: the final kernels (main 9910ab5's binaries, the fair run's; later commits
# changed data and documents only): the whole gpu_tests binary, then compute-sanitizer memcheck
# on the decode versions' small cases and the split merges' suites, racecheck on every version's small cases (v4 / v5 / v7 /
# v14's merge trigger moved) and v16's shared-tile tests.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
t() { echo "$1 rc=$2 at $(($(date +%s)-START)) s"; }
timeout 380 $T > $W/gpu_tests_all.log 2>&1; t gpu_tests_all $?
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran" $W/gpu_tests_all.log | tail -8
san() { local left=$((585 - $(date +%s) + START)); [ $left -lt 20 ] && { echo "$1 not started"; return; }
  [ $3 -lt $left ] && left=$3
  timeout $left compute-sanitizer --tool $2 $T --gtest_filter="$4" > $W/$1.log 2>&1; t $1 $?; grep -E "PASSED|FAILED|SUMMARY" $W/$1.log | tail -2; }
san memcheck memcheck 80 'Small/DecodeSmall.*:DecodeV16/*.SharedTilesWorkspace*:DecodeV12/*.LastBlock*:DecodeV6.*'
san racecheck racecheck 100 'Small/DecodeSmall.*:DecodeV16/*.SharedTilesWorkspace*'
xz -9 $W/gpu_tests_all.log
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT
