#!/usr/bin/env bash
# Session 13 call 7: racecheck and synccheck on v15 with the final binaries (main 698fe67: v15's
# split-merge trigger at the end of each segment's stream, 0fb2514).
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
t() { echo "$1 rc=$2 at $(($(date +%s)-START)) s"; }
F='DecodeV15/*.BadTable*:DecodeV15/*.KvHeadCounts*:DecodeV15/*.StreamKRanges*'
timeout 200 compute-sanitizer --tool racecheck $T --gtest_filter="$F" > $W/racecheck.log 2>&1; t racecheck $?; grep -E "PASSED|FAILED|SUMMARY" $W/racecheck.log | tail -3
timeout 150 compute-sanitizer --tool synccheck --num-cuda-barriers 65536 $T --gtest_filter="$F" > $W/synccheck.log 2>&1; t synccheck $?; grep -E "PASSED|FAILED|SUMMARY" $W/synccheck.log | tail -3
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT
