#!/usr/bin/env bash
# Session 11 call 8: the final binaries (b32d205: auto's table by --latest-of-all) on the decode
# suites that run version auto and every version, and v13's suite.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
T=$B/bin/gpu_tests
W=$OUT/w; mkdir -p $W
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $W/device.txt
timeout 150 $T --gtest_filter='DecodeRegistry.*:DecodeV6.*:Small/DecodeSmall.*:Curated/DecodeCurated.*:DecodeEdge.*:DecodeBadInput.*:BenchKinds.*:DecodeV13/*' > $W/gpu_tests.log 2>&1; echo "gpu_tests rc=$? at $(($(date +%s)-START)) s"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran" $W/gpu_tests.log | tail -6; grep -c "^\[  SKIPPED \]" $W/gpu_tests.log
cd $OUT && tar cJf call.tar.xz w && rm -rf w
