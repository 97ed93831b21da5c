#!/usr/bin/env bash
# Session 12 call 5: the final binaries (main 05c3b71's kvlab / gpu_tests, those of the fair
# run) on the whole gpu_tests suite, then memcheck over v14's suites.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
timeout 420 $T > $W/gpu_tests_all.log 2>&1; echo "gpu_tests (all) rc=$? at $(($(date +%s)-START)) s"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|SKIPPED \] [0-9]|tests ran" $W/gpu_tests_all.log | tail -15
timeout 100 compute-sanitizer --tool memcheck $T --gtest_filter='DecodeV14/*.ForcedSplits*:DecodeV14/*.Fp8*:DecodeV14/*.Declines*' > $W/memcheck_v14.log 2>&1; echo "memcheck rc=$? at $(($(date +%s)-START)) s"; grep -E "PASSED|FAILED|SUMMARY" $W/memcheck_v14.log | tail -3
cd $OUT && tar cJf call.tar.xz w && rm -rf w; ls -la $OUT
