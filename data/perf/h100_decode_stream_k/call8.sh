#!/usr/bin/env bash
# Session 13 call 8: where call 7's racecheck hazards (two bulk copies of NVFP4 block scales writing
# the same shared bytes) come from: racecheck on v15's stream-K test alone, on v15's NVFP4 suite and
# on v10's NVFP4 suite (the same block body without segments), final binaries (main 698fe67).
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
t() { echo "$1 rc=$2 at $(($(date +%s)-START)) s"; }
rc() { timeout $2 compute-sanitizer --tool racecheck $T --gtest_filter="$3" > $W/racecheck_$1.log 2>&1; t $1 $?; grep -E "PASSED|FAILED|SUMMARY" $W/racecheck_$1.log | tail -2; }
rc v15_streamk 120 'DecodeV15/*.StreamKRanges*'
rc v10_nvfp4 120 'DecodeV10/*.Nvfp4*'
rc v15_nvfp4 120 'DecodeV15/*.Nvfp4*'
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT
