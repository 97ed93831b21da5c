#!/usr/bin/env bash
# Session 14 call 8: the two tests of the whole gpu_tests binary that call 7's 380 s limit cut
# (v16's shared-tile tests), on the same final binaries.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
timeout 90 $T --gtest_filter='DecodeV16/*.SharedTiles*' > $OUT/v16_shared.log 2>&1; echo "v16_shared rc=$? at $(($(date +%s)-START)) s"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|OK \]" $OUT/v16_shared.log | tail -4
