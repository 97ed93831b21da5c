#!/usr/bin/env bash
# Session 13 call 9: after v15's segments keep their stage barriers (initialised once, phases
# going on across segments) instead of invalidating and re-initialising them: racecheck where
# call 7-8 found hazards (v15's NVFP4 suite and stream-K test), synccheck and memcheck on v15,
# v15's suites, and v11's / v12's suites (their SASS moved: v12 register names only, v11 the
# order of some instructions).
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
t() { echo "$1 rc=$2 at $(($(date +%s)-START)) s"; }
san() { timeout $3 compute-sanitizer --tool $2 $4 $T --gtest_filter="$5" > $W/$1.log 2>&1; t $1 $?; grep -E "PASSED|FAILED|SUMMARY" $W/$1.log | tail -2; }
san racecheck_v15_nvfp4 racecheck 120 "" 'DecodeV15/*.Nvfp4*'
san racecheck_v15_streamk racecheck 120 "" 'DecodeV15/*.StreamKRanges*:DecodeV15/*.BadTable*:DecodeV15/*.KvHeadCounts*'
san synccheck_v15 synccheck 120 "--num-cuda-barriers 65536" 'DecodeV15/*.StreamKRanges*:DecodeV15/*.Nvfp4*'
san memcheck_v15 memcheck 100 "" 'DecodeV15/*.StreamKRanges*:DecodeV15/*.Nvfp4*'
timeout 150 $T --gtest_filter='DecodeV15/*:DecodeV11/*:DecodeV12/*:DecodeV10/*.ForcedSplits*:DecodeRegistry.*' > $W/suites.log 2>&1; t suites $?
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]" $W/suites.log | tail -8
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT
