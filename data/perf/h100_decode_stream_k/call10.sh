#!/usr/bin/env bash
# Session 13 call 10: v15 declining NVFP4: its suites and the registry test, racecheck, synccheck
# and memcheck over v15's suites (BF16, FP8; the stream-K test included).
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
t() { echo "$1 rc=$2 at $(($(date +%s)-START)) s"; }
san() { timeout $3 compute-sanitizer --tool $2 $4 $T --gtest_filter="$5" > $W/$1.log 2>&1; t $1 $?; grep -E "PASSED|FAILED|SUMMARY" $W/$1.log | tail -2; }
timeout 100 $T --gtest_filter='DecodeV15/*:DecodeRegistry.*' > $W/v15_tests.log 2>&1; t v15_tests $?
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|SKIPPED \] [0-9]" $W/v15_tests.log | tail -6
F='DecodeV15/*.StreamKRanges*:DecodeV15/*.BadTable*:DecodeV15/*.KvHeadCounts*:DecodeV15/*.Fp8*'
san racecheck_v15 racecheck 150 "" "$F"
san synccheck_v15 synccheck 100 "--num-cuda-barriers 65536" "$F"
san memcheck_v15 memcheck 100 "" "$F"
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT
