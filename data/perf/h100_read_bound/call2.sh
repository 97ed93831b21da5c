#!/usr/bin/env bash
# Session 18 call 2: the GPU tests and compute-sanitizer on the final kernels (main 9f2e7ab's
# gpu_tests; no kernel changed since): the whole gpu_tests binary, then memcheck and racecheck on
# the small decode cases over every version and the v10 / v11 bad-table and FP8 cases
# (gpu/attention/h100_stage.sh's filters).
set -u
B=$PWD/.device-carry/b; mkdir -p $B
[[ -x $B/bin/gpu_tests ]] || python3 -c "import tarfile; tarfile.open('.device-carry/bin.tar.xz').extractall('$B')"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
R=$OUT/run; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader | tee $R/device.txt
T0=$(date +%s)
timeout -k 10 390 $B/bin/gpu_tests --gtest_brief=1 > $R/gpu_tests.log 2>&1
echo "gpu_tests rc=$? $(( $(date +%s) - T0 )) s"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED  \]" $R/gpu_tests.log | head -20; tail -3 $R/gpu_tests.log
T0=$(date +%s)
timeout -k 10 100 compute-sanitizer --tool memcheck --print-limit 10 --error-exitcode 1 $B/bin/gpu_tests \
  --gtest_filter='Small/DecodeSmall.*/bf16_hnd:Small/DecodeSmall.*/fp16_hnd:Small/DecodeSmall.*/fp8_e4m3_hnd:Small/DecodeSmall.*/bf16_nhd:DecodeV11/*.ClusterMergeBadTable*:DecodeV10/*.BadTable*:DecodeV10/*.Fp8*' > $R/memcheck.log 2>&1
echo "memcheck rc=$? $(( $(date +%s) - T0 )) s"; grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) " $R/memcheck.log | head
T0=$(date +%s)
timeout -k 10 75 compute-sanitizer --tool racecheck --print-limit 10 --error-exitcode 1 $B/bin/gpu_tests \
  --gtest_filter='Small/DecodeSmall.*/bf16_hnd:Small/DecodeSmall.*/bf16_nhd:Small/DecodeSmall.*/fp8_e4m3_hnd:DecodeV11/*.ClusterMergeBadTable*:DecodeV10/*.BadTable*' > $R/racecheck.log 2>&1
echo "racecheck rc=$? $(( $(date +%s) - T0 )) s"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) " $R/racecheck.log | head
cd $OUT && tar cJf call.tar.xz run && rm -rf run && ls -la $OUT
