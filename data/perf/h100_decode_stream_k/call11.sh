#!/usr/bin/env bash
# Session 13 call 11: after v6 / v15 launch their merge through stream_k_launch_merge and v15's
# reasons go through v4_family_reason (host code only; their kernels' SASS unchanged): the v6 and
# v15 suites and the registry test.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
timeout 150 $T --gtest_filter='DecodeV15/*:DecodeV6.*:DecodeRegistry.*:DecodeBadInput.*' > $W/suites.log 2>&1; echo "suites rc=$? at $(($(date +%s)-START)) s"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|SKIPPED \] [0-9]" $W/suites.log | tail -6
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT
