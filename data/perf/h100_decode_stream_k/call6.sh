#!/usr/bin/env bash
# Session 13 call 6: the fair run's decode-step sweep (cut by the stage's budget at 133 of 182
# points in call 5) resumed with the same binaries (main 698fe67), then the whole gpu_tests
# binary on them, then memcheck over the decode suites of v10 and v15.
set -u
START=$(date +%s)
B=$PWD/.device-carry/b; mkdir -p $B
python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
K=$B/bin/kvlab; T=$B/bin/gpu_tests
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt
W=$OUT/w; mkdir -p $W
t() { echo "$1 rc=$2 at $(($(date +%s)-START)) s"; }
cp .device-carry/step_sweep_cut.h5 $W/step_sweep.h5
timeout 150 $K sweep experiments/configs/decode_step.ini --resume --out $W/step_sweep.h5 --progress none > $W/step_sweep_resume.log 2>&1; t step_resume $?
tail -4 $W/step_sweep_resume.log
timeout 300 $T > $W/gpu_tests_all.log 2>&1; t gpu_tests_all $?
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran" $W/gpu_tests_all.log | tail -8; grep -c "^\[  SKIPPED \]" $W/gpu_tests_all.log
timeout 100 compute-sanitizer --tool memcheck $T --gtest_filter='DecodeV15/*.Fp8*:DecodeV15/*.ForcedSplits*:DecodeV10/*.BadTable*:DecodeV10/*.ForcedSplits*' > $W/memcheck.log 2>&1; t memcheck $?; grep -E "PASSED|FAILED|SUMMARY" $W/memcheck.log | tail -3
xz -9 $W/gpu_tests_all.log
cd $OUT && tar cJf call.tar.xz w && rm -rf w && ls -la $OUT
